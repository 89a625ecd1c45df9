"""Intervals for a claim about a method rather than about its trained models: noise over training seeds and over
test images together (:func:`anova_interval` for a per-image difference table, :func:`method_interval` for a
metric that is not a mean over images, such as ECE), never narrower than the interval with the models fixed.

Bad input raises ``ValueError`` with a message that names the fix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import special

from harness.uncertainty.stats import _check_confidence, _check_no_nan, _raw, _values, verdict

#: ``method`` of the seeds-and-images intervals with two or more seeds, and with one
METHOD_SEEDS_IMAGES = "seeds+images (random effects, Satterthwaite t)"
METHOD_IMAGES_ONLY = "images only (one seed: the model fixed; training randomness not covered)"
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


def anova_interval(differences: Any, confidence: float = 0.95, higher_is_better: bool | None = None) -> dict[str, Any]:
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
    fixed = {
        "diff": mean,
        "lo": lo,
        "hi": hi,
        "se": fixed_se,
        "df": float(N - 1),
        "p": p,
        "verdict": None if higher_is_better is None else verdict(lo, hi, higher_is_better, None),
    }
    out: dict[str, Any] = {
        "mean": mean,
        "n_seeds": n,
        "n_images": N,
        "ms_image": ms_image,
        "confidence": c,
        "models_fixed": fixed,
    }
    if n == 1:
        out.update(
            lo=lo,
            hi=hi,
            se=fixed_se,
            df=float(N - 1),
            p=p,
            ms_seed=math.nan,
            ms_resid=math.nan,
            seed_floored=False,
            method=METHOD_IMAGES_ONLY,
            verdict=fixed["verdict"],
        )
        return out
    row = d.mean(1)
    ms_seed = N * float(((row - mean) ** 2).sum()) / (n - 1)
    resid = d - row[:, None] - col[None, :] + mean
    ms_resid = float((resid**2).sum()) / ((n - 1) * (N - 1))
    floored = ms_seed <= ms_resid
    if floored:
        var, df = ms_image / (n * N), float(N - 1)
    else:
        total = ms_seed + ms_image - ms_resid
        var = total / (n * N)
        df = min(
            float(N - 1), total**2 / (ms_seed**2 / (n - 1) + ms_image**2 / (N - 1) + ms_resid**2 / ((n - 1) * (N - 1)))
        )
    se = math.sqrt(var)
    lo, hi, p = _t_bounds(mean, se, df, c)
    out.update(
        lo=lo,
        hi=hi,
        se=se,
        df=df,
        p=p,
        ms_seed=ms_seed,
        ms_resid=ms_resid,
        seed_floored=floored,
        method=METHOD_SEEDS_IMAGES,
        verdict=None if higher_is_better is None else verdict(lo, hi, higher_is_better, n),
    )
    return _robustness(out, n, c, higher_is_better)


def _image_replicates(x: Any, n: int) -> np.ndarray:
    r = _raw(x).astype(np.float64)
    if r.ndim != 2 or r.shape[0] != n or r.shape[1] < 2:
        raise ValueError(
            f"image_replicates must be [{n}, B] (one row per seed, shared resamples) with B >= 2, got "
            f"shape {r.shape}; make them with bootstrap_replicates"
        )
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
    df = math.inf if floored or var_seed == 0 else se**4 / (seed_term**2 / (n - 1))
    lo, hi, p = _t_bounds(mean, se, df, c)
    return {
        "mean": mean,
        "lo": lo,
        "hi": hi,
        "se": se,
        "se_seeds": math.sqrt(seed_term),
        "se_images": math.sqrt(shared),
        "df": float(df),
        "p": p,
        "seed_floored": floored,
    }


def method_interval(
    per_seed: Sequence[float],
    image_replicates: np.ndarray,
    confidence: float = 0.95,
    higher_is_better: bool | None = None,
) -> dict[str, Any]:
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
    fixed = {
        "diff": float(d.mean()),
        "lo": lo,
        "hi": hi,
        "se": sd,
        "p": p,
        "verdict": None if higher_is_better is None else verdict(lo, hi, higher_is_better, None),
    }
    out: dict[str, Any] = {"n_seeds": n, "n_images_boot": int(B), "confidence": c, "models_fixed": fixed}
    if n == 1:
        out.update(
            mean=fixed["diff"],
            lo=lo,
            hi=hi,
            se=sd,
            se_seeds=math.nan,
            se_images=sd,
            df=math.inf,
            p=p,
            seed_floored=False,
            method=METHOD_IMAGES_ONLY,
            verdict=fixed["verdict"],
        )
    else:
        out.update(_two_level(d, rep, c), method=METHOD_SEEDS_IMAGES)
        out["verdict"] = None if higher_is_better is None else verdict(out["lo"], out["hi"], higher_is_better, n)
        _robustness(out, n, c, higher_is_better)
    size = B // MC_BATCHES
    if size >= 2:
        halves = [
            (lambda r: r["hi"] - r["mean"])(_two_level(d, rep[:, i * size : (i + 1) * size], c))
            if n > 1
            else float(rep[0, i * size : (i + 1) * size].std(ddof=1)) * float(special.ndtri(0.5 + c / 2))
            for i in range(MC_BATCHES)
        ]
        # each batch holds B/MC_BATCHES replicates: the half-width's error at B is the batch spread / sqrt(batches)
        out["mc_error"] = float(np.std(halves, ddof=1) / math.sqrt(MC_BATCHES))
    else:
        out["mc_error"] = math.nan
    return out
