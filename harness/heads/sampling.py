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
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

# (start, length) -> (eps_factors [N|1, C, R] or None, eps_diag [N|1, C, W|1])
NoiseFn = Callable[[int, int], "tuple[Optional[Tensor], Tensor]"]

#: elements of one ``[N, chunk, K]`` tensor when the chunk size is chosen automatically (4 MiB
#: of float32: small enough to stay in cache on a CPU, large enough to keep a GPU busy).
AUTO_CHUNK_ELEMENTS = 1 << 20


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


def auto_chunk_size(num_rows: int, width: int, num_samples: int) -> int:
    """Chunk size so that one ``[num_rows, chunk, width]`` tensor has about 1M elements."""
    return max(1, min(num_samples, AUTO_CHUNK_ELEMENTS // max(1, num_rows * width)))


_POOL: "tuple[int, Optional[ThreadPoolExecutor]]" = (-1, None)


def fill_standard_normal(out: Tensor, gens: "list[torch.Generator]") -> None:
    """Fill ``out`` [A, B, C] with N(0, 1): its two halves (rows, or samples if one row) from
    ``gens[0]`` and ``gens[1]``. The values depend only on the generators, never on the thread
    count; on a multi-core CPU the halves are drawn in parallel (torch's CPU normal sampler is
    single-threaded and is the costliest step of the head)."""
    dim = 0 if out.shape[0] > 1 else 1
    if out.shape[dim] < 2:
        out.normal_(generator=gens[0])
        return
    half = out.shape[dim] // 2
    parts = (out.narrow(dim, 0, half), out.narrow(dim, half, out.shape[dim] - half))
    if out.device.type != "cpu" or torch.get_num_threads() < 2 or out.numel() < (1 << 16):
        for part, gen in zip(parts, gens):
            part.normal_(generator=gen)
        return
    global _POOL
    if _POOL[0] != os.getpid():  # a forked child cannot use its parent's threads
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="het-noise"))
    other = _POOL[1].submit(parts[1].normal_, generator=gens[1])
    parts[0].normal_(generator=gens[0])
    other.result()


def seeded_noise(
    seed: int,
    num_rows: int,
    width: int,
    num_factors: int,
    *,
    shared: bool,
    diag_scalar: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> NoiseFn:
    """Standard-normal noise for chunk ``(start, length)``, reproducible from ``(seed, start)``.

    Each chunk draws from its own generators seeded by ``seed`` and the chunk's first sample
    index, so the backward pass regenerates exactly the forward noise without storing it.

    Args:
        seed: base seed of this forward call (non-negative int).
        num_rows: N, rows of the batch (ignored when ``shared``).
        width: W, noise width (K for HET, D for HET-XL).
        num_factors: R, or 0 when there are no factors.
        shared: one draw per sample broadcast over the batch (leading dim 1). The draw then
            depends only on ``(seed, start, length)`` and the widths, never on ``num_rows``: the
            head's evaluation noise bank relies on this (``HeteroscedasticHead``, ``eval_seed``).
        diag_scalar: one scalar per sample for the diagonal term instead of W independent
            normals (the rank-1 "diagonal" of edward2 ``edward2/jax/nn/heteroscedastic_lib.py``).

    Returns:
        ``noise(start, length) -> (eps_factors [N|1, length, R] or None, eps_diag [N|1, length, W|1])``.
    """
    rows = 1 if shared else num_rows
    diag_width = 1 if diag_scalar else width

    def noise(start: int, length: int) -> "tuple[Optional[Tensor], Tensor]":
        base = (seed * 1_000_003 + start) * 2
        gens = [torch.Generator(device=device) for _ in range(2)]
        for part, gen in enumerate(gens):
            gen.manual_seed((base + part) % (1 << 63))
        # diagonal noise first, so every variant sees the same ε_W for the same seed
        eps_diag = torch.empty(rows, length, diag_width, device=device, dtype=dtype)
        fill_standard_normal(eps_diag, gens)
        eps_factors = None
        if num_factors > 0:
            eps_factors = torch.randn(rows, length, num_factors, generator=gens[0], device=device, dtype=dtype)
        return eps_factors, eps_diag

    return noise


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


def _chunk_stats(link: str, z: Tensor) -> "tuple[Tensor, ...]":
    """Log-sum-exp over the chunk's samples: ``[N, C, K] -> [N, K]`` (one or two of them)."""
    if link == "softmax":
        return (torch.logsumexp(torch.log_softmax(z, dim=-1), dim=1),)
    return torch.logsumexp(F.logsigmoid(z), dim=1), torch.logsumexp(F.logsigmoid(-z), dim=1)


def _chunk_grad(link: str, z: Tensor, shifted_outs: "tuple[Tensor, ...]", grads: "tuple[Tensor, ...]") -> Tensor:
    """d loss / d z for one chunk ``[N, C, K]``, given the outputs and their incoming gradients.

    ``shifted_outs`` are the outputs plus log S, i.e. log Σ_s p_s. Softmax: with
    w_{s,k} = p_{s,k} / (S p̄_k) and g = dL/d log p̄, dL/dz_{s,j} = g_j w_{s,j} - p_{s,j} Σ_k g_k w_{s,k}.
    Sigmoid: d log p̄_k/dz_{s,k} = σ(1-σ)/(S p̄_k); d log(1-p̄_k)/dz_{s,k} = -σ(1-σ)/(S(1-p̄_k)).
    Weights are formed in log space, so p̄ far below float32's range gives no inf/NaN.
    """
    if link == "softmax":
        log_p = torch.log_softmax(z, dim=-1)
        gw = grads[0].unsqueeze(1) * torch.exp(log_p - shifted_outs[0].unsqueeze(1))
        return gw.sub_(torch.exp(log_p).mul_(gw.sum(dim=-1, keepdim=True)))
    log_var = F.logsigmoid(z) + F.logsigmoid(-z)  # log σ(1-σ)
    return (grads[0].unsqueeze(1) * torch.exp(log_var - shifted_outs[0].unsqueeze(1))
            - grads[1].unsqueeze(1) * torch.exp(log_var - shifted_outs[1].unsqueeze(1)))


def _add(total: Optional[Tensor], part: Tensor) -> Tensor:
    return part if total is None else total.add_(part)


def _dot(a: Optional[Tensor], b: Optional[Tensor]) -> Tensor:
    return (a * b).sum() if a is not None else torch.zeros(())


class _ChunkedMonteCarlo(torch.autograd.Function):
    """Chunked MC log-average with recomputation in the backward pass (see module docstring).

    τ is folded into μ, d and the per-example factors up front (z is linear in them), so no
    ``[N, C, K]`` pass divides by τ; its gradient follows from Euler's identity
    dL/dτ = -(1/τ) Σ_x <dL/dx', x'> over the folded tensors x' = x/τ.
    """

    @staticmethod
    def forward(ctx, layout: NoiseLayout, noise: NoiseFn, mu, scale, factors, hom, proj, tau):  # type: ignore[override]
        ctx.layout, ctx.noise = layout, noise
        folded = [t / tau if t is not None else None for t in (mu, scale, factors)]
        acc: "Optional[list[Tensor]]" = None
        for start in range(0, layout.num_samples, layout.chunk_size):
            length = min(layout.chunk_size, layout.num_samples - start)
            z = _samples(layout.kind, *noise(start, length), *folded, hom, proj)[0]
            stats = _chunk_stats(layout.link, z)
            acc = list(stats) if acc is None else [torch.logaddexp(a, b) for a, b in zip(acc, stats)]
        log_s = math.log(layout.num_samples)
        outs = tuple(a - log_s for a in acc)
        # inputs and [N, K] outputs only: nothing of size S
        ctx.save_for_backward(*folded, hom, proj, tau, *outs)
        return outs if len(outs) > 1 else outs[0]

    @staticmethod
    def backward(ctx, *grads: Tensor):  # type: ignore[override]
        layout, noise = ctx.layout, ctx.noise
        mu, scale, factors, hom, proj, tau, *outs = ctx.saved_tensors
        log_s = math.log(layout.num_samples)
        shifted = tuple(o + log_s for o in outs)
        n_mu, n_scale, n_factors, n_hom, n_proj, n_tau = ctx.needs_input_grad[2:]
        n_mu, n_scale, n_factors = n_mu or n_tau, n_scale or n_tau, (n_factors or n_tau) and factors is not None
        g_mu = g_scale = g_factors = g_hom = g_proj = None
        for start in range(0, layout.num_samples, layout.chunk_size):
            length = min(layout.chunk_size, layout.num_samples - start)
            eps_f, eps_d = noise(start, length)
            z, noise_w, hom_noise = _samples(layout.kind, eps_f, eps_d, mu, scale, factors, hom, proj)
            gz = _chunk_grad(layout.link, z, shifted, grads)  # d loss / d z  [N, C, K]
            if n_mu:
                g_mu = _add(g_mu, gz.sum(dim=1))
            if n_proj:
                g_proj = _add(g_proj, gz.reshape(-1, gz.shape[-1]).t() @ noise_w.reshape(-1, noise_w.shape[-1]))
            gn = gz if proj is None else torch.matmul(gz, proj)  # d loss / d noise  [N, C, W]
            if n_scale:
                g_scale = _add(g_scale, (gn * eps_d).sum(dim=1))
            if layout.kind == "low_rank" and n_factors:
                g_factors = _add(g_factors, torch.matmul(gn.transpose(1, 2), eps_f))
            elif layout.kind == "parameter_efficient":
                if n_factors:
                    g_factors = _add(g_factors, (gn * hom_noise).sum(dim=1))
                if n_hom:
                    gv = gn * factors.unsqueeze(1)
                    if eps_f.shape[0] == 1:
                        g_hom = _add(g_hom, gv.sum(dim=0).t() @ eps_f[0])
                    else:
                        g_hom = _add(g_hom, gv.reshape(-1, gv.shape[-1]).t() @ eps_f.reshape(-1, eps_f.shape[-1]))
        g_tau = None
        if n_tau:  # Euler: z is homogeneous of degree 1 in the folded (mu, scale, factors)
            g_tau = -(_dot(g_mu, mu) + _dot(g_scale, scale) + _dot(g_factors, factors)).to(tau.dtype) / tau
        inv = 1.0 / tau
        unfold = [g * inv if g is not None else None for g in (g_mu, g_scale, g_factors)]
        return (None, None, *unfold, g_hom, g_proj, g_tau)


def monte_carlo_log_average(
    layout: NoiseLayout,
    noise: NoiseFn,
    mu: Tensor,
    scale: Tensor,
    factors: Optional[Tensor] = None,
    hom_factors: Optional[Tensor] = None,
    projection: Optional[Tensor] = None,
    temperature: Optional[Tensor] = None,
) -> "Tensor | tuple[Tensor, Tensor]":
    """Log of the MC-averaged tempered probabilities, exact in log space, memory flat in S.

    Args:
        layout: noise kind, link, S and chunk size.
        noise: ``noise(start, length)`` giving the standard normals of samples
            ``start .. start+length-1``; it must return the same tensors when called again
            (the backward pass regenerates the noise instead of storing it).
        mu, scale, factors, hom_factors, projection, temperature: as in :func:`chunk_logits`.

    Returns:
        softmax link: ``log p̄`` ``[N, K]``; sigmoid link: ``(log p̄, log(1 - p̄))``, both ``[N, K]``.

    Source: Collier et al. 2021, Eq. 4 (MC estimate of the softmax expectation); the log-sum-exp
    form is the numerically stable one (log-sum-exp of the sample log-probabilities).
    """
    if temperature is None:
        temperature = mu.new_ones(())
    return _ChunkedMonteCarlo.apply(layout, noise, mu, scale, factors, hom_factors, projection, temperature)


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
