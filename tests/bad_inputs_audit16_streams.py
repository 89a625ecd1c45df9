"""Runs trained on shards through the other entry points (found with audit16 A16-05, by the lead): ``harness import``
evaluates a model on a pack, and an experiment over shards with a shift section is refused before any run trains."""

from __future__ import annotations

from bad_inputs_audit8_experiment import TINY
from bad_inputs_audit12_plan import _run as _experiment
from bad_inputs_audit16_shards import _packs

from bad_inputs import bad_input, handled
from bad_inputs_downstream import _upstream as _harness_model
from bad_inputs_uncertainty import _cli


@handled(
    "import",
    "harness import --model <a harness model.pt> --data <a config of data.source=shards> (found with audit16 A16-05: "
    "'data.source=shards is read as a stream ... read it with harness.data.shards.shard_loader', a Python internal)",
    r"^a pack's 40 test and 40 val examples imported, each once, in the source's order$",
)
def _import_from_shards(tmp):
    import numpy as np

    from harness.uncertainty.predictions import Predictions

    pk = _packs(tmp)
    (tmp / "shards.yaml").write_text(
        f"data: {{source: shards, path: {pk}, eval_split: test, heldout_split: val, image_size: 32, eval_resize: 32}}\n"
    )
    _cli("import", "--model", _harness_model(), "--data", str(tmp / "shards.yaml"), "--out", str(tmp / "imp"))
    test = Predictions.load(tmp / "imp" / "predictions.npz")
    held = Predictions.load(tmp / "imp" / "heldout_predictions.npz")
    assert len(test.index) == 40 and len(held.index) == 40
    assert np.all(np.diff(test.index) > 0) and np.all(np.diff(held.index) > 0)
    return "a pack's 40 test and 40 val examples imported, each once, in the source's order"


@bad_input(
    "experiment",
    "an experiment over shards (upstream_overrides data.source=shards) with a shift section (found with audit16 "
    "A16-05: validation read the first run's split by index and named harness.data.shards.shard_loader as the fix)",
    ValueError,
    r"^shift: the run was trained and evaluated on data\.source=shards .*read as a stream, and harness shift "
    r"re-predicts the evaluation split's images by index .*which a stream cannot give",
)
def _experiment_shift_over_shards(tmp):
    pk = _packs(tmp)
    over = f"data.source=shards, data.path={pk}, data.label_noise=null, data.heldout_split=val"
    tiny = TINY.replace("data.limit_train=128, data.limit_eval=64", over)  # a pack holds the examples it was given
    _experiment(tmp, "ts", "shift: {corruptions: [gaussian_noise], severities: [1], ood: []}\n", tiny)
