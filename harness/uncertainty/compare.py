"""Comparisons of methods that say whether a difference is real.

Two sources of variation are kept apart:

- **seeds** (training randomness): per-seed metrics on the fixed evaluation set; a method's mean
  gets a 95% Student-t interval, and a method against the reference gets the paired per-seed
  difference (seed i against seed i) with its t-interval and paired t-test;
- **test sampling** (which images happen to be in the evaluation set): with the models fixed, a
  paired bootstrap over images of the difference in the seed-averaged metric, and McNemar's exact
  test on per-image correctness for each seed pair.

:func:`method_level` combines both into one interval for the method (new seeds and new images;
:func:`harness.uncertainty.stats.method_interval`); :func:`image_level` describes the trained models.
Verdict words come from the interval only (:func:`harness.uncertainty.stats.verdict`): "better" or
"worse" when the 95% interval excludes 0, otherwise "no detectable difference at n = ...". Every
interval result carries a two-sided p-value ``p`` (for a family adjustment, :func:`stats.holm`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from harness.uncertainty import metrics as M
from harness.uncertainty import stats
from harness.uncertainty.predictions import Predictions

#: metric -> True when higher is better (from :data:`harness.uncertainty.metrics.METRICS`)
HIGHER_IS_BETTER = {name: m.higher_is_better for name, m in M.METRICS.items()}
#: metrics compared image by image (single-label predictions)
IMAGE_KEYS = ("top1", "nll", "ece")


def _parts(p: Predictions) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """Per-example confidence, correctness and NLL ``([N], [N], [N])`` of softmax predictions."""
    lp = p.log_probs()
    y = np.asarray(p.targets, dtype=np.int64)
    conf, correct = M.top_label(lp, y)
    return conf, correct.astype(bool), -lp[np.arange(len(y)), y]


def _stat(key: str, k: int):
    """``stat(*arrays)``: the mean over ``k`` seeds of metric ``key`` from per-example parts
    (arrays are the seeds' (confidence, correctness, nll) triples, flattened)."""
    def one(conf: np.ndarray, correct: np.ndarray, nll: np.ndarray) -> float:
        if key == "top1":
            return float(correct.mean())
        if key == "nll":
            return float(nll.mean())
        return M.calibration_error(conf, correct)

    def stat(*arrays: np.ndarray) -> float:
        return float(np.mean([one(*arrays[3 * i:3 * i + 3]) for i in range(k)]))

    return stat


def _check_same_examples(a: Sequence[Predictions], b: Sequence[Predictions]) -> None:
    if not a or not b:
        raise ValueError("image-level comparisons need at least one model (seed) on each side")
    ref = a[0].index
    for p in [*a, *b]:
        if not np.array_equal(p.index, ref) or not np.array_equal(p.targets, a[0].targets):
            raise ValueError(f"{p.source} was evaluated on other examples or labels than {a[0].source}: image-level "
                             "comparisons need both methods on the same evaluation set")


def seed_summary(values: "dict[str, Sequence[float]]") -> "dict[str, dict]":
    """Per metric, the mean over seeds with its 95% t-interval and the seed std."""
    return {k: stats.t_interval(v) for k, v in values.items()}


def test_sampling_se(preds: Sequence[Predictions], keys: Sequence[str] = IMAGE_KEYS, n_boot: int = 500,
                     seed: int = 0) -> "dict[str, float]":
    """Per metric, the bootstrap standard error over evaluation images of each model's metric,
    averaged over the models (seeds): the part of the spread that comes from the test sample."""
    parts = [_parts(p) for p in preds]
    return {key: float(np.mean([stats.bootstrap_std(_stat(key, 1), x, n_boot=n_boot, seed=seed) for x in parts]))
            for key in keys}


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


def image_level(a: Sequence[Predictions], b: Sequence[Predictions], keys: Sequence[str] = IMAGE_KEYS,
                n_boot: int = 1000, seed: int = 0) -> "dict[str, dict]":
    """Per metric, with the models fixed: the paired bootstrap over images of the difference in the
    seed-averaged metric (a's seeds averaged minus b's) with its 95% percentile interval and verdict;
    for ``top1`` also McNemar's exact test of each seed pair (a[i] against b[i]).

    Args:
        a, b: the seeds' predictions of the method and of the reference (single-label), on the same
            evaluation examples; the first min(len(a), len(b)) of each, paired by position.

    Raises:
        ValueError: different evaluation examples or labels.
    """
    n = min(len(a), len(b))
    a, b = list(a)[:n], list(b)[:n]
    _check_same_examples(a, b)
    pa = tuple(x for p in a for x in _parts(p))
    pb = tuple(x for p in b for x in _parts(p))
    out = {}
    for key in keys:
        r = stats.paired_bootstrap(_stat(key, n), pa, pb, n_boot=n_boot, seed=seed)
        r["verdict"] = stats.verdict(r["lo"], r["hi"], HIGHER_IS_BETTER[key], None)
        if key == "top1":
            r["mcnemar"] = [stats.mcnemar_exact(pa[3 * i + 1], pb[3 * i + 1]) for i in range(n)]
        out[key] = r
    return out


def method_level(a: Sequence[Predictions], b: Sequence[Predictions], keys: Sequence[str] = IMAGE_KEYS,
                 n_boot: int = 1000, seed: int = 0) -> "dict[str, dict]":
    """Per metric, one 95% interval of the method difference a − b over training seeds and evaluation
    images together (:func:`harness.uncertainty.stats.method_interval`, two-way random effects with a
    Satterthwaite t), with its two-sided p and verdict.

    ``per_seed[s]`` is metric(a[s]) − metric(b[s]) on the whole evaluation set (top-1 as a fraction, NLL in
    nats, ECE with :func:`harness.uncertainty.metrics.calibration_error`, as :func:`image_level` computes
    them); the image term comes from the per-seed differences on the resamples :func:`image_level` draws
    (:func:`harness.uncertainty.stats.bootstrap_replicates`, same ``seed`` and ``n_boot``; their mean over
    seeds is exactly :func:`image_level`'s replicate), so it counts only the image effect all seeds share.
    With one seed on either side the result is the image-level interval, and ``method`` says so.

    Args:
        a, b: the seeds' predictions of the method and of the reference (single-label), on the same
            evaluation examples; the first min(len(a), len(b)) of each, paired by position.
        keys: metrics among ``top1``, ``nll``, ``ece``.
        n_boot, seed: the image bootstrap's replicates and random stream.

    Returns:
        ``{key: method_interval result + {"per_seed": [n] differences, "n_images": N, "models_fixed":
        {"diff", "lo", "hi", "std", "p", "verdict"}}}``; ``models_fixed`` is :func:`image_level`'s interval
        (the models fixed, "for these trained models") from the same replicates, equal to it up to rounding
        (about 1e-15), so a caller needs only one bootstrap for both lines.

    Raises:
        ValueError: different evaluation examples or labels, no model on a side, an unknown key.
    """
    unknown = sorted(set(keys) - set(IMAGE_KEYS))
    if unknown:
        raise ValueError(f"unknown metric(s) {unknown}; method_level compares {', '.join(IMAGE_KEYS)}")
    n = min(len(a), len(b))
    a, b = list(a)[:n], list(b)[:n]
    _check_same_examples(a, b)
    pa, pb = [_parts(p) for p in a], [_parts(p) for p in b]
    out = {}
    for key in keys:
        stat = _stat(key, 1)
        per_seed = [stat(*x) - stat(*y) for x, y in zip(pa, pb)]
        rep = stats.bootstrap_replicates(stat, [*pa, *pb], n_boot=n_boot, seed=seed)
        diffs = rep[:n] - rep[n:]
        r = stats.method_interval(per_seed, diffs, higher_is_better=HIGHER_IS_BETTER[key])
        fixed = diffs.mean(0)
        lo, hi = (float(v) for v in np.percentile(fixed, [2.5, 97.5]))
        out[key] = {**r, "per_seed": per_seed, "n_images": len(pa[0][0]), "models_fixed": {
            "diff": float(np.mean(per_seed)), "lo": lo, "hi": hi, "std": float(fixed.std(ddof=1)),
            "p": stats.bootstrap_p(fixed), "verdict": stats.verdict(lo, hi, HIGHER_IS_BETTER[key], None)}}
    return out
