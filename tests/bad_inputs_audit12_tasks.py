"""Bad inputs found by the twelfth reliability audit in downstream tasks (``audit12 <case id>``): a custom task whose
splits share images (test images trained on). Every refusal comes before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from bad_inputs import bad_input
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
    _refused_before_work(tmp, "--tasks", f"birds={task_folder(tmp, bad={'val200': 'img/train800_2.png 1'})}:5")


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
