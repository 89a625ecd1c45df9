"""Input checks of the metrics (:mod:`harness.uncertainty.metrics`), one pass over the input before any metric.

Every public metric refuses, with a ``ValueError`` that names the fix,

- ``N = 0`` (nothing to score); single-label log-probabilities of one class (K = 1: p = 1 always, a perfect
  score); shapes other than ``[N, K]`` scores with ``[N]`` labels (single-label) or
  ``[N, K]`` multi-hot targets (multi-label); labels whose count differs from N;
- labels of a non-integer dtype (floats, bools) or outside ``[0, K)``;
- log-probabilities whose rows do not normalise, ``|Σ_k p_k - 1| > NORM_TOL`` (raw logits land
  here: pass ``log_softmax(logits)``); exact zeros (``log p = -inf``) are fine; float16 / bfloat16 input gets the
  tolerance of its rounding (:func:`norm_tol`);
- confidences outside ``[0, 1]`` and correctness values other than 0/1;
- multi-label targets with values other than 0 and 1 (soft labels, class indices);
- complex dtypes (the imaginary part would be dropped) and torch tensors on the meta device (no data), naming
  the argument. bfloat16 / float16 tensors are taken (widened to float32, then float64): :func:`as_float64`, the
  one conversion.

The uncertainty scores of :mod:`harness.uncertainty.ood` read the same rules (:func:`check_log_prob_matrix`,
:func:`check_correct`).

NaN: never scored. A NaN anywhere in the scored input (log-probabilities, logits, confidences,
targets) raises ``ValueError`` naming how many rows hold one and the first; no metric returns a
number (or NaN) computed from NaN inputs. The transforms ``log_softmax`` / ``log_sigmoid`` of the metrics module
propagate NaN like NumPy (the checks above then refuse it); ``log_softmax`` refuses ``+inf`` logits.

The checks are one extra pass over the ``[N, K]`` input (row sums of float32 ``exp``, or NaN and
0/1 tests for multi-label inputs), in row chunks of about 32 MB of temporaries: measured at
1M x 1k on one core of a shared 2-core CPU, 4.8 s for float64 log-probabilities (NLL itself then
takes 1 s more) and 3 s for multi-label logits and targets. Multi-label logits may be ±inf (a
certain forecast).
"""

from __future__ import annotations

from typing import Any

import numpy as np

NORM_TOL = 1e-3  # |Σ_k p_k - 1| allowed for "normalised" (float32 round-off passes; raw logits do not)
CHUNK_ELEMENTS = 1 << 22  # elements per chunk of the normalisation check (32 MB of float64)


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """``x`` (a NumPy array, torch tensor or nested list) as a NumPy array, the one conversion of every metric input.

    bf16 and half tensors (which NumPy cannot hold) are widened to float32 first; meta tensors (no data) and complex
    values (whose imaginary part would be dropped) are refused.

    Raises:
        ValueError: a meta tensor, or a complex dtype (naming ``name``).
    """
    if hasattr(x, "detach"):
        if getattr(x, "is_meta", False):
            raise ValueError(
                f"{name} is a tensor on the meta device (shape {tuple(x.shape)}, no data): there is nothing to score; "
                "pass the real predictions (run the model on a CPU or GPU device)"
            )
        if x.is_complex():
            raise _complex(name, x.dtype)
        x = x.detach()
        if x.is_floating_point() and x.element_size() < 4:  # bfloat16, float16: no NumPy bfloat16
            x = x.float()
        x = x.cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind == "c":
        raise _complex(name, a.dtype)
    return a


def _complex(name: str, dtype: Any) -> ValueError:
    return ValueError(
        f"{name} has the complex dtype {dtype}: predictions must be real numbers (the imaginary part would be "
        f"dropped); pass {name}.real if that is intended"
    )


def as_float64(x: Any, name: str = "input") -> np.ndarray:
    """A NumPy array or torch tensor (any shape; float16/bfloat16 tensors too) as a float64 NumPy array.

    Raises:
        ValueError: a meta tensor or a complex dtype (naming ``name``, :func:`_to_numpy`); text (``['bogus']``, or
            numbers written as strings) or other values that are not numbers, naming ``name``.
    """
    a = _to_numpy(x, name)
    try:
        if a.dtype.kind in "USV":  # text (or raw bytes): never a number, even where it parses as one
            raise TypeError(f"dtype {a.dtype}")
        return a.astype(np.float64, copy=False)
    except (TypeError, ValueError) as e:
        first = a.ravel()[0] if a.size else None
        raise ValueError(
            f"{name} must be numbers (an array or tensor of floats), got values of dtype {a.dtype} (first: "
            f"{str(first)[:60]!r}; {str(e)[:80]}); pass the numeric scores, not names or strings"
        ) from None


def as_array(x: Any, name: str = "input") -> np.ndarray:
    """As an array, keeping the dtype (to tell integer labels from float ones); bf16/half tensors become float32.

    Raises:
        ValueError: a meta tensor or a complex dtype (naming ``name``, :func:`_to_numpy`).
    """
    return _to_numpy(x, name)


def no_examples(what: str) -> ValueError:
    return ValueError(
        f"{what} has no examples (N = 0): there is nothing to score; check that the evaluation split is not empty"
    )


def check_labels(labels: Any, n: int, num_classes: int) -> np.ndarray:
    """``[N]`` int64 class indices in ``[0, K)``, one per row of the scores."""
    y = as_array(labels, "labels")
    if y.ndim != 1:
        raise ValueError(
            f"labels must be a 1-D array of class indices [N], got shape {y.shape}; multi-hot "
            "targets [N, K] go to the multi-label metrics (prec_at_1, sigmoid_nll, ...)"
        )
    if y.dtype.kind not in "iu":
        raise ValueError(
            f"labels must be integer class indices, got dtype {y.dtype}; cast whole-number labels "
            "with labels.astype(int) (soft or multi-hot targets need the multi-label metrics)"
        )
    if len(y) != n:
        raise ValueError(
            f"{len(y)} labels for {n} rows of predictions: give exactly one label per example, in "
            "the same order as the prediction rows"
        )
    if y.min() < 0 or y.max() >= num_classes:
        raise ValueError(
            f"labels must lie in [0, {num_classes}), got range [{y.min()}, {y.max()}]; "
            "check the label set or the model's num_classes"
        )
    return y.astype(np.int64, copy=False)


def row_chunks(x: np.ndarray) -> "list[slice]":
    """Row slices of ``x`` ``[N, K]`` holding about ``CHUNK_ELEMENTS`` elements each (bounds temporaries)."""
    rows = max(1, CHUNK_ELEMENTS // max(x.shape[1], 1))
    return [slice(r0, r0 + rows) for r0 in range(0, x.shape[0], rows)]


def rows_any(x: np.ndarray, test) -> np.ndarray:
    """``[N]`` bool: rows of ``x`` where ``test(chunk)`` (elementwise bool) holds anywhere, chunked."""
    return np.concatenate([test(x[s]).any(axis=1) for s in row_chunks(x)])


def row_prob_sums(lp: np.ndarray) -> np.ndarray:
    """``[N]`` Σ_k exp(lp_nk), chunked, exp in float32 (relative error ~1e-7, 3x faster than float64).

    No max subtraction is needed: valid log-probabilities are <= 0. NaN where a row holds NaN; 0 for
    rows of (nearly) all -inf; inf for rows with large positive values (raw logits).
    """
    out = np.empty(lp.shape[0])
    with np.errstate(over="ignore"):
        for s in row_chunks(lp):
            out[s] = np.exp(lp[s].astype(np.float32)).sum(axis=1, dtype=np.float64)
    return out


#: how a model of one binary label (one logit z, p = sigmoid(z)) is scored: as two classes, by the single-label metrics
BINARY_FIX = (
    "for one binary label, give its two classes' log-probabilities [log(1 - p), log p] (from a logit z: "
    "[logsigmoid(-z), logsigmoid(z)]) with 0/1 class indices"
)


def check_two_classes(shape: "tuple[int, ...]", name: str) -> None:
    """Single-label forecasts ``[N, K]`` have K >= 2 classes: a softmax over one class is p = 1 whatever the input, so
    every single-label metric would score it as perfect (top-1 1.0, NLL 0). The rule of the array metrics
    (:func:`check_log_probs`) and of the streaming ones (:mod:`harness.uncertainty.streaming`).

    Raises:
        ValueError: K = 1, naming ``name``, its shape and the fix.
    """
    if len(shape) == 2 and shape[1] == 1:
        raise ValueError(
            f"{name} has K = 1 class (shape {tuple(shape)}): a softmax over one class is p = 1 whatever the input, "
            f"so every single-label metric would be perfect (top-1 1.0, NLL 0); give every class's log-probability "
            f"(K >= 2); {BINARY_FIX}"
        )


def check_log_probs(log_probs: Any, labels: Any) -> "tuple[np.ndarray, np.ndarray]":
    """(log_probs ``[N, K]`` float64, labels ``[N]`` int64) after every single-label check.

    Raises:
        ValueError: a bad input (module docstring), including K = 1 (a softmax over one class, p = 1 for every
            input, would score as perfect: top-1 1.0, NLL 0).
    """
    lp = _log_prob_matrix(log_probs, "log_probs")
    check_two_classes(lp.shape, "log_probs")
    y = check_labels(labels, lp.shape[0], lp.shape[1])
    check_normalised(lp, "log_probs", norm_tol(log_probs, lp.shape[1]))
    return lp, y


def norm_tol(x: Any, num_classes: int) -> float:
    """The row-sum tolerance for log-probabilities ``x`` as given: ``NORM_TOL``, or for float16 / bfloat16 input
    ``eps (1 + log K)`` if larger (rounding each log p by eps/2 moves Σ_k p_k by at most H[p] eps/2 <= log K eps/2)."""
    dtype = getattr(x, "dtype", None)
    low = dtype is not None and (
        (hasattr(x, "detach") and x.is_floating_point() and x.element_size() < 4) or dtype == np.float16
    )
    if not low:
        return NORM_TOL
    eps = float(np.finfo(np.float16).eps) if dtype == np.float16 or str(dtype) == "torch.float16" else 2.0**-7
    return max(NORM_TOL, eps * (1.0 + float(np.log(max(num_classes, 1)))))


def check_log_prob_matrix(log_probs: Any, name: str = "log_probs") -> np.ndarray:
    """``log_probs`` ``[N, K]`` as float64 after the single-label checks that need no labels (shape, N > 0, no NaN,
    rows normalised): the rule of :func:`check_log_probs`, for scores computed from log-probabilities alone.

    Raises:
        ValueError: a bad input (module docstring), naming ``name``.
    """
    lp = _log_prob_matrix(log_probs, name)
    check_normalised(lp, name, norm_tol(log_probs, lp.shape[1]))
    return lp


def _log_prob_matrix(log_probs: Any, name: str) -> np.ndarray:
    lp = as_float64(log_probs, name)
    if lp.ndim != 2:
        raise ValueError(f"{name} must be [N, K] (examples x classes), got shape {lp.shape}")
    if lp.shape[0] == 0:
        raise no_examples(name)
    return lp


def check_normalised(lp: np.ndarray, name: str = "log_probs", tol: float = NORM_TOL) -> None:
    """Refuse NaN and rows of ``lp`` ``[N, K]`` whose probabilities do not sum to 1 (within ``tol``, :func:`norm_tol`).

    Raises:
        ValueError: NaN, or unnormalised rows (raw logits, missing classes), naming ``name``.
    """
    sums = row_prob_sums(lp)
    nan = np.isnan(sums)
    if nan.any():
        raise ValueError(
            f"{name} holds NaN in {int(nan.sum())} of {len(sums)} rows (first: row "
            f"{int(np.argmax(nan))}); NaN predictions are not scored: find where the model or the "
            "preprocessing produced them (a diverged run, a division by zero)"
        )
    off = np.abs(sums - 1.0) > tol
    if off.any():
        r = int(np.argmax(off))
        rows = lp[off]
        if np.all((rows >= 0) & (rows <= 1)) and np.allclose(rows.sum(axis=1), 1.0, atol=tol):
            hint = "these look like probabilities (each row in [0, 1], summing to 1): pass np.log(probs)"
        elif sums[r] > 1:
            hint = "these look like raw logits: pass harness.uncertainty.metrics.log_softmax(logits)"
        else:
            hint = (
                "their probabilities sum to less than 1: are classes missing from the columns? Renormalise with "
                "harness.uncertainty.metrics.log_softmax only if that is intended"
            )
        raise ValueError(
            f"{name} must be normalised log-probabilities (each row's probabilities sum to 1), but "
            f"{int(off.sum())} of {len(sums)} rows do not (first: row {r}, Σ_k p_k = {sums[r]:.4g}); "
            f"{hint}"
        )


#: the most bins a calibration error may have (each bin is a few float64 arrays' entries; 10**9 bins ran out of memory)
MAX_BINS = 10_000


def check_num_bins(num_bins: Any) -> int:
    """``num_bins`` if a whole number in [1, MAX_BINS], before any work.

    Raises:
        ValueError: otherwise (naming the value and the rule).
    """
    if not isinstance(num_bins, (int, np.integer)) or isinstance(num_bins, bool) or not 1 <= num_bins <= MAX_BINS:
        raise ValueError(
            f"num_bins must be a whole number in [1, {MAX_BINS}], got {num_bins!r}; the usual choice is 15 "
            "(more bins than examples leaves most bins empty)"
        )
    return int(num_bins)


def check_forecasts(confidence: Any, correct: Any, num_bins: int) -> "tuple[np.ndarray, np.ndarray]":
    """(confidence ``[N]`` in [0, 1], correct ``[N]`` in {0, 1}) as float64.

    Raises:
        ValueError: ``num_bins`` outside [1, MAX_BINS] (:func:`check_num_bins`), or a bad input (module docstring).
    """
    check_num_bins(num_bins)
    conf, corr = as_float64(confidence, "confidence"), as_float64(correct, "correct")
    if conf.ndim != 1 or corr.shape != conf.shape:
        raise ValueError(f"confidence and correct must both be [N], got shapes {conf.shape} and {corr.shape}")
    if not len(conf):
        raise no_examples("confidence")
    bad = ~((conf >= 0) & (conf <= 1))  # NaN is bad too
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"confidence must be probabilities in [0, 1], but {int(bad.sum())} of {len(conf)} are not "
            f"(first: [{i}] = {conf[i]}); pass the top-label probability max_k p_k (exp of a "
            "log-probability, sigmoid of a logit), not a logit or a NaN"
        )
    return conf, check_correct(corr)


def check_correct(correct: Any) -> np.ndarray:
    """``correct`` ``[N]`` as float64 if every value is 0 or 1 (bools too): the one rule of correctness values.

    Raises:
        ValueError: another value (NaN, 2, 0.5), naming the first.
    """
    corr = as_float64(correct, "correct")
    bad = ~((corr == 0) | (corr == 1))
    if bad.any():
        i = int(np.argmax(bad.ravel()))
        raise ValueError(
            f"correct must be 0/1 (or bool) per example, got {corr.ravel()[i]} at [{i}]; pass (prediction == label)"
        )
    return corr


def check_multilabel(logits: Any, targets: Any) -> "tuple[np.ndarray, np.ndarray]":
    """(logits ``[N, K]`` float64, targets ``[N, K]`` in their own dtype, K >= 2) after every multi-label check,
    before the row rule.

    Raises:
        ValueError: shapes that differ or are not [N, K], no examples, K = 1 (one label: scored as two classes by the
            single-label metrics, :data:`BINARY_FIX`), NaN logits, targets other than 0/1.
    """
    z, t = as_float64(logits, "logits"), as_array(targets, "targets")
    if z.ndim != 2 or z.shape != t.shape:
        raise ValueError(
            f"logits {z.shape} and multi-hot targets {t.shape} must have the same [N, K] shape; "
            "single-label class indices [N] go to the single-label metrics (or one-hot them with "
            "np.eye(K)[labels])"
        )
    if z.shape[0] == 0:
        raise no_examples("logits")
    if z.shape[1] == 1:
        raise ValueError(
            f"logits have K = 1 label (shape {z.shape}): the multi-label metrics score the examples that have a "
            "positive label, and with one label those are exactly its positives, so every model would score as "
            "perfect (prec@1, mAP 1.0); "
            f"{BINARY_FIX}, to harness.uncertainty.metrics.classification_metrics"
        )
    nan = rows_any(z, np.isnan)
    if nan.any():
        raise ValueError(
            f"logits hold NaN in {int(nan.sum())} of {len(z)} rows (first: row {int(np.argmax(nan))}); "
            "NaN predictions are not scored: find where the model produced them"
        )
    bad = rows_any(t, lambda c: ~((c == 0) | (c == 1)))  # NaN is bad too
    if bad.any():
        i = int(np.argmax(bad))
        j = int(np.argmax(~((t[i] == 0) | (t[i] == 1))))
        raise ValueError(
            f"multi-label targets must be multi-hot 0/1 values, got {t[i, j]} at [{i}, {j}] "
            f"({int(bad.sum())} row(s) hold such values); soft labels are not supported: threshold "
            "them, or give class indices [N] to the single-label metrics"
        )
    return z, t
