"""Bad inputs found by the eighteenth reliability audit in ``harness import`` and ``harness ensemble --from-checkpoints
--eval-data`` (``audit18 <case id>``): the data a model was trained on, its head, and the splits it is scored on."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli

#: what a harness run's model.pt records it was trained on (upstream.outputs: export_rules.trained_on of its data)
TRAINED = {"source": "digits", "train_split": "train", "label_noise": {"kind": "none"}, "image_size": 32}
#: an evaluation config of digits whose training-only keys (label_noise) are not the model's
EVAL = "data:\n  source: digits\n  eval_split: test\n  heldout_split: val\n  limit_eval: 30\n"
EVAL += "  label_noise: {kind: pair_flip, rate: 0.3, seed: 0}\n"


def _model_pt(path: Path, head: "dict | None" = None, trained_on: "dict | None" = None, seed: int = 0) -> Path:
    """A real harness model.pt of a tiny digits model of ``head`` options, recording ``trained_on`` (None: nothing,
    as a model trained elsewhere)."""
    import torch

    from harness.models import ModelConfig, build_model, save_model

    torch.manual_seed(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = build_model(ModelConfig("test_resnet", 10, head or {"covariance": "none"}))
    return save_model(model, path, extra={"trained_on": trained_on} if trained_on else None)


def _import(tmp: Path, model: Path, name: str, data: str = EVAL) -> Path:
    (tmp / f"{name}.yaml").write_text(data)
    _cli("import", "--model", str(model), "--data", str(tmp / f"{name}.yaml"), "--out", str(tmp / name))
    return tmp / name


# ------------------------------------------------------------------------------ A18-05: trained on what
@handled(
    "exports",
    "harness import of a model.pt trained without label noise, evaluated with a --data of pair_flip noise, then "
    "export_run of the import folder (audit18 A18-05: the card said 'trained on ... label_noise pair_flip', the --data "
    "section, not the model's own trained_on)",
    r"^the export states the model's own training data \(label_noise none\); a model without a record: not recorded$",
)
def _import_trained_on(tmp):
    from harness.runs import export_run

    imp = _import(tmp, _model_pt(tmp / "g" / "model.pt", trained_on=TRAINED), "imp")
    export_run(imp, tmp / "exp")
    seen = json.loads((tmp / "exp" / "config.json").read_text())["harness"]["trained_on"]
    assert seen["label_noise"] == {"kind": "none"}, seen
    assert "pair_flip" not in (tmp / "exp" / "README.md").read_text()
    # its metrics named by the split the import measured them on (--data's first 30 test images)
    assert (seen["eval_split"], seen["limit_eval"]) == ("test", 30), seen
    assert "split: test[:30]" in (tmp / "exp" / "README.md").read_text()
    # a model trained on another dataset: its import's digits metrics are not filed under that dataset
    other = _import(tmp, _model_pt(tmp / "c" / "model.pt", trained_on={**TRAINED, "source": "cifar10n"}), "oth")
    export_run(other, tmp / "exp3")
    harness = json.loads((tmp / "exp3" / "config.json").read_text())["harness"]
    assert harness["trained_on"]["source"] == "cifar10n" and not harness.get("metrics"), harness
    assert "model-index" not in (tmp / "exp3" / "README.md").read_text()
    # a model that records no training data: the export claims none
    bare = _import(tmp, _model_pt(tmp / "t" / "model.pt", seed=1), "bare")
    export_run(bare, tmp / "exp2")
    assert json.loads((tmp / "exp2" / "config.json").read_text())["harness"]["trained_on"] is None
    assert "| trained on | not recorded |" in (tmp / "exp2" / "README.md").read_text()
    return "the export states the model's own training data (label_noise none); a model without a record: not recorded"


# ------------------------------------------------------------------------------ A18-09: the imported head
@handled(
    "report",
    "harness import of a het model.pt and of a hom one, then harness report of both (audit18 A18-09: config.yaml "
    "recorded head {covariance: none} for every model, so both were 'hom seed ?' and the report refused them as one)",
    r"^imports recorded as het \(low_rank\) and hom, each a method of its own: het import imphet, hom import imphom$",
)
def _import_head(tmp):
    from harness.runs import run_head, run_method

    het = _import(tmp, _model_pt(tmp / "h" / "model.pt", {"covariance": "low_rank", "num_factors": 2}), "imphet")
    hom = _import(tmp, _model_pt(tmp / "o" / "model.pt", seed=1), "imphom")
    assert run_head(het)["covariance"] == "low_rank" and run_head(hom)["covariance"] == "none"
    _cli("report", str(het), str(hom), "--out-root", str(tmp / "rep"), "--name", "r", "--no-shift", "--no-covariance")
    methods = [e["method"] for e in json.loads((tmp / "rep" / "r" / "report.json").read_text())["entries"]]
    assert methods == [run_method(het), run_method(hom)] == ["het import imphet", "hom import imphom"], methods
    return f"imports recorded as het (low_rank) and hom, each a method of its own: {', '.join(methods)}"


# ------------------------------------------------------------------------------ A18-12: the training split
@bad_input(
    "runs",
    "harness import --data of eval_split train for a model.pt recording train_split train, and harness ensemble "
    "--from-checkpoints --eval-data of eval_split train for members trained on digits' train split (audit18 A18-12: "
    "both scored the models on their training images, which harness upstream refuses)",
    click.ClickException,
    r"was trained on the train split of digits \(as it records\): data\.eval_split=train is also data\.train_split: the "
    r"model would be scored on the images it was trained on .*give a split of its own",
)
def _scored_on_training_split(tmp):
    import pytest
    from bad_inputs_audit6_runs import _checkpoint_runs

    train = "data:\n  source: digits\n  eval_split: train\n  heldout_split: val\n  limit_eval: 20\n"
    members = _checkpoint_runs(tmp)
    (tmp / "tr.yaml").write_text(train)
    with pytest.raises(click.ClickException, match=r"member .*a was trained on the train split of digits"):
        _cli("ensemble", *members, "--from-checkpoints", "--eval-data", str(tmp / "tr.yaml"), "--out", str(tmp / "e"))
    held = "data:\n  source: digits\n  eval_split: test\n  heldout_split: train\n  limit_eval: 20\n"
    (tmp / "ht.yaml").write_text(held)
    with pytest.raises(click.ClickException, match=r"data\.heldout_split=train is also data\.train_split"):
        _cli("ensemble", *members, "--from-checkpoints", "--eval-data", str(tmp / "ht.yaml"), "--out", str(tmp / "e"))
    assert not (tmp / "e").exists()
    # cifar10n is one dataset wherever its files lie: a model.pt records no path, and is refused all the same
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10n"
    cifar = {"source": "cifar10n", "train_split": "train45k", "image_size": 32}
    on_train = f"data:\n  source: cifar10n\n  path: {shared}\n  eval_split: train45k\n  heldout_split: null\n"
    with pytest.raises(click.ClickException, match=r"was trained on the train45k split of cifar10n \(as it records\)"):
        _import(tmp, _model_pt(tmp / "c" / "model.pt", trained_on=cifar), "impc", on_train + "  limit_eval: 20\n")
    model = _model_pt(tmp / "g" / "model.pt", trained_on=TRAINED)
    try:
        _import(tmp, model, "imp", train)
    finally:
        assert not (tmp / "imp").exists() and not (tmp / "impc").exists(), "an import folder was written"


# ------------------------------------------------------------------------------ A18-08: --eval-data's held-out split
@handled(
    "ensembles",
    "harness ensemble --from-checkpoints --eval-data of eval_split val, heldout_split test, on members evaluated on "
    "test with held-out val (audit18 A18-08: the members' own held-out predictions, the very val images then scored, "
    "were kept, and their shift sets averaged, as the ensemble's)",
    r"^held-out predictions re-predicted on --eval-data's test split \(20 rows\); the members' shift sets left out$",
)
def _eval_data_heldout(tmp):
    from bad_inputs_audit6_runs import _checkpoint_runs

    from harness.data.config import DataConfig
    from harness.data.sources import build_split
    from harness.runs import heldout_description
    from harness.uncertainty.predictions import Predictions

    members = _checkpoint_runs(tmp)
    for m in members[1::2]:  # the members' own held-out predictions, on their own data's val split
        pred = Predictions(
            np.zeros((20, 10)), np.arange(20) % 10, np.arange(20), [str(i) for i in range(10)], "softmax"
        )
        pred.save(Path(m) / "heldout_predictions.npz")
    (tmp / "ev.yaml").write_text(
        "data:\n  source: digits\n  eval_split: val\n  heldout_split: test\n  limit_eval: 20\n"
    )
    _cli("ensemble", *members, "--from-checkpoints", "--eval-data", str(tmp / "ev.yaml"), "--out", str(tmp / "ens"))
    spec = json.loads((tmp / "ens" / "ensemble.json").read_text())
    test = build_split(DataConfig(source="digits", limit_eval=20), "test")
    held = Predictions.load(tmp / "ens" / "heldout_predictions.npz")
    assert spec["heldout_data"] == test.description == heldout_description(tmp / "ens"), spec["heldout_data"]
    assert np.array_equal(held.targets, np.asarray(test.labels)[held.index]), "not the test split's labels"
    assert "shift" in spec["left_out"] and not (tmp / "ens" / "shift").exists()
    _cli("report", str(tmp / "ens"), "--out-root", str(tmp / "rep"), "--name", "r", "--no-covariance", "--no-shift")
    report = json.loads((tmp / "rep" / "r" / "report.json").read_text())
    assert test.description in json.dumps(report), "the report names another held-out split than the ensemble's"
    try:
        _cli("shift", "-m", str(tmp / "ens"), "--corruptions", "gaussian_noise", "--severities", "1", "--ood", "none")
        raise AssertionError("harness shift averaged the members' own-data sets into an --eval-data ensemble")
    except click.ClickException as e:
        assert "evaluated on other data than its members'" in str(e), e
    return f"held-out predictions re-predicted on --eval-data's test split ({len(held.index)} rows); the members' shift sets left out"
