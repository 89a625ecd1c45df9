"""Statistics that decide whether a difference between two methods is real.

Noise over training seeds: :func:`t_interval`, :func:`paired_difference`. Noise over test examples
(models scored on the same examples): :func:`mcnemar_exact` (accuracy), :func:`paired_bootstrap`,
:func:`bootstrap_replicates` and :func:`bootstrap_std` (any metric). Both together, for a claim about the
method rather than about the trained models: :func:`method_interval`. A family of verdicts:
:func:`holm`. :func:`verdict` reads an interval, never the sign of the mean alone.
Bad input raises ``ValueError`` with a message that names the fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats as sps

_CHUNK_ELEMENTS = 1 << 21  # indices per chunk of the bootstrap index matrix (16 MB of int64)
Arrays = Sequence[Any]  # per-example arrays sharing their first axis (N)


def _raw(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _check_confidence(confidence: float) -> float:
    c = float(confidence)
    if not 0.0 < c < 1.0:  # also rejects NaN
        raise ValueError(f"confidence must lie strictly in (0, 1), got {confidence!r}; pass e.g. 0.95 for 95%")
    return c


def _check_alpha(alpha: float) -> float:
    """A test's level ``alpha`` (the false-positive rate), strictly in (0, 1)."""
    a = float(alpha)
    if not 0.0 < a < 1.0:  # also rejects NaN
        raise ValueError(f"alpha must lie strictly in (0, 1), got {alpha!r}; pass e.g. 0.05")
    return a


def _check_no_nan(x: np.ndarray, name: str, finite: bool = False) -> None:
    if x.dtype.kind not in "fc":
        return
    bad = ~np.isfinite(x) if finite else np.isnan(x)
    if bad.any():
        first = int(np.argmax(bad.reshape(len(x), -1).any(axis=1)))
        raise ValueError(
            f"{name} holds NaN{'/inf' if finite else ''} in {int(bad.sum())} entries (first at index "
            f"{first}); drop or re-run the failed entries, on both sides of the comparison"
        )


def _values(x: Any, name: str) -> np.ndarray:
    v = _raw(x).astype(np.float64)
    if v.ndim != 1:
        raise ValueError(f"{name} must be 1-D [n] (one value per seed/run), got shape {v.shape}")
    if v.size == 0:
        raise ValueError(f"{name} is empty; pass at least one value (one per seed/run)")
    _check_no_nan(v, name, finite=True)
    return v


def t_interval(values: Any, confidence: float = 0.95) -> dict[str, float]:
    """Two-sided Student-t confidence interval for the mean of ``values``.

    Args: ``values`` ``[n]`` floats in any unit (e.g. accuracy of n seeds; results share it);
        ``confidence`` coverage in (0, 1), e.g. 0.95.

    Returns: ``{"mean", "std" (ddof 1), "n", "half_width", "lo", "hi", "confidence"}`` with
        ``half_width = t.ppf((1 + confidence) / 2, n - 1) * std / sqrt(n)`` and ``lo, hi = mean -/+ half_width``.
        With ``n == 1`` there is no spread estimate: ``std``, ``half_width``, ``lo`` and ``hi`` are NaN.

    Raises ValueError for: ``values`` empty or not 1-D, NaN/inf in ``values``, ``confidence`` outside (0, 1).
    Source: Student's t interval (Student 1908, "The probable error of a mean", Biometrika 6(1):1-25).
    """
    c = _check_confidence(confidence)
    v = _values(values, "values")
    n, mean = len(v), float(v.mean())
    std = float(v.std(ddof=1)) if n > 1 else math.nan
    half = float(sps.t.ppf(0.5 + c / 2, n - 1)) * std / math.sqrt(n) if n > 1 else math.nan
    return {"mean": mean, "std": std, "n": n, "half_width": half, "lo": mean - half, "hi": mean + half, "confidence": c}


def paired_difference(a: Any, b: Any, confidence: float = 0.95) -> dict[str, Any]:
    """Paired comparison over seeds: t interval and paired t-test of the differences ``a - b``.

    Args: ``a``, ``b`` ``[n]`` floats in one unit, paired by position (seed i of the method and seed i
        of the reference); ``confidence`` coverage in (0, 1).

    Returns: :func:`t_interval` of ``a - b`` (``mean, std, n, half_width, lo, hi, confidence``; NaN bounds
        at n == 1), ``"p"``: two-sided paired t-test p-value (``scipy.stats.ttest_rel``), ``None`` when
        n < 2 or all differences are equal, and ``"diffs"``: the differences as a list.

    Raises ValueError for: empty input, ``a`` and ``b`` of different lengths, NaN/inf, ``confidence`` outside (0, 1).
    Source: Student's paired t-test and t interval (Student 1908, Biometrika 6(1):1-25).
    """
    x, y = _values(a, "a"), _values(b, "b")
    if len(x) != len(y):
        raise ValueError(
            f"a has {len(x)} values and b has {len(y)}; pass one value per pair, same seeds in the "
            "same order on both sides"
        )
    d = x - y
    out: dict[str, Any] = t_interval(d, confidence)
    out["p"] = None if len(d) < 2 or bool(np.all(d == d[0])) else float(sps.ttest_rel(x, y).pvalue)
    out["diffs"] = d.tolist()
    return out


def _correctness(x: Any, name: str) -> np.ndarray:
    c = _raw(x)
    if c.ndim != 1:
        raise ValueError(f"{name} must be 1-D [N] (one bool per example), got shape {c.shape}")
    if c.size == 0:
        raise ValueError(f"{name} is empty; pass the per-example correctness of the evaluated examples")
    _check_no_nan(c, name)
    if c.dtype != np.bool_:
        raise ValueError(
            f"{name} must be boolean, got dtype {c.dtype}; pass e.g. preds == labels "
            "(or arr.astype(bool) for 0/1 values)"
        )
    return c


def mcnemar_exact(correct_a: Any, correct_b: Any) -> dict[str, Any]:
    """Exact McNemar test of two models' accuracies on the same examples.

    Args: ``correct_a``, ``correct_b`` ``[N]`` bool, model a / b right on example i (same examples, order).

    Returns: ``{"n01": a wrong & b right, "n10": a right & b wrong, "p": exact two-sided p-value
        (``binomtest(n10, n01 + n10, 0.5)``; 1.0 without discordant pairs), "acc_a", "acc_b",
        "acc_diff": acc_a - acc_b (fractions), "n": N}``.

    Raises ValueError for: empty input, different lengths, NaN, non-boolean arrays.
    Source: McNemar 1947, Psychometrika 12(2):153-157; exact binomial form: Fagerland, Lydersen &
    Laake 2013, BMC Med Res Methodol 13:91.
    """
    ca, cb = _correctness(correct_a, "correct_a"), _correctness(correct_b, "correct_b")
    if len(ca) != len(cb):
        raise ValueError(
            f"correct_a has {len(ca)} examples and correct_b {len(cb)}; score both models on the "
            "same examples, in the same order"
        )
    n01, n10 = int(np.sum(~ca & cb)), int(np.sum(ca & ~cb))
    p = float(sps.binomtest(n10, n01 + n10, 0.5).pvalue) if n01 + n10 else 1.0
    acc_a, acc_b = float(ca.mean()), float(cb.mean())
    return {"n01": n01, "n10": n10, "p": p, "acc_a": acc_a, "acc_b": acc_b, "acc_diff": acc_a - acc_b, "n": len(ca)}


def _arrays(arrays: Any, name: str) -> tuple[list[np.ndarray], int]:
    arrs = [_raw(x) for x in ((arrays,) if isinstance(arrays, np.ndarray) else arrays)]
    if not arrs:
        raise ValueError(f"{name} is an empty tuple; pass the per-example arrays stat takes, e.g. (conf, correct)")
    for i, x in enumerate(arrs):
        if x.ndim == 0:
            raise ValueError(f"{name}[{i}] is a scalar; pass per-example arrays with examples on the first axis")
        _check_no_nan(x, f"{name}[{i}]")
    lengths = [len(x) for x in arrs]
    if len(set(lengths)) != 1:
        raise ValueError(f"{name} arrays have first-axis lengths {lengths}; give every array one entry per example")
    if lengths[0] == 0:
        raise ValueError(f"{name} holds no examples (N = 0); pass the per-example arrays of the evaluated examples")
    return arrs, lengths[0]


def bootstrap_replicates(
    stat: Callable[..., float], groups: Sequence[Arrays], *, n_boot: int = 1000, seed: int = 0
) -> np.ndarray:
    """``stat`` of each group of per-example arrays on the same bootstrap resamples of the N examples.

    The resamples are those of :func:`paired_bootstrap` and :func:`bootstrap_std` with the same ``seed``,
    N and ``n_boot`` (one index draw per replicate, shared by every group), so replicates of several
    models are paired image by image: ``rows[0] - rows[1]`` with groups ``[a, b]`` are the replicates
    :func:`paired_bootstrap` summarises.

    Args: ``stat(*arrays) -> float``; ``groups`` a sequence of tuples of per-example arrays, all sharing N
        on the first axis (e.g. one (confidence, correctness, nll) tuple per seed and method); ``n_boot``
        >= 2; ``seed``.

    Returns: ``[len(groups), n_boot]`` float64 replicates, in the unit of ``stat``.

    Raises ValueError for: no groups, empty input, mismatched lengths, NaN in a float array, ``n_boot < 2``,
        a non-finite ``stat``.
    Source: Efron & Tibshirani 1993, An Introduction to the Bootstrap, ch. 6 and 13.
    """
    if not len(groups):
        raise ValueError("groups is empty; pass one tuple of per-example arrays per model")
    checked = [_arrays(g, f"groups[{i}]") for i, g in enumerate(groups)]
    lengths = sorted({n for _, n in checked})
    if len(lengths) != 1:
        raise ValueError(f"groups have N = {lengths}; score every model on the same examples, in the same order")
    return _replicates(stat, [x for x, _ in checked], lengths[0], n_boot, seed)


def bootstrap_p(replicates: Any) -> float:
    """Two-sided percentile-bootstrap p-value of "the difference is 0" from replicates of a difference.

    ``p = min(1, 2 * min(1 + #{d* <= 0}, 1 + #{d* >= 0}) / (B + 1))`` over the B replicates d*: the
    smallest two-sided level at which the percentile interval would exclude 0, with the +1 of
    Davison & Hinkley 1997 (Bootstrap Methods and their Application, eq. 4.11) so a finite B never gives
    p = 0 (the smallest value is 2 / (B + 1)); all replicates 0 (a model against itself) give 1.

    Args: ``replicates`` ``[B]`` floats (e.g. :func:`paired_bootstrap`'s differences), finite.
    Raises ValueError for: not 1-D, empty, NaN/inf.
    """
    d = _values(replicates, "replicates")
    below, above = int(np.sum(d <= 0)), int(np.sum(d >= 0))
    return min(1.0, 2.0 * (1 + min(below, above)) / (len(d) + 1))


def _replicates(
    stat: Callable[..., float], groups: list[list[np.ndarray]], n: int, n_boot: int, seed: int
) -> np.ndarray:
    """``[len(groups), n_boot]``: stat of each group on the same resamples of the N examples."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 2:
        raise ValueError(f"n_boot must be an integer >= 2, got {n_boot!r}; 1000 is usual")
    rng, out = np.random.default_rng(seed), np.empty((len(groups), int(n_boot)))
    rows = max(1, _CHUNK_ELEMENTS // n)
    resampled = getattr(stat, "resampled", None)  # stat of many resamples at once: resampled(index [R, N], *arrays)
    for start in range(0, n_boot, rows):
        index = rng.integers(0, n, size=(min(rows, n_boot - start), n))
        for g, arrs in enumerate(groups):
            if resampled is not None:
                out[g, start : start + len(index)] = resampled(index, *arrs)
                continue
            for j, idx in enumerate(index):
                out[g, start + j] = stat(*(x[idx] for x in arrs))
    if not np.all(np.isfinite(out)):
        raise ValueError(
            "stat returned NaN/inf on a bootstrap resample; make stat finite on any resample (e.g. skip empty bins)"
        )
    return out


def paired_bootstrap(
    stat: Callable[..., float], a: Arrays, b: Arrays, *, n_boot: int = 1000, confidence: float = 0.95, seed: int = 0
) -> dict[str, Any]:
    """Paired percentile bootstrap over test examples of ``stat(*a) - stat(*b)``.

    Each replicate draws one set of N example indices with replacement (``numpy.random.default_rng(seed)``,
    in chunks of about 2M indices) and applies it to both ``a`` and ``b``, so the difference is paired.

    Args: ``stat(*arrays) -> float`` a metric of per-example arrays (e.g. ECE of conf, correct); ``a``,
        ``b`` tuples of per-example arrays of models a and b, all with the same N on the first axis (same
        examples, same order; a bare array is a 1-tuple); ``n_boot`` >= 2; ``confidence`` in (0, 1); ``seed``.

    Returns: ``{"diff": stat(a) - stat(b), "std": bootstrap std (ddof 1) of the difference, "lo", "hi":
        percentile bounds, "share_positive": share of replicates with difference > 0, "p": two-sided
        percentile-bootstrap p-value (:func:`bootstrap_p`), "n_boot", "n": N, "confidence"}``, all in the
        unit of ``stat``. Same seed, N and n_boot give the same result.

    Raises ValueError for: empty input, mismatched lengths (within or between a and b), NaN in a float array,
        ``confidence`` outside (0, 1), ``n_boot < 2``, a non-finite ``stat``.
    Source: Efron & Tibshirani 1993, An Introduction to the Bootstrap, ch. 13 (percentile interval);
    paired over test examples as in Koehn 2004, EMNLP ("paired bootstrap resampling").
    """
    c = _check_confidence(confidence)
    (xa, na), (xb, nb) = _arrays(a, "a"), _arrays(b, "b")
    if na != nb or len(xa) != len(xb):
        raise ValueError(
            f"a ({len(xa)} arrays, N = {na}) and b ({len(xb)} arrays, N = {nb}) must match; score "
            "both models on the same examples, in the same order, with the same arrays"
        )
    observed = float(stat(*xa)) - float(stat(*xb))
    if not math.isfinite(observed):
        raise ValueError("stat returned NaN/inf on the full data; make stat finite (e.g. skip empty bins)")
    rep = _replicates(stat, [xa, xb], na, n_boot, seed)
    d = rep[0] - rep[1]
    lo, hi = np.percentile(d, [50.0 * (1.0 - c), 50.0 * (1.0 + c)])
    return {
        "diff": observed,
        "std": float(d.std(ddof=1)),
        "lo": float(lo),
        "hi": float(hi),
        "share_positive": float(np.mean(d > 0)),
        "p": bootstrap_p(d),
        "n_boot": int(n_boot),
        "n": na,
        "confidence": c,
    }


def bootstrap_std(stat: Callable[..., float], arrays: Arrays, *, n_boot: int = 1000, seed: int = 0) -> float:
    """Test-sampling standard error of one model's metric: std (ddof 1) of ``stat`` over example resamples.

    Args: ``stat(*arrays) -> float``; ``arrays`` tuple of per-example arrays sharing N on the first axis;
        ``n_boot`` >= 2; ``seed`` (the resamples are those of :func:`paired_bootstrap` with that seed).

    Returns: the bootstrap standard error (float), in the unit of ``stat``.

    Raises ValueError for: empty input, mismatched lengths, NaN in a float array, ``n_boot < 2``, a non-finite ``stat``.
    Source: Efron & Tibshirani 1993, An Introduction to the Bootstrap, ch. 6 (bootstrap standard error).
    """
    xs, n = _arrays(arrays, "arrays")
    return float(_replicates(stat, [xs], n, n_boot, seed)[0].std(ddof=1))


def verdict(lo: float, hi: float, higher_is_better: bool, n: int | None = None) -> str:
    """Words for an interval ``[lo, hi]`` of (method - reference), in the metric's unit.

    Returns "better" when the interval lies entirely on the good side of 0 (above it if
    ``higher_is_better``, below it for NLL/ECE-like metrics), "worse" when entirely on the bad side,
    otherwise (0 inside or on the boundary, or a NaN bound) "no detectable difference", followed by
    " at n = {n}" when ``n`` is given. The sign of the mean alone never decides.

    Raises ValueError for: ``lo > hi`` (pass the bounds in order).
    Source: duality of a two-sided confidence interval and a test at level 1 - confidence.
    """
    lo_f, hi_f = float(lo), float(hi)
    if not (math.isnan(lo_f) or math.isnan(hi_f)):
        if lo_f > hi_f:
            raise ValueError(f"lo = {lo_f} > hi = {hi_f}; pass the interval bounds in order (lo, hi)")
        if lo_f > 0:
            return "better" if higher_is_better else "worse"
        if hi_f < 0:
            return "worse" if higher_is_better else "better"
    return "no detectable difference" + ("" if n is None else f" at n = {n}")


def holm(p_values: Sequence[float], alpha: float = 0.05) -> dict[str, Any]:
    """Holm's step-down adjustment of a family of m p-values (strong control of the family-wise error rate).

    Sort p ascending, p_(1) <= ... <= p_(m); the adjusted value of the j-th smallest is
    ``min(1, max_{i <= j} (m - i + 1) p_(i))`` (monotone in p, capped at 1), returned in the input order;
    a hypothesis is rejected when its adjusted p <= ``alpha``, which is Holm's rule "reject H_(1), H_(2), ...
    while p_(j) <= alpha / (m - j + 1), stop at the first that fails". Ties keep their input order (the
    adjusted values of tied p are equal anyway). No assumption on the dependence between the tests.

    Args: ``p_values`` ``[m]`` floats in [0, 1] (m = 0 gives empty lists); ``alpha`` in (0, 1).

    Returns: ``{"adjusted": [m] floats, "reject": [m] bools, "alpha", "m", "n_rejected"}``.

    Raises ValueError for: not 1-D, NaN/inf or values outside [0, 1] (a missing p, e.g. None, must be dropped
        from the family by the caller), ``alpha`` outside (0, 1).
    Sources: Holm 1979, "A simple sequentially rejective multiple test procedure", Scand. J. Statist.
    6(2):65-70; adjusted p-values: Wright 1992, "Adjusted P-values for simultaneous inference", Biometrics
    48(4):1005-1013. Implemented here (a few lines) rather than adding statsmodels and its pandas/patsy
    dependencies for statsmodels.stats.multitest.multipletests(method="holm"), which computes the same.
    """
    a = _check_alpha(alpha)
    try:
        p = np.asarray(p_values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"p_values must be numbers in [0, 1] ({e}); drop comparisons without a p-value") from None
    if p.ndim != 1:
        raise ValueError(f"p_values must be 1-D [m] (one p per comparison), got shape {p.shape}")
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        raise ValueError(
            f"p_values must lie in [0, 1], got {p[bad].tolist()} at {np.flatnonzero(bad).tolist()}; "
            "drop comparisons without a p-value (None/NaN) from the family"
        )
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    reject = adjusted <= a
    return {
        "adjusted": adjusted.tolist(),
        "reject": reject.tolist(),
        "alpha": a,
        "m": m,
        "n_rejected": int(reject.sum()),
    }
