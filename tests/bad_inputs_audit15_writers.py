"""Bad inputs found by the fifteenth reliability audit in the writers of packs and exports (``audit15 <case id>``):
label noise asked of a split that draws none (``harness data pack``), and ``Classifier.save_pretrained`` into a run's,
a shift's or an ensemble's folder. Every refusal comes before anything is written."""

from __future__ import annotations

import json

import click
import pytest
from bad_inputs_audit13_writers import _run

from bad_inputs import bad_input, handled
from bad_inputs_safety import _cli
from bad_inputs_uncertainty import make_run


# ----------------------------------------------------------------------------- A15-04: noise on a split without
@bad_input(
    "data",
    "harness data pack digits pk3 --split test label_noise.kind=symmetric label_noise.rate=0.5 (audit15 A15-04: rc 0, "
    "the clean labels packed while index.json's source config records the noise)",
    click.ClickException,
    r"^label_noise\.kind=symmetric is drawn only on the training split \(train_split=train\) and the held-out split "
    r"\(none: heldout_split=null\), as a run draws it, and --split test is neither: the pack would hold test's clean "
    r"labels while index\.json records the noise; give heldout_split=test to pack test with the noise a run draws on "
    r"its held-out split, or label_noise=null to pack the clean labels$",
)
def _pack_noise_on_the_test_split(tmp):
    noise = ("label_noise.kind=symmetric", "label_noise.rate=0.5")
    try:
        _cli(
            "data",
            "pack",
            "digits",
            str(tmp / "pk3"),
            "--shard-size",
            "100",
            "--split",
            "test",
            "limit_eval=50",
            *noise,
        )
    finally:
        assert not (tmp / "pk3").exists(), "a pack written before the refusal"


@handled(
    "data",
    "harness data pack digits --split val with label noise, without and with heldout_split=val (audit15 A15-04: rc 0 "
    "without it, the clean labels packed and the noise recorded)",
    r"^--split val with label noise is refused without heldout_split=val \(nothing written\); with it, val is packed "
    r"with the noise recorded in index\.json; label_noise=null packs test's clean labels$",
)
def _pack_noise_on_the_val_split(tmp):
    noise = ("label_noise.kind=symmetric", "label_noise.rate=0.5")
    args = ("data", "pack", "digits", str(tmp / "pk"), "--shard-size", "100", "limit_eval=50")
    with pytest.raises(click.ClickException, match=r"--split val is neither: .*give heldout_split=val "):
        _cli(*args, "--split", "val", *noise)
    assert not (tmp / "pk").exists(), "a pack written before the refusal"
    _cli(*args, "--split", "val", "heldout_split=val", *noise)
    index = json.loads((tmp / "pk" / "val" / "index.json").read_text())
    assert index["label_noise"]["kind"] == "symmetric", index["label_noise"]
    _cli(*args, "--split", "test", "label_noise=null")
    assert json.loads((tmp / "pk" / "test" / "index.json").read_text())["label_noise"] is None
    return (
        "--split val with label noise is refused without heldout_split=val (nothing written); with it, val is packed "
        "with the noise recorded in index.json; label_noise=null packs test's clean labels"
    )


# ------------------------------------------------------------------------------ A15-05: save_pretrained inside outputs
def _model():
    from harness.models import ModelConfig, build_model

    return build_model(ModelConfig("test_resnet", 10, {"covariance": "none"}))


@bad_input(
    "outputs",
    "Classifier.save_pretrained('runs/s1/exp') (audit15 A15-05: an export of another model written inside a run "
    "folder without a word, where export_run refuses the same)",
    ValueError,
    r"^save_directory=.*runs/s1/exp is inside the run folder .*runs/s1 \(it holds run\.json\), which would then hold "
    r"save_pretrained's files beside its own .*: give save_directory a folder outside it, e\.g\. .*runs/exp$",
)
def _save_pretrained_into_a_run(tmp):
    run = _run(tmp / "runs" / "s1")
    try:
        _model().save_pretrained(run / "exp")
    finally:
        assert not (run / "exp").exists(), "an export written inside a run folder"


@handled(
    "outputs",
    "Classifier.save_pretrained into a run's shift/ folder, an ensemble folder and <run>/pretrained; export_run into "
    "its own run's pretrained (audit15 A15-05: all three written without a word)",
    r"^save_pretrained refuses a run's shift folder, an ensemble folder and <run>/pretrained \(nothing written\); "
    r"export_run still writes its own run's pretrained, and save_pretrained a folder of its own$",
)
def _save_pretrained_into_outputs(tmp):
    from harness.runs import export_run

    run, ens = _run(tmp / "runs" / "k9"), tmp / "ens1"
    (run / "shift").mkdir()
    ens.mkdir()
    (ens / "ensemble.json").write_text("{}")
    model = _model()
    for folder, kind in ((run / "shift" / "exp", "run"), (ens / "exp", "ensemble"), (run / "pretrained", "run")):
        with pytest.raises(ValueError, match=rf"^save_directory=.* is inside the {kind} folder "):
            model.save_pretrained(folder)
        assert not folder.exists(), f"an export written into {folder}"
    assert (export_run(run, run / "pretrained") / "model.safetensors").is_file()  # the run's own export: allowed
    other = make_run(tmp / "runs" / "s1")  # export_run into another run: its own message, before any work
    with pytest.raises(ValueError, match=r"^out=.*runs/s1/exp2 is inside the run folder .*harness\.runs\.export_run"):
        export_run(run, other / "exp2")
    assert not (other / "exp2").exists()
    model.save_pretrained(tmp / "exp")
    assert (tmp / "exp" / "model.safetensors").is_file()
    return (
        "save_pretrained refuses a run's shift folder, an ensemble folder and <run>/pretrained (nothing written); "
        "export_run still writes its own run's pretrained, and save_pretrained a folder of its own"
    )
