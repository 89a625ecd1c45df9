"""Bad inputs found by the twenty-sixth reliability audit in result files replaced or edited by hand (``audit26 <case
id>``): a run's predictions.npz of another run, a hand-edited metrics.json exported on the model card, a hand-edited
accuracy in a sweep's runs.jsonl, an ensemble.json whose member list was edited, and a data pack's shard replaced by
another split's. Each file is checked against the record written with it before it is used."""

from __future__ import annotations

import json
import os
import shutil

import click
from bad_inputs_audit24_records import _digits_run

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

_REPORT = ("report", "--no-shift", "--no-covariance", "--name")


def _two_runs(tmp, *names: str) -> None:
    """The small digits runs ``runs/<name>`` of seeds 1, 2, ... (one each)."""
    for seed, name in enumerate(names, 1):
        _digits_run(tmp, tmp / "runs" / name, seed)


# ------------------------------------------------------------------------------ A26-05: another run's predictions
@bad_input(
    "uncertainty",
    "harness report (and harness ensemble) of a run folder whose predictions.npz was replaced by a hard link to another "
    "run's (audit26 A26-05: rc 0, the other run's result reported under this run's name, disagreeing with its own "
    "metrics.json)",
    click.ClickException,
    r"^runs/s2/predictions\.npz is not what the run's metrics\.json measured: \w+ recomputed from predictions\.npz "
    r"is [\d.e-]+ but its metrics\.json \(metrics\) says [\d.e-]+ .*put the run's own predictions\.npz and metrics\.json "
    r"back, or write its predictions again from its model\.pt without training .*reevaluate\('runs/s2', force=True\)",
)
def _replaced_predictions(tmp):
    import pytest

    _two_runs(tmp, "s1", "s2", "s3")
    _cli(*_REPORT, "r0", "runs/s2")  # its own predictions: reported
    (tmp / "runs" / "s2" / "predictions.npz").unlink()
    os.link(tmp / "runs" / "s1" / "predictions.npz", tmp / "runs" / "s2" / "predictions.npz")
    with pytest.raises(click.ClickException, match=r"runs/s2/predictions\.npz is not what the run's metrics"):
        _cli("ensemble", "-m", "runs/s2", "-m", "runs/s3", "--out", "ens/e")
    assert not (tmp / "ens" / "e").exists()
    _cli(*_REPORT, "r1", "runs/s2")


# ------------------------------------------------------------------------------ A26-12: a hand-edited metrics.json
@bad_input(
    "export",
    "harness.runs.export_run of a run folder whose metrics.json's top1 and nll were edited by hand (audit26 A26-12: rc 0, "
    "the edited accuracy published in the card's model-index, unchecked against the run's predictions)",
    ValueError,
    r"^runs/s1/predictions\.npz is not what the run's metrics\.json measured: top1 recomputed from predictions\.npz "
    r"is [\d.e-]+ but its metrics\.json \(metrics\) says 0\.99 .*put the run's own predictions\.npz and metrics\.json back",
)
def _edited_metrics_exported(tmp):
    from harness.runs import export_run

    _two_runs(tmp, "s1")
    export_run("runs/s1", "exp0")  # as the run wrote it: exported
    path = tmp / "runs" / "s1" / "metrics.json"
    record = json.loads(path.read_text())
    record["metrics"].update(top1=0.99, nll=0.01)
    path.write_text(json.dumps(record, indent=1))
    shutil.rmtree(tmp / "exp0")
    export_run("runs/s1", "exp1")


# ------------------------------------------------------------------------------ A26-15: a hand-edited runs.jsonl
@bad_input(
    "downstream",
    "harness downstream rerun into its --out after a final run's accuracy in runs.jsonl was edited by hand (audit26 "
    "A26-15: rc 0, the edited accuracy became vtab.md's headline number while its table of the saved predictions said "
    "otherwise)",
    click.ClickException,
    r"^.*sw/runs\.jsonl's mytask\|final\|lr=0\.01\|steps=5\|seed=0 is not what its predictions .*sw/predictions/"
    r"mytask_seed0\.npz measured: top1 recomputed from mytask_seed0\.npz is [\d.e-]+ but the record says 0\.99; delete "
    r"that line of .*sw/runs\.jsonl to fine-tune the run again, or restore the file",
)
def _edited_sweep_record(tmp):
    from bad_inputs_audit23_lead import _custom_task
    from bad_inputs_audit24_records import _SWEEP

    _custom_task(tmp / "ptc")
    sweep = ("downstream", "--upstream", "timm:resnet10t", "--random-init", "--tasks", "mytask=ptc:2", *_SWEEP)
    _cli(*sweep, "--out", str(tmp / "sw"))
    _cli(*sweep, "--out", str(tmp / "sw"))  # resumed as it was written: nothing to run, reported again
    store = tmp / "sw" / "runs.jsonl"
    records = [json.loads(line) for line in store.read_text().splitlines()]
    for rec in records:
        if rec["phase"] == "final":
            rec["accuracy"] = 0.99
    store.write_text("".join(json.dumps(r) + "\n" for r in records))
    _cli(*sweep, "--out", str(tmp / "sw"))


# ------------------------------------------------------------------------------ A26-13: an ensemble's members edited
@bad_input(
    "shift",
    "harness shift (and harness report) of an ensemble folder whose ensemble.json members list was edited to name "
    "another run (audit26 A26-13: rc 0, shift averaged the other run's predictions under the ensemble's name; the "
    "weights-digest check, keyed by the recorded members, never saw the new one)",
    click.ClickException,
    r"^ens/xe/ensemble\.json lists members its predictions were not built from: .*runs/s3 listed but not recorded in "
    r"its member_weights, .*runs/s2 recorded and no longer listed .*put the list back as it was \(.*runs/s1, "
    r".*runs/s2\), or build the ensemble of the members now listed in another folder \(harness ensemble -m .*runs/s1 "
    r"-m .*runs/s3 --out NEW_FOLDER\)",
)
def _edited_ensemble_members(tmp):
    import pytest

    _two_runs(tmp, "s1", "s2", "s3")
    _cli("ensemble", "-m", "runs/s1", "-m", "runs/s2", "--out", "ens/xe")
    _cli(*_REPORT, "r0", "ens/xe")  # as it was built: reported
    path = tmp / "ens" / "xe" / "ensemble.json"
    spec = json.loads(path.read_text())
    spec["members"][1] = str((tmp / "runs" / "s3").resolve())
    path.write_text(json.dumps(spec, indent=1))
    with pytest.raises(click.ClickException, match=r"ens/xe/ensemble\.json lists members its predictions were not"):
        _cli(*_REPORT, "r1", "ens/xe")
    _cli("shift", "-m", "ens/xe", "--corruptions", "none", "--ood", "gaussian", "--seed", "0")


# ------------------------------------------------------------------------------ A26-03: a shard replaced
def _two_class_images(root) -> None:
    """``root/{train,val,test}/{cat,dog}/*.png``: 12 / 6 / 6 random 20x20 images a class (a dog's left half white),
    so that the val and test splits pack into shards of one size and the same labels."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", 12), ("val", 6), ("test", 6)):
        for c in ("cat", "dog"):
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                a = (rng.random((20, 20, 3)) * 255).astype("uint8")
                if c == "dog":
                    a[:, :10] = 255
                Image.fromarray(a).save(root / split / c / f"{i}.png")


@bad_input(
    "upstream",
    "harness upstream on a data pack whose test-000000.tar was replaced by val-000000.tar (another split's shard of "
    "the same byte size and labels) (audit26 A26-03: rc 0, 5 of the 12 'test' examples were val images; the damage "
    "check compared the size and a label digest only)",
    click.ClickException,
    r"^shard packs/test/test-000000\.tar is not the shard its index packed \(the SHA-256 of its bytes is \w{12}\.\.\., "
    r"the sha256 its index records \w{12}\.\.\.\): it was replaced since packing .*run the same harness data pack "
    r"command again, which writes it anew",
    before=False,
)
def _replaced_shard(tmp):
    from bad_inputs_audit9_config import CONFIGS

    _two_class_images(tmp / "imgs")
    pack = ("data", "pack", "image_folder", "packs", "path=imgs", "--shard-size", "5", "--split")
    for split in ("train", "val", "test"):
        _cli(*pack, split)
    shards = tmp / "packs" / "test"
    index = json.loads((shards / "index.json").read_text())
    assert all(len(s["sha256"]) == 64 for s in index["shards"]), index
    original = (shards / "test-000000.tar").read_bytes()
    shutil.copy(tmp / "packs" / "val" / "val-000000.tar", shards / "test-000000.tar")
    assert (shards / "test-000000.tar").stat().st_size == len(original)  # the size check cannot tell
    _cli(*pack, "test")  # the same pack command again: the replaced shard written anew
    assert (shards / "test-000000.tar").read_bytes() == original
    shutil.copy(tmp / "packs" / "val" / "val-000000.tar", shards / "test-000000.tar")
    _cli(
        "upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1",
        "train.log_with=[]", "model.backbone=test_resnet", "data.source=shards", "data.path=packs",
        "data.label_noise=null", "data.heldout_split=null", "data.image_size=16", "data.eval_resize=16",
        "data.batch_size=4", "output_dir=runs/sh",
    )  # fmt: skip
