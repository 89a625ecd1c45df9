"""Post-hoc temperature scaling (Guo et al., ICML 2017, "On Calibration of Modern Neural Networks", Sec. 4.2).

Reliability bins and the calibration errors (ECE, MCE, adaptive ECE) are metrics: :mod:`harness.uncertainty.metrics`.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import replace
from decimal import Decimal

import numpy as np

import harness.uncertainty.metrics as M
from harness.heads.options import TEMPERATURE_RULE, temperature_in_range
from harness.uncertainty.multilabel import labelled_examples
from harness.uncertainty.predictions import Predictions

#: a fitted log T within this of a bound is "at the bound" (:func:`fit_temperature` warns: a degenerate fit)
BOUND_TOL = 1e-3


def fit_temperature(preds: Predictions, bounds: "tuple[float, float]" = (1e-3, 1e3)) -> float:
    """Post-hoc temperature T > 0 minimising the NLL of ``logits / T`` on held-out predictions
    (Guo et al. 2017): bounded Brent search on log T within ``bounds`` (scipy's ``minimize_scalar``;
    the NLL is smooth in log T, so the 1-D search finds its minimum to about 1e-6 in log T). For
    sigmoid links, per-class BCE summed over classes, on the examples kept by the multi-label row
    rule (:mod:`harness.uncertainty.multilabel`: no positive label, dropped).

    Het logits are log p̄ (or logit p̄); scaling them is the same post-hoc map as for any classifier.

    A fit that ends at a bound (log T within :data:`BOUND_TOL` of it: e.g. held-out labels all of one class push T to
    the upper bound) is degenerate: it is returned, with a ``UserWarning`` naming the bound and what it means.
    ``preds`` are finite with labels in ``[0, K)``: :class:`Predictions` refuses others at construction.
    ``bounds``: two temperatures, each read as ``scale``'s ``temperature`` is (a tuple, a NumPy array or a 1-D torch
    tensor of two).

    Raises:
        TypeError: ``preds`` not a :class:`Predictions` (e.g. a logits array).
        ValueError: ``bounds`` not two temperatures (each :data:`harness.heads.options.TEMPERATURE_RULE`) with
            lower < upper, or multi-label targets that are not 0/1 or without any positive label.
    """
    from scipy.optimize import minimize_scalar

    if not isinstance(preds, Predictions):
        raise TypeError(
            f"fit_temperature takes a Predictions (held-out logits and labels), got preds of type "
            f"{type(preds).__name__}; wrap arrays as Predictions(logits, labels, np.arange(len(labels)), "
            "[str(k) for k in range(logits.shape[1])], 'softmax') (from harness.uncertainty import Predictions) "
            "or load a run's with Predictions.load(path)"
        )
    lo_t, hi_t = _check_bounds(bounds)
    logits, targets = preds.logits, preds.targets
    if preds.multilabel:
        logits, targets = labelled_examples(logits, targets)
    z = np.asarray(logits, dtype=np.float64)
    if preds.multilabel:
        y = np.asarray(targets, dtype=np.float64)

        def nll(log_t: float) -> float:
            s = z / np.exp(log_t)
            return float((np.logaddexp(0.0, s) - y * s).sum(1).mean())
    else:
        rows, y = np.arange(len(z)), np.asarray(targets, dtype=np.int64)

        def nll(log_t: float) -> float:
            return float(-M.log_softmax(z / np.exp(log_t))[rows, y].mean())

    lo, hi = np.log(lo_t), np.log(hi_t)
    log_t = float(minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-6}).x)
    at = "upper" if hi - log_t < BOUND_TOL else "lower" if log_t - lo < BOUND_TOL else None
    if at is not None:
        why = (
            "up: the held-out predictions are no better than uniform ones, e.g. labels all of one class"
            if at == "upper"
            else "down: every held-out prediction is right and gets ever more confident"
        )
        warnings.warn(
            f"fit_temperature: the fitted temperature is at the {at} bound {hi_t if at == 'upper' else lo_t:g} of "
            f"bounds=({lo_t:g}, {hi_t:g}): a degenerate fit (the NLL keeps falling as T goes {why}), not a calibrated "
            "temperature; check the held-out predictions and labels (more examples, every class)",
            stacklevel=2,
        )
    return float(np.clip(np.exp(log_t), lo_t, hi_t))  # exp(log b) may round just outside b


def _check_bounds(bounds: object) -> "tuple[float, float]":
    """``bounds`` as two floats (each by :func:`_one_number`, the temperature's one conversion), refused unless two
    temperatures (:func:`harness.heads.options.temperature_in_range`) with lower < upper."""
    try:
        lo, hi = (_one_number(b) for b in bounds)  # type: ignore[union-attr]
    except (TypeError, ValueError):  # not two; or an element that is not one real number (a [1] tensor)
        lo = hi = None
    if not (temperature_in_range(lo) and temperature_in_range(hi)) or not lo < hi:
        raise ValueError(
            f"bounds must be (lower, upper) temperatures, each {TEMPERATURE_RULE}, with lower < upper; got "
            f"bounds={str(bounds)[:80]}; the default (1e-3, 1e3) covers every useful temperature"
        )
    return lo, hi  # type: ignore[return-value]


def scale(preds: Predictions, temperature: float) -> Predictions:
    """``logits / temperature`` (for a fitted temperature, :func:`fit_temperature`).

    ``temperature``: a real number (a Python or NumPy int or float, a ``fractions.Fraction``, a ``decimal.Decimal``),
    or a 0-d real torch tensor / NumPy array, read as ``float(t)`` (:func:`_one_number`).

    Raises:
        ValueError: ``temperature`` not :data:`harness.heads.options.TEMPERATURE_RULE` (0 gives ±inf logits, a
            negative one flips the ranking, NaN gives NaN), or a tensor / array that is not one real number.
    """
    temperature = _one_number(temperature)
    if not temperature_in_range(temperature):
        raise ValueError(
            f"temperature must be {TEMPERATURE_RULE}, got temperature={temperature!r}; pass the T that "
            "fit_temperature(heldout_predictions) returns"
        )
    return replace(preds, logits=preds.logits / temperature, source=f"{preds.source} (T={temperature:.3f})")


def _one_number(t: object) -> object:
    """The one conversion of a temperature (``scale``'s, each of ``fit_temperature``'s bounds): a real number
    (``numbers.Real``: Python and NumPy ints and floats, ``Fraction``; and ``Decimal``, which is not one) or a 0-d
    real torch tensor or NumPy array as ``float(t)``; anything else as given, for the range rule
    (:func:`harness.heads.options.temperature_in_range`) to refuse: a bool, a string, a signalling-NaN Decimal.

    Raises:
        ValueError: a tensor or array of another shape, or of a bool / complex dtype, naming its shape and dtype.
    """
    if isinstance(t, (numbers.Real, Decimal)) and not isinstance(t, bool):
        try:
            return float(t)  # type: ignore[arg-type]
        except OverflowError:  # an int or Fraction beyond float's range: out of the range rule's too
            return math.inf if t > 0 else -math.inf  # type: ignore[operator]
        except ValueError:  # Decimal('sNaN'): refused as given
            return t
    if not (hasattr(t, "detach") or isinstance(t, np.ndarray)):
        return t
    shape, dtype = tuple(t.shape), str(t.dtype)
    real = not (t.is_complex() or dtype == "torch.bool") if hasattr(t, "detach") else t.dtype.kind in "iuf"
    if shape != () or not real or getattr(t, "is_meta", False):
        raise ValueError(
            f"temperature must be one real number ({TEMPERATURE_RULE}), got a {type(t).__name__} of shape {shape} "
            f"and dtype {dtype}{' on the meta device (no value)' if getattr(t, 'is_meta', False) else ''}; pass a "
            "Python float, e.g. float(t) for a one-element tensor t"
        )
    return float(t)
