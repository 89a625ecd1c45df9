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
from scipy import special
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


def _check_no_nan(x: np.ndarray, name: str, finite: bool = False) -> None:
    if x.dtype.kind not in "fc":
        return
    bad = ~np.isfinite(x) if finite else np.isnan(x)
    if bad.any():
        first = int(np.argmax(bad.reshape(len(x), -1).any(axis=1)))
        raise ValueError(f"{name} holds NaN{'/inf' if finite else ''} in {int(bad.sum())} entries (first at index "
                         f"{first}); drop or re-run the failed entries, on both sides of the comparison")


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
    return {"mean": mean, "std": std, "n": n, "half_width": half, "lo": mean - half, "hi": mean + half,
            "confidence": c}


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
        raise ValueError(f"a has {len(x)} values and b has {len(y)}; pass one value per pair, same seeds in the "
                         "same order on both sides")
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
        raise ValueError(f"{name} must be boolean, got dtype {c.dtype}; pass e.g. preds == labels "
                         "(or arr.astype(bool) for 0/1 values)")
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
        raise ValueError(f"correct_a has {len(ca)} examples and correct_b {len(cb)}; score both models on the "
                         "same examples, in the same order")
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


def bootstrap_replicates(stat: Callable[..., float], groups: Sequence[Arrays], *, n_boot: int = 1000,
                         seed: int = 0) -> np.ndarray:
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


def _replicates(stat: Callable[..., float], groups: list[list[np.ndarray]], n: int, n_boot: int,
                seed: int) -> np.ndarray:
    """``[len(groups), n_boot]``: stat of each group on the same resamples of the N examples."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 2:
        raise ValueError(f"n_boot must be an integer >= 2, got {n_boot!r}; 1000 is usual")
    rng, out = np.random.default_rng(seed), np.empty((len(groups), int(n_boot)))
    rows = max(1, _CHUNK_ELEMENTS // n)
    for start in range(0, n_boot, rows):
        for j, idx in enumerate(rng.integers(0, n, size=(min(rows, n_boot - start), n))):
            for g, arrs in enumerate(groups):
                out[g, start + j] = stat(*(x[idx] for x in arrs))
    if not np.all(np.isfinite(out)):
        raise ValueError("stat returned NaN/inf on a bootstrap resample; make stat finite on any resample "
                         "(e.g. skip empty bins)")
    return out


def paired_bootstrap(stat: Callable[..., float], a: Arrays, b: Arrays, *, n_boot: int = 1000,
                     confidence: float = 0.95, seed: int = 0) -> dict[str, Any]:
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
        raise ValueError(f"a ({len(xa)} arrays, N = {na}) and b ({len(xb)} arrays, N = {nb}) must match; score "
                         "both models on the same examples, in the same order, with the same arrays")
    observed = float(stat(*xa)) - float(stat(*xb))
    if not math.isfinite(observed):
        raise ValueError("stat returned NaN/inf on the full data; make stat finite (e.g. skip empty bins)")
    rep = _replicates(stat, [xa, xb], na, n_boot, seed)
    d = rep[0] - rep[1]
    lo, hi = np.percentile(d, [50.0 * (1.0 - c), 50.0 * (1.0 + c)])
    return {"diff": observed, "std": float(d.std(ddof=1)), "lo": float(lo), "hi": float(hi),
            "share_positive": float(np.mean(d > 0)), "p": bootstrap_p(d), "n_boot": int(n_boot), "n": na,
            "confidence": c}


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


#: ``method`` of the seeds-and-images intervals with two or more seeds, and with one
METHOD_SEEDS_IMAGES = "seeds+images (random effects, Satterthwaite t)"
METHOD_IMAGES_ONLY = ("images only (one seed: the model fixed; training randomness not covered)")
#: batches of replicates for the Monte-Carlo error of a bootstrap half-width (batch means)
MC_BATCHES = 10


def _t_bounds(mean: float, se: float, df: float, c: float) -> "tuple[float, float, float]":
    """``(lo, hi, p)``: the two-sided t interval and p-value of ``mean / se`` on ``df`` degrees of freedom
    (scipy.special's Student-t, the values of scipy.stats.t without their per-call overhead)."""
    if se <= 0:
        return mean, mean, (1.0 if mean == 0 else 0.0)
    half = float(special.stdtrit(df, 0.5 + c / 2)) * se
    return mean - half, mean + half, float(2 * special.stdtr(df, -abs(mean) / se))


def _robustness(out: dict, n: int, c: float, higher_is_better: "bool | None") -> dict:
    """Adds the same test at df = n − 1 (``p_df_n1``, ``lo_df_n1``, ``hi_df_n1``) beside the Satterthwaite one,
    and ``fragile``: the two give different verdicts."""
    lo, hi, p = _t_bounds(out["mean"], out["se"], n - 1, c)
    out.update(lo_df_n1=lo, hi_df_n1=hi, p_df_n1=p)
    if higher_is_better is not None:
        out["verdict_df_n1"] = verdict(lo, hi, higher_is_better, n)
        out["fragile"] = out["verdict_df_n1"] != out["verdict"]
    return out


def anova_interval(differences: Any, confidence: float = 0.95,
                   higher_is_better: bool | None = None) -> dict[str, Any]:
    """The seeds-and-images interval of a per-image difference, from the exact two-way ANOVA mean squares.

    Model: d_si = mu + a_s + b_i + e_si (seed s, image i; crossed random effects with variances s_a^2, s_b^2,
    s_e^2), target mu. The mean of d has variance s_a^2/n + s_b^2/N + s_e^2/(nN) = (E MS_seed + E MS_image −
    E MS_resid)/(nN), with MS_seed = N Σ_s (d̄_s − d̄)^2/(n − 1), MS_image = n Σ_i (d̄_i − d̄)^2/(N − 1) and
    MS_resid the interaction mean square on (n − 1)(N − 1) df. Since E MS_seed = s_e^2 + N s_a^2 >= s_e^2, the seed
    mean square is floored at MS_resid (a seed spread smaller than per-image noise allows is chance, not
    evidence): ``SE^2 = (max(MS_seed, MS_resid) + MS_image − MS_resid)/(nN)``. Degrees of freedom: floored, the
    estimate is MS_image/(nN) on N − 1 df; otherwise Satterthwaite's for the three mean squares, at most N − 1.
    Hence SE >= the models-fixed standard error sqrt(MS_image/(nN)) and the t quantile >= t_{N−1}: **the method
    interval always contains the models-fixed one** (the paired t interval of the seed-averaged per-image
    differences, ``models_fixed``). With one seed only the models-fixed interval exists, and ``method`` says so.
    The price is conservatism where the true seed variance is 0 (measured coverage up to 0.987 at 95%:
    ``harness bench coverage``, results/bench/coverage.md); where the seeds differ it is on target.

    Args: ``differences`` ``[n, N]``: per seed pair s (method seed s against reference seed s) and image i, the
        per-image metric difference (NLL in nats; top-1 correctness as 0/±1); ``confidence`` in (0, 1);
        ``higher_is_better`` for the verdicts (None: no verdict).

    Returns: ``{"mean", "lo", "hi", "se", "df", "p", "n_seeds", "n_images", "ms_seed", "ms_image", "ms_resid",
        "seed_floored", "confidence", "method", "verdict", "lo_df_n1", "hi_df_n1", "p_df_n1", "verdict_df_n1",
        "fragile", "models_fixed": {"diff", "lo", "hi", "se", "df", "p", "verdict"}}`` (the df = n − 1 keys only
        with n >= 2).

    Raises ValueError for: not 2-D ``[n, N]``, N < 2, NaN/inf, ``confidence`` outside (0, 1).
    Sources: expected mean squares of the two-way crossed random model: Searle, Casella & McCulloch 1992,
    Variance Components, ch. 4 (4.6); truncating a negative variance-component estimate at 0: ibid. 3.8;
    Satterthwaite 1946, Biometrics Bulletin 2(6):110-114; variance in ML benchmarks: Bouthillier et al., MLSys 2021.
    """
    c = _check_confidence(confidence)
    d = _raw(differences).astype(np.float64)
    if d.ndim != 2 or d.shape[1] < 2:
        raise ValueError(f"differences must be [n, N] (seeds x images, N >= 2), got shape {d.shape}")
    _check_no_nan(d.reshape(-1), "differences", finite=True)
    n, N = d.shape
    mean = float(d.mean())
    col = d.mean(0)
    ms_image = n * float(((col - mean) ** 2).sum()) / (N - 1)
    fixed_se = math.sqrt(ms_image / (n * N))
    lo, hi, p = _t_bounds(mean, fixed_se, N - 1, c)
    fixed = {"diff": mean, "lo": lo, "hi": hi, "se": fixed_se, "df": float(N - 1), "p": p,
             "verdict": None if higher_is_better is None else verdict(lo, hi, higher_is_better, None)}
    out: dict[str, Any] = {"mean": mean, "n_seeds": n, "n_images": N, "ms_image": ms_image, "confidence": c,
                           "models_fixed": fixed}
    if n == 1:
        out.update(lo=lo, hi=hi, se=fixed_se, df=float(N - 1), p=p, ms_seed=math.nan, ms_resid=math.nan,
                   seed_floored=False, method=METHOD_IMAGES_ONLY, verdict=fixed["verdict"])
        return out
    row = d.mean(1)
    ms_seed = N * float(((row - mean) ** 2).sum()) / (n - 1)
    resid = d - row[:, None] - col[None, :] + mean
    ms_resid = float((resid ** 2).sum()) / ((n - 1) * (N - 1))
    floored = ms_seed <= ms_resid
    if floored:
        var, df = ms_image / (n * N), float(N - 1)
    else:
        total = ms_seed + ms_image - ms_resid
        var = total / (n * N)
        df = min(float(N - 1), total ** 2 / (ms_seed ** 2 / (n - 1) + ms_image ** 2 / (N - 1)
                                             + ms_resid ** 2 / ((n - 1) * (N - 1))))
    se = math.sqrt(var)
    lo, hi, p = _t_bounds(mean, se, df, c)
    out.update(lo=lo, hi=hi, se=se, df=df, p=p, ms_seed=ms_seed, ms_resid=ms_resid, seed_floored=floored,
               method=METHOD_SEEDS_IMAGES,
               verdict=None if higher_is_better is None else verdict(lo, hi, higher_is_better, n))
    return _robustness(out, n, c, higher_is_better)


def _image_replicates(x: Any, n: int) -> np.ndarray:
    r = _raw(x).astype(np.float64)
    if r.ndim != 2 or r.shape[0] != n or r.shape[1] < 2:
        raise ValueError(f"image_replicates must be [{n}, B] (one row per seed, shared resamples) with B >= 2, got "
                         f"shape {r.shape}; make them with bootstrap_replicates")
    if not np.all(np.isfinite(r)):
        raise ValueError("image_replicates hold NaN/inf; make the metric finite on every resample")
    return r


def _two_level(d: np.ndarray, rep: np.ndarray, c: float) -> dict:
    """The interval of :func:`method_interval` from per-seed differences ``d`` [n] and replicates ``rep`` [n, B]."""
    n = len(d)
    mean = float(d.mean())
    per_seed_var = rep.var(axis=1, ddof=1).mean()
    shared = max(0.0, float((n * rep.mean(0).var(ddof=1) - per_seed_var) / (n - 1)))
    within = max(0.0, float(per_seed_var) - shared)
    var_seed = float(d.var(ddof=1))
    floored = var_seed <= within
    seed_term = max(var_seed, within) / n
    se = math.sqrt(seed_term + shared)
    df = math.inf if floored or var_seed == 0 else se ** 4 / (seed_term ** 2 / (n - 1))
    lo, hi, p = _t_bounds(mean, se, df, c)
    return {"mean": mean, "lo": lo, "hi": hi, "se": se, "se_seeds": math.sqrt(seed_term),
            "se_images": math.sqrt(shared), "df": float(df), "p": p, "seed_floored": floored}


def method_interval(per_seed: Sequence[float], image_replicates: np.ndarray, confidence: float = 0.95,
                    higher_is_better: bool | None = None) -> dict[str, Any]:
    """The seeds-and-images interval of a metric that is not a mean over images (ECE), from a two-level bootstrap.

    Model as :func:`anova_interval`. ``image_replicates`` ``[n, B]`` are the per-seed differences on shared
    resamples of the images (:func:`bootstrap_replicates`): their covariance between seeds, V_img =
    (n Var(mean_s R_s) − mean_s Var(R_s))/(n − 1) clipped at 0, estimates the shared image term s_b^2/N, and what
    is left of a seed's own variance, W = mean_s Var(R_s) − V_img, the interaction's share s_e^2/N. The seed term
    var(per_seed)/n estimates (s_a^2 + s_e^2/N)/n, so it is floored at W/n (as :func:`anova_interval` floors
    MS_seed at MS_resid): ``SE^2 = max(var(per_seed), W)/n + V_img``. Degrees of freedom: Satterthwaite's with the
    seed term on n − 1 and the image term on infinitely many; floored, the estimate comes from the images alone
    (normal quantile). SE^2 is then at least Var(mean_s R_s), the models-fixed variance, so the method interval
    contains the models-fixed normal interval (``models_fixed``: mean ± z sd, unfloored p from the normal tail).
    The Monte-Carlo error of the half-width is estimated from :data:`MC_BATCHES` disjoint batches of B/10
    replicates (batch means: a half-width from B/10 replicates varies sqrt(10) times as much as one from B, so the
    error at B is the batches' standard deviation / sqrt(10)) and returned as ``mc_error``; the caller raises B until it is below a tenth of the half-width
    (:func:`harness.uncertainty.compare.method_level`). With one seed only the models-fixed interval exists.

    Args: ``per_seed`` ``[n]``: metric(method seed s) − metric(reference seed s) on the whole evaluation set;
        ``image_replicates`` ``[n, B]`` (B >= 2), the same differences on shared resamples; ``confidence`` in
        (0, 1); ``higher_is_better`` for the verdicts (None: no verdict).

    Returns: ``{"mean", "lo", "hi", "se", "se_seeds", "se_images", "df", "p", "seed_floored", "n_seeds",
        "n_images_boot", "mc_error", "confidence", "method", "verdict", "lo_df_n1", "hi_df_n1", "p_df_n1",
        "verdict_df_n1", "fragile", "models_fixed": {"diff", "lo", "hi", "se", "p", "verdict"}}``.

    Raises ValueError for: empty or non-1-D ``per_seed``, ``image_replicates`` not ``[n, B]`` with B >= 2,
        NaN/inf, ``confidence`` outside (0, 1).
    Sources: as :func:`anova_interval`; the bootstrap: Efron & Tibshirani 1993, ch. 6; batch means for the
    Monte-Carlo error: Flegal, Haran & Jones 2008, Statist. Sci. 23(2):250-260.
    """
    c = _check_confidence(confidence)
    d = _values(per_seed, "per_seed")
    rep = _image_replicates(image_replicates, len(d))
    n, B = len(d), rep.shape[1]
    fixed_rep = rep.mean(0)
    sd = float(fixed_rep.std(ddof=1))
    lo, hi, p = _t_bounds(float(d.mean()), sd, math.inf, c)
    fixed = {"diff": float(d.mean()), "lo": lo, "hi": hi, "se": sd, "p": p,
             "verdict": None if higher_is_better is None else verdict(lo, hi, higher_is_better, None)}
    out: dict[str, Any] = {"n_seeds": n, "n_images_boot": int(B), "confidence": c, "models_fixed": fixed}
    if n == 1:
        out.update(mean=fixed["diff"], lo=lo, hi=hi, se=sd, se_seeds=math.nan, se_images=sd, df=math.inf, p=p,
                   seed_floored=False, method=METHOD_IMAGES_ONLY, verdict=fixed["verdict"])
    else:
        out.update(_two_level(d, rep, c), method=METHOD_SEEDS_IMAGES)
        out["verdict"] = None if higher_is_better is None else verdict(out["lo"], out["hi"], higher_is_better, n)
        _robustness(out, n, c, higher_is_better)
    size = B // MC_BATCHES
    if size >= 2:
        halves = [(lambda r: r["hi"] - r["mean"])(_two_level(d, rep[:, i * size:(i + 1) * size], c)) if n > 1 else
                  float(rep[0, i * size:(i + 1) * size].std(ddof=1)) * float(special.ndtri(0.5 + c / 2))
                  for i in range(MC_BATCHES)]
        # each batch holds B/MC_BATCHES replicates: the half-width's error at B is the batch spread / sqrt(batches)
        out["mc_error"] = float(np.std(halves, ddof=1) / math.sqrt(MC_BATCHES))
    else:
        out["mc_error"] = math.nan
    return out


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
    a = float(alpha)
    if not 0.0 < a < 1.0:
        raise ValueError(f"alpha must lie strictly in (0, 1), got {alpha!r}; pass e.g. 0.05")
    try:
        p = np.asarray(p_values, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise ValueError(f"p_values must be numbers in [0, 1] ({e}); drop comparisons without a p-value") from None
    if p.ndim != 1:
        raise ValueError(f"p_values must be 1-D [m] (one p per comparison), got shape {p.shape}")
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        raise ValueError(f"p_values must lie in [0, 1], got {p[bad].tolist()} at {np.flatnonzero(bad).tolist()}; "
                         "drop comparisons without a p-value (None/NaN) from the family")
    m = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    adjusted = np.empty(m)
    adjusted[order] = stepped
    reject = adjusted <= a
    return {"adjusted": adjusted.tolist(), "reject": reject.tolist(), "alpha": a, "m": m,
            "n_rejected": int(reject.sum())}


def paired_t_power(sd: float, n: int, effect: float, alpha: float = 0.05) -> float:
    """Power of the two-sided one-sample (paired) t test at level ``alpha`` with ``n`` pairs, when the per-pair
    differences are normal with mean ``effect`` and standard deviation ``sd`` (same unit).

    Exact, from the noncentral t distribution (df n − 1, noncentrality effect / (sd / sqrt(n))).
    Raises ValueError for: n < 2, sd <= 0, alpha outside (0, 1).
    Source: Cohen 1988, Statistical Power Analysis for the Behavioral Sciences, ch. 2; the noncentral t
    (``scipy.stats.nct``).
    """
    n, sd, a = _power_args(n, sd, alpha)
    df, nc = n - 1, float(effect) / (sd / math.sqrt(n))
    c = float(sps.t.ppf(1 - a / 2, df))
    return float(sps.nct.sf(c, df, nc) + sps.nct.cdf(-c, df, nc))


def tost_power(sd: float, n: int, margin: float, alpha: float = 0.05, delta: float = 0.0) -> float:
    """Power of the two one-sided tests (TOST) of equivalence within ``±margin`` at level ``alpha`` each (the
    1 − 2α interval inside the margin), ``n`` normal paired differences of mean ``delta`` and std ``sd``.

    Exact: the integral over the sample standard deviation S (sd·sqrt(χ²_{n−1}/(n − 1))) of the chance that the
    mean lies within ``margin − t_{1−α, n−1} S / sqrt(n)`` of 0 (``scipy.integrate.quad``).
    Raises ValueError for: n < 2, sd <= 0, margin <= 0, alpha outside (0, 1).
    Source: Schuirmann 1987, "A comparison of the two one-sided tests procedure and the power approach for
    assessing the equivalence of average bioavailability", J. Pharmacokinet. Biopharm. 15(6):657-680.
    """
    from scipy import integrate

    n, sd, a = _power_args(n, sd, alpha)
    m = float(margin)
    if not m > 0:
        raise ValueError(f"margin must be > 0, got {margin!r}")
    df, se = n - 1, sd / math.sqrt(n)
    c = float(sps.t.ppf(1 - a, df))

    def accept(s: float) -> float:
        half = m - c * s / math.sqrt(n)
        inside = sps.norm.cdf((half - delta) / se) - sps.norm.cdf((-half - delta) / se)
        return float(inside * sps.chi.pdf(s / sd * math.sqrt(df), df) * math.sqrt(df) / sd)

    return float(integrate.quad(accept, 0.0, m * math.sqrt(n) / c)[0])


def _power_args(n: int, sd: float, alpha: float) -> "tuple[int, float, float]":
    if isinstance(n, bool) or int(n) != n or n < 2:
        raise ValueError(f"n must be an integer >= 2 (pairs), got {n!r}")
    if not float(sd) > 0:
        raise ValueError(f"sd must be > 0 (the per-pair difference's standard deviation), got {sd!r}")
    return int(n), float(sd), _check_confidence(alpha)
