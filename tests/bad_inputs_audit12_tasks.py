"""Bad inputs found by the twelfth reliability audit in downstream tasks and batch sizes (``audit12 <case id>``): a
custom task whose splits share images (test images trained on), and a batch of one image per step for a backbone with
BatchNorm. Every refusal comes before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from bad_inputs_audit9_config import CONFIGS, _upstream
from PIL import Image

from bad_inputs import bad_input, handled
from bad_inputs_downstream import CLI_ERROR, downstream, task_folder


# ------------------------------------------------------------------------------ A12-16: splits that share images
def _same_lists(tmp: Path) -> Path:
    """The audit's task ct/: 20 PNGs, the same 20 lines ``img/<i>.png <i % 2>`` in all four lists."""
    folder = tmp / "ct"
    (folder / "img").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(20):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / "img" / f"{i}.png")
    lines = "".join(f"img/{i}.png {i % 2}\n" for i in range(20))
    for split in ("train800", "val200", "train800val200", "test"):
        (folder / f"{split}.txt").write_text(lines)
    return folder


def _refused_before_work(tmp: Path, *args: str) -> None:
    """``harness downstream ARGS --out out``; nothing may be written to out/."""
    try:
        downstream(*args, "--out", str(tmp / "out"))
    finally:
        assert not (tmp / "out").exists(), "written before the refusal"


@bad_input(
    "downstream",
    "a custom task whose four split lists are the same 20 images (audit12 A12-16: trained and scored silently, the "
    "test images being the training images and val200, which picks the lr and fits τ, the training set)",
    CLI_ERROR,
    r"ct/test\.txt line 1 lists .*ct/img/0\.png, the image .*ct/train800val200\.txt line 1 lists \(20 of the 20 "
    r"lines of test\.txt list images of train800val200\.txt\): the test split is scored, so no fine-tune may train on "
    r"its images; list each image in only one of test\.txt and train800val200\.txt",
)
def _custom_splits_share_images(tmp):
    _refused_before_work(tmp, "--tasks", f"ct={_same_lists(tmp)}:2")


@bad_input(
    "downstream",
    "a custom task whose val200 list holds an image of train800 (audit12 A12-16: the lr was chosen and τ fitted on "
    "an image the fine-tune trained on)",
    CLI_ERROR,
    r"birds/val200\.txt line 11 lists .*birds/img/train800_2\.png, the image .*birds/train800\.txt line 3 lists \(1 "
    r"of the 11 lines of val200\.txt list images of train800\.txt\): val200 scores the fine-tunes trained on "
    r"train800 .*list each image in only one of val200\.txt and train800\.txt",
)
def _custom_val_in_train(tmp):
    _refused_before_work(tmp, "--tasks", f"birds={task_folder(tmp, bad={'val200': 'img/train800_2.png 2'})}:5")


@bad_input(
    "downstream",
    "a VTAB-1k folder task whose test list names a train800 image by a path of its own, ./img/../img/train800_0.png "
    "(audit12 A12-16)",
    CLI_ERROR,
    r"dtd/test\.txt line 1880 lists .*img/\.\./img/train800_0\.png, the image .*dtd/train800val200\.txt line 1 lists",
)
def _vtab_test_in_train_by_another_path(tmp):
    sizes = {"train800": 800, "val200": 200, "train800val200": 1000, "test": 1879}
    task_folder(tmp / "vtab-1k", "dtd", k=47, sizes=sizes, bad={"test": "./img/../img/train800_0.png 0"})
    _refused_before_work(tmp, "--tasks", "dtd", "--data-format", "folder", "--data-dir", str(tmp / "vtab-1k"))


# ------------------------------------------------------------------------------ A12-21: one image a pass, BatchNorm
@bad_input(
    "upstream",
    "data.batch_size=1 for a backbone with BatchNorm (audit12 A12-21: torch's 'Expected more than 1 value per channel "
    "when training' at the first step, after config.yaml and run.json were written)",
    CLI_ERROR,
    r"data\.batch_size=1 is the images of one training forward pass on each process .*, and backbone test_resnet has "
    r"\d+ BatchNorm layer\(s\) \(e\.g\. .*\): BatchNorm normalises each channel over the images of a training forward "
    r"pass.*use data\.batch_size=2 or more",
)
def _upstream_batch_of_one(tmp):
    _upstream(tmp, "data.batch_size=1", "train.log_with=[]")


@handled(
    "upstream",
    "data.batch_size=1 for a backbone without BatchNorm, model.backbone=test_vit (audit12 A12-21: the refusal is for "
    "BatchNorm only)",
    r"validated: test_vit has no BatchNorm layer",
)
def _upstream_batch_of_one_no_batch_norm(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig, validate

    cfg = load_config(
        UpstreamConfig,
        CONFIGS / "digits_hom.yaml",
        ["data.batch_size=1", "model.backbone=test_vit", "data.image_size=32"],
    )
    validate(cfg)
    return "validated: test_vit has no BatchNorm layer"


@bad_input(
    "downstream",
    "--batch-size 1 --micro-batch 1 for an upstream model with BatchNorm (audit12 A12-21: torch's 'Expected more than "
    "1 value per channel when training' after sweep.json and predictions/ were written)",
    CLI_ERROR,
    r"micro_batch=1 \(--micro-batch\) is the images of one fine-tuning forward pass \(batch_size=1, --batch-size, "
    r"accumulates passes\), and the model .*model\.pt has \d+ BatchNorm layer\(s\).*use --micro-batch 2 or more",
)
def _downstream_batch_of_one(tmp):
    _refused_before_work(tmp, "--tasks", "demo_digit", "--batch-size", "1", "--micro-batch", "1")


@bad_input(
    "downstream",
    "a custom task whose train800 list has one image, --micro-batch 8 (audit12 A12-21: a split smaller than the "
    "micro-batch is one pass of all its images, and one image failed in torch's BatchNorm after sweep.json was written)",
    CLI_ERROR,
    r"task birds's train800 split has 1 example\(s\), fine-tuned as one forward pass of them all \(a split smaller "
    r"than micro_batch=8, --micro-batch, is not cut into passes\), and the model .* BatchNorm.*list 2 or more "
    r"examples in the task's train800\.txt",
)
def _downstream_split_of_one(tmp):
    sizes = {"train800": 1, "val200": 10, "train800val200": 11, "test": 12}
    _refused_before_work(tmp, "--tasks", f"birds={task_folder(tmp, sizes=sizes)}:5")
