"""The noise covariance of heteroscedastic heads: its one assembly, and its analysis (paper Sec. 4.1, Table 4, Figure 2).

Σ(x) itself is assembled in one place, :mod:`harness.heads.covariance`; this module reads it through the
head (``covariance_factors``, ``covariance``).

- :class:`CovarianceAccumulator`: the average logit covariance Σ̄ = (1/N) Σ_x Σ(x) over an
  evaluation set, accumulated from the factors (V(x) ``[B, W, R]`` and d(x)) in row blocks, so no
  per-example K x K matrix is ever formed (K = 21,843 keeps one K x K float32 sum, 1.9 GB).
- :func:`top_pairs`: the class pairs with the largest |Σ̄_kl| (Table 4), found block by block.
- :func:`confusion_ranks`: for examples the het model gets right and the hom model wrong, the rank
  of the hom prediction among the other classes sorted by |Σ_c,j(x)| with the true class c
  (Figure 2), from one covariance row per example; with ``by="mean"`` the baseline ranking by the
  mean logits μ(x) alone.
- :class:`PairNoise` and :func:`transition_test`: whether the noise the model learned between two
  classes follows how often people swap their labels (Spearman ρ over the class pairs between the
  transition mass T_ab + T_ba and the signed correlation of u_a, u_b, the primary statistic, or
  Var(u_a − u_b), each with a two-sided :func:`~harness.uncertainty.mantel.mantel` test that permutes class labels).
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np
import torch

from harness.heads import HeteroscedasticHead
from harness.uncertainty.mantel import mantel

#: largest K for which the per-pair noise statistics (dense Σ(x) per batch) are computed
PAIR_NOISE_MAX_CLASSES = 200


class CovarianceAccumulator:
    """Running sum of Σ(x) over examples, in the head's noise space W, projected to logits at the end.

    Args:
        head: a heteroscedastic head (any covariance but ``none``).
        block: rows of the W x W sum updated at once (bounds the temporary ``[block, W]``).

    Raises:
        ValueError: the head has no noise covariance.
    """

    def __init__(self, head: "HeteroscedasticHead", block: int = 2048) -> None:
        if head.covariance_type == "none":
            raise ValueError("covariance analysis needs a heteroscedastic head (covariance != 'none')")
        self.head, self.block = head, block
        w = head.noise_width
        self.sum = torch.zeros(w, w, dtype=torch.float64 if w <= 8192 else torch.float32)
        self.count = 0

    @torch.no_grad()
    def update(self, features: torch.Tensor) -> None:
        """Add Σ(x) of a batch of pre-logit features ``[B, D]``."""
        factors, d = self.head.covariance_factors(features)  # Σ_W(x) = F Fᵀ + diag(d²)
        factors = factors.to(self.sum)
        if d is not None:
            self.sum.diagonal().add_(d.to(self.sum).square().sum(0))
        flat = factors.transpose(0, 1).reshape(factors.shape[1], -1)  # [W, B*R]
        for r0 in range(0, flat.shape[0], self.block):
            self.sum[r0 : r0 + self.block] += flat[r0 : r0 + self.block] @ flat.T
        self.count += features.shape[0]

    def mean(self, tempered: bool = False) -> np.ndarray:
        """Σ̄ ``[K, K]`` of the logits (HET-XL: L Σ̄' Lᵀ with the class weights L), optionally / τ²."""
        if not self.count:
            raise ValueError("no examples were added")
        sigma = self.sum / self.count
        if self.head.noise_space == "pre_logits":
            proj = self.head.loc.weight.detach().to(sigma)
            sigma = proj @ sigma @ proj.T
        if tempered:
            sigma = sigma / float(self.head.temperature) ** 2
        return sigma.cpu().numpy()


def top_pairs(sigma: np.ndarray, class_names: Sequence[str], k: int = 10, block: int = 4096) -> "list[dict]":
    """The ``k`` off-diagonal pairs (i < j) of ``sigma`` ``[K, K]`` with the largest |Σ_ij| (paper Table 4).

    Searched one row block at a time (a top-k per block, then merged).

    Returns:
        ``[{"class_a", "class_b", "covariance": Σ_ij, "correlation": Σ_ij / sqrt(Σ_ii Σ_jj)}]``, largest
        |Σ_ij| first; the correlation is NaN where a variance is 0.
    """
    n = sigma.shape[0]
    cand: "list[tuple[float, int, int]]" = []
    for r0 in range(0, n, block):
        rows = np.abs(sigma[r0 : r0 + block])
        ii, jj = np.indices(rows.shape)
        ii = ii + r0
        mask = jj > ii
        vals, ri, cj = rows[mask], ii[mask], jj[mask]
        if not len(vals):
            continue
        top = np.argpartition(-vals, min(k, len(vals) - 1))[:k]
        cand += [(float(vals[t]), int(ri[t]), int(cj[t])) for t in top]
    cand.sort(key=lambda c: -c[0])
    var = np.diag(sigma)

    def corr(i: int, j: int) -> float:
        scale = float(np.sqrt(var[i] * var[j]))
        return float(sigma[i, j]) / scale if scale > 0 else float("nan")

    return [
        {
            "class_a": class_names[i],
            "class_b": class_names[j],
            "covariance": float(sigma[i, j]),
            "correlation": corr(i, j),
        }
        for _, i, j in cand[:k]
    ]


@torch.no_grad()
def confusion_ranks(
    head: "HeteroscedasticHead",
    batches: Iterable,
    het_logits: np.ndarray,
    hom_logits: np.ndarray,
    index: np.ndarray,
    by: str = "covariance",
) -> np.ndarray:
    """Figure 2: ranks (1 = the most covarying class) of the hom model's wrong prediction among the
    classes j != c sorted by |Σ_cj(x)|, over examples with het right and hom wrong.

    Args:
        head: the het model's head.
        batches: ``(features [B, D], targets [B], index [B])`` of the evaluation split.
        het_logits, hom_logits: ``[N, K]`` predictions of both models, rows ordered as ``index``.
        index: ``[N]`` example indices of those rows.
        by: ``covariance`` (|Σ_cj(x)|, the paper's statistic) or ``mean`` (the baseline: the het
            model's mean logits μ_j(x) alone, no covariance).

    Returns:
        ``[n]`` int ranks in 1..K-1 (per-example Σ(x); ties count in the example's favour).
    """
    row_of = {int(i): r for r, i in enumerate(index)}
    ranks = []
    for feats, targets, idx in batches:
        for b, (c, i) in enumerate(zip(np.asarray(targets).tolist(), np.asarray(idx).tolist())):
            r = row_of.get(int(i))
            if r is None:
                continue
            het_right = int(het_logits[r].argmax()) == c
            wrong = int(hom_logits[r].argmax())
            if not het_right or wrong == c:
                continue
            if by == "mean":
                row = head.mean_logits(feats[b : b + 1])[0].double().cpu().numpy()
            else:
                row = head.covariance(feats[b : b + 1], rows=torch.tensor([c])).abs()[0, 0].cpu().numpy()
            row[c] = -np.inf
            ranks.append(1 + int((row > row[wrong]).sum()))
    return np.asarray(ranks, dtype=np.int64)


class PairNoise:
    """Per class pair (a, b), the het model's noise between the two classes averaged over the
    examples labelled a or b: Var(u_a − u_b) = Σ_aa + Σ_bb − 2Σ_ab (how easily noise swaps their
    order), the correlation Σ_ab / sqrt(Σ_aa Σ_bb), and its absolute value (the paper's Table 4
    ranks pairs by |covariance|: strong ties of either sign). Σ(x) is the untempered latent
    covariance; dense ``[B, K, K]`` per batch, so for K up to a few hundred."""

    STATISTICS = ("var_diff", "correlation", "abs_correlation")

    def __init__(self, num_classes: int) -> None:
        k = num_classes
        self.sums = np.zeros((len(self.STATISTICS), k, k, k))  # [statistic, label, a, b]
        self.count = np.zeros(k)

    @torch.no_grad()
    def update(self, head: "HeteroscedasticHead", features: torch.Tensor, targets: np.ndarray) -> None:
        sigma = head.covariance(features).double().cpu().numpy()  # [B, K, K]
        diag = np.diagonal(sigma, axis1=1, axis2=2)
        corr = sigma / np.sqrt(diag[:, :, None] * diag[:, None, :])
        y = np.asarray(targets, dtype=np.int64)
        for i, value in enumerate((diag[:, :, None] + diag[:, None, :] - 2 * sigma, corr, np.abs(corr))):
            np.add.at(self.sums[i], y, value)
        np.add.at(self.count, y, 1.0)

    def pairs(self) -> "list[tuple]":
        """``(a, b, mean Var(u_a − u_b), mean correlation, mean |correlation|)`` for every a < b with
        examples."""
        out = []
        k = len(self.count)
        for a in range(k):
            for b in range(a + 1, k):
                n = self.count[a] + self.count[b]
                if n:
                    out.append((a, b, *(float((s[a, a, b] + s[b, a, b]) / n) for s in self.sums)))
        return out


def transition_test(transition: np.ndarray, pair_noise: "list[tuple]", n_resamples: int = 9999, seed: int = 0) -> dict:
    """Does the het model's noise follow the label noise? Over the class pairs, the Spearman ρ between
    the symmetric transition mass T_ab + T_ba (T[c, j] = P(noisy j | clean c), estimated on the training
    images) and each statistic of :class:`PairNoise`, with a two-sided :func:`mantel` test (class labels
    permuted, not pairs). The primary statistic is ``correlation``, the signed mean correlation of u_a and
    u_b: positive ρ means classes people confuse *share* noise (move together), negative that the noise
    swaps them. ``var_diff`` (Var(u_a − u_b), how easily noise swaps their order) and ``abs_correlation``
    (the paper's Table 4 ranks pairs by |covariance|) are secondary.

    Classes that share a pair without examples (two classes absent from the evaluation set) are left out
    of the matrices; their pairs stay in ``pairs``.

    Args:
        transition: ``[K, K]`` row-stochastic T.
        pair_noise: :meth:`PairNoise.pairs`.
        n_resamples: permutations of :func:`mantel` (all K! when K! <= n_resamples).
        seed: their random stream.

    Returns:
        ``{"pairs": [{a, b, transition, var_diff, correlation, abs_correlation}], "<statistic>":
        {rho, p_value} for each statistic, "primary": "correlation", "secondary": [...], "alternative":
        "two-sided", "exact", "n_pairs" (pairs tested), "n_classes", "n_resamples"}``.

    Raises:
        ValueError: ``transition`` not square, pair classes outside it, fewer than 3 classes with pairs.
    """
    t = np.asarray(transition, dtype=np.float64)
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        raise ValueError(f"transition must be a square K x K matrix, got shape {t.shape}")
    k = len(t)
    if any(not 0 <= p[0] < p[1] < k for p in pair_noise):
        raise ValueError(
            f"pair_noise holds pairs outside 0 <= a < b < K = {k}; pass PairNoise.pairs() of a "
            "model over the transition's classes"
        )
    mass = np.array([t[p[0], p[1]] + t[p[1], p[0]] for p in pair_noise])
    names = PairNoise.STATISTICS
    out: dict = {
        "pairs": [
            {"a": p[0], "b": p[1], "transition": float(m), **dict(zip(names, p[2:]))} for p, m in zip(pair_noise, mass)
        ],
        "primary": "correlation",
        "secondary": ["var_diff", "abs_correlation"],
        "alternative": "two-sided",
        "n_resamples": n_resamples,
    }
    have = {(p[0], p[1]) for p in pair_noise}
    classes = sorted({c for p in have for c in p})
    dropped = {c for a in classes for b in classes if a < b and (a, b) not in have for c in (a, b)}
    keep = [c for c in classes if c not in dropped]
    pos = {c: i for i, c in enumerate(keep)}
    used = [(i, p) for i, p in enumerate(pair_noise) if p[0] in pos and p[1] in pos]
    ia = [pos[p[0]] for _, p in used]
    ib = [pos[p[1]] for _, p in used]

    def matrix(values: np.ndarray) -> np.ndarray:
        m = np.zeros((len(keep), len(keep)))
        m[ia, ib] = m[ib, ia] = values
        return m

    mass_m = matrix(mass[[i for i, _ in used]])
    for j, key in enumerate(names):
        res = mantel(mass_m, matrix(np.array([p[2 + j] for _, p in used])), n_perm=n_resamples, seed=seed)
        out[key] = {"rho": res["rho"], "p_value": res["p_value"]}
        out.update(exact=res["exact"], n_pairs=res["n_pairs"])
    out["n_classes"] = len(keep)
    return out


def analyse(
    head: "HeteroscedasticHead",
    batches: Iterable,
    class_names: Sequence[str],
    top: int = 10,
    het_logits: Optional[np.ndarray] = None,
    hom_logits: Optional[np.ndarray] = None,
    index: Optional[np.ndarray] = None,
    tempered: bool = False,
) -> dict:
    """Table 4 and (given both models' logits) Figure 2 in one pass over ``batches``.

    Table 4 uses the average Σ̄ = (1/N) Σ_x Σ(x) (divided by τ² when ``tempered``); Figure 2 ranks
    with each example's own Σ(x) (:func:`confusion_ranks`; ranks do not depend on τ).

    Returns:
        ``{"num_examples", "top_pairs" (:func:`top_pairs` of Σ̄), "ranks" (list, or None),
        "num_het_right_hom_wrong", "num_classes", "tempered", "temperature" (τ)}``.
    """
    acc = CovarianceAccumulator(head)
    ranks: "list[int]" = []
    mean_ranks: "list[int]" = []
    want_ranks = het_logits is not None and hom_logits is not None and index is not None
    pairs = PairNoise(len(class_names)) if len(class_names) <= PAIR_NOISE_MAX_CLASSES else None
    for feats, targets, idx in batches:
        acc.update(feats)
        if pairs is not None and np.asarray(targets).ndim == 1:
            pairs.update(head, feats, targets)
        if want_ranks:
            ranks += confusion_ranks(head, [(feats, targets, idx)], het_logits, hom_logits, index).tolist()
            mean_ranks += confusion_ranks(
                head, [(feats, targets, idx)], het_logits, hom_logits, index, by="mean"
            ).tolist()
    sigma = acc.mean(tempered)
    return {
        "num_examples": acc.count,
        "top_pairs": top_pairs(sigma, class_names, top),
        "ranks": ranks if want_ranks else None,
        "mean_logit_ranks": mean_ranks if want_ranks else None,
        "num_het_right_hom_wrong": len(ranks) if want_ranks else None,
        "pair_noise": pairs.pairs() if pairs is not None and pairs.count.sum() else None,
        "num_classes": len(class_names),
        "tempered": tempered,
        "temperature": float(head.temperature),
    }


def rank_summary(ranks: Sequence[int], mean_logit_ranks: Sequence[int], num_classes: int) -> dict:
    """Summary of Figure 2's ranks (:func:`confusion_ranks`): the share of rank 1 and the mean rank, for the
    covariance ranking and the μ-only baseline, with what a uniformly random ranking of the K − 1 other
    classes gives (share 1/(K − 1), mean K/2)."""
    r, mu = np.asarray(ranks), np.asarray(mean_logit_ranks)
    others = num_classes - 1
    return {
        "share_rank_1": float((r == 1).mean()),
        "uniform_share_rank_1": 1.0 / others,
        "mean_rank": float(r.mean()),
        "uniform_mean_rank": (others + 1) / 2,
        "mean_logit_share_rank_1": float((mu == 1).mean()),
        "mean_logit_mean_rank": float(mu.mean()),
    }
