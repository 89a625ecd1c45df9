"""Reading VTAB-1k splits from TFDS (``tfds.data_source``); the PEFT folder format is
:mod:`harness.tasks.folder_format`, which shares this module's size and label checks.

Both readers return a :class:`harness.data.dataset.ImageDataset` with the task's classes, check the
split size (800 / 200 / 1000 / the test size) and the label range with errors that name the fix
(:func:`check_size`, :func:`check_labels`), and attach ``dataset.source``: a dict saying what was read (TFDS name and
version, or the list file).

The task's split slices are read with ``tfds.data_source`` from a user's ``data_dir`` where the
datasets are prepared as array_record (TensorFlow is needed only to prepare them). The task's
pinned version pattern is read; only when TFDS has no such version (neither prepared in
``data_dir`` nor known to the installed TFDS) is the dataset's default version read instead, with
a warning, and recorded. Label transforms (CLEVR, KITTI, dSprites, sNORB) are applied here;
grayscale images are tiled to RGB and dSprites' 0/1 images scaled to 0/255, as task_adaptation's
base preprocessing does.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any, Optional, Sequence

import numpy as np
from PIL import Image

from harness.data.cache import rgb_image
from harness.data.dataset import ImageDataset
from harness.tasks.catalogue import Task

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
