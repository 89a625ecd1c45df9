"""Bad inputs found by the twenty-third reliability audit in the run stages (``audit23 <case id>``): a finished run
re-evaluated with another model.pt or from another working folder, a run resumed (or found complete) from another
working folder or with a replaced model.pt, a run.json whose date does not read under a prospective endpoint, and an
experiment whose runs_root lies inside the data it reads. Every refusal comes before any work."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from bad_inputs_audit9_config import CONFIGS

from bad_inputs import bad_input, handled

_NOT_ITS_MODEL = (
    r"model\.pt is not the model the run's metrics\.json and predictions measured \(its weights' digest is "
    r"\w+\.\.\., metrics\.json records \w+\.\.\.\): put the run's own model\.pt back, or train the run again"
)
_IMF = [
    "data.source=image_folder",
    "data.path=imf",
    "data.train_split=train",
    "data.eval_split=test",
    "data.heldout_split=val",
    "data.batch_size=4",
    "data.image_size=16",
    "data.eval_resize=16",
    "data.label_noise.kind=none",
]


def _train(folder: Path, overrides: "list[str]", **run_kw) -> Path:
    """Train (or resume, or find finished) the small ``digits_hom.yaml`` run ``folder`` (test_resnet, one epoch, 64
    training images unless ``overrides`` say otherwise); ``run_kw`` go to the upstream's ``run``."""
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig
    from harness.upstream.train import run

    base = ["train.epochs=1", "data.limit_train=64", "data.limit_eval=32", "train.log_with=[]"]
    base = [b for b in base if b.split("=")[0] not in {o.split("=")[0] for o in overrides}]
    base += ["model.backbone=test_resnet", f"output_dir={folder}", *overrides]
    run(load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", base), **{"progress": False, **run_kw})
    return folder


def _image_folder(where: Path, seed: int) -> Path:
    """``where/imf/{train,val,test}/{a,b}/{0..5}.png``: random 16x16 RGB images of ``seed``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split in ("train", "val", "test"):
        for c in "ab":
            (where / "imf" / split / c).mkdir(parents=True)
            for i in range(6):
                image = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
                Image.fromarray(image).save(where / "imf" / split / c / f"{i}.png")
    return where / "imf"


# ------------------------------------------------------------------------------ A23-01: reevaluate of another model
@bad_input(
    "upstream",
    "reevaluate(run, force=True) of a finished run whose model.pt was replaced by another run's (audit23 A23-01: rc 0, "
    "its metrics.json rewritten with the other model's metrics under the run's old weights_sha256)",
    ValueError,
    r"^.*a/" + _NOT_ITS_MODEL,
)
def _reevaluate_replaced_model(tmp):
    from harness.checkpoint_files import measured_model
    from harness.upstream.reevaluate import reevaluate

    a, b = _train(tmp / "a", []), _train(tmp / "b", ["seed=1"])
    record = json.loads((a / "metrics.json").read_text())
    del record["weights_sha256"]  # a run written before the record: re-evaluated, it gains the model it measured
    (a / "metrics.json").write_text(json.dumps(record))
    after = reevaluate(a, force=True)
    assert after["weights_sha256"] == measured_model(a / "model.pt")["weights_sha256"], after.get("weights_sha256")
    assert json.loads((a / "metrics.json").read_text())["eval_options"] == {}
    before = (a / "metrics.json").read_text()
    shutil.copy(b / "model.pt", a / "model.pt")
    try:
        reevaluate(a, force=True)
    finally:
        assert (a / "metrics.json").read_text() == before, "metrics.json was rewritten"


# ------------------------------------------------------------------------------ A23-02: reevaluate from elsewhere
@handled(
    "upstream",
    "reevaluate(run, force=True) of an image-folder run with data.path=imf from another working folder holding "
    "another imf (audit23 A23-02: the run's metrics and predictions replaced by those of the other folder's images)",
    r"re-evaluated from other/ on the run's own imf: nll as trained",
)
def _reevaluate_from_elsewhere(tmp):
    from harness.upstream.reevaluate import reevaluate

    _image_folder(tmp, 0)
    _image_folder(tmp / "other", 1)
    run = _train(tmp / "runs" / "imf", _IMF)
    nll = json.loads((run / "metrics.json").read_text())["metrics"]["nll"]
    os.chdir(tmp / "other")
    try:
        after = reevaluate(Path("..") / "runs" / "imf", force=True)
    finally:
        os.chdir(tmp)
    assert after["metrics"]["nll"] == pytest.approx(nll, rel=1e-6), (after["metrics"]["nll"], nll)
    return "re-evaluated from other/ on the run's own imf: nll as trained"


# ------------------------------------------------------------------------------ A23-03: resumed from elsewhere
@bad_input(
    "upstream",
    "harness upstream resuming a run folder given absolutely, with data.path=imf, from another working folder holding "
    "another imf; and the finished run's 'already complete' there (audit23 A23-03: rc 0, epochs trained and evaluated "
    "on the other folder's images, run.json still recording the first)",
    ValueError,
    r"^.*runs/res holds a run of data\.path=imf = .*/imf \(its run\.json's data_path\), and from this working folder "
    r"\(.*other\) data\.path=imf is .*other/imf: the run would go on \(or be taken as finished\) on other data under "
    r"its record: run this command from /\S+ \(its config\.yaml keeps data\.path=imf\), or give another "
    r"output_dir to train a new run on .*other/imf$",
)
def _resume_from_elsewhere(tmp):
    _image_folder(tmp, 0)
    _image_folder(tmp / "other", 1)
    run, settings = tmp / "runs" / "res", [*_IMF, "train.epochs=2", "train.checkpoint_every=1"]
    _train(run, settings, stop_after_steps=2)
    assert (run / "checkpoints" / "last.pt").is_file() and not (run / "model.pt").exists()
    os.chdir(tmp / "other")
    try:
        with pytest.raises(ValueError, match=r"holds a run of data\.path=imf"):
            _train(run, settings)  # resume
        assert not (run / "model.pt").exists()
        os.chdir(tmp)
        _train(run, settings)  # finished from where it started
        os.chdir(tmp / "other")
        _train(run, settings)  # "already complete" from elsewhere
    finally:
        os.chdir(tmp)


# ------------------------------------------------------------------------------ A23-04: complete with another model
@bad_input(
    "upstream",
    "harness upstream of a finished run whose model.pt was replaced by another run's (audit23 A23-04: rc 0, 'already "
    "complete (metrics.json); nothing to do')",
    ValueError,
    r"^.*a/" + _NOT_ITS_MODEL,
)
def _complete_with_replaced_model(tmp):
    a, b = _train(tmp / "a", []), _train(tmp / "b", ["seed=1"])
    shutil.copy(b / "model.pt", a / "model.pt")
    _train(a, [])


# ------------------------------------------------------------------------------ A23-13: a run.json date unread
_CX = (
    "name: cx\nupstream_overrides: [train.epochs=1, data.limit_train=64, data.limit_eval=32, model.backbone=test_resnet, "
    "'train.log_with=[]']\nmethods: {hom: {covariance: none}}\nseeds: [0]\nensemble_sizes: []\nrecords: false\n"
    "workers: 1\ndownstream: {tasks: []}\n"
)


@bad_input(
    "experiment",
    "harness run with primary.prospective_for [main] whose run hom_s0's run.json records date '29/11/2025 10:00', "
    "none, or '2099-01-01 10:00 UTC' (audit23 A23-13: rc 0, the report saying the endpoint was declared before the "
    "runs: the date compared as text, a missing one read as today)",
    ValueError,
    r"^run hom_s0: .*hom_s0/run\.json records date='29/11/2025 10:00', not a day the run can have started \(the "
    r"harness writes YYYY-MM-DD HH:MM UTC, from 2020-01-01 to today; .*\): the file is damaged: restore it, or take "
    r"main out of primary\.prospective_for",
)
def _prospective_date_unread(tmp):
    from harness.experiment import load_experiment
    from harness.experiment.validate import validate_experiment

    (tmp / "cx.yaml").write_text(_CX)
    given = (
        f"runs_root={tmp / 'xr'}",
        f"results_root={tmp / 'xres'}",
        "primary={metric: nll, split: heldout, declared: '2026-11-01', prospective_for: [main]}",
    )
    meta = tmp / "xr" / "cx" / "upstream" / "hom_s0" / "run.json"
    meta.parent.mkdir(parents=True)
    for date, said in ((None, "records date=None"), ("2099-01-01 10:00 UTC", r"date=2099-01-01 is after today")):
        meta.write_text(json.dumps({} if date is None else {"date": date}))
        with pytest.raises(ValueError, match=rf"run hom_s0: .*run\.json .*{said}.*the file is damaged"):
            validate_experiment(load_experiment(str(tmp / "cx.yaml"), given))
    meta.write_text(json.dumps({"date": "29/11/2025 10:00"}))
    validate_experiment(load_experiment(str(tmp / "cx.yaml"), given))


# ------------------------------------------------------------------------------ A23-15: runs_root inside the data
@bad_input(
    "experiment",
    "harness run with runs_root=imf/val/xr, inside the val split of the image folder its runs read; and results_root "
    "inside its test split (audit23 A23-15: refused, but the fix named output_dir, which harness run does not take, "
    "with an example inside the data folder)",
    ValueError,
    r"^runs_root=imf/val/xr \(experiment ci's folder imf/val/xr/ci\) is inside the data's val split \(data\.path=imf\) "
    r"imf/val, which would then hold harness run's files beside its own .*: give runs_root a folder outside imf/val "
    r"and every other folder of the data \(data\.path=imf\) in ci\.yaml, or as runs_root=PATH on the command line, "
    r"e\.g\. runs_root=runs$",
)
def _runs_root_inside_data(tmp):
    from harness.experiment import load_experiment
    from harness.experiment.validate import validate_experiment

    _image_folder(tmp, 0)
    (tmp / "ci.yaml").write_text(
        f"name: ci\nupstream_overrides: [train.epochs=1, 'train.log_with=[]', model.backbone=test_resnet, "
        f"{', '.join(_IMF)}]\nmethods: {{hom: {{covariance: none}}}}\nseeds: [0]\nensemble_sizes: []\n"
        "records: false\nworkers: 1\ndownstream: {tasks: []}\n"
    )
    with pytest.raises(ValueError, match=r"^results_root=imf/test/res .*give results_root a folder outside imf/test"):
        validate_experiment(load_experiment("ci.yaml", ("runs_root=xr", "results_root=imf/test/res")))
    try:
        validate_experiment(load_experiment("ci.yaml", ("runs_root=imf/val/xr", "results_root=xres")))
    finally:
        assert sorted(p.name for p in (tmp / "imf" / "val").iterdir()) == ["a", "b"]
