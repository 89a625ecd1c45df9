"""The noise covariance of a heteroscedastic head, Σ(x) = V(x)V(x)ᵀ + diag(d(x)²) (paper Sec. 3, Eq. 7):
the one place it is assembled from the head's factors. The head's ``covariance_factors`` and ``covariance``
call it; the analyses of :mod:`harness.uncertainty.covariance` read Σ through the head."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor


def noise_factors(
    form: Optional[str],
    scale: Tensor,
    factors: Optional[Tensor],
    hom_factors: Optional[Tensor],
    shared_scalar: bool = False,
) -> "tuple[Tensor, Optional[Tensor]]":
    """The factors of the noise covariance in the noise space W: Σ_W(x) = F Fᵀ + diag(d²) (paper Eq. 7).

    Args:
        form: the variant's noise form (:data:`~harness.heads.variants.FORMS`): ``"diagonal" | "low_rank" |
            "parameter_efficient"``.
        scale: d(x) ``[N, W]``, the diagonal standard deviations.
        factors: V(x) ``[N, W, R]`` (``low_rank``), v(x) ``[N, W]`` (``parameter_efficient``), else None.
        hom_factors: V ``[W, R]`` of ``parameter_efficient`` (else None).
        shared_scalar: the JAX reference's rank-1 "diagonal" (edward2 ``edward2/jax/nn/heteroscedastic_lib.py``):
            d joins F as one more column and None is returned in its place.

    Returns:
        ``(F [N, W, R'], d [N, W] or None)`` with R' = R (``low_rank``: V(x); PE: diag(v(x))·V) or 0 (diagonal).
    """
    if form == "low_rank":
        f = factors
    elif form == "parameter_efficient":
        f = factors.unsqueeze(-1) * hom_factors
    else:
        f = scale.new_zeros(scale.shape[0], scale.shape[1], 0)
    if shared_scalar:
        return torch.cat([f, scale.unsqueeze(-1)], dim=-1), None
    return f, scale


def covariance_block(
    factors: Tensor,
    d: Optional[Tensor],
    num_classes: int,
    rows: Optional[Tensor] = None,
    cols: Optional[Tensor] = None,
    projection: Optional[Tensor] = None,
    max_elements: int = 1 << 27,
) -> Tensor:
    """Block ``Σ(x)[rows][:, cols]`` of the logit covariance, ``[N, len(rows), len(cols)]``, from the factors.

    Σ(x) = F Fᵀ + diag(d²) (HET; paper Eq. 7); HET-XL: L (F Fᵀ + diag(d²)) Lᵀ with L = ``projection``,
    the ``[K, D]`` class weights (Collier, Jenatton et al., ICLR 2023, Sec. 3). Costs O(N·|rows|·|cols|·R):
    the full K x K matrix is never formed unless asked for.

    Args:
        factors, d: :func:`noise_factors`' output (``[N, W, R']``, ``[N, W]`` or None).
        num_classes: K; ``rows``/``cols`` (LongTensor class indices) default to all K.
        projection: ``[K, W]`` for HET-XL, None for HET (W = K).
        max_elements: refuse a larger block (raise it to build one on purpose).

    Raises:
        ValueError: the block has more than ``max_elements`` elements (checked before any work).
    """
    idx = torch.arange(num_classes, device=factors.device)
    rows = idx if rows is None else torch.as_tensor(rows, device=factors.device)
    cols = idx if cols is None else torch.as_tensor(cols, device=factors.device)
    n_el = factors.shape[0] * rows.numel() * cols.numel()
    if n_el > max_elements:
        raise ValueError(
            f"covariance block of {factors.shape[0]}x{rows.numel()}x{cols.numel()} = {n_el} elements exceeds "
            f"max_elements={max_elements}; pass rows=/cols= to compute it in blocks, or raise max_elements"
        )
    if projection is not None:
        fr, fc = torch.matmul(projection[rows], factors), torch.matmul(projection[cols], factors)
        cov = fr @ fc.transpose(1, 2)
        if d is not None:
            cov = cov + (projection[rows] * d.square().unsqueeze(1)) @ projection[cols].t()
        return cov
    cov = factors[:, rows] @ factors[:, cols].transpose(1, 2)
    if d is not None:
        same = (rows.unsqueeze(1) == cols.unsqueeze(0)).to(cov.dtype)
        cov = cov + same * d[:, rows].square().unsqueeze(-1)
    return cov
