"""Monte Carlo averaging of tempered softmax / sigmoid probabilities, chunked over samples.

This is the numerical core of the HET head (Collier et al., CVPR 2021, Sec. 3, Eq. 4-6): for
each input row n it estimates

    softmax link:  log p̄_n = log (1/S) Σ_s softmax(z_{n,s})                 [N, K]
    sigmoid link:  log p̄_n = log (1/S) Σ_s sigmoid(z_{n,s}),
                   log(1 - p̄_n) = log (1/S) Σ_s sigmoid(-z_{n,s})           [N, K] each

with tempered logit samples

    z_{n,s} = (μ_n + P n_{n,s}) / τ,   n_{n,s} = V_n ε_R + d_n ⊙ ε_W        (noise in R^W)

where P is the identity (HET, W = K) or the class weights of the shared linear layer (HET-XL,
noise on the W = D pre-logits). The parameter-efficient variant has V_n = diag(v_n) V_hom.

Memory does not grow with S: samples are processed ``chunk_size`` at a time with a running
log-sum-exp, and the backward pass regenerates each chunk's noise from its seed and recomputes
the chunk (activation recomputation), so only ``[N, chunk, max(K, W)]`` tensors are alive at once.

Two drivers: a Python loop over chunks with noise from torch's generators (eager; a seeded evaluation
takes the counter-based bank of :func:`~harness.heads.noise.counter_bank` instead), which sums the
probabilities in linear space (:mod:`~harness.heads.linear_space`: about half the passes over a chunk,
its buffers reused chunk after chunk) and redoes in log space only the rows out of that range; and,
inside ``torch.compile``, a ``torch.while_loop`` over chunks with the counter-based noise of
:class:`~harness.heads.noise.CounterNoise` and the log-space kernels (no generator, no thread, no
Python int taken from a tensor: the graph has no break and its size does not grow with S).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.heads.linear_space import (
    Workspace,
    chunk_grad,
    chunk_sums,
    grad_coefficients,
    rows_out_of_range,
    split_chunks,
)
from harness.heads.noise import CounterNoise, NoiseFn, fill_standard_normal, seeded_noise
from harness.heads.planning import AUTO_CHUNK_ELEMENTS, FRESH_CHUNK_ELEMENTS, auto_chunk_size, plan_noise

__all__ = [
    "AUTO_CHUNK_ELEMENTS",
    "FRESH_CHUNK_ELEMENTS",
    "NoiseLayout",
    "auto_chunk_size",
    "chunk_logits",
    "monte_carlo_log_average",
    "log_average_to_logits",
    "plan_noise",
    "seeded_noise",
    "fill_standard_normal",
    "CounterNoise",
    "NoiseFn",
]

_GRAD_NAMES = ("mu", "scale", "factors", "hom", "proj")


@dataclass(frozen=True)
class NoiseLayout:
    """Static description of the noise of one forward call.

    Attributes:
        kind: ``"diagonal"``, ``"low_rank"`` or ``"parameter_efficient"``.
        link: ``"softmax"`` or ``"sigmoid"``.
        num_samples: S, Monte Carlo samples.
        chunk_size: samples processed at once.
        product_dtype: the dtype of HET-XL's projection products, the ``[N·C, W] x [W, K]`` of each chunk forward
            and its two transposes backward (the head passes the autocast dtype under ``torch.autocast``: bf16 or
            fp16); None keeps them in the inputs' dtype. The noise, the per-sample probabilities, their sums
            and the outputs stay in the inputs' dtype (fp32) either way.
    """

    kind: str
    link: str
    num_samples: int
    chunk_size: int
    product_dtype: Optional[torch.dtype] = None


def _buffer(ws: "Optional[Workspace]", name: str, shape, like: Tensor) -> Optional[Tensor]:
    return None if ws is None else ws.get(name, shape, like)


def _product(a: Tensor, b: Tensor, low: Optional[torch.dtype]) -> Tensor:
    """``a @ b``, computed in ``low`` (bf16, fp16) when given and returned in ``a``'s dtype."""
    return torch.matmul(a, b) if low is None else torch.matmul(a.to(low), b.to(low)).to(a.dtype)


def _samples(kind, eps_factors, eps_diag, mu, scale, factors, hom_factors, projection, ws=None, low=None):
    """Untempered samples ``μ + P n`` ``[N, C, K]``, plus the noise ``n`` ``[N, C, W]`` (HET-XL only)
    and the PE product ``V ε_R`` ``[N|1, C, W]``, which the backward pass reuses. With a
    :class:`~harness.heads.linear_space.Workspace` ``ws`` they are its buffers "z", "noise" and "hom_noise".
    ``low``: the dtype of HET-XL's product ``n Pᵀ`` (:attr:`NoiseLayout.product_dtype`), or None."""
    hom_noise = None
    n, c, w = mu.shape[0], eps_diag.shape[1], scale.shape[1]
    if projection is None:  # HET: μ + d ⊙ ε (+ factor part), fused
        z = torch.addcmul(mu.unsqueeze(1), scale.unsqueeze(1), eps_diag, out=_buffer(ws, "z", (n, c, w), mu))
        noise = None
    else:
        noise = torch.mul(scale.unsqueeze(1), eps_diag, out=_buffer(ws, "noise", (n, c, w), mu))
    target = z if projection is None else noise
    if kind == "low_rank":
        rows = factors.shape[0]
        target = target.baddbmm_(eps_factors.expand(rows, -1, -1), factors.transpose(1, 2))
    elif kind == "parameter_efficient":
        hom_noise = torch.matmul(
            eps_factors, hom_factors.t(), out=_buffer(ws, "hom_noise", (eps_factors.shape[0], c, w), mu)
        )
        target = target.addcmul_(factors.unsqueeze(1), hom_noise)
    if projection is None:
        return target, None, hom_noise
    noise = target
    shape = (n, c, projection.shape[0])
    if low is None:
        z = torch.matmul(noise, projection.t(), out=_buffer(ws, "z", shape, mu))
    else:  # the product in the autocast dtype, its result back in fp32 for the sums
        product = torch.matmul(noise.to(low), projection.to(low).t())
        z = product.to(mu.dtype) if ws is None else _buffer(ws, "z", shape, mu).copy_(product)
    return z.add_(mu.unsqueeze(1)), noise, hom_noise


def chunk_logits(
    kind: str,
    eps_factors: Optional[Tensor],
    eps_diag: Tensor,
    mu: Tensor,
    scale: Tensor,
    factors: Optional[Tensor],
    hom_factors: Optional[Tensor],
    projection: Optional[Tensor],
    temperature: Tensor,
) -> Tensor:
    """Tempered logit samples ``z = (μ + P(V ε_R + d ⊙ ε_W)) / τ`` for one chunk.

    Args:
        kind: ``"diagonal"``, ``"low_rank"`` or ``"parameter_efficient"``.
        eps_factors: ``[N|1, C, R]`` standard normals (None for ``"diagonal"``).
        eps_diag: ``[N|1, C, W|1]`` standard normals.
        mu: ``[N, K]`` mean logits μ(x).
        scale: ``[N, W]`` diagonal standard deviations d(x) > 0.
        factors: ``[N, W, R]`` V(x) for ``"low_rank"``; ``[N, W]`` v(x) for ``"parameter_efficient"``.
        hom_factors: ``[W, R]`` input-independent V of the parameter-efficient variant.
        projection: ``[K, W]`` class weights for HET-XL, None for HET (W = K).
        temperature: 0-dim τ > 0.

    Returns:
        ``[N, C, K]`` tempered logits.
    """
    return _samples(kind, eps_factors, eps_diag, mu, scale, factors, hom_factors, projection)[0] / temperature


def _chunk_stats(link: str, z: Tensor, valid: Optional[Tensor] = None) -> "tuple[Tensor, ...]":
    """Log-sum-exp over the chunk's samples: ``[N, C, K] -> [N, K]`` (one or two of them).
    ``valid`` ``[1, C, 1]`` (bool) leaves out the samples past S of a last, partial chunk."""
    if link == "softmax":
        parts = (torch.log_softmax(z, dim=-1),)
    else:
        parts = (F.logsigmoid(z), F.logsigmoid(-z))
    del z  # the caller holds no reference: one [N, C, K] tensor fewer alive
    if valid is not None:
        parts = tuple(torch.where(valid, p, -math.inf) for p in parts)
    return tuple(torch.logsumexp(p, dim=1) for p in parts)


def _chunk_grad(link: str, z: Tensor, shifted_outs: "tuple[Tensor, ...]", grads: "tuple[Tensor, ...]") -> Tensor:
    """d loss / d z for one chunk ``[N, C, K]``, given the outputs and their incoming gradients.

    ``shifted_outs`` are the outputs plus log S, i.e. log Σ_s p_s. Softmax: with
    w_{s,k} = p_{s,k} / (S p̄_k) and g = dL/d log p̄, dL/dz_{s,j} = g_j w_{s,j} - p_{s,j} Σ_k g_k w_{s,k}.
    Sigmoid: d log p̄_k/dz_{s,k} = σ(1-σ)/(S p̄_k); d log(1-p̄_k)/dz_{s,k} = -σ(1-σ)/(S(1-p̄_k)).
    Weights are formed in log space, so p̄ far below float32's range gives no inf/NaN.
    """
    if link == "softmax":
        log_p = torch.log_softmax(z, dim=-1)
        del z  # (the caller holds no reference)
        gw = torch.sub(log_p, shifted_outs[0].unsqueeze(1)).exp_().mul_(grads[0].unsqueeze(1))
        return gw.sub_(log_p.exp_().mul_(gw.sum(dim=-1, keepdim=True)))
    log_var = F.logsigmoid(z).add_(F.logsigmoid(-z))  # log σ(1-σ)
    del z
    return (
        torch.sub(log_var, shifted_outs[0].unsqueeze(1))
        .exp_()
        .mul_(grads[0].unsqueeze(1))
        .sub_(log_var.sub_(shifted_outs[1].unsqueeze(1)).exp_().mul_(grads[1].unsqueeze(1)))
    )


def _chunk_backward(
    layout: NoiseLayout, eps_f, eps_d, params, shifted, grads, need, valid=None, coeffs=None, ws=None
) -> dict:
    """This chunk's contribution to the gradients of the (folded) inputs named in ``need``.

    ``params`` = (mu, scale, factors, hom, proj); returns ``{name: tensor}`` for the names needed.
    ``coeffs``: the ``[N, K]`` coefficients of :func:`~harness.heads.linear_space.grad_coefficients`
    (eager: d loss / d z formed in linear space, in the buffers of the workspace ``ws``), or None (the
    log-space weights of :func:`_chunk_grad`).
    """
    mu, scale, factors, hom, proj = params
    low = layout.product_dtype
    sample = list(_samples(layout.kind, eps_f, eps_d, mu, scale, factors, hom, proj, ws, low))
    noise_w, hom_noise = sample[1:]
    if coeffs is None:  # d loss / d z  [N, C, K]; z freed inside
        gz = _chunk_grad(layout.link, sample.pop(0), shifted, grads)
    else:
        gz = chunk_grad(layout.link, sample.pop(0), coeffs, ws)
    if valid is not None:
        gz = torch.where(valid, gz, 0.0)
    out = {}
    if "mu" in need:
        out["mu"] = gz.sum(dim=1)
    if "proj" in need:
        out["proj"] = _product(gz.reshape(-1, gz.shape[-1]).t(), noise_w.reshape(-1, noise_w.shape[-1]), low)
    if proj is None:
        gn = gz
    elif low is None:
        gn = torch.matmul(gz, proj, out=_buffer(ws, "gn", (*gz.shape[:2], proj.shape[1]), gz))
    else:
        gn = _product(gz, proj, low)
    del gz
    if layout.kind == "low_rank" and "factors" in need:
        # (εᵀ gn)ᵀ: the long K dim contiguous in the product, ~1.8x faster than gnᵀ ε on the bench's CPU
        out["factors"] = torch.matmul(eps_f.transpose(1, 2), gn).transpose(1, 2)
    elif layout.kind == "parameter_efficient":
        if "factors" in need:
            out["factors"] = (gn * hom_noise).sum(dim=1)
        if "hom" in need:
            gv = gn * factors.unsqueeze(1)
            if eps_f.shape[0] == 1:
                out["hom"] = gv.sum(dim=0).t() @ eps_f[0]
            else:
                out["hom"] = gv.reshape(-1, gv.shape[-1]).t() @ eps_f.reshape(-1, eps_f.shape[-1])
    if "scale" in need:  # last: gn is not needed after it, so the product is formed in place
        out["scale"] = gn.mul_(eps_d).sum(dim=1)
    return out


def _sample_indices(layout: NoiseLayout, start: Tensor) -> "tuple[Tensor, Optional[Tensor]]":
    """Global indices ``[C]`` of the chunk starting at ``start`` (0-dim int64), and the mask of those < S
    (None when S is a multiple of the chunk size, so no chunk is partial)."""
    idx = torch.arange(layout.chunk_size, device=start.device, dtype=torch.int64) + start
    if layout.num_samples % layout.chunk_size == 0:
        return idx, None
    return idx, (idx < layout.num_samples).view(1, -1, 1)


def _loop(layout: NoiseLayout, body, init: tuple) -> tuple:
    """Run ``carry = body(*carry)`` over the chunks, ``carry[0]`` being the chunk's first sample index
    (0-dim int64); returns ``carry[1:]``. Compiling: one ``torch.while_loop`` (the graph holds one chunk
    whatever S); eager: a Python loop over the same body (``torch.while_loop`` would trace it each call)."""
    if torch.compiler.is_compiling():
        return tuple(torch.while_loop(lambda i, *acc: i < layout.num_samples, body, init)[1:])
    carry = init
    for start in range(0, layout.num_samples, layout.chunk_size):
        carry = body(torch.full_like(init[0], start), *carry[1:])
    return tuple(carry[1:])


def _forward_sums(layout: NoiseLayout, noise, key, params) -> "tuple[Tensor, ...]":
    """log Σ_s of the per-sample log-probabilities ``[N, K]`` (one, or two for sigmoid), chunk by chunk."""
    mu, scale, factors, hom, proj = params
    if isinstance(noise, CounterNoise):  # in-graph loop: the same body for every chunk

        def body(i, *acc):
            samples, valid = _sample_indices(layout, i)
            eps = noise.draw(key, samples, mu.shape[0], mu.dtype)
            z = _samples(layout.kind, *eps, *params, low=layout.product_dtype)[0]
            stats = _chunk_stats(layout.link, z, valid)
            return (i + layout.chunk_size, *[torch.logaddexp(a, b) for a, b in zip(acc, stats)])

        n_out = 1 if layout.link == "softmax" else 2
        init = (
            torch.zeros((), dtype=torch.int64, device=mu.device),
            *[torch.full_like(mu, -math.inf) for _ in range(n_out)],
        )
        return _loop(layout, body, init)
    acc: "Optional[list[Tensor]]" = None
    for start in range(0, layout.num_samples, layout.chunk_size):
        length = min(layout.chunk_size, layout.num_samples - start)
        z = _samples(layout.kind, *noise(start, length), *params, low=layout.product_dtype)[0]
        stats = _chunk_stats(layout.link, z)
        acc = list(stats) if acc is None else [torch.logaddexp(a, b) for a, b in zip(acc, stats)]
    return tuple(acc)


def _backward_sums(layout: NoiseLayout, noise, key, params, shifted, grads, need) -> dict:
    """Gradients of the (folded) inputs named in ``need``, summed over the chunks."""
    if isinstance(noise, CounterNoise):
        names = [n for n in _GRAD_NAMES if n in need]
        init = [torch.zeros_like(params[_GRAD_NAMES.index(n)]) for n in names]

        def body(i, *acc):
            samples, valid = _sample_indices(layout, i)
            eps = noise.draw(key, samples, params[0].shape[0], params[0].dtype)
            part = _chunk_backward(layout, *eps, params, shifted, grads, need, valid)
            return (i + layout.chunk_size, *[a + part[n] for a, n in zip(acc, names)])

        i0 = torch.zeros((), dtype=torch.int64, device=params[0].device)
        return dict(zip(names, _loop(layout, body, (i0, *init))))
    total: dict = {}
    for start in range(0, layout.num_samples, layout.chunk_size):
        length = min(layout.chunk_size, layout.num_samples - start)
        for name, part in _chunk_backward(layout, *noise(start, length), params, shifted, grads, need).items():
            total[name] = part if name not in total else total[name].add_(part)
    return total


def _rows(params: tuple, idx: Tensor) -> tuple:
    """(mu, scale, factors, hom, proj) with the per-row tensors restricted to rows ``idx`` ``[M]``."""
    mu, scale, factors, hom, proj = params
    return (mu[idx], scale[idx], None if factors is None else factors[idx], hom, proj)


def _rows_noise(noise: NoiseFn, idx: Tensor) -> NoiseFn:
    """The noise of rows ``idx`` only (noise shared by the rows, leading dim 1, is left whole)."""

    def rows(start: int, length: int) -> "tuple[Optional[Tensor], Tensor]":
        return tuple(e if e is None or e.shape[0] == 1 else e[idx] for e in noise(start, length))

    return rows


def _draw(noise: NoiseFn, start: int, length: int, ws: "Workspace") -> tuple:
    """A chunk's noise, in the workspace's buffers when the noise function takes one (:func:`seeded_noise`)."""
    return noise(start, length, ws) if getattr(noise, "takes_workspace", False) else noise(start, length)


def _forward_eager(layout: NoiseLayout, noise: NoiseFn, params: tuple) -> "tuple[tuple[Tensor, ...], Optional[Tensor]]":
    """log Σ_s of the per-sample probabilities ``[N, K]`` (one, or two for sigmoid), summed in linear space
    (:mod:`~harness.heads.linear_space`); rows out of its range are recomputed in log space
    (:func:`_forward_sums`). Returns the outputs and those rows' indices ``[M]`` (None: none)."""

    def work(starts: "list[int]") -> "list[Tensor]":
        acc: "Optional[list[Tensor]]" = None
        ws = Workspace()
        for start in starts:
            eps = _draw(noise, start, min(layout.chunk_size, layout.num_samples - start), ws)
            sums = chunk_sums(layout.link, _samples(layout.kind, *eps, *params, ws, layout.product_dtype)[0], ws)
            acc = list(sums) if acc is None else [a.add_(b) for a, b in zip(acc, sums)]
        return acc

    parts = split_chunks(list(range(0, layout.num_samples, layout.chunk_size)), params[0].device, work)
    acc = parts[0]
    for part in parts[1:]:
        acc = [a.add_(b) for a, b in zip(acc, part)]
    outs = tuple(a.log_() for a in acc)
    log_s = math.log(layout.num_samples)
    bad = rows_out_of_range(tuple(o - log_s for o in outs))
    if bad is not None:
        for out, exact in zip(outs, _forward_sums(layout, _rows_noise(noise, bad), None, _rows(params, bad))):
            out.index_copy_(0, bad, exact)
    return outs, bad


def _backward_eager(
    layout: NoiseLayout, noise: NoiseFn, params: tuple, shifted, grads, need, bad: Optional[Tensor]
) -> dict:
    """:func:`_backward_sums` with d loss / d z formed in linear space, except for the rows ``bad`` (those
    :func:`_forward_eager` recomputed in log space), whose gradients come from the log-space kernels."""
    coeffs = grad_coefficients(layout.link, shifted, grads, bad)

    def work(starts: "list[int]") -> dict:
        out: dict = {}
        ws = Workspace()
        for start in starts:
            eps = _draw(noise, start, min(layout.chunk_size, layout.num_samples - start), ws)
            for name, part in _chunk_backward(layout, *eps, params, shifted, grads, need, coeffs=coeffs, ws=ws).items():
                out[name] = part if name not in out else out[name].add_(part)
        return out

    starts = list(range(0, layout.num_samples, layout.chunk_size))
    total: dict = {}
    for part in split_chunks(starts, params[0].device, work):
        for name, grad in part.items():
            total[name] = grad if name not in total else total[name].add_(grad)
    if bad is not None:
        exact = _backward_sums(
            layout,
            _rows_noise(noise, bad),
            None,
            _rows(params, bad),
            tuple(s[bad] for s in shifted),
            tuple(g[bad] for g in grads),
            need,
        )
        for name, part in exact.items():  # the linear-space part of these rows is 0 (coefficients 0)
            total[name] = total[name].index_add_(0, bad, part) if name in _GRAD_NAMES[:3] else total[name] + part
    return total


def _dot(a: Optional[Tensor], b: Optional[Tensor]) -> Tensor:
    return (a * b).sum() if a is not None else torch.zeros(())


class _ChunkedMonteCarlo(torch.autograd.Function):
    """Chunked MC log-average with recomputation in the backward pass (see module docstring).

    τ is folded into μ, d and the per-example factors up front (z is linear in them), so no
    ``[N, C, K]`` pass divides by τ; its gradient follows from Euler's identity
    dL/dτ = -(1/τ) Σ_x <dL/dx', x'> over the folded tensors x' = x/τ.
    """

    @staticmethod
    def forward(ctx, layout: NoiseLayout, noise, key, mu, scale, factors, hom, proj, tau):  # type: ignore[override]
        ctx.layout, ctx.noise = layout, noise
        folded = [t / tau if t is not None else None for t in (mu, scale, factors)]
        log_s = math.log(layout.num_samples)
        if isinstance(noise, CounterNoise):
            sums, bad = _forward_sums(layout, noise, key, (*folded, hom, proj)), None
        else:
            sums, bad = _forward_eager(layout, noise, (*folded, hom, proj))
        outs = tuple(a - log_s for a in sums)
        # inputs, [N, K] outputs and the indices of the rows done in log space only: nothing of size S
        ctx.save_for_backward(*folded, hom, proj, tau, key, bad, *outs)
        return outs if len(outs) > 1 else outs[0]

    @staticmethod
    def backward(ctx, *grads: Tensor):  # type: ignore[override]
        layout = ctx.layout
        mu, scale, factors, hom, proj, tau, key, bad, *outs = ctx.saved_tensors
        log_s = math.log(layout.num_samples)
        shifted = tuple(o + log_s for o in outs)
        n_mu, n_scale, n_factors, n_hom, n_proj, n_tau = ctx.needs_input_grad[3:]
        wanted = (
            n_mu or n_tau,
            n_scale or n_tau,
            (n_factors or n_tau) and factors is not None,
            n_hom and layout.kind == "parameter_efficient",
            n_proj and proj is not None,
        )
        need = {name for name, w in zip(_GRAD_NAMES, wanted) if w}
        params = (mu, scale, factors, hom, proj)
        if isinstance(ctx.noise, CounterNoise):
            g = _backward_sums(layout, ctx.noise, key, params, shifted, grads, need)
        else:
            g = _backward_eager(layout, ctx.noise, params, shifted, grads, need, bad)
        g_mu, g_scale, g_factors = g.get("mu"), g.get("scale"), g.get("factors")
        g_tau = None
        if n_tau:  # Euler: z is homogeneous of degree 1 in the folded (mu, scale, factors)
            g_tau = -(_dot(g_mu, mu) + _dot(g_scale, scale) + _dot(g_factors, factors)).to(tau.dtype) / tau
        inv = 1.0 / tau
        unfold = [t * inv if t is not None else None for t in (g_mu, g_scale, g_factors)]
        return (None, None, None, *unfold, g.get("hom"), g.get("proj"), g_tau)


def monte_carlo_log_average(
    layout: NoiseLayout,
    noise: "Union[NoiseFn, CounterNoise]",
    mu: Tensor,
    scale: Tensor,
    factors: Optional[Tensor] = None,
    hom_factors: Optional[Tensor] = None,
    projection: Optional[Tensor] = None,
    temperature: Optional[Tensor] = None,
    key: Optional[Tensor] = None,
) -> "Tensor | tuple[Tensor, Tensor]":
    """Log of the MC-averaged tempered probabilities, exact in log space, memory flat in S.

    Args:
        layout: noise kind, link, S and chunk size.
        noise: ``noise(start, length)`` giving the standard normals of samples
            ``start .. start+length-1``; it must return the same tensors when called again
            (the backward pass regenerates the noise instead of storing it). Or a
            :class:`~harness.heads.noise.CounterNoise` with its ``key``: the in-graph loop that
            ``torch.compile`` traces without a break.
        mu, scale, factors, hom_factors, projection, temperature: as in :func:`chunk_logits`.
        key: 0-dim int64 tensor, the key of a :class:`CounterNoise` (ignored otherwise).

    Returns:
        softmax link: ``log p̄`` ``[N, K]``; sigmoid link: ``(log p̄, log(1 - p̄))``, both ``[N, K]``.

    Raises:
        ValueError: a :class:`CounterNoise` without a ``key``.

    Source: Collier et al. 2021, Eq. 4 (MC estimate of the softmax expectation); the log-sum-exp
    form is the numerically stable one (log-sum-exp of the sample log-probabilities).
    """
    if isinstance(noise, CounterNoise) and key is None:
        raise ValueError("CounterNoise needs its key: pass key=<0-dim int64 tensor>")
    if temperature is None:
        temperature = mu.new_ones(())
    return _ChunkedMonteCarlo.apply(layout, noise, key, mu, scale, factors, hom_factors, projection, temperature)


def log_average_to_logits(out: "Tensor | tuple[Tensor, Tensor]", link: str, clip_eps: Optional[float] = None) -> Tensor:
    """Logits ``[N, K]`` from :func:`monte_carlo_log_average`'s output: softmax, log p̄ itself; sigmoid,
    log p̄ − log(1 − p̄). ``clip_eps`` reproduces the reference's clipping of p̄ to [eps, 1] (softmax) or
    [eps, 1 − eps] (sigmoid) (edward2 ``edward2/tensorflow/layers/heteroscedastic.py``, ``eps``); None: exact."""
    if link == "softmax":
        return out if clip_eps is None else out.clamp(min=math.log(clip_eps))
    log_p, log_not_p = out
    if clip_eps is not None:
        lo, hi = math.log(clip_eps), math.log1p(-clip_eps)
        log_p, log_not_p = log_p.clamp(lo, hi), log_not_p.clamp(lo, hi)
    return log_p - log_not_p
