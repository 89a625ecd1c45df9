"""Bad inputs found by the twenty-sixth reliability audit in a run's config and data identity (``audit26 <case id>``):
a hand-edited config.yaml, an image folder named through ``..``, a training split changed under an interrupted run,
an evaluation split that is a copy of the training split, and a writer's output folder inside a class folder."""

from __future__ import annotations

import os
import shutil

import click
from bad_inputs_audit9_config import CONFIGS
from bad_inputs_audit22_runs import _image_folder_run

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

_TINY = ("data.batch_size=4", "train.epochs=1", "train.log_with=[]", "data.image_size=16", "data.eval_resize=16")


def _upstream(out: str, *keys: str) -> None:
    """``harness upstream`` (one tiny noiseless epoch of digits_hom.yaml) on an image folder split train / test / val,
    into ``out``, with the overrides ``keys`` (``data.path=...``)."""
    data = ("data.source=image_folder", "data.eval_split=test", "data.heldout_split=val", "data.label_noise.kind=none")
    _cli(
        "upstream",
        "--no-progress",
        "--config",
        str(CONFIGS / "digits_hom.yaml"),
        *data,
        *_TINY,
        *keys,
        f"output_dir={out}",
    )


# ------------------------------------------------------------------------------ A26-01: a hand-edited config.yaml
@bad_input(
    "export",
    "a run's config.yaml hand-edited after training (data.image_size 16 -> 14, data.label_noise.kind none -> "
    "pair_flip), then export_run, harness report and harness upstream --config of that file (audit26 A26-01: rc 0, the "
    "card's training data and pretrained_cfg taken from the edited file, not from run.json's recorded config)",
    ValueError,
    r"^runs/imfe/config\.yaml is not the config its run recorded when it trained \(runs/imfe/run\.json's config\): "
    r"data\.image_size: 14 there, 16 recorded; data\.label_noise\.kind: 'pair_flip' there, 'none' recorded; the "
    r"config\.yaml was edited since: put the recorded values back in config\.yaml .*or train a new run",
)
def _edited_config(tmp):
    import pytest

    from harness.runs import export_run

    _image_folder_run(tmp)
    shutil.copytree(tmp / "runs" / "imf", tmp / "runs" / "imfe", ignore=shutil.ignore_patterns(".lock"))
    export_run("runs/imfe", "exp_ok")  # a copied run (another output_dir) is the run it recorded
    cfg = tmp / "runs" / "imfe" / "config.yaml"
    text = cfg.read_text()
    assert "image_size: 16" in text and "kind: none" in text
    cfg.write_text(text.replace("image_size: 16", "image_size: 14").replace("kind: none", "kind: pair_flip"))
    with pytest.raises(click.ClickException, match=r"imfe/config\.yaml is not the config its run recorded"):
        _cli("report", "runs/imfe", "--name", "r", "--no-shift", "--no-covariance")
    with pytest.raises(click.ClickException, match=r"data\.image_size: 14 there, 16 recorded"):
        _cli("upstream", "--no-progress", "--config", str(cfg), f"output_dir={tmp / 'runs' / 'imfe'}")
    export_run("runs/imfe", "exp")


# ------------------------------------------------------------------------------ A26-04: data.path through ..
@bad_input(
    "data",
    "data.path=../imfL (relative, through ..) of an image folder one of whose images is a link out of it, after "
    "data.path=../imf (plain files) (audit26 A26-04: ../imf refused as 'a link ... outside data.path' though no file is "
    "a link; a link out of a relative data.path passed unseen)",
    click.ClickException,
    r"^image folder '\.\./imfL/train': '\.\./imfL/train/a/zz\.png' is a link to '.*/outside\.png', outside data\.path "
    r"'\.\./imfL', so image .* would be read from there; copy the images under data\.path",
)
def _image_folder_through_dotdot(tmp):
    _image_folder_run(tmp)
    (tmp / "other").mkdir()
    os.chdir(tmp / "other")
    _upstream("runs/rel", "data.path=../imf")
    assert (tmp / "other" / "runs" / "rel" / "metrics.json").is_file()
    shutil.copytree(tmp / "imf", tmp / "imfL")
    shutil.copyfile(tmp / "imf" / "train" / "a" / "0.png", tmp / "outside.png")
    os.symlink(tmp / "outside.png", tmp / "imfL" / "train" / "a" / "zz.png")
    _upstream("runs/relL", "data.path=../imfL")


# ------------------------------------------------------------------------------ A26-16: output among images
@bad_input(
    "report",
    "harness report runs/imf --out-root imgsR/test --name b --overwrite (imgsR a copy of an image folder the run does "
    "not read: the report folder is its class folder b), and harness downstream --out imgsR/train/a --overwrite "
    "(audit26 A26-16: rc 0, the reliability PNG written into the class folder, read as an image of the data set)",
    click.ClickException,
    r"^--out-root imgsR/test \(with --name b: the report folder imgsR/test/b\) is .*imgsR/test/b, a folder of images "
    r"\(\d\.png is one\): an image folder reads every image under a class folder, so harness report's image files .* "
    r"would join that data set, --overwrite or not; give --out-root a folder outside that image folder",
)
def _output_in_class_folder(tmp):
    import pytest

    _image_folder_run(tmp)
    shutil.copytree(tmp / "imf", tmp / "imgsR")
    (tmp / "task").mkdir()
    for name in ("train800", "val200", "train800val200", "test"):
        (tmp / "task" / f"{name}.txt").write_text(
            "".join(f"../imf/val/{c}/{i}.png {k}\n" for k, c in enumerate("ab") for i in range(3))
        )
    sweep = ("--preset", "demo", "--lrs", "0.01", "--steps", "2", "--seeds", "1", "--log-with", "none")
    with pytest.raises(click.ClickException, match=r"--out imgsR/train/a is .*imgsR/train/a, a folder of "):
        _cli(
            "downstream",
            "--upstream",
            "runs/imf/model.pt",
            "--tasks",
            "mine=task:2",
            *sweep,
            "--out",
            "imgsR/train/a",
            "--overwrite",
        )
    assert not (tmp / "imgsR" / "train" / "a" / "sweep.json").exists()
    _cli(
        "report", "runs/imf", "--out-root", "imgsR/test", "--name", "b", "--no-shift", "--no-covariance", "--overwrite"
    )


# ------------------------------------------------------------------------------ A26-17: training data changed
@bad_input(
    "upstream",
    "an interrupted image-folder run resumed after its training split's class folders a and b were swapped (every "
    "label flipped, the same file names) (audit26 A26-17: resumed without a word, its last epochs trained on other "
    "labels than its first ones)",
    ValueError,
    r"^.*runs/res was started on other training data than data\.train_split=train of image_folder at data\.path=imf "
    r"holds now \(the images' bytes \(a sample of 34\): \w{12}\.\.\. then, \w{12}\.\.\. now; as its run\.json records "
    r"it: train_split_identity\): .*restore the training data as it was when the run started, or start the run over "
    r"in another output_dir$",
)
def _resume_on_swapped_classes(tmp):
    import pytest
    from bad_inputs_audit23_runs import _IMF, _image_folder, _train

    _image_folder(tmp, 0)
    run, settings = tmp / "runs" / "res", [*_IMF, "train.epochs=2", "train.checkpoint_every=1"]
    _train(run, settings, stop_after_steps=2)
    assert (run / "checkpoints" / "last.pt").is_file() and not (run / "model.pt").exists()
    train = tmp / "imf" / "train"

    def swap() -> None:
        os.rename(train / "a", train / "t")
        os.rename(train / "b", train / "a")
        os.rename(train / "t", train / "b")

    swap()
    with pytest.raises(ValueError, match=r"was started on other training data") as refused:
        _train(run, settings)
    assert not (run / "model.pt").exists()
    swap()  # restored: it resumes and finishes
    _train(run, settings)
    assert (run / "model.pt").is_file()
    swap()
    raise refused.value
