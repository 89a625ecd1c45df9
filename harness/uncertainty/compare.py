"""Comparisons of methods that say whether a difference is real.

Two sources of variation are kept apart:

- **seeds** (training randomness): per-seed metrics on the fixed evaluation set; a method's mean
  gets a 95% Student-t interval, and a method against the reference gets the paired per-seed
  difference (seed i against seed i) with its t-interval and paired t-test;
- **test sampling** (which images happen to be in the evaluation set): with the models fixed, a
  paired interval over images of the difference in the seed-averaged metric, and McNemar's exact
  test on per-image correctness for each seed pair.

:func:`method_level` combines both into one interval for the method (new seeds and new images;
:func:`harness.uncertainty.method.method_interval`); :func:`image_level` describes the trained models.
Verdict words come from the interval only (:func:`harness.uncertainty.stats.verdict`): "better" or
"worse" when the 95% interval excludes 0, otherwise "no detectable difference at n = ...". Every
interval result carries a two-sided p-value ``p`` (for a family adjustment, :func:`stats.holm`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from harness.uncertainty import method, stats
from harness.uncertainty import metrics as M
from harness.uncertainty.predictions import Predictions

#: metric -> True when higher is better (from :data:`harness.uncertainty.metrics.METRICS`)
HIGHER_IS_BETTER = {name: m.higher_is_better for name, m in M.METRICS.items()}
#: metrics compared image by image (single-label predictions)
IMAGE_KEYS = ("top1", "nll", "ece")


def parts(p: Predictions) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """Per-example confidence, correctness and NLL ``([N], [N], [N])`` of softmax predictions."""
    lp = p.log_probs()
    y = np.asarray(p.targets, dtype=np.int64)
    conf, correct = M.top_label(lp, y)
    return conf, correct.astype(bool), -lp[np.arange(len(y)), y]


def metric_stat(key: str, k: int):
    """``stat(*arrays)``: the mean over ``k`` seeds of metric ``key`` from per-example parts
    (arrays are the seeds' (confidence, correctness, nll) triples, flattened)."""

    def one(conf: np.ndarray, correct: np.ndarray, nll: np.ndarray) -> float:
        if key == "top1":
            return float(correct.mean())
        if key == "nll":
            return float(nll.mean())
        return M.calibration_error(conf, correct)

    def stat(*arrays: np.ndarray) -> float:
        return float(np.mean([one(*arrays[3 * i : 3 * i + 3]) for i in range(k)]))

    def one_resampled(index: np.ndarray, conf: np.ndarray, correct: np.ndarray, nll: np.ndarray) -> np.ndarray:
        if key == "top1":
            return correct[index].mean(axis=1)
        if key == "nll":
            return nll[index].mean(axis=1)
        return M.resampled_calibration_error(conf, correct.astype(np.float64), index)

    def resampled(index: np.ndarray, *arrays: np.ndarray) -> np.ndarray:
        return np.mean([one_resampled(index, *arrays[3 * i : 3 * i + 3]) for i in range(k)], axis=0)

    stat.resampled = resampled  # the same statistic of many resamples at once (harness.uncertainty.stats)
    return stat


def _check_same_examples(a: Sequence[Predictions], b: Sequence[Predictions]) -> None:
    if not a or not b:
        raise ValueError("image-level comparisons need at least one model (seed) on each side")
    ref = a[0].index
    for p in [*a, *b]:
        if not np.array_equal(p.index, ref) or not np.array_equal(p.targets, a[0].targets):
            raise ValueError(
                f"{p.source} was evaluated on other examples or labels than {a[0].source}: image-level "
                "comparisons need both methods on the same evaluation set"
            )


def seed_summary(values: "dict[str, Sequence[float]]") -> "dict[str, dict]":
    """Per metric, the mean over seeds with its 95% t-interval and the seed std."""
    return {k: stats.t_interval(v) for k, v in values.items()}


def test_sampling_se(
    preds: Sequence[Predictions], keys: Sequence[str] = IMAGE_KEYS, n_boot: int = 500, seed: int = 0
) -> "dict[str, float]":
    """Per metric, the bootstrap standard error over evaluation images of each model's metric,
    averaged over the models (seeds): the part of the spread that comes from the test sample."""
    per_model = [parts(p) for p in preds]
    return {
        key: float(np.mean([stats.bootstrap_std(metric_stat(key, 1), x, n_boot=n_boot, seed=seed) for x in per_model]))
        for key in keys
    }


def seed_level(a: "dict[str, Sequence[float]]", b: "dict[str, Sequence[float]]") -> "dict[str, dict]":
    """Per metric, the paired per-seed difference a − b with its 95% t-interval, paired t-test p and
    verdict (``a`` the method, ``b`` the reference; seeds paired by position)."""
    missing = sorted(set(a) ^ set(b))
    if missing:
        raise ValueError(f"metric(s) {', '.join(missing)} given for one side only: pass the same metrics for both")
    out = {}
    for key in a:
        n = min(len(a[key]), len(b[key]))
        d = stats.paired_difference(a[key][:n], b[key][:n])
        d["verdict"] = stats.verdict(d["lo"], d["hi"], HIGHER_IS_BETTER.get(key, True), n)
        out[key] = d
    return out


def per_image_difference(key: str, x: tuple, y: tuple) -> np.ndarray:
    """``[N]`` per-image difference of ``key`` (top-1 correctness as 0/±1, NLL in nats) between two models' parts."""
    return (x[1].astype(np.float64) - y[1]) if key == "top1" else (x[2] - y[2])


def _ece_interval(pa: list, pb: list, n_boot: int, seed: int, max_boot: int) -> dict:
    """:func:`harness.uncertainty.method.method_interval` of the ECE difference, with B doubled (new resamples
    appended) until the Monte-Carlo error of the half-width is below a tenth of it or B reaches ``max_boot``."""
    n, stat = len(pa), metric_stat("ece", 1)
    per_seed = [stat(*x) - stat(*y) for x, y in zip(pa, pb)]
    reps, b = [], 0
    while True:
        rep = stats.bootstrap_replicates(stat, [*pa, *pb], n_boot=n_boot if not b else b, seed=seed + len(reps))
        reps.append(rep[:n] - rep[n:])
        b = sum(r.shape[1] for r in reps)
        r = method.method_interval(per_seed, np.concatenate(reps, axis=1), higher_is_better=HIGHER_IS_BETTER["ece"])
        if not r["mc_error"] > 0.1 * (r["hi"] - r["mean"]) or 2 * b > max_boot:
            return {**r, "per_seed": per_seed}


def method_level(
    a: Sequence[Predictions],
    b: Sequence[Predictions],
    keys: Sequence[str] = IMAGE_KEYS,
    n_boot: int = 2000,
    seed: int = 0,
    max_boot: int = 32000,
) -> "dict[str, dict]":
    """Per metric, one 95% interval of the method difference a − b over training seeds and evaluation images
    together, with its two-sided p, its verdict, the same test at df = n − 1 and whether the two disagree
    (``fragile``), and the interval with the models fixed (``models_fixed``, "for these trained models"), which it
    always contains.

    - ``top1`` and ``nll`` are means of per-image values: the exact two-way ANOVA of the per-image differences,
      seed s of a against seed s of b (:func:`harness.uncertainty.method.anova_interval`; the seed mean square
      floored at the interaction's); ``models_fixed`` is the paired t interval of the seed-averaged per-image
      differences (unfloored p).
    - ``ece`` is not: a two-level bootstrap (:func:`harness.uncertainty.method.method_interval`, per-seed
      differences on shared image resamples, the seed term floored at the interaction's share), starting at
      ``n_boot`` replicates and doubling until the Monte-Carlo error of the half-width (``mc_error``) is below a
      tenth of it, or ``max_boot``; ``models_fixed`` is the normal interval of the seed-averaged replicates.

    With one seed on either side only the models-fixed interval exists, and ``method`` says so.

    Args:
        a, b: the seeds' predictions of the method and of the reference (single-label), on the same
            evaluation examples; the first min(len(a), len(b)) of each, paired by position.
        keys: metrics among ``top1``, ``nll``, ``ece``.
        n_boot, seed, max_boot: the ECE bootstrap's first replicates, random stream and cap.

    Returns:
        ``{key: interval + {"per_seed": [n] differences, "n_images": N}}`` (the keys of
        :func:`~harness.uncertainty.method.anova_interval` or :func:`~harness.uncertainty.method.method_interval`).

    Raises:
        ValueError: different evaluation examples or labels, no model on a side, an unknown key.
    """
    unknown = sorted(set(keys) - set(IMAGE_KEYS))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; method_level compares {', '.join(IMAGE_KEYS)}")
    n = min(len(a), len(b))
    a, b = list(a)[:n], list(b)[:n]
    _check_same_examples(a, b)
    pa, pb = [parts(p) for p in a], [parts(p) for p in b]
    out = {}
    for key in keys:
        if key == "ece":
            r = _ece_interval(pa, pb, n_boot, seed, max_boot)
        else:
            d = np.stack([per_image_difference(key, x, y) for x, y in zip(pa, pb)])
            r = {**method.anova_interval(d, higher_is_better=HIGHER_IS_BETTER[key]), "per_seed": d.mean(1).tolist()}
        out[key] = {**r, "n_images": len(pa[0][0])}
    return out


def image_level(
    a: Sequence[Predictions],
    b: Sequence[Predictions],
    keys: Sequence[str] = IMAGE_KEYS,
    n_boot: int = 2000,
    seed: int = 0,
) -> "dict[str, dict]":
    """Per metric, with the models fixed ("for these trained models"): the difference in the seed-averaged metric
    (a's seeds averaged minus b's) with its 95% interval, unfloored two-sided p and verdict, exactly
    :func:`method_level`'s ``models_fixed`` (one definition); for ``top1`` also McNemar's exact test of each seed
    pair (a[i] against b[i]).

    Args:
        a, b: the seeds' predictions of the method and of the reference (single-label), on the same
            evaluation examples; the first min(len(a), len(b)) of each, paired by position.

    Returns:
        ``{key: {"diff", "lo", "hi", "std", "p", "verdict", "interval", "mcnemar" (top1)}}``.

    Raises:
        ValueError: different evaluation examples or labels.
    """
    full = method_level(a, b, keys, n_boot=n_boot, seed=seed)
    n = min(len(a), len(b))
    out = {}
    for key, r in full.items():
        f = r["models_fixed"]
        x = {
            "diff": f["diff"],
            "lo": f["lo"],
            "hi": f["hi"],
            "std": f["se"],
            "p": f["p"],
            "verdict": f["verdict"],
            "interval": "normal interval of the image bootstrap" if key == "ece" else "paired t over images",
        }
        if key == "top1":
            pa, pb = [parts(p) for p in list(a)[:n]], [parts(p) for p in list(b)[:n]]
            x["mcnemar"] = [stats.mcnemar_exact(u[1], v[1]) for u, v in zip(pa, pb)]
        out[key] = x
    return out
