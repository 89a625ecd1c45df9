"""Classification metrics on final predictive probabilities (after MC averaging for het models).

Definitions follow ``../shared/docs/protocol.md`` Sec. 6 (robustness_metrics / uncertainty_baselines
conventions). All functions take NumPy arrays or torch tensors, compute in float64 and return
Python floats (or arrays for reliability bins). Shapes: ``N`` examples, ``K`` classes.

Single-label inputs: ``log_probs`` ``[N, K]`` (log of normalised probabilities), ``labels`` ``[N]`` ints.
Multi-label inputs: ``logits`` ``[N, K]`` (sigmoid link), ``targets`` ``[N, K]`` in {0, 1}.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NUM_BINS = 15


def _np(x: Any, dtype=np.float64) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def log_softmax(logits: Any) -> np.ndarray:
    """Row-wise log-softmax ``[N, K]``, stable (max subtraction)."""
    z = _np(logits)
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def log_sigmoid(x: Any) -> np.ndarray:
    """log σ(x) elementwise, stable for large |x|: -softplus(-x)."""
    x = _np(x)
    return -np.logaddexp(0.0, -x)


def _check_labels(labels: Any, num_classes: int) -> np.ndarray:
    y = _np(labels, np.int64)
    if y.ndim != 1:
        raise ValueError(f"labels must be a 1-D array of class indices, got shape {y.shape}")
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got range [{y.min()}, {y.max()}]; "
                         "check the label set or the model's num_classes")
    return y


def accuracy(log_probs: Any, labels: Any, k: int = 1) -> float:
    """Top-k accuracy: share of examples whose label is among the k most probable classes.

    Ties at the k-th score are broken towards the lower class index (as ``argsort`` does).
    Source: protocol.md Sec. 6 ("Top-k"); top-1 is ``argmax p == y``.
    """
    lp = _np(log_probs)
    y = _check_labels(labels, lp.shape[1])
    k = min(k, lp.shape[1])
    top = np.argsort(-lp, axis=1, kind="stable")[:, :k]
    return float((top == y[:, None]).any(axis=1).mean())


def nll(log_probs: Any, labels: Any) -> float:
    """Negative log-likelihood, mean over examples of -log p(y|x) (protocol.md Sec. 6).

    For het models ``log_probs`` is log of the MC-mean probability, so this is -log p̄_y.
    """
    lp = _np(log_probs)
    y = _check_labels(labels, lp.shape[1])
    return float(-lp[np.arange(len(y)), y].mean())


def brier(log_probs: Any, labels: Any) -> float:
    """Brier score: mean over examples of Σ_k (p_k - 1[y = k])² (Brier 1950; full multiclass form).

    For K = 2 this is twice scikit-learn's ``brier_score_loss`` on the positive class.
    """
    p = np.exp(_np(log_probs))
    y = _check_labels(labels, p.shape[1])
    onehot = np.zeros_like(p)
    onehot[np.arange(len(y)), y] = 1.0
    return float(((p - onehot) ** 2).sum(axis=1).mean())


def reliability_bins(confidence: Any, correct: Any, num_bins: int = NUM_BINS, adaptive: bool = False) -> dict:
    """Per-bin counts, mean confidence and accuracy of top-label forecasts.

    Equal-width bins: index = floor(B·conf) clipped to [0, B-1], so conf = 1 falls in the last bin
    (robustness_metrics / ``tf.histogram_fixed_width_bins``). Adaptive (equal-mass) bins split the
    examples sorted by confidence into B groups of (nearly) equal size.

    Returns:
        ``{"edges" [B+1], "count" [B], "confidence" [B], "accuracy" [B]}``; empty bins have
        confidence and accuracy NaN (equal-width only).
    """
    conf, corr = _np(confidence), _np(correct)
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


def _calibration_error(confidence: Any, correct: Any, num_bins: int, adaptive: bool, reduce: str) -> float:
    bins = reliability_bins(confidence, correct, num_bins, adaptive)
    filled = bins["count"] > 0
    gaps = np.abs(bins["accuracy"][filled] - bins["confidence"][filled])
    if reduce == "max":
        return float(gaps.max()) if gaps.size else 0.0
    weights = bins["count"][filled] / bins["count"].sum()
    return float((weights * gaps).sum())


def calibration_error(confidence: Any, correct: Any, num_bins: int = NUM_BINS) -> float:
    """ECE of top-label forecasts given directly: Σ_b (n_b / N) |acc_b - conf_b|, equal-width bins."""
    return _calibration_error(confidence, correct, num_bins, False, "mean")


def top_label(log_probs: Any, labels: Any) -> "tuple[np.ndarray, np.ndarray]":
    """(confidence = max_k p_k, correct = argmax == y), each ``[N]``."""
    lp = _np(log_probs)
    y = _check_labels(labels, lp.shape[1])
    return np.exp(lp.max(axis=1)), (lp.argmax(axis=1) == y).astype(np.float64)


def ece(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """Expected calibration error, top-label, equal-width bins (Guo et al. 2017; robustness_metrics):
    ECE = Σ_b (n_b / N) |acc_b - conf_b| over non-empty bins. Default 15 bins (protocol.md Sec. 6)."""
    return _calibration_error(*top_label(log_probs, labels), num_bins, False, "mean")


def mce(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """Maximum calibration error: max over non-empty equal-width bins of |acc_b - conf_b|."""
    return _calibration_error(*top_label(log_probs, labels), num_bins, False, "max")


def adaptive_ece(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> float:
    """ECE with equal-mass bins (Nguyen & O'Connor 2015; netcal ``ECE(equal_intervals=False)``)."""
    return _calibration_error(*top_label(log_probs, labels), num_bins, True, "mean")


# ---------------------------------------------------------------------------------- multi-label
def _check_targets(logits: Any, targets: Any) -> "tuple[np.ndarray, np.ndarray]":
    z, t = _np(logits), _np(targets)
    if z.shape != t.shape:
        raise ValueError(f"logits {z.shape} and multi-hot targets {t.shape} must have the same [N, K] shape")
    return z, t


def prec_at_1(logits: Any, targets: Any) -> float:
    """prec@1: share of examples whose top-scoring class is a positive label; examples with no
    positive label are masked out (protocol.md Sec. 6, UB ``evaluation_fn``)."""
    z, t = _check_targets(logits, targets)
    keep = t.sum(axis=1) > 0
    if not keep.any():
        return float("nan")
    return float(t[keep][np.arange(keep.sum()), z[keep].argmax(axis=1)].mean())


def sigmoid_nll(logits: Any, targets: Any) -> float:
    """Bernoulli NLL summed over the K classes, mean over examples with at least one positive
    (UB ``sigmoid_xent``; protocol.md Sec. 6)."""
    z, t = _check_targets(logits, targets)
    keep = t.sum(axis=1) > 0
    per = -(t * log_sigmoid(z) + (1 - t) * log_sigmoid(-z)).sum(axis=1)
    return float(per[keep].mean()) if keep.any() else float("nan")


def _average_precision(scores: np.ndarray, positive: np.ndarray) -> float:
    """AP = Σ_n (R_n - R_{n-1}) P_n over distinct score thresholds, descending (tied scores form one
    threshold), the definition of scikit-learn's ``average_precision_score``."""
    n_pos = positive.sum()
    if n_pos == 0:
        return float("nan")
    order = np.argsort(-scores, kind="mergesort")
    s, p = scores[order], positive[order]
    last = np.r_[np.flatnonzero(np.diff(s)), len(s) - 1]  # last index of each distinct score
    tp = np.cumsum(p)[last]
    precision = tp / (last + 1)
    recall = tp / n_pos
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def micro_ap(logits: Any, targets: Any) -> float:
    """Micro-averaged AP ("global AP"): AP over all N·K (score, positive) pairs pooled
    (scikit-learn ``average_precision_score(average='micro')``; protocol.md Sec. 6)."""
    z, t = _check_targets(logits, targets)
    return _average_precision(z.ravel(), t.ravel())


def macro_map(logits: Any, targets: Any) -> float:
    """Macro mAP: mean over classes with at least one positive of the per-class AP."""
    z, t = _check_targets(logits, targets)
    aps = [_average_precision(z[:, k], t[:, k]) for k in range(z.shape[1]) if t[:, k].sum() > 0]
    return float(np.mean(aps)) if aps else float("nan")


def multilabel_top_label_ece(logits: Any, targets: Any, num_bins: int = NUM_BINS) -> float:
    """Top-label ECE for multi-label data: confidence = max_k σ(z_k), correct = top class is a
    positive label (protocol.md Sec. 6, option (c)); examples without positives are masked out."""
    z, t = _check_targets(logits, targets)
    keep = t.sum(axis=1) > 0
    z, t = z[keep], t[keep]
    top = z.argmax(axis=1)
    conf = np.exp(log_sigmoid(z[np.arange(len(top)), top]))
    return calibration_error(conf, t[np.arange(len(top)), top], num_bins)


# ---------------------------------------------------------------------------------- suites
def classification_metrics(log_probs: Any, labels: Any, num_bins: int = NUM_BINS) -> "dict[str, float]":
    """The single-label suite: top-1, top-5, NLL, Brier, ECE, MCE, adaptive ECE."""
    return {
        "top1": accuracy(log_probs, labels, 1), "top5": accuracy(log_probs, labels, 5),
        "nll": nll(log_probs, labels), "brier": brier(log_probs, labels), "ece": ece(log_probs, labels, num_bins),
        "mce": mce(log_probs, labels, num_bins), "adaptive_ece": adaptive_ece(log_probs, labels, num_bins),
    }


def multilabel_metrics(logits: Any, targets: Any, num_bins: int = NUM_BINS) -> "dict[str, float]":
    """The multi-label suite: prec@1, summed sigmoid NLL, micro AP, macro mAP, top-label ECE."""
    return {
        "prec@1": prec_at_1(logits, targets), "sigmoid_nll": sigmoid_nll(logits, targets),
        "micro_ap": micro_ap(logits, targets), "macro_map": macro_map(logits, targets),
        "ece": multilabel_top_label_ece(logits, targets, num_bins),
    }
