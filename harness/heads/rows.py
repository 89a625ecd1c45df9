"""HET-XL's eager driver row by row: two products of B·S·W·K multiply-adds in the backward pass instead of three.

With noise on the W = D pre-logits (HET-XL), a chunk's samples are ``z_s = μ + P n_s`` with
``n_s = d ⊙ ε_s + V ε_R,s`` (low rank; ``v ⊙ (V_hom ε_R,s)`` parameter-efficient), and the backward pass needs,
besides the recomputed ``z`` (one product ``[C, W] x [W, K]``), the gradient of the class weights P,
``Σ_s g_s ⊗ n_s``, and the one of d, ``Σ_s (P g_s) ⊙ ε_s`` (g_s = d loss / d z_s): two more contractions of
the same size when the chunk holds many rows and few samples (:func:`harness.heads.chunk._chunk_backward`).
Both are read off one matrix per row,

    M = Σ_s ε_s ⊗ g_s  [W, K]:   d loss / d d_j = Σ_k M_jk P_kj,    d loss / d P (diagonal part) = (d ⊙ M)ᵀ,

and the factor terms from the small ``A = Σ_s ε_R,s ⊗ g_s`` ``[R, K]`` (d loss / d V = (A P)ᵀ, the factor
part of d loss / d P = (V A)ᵀ). M is one product ``[W, C] x [C, K]`` per row and chunk: it costs what one of
the two contractions does only when the chunk is long in samples (C of several hundred), so this driver
takes one row at a time with up to S samples per chunk, the noise drawn per row (:func:`~harness.heads.noise.
seeded_noise` with ``by_row=True``), and memory stays that of one ``[C, max(W, K)]`` chunk per thread (M is
formed in column blocks of about :data:`_BLOCK_ELEMENTS`). :func:`~harness.heads.planning.plan_noise` chooses
it (:data:`MIN_SAMPLES`); rows that the linear-space sums cannot hold go to the log-space kernels as in the
chunk-by-chunk driver (:mod:`harness.heads.sampling`).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from harness.heads.chunk import NoiseLayout, _product, _samples
from harness.heads.linear_space import Workspace, chunk_grad, chunk_sums, split_chunks

__all__ = ["MIN_SAMPLES", "backward", "linear_sums"]

#: the fewest samples per chunk (one row's) for which the planner goes row by row: below it M's passes cost
#: more than the product they save (measured on the bench's 2-core AMD EPYC Zen 4, ``results/bench/heads.md``)
MIN_SAMPLES = 384
#: elements of one column block of M (8 MiB of float32)
_BLOCK_ELEMENTS = 1 << 21


def _row(params: tuple, b: int) -> tuple:
    """(mu, scale, factors, hom, proj) with the per-row tensors cut to row ``b`` (views ``[1, ...]``)."""
    mu, scale, factors, hom, proj = params
    return (mu[b : b + 1], scale[b : b + 1], None if factors is None else factors[b : b + 1], hom, proj)


def _tiles(layout: NoiseLayout) -> "list[tuple[int, int]]":
    return [
        (s, min(layout.chunk_size, layout.num_samples - s)) for s in range(0, layout.num_samples, layout.chunk_size)
    ]


def _by_row(num_rows: int, device: torch.device, work) -> "list[tuple[Tensor, object]]":
    """``work(rows)`` over the rows split round robin over the torch threads (:func:`split_chunks`), each result
    with its rows' indices ``[M]``."""
    parts = split_chunks(list(range(num_rows)), device, lambda rows: (rows, work(rows)))
    return [(torch.tensor(rows, dtype=torch.int64, device=device), out) for rows, out in parts]


def linear_sums(layout: NoiseLayout, noise, params: tuple) -> "list[Tensor]":
    """Σ_s of the per-sample probabilities ``[N, K]`` (one, or two for sigmoid), row by row.

    Args:
        layout: as for :func:`~harness.heads.sampling.monte_carlo_log_average`; ``chunk_size`` samples per tile.
        noise: a :func:`~harness.heads.noise.seeded_noise` with ``by_row=True``.
        params: (mu ``[N, K]``, scale ``[N, W]``, factors, hom, proj ``[K, W]``), folded by τ.
    """
    mu = params[0]

    def work(rows: "list[int]") -> "list[Tensor]":
        ws, out = Workspace(), []
        for b in rows:
            p, acc = _row(params, b), None
            for start, length in _tiles(layout):
                z = _samples(layout.kind, *noise.row(b, start, length, ws), *p, ws, layout.product_dtype)[0]
                sums = chunk_sums(layout.link, z, ws)
                acc = list(sums) if acc is None else [a.add_(s) for a, s in zip(acc, sums)]
            out.append(acc)
        return [torch.cat(parts) for parts in zip(*out)]

    total = [torch.empty_like(mu) for _ in range(1 if layout.link == "softmax" else 2)]
    for rows, sums in _by_row(mu.shape[0], mu.device, work):
        for t, s in zip(total, sums):
            t.index_copy_(0, rows, s)
    return total


def _tile_grads(layout: NoiseLayout, eps: tuple, p: tuple, coeffs: tuple, need: set, ws: Workspace, shared: dict):
    """One row's and one tile's share of the gradients: the per-row ones returned, P's (transposed, ``[W, K]``)
    and V_hom's added to ``shared``."""
    mu, scale, factors, hom, proj = p
    low, (eps_f, eps_d) = layout.product_dtype, eps
    z, _, _ = _samples(layout.kind, eps_f, eps_d, mu, scale, factors, hom, proj, ws, low)
    gz = chunk_grad(layout.link, z, coeffs, ws)[0]  # d loss / d z  [C, K]
    out: dict = {}
    if "mu" in need:
        out["mu"] = gz.sum(0, keepdim=True)
    if "scale" in need:
        out["scale"] = scale.new_zeros(scale.shape)
    if need & {"scale", "proj"}:
        e, width, k = eps_d[0], scale.shape[1], gz.shape[1]
        block = max(1, _BLOCK_ELEMENTS // width)
        for lo in range(0, k, block):
            m = _product(e.t(), gz[:, lo : lo + block], low, ws, "m")  # M's columns lo.. [W, block], a buffer
            if "proj" in need:
                shared["proj"][:, lo : lo + block].addcmul_(m, scale[0].unsqueeze(1))
            if "scale" in need:
                out["scale"][0] += m.mul_(proj[lo : lo + block].t()).sum(1)
    if layout.kind != "diagonal" and need & {"factors", "hom", "proj"}:
        a = eps_f[0].t() @ gz  # [R, K]
        ap = (a @ proj).t() if need & {"factors", "hom"} else None  # (A P)ᵀ  [W, R]
        if layout.kind == "low_rank":
            if "factors" in need:
                out["factors"] = ap.unsqueeze(0)
            if "proj" in need:
                shared["proj"].addmm_(factors[0], a)
        else:  # parameter-efficient: V = diag(v) V_hom
            if "factors" in need:
                out["factors"] = (hom * ap).sum(1).unsqueeze(0)
            if "hom" in need:
                shared["hom"].addcmul_(factors[0].unsqueeze(1), ap)
            if "proj" in need:
                shared["proj"].addmm_(factors[0].unsqueeze(1) * hom, a)
    return out


def backward(layout: NoiseLayout, noise, params: tuple, coeffs: "tuple[Tensor, ...]", need: set) -> dict:
    """The gradients named in ``need`` (of mu, scale, factors, hom, proj) summed over every row and sample.

    Args:
        coeffs: the ``[N, K]`` coefficients of :func:`~harness.heads.linear_space.grad_coefficients` (rows
            left to the log-space kernels have 0).
        Others: as for :func:`linear_sums`.

    Returns:
        ``{name: gradient}``, each the shape of its input (``proj`` ``[K, W]``).
    """
    mu, scale, factors, hom, proj = params
    per_row = [name for name in ("mu", "scale", "factors") if name in need]

    def work(rows: "list[int]") -> "tuple[list[Tensor], dict]":
        ws, grads = Workspace(), {name: [] for name in per_row}
        shared = {"proj": proj.new_zeros(proj.t().shape)} if "proj" in need else {}
        if "hom" in need:
            shared["hom"] = torch.zeros_like(hom)
        for b in rows:
            p, c, acc = _row(params, b), tuple(x[b : b + 1] for x in coeffs), {}
            for start, length in _tiles(layout):
                part = _tile_grads(layout, noise.row(b, start, length, ws), p, c, need, ws, shared)
                for name, g in part.items():
                    acc[name] = g.clone() if name not in acc else acc[name].add_(g)
            for name in per_row:
                grads[name].append(acc[name])
        return [torch.cat(grads[name]) for name in per_row], shared

    total: dict = {name: torch.empty_like(t) for name, t in zip(("mu", "scale", "factors"), params[:3]) if name in need}
    shared_total: "Optional[dict]" = None
    for rows, (grads, shared) in _by_row(mu.shape[0], mu.device, work):
        for name, g in zip(per_row, grads):
            total[name].index_copy_(0, rows, g)
        shared_total = shared if shared_total is None else {k: v.add_(shared[k]) for k, v in shared_total.items()}
    if "proj" in need:
        total["proj"] = shared_total["proj"].t()
    if "hom" in need:
        total["hom"] = shared_total["hom"]
    return total
