"""Reading VTAB-1k splits from the PEFT folder format: ``<root>/<task>/{train800,val200,train800val200,test}.txt``
with ``relative/path label`` lines (NOAH's ``get_vtab1k.py`` layout); the task folder may use any of the task's
aliases. A path is relative to the task folder and may not leave it (``../``, absolute paths, a symbolic link to a
folder outside it: the image folders' rule, :mod:`harness.data.folders`) unless the caller allows it; an image that
is missing or does not decode raises an error naming the file and line (through :meth:`ImageDataset.__getitem__`).
A list is read as UTF-8, a leading byte-order mark (Windows editors) skipped; a list names each image once.

:func:`check_split` checks a split before any training: the list (format, labels, paths, size), that every listed
file exists, and that a sample of the images decode; :func:`check_disjoint` that a task's splits agree: its test
split lists no image its other splits list, nor val200 one of train800; an image listed in two splits has one label;
train800val200 lists the images of train800 and val200 (VTAB-1k's union).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from PIL import Image

from harness.data.dataset import ImageDataset
from harness.data.folders import inside, leaving_link, resolver
from harness.tasks.catalogue import SPLITS, Task
from harness.tasks.readers import check_labels, check_size


class ListedImages:
    """Images named by a split list: ``i -> PIL.Image``, decoded at once, so a missing, truncated or
    corrupt file fails when read and :class:`ImageDataset` names it (with its list line, :meth:`name`)."""

    def __init__(self, paths: Sequence[str], listing: Path, lines: Sequence[int]) -> None:
        self.paths, self.listing, self.lines = list(paths), listing, list(lines)

    def name(self, i: int) -> str:
        return f"{self.paths[i]} (listed in {self.listing} line {self.lines[i]})"

    def __call__(self, i: int) -> Image.Image:
        img = Image.open(self.paths[i])
        img.load()
        return img


def task_folder(task: Task, root: "str | Path") -> Path:
    """``<root>/<task name or alias>``.

    Raises:
        FileNotFoundError: no root, or no folder for the task (the message lists the names looked for).
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(
            f"VTAB-1k folder root {str(root)!r} does not exist; pass --data-dir <root> holding one folder per task"
        )
    names = [task.name, *task.aliases]
    folder = next((root / n for n in names if (root / n).is_dir()), None)
    if folder is None:
        raise FileNotFoundError(f"no folder for task {task.name} in {root} (looked for {', '.join(names)})")
    return folder


def read_list(listing: Path, allow_outside: bool = False) -> "tuple[list[str], np.ndarray, list[int]]":
    """Parse a split list: one ``relative/path label`` per line (blank lines skipped).

    Returns:
        (paths joined to the list's folder, ``[N]`` int64 labels, line numbers).

    Raises:
        FileNotFoundError: no list file.
        ValueError: a line that is not exactly two columns with an integer label (a path with a space
            is an extra column: rename the file); an image listed twice (paths compared normalised:
            ``./a.png`` is ``a.png``), naming both lines; a path leaving the list's folder (``../``, absolute) or reaching
            out of it through a symbolic link (the image folders' rule, :func:`harness.data.folders.resolver` and
            :func:`~harness.data.folders.inside`: the message names the line, the link, where it points and the
            fix) unless ``allow_outside``. Each path's folder is resolved once, its file name only when it is a
            link (one ``lstat`` a line: ~3,000 lines in a few ms).
    """
    if not listing.is_file():
        raise FileNotFoundError(
            f"{listing} is missing; the folder format needs train800/val200/train800val200/test.txt"
        )
    folder = listing.parent
    real_root, resolve = os.path.realpath(folder), resolver(folder)
    paths, labels, lines = [], [], []
    first: "dict[str, tuple[int, str]]" = {}  # a normalised path -> the line that lists it first, and its label
    for n, line in enumerate(listing.read_text(encoding="utf-8-sig").splitlines(), 1):  # a BOM is no path
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise ValueError(
                f"{listing} line {n}: expected 'relative/path label' (2 columns), got {len(parts)}: "
                f"{line!r}; a path cannot hold spaces in this format (rename the file)"
            )
        rel, label = parts
        try:
            labels.append(int(label))
        except ValueError:
            raise ValueError(
                f"{listing} line {n}: label {label!r} is not an integer class index: {line!r}; the "
                "second column is the class, 0 to K-1"
            ) from None
        if not allow_outside and (os.path.isabs(rel) or os.path.normpath(rel).split(os.sep)[0] == os.pardir):
            raise ValueError(
                f"{listing} line {n}: path {rel!r} leaves the task folder {folder}; list images by "
                "their path inside it (images/x.jpg), or allow paths outside it with "
                "--allow-outside-paths (SweepSettings.allow_outside_paths=True) if you trust the list"
            )
        if not allow_outside and not inside(resolve(rel), real_root):
            link, real = leaving_link(str(folder), str(folder / rel), real_root)
            raise ValueError(
                f"{listing} line {n}: {link!r} is a link to {real!r}, outside the task folder {folder}, so image "
                f"{rel!r} would be read from there; copy the images under the task folder (or replace the link by "
                "one to a folder under it), or pass --allow-outside-paths (SweepSettings.allow_outside_paths=True) "
                "if the folder is yours and the link is meant to point elsewhere"
            )
        key = os.path.normpath(rel)
        if key in first:
            raise ValueError(
                f"{listing} line {n} lists {rel!r} (label {label}) again, first listed on line {first[key][0]} "
                f"(label {first[key][1]}): a split names each image once (twice, it is trained or scored twice, and "
                "two labels contradict each other); remove one of the lines"
            )
        first[key] = (n, label)
        paths.append(str(folder / rel))
        lines.append(n)
    return paths, np.asarray(labels, dtype=np.int64), lines


def folder_split(
    task: Task,
    split: str,
    root: "str | Path",
    validate: bool = True,
    folder: "Optional[Path]" = None,
    allow_outside: bool = False,
) -> ImageDataset:
    """``split`` of ``task`` read from ``<root>/<task or alias>/<split>.txt`` (or ``<folder>/<split>.txt``).

    Args:
        validate: check the VTAB-1k split size.
        allow_outside: accept list paths outside the task folder (``../x.jpg``, ``/data/x.jpg``).

    Raises:
        ValueError: unknown split, malformed line, path outside the folder, wrong size, labels out of range.
        FileNotFoundError: no task folder or list file (the message lists what was looked for).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown VTAB-1k split {split!r}: use one of {', '.join(SPLITS)}")
    if folder is None:
        folder = task_folder(task, root)
    elif not folder.is_dir():
        raise FileNotFoundError(f"task folder {str(folder)!r} does not exist")
    listing = folder / f"{split}.txt"
    paths, labels, lines = read_list(listing, allow_outside)
    check_labels(task, labels, str(listing), lines)
    ds = ImageDataset(
        ListedImages(paths, listing, lines),
        labels,
        [str(c) for c in range(task.num_classes)],
        f"VTAB-1k {task.name} {split} ({listing})",
    )
    ds.source = {"format": "folder", "list": str(listing)}
    if validate:
        check_size(task, split, len(ds), str(listing))
    return ds


def check_split(ds: ImageDataset) -> None:
    """Check a split read by :func:`folder_split` before training: every listed file exists, and the
    first, the last and a seeded random sample of images decode (:meth:`ImageDataset.check_images`).

    Raises:
        FileNotFoundError: listed files that do not exist (the message names them and their lines).
        ValueError: an empty split, or an image that does not decode (the message names the file and its line).
    """
    images = ds.load_image
    if len(ds) == 0:
        where = images.listing if isinstance(images, ListedImages) else ds.description
        raise ValueError(
            f"{where} lists no examples: every split of a task is trained or scored on, so each needs at least one "
            "(`IMAGE LABEL` per line); list the split's images there"
        )
    if isinstance(images, ListedImages):
        missing = [i for i, p in enumerate(images.paths) if not os.path.isfile(p)]
        if missing:
            shown = "; ".join(images.name(i) for i in missing[:3])
            raise FileNotFoundError(
                f"{len(missing)} of {len(images.paths)} images listed in {images.listing} do not "
                f"exist: {shown}{' ...' if len(missing) > 3 else ''}; fix the paths (relative "
                f"to {images.listing.parent}) or restore the files"
            )
    ds.check_images()


#: pairs ``(trained, held out)`` of a task's folder splits that must share no image (:func:`check_disjoint`): the test
#: split is scored, so no fine-tune may train on it (train800val200 is VTAB-1k's union of train800 and val200, but the
#: lists are checked one by one); val200 scores the train800 fine-tunes that choose the learning rate and fit τ
DISJOINT_SPLITS = (("train800val200", "test"), ("train800", "test"), ("val200", "test"), ("train800", "val200"))


def check_disjoint(splits: "dict[str, ImageDataset]") -> None:
    """Refuse a folder task whose held-out split lists an image a split trained before it lists
    (:data:`DISJOINT_SPLITS`), that lists one image twice (through a link: :func:`_check_once`), whose splits give
    one image two labels (:func:`_check_labels_agree`), or whose train800val200 is not train800 and val200 together
    (:func:`_check_union`). ``splits``: the task's splits read by :func:`folder_split`, by name (others, and splits
    not read from lists, are skipped). An image is its listed file, resolved (``os.path.realpath``: ``./a.png``,
    ``b/../a.png`` and a symbolic link to it are ``a.png``), and a hard link to it too (the same ``st_dev`` and
    ``st_ino``: :class:`harness.data.file_identity.SameFiles`, audit25 A25-09); no image is read.

    Raises:
        ValueError: naming both list files, the first shared image with its line in each, how many images are
            shared, the rule and the fix.
    """
    from harness.data.file_identity import SameFiles

    read = {}  # split -> (its list, the resolved path of each line, {resolved path: position of its first line})
    canon = SameFiles()  # a hard link is the image it links (audit25 A25-09)
    for name, ds in splits.items():
        if isinstance(ds.load_image, ListedImages):
            resolved = [canon(os.path.realpath(p)) for p in ds.load_image.paths]
            read[name] = (ds.load_image, resolved, {p: i for i, p in reversed(list(enumerate(resolved)))})
            _check_once(*read[name])
    _check_labels_agree(read, splits)
    _check_union(read)
    for trained, held in DISJOINT_SPLITS:
        if trained not in read or held not in read:
            continue
        (a, _, seen), (b, resolved, _) = read[trained], read[held]
        shared = [i for i, p in enumerate(resolved) if p in seen]
        if not shared:
            continue
        i, j = shared[0], seen[resolved[shared[0]]]
        role = (
            "the test split is scored, so no fine-tune may train on its images"
            if held == "test"
            else "val200 scores the fine-tunes trained on train800 that choose the learning rate and fit τ"
        )
        raise ValueError(
            f"{b.listing} line {b.lines[i]} lists {b.paths[i]}, the image {a.listing} line {a.lines[j]} lists "
            f"({len(shared)} of the {len(resolved)} lines of {b.listing.name} list images of {a.listing.name}): "
            f"{role}; list each image in only one of {b.listing.name} and {a.listing.name} (give the {held} split "
            "images of its own)"
        )


def _check_once(images: ListedImages, resolved: "list[str]", first: "dict[str, int]") -> None:
    """A split lists each image once, compared resolved (audit17 A17-03: ``img2/1000.png`` through a link ``img2 ->
    img`` is ``img/1000.png``; :func:`read_list` compares the listed paths themselves); ``first``: each resolved path's
    first position.

    Raises:
        ValueError: naming the list, both lines, the two paths and the image they reach.
    """
    again = next((i for i, p in enumerate(resolved) if first[p] != i), None)
    if again is not None:
        j = first[resolved[again]]
        raise ValueError(
            f"{images.listing} line {images.lines[again]} lists {images.paths[again]}, the image line {images.lines[j]} "
            f"lists as {images.paths[j]} (both are {resolved[again]}, through a link): a split names each image once "
            "(twice, it is trained or scored twice); remove one of the lines"
        )


def _check_labels_agree(read: dict, splits: "dict[str, ImageDataset]") -> None:
    """An image listed in two splits of one task (train800 and train800val200) has one label in both; ``read``: as
    :func:`check_disjoint` builds it (split -> its list, resolved paths, first position of each path), ``splits``
    the datasets (their labels).

    Raises:
        ValueError: naming both lists, their lines, the image and the two labels.
    """
    label: "dict[str, tuple[ListedImages, int, int]]" = {}  # resolved path -> (its list, position, label)
    for name, (images, resolved, _) in read.items():
        for i, p in enumerate(resolved):
            y = int(splits[name].labels[i])
            if p in label and label[p][2] != y:
                other, j, z = label[p]
                raise ValueError(
                    f"{images.listing} line {images.lines[i]} labels {images.paths[i]} {y}, and {other.listing} line "
                    f"{other.lines[j]} labels the same image {z}: an image has one class in every split of a task; "
                    "correct the label in one of the lists"
                )
            label.setdefault(p, (images, i, y))


def _check_union(read: dict) -> None:
    """train800val200 lists the images of train800 and val200 and no other (VTAB-1k's union: the learning rate chosen
    on train800 -> val200 is the one the final fine-tune on train800val200 uses).

    Raises:
        ValueError: naming the list, the first image of one list missing from the other, how many differ, the fix.
    """
    if not {"train800", "val200", "train800val200"} <= set(read):
        return
    union, _, _ = read["train800val200"]
    whole = set(read["train800val200"][1])
    parts = set(read["train800"][1]) | set(read["val200"][1])
    if whole == parts:
        return
    extra = [i for i, p in enumerate(read["train800val200"][1]) if p not in parts]
    if extra:
        i = extra[0]
        where = f"{union.listing} line {union.lines[i]} lists {union.paths[i]}, which neither train800.txt nor val200.txt lists"
    else:
        name, (images, resolved, _) = next((n, read[n]) for n in ("train800", "val200") if set(read[n][1]) - whole)
        i = next(i for i, p in enumerate(resolved) if p not in whole)
        where = f"{images.listing} line {images.lines[i]} lists {images.paths[i]}, which {union.listing.name} does not"
    raise ValueError(
        f"{where} ({len(whole ^ parts)} images differ): train800val200 is train800 and val200 together (the learning "
        "rate chosen on train800 -> val200 is the one the final fine-tune on train800val200 uses); list in "
        "train800val200.txt exactly the lines of train800.txt and val200.txt"
    )
