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
    r"give every class's log-probability \(K >= 2\); for one binary label, give its two classes' log-probabilities",
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


# ------------------------------------------------------------------------------------------------ hetify
@handled(
    "heads",
    "hetify(Sequential(Sequential(Linear(4,8),ReLU(),Linear(8,5))), layer='0.0') (audit10 A10-15: the hidden "
    "Linear(4,8) became an 8-class HET head whose log-probabilities went through ReLU and Linear(8,5))",
    r"refused: layer='0.0' is not the model's output layer: .* comes from '0.2' \(Linear\).*layer='0.2'.*"
    r"check_output=False; the output layer, example_input and check_output=False taken",
)
def _hetify_hidden_layer(tmp):
    from torch import nn

    from harness.heads import HeteroscedasticHead, hetify

    def mlp():
        return nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 5)))

    model = mlp()
    try:
        hetify(model, layer="0.0", covariance="diagonal")
    except ValueError as e:
        said = str(e)
        assert isinstance(model[0][0], nn.Linear), "the model was changed before the refusal"
    else:
        raise AssertionError("a hidden layer was hetified")
    try:  # the same check with an example_input on a model the probe cannot feed
        hetify(mlp(), layer="0.0", example_input=torch.randn(2, 4), covariance="diagonal")
    except ValueError as e:
        assert "is not the model's output layer" in str(e), e
    else:
        raise AssertionError("a hidden layer was hetified with an example_input")
    assert isinstance(hetify(mlp(), layer="0.2", covariance="diagonal")[0][2], HeteroscedasticHead)
    hetify(mlp(), layer="0.2", example_input=torch.randn(2, 4), covariance="diagonal")
    hetify(mlp(), layer="0.0", check_output=False, covariance="diagonal")
    return f"refused: {said}; the output layer, example_input and check_output=False taken"


class _Tied(torch.nn.Module):
    """A classifier tied to the embedding (weight sharing, as language models do)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(5, 8)
        self.out = torch.nn.Linear(8, 5, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, x):
        return self.out(self.emb(x))


@bad_input(
    "heads",
    "hetify(model, layer='out') where out.weight is emb.weight (audit10 A10-16: silently untied, although the "
    "docstring said the tie is kept)",
    ValueError,
    r"layer 'out' shares its weight with emb\.weight \(Embedding, a tied classifier\): a HET head has new parameters "
    r"of its own, so hetify would silently untie them .*model\.out\.weight = nn\.Parameter\(",
)
def _hetify_tied_embedding(tmp):
    from torch import nn

    from harness.heads import hetify

    twice = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 5))
    twice.extra = twice[1]  # one module registered twice: still one head under both names
    hetify(twice, layer="1", covariance="diagonal")
    assert twice.extra is twice[1]
    model = _Tied()
    try:
        hetify(model, layer="out", covariance="diagonal")
    finally:
        assert model.out.weight is model.emb.weight, "the tie was broken"


# ------------------------------------------------------------------------------------------------ exports
@bad_input(
    "export",
    "export_run(run, out) where out is a dangling symbolic link (audit10 A10-20: a raw FileExistsError from pathlib)",
    ValueError,
    r"link is a broken symbolic link \(to '.*nonexistent-dir', which does not exist\): remove the link or create the "
    r"folder it points to, or give save_pretrained another folder",
)
def _export_dangling_link(tmp):
    import os

    from bad_inputs_audit6_runs import _checkpoint_runs

    from harness.runs import export_run

    _checkpoint_runs(tmp)
    os.symlink(tmp / "nonexistent-dir", tmp / "link")
    try:
        export_run(tmp / "a", tmp / "link")
    finally:
        assert not (tmp / "nonexistent-dir").exists(), "something was written through the link"


@bad_input(
    "export",
    "Classifier.from_pretrained(run_folder) (audit10 A10-21: advised giving 'run/model.pt', which from_pretrained "
    "then refuses)",
    FileNotFoundError,
    r"no config\.json at '.*a/config\.json'.*this folder holds a harness model\.pt: Classifier\.from_pretrained takes "
    r"only export folders: load it with harness\.models\.load_model\('.*a/model\.pt'\), or export the run first with "
    r"harness\.runs\.export_run\('.*a', out\)",
)
def _from_pretrained_run_folder(tmp):
    from bad_inputs_audit6_runs import _checkpoint_runs

    from harness.models import Classifier, load_model

    _checkpoint_runs(tmp)
    assert load_model(tmp / "a" / "model.pt") is not None  # the advice works
    Classifier.from_pretrained(str(tmp / "a"))
