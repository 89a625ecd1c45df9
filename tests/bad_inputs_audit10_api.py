"""Bad inputs found by the tenth reliability audit in the Python API: single-label metrics of one class, a top-k
accuracy's k of the wrong type or sign, torch tensors given to ``Predictions`` and ``calibration.scale``, ``hetify``
of a hidden layer or of a classifier tied to another module, an export into a dangling link, and
``Classifier.from_pretrained`` of a run folder (``audit10 <case id>``)."""

from __future__ import annotations

import numpy as np
import torch

from bad_inputs import bad_input, handled


def _log_probs(n: int = 20, k: int = 4) -> "tuple[np.ndarray, np.ndarray]":
    from harness.uncertainty import metrics as M

    rng = np.random.default_rng(0)
    return M.log_softmax(rng.normal(size=(n, k))), rng.integers(0, k, n)


# ------------------------------------------------------------------------------------------------ metrics
@bad_input(
    "uncertainty",
    "classification_metrics of [N, 1] log-probabilities (audit10 A10-13: a softmax over one class scored top-1 1.0, "
    "NLL 0)",
    ValueError,
    r"log_probs has K = 1 class \(shape \(5, 1\)\): a softmax over one class is p = 1 whatever the input.*"
    r"give every class's log-probability \(K >= 2\), or score one binary label as multi-label",
)
def _metrics_one_class(tmp):
    from harness.uncertainty import metrics as M

    M.classification_metrics(np.zeros((5, 1)), np.zeros(5, int))


@handled(
    "uncertainty",
    "accuracy(lp, y, k=2.0), k=-1 and k=0 of 4 classes (audit10 A10-17: 'a meaningless 1.0; pass k <= 4', the "
    "wrong reason and fix)",
    r"k=2.0: .*of type float: pass an int \(k=2\); k=-1: .*so k >= 1",
)
def _accuracy_k_type_sign(tmp):
    from harness.uncertainty import metrics as M

    lp, y = _log_probs()
    said = {}
    for k in (2.0, -1, 0, 9):
        try:
            M.accuracy(lp, y, k=k)
        except ValueError as e:
            said[k] = str(e)
        else:
            raise AssertionError(f"k={k!r} was taken")
    assert "meaningless" not in said[2.0] + said[-1] + said[0] and "meaningless 1.0; pass k <= 4" in said[9], said
    assert M.accuracy(lp, y, k=np.int64(2)) == M.accuracy(lp, y, k=2)
    return f"k=2.0: {said[2.0].split('got ')[1]}; k=-1: {said[-1].split('got k=-1: ')[1]}"


@handled(
    "uncertainty",
    "Predictions(logits=torch.tensor(...), targets=torch.tensor, index=torch.arange), float32 and bfloat16, then "
    "fit_temperature and save (audit10 A10-18: kept a torch.Tensor, then AttributeError 'astype' / TypeError "
    "BFloat16)",
    r"stored as NumPy arrays \(float64 logits\); fitted T and saved for float32 and bfloat16",
)
def _predictions_tensors(tmp):
    from harness.uncertainty.calibration import fit_temperature
    from harness.uncertainty.predictions import Predictions

    rng = np.random.default_rng(0)
    lg, y = rng.normal(size=(40, 4)), rng.integers(0, 4, 40)
    for dtype in (torch.float32, torch.bfloat16):
        p = Predictions(torch.tensor(lg, dtype=dtype), torch.tensor(y), torch.arange(40), list("abcd"), "softmax")
        assert isinstance(p.logits, np.ndarray) and p.logits.dtype == np.float64, type(p.logits)
        assert isinstance(p.targets, np.ndarray) and isinstance(p.index, np.ndarray)
        assert 0 < fit_temperature(p) < 1e3
        p.save(tmp / "p.npz")
        back = Predictions.load(tmp / "p.npz")
        assert np.array_equal(back.targets, y) and np.allclose(back.logits, p.logits, atol=1e-6)
    return "stored as NumPy arrays (float64 logits); fitted T and saved for float32 and bfloat16"


@handled(
    "uncertainty",
    "calibration.scale(P, torch.tensor(2.0)) and scale(P, torch.tensor([2.0])) (audit10 A10-19: a finite 0-d "
    "tensor was 'not a finite number')",
    r"0-d tensor taken as T=2; a \[1\] tensor: .*got a Tensor of shape \(1,\)",
)
def _scale_tensor(tmp):
    from harness.uncertainty.calibration import scale
    from harness.uncertainty.predictions import Predictions

    rng = np.random.default_rng(0)
    p = Predictions(rng.normal(size=(8, 3)), rng.integers(0, 3, 8), np.arange(8), ["a", "b", "c"], "softmax")
    assert np.allclose(scale(p, torch.tensor(2.0)).logits, p.logits / 2)
    assert np.allclose(scale(p, np.array(2.0)).logits, p.logits / 2)
    try:
        scale(p, torch.tensor([2.0]))
    except ValueError as e:
        assert "pass a Python float, e.g. float(t)" in str(e), e
        return f"0-d tensor taken as T=2; a [1] tensor: {str(e).split('), ')[1]}"
    raise AssertionError("a [1] tensor was taken as a temperature")
