"""The three-splits rule in the transfer stages: a transfer task's scored split is not the upstream model's training
images (audit22 A22-07). A task read from list files (a custom task ``NAME=FOLDER:K``, or a VTAB-1k task in the folder
format) names its images by path; a harness ``model.pt`` in its run folder was trained on the images of its run's
``data.train_split`` (:func:`harness.importing.trained_data`, the split's folder: :func:`harness.data.splits.images_of`).
A scored split listing one of those images would report training accuracy as transfer accuracy, the case the harness
refuses for harness import, ensemble ``--eval-data``, shift's OOD sets and ``save_pretrained``; the harness's own CIFAR
tasks avoid it by drawing their images from the upstream held-out split."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from harness.tasks.catalogue import Task
from harness.tasks.taskset import TaskData

#: the splits the sweep scores (val200 chooses the learning rate and fits τ; test is the result)
SWEEP_SCORED = ("val200", "test")
#: the split the few-shot probe scores (its shots and held-out examples are drawn from train800val200)
FEWSHOT_SCORED = ("test",)
#: the spellings of model sources other than a harness model.pt (their training images are not known by path)
_OTHER_SOURCES = ("timm:", "torchvision:", "hf-hub:", "local-dir:")


def training_folder(upstream: str) -> "Optional[tuple[str, str]]":
    """``(folder, what)``: the resolved image folder a harness ``model.pt`` (or its run folder) was trained on, and a
    phrase naming that split and where it is recorded; None for another source, a model outside its run folder, or
    data not read from an image folder (a dataset known by name: a task list names files, never those)."""
    from harness.importing import trained_data

    text = str(upstream)
    if text.startswith(_OTHER_SOURCES) or not Path(text).expanduser().exists():
        return None
    data, whence = trained_data(text, None)
    return data_folder(data, whence)


def data_folder(data: "Optional[Mapping[str, Any]]", whence: str) -> "Optional[tuple[str, str]]":
    """:func:`training_folder` of a data section (``source``, ``name``, ``path``, ``train_split``; ``whence``: where
    it is recorded): the resolved folder of its training split when read from an image folder (or a pack of one),
    else None."""
    from harness.data.splits import images_of

    if not data:
        return None
    split = data.get("train_split")
    where = images_of(data.get("source"), data.get("name"), data.get("path"), split)
    if where is None or where[0] != "image_folder" or where[2][0] != "at":
        return None
    return str(where[2][1]), f"data.train_split={split} of image_folder at {where[2][1]} ({whence})"


def check_scored_not_trained(
    upstream: str, tasks: "Sequence[Task]", settings: TaskData, scored: "Sequence[str]", flag: str
) -> None:
    """Refuse a task whose scored split (``scored``: :data:`SWEEP_SCORED`, :data:`FEWSHOT_SCORED`) lists an image
    of the folder the harness ``model.pt`` ``upstream`` was trained on (:func:`training_folder`; paths compared
    resolved, links followed). Tasks not read from list files (TFDS, demo) and lists that cannot be read (the task
    check, :func:`harness.tasks.taskset.check_tasks`, names those) pass. Reads the lists only (no image).

    Args:
        flag: how messages name the model (``--upstream``, ``--model``).

    Raises:
        ValueError: naming the list file and line, the image, the model, its run's training split and the fix.
    """
    check_lists(training_folder(upstream), tasks, settings, scored, f"the model {flag} {upstream} was trained on")


def check_lists(
    trained: "Optional[tuple[str, str]]", tasks: "Sequence[Task]", settings: TaskData, scored: "Sequence[str]", who: str
) -> None:
    """:func:`check_scored_not_trained` for the training folder ``trained`` (:func:`training_folder`,
    :func:`data_folder`; None: nothing to compare); ``who``: the message's words for whose training images those are
    (``the model --upstream runs/a/model.pt was trained on``)."""
    from harness.tasks.folder_format import read_list, task_folder

    if trained is None:
        return
    root, what = trained
    root = root.rstrip(os.sep) + os.sep
    for t in tasks:
        if t.group == "demo" or (t.group != "custom" and settings.data_format != "folder"):
            continue
        try:
            folder = Path(t.tfds.removeprefix("folder:")) if t.group == "custom" else task_folder(t, settings.data_dir)
            lists = [folder / f"{split}.txt" for split in scored]
            read = [(f, read_list(f, settings.allow_outside_paths)) for f in lists if f.is_file()]
        except (OSError, ValueError):  # the task check names a missing folder or a bad list
            continue
        for listing, (paths, _, lines) in read:
            for path, n in zip(paths, lines):
                if os.path.realpath(path).startswith(root):
                    raise ValueError(
                        f"{listing} line {n} names {os.path.relpath(path, listing.parent)!r}, an image {who} "
                        f"({what}): task {t.name}'s {listing.stem} split would score the model on its own "
                        f"training images, as transfer accuracy; list images no upstream model trained on in "
                        f"{listing.name} (e.g. from the run's data.heldout_split or a folder of their own), or "
                        "transfer a model not trained on that folder"
                    )
