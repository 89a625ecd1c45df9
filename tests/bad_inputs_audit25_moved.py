"""Bad inputs found by the twenty-fifth reliability audit in moved folders, stored OOD sets and exports
(``audit25 <case id>``): a moved project's ensemble and import folders, ``harness moved-data`` given a folder it does
not handle, an OOD set stored under its spec's text, and a run's model.pt re-saved with other preprocessing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import click
from bad_inputs_audit22_runs import _image_folder_run

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------------ A25-10: other preprocessing
@bad_input(
    "export",
    "harness.runs.export_run of a run whose model.pt was re-saved (a user's script) with the same weights and other "
    "input preprocessing (ImageNet's mean / std) (audit25 A25-10: rc 0, the export's card stated the run's metrics, "
    "measured with the harness's own normalisation)",
    ValueError,
    r"^runs/imf/model\.pt normalises its input otherwise than the model the run's metrics\.json and predictions "
    r"measured \(its config's preprocessing: mean None -> \[0\.485, 0\.456, 0\.406\], std None -> "
    r"\[0\.229, 0\.224, 0\.225\]; audit25 A25-10\): its metrics do not hold for it; put the run's own model\.pt back, "
    r"or save it again with the preprocessing it was measured with \(model\.config\.preprocessing = \{\}\), or train "
    r"the run again \(harness upstream with its config\.yaml\)$",
)
def _resaved_preprocessing(tmp):
    import torch

    from harness.models import load_model, save_model
    from harness.runs import export_run

    _image_folder_run(tmp)
    extra = torch.load(tmp / "runs/imf/model.pt", weights_only=True)["extra"]
    model = load_model(tmp / "runs/imf/model.pt")
    model.config.preprocessing.update({"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]})
    save_model(model, tmp / "runs/imf/model.pt", extra=extra)
    export_run("runs/imf", tmp / "ex")


# ------------------------------------------------------------------------------ A25-06: a stored OOD set's images
def _ood_images(folder: Path, seed: int) -> None:
    """``folder/test/{a,b}/{0..3}.png``: 16x16 random images of ``seed`` (written over any there)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c in "ab":
        (folder / "test" / c).mkdir(parents=True, exist_ok=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(folder / "test" / c / f"{i}.png")


def _shift_far(run: str) -> "tuple[str, Any]":
    """``harness shift -m RUN --corruptions none --ood far:source=image_folder,path=oodf,split=test``: ``(what it
    printed, the stored far set's logits)``."""
    import contextlib
    import io

    from harness.shift.store import load_set

    said = io.StringIO()
    with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
        _cli("shift", "-m", run, "--corruptions", "none", "--ood", "far:source=image_folder,path=oodf,split=test")
    return said.getvalue(), load_set(Path(run) / "shift" / "ood-far")[0].logits.copy()


@handled(
    "shift",
    "harness shift --ood far:source=image_folder,path=oodf,split=test of a run, again after oodf's images were "
    "replaced, and again from another working folder whose oodf holds other images (audit25 A25-06: rc 0, the stored "
    "set of the first images reused by the text of its spec, its AUROC reported for the new ones)",
    r"^ood-far: the files of \S+/oodf/test changed since its stored set was predicted: predicting it again; "
    r"ood-far: its spec now names \S+/other/oodf/test, its stored set was of \S+/oodf/test: predicting it again$",
)
def _ood_set_of_other_images(tmp):
    import numpy as np

    _image_folder_run(tmp)
    _ood_images(tmp / "oodf", 1)
    _, first = _shift_far("runs/imf")
    _ood_images(tmp / "oodf", 2)  # the same names, other images
    said, replaced = _shift_far("runs/imf")
    assert not np.allclose(first, replaced), "the stored set of the earlier images was reused"
    _, again = _shift_far("runs/imf")
    assert np.array_equal(again, replaced)  # unchanged images: the stored set is kept
    (tmp / "other").mkdir()
    os.chdir(tmp / "other")
    _ood_images(tmp / "other" / "oodf", 3)
    said2, other = _shift_far("../runs/imf")
    assert not np.allclose(other, replaced), "the stored set of another folder's images was reused"
    lines = [line.split(": ", 1)[1] for line in (said + said2).splitlines() if "predicting it again" in line]
    return "; ".join(lines)


# ------------------------------------------------------------------------------ A25-02/05/07: a moved project
_EV = "data: {source: image_folder, path: imf, eval_split: test, heldout_split: val, image_size: 16, eval_resize: 16}\n"


def _moved_project(tmp: Path) -> None:
    """``tmp/proj``: image folders ``imf``, runs ``runs/p0`` and ``runs/p1`` trained on ``data.path=imf`` (relative),
    their ensemble ``ens`` and an import ``imp`` of ``runs/p0/model.pt`` evaluated on ``imf``, made from ``proj``; then
    ``proj`` renamed ``proj3``, the working folder."""
    import shutil

    from bad_inputs_audit9_config import CONFIGS
    from bad_inputs_audit24_paths import _TINY, _manifest_of_images

    _manifest_of_images(tmp)
    (tmp / "proj").mkdir()
    shutil.move(str(tmp / "imf"), str(tmp / "proj" / "imf"))
    os.chdir(tmp / "proj")
    config = ("--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "data.source=image_folder")
    data = ("data.path=imf", "data.train_split=train", "data.eval_split=test", "data.heldout_split=val", *_TINY)
    for seed in (0, 1):
        _cli("upstream", *config, *data, "data.label_noise.kind=none", f"seed={seed}", f"output_dir=runs/p{seed}")
    _cli("ensemble", "-m", "runs/p0", "runs/p1", "--out", "ens")
    (tmp / "proj" / "ev.yaml").write_text(_EV)
    _cli("import", "--model", "runs/p0/model.pt", "--data", "ev.yaml", "--out", "imp")
    os.chdir(tmp)
    shutil.move(str(tmp / "proj"), str(tmp / "proj3"))
    os.chdir(tmp / "proj3")


@bad_input(
    "report",
    "harness report ens and harness shift -m ens of an ensemble of runs/p0 and runs/p1 after the project folder proj "
    "(runs, ensemble and data) was renamed proj3 (audit25 A25-02: ''/.../proj/runs/p0' is not a run folder (no "
    "config.yaml); pass the folder that harness upstream wrote', a folder the user never gave)",
    click.ClickException,
    r"^ens's member .*/proj/runs/p0 \(as its ens/ensemble\.json records it: members\) no longer exists; "
    r".*/proj3/runs/p0 holds its model \(the weights ens/ensemble\.json records for it\): if the project folder moved "
    r"with its runs, record their new places \(harness moved-data ens, which rewrites ens/ensemble\.json's members\) "
    r"and run again; else put the member back at .*/proj/runs/p0$",
)
def _moved_ensemble(tmp):
    import pytest

    _moved_project(tmp)
    with pytest.raises(click.ClickException, match=r"^ens's member .*/proj/runs/p0 .* \(harness moved-data ens, "):
        _cli("shift", "-m", "ens", "--corruptions", "none", "--ood", "gaussian")
    shutil.copytree("ens", "ens2")
    _cli("moved-data", "ens2", "runs/p0", "runs/p1")  # the fix as given
    spec = json.loads(Path("ens2/ensemble.json").read_text())
    assert spec["members"] == [str(tmp / "proj3" / "runs" / p) for p in ("p0", "p1")], spec["members"]
    _cli("report", "ens2", "--no-shift", "--name", "r2")
    _cli("report", "ens", "--no-shift", "--name", "r1")


@bad_input(
    "report",
    "harness report imp of an import (harness import --model runs/p0/model.pt --data ev.yaml, data.path=imf) after "
    "the project folder proj was renamed proj3 (audit25 A25-05: 'imp was trained on data.path=imf', of an import's "
    "evaluation data; python -m harness.moved_data named as the fix, no harness command, and the model it imported "
    "left recorded at the old place)",
    click.ClickException,
    r"^imp \(an import: harness import's folder\) was evaluated on data\.path=imf = .*/proj/imf \(as its imp/run\.json "
    r"records it: data_path\), which no longer exists; .* record the new place \(harness moved-data imp, which "
    r"rewrites imp/run\.json's data_path to .*/proj3/imf\) and run again; else put the data back at .*/proj/imf$",
)
def _moved_import(tmp):
    import yaml

    _moved_project(tmp)
    shutil.copytree("imp", "imp2")
    _cli("moved-data", "imp2")  # the fix as given
    imported = yaml.safe_load(Path("imp2/config.yaml").read_text())["imported"]
    assert imported["source_absolute"] == str(tmp / "proj3" / "runs" / "p0" / "model.pt"), imported
    _cli("report", "imp2", "--no-shift", "--name", "r2")
    _cli("report", "imp", "--no-shift", "--name", "r1")


@bad_input(
    "report",
    "harness moved-data (and python -m harness.moved_data) given a folder it does not handle: an ensemble file, a "
    "missing folder, an export, a downstream sweep, a folder of no harness command, a run whose data did not move, "
    "and a run of digits (no data.path) (audit25 A25-07: an errno ('No such file or directory: .../config.yaml'), or "
    "'... None is None')",
    click.ClickException,
    r"^runs/dg: its data did not move \(its config\.yaml names no data\.path \(data\.source=digits\): no folder of the "
    r"project\): nothing to record; run harness moved-data from the moved project's folder \(the one its data\.path "
    r"is relative to\), for a run whose data folder moved with it$",
)
def _moved_data_of_other_folders(tmp):
    import pytest

    from harness.moved_data import main

    run = _image_folder_run(tmp)
    (tmp / "ex").mkdir()
    for f in ("config.json", "model.safetensors"):
        (tmp / "ex" / f).write_text("{}")
    (tmp / "sw").mkdir()
    (tmp / "sw" / "sweep.json").write_text("{}")
    (tmp / "mine").mkdir()
    refusals = {
        str(run / "run.json"): r"run\.json is a file: harness moved-data takes a moved project's run, import or",
        "nowhere": r"^nowhere does not exist: harness moved-data takes",
        "ex": r"^ex is an export \(save_pretrained's folder\), which records no data folder .*: nothing to record",
        "sw": r"^sw is a downstream sweep .*: run the sweep again from the moved project into a new folder",
        "mine": r"^mine is no harness run, import or ensemble folder \(no config\.yaml beside run\.json or model\.pt",
        str(run): r"its data did not move \(its data\.path .*/imf is absolute, read where it is from any folder\)",
    }
    for folder, said in refusals.items():
        with pytest.raises(click.ClickException, match=said):
            _cli("moved-data", folder)
        assert main([folder]) == 1
    (tmp / "runs" / "dg").mkdir()
    (tmp / "runs" / "dg" / "config.yaml").write_text("data: {source: digits}\n")
    (tmp / "runs" / "dg" / "run.json").write_text("{}")
    _cli("moved-data", "runs/dg")
