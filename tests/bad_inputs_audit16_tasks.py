"""Bad inputs found by the sixteenth reliability audit in folder-format transfer tasks (``audit16 <case id>``): split
lists that name an image twice, give it two labels, or whose train800val200 is not train800 and val200 together, and a
list saved with a byte-order mark. Every refusal comes before any model is loaded."""

from __future__ import annotations

from pathlib import Path

from bad_inputs_audit12_tasks import _refused_before_work

from bad_inputs import bad_input, handled
from bad_inputs_downstream import CLI_ERROR, task_folder


def _edit(folder: Path, split: str, change) -> str:
    """Rewrite ``folder/<split>.txt`` by ``change(lines) -> lines``; returns the task spec ``birds=<folder>:5``."""
    listing = folder / f"{split}.txt"
    listing.write_text("\n".join(change(listing.read_text().splitlines())) + "\n")
    return f"birds={folder}:5"


@bad_input(
    "downstream",
    "a custom task whose test list names its first image again on a last line (audit16 A16-06: rc 0, the image scored "
    "twice: 'mean over 1 tasks' of 13 test lines for 12 images)",
    CLI_ERROR,
    r"birds/test\.txt line 13 lists 'img/0\.png' \(label 0\) again, first listed on line 1 \(label 0\): a split names "
    r"each image once .*remove one of the lines",
)
def _test_image_listed_twice(tmp):
    _refused_before_work(tmp, "--tasks", _edit(task_folder(tmp), "test", lambda lines: lines + lines[:1]))


@bad_input(
    "downstream",
    "a custom task whose train800val200 labels img/train800_0.png 1 and train800 labels it 0 (audit16 A16-06: rc 0, "
    "the final fine-tune trained on the other label)",
    CLI_ERROR,
    r"birds/train800val200\.txt line 1 labels .*img/train800_0\.png 1, and .*birds/train800\.txt line 1 labels the "
    r"same image 0: an image has one class in every split of a task; correct the label in one of the lists",
)
def _image_with_two_labels(tmp):
    relabel = lambda lines: ["img/train800_0.png 1"] + lines[1:]  # noqa: E731
    _refused_before_work(tmp, "--tasks", _edit(task_folder(tmp), "train800val200", relabel))


@bad_input(
    "downstream",
    "a custom task whose train800 list is cut to its first 15 of 20 lines, train800val200 unchanged (audit16 A16-06: "
    "rc 0, the learning rate chosen on other training images than the final fine-tune's)",
    CLI_ERROR,
    r"birds/train800val200\.txt line 16 lists .*img/train800_15\.png, which neither train800\.txt nor val200\.txt "
    r"lists \(5 images differ\): train800val200 is train800 and val200 together .*list in train800val200\.txt exactly "
    r"the lines of train800\.txt and val200\.txt",
)
def _union_not_train800_and_val200(tmp):
    _refused_before_work(tmp, "--tasks", _edit(task_folder(tmp), "train800", lambda lines: lines[:15]))


@handled(
    "downstream",
    "a custom task whose test list starts with a UTF-8 byte-order mark (Windows Notepad) (audit16 A16-07: 'images "
    "... do not exist: birds/\\ufeffimg/0.png', the mark invisible in the path printed)",
    r"read as UTF-8 with the byte-order mark skipped: 12 test images, the first img/0\.png",
)
def _list_with_a_byte_order_mark(tmp):
    from harness.tasks.taskset import TaskData, check_tasks, custom_task, load_split

    folder = task_folder(tmp)
    (folder / "test.txt").write_bytes(b"\xef\xbb\xbf" + (folder / "test.txt").read_bytes())
    settings = TaskData()
    task = custom_task(f"birds={folder}:5")
    check_tasks([task], settings)
    test = load_split(task, "test", settings)
    assert test.load_image.paths[0] == str(folder / "img" / "0.png") and len(test) == 12
    return "read as UTF-8 with the byte-order mark skipped: 12 test images, the first img/0.png"
