"""Bad inputs found by the twenty-fifth reliability audit in what runs and studies record of the data they read
(``audit25 <case id>``): a run's held-out split changed or gone since the run, a missing held-out predictions file,
a few-shot study rerun on other task lists, and a resumed run whose few-shot monitor reads other task data."""

from __future__ import annotations

import json
import shutil

import click

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

_NOISY = ("data.label_noise.kind=symmetric", "data.label_noise.rate=0.3")


def _noisy_imf_run(tmp, out: str = "runs/imf", *more: str) -> None:
    """A one-epoch run of the image folder ``imf`` (train / test / held-out val) with symmetric label noise."""
    from bad_inputs_audit9_config import CONFIGS
    from bad_inputs_audit21_data import _IMF, _image_folder

    if not (tmp / "imf").is_dir():
        _image_folder(tmp / "imf")
    _cli(
        "upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1",
        "train.log_with=[]", "model.backbone=test_resnet", *_NOISY, f"output_dir={out}", *_IMF, *more,
    )  # fmt: skip


_REPORT = ("report", "--no-shift", "--no-covariance", "--name")


# ------------------------------------------------------------------------------ A25-03: a noisy run's held-out changed
@bad_input(
    "report",
    "harness report of an image-folder run trained WITH label noise (symmetric, rate 0.3), after images of its held-out "
    "folder were moved to another class folder (audit25 A25-03: rc 0, the changed labels reported as the run's label "
    "noise; audit24's check covered noiseless runs only)",
    click.ClickException,
    r"^the held-out split of runs/imf \(data\.heldout_split=val of image_folder at data\.path=.*imf/val\)\) changed "
    r"since the run was evaluated on it: it held 6 examples, labels digest \w{12}\.\.\. then \(as runs/imf/metrics\.json "
    r"records it: heldout_labels\) and holds 6 examples, labels digest \w{12}\.\.\. now: .*restore the held-out data as "
    r"it was, or evaluate the run on it as it is now: write its predictions again from its model\.pt without training "
    r"\(.*reevaluate\('runs/imf', force=True\)",
)
def _noisy_heldout_changed(tmp):
    _noisy_imf_run(tmp)
    record = json.loads((tmp / "runs" / "imf" / "metrics.json").read_text())["heldout_labels"]
    assert record["split"] == "val" and record["examples"] == 6 and len(record["labels_sha256"]) == 64, record
    _cli(*_REPORT, "r1", "runs/imf")  # the data as the run read it: reported
    for i in range(2):
        (tmp / "imf" / "val" / "a" / f"{i}.png").rename(tmp / "imf" / "val" / "b" / f"1{i}.png")
    _cli(*_REPORT, "r2", "runs/imf")


@bad_input(
    "report",
    "harness report of a noisy run after its changed held-out folder was re-evaluated "
    "(harness.upstream.reevaluate.reevaluate(RUN, force=True)), then of an ensemble of it after the folder changed "
    "again (audit25 A25-03: the fix the message names records the split anew; an ensemble's held-out labels are "
    "checked against its first member's record)",
    click.ClickException,
    r"^the held-out split of ens/e \(data\.heldout_split=val .*changed since the run was evaluated on it: .*as "
    r".*runs/imf/metrics\.json records it",
)
def _noisy_heldout_reevaluated(tmp):
    from harness.upstream.reevaluate import reevaluate

    _noisy_imf_run(tmp)
    _noisy_imf_run(tmp, "runs/imf1", "seed=1")
    (tmp / "imf" / "val" / "a" / "0.png").rename(tmp / "imf" / "val" / "b" / "10.png")
    for run in ("imf", "imf1"):
        reevaluate(tmp / "runs" / run, force=True)
    _cli(*_REPORT, "r1", "runs/imf")  # evaluated on the folder as it is now: reported
    _cli("ensemble", "-m", "runs/imf", "-m", "runs/imf1", "--out", "ens/e")
    _cli(*_REPORT, "r2", "ens/e")
    (tmp / "imf" / "val" / "b" / "10.png").rename(tmp / "imf" / "val" / "a" / "0.png")
    _cli(*_REPORT, "r3", "ens/e")


# ------------------------------------------------------------------------------ A25-04: heldout_predictions.npz missing
@bad_input(
    "report",
    "harness report (and harness ensemble) of a run evaluated on a held-out split whose heldout_predictions.npz is "
    "missing (audit25 A25-04: rc 0, the report's calibration and temperature-scaling sections dropped without a word, "
    "and the ensemble built without held-out predictions)",
    click.ClickException,
    r"^runs/b/heldout_predictions\.npz is missing, and runs/b is a run evaluated on a held-out split "
    r"\(data\.heldout_split; its metrics\.json records heldout_metrics\): .*restore the file, or write its predictions "
    r"again from its model\.pt without training \(.*reevaluate\('runs/b', force=True\)",
)
def _heldout_file_missing(tmp):
    import pytest
    from bad_inputs_audit21_data import _train

    _train("runs/a", "data.limit_train=64", "data.limit_eval=32")
    _train("runs/b", "data.limit_train=64", "data.limit_eval=32", "seed=1")
    _train("runs/n", "data.limit_train=64", "data.limit_eval=32", "data.heldout_split=null")
    _cli(*_REPORT, "rn", "runs/n")  # no held-out split: no file, legitimately
    (tmp / "runs" / "b" / "heldout_predictions.npz").unlink()
    with pytest.raises(click.ClickException, match=r"runs/b/heldout_predictions\.npz is missing"):
        _cli("ensemble", "-m", "runs/a", "-m", "runs/b", "--out", "ens/ab")
    assert not (tmp / "ens" / "ab" / "ensemble.json").exists()
    _cli(*_REPORT, "rb", "runs/b")


# ------------------------------------------------------------------------------ A25-13: the held-out folder gone
@bad_input(
    "report",
    "harness report of an image-folder run whose held-out folder imf/val was deleted (audit25 A25-13: 'no split "
    "folder .../imf/val; expected <data.path>/<split>/<class>/...', naming neither the run nor a fix)",
    click.ClickException,
    r"^the held-out split of runs/imf \(data\.heldout_split=val of image_folder at data\.path=.*imf \(.*imf/val\), "
    r"as the run's data section sets them\) cannot be read \(no split folder .*\): .*put the held-out data back "
    r"where data\.path and data\.heldout_split name it, or, if the project moved with its data, record its new place "
    r"\(.*moved.data runs/imf",
)
def _heldout_folder_gone(tmp):
    _noisy_imf_run(tmp)
    shutil.rmtree(tmp / "imf" / "val")
    _cli(*_REPORT, "r1", "runs/imf")


# ------------------------------------------------------------------------------ A25-12: a resumed monitor's other tasks
@bad_input(
    "upstream",
    "harness upstream resuming a run whose few-shot monitor reads the custom task mytask=ptc:2 after ptc/test.txt was "
    "re-cut, and from another working folder whose ptc holds other lists (audit25 A25-12: rc 0, fewshot.jsonl joined "
    "the two task folders' accuracies as one curve)",
    ValueError,
    r"^.*runs/mon holds a run whose few-shot monitor \(train\.fewshot_tasks\) read other task data: task mytask's "
    r"folder is now .*other/ptc, its .*runs/mon/run\.json \(fewshot_task_data\) records .*/ptc; .*resume it from the "
    r"working folder it started in with the task data as it was, or give another output_dir",
)
def _monitor_of_other_tasks(tmp):
    import os

    import pytest
    from bad_inputs_audit23_lead import _custom_task
    from bad_inputs_audit23_runs import _train

    _custom_task(tmp / "ptc")
    run = tmp / "runs" / "mon"
    settings = [
        "train.epochs=2", "train.checkpoint_every=1", "train.fewshot_every=1", "train.fewshot_tasks=[mytask=ptc:2]",
        "train.fewshot_shots=[1]", "data.image_size=16", "data.eval_resize=16",
    ]  # fmt: skip
    _train(run, settings, stop_after_steps=2)
    recorded = json.loads((run / "run.json").read_text())["fewshot_task_data"]["mytask"]
    assert recorded["folder"] == str((tmp / "ptc").resolve()) and len(recorded["lists"]) == 4, recorded
    lines = (tmp / "ptc" / "test.txt").read_text().splitlines()
    (tmp / "ptc" / "test.txt").write_text("\n".join(lines[:3]) + "\n")  # the test list re-cut
    with pytest.raises(ValueError, match=r"task mytask's .*ptc/test\.txt changed since the run started"):
        _train(run, settings)
    (tmp / "ptc" / "test.txt").write_text("\n".join(lines) + "\n")  # as it was
    shutil.copytree(tmp / "ptc", tmp / "other" / "ptc")
    (tmp / "other" / "ptc" / "test.txt").write_text("\n".join(lines[:4]) + "\n")
    os.chdir(tmp / "other")  # the same spelling, ptc, names other/ptc from here
    try:
        _train(run, settings)
    finally:
        os.chdir(tmp)


# ------------------------------------------------------------------------------ A25-08: fewshot on other task lists
@bad_input(
    "downstream",
    "harness fewshot --tasks mytask=ptc:2 --out fs again after ptc/test.txt was re-cut, and from another working "
    "folder whose ptc holds other lists (audit25 A25-08: rc 0, the earlier lists' results replaced without "
    "--overwrite; fewshot.json recorded only the data format and --data-dir)",
    click.ClickException,
    r"^.*fs holds the few-shot results of other task data \(task mytask's folder is now .*other/ptc, its "
    r"fewshot\.json records .*/ptc\): this study would replace them; give it another --out, or --overwrite",
)
def _fewshot_of_changed_lists(tmp):
    import os

    import pytest
    from bad_inputs_audit23_lead import _custom_task

    _custom_task(tmp / "ptc")

    def fewshot(*more):
        args = ("--model", "timm:resnet10t", "--random-init", "--shots", "1", "--log-with", "none")
        _cli("fewshot", *args, "--tasks", "mytask=ptc:2", "--out", str(tmp / "fs"), *more)

    fewshot()
    recorded = json.loads((tmp / "fs" / "fewshot.json").read_text())["task_lists"]["mytask"]
    assert recorded["folder"] == str((tmp / "ptc").resolve()) and len(recorded["lists"]) == 4, recorded
    fewshot()  # the same study again: a rerun, replaced
    lines = (tmp / "ptc" / "test.txt").read_text().splitlines()
    (tmp / "ptc" / "test.txt").write_text("\n".join(lines[:3]) + "\n")  # the test list re-cut
    with pytest.raises(click.ClickException, match=r"task mytask's .*ptc/test\.txt changed since the study ran"):
        fewshot()
    assert json.loads((tmp / "fs" / "fewshot.json").read_text())["task_lists"]["mytask"] == recorded  # kept
    (tmp / "ptc" / "test.txt").write_text("\n".join(lines) + "\n")  # as it was: a rerun again
    fewshot()
    shutil.copytree(tmp / "ptc", tmp / "other" / "ptc")
    (tmp / "other" / "ptc" / "test.txt").write_text("\n".join(lines[:4]) + "\n")
    os.chdir(tmp / "other")  # the same spelling, ptc, names other/ptc from here
    try:
        fewshot()
    finally:
        os.chdir(tmp)
