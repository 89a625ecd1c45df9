"""Reading VTAB-1k splits: from TFDS (``tfds.data_source``) or from the PEFT folder format.

Both readers return a :class:`harness.data.dataset.ImageDataset` with the task's classes, check the
split size (800 / 200 / 1000 / the test size) and the label range with errors that name the fix,
and attach ``dataset.source``: a dict saying what was read (TFDS name and version, or the list file).

- TFDS: the task's split slices read with ``tfds.data_source`` from a user's ``data_dir`` where the
  datasets are prepared as array_record (TensorFlow is needed only to prepare them). The task's
  pinned version pattern is read; only when TFDS has no such version (neither prepared in
  ``data_dir`` nor known to the installed TFDS) is the dataset's default version read instead, with
  a warning, and recorded. Label transforms (CLEVR, KITTI, dSprites, sNORB) are applied here;
  grayscale images are tiled to RGB and dSprites' 0/1 images scaled to 0/255, as task_adaptation's
  base preprocessing does.
- Folder: ``<root>/<task>/{train800,val200,train800val200,test}.txt`` with ``relative/path label``
  lines (NOAH's ``get_vtab1k.py`` layout); the task folder may use any of the task's aliases. A path
  is relative to the task folder and may not leave it (``../``, absolute paths, a symbolic link to a folder
  outside it: the image folders' rule, :mod:`harness.data.folders`) unless the caller allows it; an image that is missing or does not decode raises an error naming the file and line
  (through :meth:`ImageDataset.__getitem__`).

:func:`check_split` checks a split before any training: the list (format, labels, paths, size),
that every listed file exists, and that a sample of the images decode; :func:`check_disjoint` that a task's test
split lists no image its other splits list, nor val200 one of train800.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from PIL import Image

from harness.data.cache import rgb_image
from harness.data.dataset import ImageDataset
from harness.data.folders import inside, leaving_link, resolver
from harness.tasks.catalogue import SPLITS, Task

#: TFDS examples decoded per split by :func:`check_tfds_split` (evenly spaced, first and last included)
TFDS_SAMPLE = 8


class _TfdsTaskImages:
    """Random access to the images of several TFDS sources laid end to end."""

    def __init__(self, sources: "list[Any]", key: str, binary: bool) -> None:
        self.sources, self.key, self.binary = sources, key, binary
        self.starts = np.cumsum([0] + [len(s) for s in sources])

    def __call__(self, i: int) -> Image.Image:
        s = int(np.searchsorted(self.starts, i, side="right") - 1)
        img = np.asarray(self.sources[s][i - self.starts[s]][self.key])
        if self.binary:
            img = img * 255
        if img.ndim == 3 and img.shape[-1] == 1:
            img = np.repeat(img, 3, axis=-1)
        return Image.fromarray(img.astype(np.uint8))


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


def check_size(task: Task, split: str, n: int, where: str) -> None:
    """Raise ValueError unless ``n`` is the split's VTAB-1k size (when known)."""
    want = task.expected_size(split)
    if want is not None and n != want:
        raise ValueError(
            f"{task.name} {split} has {n} examples in {where}, VTAB-1k expects {want}; regenerate the "
            "split (TFDS version pinned in harness.tasks.catalogue) or point data_dir/root at the right data"
        )


def check_labels(
    task: Task, labels: np.ndarray, where: str, lines: Optional[Sequence[int]] = None, first: int = 0
) -> None:
    """Raise ValueError unless every label lies in [0, K) of ``task``; the message names the fix.

    Args:
        labels: ``[N]`` class indices.
        where: the list file (``lines``: their line numbers there) or the TFDS source (``lines`` None:
            examples ``first``, ``first + 1``, ...) they come from.

    Raises:
        ValueError: a label outside [0, K). Custom tasks are told to give the right K in their task line
            (``NAME=FOLDER:K``); VTAB-1k tasks have a fixed K, so their data is the wrong data.
    """
    labels = np.asarray(labels, dtype=np.int64)
    k = task.num_classes
    bad = np.flatnonzero((labels < 0) | (labels >= k))
    if not bad.size:
        return
    i = int(bad[0])
    at = f"line {lines[i]}" if lines is not None else f"example {first + i}"
    head = f"{where} {at}: label {labels[i]}; labels must lie in [0, {k}) for task {task.name}"
    if len(labels) > 1:
        head += f" ({bad.size} outside; the labels run from {labels.min()} to {labels.max()})"
    if task.group == "custom" and labels.min() >= 0:
        spec = f"{task.name}={task.tfds.removeprefix('folder:')}:{int(labels.max()) + 1}"
        fix = f"if the task has {int(labels.max()) + 1} classes, say so in its task line: {spec}"
    elif task.group == "custom":
        fix = "class labels count from 0: fix the negative labels in the list"
    elif lines is None:
        fix = f"this is not the data task {task.name} expects: prepare TFDS {task.tfds} (see harness.tasks.catalogue)"
    else:
        fix = (
            f"{task.name} has {k} classes in VTAB-1k, so this list is not a {task.name} split: regenerate it "
            "with the VTAB-1k export, or point --data-dir at the right root"
        )
    raise ValueError(f"{head}; {fix}")


# ------------------------------------------------------------------------------------------- TFDS
def _not_prepared(task: Task, data_dir: Optional[str], e: BaseException) -> FileNotFoundError:
    return FileNotFoundError(
        f"TFDS {task.tfds} for task {task.name} is not prepared under data_dir {data_dir!r} ({type(e).__name__}: "
        f"{e}); prepare it with `pip install -e .[prepare]` then tfds.builder('{task.tfds}', data_dir=...)"
        ".download_and_prepare(file_format='array_record')"
    )


def _tfds_builder(task: Task, data_dir: Optional[str]) -> "tuple[Any, dict]":
    """The TFDS builder of ``task``'s pinned version, or of the default version when TFDS has no version
    matching the pin (warned); and the source record ``{format, name, version, pinned, fallback,
    library}`` (``fallback``: the pin was not available; ``library``: the TFDS release)."""
    from harness.extras import require

    tfds = require("tensorflow_datasets", "reading VTAB-1k tasks from TFDS (--data-format tfds)")

    base, fallback = task.tfds.split(":")[0], False
    try:
        builder = tfds.builder(task.tfds, data_dir=data_dir)
    except AssertionError as e:  # tfds DatasetBuilder._pick_version: no such version in data_dir nor in code
        if "cannot be loaded at version" not in str(e):
            raise _not_prepared(task, data_dir, e) from e
        try:
            builder = tfds.builder(base, data_dir=data_dir)
        except Exception as e2:
            raise _not_prepared(task, data_dir, e2) from e2
        fallback = True
        warnings.warn(
            f"TFDS has no version {task.tfds} for task {task.name} ({e}); reading {base} "
            f"{builder.version} instead, which may hold other examples than VTAB-1k's: prepare the pinned "
            "version (with a TFDS release that has it) to match the benchmark",
            stacklevel=2,
        )
    except Exception as e:  # unknown name, unreadable dataset_info.json, ...
        raise _not_prepared(task, data_dir, e) from e
    return builder, {
        "format": "tfds",
        "name": base,
        "version": str(builder.version),
        "pinned": task.tfds,
        "fallback": fallback,
        "library": tfds.__version__,
    }


def _tfds_sources(task: Task, split: str, data_dir: Optional[str]) -> "tuple[list, dict]":
    """Random-access sources of the split's TFDS slices (all of one version) and the source record."""
    from harness.extras import require

    tfds = require("tensorflow_datasets", "reading VTAB-1k tasks from TFDS (--data-format tfds)")

    builder, source = _tfds_builder(task, data_dir)
    exact = f"{source['name']}:{source['version']}"  # read exactly the version recorded
    sources = []
    for expr in task.split(split):
        try:
            sources.append(tfds.data_source(exact, split=expr, data_dir=data_dir, download=False))
        except Exception as e:  # TFDS raises several types for data that is not there (NotImplementedError ...)
            raise _not_prepared(task, data_dir, e) from e
    return sources, source


def _tfds_where(task: Task, split: str, source: dict) -> str:
    return f"TFDS {source['name']} {source['version']} ({' + '.join(task.split(split))})"


def tfds_split(task: Task, split: str, data_dir: Optional[str], validate: bool = True) -> ImageDataset:
    """``split`` of ``task`` read from TFDS data prepared under ``data_dir``.

    Warns (UserWarning) when the pinned version does not exist and the default version is read; the
    version read is in ``dataset.source``.

    Raises:
        ValueError: unknown split, wrong size, labels out of range.
        FileNotFoundError: the dataset is not prepared under ``data_dir`` (the message says how).
    """
    sources, source = _tfds_sources(task, split, data_dir)
    where = _tfds_where(task, split, source)
    labels = np.asarray([task.label(_example(s, j)) for s in sources for j in range(len(s))], dtype=np.int64)
    check_labels(task, labels, where)
    ds = ImageDataset(
        _TfdsTaskImages(sources, "image", task.tfds.startswith("dsprites")),
        labels,
        [str(c) for c in range(task.num_classes)],
        f"VTAB-1k {task.name} {split} ({where})",
    )
    ds.source = source
    if validate:
        check_size(task, split, len(ds), f"TFDS data_dir {data_dir}")
    return ds


def _example(source: Any, j: int) -> dict:
    """One decoded example (TFDS prints a banner on stdout when TensorFlow is absent; keep it quiet)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return source[int(j)]


def _sample(n: int, k: int = TFDS_SAMPLE) -> "list[int]":
    return sorted({int(i) for i in np.linspace(0, n - 1, min(n, k)).round()}) if n else []


def check_tfds_split(task: Task, split: str, data_dir: Optional[str], check_sizes: bool = True) -> dict:
    """Check ``split`` of ``task`` in TFDS without reading it all: it is prepared, has its VTAB-1k size
    (when ``check_sizes``), and a sample of its examples decode with labels in range. Returns the
    source record (name and version read).

    Raises:
        FileNotFoundError: not prepared. ValueError: wrong size, an example that does not decode, a
            label out of range.
    """
    sources, source = _tfds_sources(task, split, data_dir)
    where = _tfds_where(task, split, source)
    if check_sizes:
        check_size(task, split, sum(len(s) for s in sources), f"TFDS data_dir {data_dir}")
    images = _TfdsTaskImages(sources, "image", task.tfds.startswith("dsprites"))
    for i in _sample(int(images.starts[-1])):
        s = int(np.searchsorted(images.starts, i, side="right") - 1)
        try:
            label = task.label(_example(sources[s], i - images.starts[s]))
            rgb_image(images(i))
        except Exception as e:
            raise ValueError(
                f"{where} example {i} cannot be decoded ({type(e).__name__}: {e}); the prepared data "
                f"is damaged: prepare {task.tfds} again"
            ) from e
        check_labels(task, np.asarray([label]), where, first=i)
    return source


# ----------------------------------------------------------------------------------------- folder
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
            is an extra column: rename the file); a path leaving the list's folder (``../``, absolute) or reaching
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
    for n, line in enumerate(listing.read_text().splitlines(), 1):
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
    (:data:`DISJOINT_SPLITS`). ``splits``: the task's splits read by :func:`folder_split`, by name (others, and splits
    not read from lists, are skipped). An image is its listed file, resolved (``os.path.realpath``: ``./a.png``,
    ``b/../a.png`` and a symbolic link to it are ``a.png``); only paths are compared, no file is read.

    Raises:
        ValueError: naming both list files, the first shared image with its line in each, how many images are
            shared, the rule and the fix.
    """
    read = {}  # split -> (its list, the resolved path of each line, {resolved path: position of its first line})
    for name, ds in splits.items():
        if isinstance(ds.load_image, ListedImages):
            resolved = [os.path.realpath(p) for p in ds.load_image.paths]
            read[name] = (ds.load_image, resolved, {p: i for i, p in reversed(list(enumerate(resolved)))})
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
