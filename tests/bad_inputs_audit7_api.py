"""Bad inputs found by the seventh reliability audit in the Python API: metric bounds (top-k, bins, TPR level), the
argument of temperature scaling, a lazy classifier for hetify, a YAML with no data section (``audit7 <case id>``)."""

from __future__ import annotations

import numpy as np
import torch.nn as nn

from harness.data.pack_source import source_config
from harness.heads import hetify
from harness.uncertainty import metrics as M
from harness.uncertainty.calibration import fit_temperature
from harness.uncertainty.ood import fpr_at_tpr

from bad_inputs import bad_input, handled


def _log_probs(n: int = 20, k: int = 4) -> "tuple[np.ndarray, np.ndarray]":
    rng = np.random.default_rng(0)
    return M.log_softmax(rng.normal(size=(n, k))), rng.integers(0, k, n)


@bad_input(
    "uncertainty",
    "a top-k accuracy with k above the class count (audit7 C06: a meaningless 1.0)",
    ValueError,
    r"k must be a whole number in \[1, K\] \(K = 4 classes\), got k=9.*pass k <= 4",
)
def _topk_above_k(tmp):
    M.accuracy(*_log_probs(), k=9)


@handled(
    "uncertainty",
    "the metric suite of 4 classes (audit7 C06: reported a top-5 accuracy of 1.0)",
    r"no top5 with K = 4: top1, nll",
)
def _suite_without_top5(tmp):
    suite = M.classification_metrics(*_log_probs())
    assert "top5" not in suite and "top5" in M.classification_metrics(*_log_probs(k=6))
    return f"no top5 with K = 4: {', '.join(suite)}"


@bad_input(
    "uncertainty",
    "a TPR level above 1 for the FPR at a TPR (audit7 C17: IndexError)",
    ValueError,
    r"level must be a true-positive rate in \(0, 1\], got level=1\.5",
)
def _tpr_level_above_one(tmp):
    fpr_at_tpr(np.arange(5.0), np.arange(5.0), level=1.5)


@bad_input(
    "uncertainty",
    "a billion calibration bins (audit7 C04: allocated until the kernel killed it)",
    ValueError,
    r"num_bins must be a whole number in \[1, 10000\], got 1000000000",
)
def _ece_billion_bins(tmp):
    M.ece(*_log_probs(), num_bins=10**9)


@bad_input(
    "uncertainty",
    "a billion bins of the streaming ECE (audit7 C04, the same bound)",
    ValueError,
    r"num_bins must be a whole number in \[1, 10000\], got 1000000000",
)
def _streaming_ece_billion_bins(tmp):
    from harness.uncertainty.streaming import ECE

    ECE(num_bins=10**9)


@bad_input(
    "uncertainty",
    "temperature scaling of a logits array (audit7 C23: AttributeError 'logits')",
    TypeError,
    r"fit_temperature takes a Predictions .* got preds of type ndarray; wrap arrays as Predictions\(",
)
def _temperature_of_array(tmp):
    lp, y = _log_probs()
    fit_temperature(lp, y)


@bad_input(
    "hetify",
    "hetify of an uninitialised nn.LazyLinear (audit7 B06: 'in_features ... got 0')",
    ValueError,
    r"names '1', an uninitialised LazyLinear: .* run one first, model\(<a batch>\).* example_input=",
)
def _hetify_lazy(tmp):
    hetify(nn.Sequential(nn.Linear(8, 6), nn.LazyLinear(5)), layer="1")


@bad_input(
    "packs",
    "packing a YAML holding only model: (audit7 P05: 'the defaults', the file not named)",
    ValueError,
    r"modelonly\.yaml has no data section \(it holds model\): give a run config with a data: section",
)
def _pack_model_only(tmp):
    path = tmp / "modelonly.yaml"
    path.write_text("model:\n  name: resnet18\n")
    source_config(str(path))


@bad_input(
    "data",
    "a label of -1 in a dataset (audit7 P11: told to raise data.num_classes, which cannot fix it)",
    ValueError,
    r"labels must be class ids >= 0, got -1 in my data: a negative label names no class",
)
def _negative_label(tmp):
    import numpy as np

    from harness.data.dataset import ImageDataset

    ImageDataset(lambda i: None, np.array([0, -1, 1]), ["a", "b"], "my data")


@bad_input(
    "upstream",
    "train.best_metric=top5 for 3 classes (audit7 C06: the top-5 of K < 5 classes is a meaningless 1.0)",
    ValueError,
    r"train.best_metric 'top5' is not computed for the softmax link of 3 classes: use one of top1, nll",
)
def _best_top5_of_three_classes(tmp):
    from bad_inputs_upstream import _config_case

    _config_case(tmp, "train.best_metric=top5", "model.num_classes=3", "model.head.num_factors=2")
