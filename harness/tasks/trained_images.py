"""The three-splits rule for transfer and few-shot tasks: a task's scored split is not the model's training images
(audit22 A22-07). A task read from list files (a custom task ``NAME=FOLDER:K``, or a VTAB-1k task in the folder
format) names its images by path; a harness ``model.pt`` in its run folder was trained on the images of its run's
``data.train_split`` (:func:`harness.importing.trained_data`): an image folder's split folder
(:func:`harness.data.splits.images_of`), or the images a manifest's split lists (data.source=manifest, or a pack of
one: audit23 A23-08), by path. A scored split listing one of those images would report training accuracy as transfer
accuracy, the case the harness refuses for harness import, ensemble ``--eval-data``, shift's OOD sets and
``save_pretrained``; the harness's own CIFAR tasks avoid it by drawing their images from the upstream held-out split.
A library module (audit23 A23-18): harness fewshot and downstream check the model they transfer, harness run's
transfer check the runs it will train, and harness upstream's few-shot monitor (``train.fewshot_tasks``) the run's
own training split."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from harness.tasks.catalogue import Task
from harness.tasks.taskset import TaskData

#: the splits the sweep scores (val200 chooses the learning rate and fits τ; test is the result)
SWEEP_SCORED = ("val200", "test")
#: the split the few-shot probe scores (its shots and held-out examples are drawn from train800val200)
FEWSHOT_SCORED = ("test",)


class TrainingImages(NamedTuple):
    """The images a model trained on, known by path: ``where`` the resolved image folder of its training split, or
    the resolved manifest file whose lines name them (``rows``: the manifest's ``(data.path, split)``,
    :func:`harness.data.manifest.manifest_rows`; None for an image folder); ``said`` names the split and where it is
    read (``data.train_split=train of image_folder at /abs/imf/train``), ``whence`` where that is recorded. For a
    model trained on scikit-learn digits (or a pack of them), ``digits`` is its data section (``where`` empty): the
    DEMO tasks draw their images from digits splits (:func:`harness.tasks.demo.digits_shared`, audit23 A23-12)."""

    where: str
    said: str
    whence: str
    rows: "Optional[tuple[str, str]]" = None
    digits: "Optional[dict]" = None


#: the spellings of model sources other than a harness model.pt (their training images are not known by path)
_OTHER_SOURCES = ("timm:", "torchvision:", "hf-hub:", "local-dir:")


def training_folder(upstream: str) -> "Optional[TrainingImages]":
    """The images a harness ``model.pt`` (or its run folder) was trained on (:func:`data_folder` of its run's data
    section, :func:`harness.importing.trained_data`); None for another source, a model outside its run folder, or
    data not read by path (a dataset known by name: a task list names files, never those)."""
    from harness.importing import trained_data

    text = str(upstream)
    text = text.removeprefix("local-dir:") if text.startswith("local-dir:") else text
    if text.startswith(_OTHER_SOURCES) or not Path(text).expanduser().exists():
        return None
    data, whence = trained_data(text, _recorded(Path(text).expanduser()))
    return data_folder(data, whence)


def _recorded(model: Path) -> "Optional[dict]":
    """The ``trained_on`` a model carries itself: a harness ``model.pt``'s (its ``extra``) or an export's
    (``config.json``'s ``harness.trained_on``), read without building the model; None when it records none or
    cannot be read (its loader names that). Digits are known by name, so this record is enough for the DEMO tasks'
    rule (audit24 A24-11: a copied model.pt or an export of a digits run passed it)."""
    from harness.io import read_json

    try:
        if model.is_dir():
            config = read_json(model / "config.json")
            got = (config.get("harness") or {}).get("trained_on") if isinstance(config, dict) else None
        else:
            from harness.models import read_checkpoint

            extra = read_checkpoint(model, mmap=True).get("extra")
            got = extra.get("trained_on") if isinstance(extra, dict) else None
    except (OSError, ValueError):  # not a harness model file: its loader says what it is
        return None
    return got if isinstance(got, dict) else None


def data_folder(data: "Optional[Mapping[str, Any]]", whence: str) -> "Optional[TrainingImages]":
    """:func:`training_folder` of a data section (``source``, ``name``, ``path``, ``train_split``; ``whence``: where
    it is recorded): its training split read from an image folder (the resolved folder) or a manifest (the resolved
    file, and the rows it lists: audit23 A23-08), or from a pack of either (as its index.json records what it packed);
    else None."""
    from harness.data.splits import images_of, pack_record

    if not data:
        return None
    source, path, split = data.get("source"), data.get("path"), data.get("train_split")
    packed = pack_record(path, split) if source == "shards" else None
    if packed and packed[0].get("source") in ("manifest", "digits"):  # a pack of a manifest (its rows) or digits
        source, path, split = packed[0].get("source"), packed[0].get("path"), packed[1]
    if source == "digits":
        said = f"data.train_split={data.get('train_split')} of digits" + (
            f" (the pack at {data.get('path')})" if packed else ""
        )
        return TrainingImages("", said, whence, digits={"source": "digits", "train_split": split})
    where = images_of(source, data.get("name"), path, split)
    if where is None or where[0] not in ("image_folder", "manifest") or where[2][0] != "at":
        return None
    said = f"data.train_split={data.get('train_split')} of {where[0]} at {where[2][1]}"
    if packed:
        said = (
            f"data.train_split={data.get('train_split')} of the pack at {data.get('path')}, packed from {where[0]} "
            f"at {where[2][1]}"
        )
    rows = (str(path), str(split)) if where[0] == "manifest" else None
    return TrainingImages(str(where[2][1]), said, whence, rows)


def check_scored_not_trained(
    upstream: str, tasks: "Sequence[Task]", settings: TaskData, scored: "Sequence[str]", flag: str
) -> None:
    """Refuse a task whose scored split (``scored``: :data:`SWEEP_SCORED`, :data:`FEWSHOT_SCORED`) lists an image
    the harness ``model.pt`` ``upstream`` was trained on (:func:`training_folder`: an image of its image folder, or one
    its manifest lists; paths compared resolved, links followed). Tasks not read from list files (TFDS, demo) and
    lists that cannot be read (the task check, :func:`harness.tasks.taskset.check_tasks`, names those) pass. Reads the
    lists only (no image).

    Args:
        flag: how messages name the model (``--upstream``, ``--model``).

    Raises:
        ValueError: naming the list file and line, the image, the model, its run's training split (a manifest's line)
            and the fix.
    """
    check_lists(training_folder(upstream), tasks, settings, scored, f"the model {flag} {upstream} was trained on")


def check_lists(
    trained: "Optional[TrainingImages]",
    tasks: "Sequence[Task]",
    settings: TaskData,
    scored: "Sequence[str]",
    who: str,
    other: str = "transfer a model not trained on those images",
) -> None:
    """:func:`check_scored_not_trained` for the training images ``trained`` (:func:`training_folder`,
    :func:`data_folder`; None: nothing to compare); ``who``: the message's words for whose training images those are
    (``the model --upstream runs/a/model.pt was trained on``); ``other``: the message's second fix. A manifest is read line by line (its image paths
    resolved, as its reader does; no image opened); one that cannot be read now is not compared."""
    if trained is None:
        return
    if trained.digits is not None:  # no list names a digits image; the DEMO tasks draw on digits splits
        _check_demo(trained, tasks, scored, who)
        return
    entries = _scored_entries(tasks, settings, scored)
    hit = _first_trained(trained, entries)
    if hit is None:
        return
    (real, listing, n, path, task), line = hit
    raise ValueError(
        f"{listing} line {n} names {os.path.relpath(path, listing.parent)!r}, an image {who} ({trained.said}"
        f"{f' line {line}' if line else ''} ({trained.whence})): task {task}'s {listing.stem} split would score the "
        f"model on its own training images, as transfer accuracy; list images no upstream model trained on in "
        f"{listing.name} (e.g. from the run's data.heldout_split or a folder of their own), or {other}"
    )


def _check_demo(trained: TrainingImages, tasks: "Sequence[Task]", scored: "Sequence[str]", who: str) -> None:
    """:func:`check_lists` of the DEMO tasks for a model trained on digits (:func:`harness.tasks.demo.digits_shared`).

    Raises:
        ValueError: naming the task, the model, its training split and the fix.
    """
    from harness.tasks.demo import digits_shared

    for t in tasks:
        shared = digits_shared(trained.digits, scored) if t.group == "demo" else None
        if shared:
            raise ValueError(
                f"task {t.name}: {shared}: the images {who} ({trained.said}, {trained.whence}) include those the "
                "task scores, which would report training accuracy as transfer accuracy; transfer a model trained "
                "on data.train_split=train of digits (the DEMO tasks never draw on it), or choose other tasks"
            )


def _scored_entries(tasks: "Sequence[Task]", settings: TaskData, scored: "Sequence[str]") -> "list[tuple]":
    """``(resolved path, list file, line, path, task name)`` of every line of the tasks' scored lists, in order."""
    from harness.tasks.folder_format import read_list, task_folder

    entries = []
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
            entries += [(os.path.realpath(p), listing, n, p, t.name) for p, n in zip(paths, lines)]
    return entries


def _first_trained(trained: TrainingImages, entries: "list[tuple]") -> "Optional[tuple[tuple, Optional[int]]]":
    """The first of ``entries`` (:func:`_scored_entries`) that is a training image, with its manifest line (None for
    an image folder), or None. A listed image with another name (a hard link) is compared by its file too (the same
    ``st_dev`` and ``st_ino``: :mod:`harness.data.file_identity`, audit25 A25-09)."""
    from harness.data.file_identity import file_id, linked_files

    mine = {k: e[0] for k, e in linked_files(e[0] for e in entries if os.path.isfile(e[0])).items()}
    if trained.rows is None:  # the folder and every link target under it (class folders linked from elsewhere)
        from harness.data.splits import split_regions

        regions = split_regions(("image_folder", None, ("at", trained.where))) or {trained.where}
        roots = tuple(r.rstrip(os.sep) + os.sep for r in regions)
        hit = next(((e, None) for e in entries if e[0] in regions or e[0].startswith(roots)), None)
        if hit is not None or not mine:  # the training images' files are read only where a listed one has two names
            return hit
        try:
            theirs = linked_files(regions)
        except OSError:  # not readable now: its reader names it
            return None
        return next(((e, None) for e in entries if file_id(e[0]) in theirs), None)
    from harness.data.folders import resolver
    from harness.data.manifest import manifest_rows

    wanted, found = {e[0] for e in entries}, {}
    if not wanted:
        return None
    root, split = trained.rows
    resolve = resolver(Path(root).expanduser())
    try:
        for m, image, _ in manifest_rows(Path(root).expanduser(), split):
            real = resolve(image)
            if real in wanted and real not in found:
                found[real] = m
            elif mine and (same := mine.get(file_id(real))) and same not in found:  # a hard link of a listed image
                found[same] = m
    except (OSError, ValueError):  # not readable now: not known to be those images (its reader names what is wrong)
        return None
    return next(((e, found[e[0]]) for e in entries if e[0] in found), None)
