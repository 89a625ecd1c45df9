"""Bad inputs found by the twenty-second reliability audit in the run and transfer stages (``audit22 <case id>``): a
harness model.pt whose weights changed under a sweep that resumes, a run folder's replaced model.pt read by harness
run's stages (and by harness downstream / fewshot), and a custom transfer task whose test list names the upstream
model's own training images. Every refusal comes before any work."""

from __future__ import annotations

import shutil
from pathlib import Path

import click
from bad_inputs_audit8_experiment import TINY
from bad_inputs_audit9_config import CONFIGS

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

_SWEEP = ("--tasks", "demo_digit", "--preset", "demo", "--lrs", "0.01", "--steps", "5", "--seeds", "1")
_NOT_ITS_MODEL = (
    r"hom_s0/model\.pt is not the model the run's metrics\.json and predictions measured \(its weights' digest is "
    r"\w+\.\.\., metrics\.json records \w+\.\.\.\): put the run's own model\.pt back, or train the run again"
)


def _trained(tmp: Path, name: str, seed: int) -> Path:
    """A one-epoch digits run ``tmp/name`` (100 training images) of seed ``seed``; returns its folder."""
    config = ["--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1", "train.log_with=[]"]
    _cli("upstream", "--no-progress", *config, "data.limit_train=100", f"seed={seed}", f"output_dir={tmp / name}")
    return tmp / name


# ------------------------------------------------------------------------------ A22-01: a sweep's model.pt changed
@bad_input(
    "downstream",
    "harness downstream --upstream m.pt into the --out of an earlier sweep of m.pt, after m.pt was replaced by "
    "another model's (audit22 A22-01: the old sweep resumed, rc 0, and its numbers were reported under the new model)",
    click.ClickException,
    r"^.*sw1 holds a sweep of another model in .*m\.pt \(its weights' digest is now \w+\.\.\., the sweep's "
    r"sweep\.json records \w+\.\.\.\): the model\.pt was replaced or trained again since that sweep ran.*write this "
    r"sweep elsewhere \(--out; runs_root for harness run\), or delete that folder",
)
def _sweep_of_changed_model(tmp):
    a, b = _trained(tmp, "a", 0), _trained(tmp, "b", 1)
    shutil.copy(a / "model.pt", tmp / "m.pt")
    args = ("downstream", "--upstream", str(tmp / "m.pt"), *_SWEEP, "--log-with", "none", "--out", str(tmp / "sw1"))
    _cli(*args)
    _cli(*args)  # the same model again: the sweep resumes, nothing to run
    shutil.copy(b / "model.pt", tmp / "m.pt")  # what training another model into the same file gives
    _cli(*args)


# ------------------------------------------------------------------------------ A22-10: harness run's finished run
@bad_input(
    "experiment",
    "harness run of an experiment whose finished run upstream/hom_s0 had its model.pt replaced by another run's, "
    "with downstream tasks (audit22 A22-10: 'already complete; nothing to do', then the other weights transferred and "
    "reported as hom seed 0's); harness downstream --upstream and harness fewshot --model of that model.pt too",
    ValueError,
    r"^.*" + _NOT_ITS_MODEL,
)
def _experiment_run_replaced_model(tmp):
    import pytest

    from harness.experiment import load_experiment, run_experiment

    (tmp / "tiny.yaml").write_text(TINY)
    roots = (f"runs_root={tmp / 'r'}", f"results_root={tmp / 'res'}")
    run_experiment(load_experiment(str(tmp / "tiny.yaml"), roots), progress=lambda s: None)
    run = tmp / "r" / "tiny" / "upstream" / "hom_s0"
    shutil.copy(_trained(tmp, "b", 1) / "model.pt", run / "model.pt")
    model = str(run / "model.pt")
    with pytest.raises(click.ClickException, match=_NOT_ITS_MODEL):
        _cli("downstream", "--upstream", model, *_SWEEP, "--log-with", "none", "--out", str(tmp / "sw"))
    with pytest.raises(click.ClickException, match=_NOT_ITS_MODEL):
        _cli(
            "fewshot",
            "--model",
            model,
            "--tasks",
            "demo_digit",
            "--shots",
            "1",
            "--log-with",
            "none",
            "--out",
            str(tmp / "fs"),
        )
    assert not (tmp / "sw").exists() and not (tmp / "fs").exists()
    settings = "downstream={tasks: [demo_digit], preset: demo, settings: {lrs: [0.01], steps: [5], seeds: 1}}"
    try:
        run_experiment(load_experiment(str(tmp / "tiny.yaml"), (*roots, settings)), progress=lambda s: None)
    finally:
        assert not (tmp / "r" / "tiny" / "downstream").exists(), "the transfer started before the error"


# ------------------------------------------------------------------------------ A22-07: a task scoring training images
def _image_folder_run(tmp: Path) -> Path:
    """``tmp/imf/{train,val,test}/{a,b}/*.png`` (6 random 16x16 images each) and the one-epoch run ``tmp/runs/imf``
    trained on ``imf/train``; the task lists in ``imf`` (the audit's): train800 = val, val200 = test, test = train."""
    import numpy as np
    from PIL import Image

    rng, imf = np.random.default_rng(0), tmp / "imf"
    lists: "dict[str, list[str]]" = {"train800": [], "val200": [], "test": []}
    for split, listed in (("val", "train800"), ("test", "val200"), ("train", "test")):
        for label, c in enumerate("ab"):
            (imf / split / c).mkdir(parents=True)
            for i in range(6):
                Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(imf / split / c / f"{i}.png")
                lists[listed].append(f"{split}/{c}/{i}.png {label}")
    lists["train800val200"] = lists["train800"] + lists["val200"]
    for name, lines in lists.items():
        (imf / f"{name}.txt").write_text("\n".join(lines) + "\n")
    _imf_upstream(tmp, tmp / "runs" / "imf")
    return tmp / "runs" / "imf"


def _imf_upstream(tmp: Path, out: Path, *more: str) -> None:
    """``harness upstream`` (one tiny noiseless epoch) on ``tmp/imf`` as :func:`_image_folder_run` makes it (train on
    imf/train, evaluate on imf/test, held out imf/val), into ``out``, with the overrides ``more``."""
    imf = tmp / "imf"
    data = [f"data.path={imf}", "data.train_split=train", "data.eval_split=test", "data.heldout_split=val"]
    _cli(
        "upstream",
        "--no-progress",
        "--config",
        str(CONFIGS / "digits_hom.yaml"),
        "data.source=image_folder",
        *data,
        "data.batch_size=4",
        "train.epochs=1",
        "train.log_with=[]",
        "data.image_size=16",
        "data.eval_resize=16",
        "data.label_noise.kind=none",
        *more,
        f"output_dir={out}",
    )


@bad_input(
    "downstream",
    "harness downstream --upstream runs/imf/model.pt with a custom task mytask=imf:2 whose test.txt lists imf/train, "
    "the images runs/imf trained on; harness fewshot --model of the same, and harness run of an experiment training "
    "on imf/train with that task (audit22 A22-07: rc 0, the model's training images scored as transfer test accuracy)",
    click.ClickException,
    r"^.*imf/test\.txt line 1 names 'train/a/0\.png', an image the model --upstream .*model\.pt was trained on "
    r"\(data\.train_split=train of image_folder at .*imf/train \(as its run's .*config\.yaml records\)\): task "
    r"mytask's test split would score the model on its own training images.*list images no upstream model trained "
    r"on in test\.txt",
)
def _task_scoring_training_images(tmp):
    import pytest

    model, task = str(_image_folder_run(tmp) / "model.pt"), f"mytask={tmp / 'imf'}:2"
    with pytest.raises(click.ClickException, match=r"imf/test\.txt line 1 names 'train/a/0\.png'.* --model "):
        _cli("fewshot", "--model", model, "--tasks", task, "--shots", "1", "--log-with", "none", "--out", "fs")
    with pytest.raises(
        ValueError,
        match=r"^downstream: .*imf/test\.txt line 1 names 'train/a/0\.png', an image the "
        r"experiment's run hom_s0 trains on",
    ):
        _experiment_scoring_training_images(tmp)  # harness run: before its runs train
    args = ("--preset", "demo", "--lrs", "0.01", "--steps", "5", "--seeds", "1", "--log-with", "none")
    _cli("downstream", "--upstream", model, "--tasks", task, *args, "--out", str(tmp / "sw"))


def _experiment_scoring_training_images(tmp: Path) -> None:
    """harness run of an experiment whose runs train on ``tmp/imf/train`` with the task ``mytask=imf:2`` (its test
    list: imf/train): refused before any run trains (the sweep would refuse it only after the upstream runs)."""
    from harness.experiment import load_experiment, run_experiment

    imf = tmp / "imf"
    data = f"data.source=image_folder, data.path={imf}, data.train_split=train, data.eval_split=test"
    (tmp / "ximf.yaml").write_text(
        f"name: ximf\nupstream_overrides: [train.epochs=1, {data}, data.heldout_split=val, data.image_size=16, "
        "data.eval_resize=16, data.label_noise.kind=none, data.batch_size=4]\nmethods: {hom: {covariance: none}}\n"
        f"seeds: [0]\nensemble_sizes: []\nrecords: false\nworkers: 1\ndownstream: {{tasks: ['mytask={imf}:2'], "
        "preset: demo}\n"
    )
    roots = (f"runs_root={tmp / 'xr'}", f"results_root={tmp / 'xres'}")
    try:
        run_experiment(load_experiment(str(tmp / "ximf.yaml"), roots), progress=lambda s: None)
    finally:
        assert not (tmp / "xr" / "ximf" / "upstream").exists(), "work started before the error"
