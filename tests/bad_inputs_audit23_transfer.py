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
from bad_inputs_audit9_config import CONFIGS
from bad_inputs_audit22_runs import _image_folder_run, _imf_upstream, _trained

from bad_inputs import bad_input, handled
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


# ------------------------------------------------------------------------------ A23-20: the dropped head's options
@handled(
    "downstream",
    "harness fewshot --model and harness downstream --upstream of a het run's model.pt re-saved with "
    "eval_mc_samples=1 (its weights the run's own; audit23 A23-20: both refused, 'predicts with other evaluation "
    "options', though they drop the head); export_run of it still refused",
    r"fewshot and downstream ran on the run's weights; export refused: other evaluation options",
)
def _dropped_head_options(tmp):
    import pytest

    from harness.models import load_model, save_model
    from harness.runs import export_run

    config = ["--config", str(CONFIGS / "digits_het.yaml"), "train.epochs=1", "train.log_with=[]"]
    _cli("upstream", "--no-progress", *config, "data.limit_train=100", "data.limit_eval=50", f"output_dir={tmp / 'hc'}")
    model = load_model(tmp / "hc" / "model.pt")
    model.head.eval_mc_samples = 1
    save_model(model, tmp / "hc" / "model.pt")
    _fewshot(str(tmp / "hc" / "model.pt"), "demo_digit", str(tmp / "fs"))
    _cli("downstream", "--upstream", str(tmp / "hc" / "model.pt"), "--tasks", "demo_digit", *_SWEEP, "--out", "sw")
    assert (tmp / "fs" / "fewshot.json").is_file() and (tmp / "sw" / "vtab.md").is_file()
    with pytest.raises(ValueError, match=r"predicts with other evaluation options .*eval_mc_samples \d+ -> 1"):
        export_run(tmp / "hc", tmp / "exp")
    return "fewshot and downstream ran on the run's weights; export refused: other evaluation options"


# ------------------------------------------------------------------------------ A23-14: an imported run's model.pt
@bad_input(
    "import",
    "harness shift -m impbx, an imported run (harness import of runs/base/model.pt) whose model.pt was replaced by "
    "another model's (audit23 A23-14: its fix was 'train the run again (harness upstream with its config.yaml)', "
    "which refuses an imported run's config.yaml); the fix it gives, run as given, imports the model again",
    click.ClickException,
    r"^.*impbx/model\.pt is not the model the run's metrics\.json and predictions measured \(its weights' digest is "
    r"\w+\.\.\., metrics\.json records \w+\.\.\.\): put the run's own model\.pt back, or import its model again into "
    r"a new folder \(an imported run, made by harness import: harness import --model .*base/model\.pt --data "
    r".*impbx/config\.yaml --out NEW_FOLDER\)",
)
def _imported_run_replaced_model(tmp):
    import re

    base = _trained(tmp, "base", 0)
    (tmp / "etest50.yaml").write_text("data: {source: digits, eval_split: test, heldout_split: null, limit_eval: 50}\n")
    _cli("import", "--model", str(base / "model.pt"), "--data", str(tmp / "etest50.yaml"), "--out", str(tmp / "impb"))
    shutil.copytree(tmp / "impb", tmp / "impbx", ignore=shutil.ignore_patterns(".lock"))
    _other_weights(base / "model.pt", tmp / "impbx" / "model.pt")
    try:
        _cli("shift", "-m", str(tmp / "impbx"), "--corruptions", "gaussian_noise", "--severities", "1", "--ood", "none")
    except click.ClickException as e:
        advised = re.search(r"(harness import --model \S+ --data \S+) --out NEW_FOLDER", str(e)).group(1).split()
        _cli(*advised[1:], "--out", str(tmp / "again"))  # the fix as given works
        assert (tmp / "again" / "metrics.json").is_file()
        raise


# ------------------------------------------------------------------------------ A23-21: a few-shot study's model changed
@bad_input(
    "downstream",
    "harness fewshot --model f.pt --out fsf again after f.pt was replaced by another model's (audit23 A23-21: rc 0, "
    "the earlier model's results replaced without --overwrite, while another path was refused as another study)",
    click.ClickException,
    r"^.*fsf holds the few-shot results of another study \(the weights of .*f\.pt: digest \w{12}\.\.\. there, "
    r"\w{12}\.\.\. now \(the model\.pt was replaced or trained again\)\): they would be replaced; give another "
    r"--out, or --overwrite to replace them",
)
def _fewshot_of_changed_model(tmp):
    import json

    base = _trained(tmp, "base", 0)
    shutil.copy(base / "model.pt", tmp / "f.pt")
    _fewshot(str(tmp / "f.pt"), "demo_digit", str(tmp / "fsf"))
    _fewshot(str(tmp / "f.pt"), "demo_digit", str(tmp / "fsf"))  # the same model again: the same study
    assert json.loads((tmp / "fsf" / "fewshot.json").read_text())["upstream_weights"]
    _other_weights(base / "model.pt", tmp / "f.pt")  # what training another model into the same file gives
    _fewshot(str(tmp / "f.pt"), "demo_digit", str(tmp / "fsf"))


# ------------------------------------------------------------------------------ A23-17: an import's relative data.path
@handled(
    "import",
    "harness import --data eimtv.yaml (image folder at the relative path imf), then the import's data read from "
    "another working folder (audit23 A23-17: run.json recorded no data_path, so report / shift / ensemble read "
    "another folder's imf there)",
    r"run\.json data_path imf = .*/imf; read from another folder as .*/imf",
)
def _import_relative_data_path(tmp):
    import json

    from harness.runs import data_config

    run = _image_folder_run(tmp)
    (tmp / "eimtv.yaml").write_text(
        "data: {source: image_folder, path: imf, eval_split: test, heldout_split: val, image_size: 16, "
        "eval_resize: 16}\n"
    )
    os.chdir(tmp)
    _cli("import", "--model", str(run / "model.pt"), "--data", "eimtv.yaml", "--out", "impte")
    recorded = json.loads((tmp / "impte" / "run.json").read_text())["data_path"]
    assert recorded == {"path": "imf", "absolute": str(tmp / "imf")}, recorded
    (tmp / "other" / "imf").mkdir(parents=True)
    os.chdir(tmp / "other")
    try:
        read = data_config(tmp / "impte").path
    finally:
        os.chdir(tmp)
    assert read == str(tmp / "imf"), read
    return f"run.json data_path imf = {recorded['absolute']}; read from another folder as {read}"


# ------------------------------------------------------------------------------ A23-08: a manifest-trained model
def _manifest_run(tmp: Path) -> Path:
    """``tmp/man/{train,val,test}.jsonl``, one line per image of ``tmp/imf``'s split (absolute paths), and the
    one-epoch run ``tmp/runs/man`` trained on ``man/train.jsonl`` (imf/train's 12 images); the task lists of A22-07 in
    ``tmp/imf`` (test = imf/train)."""
    import json

    run = _image_folder_run(tmp)  # imf and its task lists (the run itself is not used)
    (tmp / "man").mkdir()
    for split in ("train", "val", "test"):
        lines = [
            json.dumps({"path": str(tmp / "imf" / split / c / f"{i}.png"), "labels": [k]})
            for k, c in enumerate("ab")
            for i in range(6)
        ]
        (tmp / "man" / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    data = [f"data.path={tmp / 'man'}", "data.train_split=train", "data.eval_split=test", "data.heldout_split=val"]
    _cli(
        "upstream",
        "--no-progress",
        "--config",
        str(CONFIGS / "digits_hom.yaml"),
        "data.source=manifest",
        *data,
        "data.batch_size=4",
        "train.epochs=1",
        "train.log_with=[]",
        "data.image_size=16",
        "data.eval_resize=16",
        "data.label_noise.kind=none",
        "data.num_classes=2",
        "data.allow_outside_root=true",
        f"output_dir={tmp / 'runs' / 'man'}",
    )
    return run.parent / "man"


@bad_input(
    "downstream",
    "harness fewshot --model runs/man/model.pt (trained on data.source=manifest, man/train.jsonl listing imf/train's "
    "images) with a task whose test.txt lists imf/train; harness downstream --upstream of the same, and a pack of "
    "that manifest as the training data (audit23 A23-08: rc 0, the model's training images scored as transfer "
    "accuracy: only an image folder's training images were compared)",
    click.ClickException,
    r"^.*imf/test\.txt line 1 names 'train/a/0\.png', an image the model --upstream .*man/model\.pt was trained on "
    r"\(data\.train_split=train of manifest at .*man/train\.jsonl line 1 \(as its run's .*config\.yaml records\)\): "
    r"task mytask's test split would score the model on its own training images",
)
def _manifest_training_images(tmp):
    import pytest

    from harness.tasks.taskset import TaskData, expand_tasks
    from harness.tasks.trained_images import FEWSHOT_SCORED, check_lists, data_folder

    model, task = str(_manifest_run(tmp) / "model.pt"), f"mytask={tmp / 'imf'}:2"
    with pytest.raises(click.ClickException, match=r"imf/test\.txt line 1 names 'train/a/0\.png'.* --model .*manifest"):
        _fewshot(model, task, str(tmp / "fs"))
    pack = ("data", "pack", "manifest", str(tmp / "pk"), "--shard-size", "4", "--split", "train")
    _cli(*pack, f"path={tmp / 'man'}", "allow_outside_root=true", "num_classes=2")
    packed = data_folder({"source": "shards", "path": str(tmp / "pk"), "train_split": "train"}, "as given")
    with pytest.raises(ValueError, match=r"line 1 names 'train/a/0\.png', .*pack at .*pk, packed from manifest at"):
        check_lists(packed, expand_tasks([task]), TaskData(), FEWSHOT_SCORED, "the pack's model trained on")
    _cli("downstream", "--upstream", model, "--tasks", task, *_SWEEP, "--out", str(tmp / "sw"))


# ------------------------------------------------------------------------------ A23-18: the upstream few-shot monitor
@bad_input(
    "upstream",
    "harness upstream on the image folder imf (train_split=train) with train.fewshot_every=1 and "
    "train.fewshot_tasks=[mytask=imf:2], whose test.txt lists imf/train (audit23 A23-18: rc 0, 'epoch 1 few-shot: "
    "mytask 1-shot 0.5833', the run's own training images scored by the monitor)",
    click.ClickException,
    r"^.*train\.fewshot_tasks: .*imf/test\.txt line 1 names 'train/a/0\.png', an image this run trains on "
    r"\(data\.train_split=train of image_folder at .*imf/train \(this run's data section\)\): task mytask's test "
    r"split would score the model on its own training images.*or remove the task from train\.fewshot_tasks",
)
def _monitor_scoring_training_images(tmp):
    imf = tmp / "imf"
    _image_folder_run(tmp)  # imf and its task lists
    try:
        _imf_upstream(
            tmp,
            tmp / "runs" / "imfm",
            "train.fewshot_every=1",
            f"train.fewshot_tasks=[mytask={imf}:2]",
            "train.fewshot_shots=[1]",
        )
    finally:
        assert (
            not (tmp / "runs" / "imfm" / "fewshot.jsonl").exists() and not (tmp / "runs" / "imfm" / "model.pt").exists()
        )
