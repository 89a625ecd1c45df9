"""Bad inputs found by the eighth reliability audit in the Python API: tensor dtypes and devices given to the metrics,
the inputs of the OOD scores, +inf logits, temperature scaling's τ and bounds, the Predictions constructor, and
damaged predictions files named (``audit8 <case id>``)."""

from __future__ import annotations

import numpy as np
import torch

from harness.uncertainty import calibration as C
from harness.uncertainty import metrics as M
from harness.uncertainty import ood as O
from harness.uncertainty.predictions import Predictions

from bad_inputs import bad_input, handled


def _log_probs(n: int = 20, k: int = 4) -> "tuple[np.ndarray, np.ndarray]":
    rng = np.random.default_rng(0)
    return M.log_softmax(rng.normal(size=(n, k))), rng.integers(0, k, n)


def _preds(n: int = 40, k: int = 4, **kw) -> Predictions:
    rng = np.random.default_rng(0)
    args = dict(
        logits=rng.normal(size=(n, k)),
        targets=rng.integers(0, k, n),
        index=np.arange(n),
        class_names=[str(c) for c in range(k)],
        link="softmax",
    )
    return Predictions(**{**args, **kw})


@handled(
    "uncertainty",
    "bfloat16 log-probability tensors given to the NLL (audit8 M11: numpy's unsupported ScalarType BFloat16)",
    r"bf16 NLL 1\.1\d+ vs float64 1\.1\d+",
)
def _bf16_metrics(tmp):
    lp, y = _log_probs()
    got = M.nll(torch.tensor(lp).bfloat16(), torch.tensor(y))
    want = M.nll(lp, y)
    assert abs(got - want) < 0.02, (got, want)
    return f"bf16 NLL {got:.4f} vs float64 {want:.4f}"


@bad_input(
    "uncertainty",
    "a meta tensor given to the NLL (audit8 M11: Cannot copy out of meta tensor, the argument not named)",
    ValueError,
    r"log_probs is a tensor on the meta device \(shape \(20, 4\), no data\)",
)
def _meta_metrics(tmp):
    M.nll(torch.empty(20, 4, device="meta"), _log_probs()[1])


@bad_input(
    "uncertainty",
    "complex log-probabilities given to the NLL (audit8 M29: the imaginary part silently dropped)",
    ValueError,
    r"log_probs has the complex dtype complex128.*imaginary part would be dropped",
)
def _complex_metrics(tmp):
    lp, y = _log_probs()
    M.nll(lp.astype(np.complex128), y)


@bad_input(
    "uncertainty",
    "2-D in-distribution scores for the OOD metrics (audit8 M18: flattened into 6 scores)",
    ValueError,
    r"score_in must be a 1-D array of per-example uncertainties \[N\], got shape \(3, 2\)",
)
def _ood_2d_scores(tmp):
    O.ood_metrics(np.ones((3, 2)), np.arange(3.0))


@bad_input(
    "uncertainty",
    "a correctness value of 2 for the AURC (audit8 M21: scored as 0.5)",
    ValueError,
    r"correct must be 0/1 \(or bool\) per example, got 2\.0 at \[0\]",
)
def _aurc_correct_two(tmp):
    O.aurc(np.array([0.5, 0.6]), np.array([2, 0]))


@bad_input(
    "uncertainty",
    "a negative mean entropy for the mutual information (audit8 M24: an MI above log K)",
    ValueError,
    r"mean_entropy must be entropies in nats in \[0, log K\] = \[0, 1\.386\] \(K = 4\).*\[0\] = -1\.0",
)
def _mi_negative_entropy(tmp):
    O.mutual_information(_log_probs()[0], -np.ones(20))


@bad_input(
    "uncertainty",
    "raw logits given to ood.entropy (audit8 M25: negative entropies)",
    ValueError,
    r"log_probs must be normalised log-probabilities.*these look like raw logits",
)
def _ood_entropy_raw_logits(tmp):
    O.entropy(np.random.default_rng(0).normal(size=(20, 4)) * 10)


@bad_input(
    "uncertainty",
    "+inf logits given to log_softmax (audit8 M26: [nan, nan])",
    ValueError,
    r"logits hold \+inf in 1 of 1 rows \(first: \[0, 0\]\): the softmax of \+inf is undefined",
)
def _log_softmax_inf(tmp):
    M.log_softmax([[np.inf, 1.0]])


@bad_input(
    "uncertainty",
    "temperature 0 for calibration.scale (audit8 A01: ±inf logits; -1 flipped them, NaN gave NaN)",
    ValueError,
    r"temperature must be a finite number at least 0\.001 and at most 1000, got temperature=0\.0",
)
def _scale_zero(tmp):
    C.scale(_preds(), 0.0)


@bad_input(
    "uncertainty",
    "bounds (0, 1) for fit_temperature (audit8 A02: scipy's 'Optimization bounds must be finite scalars.')",
    ValueError,
    r"bounds must be \(lower, upper\) temperatures, each a finite number at least 0\.001 and at most 1000, with lower < upper; "
    r"got bounds=\(0, 1\)",
)
def _fit_bounds_zero(tmp):
    C.fit_temperature(_preds(), bounds=(0, 1))


@bad_input(
    "uncertainty",
    "reversed bounds (10, 1) for fit_temperature (audit8 A02: scipy's 'The lower bound exceeds the upper bound.')",
    ValueError,
    r"with lower < upper; got bounds=\(10, 1\)",
)
def _fit_bounds_reversed(tmp):
    C.fit_temperature(_preds(), bounds=(10, 1))


@bad_input(
    "uncertainty",
    "Predictions with 2 class names for 4 classes (audit8 A05: constructed, scored and saved)",
    ValueError,
    r"2 class_names for 4 classes \(logits \(40, 4\)\)",
)
def _predictions_class_names(tmp):
    _preds(class_names=["a", "b"])


@bad_input(
    "uncertainty",
    "Predictions with the link 'tanh' (audit8 A05: scored as if sigmoid)",
    ValueError,
    r"Predictions link must be one of softmax, sigmoid \(the heads' links\), got link='tanh'",
)
def _predictions_link(tmp):
    _preds(link="tanh")


@bad_input(
    "uncertainty",
    "Predictions whose index is all zeros (audit8 A05: accepted, though models are aligned by index)",
    ValueError,
    r"Predictions index holds 1 repeated example indices \(first: 0\)",
)
def _predictions_index(tmp):
    _preds(index=np.zeros(40, dtype=np.int64))


@bad_input(
    "uncertainty",
    "a predictions.npz with a NaN logit, loaded (audit8 Q05/Q06: 'log_probs holds NaN' without the file)",
    ValueError,
    r"member/predictions\.npz: logits hold NaN or \+inf in 1 of 40 rows \(first: row 3\)",
)
def _predictions_nan_named(tmp):
    preds = _preds()
    preds.logits[3, 1] = np.nan
    (tmp / "member").mkdir()
    preds.save(tmp / "member" / "predictions.npz")
    Predictions.load(tmp / "member")
