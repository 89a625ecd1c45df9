"""Classification metrics on final predictive probabilities (after MC averaging for het models).

Definitions follow google-research/robustness_metrics (``robustness_metrics/metrics/base.py``,
``metrics/uncertainty.py``) and uncertainty-baselines' conventions. All functions take NumPy arrays or torch tensors, compute in float64 and return
Python floats (or arrays for reliability bins). Shapes: ``N`` examples, ``K`` classes.

Single-label inputs: ``log_probs`` ``[N, K]`` (log of normalised probabilities), ``labels`` ``[N]`` ints.
Multi-label inputs: ``logits`` ``[N, K]`` (sigmoid link), ``targets`` ``[N, K]`` in {0, 1}.

Input checks: every public metric refuses, with a ``ValueError`` that names the fix,

- ``N = 0`` (nothing to score), shapes other than the above, labels whose count differs from N;
- labels of a non-integer dtype (floats, bools) or outside ``[0, K)``;
- log-probabilities whose rows do not normalise, ``|Σ_k p_k - 1| > NORM_TOL`` (raw logits land
  here: pass ``log_softmax(logits)``); exact zeros (``log p = -inf``) are fine;
- confidences outside ``[0, 1]`` and correctness values other than 0/1;
- multi-label targets with values other than 0 and 1 (soft labels, class indices).

NaN: never scored. A NaN anywhere in the scored input (log-probabilities, logits, confidences,
targets) raises ``ValueError`` naming how many rows hold one and the first; no metric returns a
number (or NaN) computed from NaN inputs. The transforms :func:`log_softmax` / :func:`log_sigmoid`
propagate NaN like NumPy.

The checks are one extra pass over the ``[N, K]`` input (row sums of float32 ``exp``, or NaN and
0/1 tests for multi-label inputs), in row chunks of about 32 MB of temporaries: measured at
1M x 1k on one core of a shared 2-core CPU, 4.8 s for float64 log-probabilities (NLL itself then
takes 1 s more) and 3 s for multi-label logits and targets. Multi-label logits may be ±inf (a
certain forecast).

Multi-label rule for examples without a positive label (an all-zero target row): they are dropped
from every multi-label metric (prec@1, sigmoid NLL, micro-AP, macro mAP, top-label ECE), from
post-hoc temperature fitting (:func:`harness.ensembles.fit_temperature`) and from the reliability
diagram, as uncertainty_baselines masks all-zero label vectors out of the loss and prec@1 and
ImageNet-ReaL masks empty label sets (Beyer et al. 2020, "Are we done with ImageNet?"). :func:`labelled_examples` applies
it. A split where no example has a positive label raises ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any

import numpy as np

NUM_BINS = 15


@dataclass(frozen=True)
class Metric:
    """How a metric is shown and read: ``label`` (table heading), ``higher_is_better`` (its
    direction, which decides "better" and "worse"), ``percent`` (shown x100, in points)."""

    label: str
    higher_is_better: bool
    percent: bool


#: every metric this module computes, by the name its suites return
METRICS = {
    "top1": Metric("top-1", True, True), "top5": Metric("top-5", True, True), "nll": Metric("NLL", False, False),
    "brier": Metric("Brier", False, False), "ece": Metric("ECE", False, False), "mce": Metric("MCE", False, False),
    "adaptive_ece": Metric("adaptive ECE", False, False), "prec@1": Metric("prec@1", True, True),
    "sigmoid_nll": Metric("sigmoid NLL", False, False), "micro_ap": Metric("micro-AP", True, True),
    "macro_map": Metric("macro mAP", True, True),
}
NORM_TOL = 1e-3  # |Σ_k p_k - 1| allowed for "normalised" (float32 round-off passes; raw logits do not)
_CHUNK_ELEMENTS = 1 << 22  # elements per chunk of the normalisation check (32 MB of float64)


def _np(x: Any, dtype=np.float64) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _raw(x: Any) -> np.ndarray:
    """As an array, keeping the dtype (to tell integer labels from float ones)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def log_softmax(logits: Any) -> np.ndarray:
    """Row-wise log-softmax ``[N, K] -> [N, K]``, stable (max subtraction). NaN propagates.

    Raises:
        ValueError: ``logits`` is not 2-D.
    """
    z = _np(logits)
    if z.ndim != 2:
        raise ValueError(f"logits must be [N, K] (examples x classes), got shape {z.shape}")
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def log_sigmoid(x: Any) -> np.ndarray:
    """log σ(x) elementwise (any shape), stable for large |x|: -softplus(-x). NaN propagates."""
    x = _np(x)
    return -np.logaddexp(0.0, -x)


# ---------------------------------------------------------------------------------- input checks
def _no_examples(what: str) -> ValueError:
    return ValueError(f"{what} has no examples (N = 0): there is nothing to score; check that the evaluation "
                      "split is not empty")


def _check_labels(labels: Any, n: int, num_classes: int) -> np.ndarray:
    """``[N]`` int64 class indices in ``[0, K)``, one per row of the scores."""
    y = _raw(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of class indices [N], got shape {y.shape}; multi-hot "
                         "targets [N, K] go to the multi-label metrics (prec_at_1, sigmoid_nll, ...)")
    if y.dtype.kind not in "iu":
        raise ValueError(f"labels must be integer class indices, got dtype {y.dtype}; cast whole-number labels "
                         "with labels.astype(int) (soft or multi-hot targets need the multi-label metrics)")
    if len(y) != n:
        raise ValueError(f"{len(y)} labels for {n} rows of predictions: give exactly one label per example, in "
                         "the same order as the prediction rows")
    if y.min() < 0 or y.max() >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), got range [{y.min()}, {y.max()}]; "
                         "check the label set or the model's num_classes")
    return y.astype(np.int64, copy=False)


def _row_chunks(x: np.ndarray) -> "list[slice]":
    """Row slices of ``x`` ``[N, K]`` holding about ``_CHUNK_ELEMENTS`` elements each (bounds temporaries)."""
    rows = max(1, _CHUNK_ELEMENTS // max(x.shape[1], 1))
    return [slice(r0, r0 + rows) for r0 in range(0, x.shape[0], rows)]


def _rows_any(x: np.ndarray, test) -> np.ndarray:
    """``[N]`` bool: rows of ``x`` where ``test(chunk)`` (elementwise bool) holds anywhere, chunked."""
    return np.concatenate([test(x[s]).any(axis=1) for s in _row_chunks(x)])


def _row_prob_sums(lp: np.ndarray) -> np.ndarray:
    """``[N]`` Σ_k exp(lp_nk), chunked, exp in float32 (relative error ~1e-7, 3x faster than float64).

    No max subtraction is needed: valid log-probabilities are <= 0. NaN where a row holds NaN; 0 for
    rows of (nearly) all -inf; inf for rows with large positive values (raw logits).
    """
    out = np.empty(lp.shape[0])
    with np.errstate(over="ignore"):
        for s in _row_chunks(lp):
            out[s] = np.exp(lp[s].astype(np.float32)).sum(axis=1, dtype=np.float64)
    return out


def _check_log_probs(log_probs: Any, labels: Any) -> "tuple[np.ndarray, np.ndarray]":
    """(log_probs ``[N, K]`` float64, labels ``[N]`` int64) after every single-label check."""
    lp = _np(log_probs)
    if lp.ndim != 2:
        raise ValueError(f"log_probs must be [N, K] (examples x classes), got shape {lp.shape}")
    if lp.shape[0] == 0:
        raise _no_examples("log_probs")
    y = _check_labels(labels, lp.shape[0], lp.shape[1])
    sums = _row_prob_sums(lp)
    nan = np.isnan(sums)
    if nan.any():
        raise ValueError(f"log_probs holds NaN in {int(nan.sum())} of {len(sums)} rows (first: row "
                         f"{int(np.argmax(nan))}); NaN predictions are not scored: find where the model or the "
                         "preprocessing produced them (a diverged run, a division by zero)")
    off = np.abs(sums - 1.0) > NORM_TOL
    if off.any():
        r = int(np.argmax(off))
        if sums[r] > 1:
            hint = "these look like raw logits: pass harness.metrics.log_softmax(logits)"
        else:
            hint = ("their probabilities sum to less than 1: are classes missing from the columns? Renormalise with "
                    "harness.metrics.log_softmax only if that is intended")
        raise ValueError(f"log_probs must be normalised log-probabilities (each row's probabilities sum to 1), but "
                         f"{int(off.sum())} of {len(sums)} rows do not (first: row {r}, Σ_k p_k = {sums[r]:.4g}); "
                         f"{hint}")
    return lp, y


def _check_forecasts(confidence: Any, correct: Any, num_bins: int) -> "tuple[np.ndarray, np.ndarray]":
    """(confidence ``[N]`` in [0, 1], correct ``[N]`` in {0, 1}) as float64."""
    if not isinstance(num_bins, (int, np.integer)) or isinstance(num_bins, bool) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer, got {num_bins!r}")
    conf, corr = _np(confidence), _np(correct)
    if conf.ndim != 1 or corr.shape != conf.shape:
        raise ValueError(f"confidence and correct must both be [N], got shapes {conf.shape} and {corr.shape}")
    if not len(conf):
        raise _no_examples("confidence")
    bad = ~((conf >= 0) & (conf <= 1))  # NaN is bad too
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"confidence must be probabilities in [0, 1], but {int(bad.sum())} of {len(conf)} are not "
                         f"(first: [{i}] = {conf[i]}); pass the top-label probability max_k p_k (exp of a "
                         "log-probability, sigmoid of a logit), not a logit or a NaN")
    bad = ~((corr == 0) | (corr == 1))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"correct must be 0/1 (or bool) per example, got {corr[i]} at [{i}]; pass "
                         "(prediction == label)")
    return conf, corr


def _check_multilabel(logits: Any, targets: Any) -> "tuple[np.ndarray, np.ndarray]":
    """(logits ``[N, K]`` float64, targets ``[N, K]`` in their own dtype) after every multi-label check,
    before the row rule."""
    z, t = _np(logits), _raw(targets)
    if z.ndim != 2 or z.shape != t.shape:
        raise ValueError(f"logits {z.shape} and multi-hot targets {t.shape} must have the same [N, K] shape; "
                         "single-label class indices [N] go to the single-label metrics (or one-hot them with "
                         "np.eye(K)[labels])")
    if z.shape[0] == 0:
        raise _no_examples("logits")
    nan = _rows_any(z, np.isnan)
    if nan.any():
        raise ValueError(f"logits hold NaN in {int(nan.sum())} of {len(z)} rows (first: row {int(np.argmax(nan))}); "
                         "NaN predictions are not scored: find where the model produced them")
    bad = _rows_any(t, lambda c: ~((c == 0) | (c == 1)))  # NaN is bad too
    if bad.any():
        i = int(np.argmax(bad))
        j = int(np.argmax(~((t[i] == 0) | (t[i] == 1))))
        raise ValueError(f"multi-label targets must be multi-hot 0/1 values, got {t[i, j]} at [{i}, {j}] "
                         f"({int(bad.sum())} row(s) hold such values); soft labels are not supported: threshold "
                         "them, or give class indices [N] to the single-label metrics")
    return z, t


def labelled_examples(logits: Any, targets: Any) -> "tuple[np.ndarray, np.ndarray]":
    """The multi-label row rule (module docstring): ``(logits, targets)`` ``[N', K]`` of the examples
    with at least one positive label, after the multi-label input checks (logits as float64, targets
    in their own dtype: bool, int or float 0/1).

    Raises:
        ValueError: a bad input (module docstring), or no example has a positive label.
    """
    z, t = _check_multilabel(logits, targets)
    keep = t.any(axis=1)
    if not keep.any():
        raise ValueError(f"none of the {len(t)} examples has a positive label; multi-label metrics drop examples "
                         "without one, so nothing is left to score: check the targets (all-zero rows)")
    return (z, t) if keep.all() else (z[keep], t[keep])


# ---------------------------------------------------------------------------------- single-label
def _accuracy(lp: np.ndarray, y: np.ndarray, k: int) -> float:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    k = min(k, lp.shape[1])
    top = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    return float((top == y[:, None]).any(axis=1).mean())


def accuracy(log_probs: Any, labels: Any, k: int = 1) -> float:
    """Top-k accuracy: share of examples whose label is among the k most probable classes.

    Args:
        log_probs: ``[N, K]`` normalised log-probabilities; labels: ``[N]`` ints; k >= 1 (k > K counts as K).

    Ties at the k-th score are broken towards the lower class index (as ``argsort`` does).
    Source: robustness_metrics ``metrics/base.py`` (top-k); top-1 is ``argmax p == y``.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _accuracy(*_check_log_probs(log_probs, labels), k)


def _nll(lp: np.ndarray, y: np.ndarray) -> float:
    return float(-lp[np.arange(len(y)), y].mean())


def nll(log_probs: Any, labels: Any) -> float:
    """Negative log-likelihood in nats, mean over examples of -log p(y|x) (robustness_metrics).

    Args: ``log_probs`` ``[N, K]``, ``labels`` ``[N]``. For het models ``log_probs`` is log of the
    MC-mean probability, so this is -log p̄_y. An exact zero probability on the label gives ``inf``.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _nll(*_check_log_probs(log_probs, labels))


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
    return _brier(*_check_log_probs(log_probs, labels))


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
        idx = np.clip(np.floor(conf * num_bins).astype(np.int64), 0, num_bins - 1)
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
    return _reliability_bins(*_check_forecasts(confidence, correct, num_bins), num_bins, adaptive)


def _calibration_error(conf: np.ndarray, corr: np.ndarray, num_bins: int, adaptive: bool, reduce: str) -> float:
    bins = _reliability_bins(conf, corr, num_bins, adaptive)
    filled = bins["count"] > 0
    gaps = np.abs(bins["accuracy"][filled] - bins["confidence"][filled])
    if reduce == "max":
        return float(gaps.max())
    weights = bins["count"][filled] / bins["count"].sum()
    return float((weights * gaps).sum())


def calibration_error(confidence: Any, correct: Any, num_bins: int = NUM_BINS) -> float:
    """ECE of top-label forecasts given directly: Σ_b (n_b / N) |acc_b - conf_b|, equal-width bins.

    Args: ``confidence`` ``[N]`` in [0, 1], ``correct`` ``[N]`` 0/1. Source as :func:`ece`.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _calibration_error(*_check_forecasts(confidence, correct, num_bins), num_bins, False, "mean")


def _top_label(lp: np.ndarray, y: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    return np.exp(lp.max(axis=1)), (lp.argmax(axis=1) == y).astype(np.float64)


def top_label(log_probs: Any, labels: Any) -> "tuple[np.ndarray, np.ndarray]":
    """(confidence = max_k p_k, correct = argmax == y), each ``[N]``, from ``log_probs`` ``[N, K]``.

    Raises:
        ValueError: a bad input (module docstring).
    """
    return _top_label(*_check_log_probs(log_probs, labels))


def ece(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """Expected calibration error, top-label, equal-width bins (Guo et al. 2017; robustness_metrics):
    ECE = Σ_b (n_b / N) |acc_b - conf_b| over non-empty bins, in [0, 1]. Default 15 bins (google-research/robustness_metrics ``robustness_metrics/metrics/uncertainty.py``).

    Args: ``log_probs`` ``[N, K]``, ``labels`` ``[N]``. Equals netcal ``ECE(bins).measure(conf, correct)``
    (tested).

    Raises:
        ValueError: a bad input (module docstring).
    """
    conf, corr = top_label(log_probs, labels)
    return _calibration_error(*_check_forecasts(conf, corr, num_bins), num_bins, False, "mean")


def mce(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """Maximum calibration error: max over non-empty equal-width bins of |acc_b - conf_b| (Naeini et al. 2015).

    Raises:
        ValueError: a bad input (module docstring).
    """
    conf, corr = top_label(log_probs, labels)
    return _calibration_error(*_check_forecasts(conf, corr, num_bins), num_bins, False, "max")


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
    return _calibration_error(*_check_forecasts(conf, corr, num_bins), num_bins, True, "mean")


# ---------------------------------------------------------------------------------- multi-label
def _prec_at_1(z: np.ndarray, t: np.ndarray) -> float:
    return float(t[np.arange(len(z)), z.argmax(axis=1)].mean())


def prec_at_1(logits: Any, targets: Any) -> float:
    """prec@1: share of examples whose top-scoring class is a positive label (uncertainty-baselines
    ``evaluation_fn``). Args: ``logits``, ``targets`` ``[N, K]``; multi-label row rule (module docstring).

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    return _prec_at_1(*labelled_examples(logits, targets))


def _sigmoid_nll(z: np.ndarray, t: np.ndarray) -> float:
    return float(-np.where(t == 1, log_sigmoid(z), log_sigmoid(-z)).sum(axis=1).mean())  # ±inf logits: no 0·inf


def sigmoid_nll(logits: Any, targets: Any) -> float:
    """Bernoulli NLL in nats summed over the K classes, mean over examples (uncertainty-baselines
    ``sigmoid_xent``). Args: ``logits``, ``targets`` ``[N, K]``; multi-label row rule (module docstring).

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    return _sigmoid_nll(*labelled_examples(logits, targets))


def _average_precision(scores: np.ndarray, positive: np.ndarray) -> float:
    """AP = Σ_n (R_n - R_{n-1}) P_n over distinct score thresholds, descending (tied scores form one
    threshold), the definition of scikit-learn's ``average_precision_score``. Needs a positive."""
    n_pos = positive.sum()
    order = np.argsort(-scores, kind="mergesort")
    s, p = scores[order], positive[order]
    last = np.r_[np.flatnonzero(s[1:] != s[:-1]), len(s) - 1]  # last index of each distinct score (inf ties too)
    tp = np.cumsum(p)[last]
    precision = tp / (last + 1)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def micro_ap(logits: Any, targets: Any) -> float:
    """Micro-averaged AP ("global AP"): AP over all N·K (score, positive) pairs pooled
    (scikit-learn ``average_precision_score(average='micro')``).
    Args: ``logits``, ``targets`` ``[N, K]``; multi-label row rule (module docstring).

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    z, t = labelled_examples(logits, targets)
    return _average_precision(z.ravel(), t.ravel())


def _macro_map(z: np.ndarray, t: np.ndarray) -> "tuple[float, int]":
    used = np.flatnonzero(t.any(axis=0))
    return float(np.mean([_average_precision(z[:, k], t[:, k]) for k in used])), z.shape[1] - len(used)


def macro_map(logits: Any, targets: Any, return_skipped: bool = False) -> "float | tuple[float, int]":
    """Macro mAP: mean of the per-class AP over the classes with at least one positive label (a class
    without one has no AP). Multi-label row rule
    (module docstring). Args: ``logits``, ``targets`` ``[N, K]``.

    Returns:
        mAP, or ``(mAP, number of classes left out)`` with ``return_skipped=True``.

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    value, skipped = _macro_map(*labelled_examples(logits, targets))
    return (value, skipped) if return_skipped else value


def _multilabel_top_label(z: np.ndarray, t: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    top = z.argmax(axis=1)
    rows = np.arange(len(top))
    return np.exp(log_sigmoid(z[rows, top])), t[rows, top]


def multilabel_top_label(logits: Any, targets: Any) -> "tuple[np.ndarray, np.ndarray]":
    """(confidence = max_k σ(z_k), correct = the top class is a positive label), each ``[N']`` over
    the examples kept by the multi-label row rule (module docstring).

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    return _multilabel_top_label(*labelled_examples(logits, targets))


def multilabel_top_label_ece(logits: Any, targets: Any, num_bins: int = NUM_BINS) -> float:
    """Top-label ECE for multi-label data on :func:`multilabel_top_label` forecasts, 15 equal-width
    bins (Kull et al. 2019's top-label calibration applied to multi-label scores); multi-label row rule (module docstring).

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    conf, corr = multilabel_top_label(logits, targets)
    return _calibration_error(*_check_forecasts(conf, corr, num_bins), num_bins, False, "mean")


# ---------------------------------------------------------------------------------- suites
def classification_metrics(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> "dict[str, float]":
    """The single-label suite: top-1, top-5, NLL, Brier, ECE, MCE, adaptive ECE (inputs checked once).

    Raises:
        ValueError: a bad input (module docstring).
    """
    lp, y = _check_log_probs(log_probs, labels)
    conf, corr = _check_forecasts(*_top_label(lp, y), num_bins)
    return {
        "top1": _accuracy(lp, y, 1), "top5": _accuracy(lp, y, 5), "nll": _nll(lp, y), "brier": _brier(lp, y),
        "ece": _calibration_error(conf, corr, num_bins, False, "mean"),
        "mce": _calibration_error(conf, corr, num_bins, False, "max"),
        "adaptive_ece": _calibration_error(conf, corr, num_bins, True, "mean"),
    }


def multilabel_metrics(logits: Any, targets: Any, num_bins: int = NUM_BINS) -> "dict[str, float]":
    """The multi-label suite: prec@1, summed sigmoid NLL, micro AP, macro mAP, top-label ECE, all on
    the examples kept by the multi-label row rule (inputs checked once). The number of classes macro
    mAP leaves out: ``macro_map(..., return_skipped=True)``.

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    z, t = labelled_examples(logits, targets)
    conf, corr = _check_forecasts(*_multilabel_top_label(z, t), num_bins)
    return {
        "prec@1": _prec_at_1(z, t), "sigmoid_nll": _sigmoid_nll(z, t),
        "micro_ap": _average_precision(z.ravel(), t.ravel()), "macro_map": _macro_map(z, t)[0],
        "ece": _calibration_error(conf, corr, num_bins, False, "mean"),
    }
