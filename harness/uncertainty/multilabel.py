"""Multi-label classification metrics (sigmoid link) on final predictive probabilities: prec@1, sigmoid NLL,
micro-AP, macro mAP, top-label ECE and their suite.

Conventions as :mod:`harness.uncertainty.metrics`: NumPy arrays or torch tensors in, float64 inside, Python floats
out; definitions of uncertainty-baselines and scikit-learn (cited per function). Inputs: ``logits`` ``[N, K]``
(sigmoid link), ``targets`` ``[N, K]`` in {0, 1}. The input checks
(:func:`harness.uncertainty.checks.check_multilabel`) refuse bad input (wrong shapes, no examples, NaN logits,
targets other than 0/1) with a ``ValueError`` that names the fix.

Multi-label rule for examples without a positive label (an all-zero target row): they are dropped
from every multi-label metric (prec@1, sigmoid NLL, micro-AP, macro mAP, top-label ECE), from
post-hoc temperature fitting (:func:`harness.uncertainty.calibration.fit_temperature`) and from the reliability
diagram, as uncertainty_baselines masks all-zero label vectors out of the loss and prec@1 and
ImageNet-ReaL masks empty label sets (Beyer et al. 2020, "Are we done with ImageNet?"). :func:`labelled_examples` applies
it. A split where no example has a positive label raises ``ValueError``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.uncertainty.checks import check_forecasts, check_multilabel
from harness.uncertainty.metrics import NUM_BINS, _calibration_error, log_sigmoid


def labelled_examples(logits: Any, targets: Any) -> "tuple[np.ndarray, np.ndarray]":
    """The multi-label row rule (module docstring): ``(logits, targets)`` ``[N', K]`` of the examples
    with at least one positive label, after the multi-label input checks (logits as float64, targets
    in their own dtype: bool, int or float 0/1).

    Raises:
        ValueError: a bad input (module docstring), or no example has a positive label.
    """
    z, t = check_multilabel(logits, targets)
    keep = t.any(axis=1)
    if not keep.any():
        raise ValueError(
            f"none of the {len(t)} examples has a positive label; multi-label metrics drop examples "
            "without one, so nothing is left to score: check the targets (all-zero rows)"
        )
    return (z, t) if keep.all() else (z[keep], t[keep])


def _prec_at_1(z: np.ndarray, t: np.ndarray) -> float:
    return float(t[np.arange(len(z)), z.argmax(axis=1)].mean())


def prec_at_1(logits: Any, targets: Any) -> float:
    """prec@1: share of examples whose top-scoring class is a positive label (uncertainty-baselines
    ``evaluation_fn``), (1/N') Σ_n t[n, argmax_k z[n, k]] over the N' examples kept by the multi-label
    row rule (module docstring). Args: ``logits``, ``targets`` ``[N, K]``.

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    z, t = labelled_examples(logits, targets)
    return _prec_at_1(z, t)


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
    return _calibration_error(*check_forecasts(conf, corr, num_bins), num_bins, False, "mean")


# ---------------------------------------------------------------------------------- suite
def multilabel_metrics(logits: Any, targets: Any, num_bins: int = NUM_BINS) -> "dict[str, float]":
    """The multi-label suite: prec@1, summed sigmoid NLL, micro AP, macro mAP, top-label ECE, all on
    the examples kept by the multi-label row rule (inputs checked once). The number of classes macro
    mAP leaves out: ``macro_map(..., return_skipped=True)``.

    Raises:
        ValueError: a bad input or no positive label (module docstring).
    """
    z, t = labelled_examples(logits, targets)
    conf, corr = check_forecasts(*_multilabel_top_label(z, t), num_bins)
    return {
        "prec@1": _prec_at_1(z, t),
        "sigmoid_nll": _sigmoid_nll(z, t),
        "micro_ap": _average_precision(z.ravel(), t.ravel()),
        "macro_map": _macro_map(z, t)[0],
        "ece": _calibration_error(conf, corr, num_bins, False, "mean"),
    }
