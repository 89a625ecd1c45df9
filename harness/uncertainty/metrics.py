"""Classification metrics on final predictive probabilities (after MC averaging for het models).

Definitions follow google-research/robustness_metrics (``robustness_metrics/metrics/base.py``,
``metrics/uncertainty.py``) and uncertainty-baselines' conventions. All functions take NumPy arrays or torch tensors, compute in float64 and return
Python floats (or arrays for reliability bins). Shapes: ``N`` examples, ``K`` classes.

Single-label inputs: ``log_probs`` ``[N, K]`` (log of normalised probabilities), ``labels`` ``[N]`` ints.
Multi-label inputs (``logits`` ``[N, K]``, sigmoid link; ``targets`` ``[N, K]`` in {0, 1}) have their own metrics
and row rule: :mod:`harness.uncertainty.multilabel`.

Input checks (:mod:`harness.uncertainty.checks`): every public metric refuses bad input (wrong shapes,
labels out of range, unnormalised log-probabilities, NaN) with a ``ValueError`` that names the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from harness.uncertainty.checks import as_float64, check_forecasts, check_log_probs

NUM_BINS = 15


@dataclass(frozen=True)
class Metric:
    """How a metric is shown and read: ``label`` (table heading), ``higher_is_better`` (its
    direction, which decides "better" and "worse"), ``percent`` (shown x100, in points), ``high`` (the largest value
    it can take; None: unbounded). Every metric here is >= 0."""

    label: str
    higher_is_better: bool
    percent: bool
    high: Optional[float] = None


#: every metric this module and :mod:`harness.uncertainty.multilabel` compute, by the name their suites return
METRICS = {
    "top1": Metric("top-1", True, True, 1.0),
    "top5": Metric("top-5", True, True, 1.0),
    "nll": Metric("NLL", False, False),
    "brier": Metric("Brier", False, False, 2.0),  # the sum over classes of squared errors of a probability vector
    "ece": Metric("ECE", False, False, 1.0),
    "mce": Metric("MCE", False, False, 1.0),
    "adaptive_ece": Metric("adaptive ECE", False, False, 1.0),
    "prec@1": Metric("prec@1", True, True, 1.0),
    "sigmoid_nll": Metric("sigmoid NLL", False, False),
    "micro_ap": Metric("micro-AP", True, True, 1.0),
    "macro_map": Metric("macro mAP", True, True, 1.0),
    # computed by their own functions, not by the suites (so existing reports keep their columns)
    "classwise_ece": Metric("classwise ECE", False, False, 1.0),
    "rms_ce": Metric("RMS calibration error", False, False, 1.0),
}


def log_softmax(logits: Any) -> np.ndarray:
    """Row-wise log-softmax ``[N, K] -> [N, K]``, stable (max subtraction). NaN propagates (the metrics then refuse
    it, naming the rows); ``-inf`` logits give probability 0 (log p = -inf).

    Raises:
        ValueError: ``logits`` is not ``[N, K]`` with K >= 1, holds ``+inf`` (a softmax of it is undefined: NaN), has a row of only
            ``-inf`` (no class has probability), or is complex / a meta tensor (:func:`checks.as_float64`).
    """
    z = as_float64(logits, "logits")
    if z.ndim != 2 or z.shape[1] == 0:
        raise ValueError(f"logits must be [N, K] (examples x classes, K >= 1), got shape {z.shape}")
    bad = z == np.inf
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(
            f"logits hold +inf in {int(bad.any(axis=1).sum())} of {len(z)} rows (first: [{r}, {c}]): the softmax of "
            "+inf is undefined; find where the model overflowed (e.g. float16 logits) or clip the logits"
        )
    m = z.max(axis=1, keepdims=True)
    dead = m[:, 0] == -np.inf
    if dead.any():
        raise ValueError(
            f"logits hold a row of only -inf in {int(dead.sum())} of {len(z)} rows (first: row "
            f"{int(np.argmax(dead))}): no class has any probability; find where the model produced them"
        )
    z = z - m
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def log_sigmoid(x: Any) -> np.ndarray:
    """log σ(x) elementwise (any shape), stable for large |x|: -softplus(-x). NaN propagates; ±inf are fine.

    Raises:
        ValueError: ``x`` complex or a meta tensor (:func:`checks.as_float64`).
    """
    x = as_float64(x, "logits")
    return -np.logaddexp(0.0, -x)


# ---------------------------------------------------------------------------------- single-label
#: the suite reports top-k accuracy for these k, each only where the task has more than k classes (with K <= k
#: every label is among the k most probable, a meaningless 1.0)
TOP_K = (1, 5)


def _accuracy(lp: np.ndarray, y: np.ndarray, k: int) -> float:
    top = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    return float((top == y[:, None]).any(axis=1).mean())


def accuracy(log_probs: Any, labels: Any, k: int = 1) -> float:
    """Top-k accuracy: share of examples whose label is among the k most probable classes.

    Args:
        log_probs: ``[N, K]`` normalised log-probabilities.
        labels: ``[N]`` ints.
        k: a whole number in [1, K]; with k equal to K the accuracy is always 1.0.

    Ties at the k-th score are broken towards the lower class index (as ``argsort`` does).
    Source: robustness_metrics ``metrics/base.py`` (top-k); top-1 is ``argmax p == y``.

    Raises:
        ValueError: a bad input (module docstring), or ``k`` not a whole number in [1, K].
    """
    lp, y = check_log_probs(log_probs, labels)
    num_classes = lp.shape[1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise ValueError(
            f"k must be a whole number in [1, K] (K = {num_classes} classes), got k={k!r} of type "
            f"{type(k).__name__}: pass an int"
            + (f" (k={int(k)})" if isinstance(k, float) and k.is_integer() and 1 <= k <= num_classes else "")
        )
    if k < 1:
        raise ValueError(
            f"k must be a whole number in [1, K] (K = {num_classes} classes), got k={k}: a top-k accuracy counts "
            "the label among the k most probable classes, so k >= 1 (k=1 is the top-1 accuracy)"
        )
    if k > num_classes:
        raise ValueError(
            f"k must be a whole number in [1, K] (K = {num_classes} classes), got k={k}: a top-{k} accuracy of "
            f"{num_classes} classes would be a meaningless 1.0; pass k <= {num_classes}"
        )
    return _accuracy(lp, y, k)


def _nll(lp: np.ndarray, y: np.ndarray) -> float:
    return float(-lp[np.arange(len(y)), y].mean())


def nll(log_probs: Any, labels: Any) -> float:
    """Negative log-likelihood in nats, mean over examples of -log p(y|x) (robustness_metrics).

    Args: ``log_probs`` ``[N, K]``, ``labels`` ``[N]``. For het models ``log_probs`` is log of the
    MC-mean probability, so this is -log p̄_y. An exact zero probability on the label gives ``inf``.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _nll(*check_log_probs(log_probs, labels))


def _brier(lp: np.ndarray, y: np.ndarray) -> float:
    p = np.exp(lp)
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), y] = 1.0
    return float(((p - onehot) ** 2).sum(axis=1).mean())


def brier(log_probs: Any, labels: Any) -> float:
    """Brier score: mean over examples of Σ_k (p_k - 1[y = k])², in [0, 2] (Brier 1950; full multiclass form).

    Args: ``log_probs`` ``[N, K]``, ``labels`` ``[N]``. For K = 2 this is twice scikit-learn's
    ``brier_score_loss`` on the positive class.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _brier(*check_log_probs(log_probs, labels))


def _equal_width_index(conf: np.ndarray, num_bins: int) -> np.ndarray:
    """The equal-width bin of each confidence: floor(B·conf) clipped to [0, B-1] (conf = 1 in the last bin)."""
    return np.clip(np.floor(conf * num_bins).astype(np.int64), 0, num_bins - 1)


def _reliability_bins(conf: np.ndarray, corr: np.ndarray, num_bins: int, adaptive: bool) -> dict:
    n = len(conf)
    if adaptive:
        order = np.argsort(conf, kind="stable")
        groups = np.array_split(order, num_bins)
        idx = np.empty(n, dtype=np.int64)
        for b, g in enumerate(groups):
            idx[g] = b
        edges = np.array([0.0] + [conf[g].max() if len(g) else np.nan for g in groups])
    else:
        idx = _equal_width_index(conf, num_bins)
        edges = np.linspace(0.0, 1.0, num_bins + 1)
    count = np.bincount(idx, minlength=num_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(idx, weights=conf, minlength=num_bins) / count
        acc = np.bincount(idx, weights=corr, minlength=num_bins) / count
    return {"edges": edges, "count": count, "confidence": mean_conf, "accuracy": acc}


def reliability_bins(confidence: Any, correct: Any, num_bins: int = NUM_BINS, adaptive: bool = False) -> dict:
    """Per-bin counts, mean confidence and accuracy of top-label forecasts.

    Args:
        confidence: ``[N]`` probabilities in [0, 1]; correct: ``[N]`` 0/1; num_bins: B >= 1.

    Equal-width bins: index = floor(B·conf) clipped to [0, B-1], so conf = 1 falls in the last bin
    (robustness_metrics / ``tf.histogram_fixed_width_bins``). Adaptive (equal-mass) bins split the
    examples sorted by confidence into B groups whose sizes differ by at most one.

    Returns:
        ``{"edges" [B+1], "count" [B], "confidence" [B], "accuracy" [B]}``; empty bins have
        confidence and accuracy NaN.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _reliability_bins(*check_forecasts(confidence, correct, num_bins), num_bins, adaptive)


def _calibration_error(conf: np.ndarray, corr: np.ndarray, num_bins: int, adaptive: bool, reduce: str) -> float:
    bins = _reliability_bins(conf, corr, num_bins, adaptive)
    filled = bins["count"] > 0
    gaps = np.abs(bins["accuracy"][filled] - bins["confidence"][filled])
    if reduce == "max":
        return float(gaps.max())
    weights = bins["count"][filled] / bins["count"].sum()
    return float(np.sqrt((weights * gaps**2).sum())) if reduce == "rms" else float((weights * gaps).sum())


def calibration_error(confidence: Any, correct: Any, num_bins: int = NUM_BINS) -> float:
    """ECE of top-label forecasts given directly: Σ_b (n_b / N) |acc_b - conf_b|, equal-width bins.

    Args: ``confidence`` ``[N]`` in [0, 1], ``correct`` ``[N]`` 0/1. Source as :func:`ece`.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _calibration_error(*check_forecasts(confidence, correct, num_bins), num_bins, False, "mean")


def resampled_calibration_error(
    confidence: np.ndarray, correct: np.ndarray, index: np.ndarray, num_bins: int = NUM_BINS
) -> np.ndarray:
    """:func:`calibration_error` of many resamples at once (the bootstrap's inner loop): row r is the ECE of
    ``confidence[index[r]]``, ``correct[index[r]]``, the same bins and sums as :func:`calibration_error`
    (equal to it within 1e-12, tested).

    Args:
        confidence: ``[N]`` in [0, 1] (already checked).
        correct: ``[N]`` 0/1 (already checked).
        index: ``[R, M]`` int positions into them, one resample a row.

    Returns:
        ``[R]`` float64.
    """
    rows, m = index.shape
    bins = _equal_width_index(confidence, num_bins)[index] + num_bins * np.arange(rows)[:, None]
    size = rows * num_bins
    count = np.bincount(bins.ravel(), minlength=size).reshape(rows, num_bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_conf = np.bincount(bins.ravel(), weights=confidence[index].ravel(), minlength=size).reshape(rows, -1)
        acc = np.bincount(bins.ravel(), weights=correct[index].ravel(), minlength=size).reshape(rows, -1)
        gaps = np.where(count > 0, np.abs(acc / count - mean_conf / count), 0.0)
    return (count / m * gaps).sum(axis=1)


def _top_label(lp: np.ndarray, y: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    return np.exp(lp.max(axis=1)), (lp.argmax(axis=1) == y).astype(np.float64)


def top_label(log_probs: Any, labels: Any) -> "tuple[np.ndarray, np.ndarray]":
    """(confidence = max_k p_k, correct = argmax == y), each ``[N]``, from ``log_probs`` ``[N, K]``.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _top_label(*check_log_probs(log_probs, labels))


def ece(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """Expected calibration error, top-label, equal-width bins (Guo et al. 2017; robustness_metrics):
    ECE = Σ_b (n_b / N) |acc_b - conf_b| over non-empty bins, in [0, 1]. Default 15 bins (google-research/robustness_metrics ``robustness_metrics/metrics/uncertainty.py``).

    Args: ``log_probs`` ``[N, K]``, ``labels`` ``[N]``. Equals netcal ``ECE(bins).measure(conf, correct)``
    (tested).

    Raises:
        ValueError: a bad input (module docstring).
    """
    conf, corr = top_label(log_probs, labels)
    return _calibration_error(*check_forecasts(conf, corr, num_bins), num_bins, False, "mean")


def mce(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """Maximum calibration error: max over non-empty equal-width bins of |acc_b - conf_b| (Naeini et al. 2015).

    Raises:
        ValueError: a bad input (module docstring).
    """
    conf, corr = top_label(log_probs, labels)
    return _calibration_error(*check_forecasts(conf, corr, num_bins), num_bins, False, "max")


def adaptive_ece(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """ECE with equal-mass bins (Nguyen & O'Connor 2015): the examples sorted by confidence are split
    into B groups whose sizes differ by at most one (``np.array_split``; tied confidences may fall in
    two groups), then Σ_b (n_b / N) |acc_b - conf_b|.

    Not identical to netcal's ``ECE(equal_intervals=False)``: netcal puts bin edges at the confidence
    quantiles (``np.quantile``, linear interpolation) and assigns whole ties to one bin, so its bins
    and values differ slightly (0.01 on 600 random examples in the tests).

    Raises:
        ValueError: a bad input (module docstring).
    """
    conf, corr = top_label(log_probs, labels)
    return _calibration_error(*check_forecasts(conf, corr, num_bins), num_bins, True, "mean")


def rms_calibration_error(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """Root-mean-square calibration error of top-label forecasts, equal-width bins:
    RMS-CE = sqrt(Σ_b (n_b / N) (acc_b - conf_b)²) over non-empty bins, in [0, 1]; >= ECE (Jensen).

    Source: Hendrycks et al. 2019, "Deep Anomaly Detection with Outlier Exposure" (ICLR; and AugMix, ICLR 2020), the
    l2 calibration error of Kumar et al. 2019; torchmetrics ``MulticlassCalibrationError(norm="l2")`` and
    torch-uncertainty's ``CalibrationError(norm="l2")`` compute this definition (equal-width bins; equal to
    torchmetrics in the tests). Hendrycks' own code bins by equal mass (100 examples per bin), which differs slightly.

    Args: ``log_probs`` ``[N, K]``, ``labels`` ``[N]``; ``num_bins`` B (15, as :func:`ece`).

    Raises:
        ValueError: a bad input (module docstring).
    """
    conf, corr = top_label(log_probs, labels)
    return _calibration_error(*check_forecasts(conf, corr, num_bins), num_bins, False, "rms")


def classwise_ece(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """Classwise expected calibration error: the ECE of every class's probability as a forecast of that class,
    averaged over the K classes: (1/K) Σ_j Σ_b (n_jb / N) |freq_jb - conf_jb|, where bin b of class j holds the
    examples whose p_j falls in it (equal-width bins), conf_jb is their mean p_j and freq_jb the fraction of them
    labelled j. Unlike the top-label ECE it also scores the probabilities of the classes not predicted.

    Source: Kull et al. 2019, "Beyond temperature scaling: obtaining well-calibrated multiclass probabilities with
    Dirichlet calibration" (NeurIPS), Sec. 2 (classwise-ECE, 15 bins); per class it is the binary ECE of
    torchmetrics ``BinaryCalibrationError(norm="l1")`` on (p_j, y == j), as the tests check.

    Args: ``log_probs`` ``[N, K]``, ``labels`` ``[N]``; ``num_bins`` B.

    Raises:
        ValueError: a bad input (module docstring).
    """
    lp, y = check_log_probs(log_probs, labels)
    probs = np.minimum(np.exp(lp), 1.0)
    check_forecasts(probs[:, 0], (y == 0).astype(np.float64), num_bins)
    return float(
        np.mean(
            [
                _calibration_error(probs[:, j], (y == j).astype(np.float64), num_bins, False, "mean")
                for j in range(probs.shape[1])
            ]
        )
    )


# ---------------------------------------------------------------------------------- suite
def classification_metrics(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> "dict[str, float]":
    """The single-label suite: top-1, top-5, NLL, Brier, ECE, MCE, adaptive ECE (inputs checked once). Top-5 only
    with more than 5 classes (:data:`TOP_K`): of K <= 5 classes it would be a meaningless 1.0.

    Raises:
        ValueError: a bad input (module docstring).
    """
    lp, y = check_log_probs(log_probs, labels)
    conf, corr = check_forecasts(*_top_label(lp, y), num_bins)
    top = {f"top{k}": _accuracy(lp, y, k) for k in TOP_K if k == 1 or k < lp.shape[1]}
    return {
        **top,
        "nll": _nll(lp, y),
        "brier": _brier(lp, y),
        "ece": _calibration_error(conf, corr, num_bins, False, "mean"),
        "mce": _calibration_error(conf, corr, num_bins, False, "max"),
        "adaptive_ece": _calibration_error(conf, corr, num_bins, True, "mean"),
    }
