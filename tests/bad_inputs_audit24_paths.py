"""Bad inputs found by the twenty-fourth reliability audit in the paths a run folder records (``audit24 <case id>``):
an import's source read from another working folder, a writer's output folder among a manifest's images, and a run
whose project folder moved."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import click
from bad_inputs_audit9_config import CONFIGS
from bad_inputs_audit22_runs import _image_folder_run
from bad_inputs_audit23_transfer import _fewshot, _other_weights

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

_SWEEP = ("--preset", "demo", "--lrs", "0.01", "--steps", "5", "--seeds", "1", "--log-with", "none")
_TINY = ("data.batch_size=4", "train.epochs=1", "train.log_with=[]", "data.image_size=16", "data.eval_resize=16")
_EIMTV = (
    "data: {source: image_folder, path: imf, eval_split: test, heldout_split: val, image_size: 16, eval_resize: 16}\n"
)


# ------------------------------------------------------------------------------ A24-07: an import's source
@bad_input(
    "import",
    "harness import --model runs/imf/model.pt (relative) --out impte, then from another working folder harness "
    "fewshot --model ../impte/model.pt and harness downstream --upstream of it with a task listing runs/imf's "
    "training images, and harness import of it on imf's train split (audit24 A24-07: rc 0 each, the import's source "
    "run looked up from the working folder, so its training data was unknown); A23-14's fix from there works",
    click.ClickException,
    r"^.*imf/test\.txt line 1 names 'train/a/0\.png', an image the model --model \.\./impte/model\.pt was trained on "
    r"\(data\.train_split=train of image_folder at .*imf/train \(as its run's .*runs/imf/config\.yaml records\)\)",
)
def _import_source_from_elsewhere(tmp):
    import re

    import pytest
    import yaml

    _image_folder_run(tmp)
    (tmp / "eimtv.yaml").write_text(_EIMTV)
    _cli("import", "--model", "runs/imf/model.pt", "--data", "eimtv.yaml", "--out", "impte")
    record = yaml.safe_load((tmp / "impte" / "config.yaml").read_text())["imported"]
    assert record["source"] == "runs/imf/model.pt" and record["source_absolute"] == str(tmp / "runs/imf/model.pt")
    shutil.copytree(tmp / "impte", tmp / "impold", ignore=shutil.ignore_patterns(".lock"))  # an import made before
    cfg = yaml.safe_load((tmp / "impold" / "config.yaml").read_text())
    del cfg["imported"]["source_absolute"]
    (tmp / "impold" / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(click.ClickException, match=r"imf/test\.txt line 1 names 'train/a/0\.png'"):
        _fewshot("impold/model.pt", "mytask=imf:2", "fsold")  # from its folder, as before
    shutil.copytree(tmp / "impte", tmp / "impx", ignore=shutil.ignore_patterns(".lock"))
    _other_weights(tmp / "runs/imf/model.pt", tmp / "impx" / "model.pt")
    (tmp / "other").mkdir()
    os.chdir(tmp / "other")
    (tmp / "other" / "eimtr2.yaml").write_text(_EIMTV.replace("imf", "../imf").replace("test,", "train,"))
    with pytest.raises(click.ClickException, match=r"impte/model\.pt was trained on the train split of image_folder"):
        _cli("import", "--model", "../impte/model.pt", "--data", "eimtr2.yaml", "--out", "../impx2")
    with pytest.raises(click.ClickException, match=r"--upstream \.\./impte/model\.pt was trained on"):
        _cli("downstream", "--upstream", "../impte/model.pt", "--tasks", "mytask=../imf:2", *_SWEEP, "--out", "sw")
    with pytest.raises(click.ClickException, match=r"impx/model\.pt is not the model") as refused:
        _cli("shift", "-m", "../impx", "--corruptions", "gaussian_noise", "--severities", "1", "--ood", "none")
    advised = re.search(r"(harness import --model .*) --out NEW_FOLDER", str(refused.value)).group(1).split()
    assert advised[3].startswith("/"), advised  # the source as recorded, absolute
    _cli(*advised[1:], "--out", "again")  # A23-14's fix, given from this folder, works here
    assert (tmp / "other" / "again" / "metrics.json").is_file()
    _fewshot("../impte/model.pt", "mytask=../imf:2", "fsimp2")


# ------------------------------------------------------------------------------ A24-08: a manifest's image folders
def _manifest_of_images(tmp: Path) -> None:
    """``tmp/imf/{train,val,test}/{a,b}/*.png`` (6 16x16 images each) and ``tmp/man/<split>.jsonl`` listing them
    (absolute paths), as A24-08's reproduction (no run trained)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    (tmp / "man").mkdir()
    for split in ("train", "val", "test"):
        lines = []
        for k, c in enumerate("ab"):
            (tmp / "imf" / split / c).mkdir(parents=True)
            for i in range(6):
                image = tmp / "imf" / split / c / f"{i}.png"
                Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(image)
                lines.append(json.dumps({"path": str(image), "labels": [k]}))
        (tmp / "man" / f"{split}.jsonl").write_text("\n".join(lines) + "\n")


@bad_input(
    "data",
    "harness data pack manifest imf/train/pk of man/train.jsonl (listing imf/train's images), harness upstream "
    "output_dir=imf/test/rm and a report's --out-root imf/val of a manifest run (audit24 A24-08: rc 0, a pack, a run "
    "folder and a report written among the class folders of the images the manifest lists; an image folder's were "
    "refused)",
    click.ClickException,
    r"^OUT imf/train/pk \(its split folder imf/train/pk/train\) is inside a folder of the images the data lists "
    r"\(data\.path=man: .*man/train\.jsonl line 1 names an image in its folder a\) imf/train, which would then hold "
    r"harness data pack's files beside its own .*: give OUT a folder outside imf/train$",
)
def _output_among_manifest_images(tmp):
    import pytest

    from harness.ensemble_folder import data_folders

    _manifest_of_images(tmp)
    data = ["data.source=manifest", "data.path=man", "data.train_split=train", "data.eval_split=test"]
    keys = [*data, "data.heldout_split=val", "data.num_classes=2", "data.allow_outside_root=true"]
    with pytest.raises(
        click.ClickException, match=r"output_dir=imf/test/rm is inside a folder of the images the data lists"
    ):
        config = ("--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), *keys, *_TINY)
        _cli("upstream", *config, "data.label_noise.kind=none", "output_dir=imf/test/rm")
    (tmp / "runs" / "man").mkdir(parents=True)  # a manifest run's data section, as a report reads it
    (tmp / "runs" / "man" / "config.yaml").write_text(
        "data: {source: manifest, path: man, eval_split: test, heldout_split: val, allow_outside_root: true}\n"
    )
    found = data_folders([tmp / "runs" / "man"])
    assert (tmp / "imf" / "val" / "b").resolve() in found, found
    assert not (tmp / "imf" / "val").exists() or sorted(os.listdir(tmp / "imf" / "val")) == ["a", "b"]
    pack = ("data", "pack", "manifest", "imf/train/pk", "--shard-size", "10", "--split", "train")
    _cli(*pack, "path=man", "num_classes=2", "allow_outside_root=true")


# ------------------------------------------------------------------------------ A24-09: a moved project
@bad_input(
    "report",
    "harness report runs/p1 after the project folder proj (runs/p1 trained on data.path=imf, relative) was moved to "
    "proj3 (audit24 A24-09: 'data.path '/.../proj/imf' does not exist; set data.path ...', a path the user never set "
    "and a fix no key can give)",
    click.ClickException,
    r"^runs/p1 was trained on data\.path=imf = .*/proj/imf \(as its runs/p1/run\.json records it: data_path\), which "
    r"no longer exists; from this working folder \(.*/proj3\) data\.path=imf is .*/proj3/imf, which the harness does "
    r"not read in its place on its own \(it may be other data\): if the project folder moved with its data, record "
    r"the new place \(harness moved-data runs/p1, which rewrites runs/p1/run\.json's data_path to "
    r".*/proj3/imf\) and run again; else put the data back at .*/proj/imf$",
)
def _moved_project(tmp):
    import pytest

    from harness.moved_data import main
    from harness.runs import data_config

    _manifest_of_images(tmp)
    (tmp / "proj").mkdir()
    shutil.move(str(tmp / "imf"), str(tmp / "proj" / "imf"))
    os.chdir(tmp / "proj")
    config = ("--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "data.source=image_folder")
    data = ("data.path=imf", "data.train_split=train", "data.eval_split=test", "data.heldout_split=val", *_TINY)
    _cli("upstream", *config, *data, "data.label_noise.kind=none", "output_dir=runs/p1")
    os.chdir(tmp)
    shutil.move(str(tmp / "proj"), str(tmp / "proj3"))
    os.chdir(tmp / "proj3")
    with pytest.raises(click.ClickException, match=r"runs/p1 was trained on data\.path=imf = .*/proj/imf .*moved-data"):
        _cli("upstream", *config, *data, "data.label_noise.kind=none", "output_dir=runs/p1")  # resumed or skipped
    shutil.copytree("runs/p1", "runs/p1c", ignore=shutil.ignore_patterns(".lock"))
    assert main(["runs/p1c"]) == 0  # the fix as given: the new place recorded
    assert data_config("runs/p1c").path == str(tmp / "proj3" / "imf"), data_config("runs/p1c").path
    assert json.loads(Path("runs/p1c/run.json").read_text())["data_path"]["path"] == "imf"
    _cli("report", "runs/p1", "--no-shift", "--name", "rp")
