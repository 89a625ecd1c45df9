"""Calibration against the right labels.

A model trained on noisy labels estimates p(noisy label | x). Its calibration against noisy held-out
labels (what it claims to predict, and what a user has) is a different quantity from its calibration
against clean test labels. This module scores every run or ensemble on both, fits post-hoc
temperature scaling (Guo et al., ICML 2017, Sec. 4.2) on the noisy held-out labels (what a user can
do) and, as an oracle, on the same images' clean labels, and gives per-class accuracy against
either label set.

Single-label (softmax) predictions only; the held-out split is the run's ``data.heldout_split``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from harness.uncertainty import metrics as M
from harness.uncertainty.calibration import fit_temperature, scale
from harness.uncertainty.predictions import Predictions

#: metrics shown in the calibration tables (names of :func:`harness.uncertainty.metrics.classification_metrics`)
KEYS = ("top1", "nll", "ece", "brier")


def label_calibration(test: Predictions, heldout: Predictions, heldout_clean: Optional[Predictions]) -> dict:
    """Metrics on the noisy held-out labels and on the clean test labels, before and after
    temperature scaling fit on the noisy held-out labels and (oracle) on their clean counterparts.

    Args:
        test: predictions on the evaluation split (clean labels).
        heldout: predictions on the held-out split with its noisy labels.
        heldout_clean: the same held-out predictions with clean labels (None: not available).

    Returns:
        ``{"heldout_noisy": metrics, "test_clean": metrics, "noisy_labels_differ": share of held-out
        labels that differ from clean (None without clean labels), "fit_noisy": {"temperature",
        "test_clean", "heldout_noisy"}, "fit_clean": {...} or None}``; metrics are :data:`KEYS`.
    """

    def scored(p: Predictions) -> dict:
        m = p.metrics()
        return {k: m[k] for k in KEYS}

    out = {"heldout_noisy": scored(heldout), "test_clean": scored(test), "noisy_labels_differ": None, "fit_clean": None}
    t = fit_temperature(heldout)
    out["fit_noisy"] = {
        "temperature": t,
        "test_clean": scored(scale(test, t)),
        "heldout_noisy": scored(scale(heldout, t)),
    }
    if heldout_clean is not None:
        out["noisy_labels_differ"] = float((heldout_clean.targets != heldout.targets).mean())
        tc = fit_temperature(heldout_clean)
        out["fit_clean"] = {
            "temperature": tc,
            "test_clean": scored(scale(test, tc)),
            "heldout_noisy": scored(scale(heldout, tc)),
        }
    return out


def per_class_accuracy(preds: Predictions) -> np.ndarray:
    """Top-1 accuracy per true class ``[K]`` (NaN for a class without examples).

    Raises:
        ValueError: a label outside [0, K).
    """
    pred = preds.logits.argmax(1)
    k = len(preds.class_names)
    y = np.asarray(preds.targets, dtype=np.int64)
    if len(y) and (y.min() < 0 or y.max() >= k):
        raise ValueError(f"labels must lie in [0, {k}) for {k} classes; got {y.min()}..{y.max()} in {preds.source}")
    hits = np.bincount(y, weights=(pred == y).astype(np.float64), minlength=k)
    counts = np.bincount(y, minlength=k).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, hits / counts, np.nan)


def top_label_parts(preds: Predictions) -> "tuple[np.ndarray, np.ndarray]":
    """Per-example confidence and correctness ``([N], [N])`` of the top label (softmax)."""
    return M.top_label(preds.log_probs(), preds.targets)
