"""Bad inputs found by the twenty-third reliability audit (``audit23 <case id>``) on the lead's surfaces: an export's
card read back after its ``config.json`` head options or its ``model.safetensors`` changed, and the DEMO transfer
tasks drawing digits images the digits source trains on."""

from __future__ import annotations

import json
import shutil
import warnings

import click
from bad_inputs_audit21_cards import _het_run
from bad_inputs_audit23_transfer import _fewshot

from bad_inputs import bad_input, handled


def _load(folder):
    """``Classifier.from_pretrained(folder)``; returns (the model, the warnings' text)."""
    from harness.models import Classifier

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = Classifier.from_pretrained(folder)
    return model, " ".join(str(w.message) for w in caught)


# ------------------------------------------------------------------ A23-05 / A23-16: an export changed since its save
@handled(
    "exports",
    "Classifier.from_pretrained of an export whose config.json head eval_mc_samples / clip_eps were edited, or whose "
    "model.safetensors is another export's, then save_pretrained (audit23 A23-05 / A23-16: the card's metrics, "
    "measured with 100 samples / the other weights, were loaded as the model's and republished in its model-index)",
    r"^metrics \(and trained_on for other weights\) left out of card_info with a warning naming the options or the "
    r"weights; an unchanged export keeps them; the re-save states none$",
)
def _changed_export(tmp):
    from harness.runs import export_run

    export = export_run(_het_run(tmp), tmp / "export")
    model, said = _load(export)
    assert not said and model.card_info["metrics"]["top1"] == 0.08, said
    edited = tmp / "edited"
    shutil.copytree(export, edited)
    config = json.loads((edited / "config.json").read_text())
    config["harness"]["model"]["head"].update(eval_mc_samples=1, clip_eps=0.4)
    (edited / "config.json").write_text(json.dumps(config))
    model, said = _load(edited)
    assert "evaluation options differ" in said and "eval_mc_samples 100 -> 1" in said, said
    assert "metrics" not in model.card_info and model.card_info.get("trained_on"), model.card_info
    model.save_pretrained(tmp / "edited_again")
    assert json.loads((tmp / "edited_again" / "config.json").read_text())["harness"]["metrics"] is None
    other = export_run(_het_run(tmp, "run2"), tmp / "export2")  # other weights (a new random model)
    swapped = tmp / "swapped"
    shutil.copytree(export, swapped)
    shutil.copy(other / "model.safetensors", swapped / "model.safetensors")
    model, said = _load(swapped)
    assert "weights differ" in said and "metrics" in said and "trained_on" in said, said
    assert "metrics" not in model.card_info and "trained_on" not in model.card_info, model.card_info
    readme = (model.save_pretrained(tmp / "swapped_again") or "") and (tmp / "swapped_again" / "README.md").read_text()
    assert "model-index" not in readme and "0.08" not in readme
    return (
        "metrics (and trained_on for other weights) left out of card_info with a warning naming the options or the "
        "weights; an unchanged export keeps them; the re-save states none"
    )


# ------------------------------------------------------------------ A23-12: demo tasks and the digits train split
@handled(
    "tasks",
    "the DEMO tasks' images against the digits source's train split (audit23 A23-12: 100 of demo_digit's 500 test "
    "images were digits train images with their labels, so a digits model's demo transfer scored training images)",
    r"^no demo task image \(train800val200 or test, 4 tasks\) is a digits train image; train/val and test share none$",
)
def _demo_disjoint(tmp):
    import numpy as np

    from harness.data.config import DataConfig
    from harness.data.sources import build_split
    from harness.tasks.demo import DEMO_TASKS, demo_split

    def pixels(data):
        return {np.asarray(data.load_image(i)).tobytes() for i in range(len(data))}

    train = pixels(build_split(DataConfig(source="digits"), "train"))
    digit_fit = pixels(demo_split(DEMO_TASKS["demo_digit"], "train800val200"))
    digit_test = pixels(demo_split(DEMO_TASKS["demo_digit"], "test"))
    assert not digit_fit & train and not digit_test & train and not digit_fit & digit_test
    for name in ("demo_rotation", "demo_position", "demo_count"):  # each canvas holds digit tiles: check the tiles
        for split in ("train800val200", "test"):
            data = demo_split(DEMO_TASKS[name], split)
            for i in range(0, len(data), 25):
                img = np.asarray(data.load_image(i))
                tiles = [
                    img[r : r + 8, c : c + 8] for r in range(0, img.shape[0], 8) for c in range(0, img.shape[1], 8)
                ]
                for tile in tiles:
                    if tile.any():
                        assert all(np.rot90(tile, k).tobytes() not in train for k in range(4)), (name, split, i)
    return "no demo task image (train800val200 or test, 4 tasks) is a digits train image; train/val and test share none"


@bad_input(
    "downstream",
    "harness fewshot --model of a digits run trained on data.train_split=test, on demo_digit (audit23 A23-12: the DEMO "
    "tasks draw on the digits val and test splits, which such a model trained on; before, no word)",
    error=click.ClickException,
    match=r"task demo_digit: data\.train_split=test of digits is the digits test split its test split draws on: "
    r"the images the model --model .*model\.pt was trained on .*transfer a model trained on data\.train_split=train",
)
def _demo_of_digits_test(tmp):
    from bad_inputs_audit19_data import _tiny_run

    _tiny_run(tmp, ["data.train_split=test", "data.eval_split=val", "data.heldout_split=null"])
    _fewshot(str(tmp / "r" / "model.pt"), "demo_digit", str(tmp / "fs"))


def _custom_task(root):
    """A tiny custom task folder ``root`` (two classes; train800, val200, train800val200 and test lists)."""
    import numpy as np
    from PIL import Image

    lists = {}
    for split, n in (("train800", 4), ("val200", 2), ("test", 3)):
        for i in range(n):
            for c in (0, 1):
                path = root / "img" / f"{split}_{c}_{i}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                pixels = np.random.default_rng(100 * i + c).integers(0, 255, (16, 16, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(path)
                lists.setdefault(split, []).append(f"img/{path.name} {c}")
    lists["train800val200"] = lists["train800"] + lists["val200"]
    for split, lines in lists.items():
        (root / f"{split}.txt").write_text("\n".join(lines) + "\n")


@bad_input(
    "downstream",
    "harness fewshot --out and harness downstream --out inside the custom task folder they read (audit23 A23-06's "
    "rule, a writer's folder inside the data it reads, on the transfer commands; audit24 A24-01: before, their "
    "files landed among the task's images)",
    error=click.ClickException,
    match=r"--out .*sw is inside task my's folder .*ct, which would then hold harness downstream's files",
)
def _transfer_out_inside_task(tmp):
    from bad_inputs_uncertainty import _cli

    _custom_task(tmp / "ct")
    task = f"my={tmp / 'ct'}:2"
    try:
        _cli(
            "fewshot",
            "--model",
            "timm:resnet10t",
            "--random-init",
            "--tasks",
            task,
            "--shots",
            "1",
            "--log-with",
            "none",
            "--out",
            str(tmp / "ct" / "fs"),
        )
    except click.ClickException as e:
        assert "is inside task my's folder" in str(e) and not (tmp / "ct" / "fs").exists(), str(e)
    else:
        raise AssertionError("harness fewshot wrote inside the task folder")
    _cli(
        "downstream",
        "--upstream",
        "timm:resnet10t",
        "--random-init",
        "--tasks",
        task,
        "--preset",
        "demo",
        "--lrs",
        "0.01",
        "--steps",
        "2",
        "--seeds",
        "1",
        "--log-with",
        "none",
        "--out",
        str(tmp / "ct" / "img" / "sw"),
    )


@bad_input(
    "downstream",
    "harness fewshot --model of an image-folder run whose training split's class folder is a link to another folder, "
    "with a custom task in that folder whose test list names its images (audit23 A23-19's links, for the transfer "
    "rule of A22-07; audit24 A24-02: the training images were compared by the split folder's path only)",
    error=click.ClickException,
    match=r"test\.txt line 1 names 'a/0\.png', an image the model --model .*model\.pt was trained on",
)
def _transfer_of_linked_class_folder(tmp):
    import os

    from bad_inputs_audit22_runs import _image_folder_run

    run, elsewhere = _image_folder_run(tmp), tmp / "elsewhere"
    elsewhere.mkdir()
    shutil.move(tmp / "imf" / "train" / "a", elsewhere / "a")
    os.symlink(elsewhere / "a", tmp / "imf" / "train" / "a")  # the run's class folder, now a link
    _custom_task(elsewhere)  # its train800 / val200 lists; its test list: the images of the linked class folder
    (elsewhere / "test.txt").write_text("".join(f"a/{i}.png 0\n" for i in range(6)))
    _fewshot(str(run / "model.pt"), f"my={elsewhere}:2", str(tmp / "fs"))


@bad_input(
    "ensemble",
    "the data of an ensemble folder whose ensemble.json records --eval-data's data.path relative (as harness "
    "ensemble wrote it before audit23 A23-11's fix), read from a working folder where that path names nothing "
    "(before: 'data.path 'imf' does not exist', naming no file the user set)",
    match=r"ens/eimv/ensemble\.json records its --eval-data's data\.path 'imf' relative to the folder the ensemble "
    r"was built in, and from this folder \(.*third\) it names nothing: run from that folder, or build the ensemble "
    r"again",
)
def _old_ensemble_relative_eval_data(tmp):
    import json
    import os

    from bad_inputs_audit23_data import _eval_data_ensemble

    from harness.runs import data_config

    _eval_data_ensemble(tmp)
    spec_file = tmp / "ens" / "eimv" / "ensemble.json"
    spec = json.loads(spec_file.read_text())
    spec["data_config"]["path"] = "imf"  # as written before the fix
    spec_file.write_text(json.dumps(spec))
    assert data_config(tmp / "ens" / "eimv").path == "imf"  # from the folder it was built in: read as before
    (tmp / "third").mkdir()
    os.chdir(tmp / "third")  # the test's monkeypatch puts the working folder back
    data_config(tmp / "ens" / "eimv")
