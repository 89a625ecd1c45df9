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
    "harness fewshot --model runs/imf/model.pt --out imf/train/fs, harness import --model of it --out imf/train/imp, "
    "harness downstream --upstream of that import --out imf/test/sw and export_run(runs/imf, imf/test/exp): output "
    "folders inside the split folders of the image folder the model was trained on (audit25 A25-01: rc 0, a sweep, a "
    "few-shot result and an import written as class folders of the model's data; only the tasks' folders were refused)",
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
    with pytest.raises(ValueError, match=r"out=imf/test/exp is inside the data's test split \(data\.path=.*imf\) "):
        export_run("runs/imf", "imf/test/exp")
    assert sorted(os.listdir(tmp / "imf" / "train")) == ["a", "b"]
    assert sorted(os.listdir(tmp / "imf" / "test")) == ["a", "b"]
    _cli("fewshot", "--model", "runs/imf/model.pt", "--tasks", "t=task:2", "--shots", "1", "--log-with", "none",
         "--out", "imf/train/fs")  # fmt: skip


# ------------------------------------------------------------------------------ A25-09: hard links
def _three_splits(tmp: Path) -> None:
    """``tmp/imf/{train,val,test}/{a,b}/{0,1,2}.png`` (16x16 random images), ``imf/test/a/0.png`` a hard link of
    ``imf/train/a/0.png``."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val", "test"):
        for c in "ab":
            (tmp / "imf" / split / c).mkdir(parents=True)
            for i in range(3):
                image = tmp / "imf" / split / c / f"{i}.png"
                Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(image)
    os.remove(tmp / "imf" / "test" / "a" / "0.png")
    os.link(tmp / "imf" / "train" / "a" / "0.png", tmp / "imf" / "test" / "a" / "0.png")


@bad_input(
    "data",
    "harness upstream data.path=imf whose test/a/0.png is a hard link of train/a/0.png, and a custom task whose "
    "test.txt lists a hard link of an image its train800.txt lists (audit25 A25-09: rc 0, the splits compared by their "
    "paths, resolved, so a hard link, a file by another name, passed as another image)",
    click.ClickException,
    r"^data\.eval_split=test shares images with data\.train_split=train \(data\.eval_split reads .*imf/test; "
    r"data\.train_split reads .*imf/train\): the model would be scored on the images it was trained on .*"
    r"\(symbolic or hard links\)",
)
def _hard_linked_splits(tmp):
    import pytest
    from bad_inputs_audit9_config import CONFIGS

    _three_splits(tmp)
    (tmp / "task").mkdir()
    lists = {
        "train800": "../imf/train/a/0.png 0\n",
        "val200": "../imf/val/a/0.png 0\n",
        "test": "../imf/test/a/0.png 0\n",
    }
    for name, text in {**lists, "train800val200": lists["train800"] + lists["val200"]}.items():
        (tmp / "task" / f"{name}.txt").write_text(text)
    with pytest.raises(click.ClickException, match=r"task/test\.txt line 1 lists .*, the image task/train800.*\.txt"):
        _cli("fewshot", "--model", "timm:resnet18", "--random-init", "--tasks", "t=task:2", "--shots", "1",
             "--log-with", "none", "--allow-outside-paths", "--out", "fs")  # fmt: skip
    config = (
        "--no-progress",
        "--config",
        str(CONFIGS / "digits_hom.yaml"),
        "data.source=image_folder",
        "data.path=imf",
    )
    data = ("data.train_split=train", "data.eval_split=test", "data.heldout_split=val", "train.epochs=1")
    _cli("upstream", *config, *data, "data.label_noise.kind=none", "data.image_size=16", "output_dir=runs/r")


# ------------------------------------------------------------------------------ A25-11: a pack of changed images
@bad_input(
    "data",
    "harness data pack image_folder pk --split train path=imf run again after imf/train/b/1.png was replaced, and a "
    "pack interrupted after its first shard resumed after an image of that shard was replaced (audit25 A25-11: rc 0, "
    "the earlier pack kept as if it held the data now)",
    click.ClickException,
    r"^pk/train holds a pack whose shard train-00000\d\.tar was written from images that changed since: the image "
    r"imf/train/b/1\.png \(changed after the shard was written\) is no longer what the shard holds .*: pack into a "
    r"new OUT folder, or delete pk/train to pack the data again",
)
def _pack_of_changed_images(tmp):
    import json
    import time

    import numpy as np
    import pytest
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in "ab":
        (tmp / "imf" / "train" / c).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(tmp / "imf/train" / c / f"{i}.png")
    pack = ("data", "pack", "image_folder", "pk", "--shard-size", "3", "--split", "train", "path=imf")
    _cli(*pack[:3], "pr", *pack[4:])  # a resumed pack: its first shard written, then an image of it replaced
    index = json.loads((tmp / "pr/train/index.json").read_text())
    image = (tmp / "imf/train/b/1.png").read_bytes()  # kept as it is in its shard
    first = next(sh["name"] for sh in index["shards"] if image in (tmp / "pr/train" / sh["name"]).read_bytes())
    for sh in index["shards"]:
        if sh["name"] != first:
            (tmp / "pr/train" / sh["name"]).unlink()
    (tmp / "pr/train/index.json").write_text(json.dumps({**index, "complete": False}))
    _cli(*pack)
    time.sleep(0.05)
    Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(tmp / "imf/train/b/1.png")
    with pytest.raises(click.ClickException, match=rf"pr/train holds a pack whose shard {first} was written from"):
        _cli(*pack[:3], "pr", *pack[4:])
    _cli(*pack)


# ------------------------------------------------------------------------------ A25-14: --allow-outside-paths
@bad_input(
    "fewshot",
    "harness fewshot and downstream --tasks t=task:2 --allow-outside-paths, task's lists naming ../imf/val/... and "
    "../imf/test/... (outside the task folder), with --out imf/test/fs (audit25 A25-14: the option that lets a list "
    "read images outside its folder also let the output be written among them: only the task folder was refused)",
    click.ClickException,
    r"^--out imf/test/fs is inside a folder of the images task t reads with --allow-outside-paths \(.*task/test\.txt "
    r"line 1 names an image in its folder a\) imf/test, which would then hold harness fewshot's files beside its own "
    r".*: give --out a folder outside it, e\.g\. imf/fs$",
)
def _outside_paths_out(tmp):
    import pytest
    from bad_inputs_audit24_paths import _manifest_of_images

    _manifest_of_images(tmp)  # imf/{train,val,test}/{a,b}/*.png
    _own_task(tmp)
    refused = r"--out imf/val/a/sw is inside a folder of the images task t reads with --allow-outside-paths"
    with pytest.raises(click.ClickException, match=refused):
        _cli("downstream", "--upstream", "timm:resnet18", "--random-init", "--tasks", "t=task:2", *_SWEEP,
             "--allow-outside-paths", "--out", "imf/val/a/sw")  # fmt: skip
    with pytest.raises(click.ClickException, match=r"path '\.\./imf/val/a/0\.png' leaves the task folder"):
        _cli(
            "fewshot",
            "--model",
            "timm:resnet18",
            "--random-init",
            "--tasks",
            "t=task:2",
            "--shots",
            "1",
            "--log-with",
            "none",
            "--out",
            "imf/test/fs",
        )  # fmt: skip (without the option: the list is refused)
    assert sorted(os.listdir(tmp / "imf" / "test")) == ["a", "b"]
    _cli("fewshot", "--model", "timm:resnet18", "--random-init", "--tasks", "t=task:2", "--shots", "1",
         "--log-with", "none", "--allow-outside-paths", "--out", "imf/test/fs")  # fmt: skip


# ------------------------------------------------------------------------------ a manifest's runs_root message
_MAN = (
    "data.source=manifest, data.path=man, data.train_split=train, data.eval_split=test, data.heldout_split=val, "
    "data.num_classes=2, data.allow_outside_root=true, data.batch_size=4, data.image_size=16, data.eval_resize=16"
)


@bad_input(
    "experiment",
    "harness run with runs_root=imf/val/xr, the experiment's runs reading data.source=manifest data.path=man whose "
    "val.jsonl lists imf/val's images (audit25, a gap the audit named: refused, but the fix said 'a folder outside the "
    "data (data.path=man)', which runs_root already was)",
    ValueError,
    r"^runs_root=imf/val/xr \(experiment cm's folder imf/val/xr/cm\) is inside a folder of the images the data lists "
    r"\(data\.path=man: .*man/val\.jsonl line 1 names an image in its folder a\) imf/val, .*: give runs_root a folder "
    r"outside imf/val and every other folder of the images data\.path=man lists in cm\.yaml, or as runs_root=PATH",
)
def _runs_root_among_manifest_images(tmp):
    from bad_inputs_audit24_paths import _manifest_of_images

    from harness.experiment import load_experiment
    from harness.experiment.validate import validate_experiment

    _manifest_of_images(tmp)
    (tmp / "cm.yaml").write_text(
        f"name: cm\nupstream_overrides: [train.epochs=1, 'train.log_with=[]', model.backbone=test_resnet, {_MAN}]\n"
        "methods: {hom: {covariance: none}}\nseeds: [0]\nensemble_sizes: []\nrecords: false\nworkers: 1\n"
        "downstream: {tasks: []}\n"
    )
    validate_experiment(load_experiment("cm.yaml", ("runs_root=imf/val/xr", "results_root=xres")))


@bad_input(
    "fewshot",
    "harness fewshot --model runs/imf/model.pt --tasks t=task:2, task/test.txt listing img/0.png, a hard link (in the "
    "task folder) of imf/train/a/0.png, an image the model was trained on (audit25 A25-09: rc 0, the transfer rule "
    "compared the list's images with the training split's by path, so the model was scored on its own training image)",
    click.ClickException,
    r"^task/test\.txt line 1 names 'img/0\.png', an image the model --model runs/imf/model\.pt was trained on "
    r"\(data\.train_split=train of image_folder at .*imf/train",
)
def _hard_linked_training_image(tmp):
    _image_folder_run(tmp)
    _own_task(tmp)
    (tmp / "task" / "img").mkdir()
    os.link(tmp / "imf/train/a/0.png", tmp / "task/img/0.png")
    test = (tmp / "task/test.txt").read_text()
    (tmp / "task/test.txt").write_text("img/0.png 0\n" + test.split("\n", 1)[1])
    _cli("fewshot", "--model", "runs/imf/model.pt", "--tasks", "t=task:2", "--shots", "1", "--log-with", "none",
         "--allow-outside-paths", "--out", "fs")  # fmt: skip
