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

Two drivers run the same per-chunk functions: a Python loop over chunks with noise from torch's
generators (eager), and, inside ``torch.compile``, a ``torch.while_loop`` over chunks with the
counter-based noise of :class:`~harness.heads.noise.CounterNoise` (no generator, no thread, no
Python int taken from a tensor: the graph has no break and its size does not grow with S).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.heads.noise import CounterNoise, NoiseFn, counter_key, fill_standard_normal, seeded_noise
from harness.heads.options import BANK_ROWS

__all__ = [
    "AUTO_CHUNK_ELEMENTS", "FRESH_CHUNK_ELEMENTS", "NoiseLayout", "auto_chunk_size", "chunk_logits",
    "monte_carlo_log_average", "log_average_to_logits", "plan_noise", "seeded_noise", "fill_standard_normal",
    "CounterNoise", "NoiseFn",
]

#: elements of one ``[N, chunk, K]`` tensor of the evaluation bank when the chunk size is chosen
#: automatically (4 MiB of float32); it fixes the bank's chunks and row blocks (see :func:`plan_noise`).
AUTO_CHUNK_ELEMENTS = 1 << 20
#: the same for fresh noise (training): 8 MiB of float32 per ``[N, chunk, K]`` tensor, i.e. 32
#: samples of B = 64, K = 1000. Larger chunks mean fewer, larger operations: on the bench's 2-core
#: CPU, chunks of 32 samples step 1.3x faster than chunks of 16 under load, while the peak memory
#: stays under 0.2 of the naive implementation's (``results/bench/heads.md``).
FRESH_CHUNK_ELEMENTS = 1 << 21

_GRAD_NAMES = ("mu", "scale", "factors", "hom", "proj")


@dataclass(frozen=True)
class NoiseLayout:
    """Static description of the noise of one forward call.

    Attributes:
        kind: ``"diagonal"``, ``"low_rank"`` or ``"parameter_efficient"``.
        link: ``"softmax"`` or ``"sigmoid"``.
        num_samples: S, Monte Carlo samples.
        chunk_size: samples processed at once.
    """

    kind: str
    link: str
    num_samples: int
    chunk_size: int


def auto_chunk_size(num_rows: int, width: int, num_samples: int, elements: int = AUTO_CHUNK_ELEMENTS) -> int:
    """Chunk size so that one ``[num_rows, chunk, width]`` tensor has about ``elements`` elements (1M)."""
    return max(1, min(num_samples, elements // max(1, num_rows * width)))


def plan_noise(head, h: Tensor, s: int, seed: Optional[int]) -> "tuple":
    """Noise and chunking of one call of a :class:`~harness.heads.HeteroscedasticHead` over features
    ``h`` ``[N, D]`` and S samples.

    Seeded evaluation (``eval()`` mode and a seed from ``seed`` or ``eval_seed``) uses the
    evaluation noise bank: noise shared by all rows (leading dim 1), with a chunk size that
    depends only on S, the widths and ``mc_chunk_size``, never on N, so each sample's
    noise and each row's computation are the same whatever the batch. With the automatic
    chunk size the rows are processed in blocks of about AUTO_CHUNK_ELEMENTS / (chunk·width)
    rows, which keeps the memory of a chunk flat in the batch size as in training.
    Otherwise the noise is fresh (``seed`` if given, else drawn from torch's global RNG), per
    row unless ``share_samples_across_batch``, with chunks of about FRESH_CHUNK_ELEMENTS.

    Inside ``torch.compile`` the noise is :class:`~harness.heads.noise.CounterNoise` keyed by a
    tensor (drawn in the graph from the global RNG, or made from the seed): an element's noise
    depends on its indices only, so the bank needs neither a fixed chunk size nor row blocks.

    Returns:
        ``(noise, chunk, row_block, key)``: a :func:`~harness.heads.noise.seeded_noise` function
        (eager) or a :class:`~harness.heads.noise.CounterNoise` (compiling), samples per chunk
        (<= S), rows per block (None: all rows at once), and the counter key (None in eager).
    """
    bank = not head.training and (seed is not None or head.eval_seed is not None)
    if bank and seed is None:
        seed = head.eval_seed
    width = max(head.num_classes, head.noise_width)
    shared = bank or head.share_samples_across_batch
    scalar = head.diag_noise == "shared_scalar"
    if torch.compiler.is_compiling():
        if seed is None:  # in-graph draw from the global RNG: reproducible via manual_seed
            key = torch.randint(0, 2**31 - 1, (), dtype=torch.int64, device=h.device)
        else:
            key = torch.tensor(counter_key(seed), dtype=torch.int64, device=h.device)
        rows = h.shape[0] if isinstance(h.shape[0], int) else BANK_ROWS  # a dynamic batch: a static chunk
        chunk = head.mc_chunk_size or auto_chunk_size(rows, width, s, FRESH_CHUNK_ELEMENTS)
        return CounterNoise(shared, head.noise_width, head.num_factors, scalar), min(chunk, s), None, key
    if seed is None:
        seed = int(torch.randint(0, 2**62, (), device="cpu"))  # global RNG: reproducible via manual_seed
    row_block = None
    if head.mc_chunk_size is not None:
        chunk = head.mc_chunk_size
    elif bank:
        chunk = auto_chunk_size(BANK_ROWS, width, s)
        row_block = max(1, AUTO_CHUNK_ELEMENTS // (chunk * width))
    else:
        chunk = auto_chunk_size(h.shape[0], width, s, FRESH_CHUNK_ELEMENTS)
    noise = seeded_noise(seed, h.shape[0], head.noise_width, head.num_factors, shared=shared, diag_scalar=scalar,
                         device=h.device, dtype=h.dtype)
    return noise, min(chunk, s), row_block, None


def _samples(kind, eps_factors, eps_diag, mu, scale, factors, hom_factors, projection):
    """Untempered samples ``μ + P n`` ``[N, C, K]``, plus the noise ``n`` ``[N, C, W]`` (HET-XL only)
    and the PE product ``V ε_R`` ``[N|1, C, W]``, which the backward pass reuses."""
    hom_noise = None
    if projection is None:  # HET: μ + d ⊙ ε (+ factor part), fused
        z = torch.addcmul(mu.unsqueeze(1), scale.unsqueeze(1), eps_diag)
        noise = None
    else:
        noise = scale.unsqueeze(1) * eps_diag
    target = z if projection is None else noise
    if kind == "low_rank":
        rows = factors.shape[0]
        target = target.baddbmm_(eps_factors.expand(rows, -1, -1), factors.transpose(1, 2))
    elif kind == "parameter_efficient":
        hom_noise = torch.matmul(eps_factors, hom_factors.t())
        target = target.addcmul_(factors.unsqueeze(1), hom_noise)
    if projection is None:
        return target, None, hom_noise
    noise = target
    return torch.matmul(noise, projection.t()).add_(mu.unsqueeze(1)), noise, hom_noise


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
    return (torch.sub(log_var, shifted_outs[0].unsqueeze(1)).exp_().mul_(grads[0].unsqueeze(1))
            .sub_(log_var.sub_(shifted_outs[1].unsqueeze(1)).exp_().mul_(grads[1].unsqueeze(1))))


def _chunk_backward(layout: NoiseLayout, eps_f, eps_d, params, shifted, grads, need, valid=None) -> dict:
    """This chunk's contribution to the gradients of the (folded) inputs named in ``need``.

    ``params`` = (mu, scale, factors, hom, proj); returns ``{name: tensor}`` for the names needed.
    """
    mu, scale, factors, hom, proj = params
    sample = list(_samples(layout.kind, eps_f, eps_d, mu, scale, factors, hom, proj))
    noise_w, hom_noise = sample[1:]
    gz = _chunk_grad(layout.link, sample.pop(0), shifted, grads)  # d loss / d z  [N, C, K]; z freed inside
    if valid is not None:
        gz = torch.where(valid, gz, 0.0)
    out = {}
    if "mu" in need:
        out["mu"] = gz.sum(dim=1)
    if "proj" in need:
        out["proj"] = gz.reshape(-1, gz.shape[-1]).t() @ noise_w.reshape(-1, noise_w.shape[-1])
    gn = gz if proj is None else torch.matmul(gz, proj)  # d loss / d noise  [N, C, W]
    if "scale" in need:
        out["scale"] = (gn * eps_d).sum(dim=1)
    if layout.kind == "low_rank" and "factors" in need:
        out["factors"] = torch.matmul(gn.transpose(1, 2), eps_f)
    elif layout.kind == "parameter_efficient":
        if "factors" in need:
            out["factors"] = (gn * hom_noise).sum(dim=1)
        if "hom" in need:
            gv = gn * factors.unsqueeze(1)
            if eps_f.shape[0] == 1:
                out["hom"] = gv.sum(dim=0).t() @ eps_f[0]
            else:
                out["hom"] = gv.reshape(-1, gv.shape[-1]).t() @ eps_f.reshape(-1, eps_f.shape[-1])
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
            stats = _chunk_stats(layout.link, _samples(layout.kind, *eps, *params)[0], valid)
            return (i + layout.chunk_size, *[torch.logaddexp(a, b) for a, b in zip(acc, stats)])

        n_out = 1 if layout.link == "softmax" else 2
        init = (torch.zeros((), dtype=torch.int64, device=mu.device),
                *[torch.full_like(mu, -math.inf) for _ in range(n_out)])
        return _loop(layout, body, init)
    acc: "Optional[list[Tensor]]" = None
    for start in range(0, layout.num_samples, layout.chunk_size):
        length = min(layout.chunk_size, layout.num_samples - start)
        stats = _chunk_stats(layout.link, _samples(layout.kind, *noise(start, length), *params)[0])
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
        outs = tuple(a - log_s for a in _forward_sums(layout, noise, key, (*folded, hom, proj)))
        # inputs and [N, K] outputs only: nothing of size S
        ctx.save_for_backward(*folded, hom, proj, tau, key, *outs)
        return outs if len(outs) > 1 else outs[0]

    @staticmethod
    def backward(ctx, *grads: Tensor):  # type: ignore[override]
        layout = ctx.layout
        mu, scale, factors, hom, proj, tau, key, *outs = ctx.saved_tensors
        log_s = math.log(layout.num_samples)
        shifted = tuple(o + log_s for o in outs)
        n_mu, n_scale, n_factors, n_hom, n_proj, n_tau = ctx.needs_input_grad[3:]
        wanted = (n_mu or n_tau, n_scale or n_tau, (n_factors or n_tau) and factors is not None,
                  n_hom and layout.kind == "parameter_efficient", n_proj and proj is not None)
        need = {name for name, w in zip(_GRAD_NAMES, wanted) if w}
        g = _backward_sums(layout, ctx.noise, key, (mu, scale, factors, hom, proj), shifted, grads, need)
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
