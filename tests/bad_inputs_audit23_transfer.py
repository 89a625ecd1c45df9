"""Bad inputs found by the twenty-third reliability audit in the transfer stages and the run-folder rules they read
(``audit23 <case id>``): a run's model.pt named through a symbolic link, a run's model.pt checked for the options of
a head the transfer drops, an imported run's replaced model.pt, a few-shot study whose model changed, an import's
relative data path, a manifest-trained model's training images in a task's lists, and the upstream few-shot
monitor's tasks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import click
from bad_inputs_audit22_runs import _image_folder_run

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

_SWEEP = ("--preset", "demo", "--lrs", "0.01", "--steps", "5", "--seeds", "1", "--log-with", "none")


def _fewshot(model: str, task: str, out: str) -> None:
    _cli("fewshot", "--model", model, "--tasks", task, "--shots", "1", "--log-with", "none", "--out", out)


def _other_weights(src: Path, dest: Path) -> None:
    """``dest``: the model of ``src`` with its first weight tensor changed (another model of the same run's form)."""
    import torch

    from harness.models import load_model, save_model

    model = load_model(src)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    save_model(model, dest)


# ------------------------------------------------------------------------------ A23-10: a link to a run's model.pt
@bad_input(
    "downstream",
    "harness fewshot --model imf.pt, a symbolic link to runs/imf/model.pt, with a task whose test list names "
    "runs/imf's training images; harness import --model imf.pt on imf's train split; harness downstream --upstream "
    "bz.pt, a link to a run's replaced model.pt (audit23 A23-10: through the link, rc 0 each: the run-folder rules "
    "were skipped)",
    click.ClickException,
    r"^.*bz/model\.pt is not the model the run's metrics\.json and predictions measured \(its weights' digest is "
    r"\w+\.\.\., metrics\.json records \w+\.\.\.\)",
)
def _link_to_run_model(tmp):
    import pytest

    run = _image_folder_run(tmp)
    os.symlink(run / "model.pt", tmp / "imf.pt")
    task = f"mytask={tmp / 'imf'}:2"
    with pytest.raises(click.ClickException, match=r"imf/test\.txt line 1 names 'train/a/0\.png', an image the model"):
        _fewshot(str(tmp / "imf.pt"), task, str(tmp / "fs"))
    (tmp / "eimtr.yaml").write_text(
        f"data: {{source: image_folder, path: {tmp / 'imf'}, eval_split: train, heldout_split: null, "
        "image_size: 16, eval_resize: 16}\n"
    )
    with pytest.raises(click.ClickException, match=r"was trained on the train split of image_folder"):
        _cli("import", "--model", str(tmp / "imf.pt"), "--data", str(tmp / "eimtr.yaml"), "--out", str(tmp / "imp"))
    assert not (tmp / "fs").exists() and not (tmp / "imp").exists()
    shutil.copytree(run, tmp / "runs" / "bz", ignore=shutil.ignore_patterns(".lock"))
    _other_weights(run / "model.pt", tmp / "runs" / "bz" / "model.pt")
    os.symlink(tmp / "runs" / "bz" / "model.pt", tmp / "bz.pt")
    _cli("downstream", "--upstream", str(tmp / "bz.pt"), "--tasks", "demo_digit", *_SWEEP, "--out", str(tmp / "sw"))
