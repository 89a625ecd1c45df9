"""Bad inputs found by the twenty-sixth reliability audit in the transfer stages (``audit26 <case id>``): a sweep rerun
with a custom task's K or flags changed, a sweep rerun with other settings, a custom task's K above its labels
(downstream and fewshot), an ensemble of sweeps scored on other images, and a few-shot study of another model."""

from __future__ import annotations

import shutil

import click
from bad_inputs_audit23_lead import _custom_task
from bad_inputs_audit24_records import _digits_run

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

#: a cheap sweep of a randomly initialised timm model (no training upstream)
_SWEEP = (
    "--upstream",
    "timm:resnet10t",
    "--random-init",
    "--preset",
    "demo",
    "--lrs",
    "0.01",
    "--steps",
    "2",
    "--seeds",
    "1",
    "--batch-size",
    "4",
    "--resolution",
    "16,16",
    "--log-with",
    "none",
)


def _sweep(tmp, task: str, out: str, *more: str) -> None:
    _cli("downstream", *_SWEEP, "--tasks", task, "--out", str(tmp / out), *more)


# ------------------------------------------------------------------------------ A26-06: a custom task's spec
@bad_input(
    "downstream",
    "harness downstream rerun into the same --out with the custom task's line changed: my=ct:2 then my=ct:2:no-crop "
    "and my=ct:2:no-flip (audit26 A26-06: rc 0, the old fine-tunes reused, the new spec recorded in vtab.md)",
    click.ClickException,
    r"^.*sw holds a sweep of other task data \(task my's line is now my=.*ct:2:no-flip, the sweep's sweep\.json "
    r"records my=.*ct:2 \(its K and no-flip / no-crop are how its runs train and score\)\).*write this sweep "
    r"elsewhere \(--out",
)
def _sweep_task_spec_changed(tmp):
    import pytest

    _custom_task(tmp / "ct")
    _sweep(tmp, f"my={tmp / 'ct'}:2", "sw")
    with pytest.raises(click.ClickException, match=r"task my's line is now my=.*ct:2:no-crop"):
        _sweep(tmp, f"my={tmp / 'ct'}:2:no-crop", "sw")
    _sweep(tmp, f"my={tmp / 'ct'}:2:no-flip", "sw")


# ------------------------------------------------------------------------------ A26-07: which setting differs
@bad_input(
    "downstream",
    "harness downstream rerun into the same --out with --micro-batch 2 (audit26 A26-07: 'holds a sweep of another "
    "upstream checkpoint or settings', naming neither the setting nor its values)",
    click.ClickException,
    r"^.*sw holds a sweep of another upstream checkpoint or settings \(micro_batch: 4 there, 2 now; recorded in "
    r".*sw/sweep\.json\).*write this sweep elsewhere \(--out",
)
def _sweep_setting_changed(tmp):
    import pytest

    _custom_task(tmp / "ct")
    _sweep(tmp, f"my={tmp / 'ct'}:2", "sw")
    with pytest.raises(click.ClickException, match=r"resolution: \[16, 16\] there, \[20, 16\] now"):
        _cli(
            "downstream",
            *_SWEEP[:-4],
            "--resolution",
            "20,16",
            "--log-with",
            "none",
            "--tasks",
            f"my={tmp / 'ct'}:2",
            "--out",
            str(tmp / "sw"),
        )
    _sweep(tmp, f"my={tmp / 'ct'}:2", "sw", "--micro-batch", "2")


# ------------------------------------------------------------------------------ A26-18 / A26-19: K above the labels
@bad_input(
    "downstream",
    "harness downstream and harness fewshot of the custom task my=ct:5 whose lists hold labels 0 and 1 only (audit26 "
    "A26-18: downstream rc 0, a 5-way head scored; A26-19: fewshot blamed --shots)",
    click.ClickException,
    r"^.*custom task 'my=.*ct:5' says K=5 classes, but the labels of its lists \(train800\.txt, val200\.txt, "
    r"train800val200\.txt, test\.txt\) run only up to 1: classes 2 to 4 have no example in any split.*K is the "
    r"largest label \+ 1: give my=.*ct:2$",
)
def _custom_k_above_labels(tmp):
    import pytest

    _custom_task(tmp / "ct")
    with pytest.raises(
        click.ClickException,
        match=r"'my=.*ct:3:no-flip' says K=3 .*: class 2 has no example.*"
        r"give my=.*ct:2:no-flip$",
    ):
        _cli(
            "fewshot",
            "--model",
            "timm:resnet10t",
            "--random-init",
            "--tasks",
            f"my={tmp / 'ct'}:3:no-flip",
            "--shots",
            "1",
            "--resolution",
            "16",
            "--log-with",
            "none",
            "--out",
            str(tmp / "fs"),
        )
    assert not (tmp / "fs").exists()
    _sweep(tmp, f"my={tmp / 'ct'}:5", "sw")


# ------------------------------------------------------------------------------ A26-08: an ensemble of other images
@bad_input(
    "downstream",
    "harness ensemble -m of two sweeps of the custom task my, one over ct, one over ct2 (the same lists over other "
    "images) (audit26 A26-08: rc 0, their test predictions averaged example by example)",
    click.ClickException,
    r"^.*task my: sweeps .*sa and .*sb fine-tuned and scored it on other data \(folder: .*ct in .*sa/sweep\.json, "
    r".*ct2 in .*sb/sweep\.json\).*transfer every upstream model to the same task folder and lists",
)
def _ensemble_of_other_task_images(tmp):
    import numpy as np
    from PIL import Image

    _custom_task(tmp / "ct")
    shutil.copytree(tmp / "ct", tmp / "ct2")
    for i, image in enumerate(sorted((tmp / "ct2" / "img").iterdir())):
        pixels = np.random.default_rng(1000 + i).integers(0, 255, (16, 16, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(image)
    _sweep(tmp, f"my={tmp / 'ct'}:2", "sa")
    _sweep(tmp, f"my={tmp / 'ct2'}:2", "sb")
    _cli("ensemble", "-m", str(tmp / "sa"), str(tmp / "sb"), "--out", str(tmp / "ens"))


# ------------------------------------------------------------------------------ A26-02: another model's study
@bad_input(
    "downstream",
    "harness fewshot --model b/model.pt into the --out of a study of a/model.pt (audit26 A26-02: 'the model.pt was "
    "replaced or trained again', a's digest called b's)",
    click.ClickException,
    r"^.*fs holds the few-shot results of another model \(the model: '.*a/model\.pt' there \(weights digest "
    r"\w{12}\.\.\.\), '.*b/model\.pt' now \(\w{12}\.\.\.\)\): they would be replaced; give another --out, or "
    r"--overwrite",
)
def _fewshot_of_another_model(tmp):
    _custom_task(tmp / "ct")
    _digits_run(tmp, tmp / "a", 1)
    _digits_run(tmp, tmp / "b", 2)
    for model in ("a", "b"):
        _cli(
            "fewshot",
            "--model",
            str(tmp / model / "model.pt"),
            "--tasks",
            f"my={tmp / 'ct'}:2",
            "--shots",
            "1",
            "--resolution",
            "16",
            "--log-with",
            "none",
            "--out",
            str(tmp / "fs"),
        )
