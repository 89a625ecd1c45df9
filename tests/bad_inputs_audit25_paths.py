"""Bad inputs found by the twenty-fifth reliability audit in paths and data identity (``audit25 <case id>``): an
output folder written into the data a model was trained on, hard-linked splits, and a data pack rerun over changed
images."""

from __future__ import annotations

import os
from pathlib import Path

import click
from bad_inputs_audit22_runs import _image_folder_run

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

_SWEEP = ("--preset", "demo", "--lrs", "0.01", "--steps", "5", "--seeds", "1", "--log-with", "none")


def _own_task(tmp: Path) -> None:
    """``tmp/task``: a custom task's lists over ``imf/val`` (train800val200) and ``imf/test`` (test), images the run
    ``runs/imf`` (:func:`_image_folder_run`) did not train on."""

    def listed(split: str, idx: range) -> str:
        return "".join(f"../imf/{split}/{c}/{i}.png {k}\n" for k, c in enumerate("ab") for i in idx)

    (tmp / "task").mkdir()
    lists = {
        "train800": listed("val", range(3)),
        "val200": listed("val", range(3, 6)),
        "test": listed("test", range(6)),
    }
    for name, text in {**lists, "train800val200": listed("val", range(6))}.items():
        (tmp / "task" / f"{name}.txt").write_text(text)


# ------------------------------------------------------------------------------ A25-01: the model's own data
@bad_input(
    "fewshot",
    "harness fewshot --model runs/imf/model.pt --out imf/train/fs, harness downstream --upstream of it --out "
    "imf/train/sw, harness import --model of it --out imf/train/imp, export_run(runs/imf, imf/test/exp) and harness "
    "report of the import with --out-root imf/train: output folders inside the split folders of the image folder the "
    "model was trained on (audit25 A25-01: rc 0, a sweep, a few-shot result and an import written as class folders of "
    "the model's training split; only the tasks' folders were refused)",
    click.ClickException,
    r"^--out imf/train/fs is inside the data's train split \(data\.path=.*imf\) of the run the model --model "
    r"runs/imf/model\.pt was trained in \(as its run's runs/imf/config\.yaml records\): imf/train, which would then "
    r"hold harness fewshot's files beside its own .*: give --out a folder outside it, e\.g\. imf/fs$",
)
def _out_in_model_data(tmp):
    import pytest

    from harness.runs import export_run

    _image_folder_run(tmp)
    _own_task(tmp)
    (tmp / "ev.yaml").write_text("data: {source: image_folder, path: imf, eval_split: val, image_size: 16}\n")
    with pytest.raises(click.ClickException, match=r"--out imf/train/imp is inside the data's train split"):
        _cli("import", "--model", "runs/imf/model.pt", "--data", "ev.yaml", "--out", "imf/train/imp")
    _cli("import", "--model", "runs/imf/model.pt", "--data", "ev.yaml", "--out", "imp")  # outside: taken
    with pytest.raises(click.ClickException, match=r"--out imf/test/sw is inside the data's test split .* --upstream"):
        _cli("downstream", "--upstream", "imp/model.pt", "--tasks", "t=task:2", *_SWEEP, "--out", "imf/test/sw")
    with pytest.raises(ValueError, match=r"out=imf/test/exp is inside the data's test split .* the model imp was"):
        export_run("imp", "imf/test/exp")
    assert sorted(os.listdir(tmp / "imf" / "train")) == ["a", "b"]
    assert sorted(os.listdir(tmp / "imf" / "test")) == ["a", "b"]
    _cli("fewshot", "--model", "runs/imf/model.pt", "--tasks", "t=task:2", "--shots", "1", "--log-with", "none",
         "--out", "imf/train/fs")  # fmt: skip
