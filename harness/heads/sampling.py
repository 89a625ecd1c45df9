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
Python int taken from a tensor: the graph has no break and its size does not grow with S). What one
chunk computes, its samples and the log-space kernels, is :mod:`~harness.heads.chunk`.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import Tensor

from harness.heads.chunk import NoiseLayout, _chunk_backward, _chunk_stats, _samples, chunk_logits
from harness.heads.linear_space import Workspace, chunk_sums, grad_coefficients, rows_out_of_range, split_chunks
from harness.heads.noise import CounterNoise, NoiseFn, fill_standard_normal, seeded_noise
from harness.heads.planning import AUTO_CHUNK_ELEMENTS, FRESH_CHUNK_ELEMENTS, auto_chunk_size, plan_noise
from harness.heads.rows import backward as rows_backward
from harness.heads.rows import linear_sums as rows_linear_sums

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
    """The noise of rows ``idx`` only (noise shared by the rows, leading dim 1, is left whole; noise drawn by row
    is drawn for those rows only)."""
    if hasattr(noise, "row"):

        def drawn(start: int, length: int) -> "tuple[Optional[Tensor], Tensor]":
            parts = [noise.row(int(b), start, length) for b in idx]
            return tuple(None if parts[0][i] is None else torch.cat([p[i] for p in parts]) for i in (0, 1))

        return drawn

    def subset(start: int, length: int) -> "tuple[Optional[Tensor], Tensor]":
        return tuple(e if e is None or e.shape[0] == 1 else e[idx] for e in noise(start, length))

    return subset


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

    if hasattr(noise, "row"):  # noise drawn row by row (HET-XL, long chunks): the row-by-row driver
        acc = rows_linear_sums(layout, noise, params)
    else:
        parts = split_chunks(list(range(0, layout.num_samples, layout.chunk_size)), params[0].device, work)
        acc = parts[0]
        for part in parts[1:]:
            acc = [a.add_(b) for a, b in zip(acc, part)]
    outs = tuple(a.log_() for a in acc)
    log_s = math.log(layout.num_samples)
    bad = rows_out_of_range(tuple(o - log_s for o in outs))
    for group in _groups(noise, bad):
        for out, exact in zip(outs, _forward_sums(layout, _rows_noise(noise, group), None, _rows(params, group))):
            out.index_copy_(0, group, exact)
    return outs, bad


def _groups(noise: NoiseFn, bad: Optional[Tensor]) -> "list[Tensor]":
    """The rows ``bad`` ``[M]`` in the groups the log-space kernels take at once: all together, or one by one for
    noise drawn by row (whose chunks are long: M rows of them at once would be M times one chunk's memory)."""
    if bad is None:
        return []
    return list(bad.split(1)) if hasattr(noise, "row") else [bad]


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

    if hasattr(noise, "row"):
        total = rows_backward(layout, noise, params, coeffs, need)
    else:
        total = {}
        for part in split_chunks(list(range(0, layout.num_samples, layout.chunk_size)), params[0].device, work):
            for name, grad in part.items():
                total[name] = grad if name not in total else total[name].add_(grad)
    for group in _groups(noise, bad):
        exact = _backward_sums(
            layout,
            _rows_noise(noise, group),
            None,
            _rows(params, group),
            tuple(s[group] for s in shifted),
            tuple(g[group] for g in grads),
            need,
        )
        for name, part in exact.items():  # the linear-space part of these rows is 0 (coefficients 0)
            total[name] = total[name].index_add_(0, group, part) if name in _GRAD_NAMES[:3] else total[name] + part
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
