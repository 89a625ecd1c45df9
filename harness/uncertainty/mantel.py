"""Mantel tests over class pairs: does one symmetric K x K matrix of pair values follow another?

Used by the Σ analysis (:func:`harness.uncertainty.covariance.transition_test`: the noise the model learned
between two classes against how often people swap their labels) and by the study's read-out
(:mod:`harness.experiment.sigma`).

- :func:`mantel`: Spearman ρ over the K(K − 1)/2 pairs, tested by permuting the class labels of one matrix
  (rows and columns together), exactly over all K! permutations when there are few enough;
- :func:`partial_mantel`: the same given a third matrix (ranks regressed on it, residuals permuted as a matrix);
- :func:`without_class_effects`: a pair matrix less its additive class effects (what is particular to a pair).

Sources: Mantel 1967, Cancer Research 27(2):209-220; Legendre & Legendre 2012, Numerical Ecology, 3rd ed.,
Sec. 10.5; Dietz 1983, Systematic Zoology 32(1):21-26; Smouse, Long & Sokal 1986, Systematic Zoology
35(4):627-632.
"""

from __future__ import annotations

from itertools import permutations
from math import factorial

import numpy as np

_ALTERNATIVES = ("two-sided", "greater", "less")
_PERM_CHUNK = 1 << 21  # permuted pair values held at once (16 MB of float64)


def _square(x: np.ndarray, name: str) -> np.ndarray:
    m = np.asarray(x, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"{name} must be a square K x K matrix, got shape {m.shape}")
    off = ~np.eye(len(m), dtype=bool)
    if not np.all(np.isfinite(m[off])):
        raise ValueError(
            f"{name} holds NaN/inf off the diagonal; every class pair needs a value (the diagonal is ignored)"
        )
    if not np.allclose(m[off], m.T[off], rtol=1e-9, atol=1e-12):
        raise ValueError(
            f"{name} is not symmetric; pass one value per unordered pair, e.g. T + T.T for a transition matrix T"
        )
    return m


def mantel(x: np.ndarray, y: np.ndarray, n_perm: int = 9999, seed: int = 0, alternative: str = "two-sided") -> dict:
    """Mantel test of two symmetric K x K matrices, on ranks: Spearman ρ between their upper-triangle
    entries (the K(K − 1)/2 class pairs; diagonals ignored), against the null distribution obtained by
    permuting the class labels of one matrix, rows and columns together (``y[π][:, π]``), which keeps the
    dependence among pairs that share a class (permuting the pairs themselves would not, and gives
    p-values that are too small).

    p-values: ``two-sided`` counts |ρ_π| >= |ρ|, ``greater`` ρ_π >= ρ, ``less`` ρ_π <= ρ (up to 1e-12 for
    ties in floating point). When K! <= ``n_perm`` every permutation is enumerated (``exact``, the identity
    among them) and p = count / K!; otherwise ``n_perm`` uniform random permutations
    (``numpy.random.default_rng(seed)``) give p = (1 + count) / (1 + n_perm).

    Args:
        x, y: ``[K, K]`` symmetric matrices, K >= 3, finite off the diagonal (any unit; only ranks matter).
        n_perm: random permutations (>= 1); also the largest K! enumerated exactly.
        seed: random stream of the permutations.
        alternative: ``two-sided`` (default), ``greater`` (ρ > 0) or ``less``.

    Returns:
        ``{"rho", "p_value", "n_perm" (permutations used: K! when exact), "exact", "alternative",
        "n_pairs"}``.

    Raises:
        ValueError: not square, different K, K < 3, asymmetric, NaN/inf off the diagonal, constant
            off-diagonal values (ρ undefined), a bad ``alternative`` or ``n_perm``.

    Sources: Mantel 1967, "The detection of disease clustering and a generalized regression approach",
    Cancer Research 27(2):209-220; Legendre & Legendre 2012, Numerical Ecology, 3rd ed., Sec. 10.5.1
    (permuting objects, not distances); the rank (Spearman) form: Dietz 1983, "Permutation tests for
    association between two distance matrices", Systematic Zoology 32(1):21-26.
    """
    from scipy import stats

    xm, ym = _square(x, "x"), _square(y, "y")
    k = len(xm)
    if ym.shape != xm.shape:
        raise ValueError(f"x is {xm.shape} and y {ym.shape}; pass two matrices over the same K classes")
    if k < 3:
        raise ValueError(f"K = {k}: a Mantel test needs at least 3 classes (3 pairs)")
    if alternative not in _ALTERNATIVES:
        raise ValueError(f"alternative must be one of {_ALTERNATIVES}, got {alternative!r}")
    _check_n_perm(n_perm)
    iu, ju = np.triu_indices(k, 1)
    rx, ry = stats.rankdata(xm[iu, ju]), stats.rankdata(ym[iu, ju])
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        raise ValueError("one matrix has the same value for every pair; Spearman ρ is undefined")
    return _permutation_test(rx, ry, k, n_perm, seed, alternative)


def _check_n_perm(n_perm: int) -> None:
    """The permutations of a Mantel test (:func:`mantel`, :func:`partial_mantel`): a whole number >= 1."""
    if isinstance(n_perm, bool) or not isinstance(n_perm, (int, np.integer)) or n_perm < 1:
        raise ValueError(f"n_perm must be an integer >= 1, got {n_perm!r}; 9999 is usual")


def _permutation_test(vx: np.ndarray, vy: np.ndarray, k: int, n_perm: int, seed: int, alternative: str) -> dict:
    """Pearson correlation of the pair values ``vx`` and ``vy`` (upper triangle, ``np.triu_indices(k, 1)`` order)
    against its null with the classes of ``vy`` permuted (all K! permutations when K! <= ``n_perm``)."""
    iu, ju = np.triu_indices(k, 1)
    cx = (vx - vx.mean()) / np.linalg.norm(vx - vx.mean())
    cy = np.zeros((k, k))  # centred, scaled values of y's pairs: a permutation only moves them among the pairs
    cy[iu, ju] = (vy - vy.mean()) / np.linalg.norm(vy - vy.mean())
    cy += cy.T

    def rho(perms: np.ndarray) -> np.ndarray:  # [P, K] -> [P]: ρ of x against y[π][:, π]
        return cy[perms[:, iu], perms[:, ju]] @ cx

    observed = float(rho(np.arange(k)[None])[0])
    exact = factorial(k) <= n_perm
    total = factorial(k) if exact else int(n_perm)
    rng, rows, count = np.random.default_rng(seed), max(1, _PERM_CHUNK // len(iu)), 0
    perm_iter = permutations(range(k)) if exact else None
    for start in range(0, total, rows):
        size = min(rows, total - start)
        if exact:
            perms = np.array([next(perm_iter) for _ in range(size)])
        else:
            perms = rng.permuted(np.tile(np.arange(k), (size, 1)), axis=1)
        r = rho(perms)
        if alternative == "two-sided":
            count += int(np.sum(np.abs(r) >= abs(observed) - 1e-12))
        elif alternative == "greater":
            count += int(np.sum(r >= observed - 1e-12))
        else:
            count += int(np.sum(r <= observed + 1e-12))
    p = count / total if exact else (1 + count) / (1 + total)
    return {
        "rho": observed,
        "p_value": float(p),
        "n_perm": total,
        "exact": exact,
        "alternative": alternative,
        "n_pairs": len(iu),
    }


def partial_mantel(x: np.ndarray, y: np.ndarray, z: np.ndarray, n_perm: int = 9999, seed: int = 0) -> dict:
    """Partial Mantel test on ranks: the association of ``x`` and ``y`` given ``z`` (three symmetric K x K
    matrices). The upper-triangle ranks of x and of y are each regressed on those of z (least squares with an
    intercept); ρ is the Pearson correlation of the two residual vectors (a partial Spearman correlation over the
    pairs), tested two-sided by permuting the classes of y's residual matrix (rows and columns together).

    Returns: as :func:`mantel` (``rho``, ``p_value``, ``n_perm``, ``exact``, ``alternative``, ``n_pairs``).
    Raises ValueError: as :func:`mantel`, for any of the three matrices; a z whose pair ranks determine x's or y's
    (the residual is 0: the partial correlation is undefined).
    Sources: Smouse, Long & Sokal 1986, "Multiple regression and correlation extensions of the Mantel test of
    matrix correspondence", Systematic Zoology 35(4):627-632; Legendre & Legendre 2012, Numerical Ecology, 3rd
    ed., Sec. 10.5.2 (residuals permuted as a matrix).
    """
    from scipy import stats

    mats = [_square(m, name) for m, name in ((x, "x"), (y, "y"), (z, "z"))]
    k = len(mats[0])
    if any(m.shape != mats[0].shape for m in mats) or k < 3:
        raise ValueError(f"x, y and z must be K x K over the same K >= 3 classes, got {[m.shape for m in mats]}")
    _check_n_perm(n_perm)
    iu, ju = np.triu_indices(k, 1)
    rx, ry, rz = (stats.rankdata(m[iu, ju]) for m in mats)
    if min(np.ptp(rx), np.ptp(ry), np.ptp(rz)) == 0:
        raise ValueError("one matrix has the same value for every pair; the partial correlation is undefined")
    design = np.column_stack([np.ones_like(rz), rz])

    def residual(v: np.ndarray, name: str) -> np.ndarray:
        out = v - design @ np.linalg.lstsq(design, v, rcond=None)[0]
        if np.linalg.norm(out) <= 1e-9 * np.linalg.norm(v - v.mean()):
            raise ValueError(
                f"the pair ranks of {name} are a linear function of z's (nothing is left of {name} once z is "
                f"regressed out), so the partial correlation of x and y given z is undefined: give a z that does "
                f"not determine {name} (z = {name}, or a monotone function of it, is one)"
            )
        return out

    return _permutation_test(residual(rx, "x"), residual(ry, "y"), k, n_perm, seed, "two-sided")


def without_class_effects(values: np.ndarray) -> np.ndarray:
    """A symmetric K x K matrix of pair values with the additive class effects removed: the least-squares fit
    v_ab ≈ μ + c_a + c_b over the pairs a < b is subtracted (the diagonal is set to 0). What remains is what is
    particular to a pair, not to its two classes (a class whose pairs all move together leaves nothing).
    Raises ValueError for a non-square matrix or K < 4 (the fit needs more pairs than parameters)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 2 or v.shape[0] != v.shape[1] or len(v) < 4:
        raise ValueError(f"values must be a K x K matrix with K >= 4, got shape {v.shape}")
    k = len(v)
    iu, ju = np.triu_indices(k, 1)
    design = np.zeros((len(iu), k + 1))
    design[:, 0] = 1.0
    design[np.arange(len(iu)), 1 + iu] = 1.0
    design[np.arange(len(iu)), 1 + ju] = 1.0
    y = v[iu, ju]
    res = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    out = np.zeros((k, k))
    out[iu, ju] = res
    return out + out.T
