"""One chunk of the HET head's Monte Carlo average: its logit samples, their log-space statistics and its share
of the gradients.

:mod:`harness.heads.sampling` loops over the chunks (a Python loop eager, one ``torch.while_loop`` when compiling);
for each chunk of C samples the functions here form the untempered samples ``μ + P n`` ``[N, C, K]`` from the
chunk's noise (:func:`chunk_logits`: tempered), reduce them to log Σ_s of the per-sample probabilities with the
log-space kernels (exact for any p̄; Collier et al., CVPR 2021, Eq. 4-6), and in the backward pass recompute them
to give the chunk's part of d loss / d (μ, d, V, V_hom, P). The eager driver's linear-space kernels, about half the
passes, are :mod:`harness.heads.linear_space`; their d loss / d z enters here (:func:`_chunk_backward`'s ``coeffs``).
:class:`NoiseLayout` is the static description of a call that every chunk reads.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.heads.linear_space import Workspace, chunk_grad

#: devices without autocast (shapes only: torch.autocast fails there with 'unsupported scalarType'); a plain name test,
#: which torch.compile traces without a graph break (torch 2.11's dynamo breaks on torch.amp.is_autocast_available)
_NO_AUTOCAST = ("meta",)


def full_precision(device_type: str):
    """``torch.autocast(device_type, enabled=False)``, the head's float32 region; nothing on a device without
    autocast (``meta``: shapes only, where torch.autocast fails with 'unsupported scalarType')."""
    if device_type in _NO_AUTOCAST:
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def autocast_dtype(device_type: str) -> Optional[torch.dtype]:
    """The dtype of the enclosing ``torch.autocast`` on ``device_type`` (bf16 or fp16), or None outside one (or on
    a device without autocast, as ``meta``)."""
    if device_type in _NO_AUTOCAST or not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


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


def _product(
    a: Tensor, b: Tensor, low: Optional[torch.dtype], ws: "Optional[Workspace]" = None, name: str = ""
) -> Tensor:
    """``a @ b``, computed in ``low`` (bf16, fp16) when given and returned in ``a``'s dtype; with a workspace ``ws``
    the low-precision copies and the result are its buffers ``<name>_a``, ``<name>_b``, ``<name>_ab`` and ``<name>``
    (no new memory per chunk: fresh tensors of a few MiB each chunk grow a process's resident memory)."""
    if low is None:
        return torch.matmul(a, b, out=_buffer(ws, name, (*a.shape[:-1], b.shape[-1]), a) if name else None)
    if ws is None:
        return torch.matmul(a.to(low), b.to(low)).to(a.dtype)
    like = torch.empty(0, dtype=low, device=a.device)
    a_low, b_low = _low_copy(a, ws, name + "_a", like), _low_copy(b, ws, name + "_b", like)
    shape = (*a.shape[:-1], b.shape[-1])
    ab = torch.matmul(a_low, b_low, out=ws.get(name + "_ab", shape, like))
    return ws.get(name, shape, a).copy_(ab)


def _low_copy(x: Tensor, ws: "Workspace", name: str, like: Tensor) -> Tensor:
    """``x`` in ``like``'s dtype, in the workspace's buffer ``name``; a transposed matrix (``P.t()``, ``ε.t()``) is
    copied in its memory order and returned transposed again (a strided copy would gather element by element)."""
    if x.dtype == like.dtype:
        return x
    if x.dim() == 2 and not x.is_contiguous() and x.t().is_contiguous():
        return ws.get(name, x.t().shape, like).copy_(x.t()).t()
    return ws.get(name, x.shape, like).copy_(x)


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
    noise = target  # z = n Pᵀ: in the autocast dtype when ``low`` is given, the result back in fp32 for the sums
    z = _product(noise, projection.t(), low, ws, "z")
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
