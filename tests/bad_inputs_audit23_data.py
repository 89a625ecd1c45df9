"""Bad inputs found by the twenty-third reliability audit in the data's rules (``audit23 <case id>``): an output
folder written inside the image folder a command reads (harness data pack, harness ensemble), an ensemble's
``--eval-data`` path read against the working folder, and splits compared by the list or folder read rather than the
images it names (a manifest's copied list, class folders linked into the training split)."""

from __future__ import annotations

from bad_inputs_audit9_config import CLI_ERROR
from bad_inputs_audit21_data import _IMF, _VIEW, _image_folder, _train

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------ A23-06: a pack inside the folder it packs
@bad_input(
    "data",
    "harness data pack image_folder imf/train/pk --split train path=imf (audit23 A23-06: rc 0, the pack became a class "
    "folder of the training split it packed, with no image, so every later run on imf was refused)",
    CLI_ERROR,
    r"OUT imf/train/pk \(its split folder imf/train/pk/train\) is inside the data's train split \(data\.path=imf\) "
    r"imf/train, which would then hold harness data pack's files .*give OUT a folder outside imf/train",
)
def _pack_inside_the_split_it_packs(tmp):
    _image_folder(tmp / "imf")
    _cli("data", "pack", "image_folder", "imf/train/pk", "--shard-size", "10", "--split", "train", "path=imf")


@bad_input(
    "data",
    "harness data pack image_folder imfp --split val path=imfp --overwrite: OUT the image folder itself (audit23 "
    "A23-06: the advised --overwrite wrote index.json and the tar shards beside the class folders of the split read)",
    CLI_ERROR,
    r"OUT imfp \(its split folder imfp/val\) is the data's val split \(data\.path=imfp\) imfp/val itself, which would "
    r"then hold harness data pack's files",
)
def _pack_over_the_split_it_packs(tmp):
    _image_folder(tmp / "imfp")
    _cli("data", "pack", "image_folder", "imfp", "--shard-size", "10", "--split", "val", "path=imfp", "--overwrite")


# ------------------------------------------------------------- A23-07: an ensemble inside the data it (or its members) read
def _two_imf_runs(tmp) -> None:
    """``imf`` and two one-epoch runs on it (seeds 0 and 1): ``runs/imf``, ``runs/imf1``."""
    _image_folder(tmp / "imf")
    _train("runs/imf", *_IMF)
    _train("runs/imf1", *_IMF, "seed=1")


@bad_input(
    "ensemble",
    "harness ensemble -m runs/imf -m runs/imf1 --from-checkpoints --eval-data (an image folder imf2, eval_split test) "
    "--out imf2/test/ens (audit23 A23-07: rc 0, the ensemble folder became a class folder of the test split it read)",
    CLI_ERROR,
    r"--out imf2/test/ens is inside the data's test split \(data\.path=imf2, of --eval-data\) imf2/test, which would "
    r"then hold harness ensemble's files",
)
def _ensemble_inside_its_eval_data(tmp):
    _two_imf_runs(tmp)
    _image_folder(tmp / "imf2")
    (tmp / "eimte.yaml").write_text(f"data:\n  source: image_folder\n  path: imf2\n  eval_split: test\n{_VIEW}")
    _cli(
        "ensemble", "-m", "runs/imf", "-m", "runs/imf1", "--from-checkpoints", "--eval-data", "eimte.yaml",
        "--out", "imf2/test/ens",
    )  # fmt: skip


@bad_input(
    "ensemble",
    "harness ensemble -m runs/imf -m runs/imf1 --out imf/val/ens2, and harness report runs/imf --out-root imf/val "
    "(audit23 A23-07: rc 0, a new class folder in the members' held-out split, so every later run on imf was refused)",
    CLI_ERROR,
    r"--out imf/val/ens2 is inside the data's val split \(data\.path=.*imf, read by runs/imf\) imf/val, which would "
    r"then hold harness ensemble's files",
)
def _ensemble_inside_its_members_data(tmp):
    import pytest

    _two_imf_runs(tmp)
    with pytest.raises(
        CLI_ERROR, match=r"report folder imf/val/rep\) is inside the data's val split .*read by runs/imf"
    ):
        _cli("report", "runs/imf", "--no-shift", "--out-root", "imf/val", "--name", "rep")
    _cli("ensemble", "-m", "runs/imf", "-m", "runs/imf1", "--out", "imf/val/ens2")


# ------------------------------------------------------------ A23-11: an ensemble's --eval-data path from elsewhere
def _eval_data_ensemble(tmp) -> None:
    """``ens/eimv``: the ensemble of ``runs/imf`` and ``runs/imf1`` (:func:`_two_imf_runs`) built with ``--eval-data
    eimtv.yaml`` (the image folder at the relative path ``imf``, eval_split test, heldout_split val)."""
    _two_imf_runs(tmp)
    (tmp / "eimtv.yaml").write_text(
        "data:\n  source: image_folder\n  path: imf\n  eval_split: test\n  heldout_split: val\n"
        "  image_size: 16\n  eval_resize: 16\n"
    )
    _cli("ensemble", "-m", "runs/imf", "-m", "runs/imf1", "--from-checkpoints", "--eval-data", "eimtv.yaml",
         "--out", "ens/eimv")  # fmt: skip


@handled(
    "ensemble",
    "harness ensemble --from-checkpoints --eval-data (image folder path: imf, relative; test and val) then its data "
    "read from another working folder holding another imf (audit23 A23-11: ensemble.json recorded 'path': 'imf' as "
    "typed, so harness report read the other folder's held-out labels as the ensemble's, no word)",
    r"ensemble\.json records data\.path .*/imf \(absolute\); read from other/: .*/imf",
)
def _ensemble_eval_data_path_from_elsewhere(tmp):
    import json
    import os

    from harness.runs import data_config

    _eval_data_ensemble(tmp)
    recorded = json.loads((tmp / "ens" / "eimv" / "ensemble.json").read_text())["data_config"]["path"]
    assert recorded == str((tmp / "imf").absolute()), recorded
    _image_folder(tmp / "other" / "imf")
    os.chdir(tmp / "other")  # the test's monkeypatch puts the working folder back
    read = data_config(tmp / "ens" / "eimv").path
    assert read == recorded, read
    return f"ensemble.json records data.path {recorded} (absolute); read from other/: {read}"


# ------------------------------------------------- A23-09, A23-19: splits compared by the images they name or link
def _manifest(tmp, folder: str = "man") -> None:
    """``<folder>/{train,val,test}.jsonl``: one line per image of ``imf/<split>`` (absolute paths, class a -> 0), and
    ``classes.txt`` naming them a and b."""
    import json

    _image_folder(tmp / "imf")
    (tmp / folder).mkdir()
    for split in ("train", "val", "test"):
        lines = [
            json.dumps({"path": str(p), "labels": [0 if p.parent.name == "a" else 1]})
            for p in sorted((tmp / "imf" / split).glob("*/*.png"))
        ]
        (tmp / folder / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    (tmp / folder / "classes.txt").write_text("a\nb\n")  # the image folder's class names


_MAN = (
    "data.source=manifest", "data.path=man", "data.train_split=train", "data.eval_split=test",
    "data.heldout_split=val", "data.batch_size=4", "data.image_size=16", "data.eval_resize=16",
    "data.num_classes=2", "data.allow_outside_root=true",
)  # fmt: skip


@bad_input(
    "import",
    "harness import --model runs/man/model.pt (trained on the manifest man's train.jsonl) --data a manifest man2 "
    "whose eval list tr.jsonl is a copy of man/train.jsonl (audit23 A23-09: rc 0, scored on its 12 training images: "
    "manifest splits were compared by the list file, not the images it names)",
    CLI_ERROR,
    r"runs/man/model\.pt was trained on the train split of manifest at .*man/train\.jsonl .*data\.eval_split=tr "
    r"shares images with data\.train_split=train",
)
def _manifest_list_copied(tmp):
    import shutil

    _manifest(tmp)
    _train("runs/man", *_MAN)
    (tmp / "man2").mkdir()
    shutil.copy(tmp / "man" / "train.jsonl", tmp / "man2" / "tr.jsonl")
    shutil.copy(tmp / "man" / "classes.txt", tmp / "man2" / "classes.txt")
    (tmp / "eman.yaml").write_text(
        f"data:\n  source: manifest\n  path: man2\n  eval_split: tr\n{_VIEW}  num_classes: 2\n  allow_outside_root: true\n"
    )
    _cli("import", "--model", "runs/man/model.pt", "--data", "eman.yaml", "--out", "impman3")


@bad_input(
    "upstream",
    "harness upstream on an image folder whose eval split t2 holds symbolic links to the training split's class "
    "folders (t2/a -> ../train/a; audit23 A23-19: rc 0, the test metrics were of the 12 training images)",
    CLI_ERROR,
    r"data\.eval_split=t2 shares images with data\.train_split=train .*the model would be scored on the images it "
    r"was trained on",
)
def _image_folder_class_links(tmp):
    _image_folder(tmp / "imfl")
    (tmp / "imfl" / "t2").mkdir()
    for c in "ab":
        (tmp / "imfl" / "t2" / c).symlink_to(f"../train/{c}")
    swap = {"data.path=imf": "data.path=imfl", "data.eval_split=test": "data.eval_split=t2"}
    _train("runs/imfl2", *[swap.get(o, o) for o in _IMF])


@bad_input(
    "upstream",
    "harness upstream with data.source=manifest whose test list names one image of train.jsonl (a test list cut "
    "from the training list; audit23 A23-09: the lists were compared as files, so the overlap went unseen)",
    CLI_ERROR,
    r"data\.eval_split=test shares images with data\.train_split=train",
)
def _manifest_lists_overlap(tmp):
    _manifest(tmp)
    train = (tmp / "man" / "train.jsonl").read_text().splitlines()
    (tmp / "man" / "test.jsonl").write_text(
        "\n".join((tmp / "man" / "test.jsonl").read_text().splitlines() + train[:1]) + "\n"
    )
    _train("runs/mano", *_MAN)


@bad_input(
    "import",
    "harness import --model runs/imf/model.pt (trained on the image folder imf's train split) --data a manifest "
    "listing those training images as its test split (audit23 A23-09's rule across sources: an image folder and a "
    "manifest were other data whatever images they read)",
    CLI_ERROR,
    r"runs/imf/model\.pt was trained on the train split of image_folder at .*imf/train .*data\.eval_split=train "
    r"shares images with data\.train_split=train",
)
def _manifest_of_an_image_folders_training_split(tmp):
    _manifest(tmp)
    _train("runs/imf", *_IMF)
    (tmp / "emf.yaml").write_text(
        f"data:\n  source: manifest\n  path: man\n  eval_split: train\n{_VIEW}  num_classes: 2\n"
        "  allow_outside_root: true\n"
    )
    _cli("import", "--model", "runs/imf/model.pt", "--data", "emf.yaml", "--out", "impmf")


@bad_input(
    "data",
    "harness data tasks-cifar --data c10 --out c10/tasks: the task folders inside the cifar10n folder it reads "
    "(audit23 A23-06's rule on the other harness data writer: only run, export and sweep folders were refused)",
    CLI_ERROR,
    r"--out c10/tasks is inside the cifar10n folder --data c10, which would then hold harness data tasks-cifar's files",
)
def _cifar_tasks_inside_their_data(tmp):
    (tmp / "c10").mkdir()
    _cli("data", "tasks-cifar", "--data", "c10", "--out", "c10/tasks")
