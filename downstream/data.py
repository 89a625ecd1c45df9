"""Reading VTAB-1k splits: from TFDS (``tfds.data_source``) or from the PEFT folder format.

Both readers return a :class:`harness.data.sources.ImageDataset` with the task's classes and
check the split size (800 / 200 / 1000 / the test size) with an error that names the fix.

- TFDS: the task's split slices read with ``tfds.data_source`` from a user's ``data_dir`` where the
  datasets are prepared as array_record (TensorFlow is needed only to prepare them). Label
  transforms (CLEVR, KITTI, dSprites, sNORB) are applied here; grayscale images are tiled to RGB
  and dSprites' 0/1 images scaled to 0/255, as task_adaptation's base preprocessing does.
- Folder: ``<root>/<task>/{train800,val200,train800val200,test}.txt`` with ``relative/path label``
  lines (NOAH's ``get_vtab1k.py`` layout); the task folder may use any of the task's aliases.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any, Optional

import numpy as np
from PIL import Image

from downstream.tasks import SPLITS, Task
from harness.data.sources import FileImages, ImageDataset


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
        raise ValueError(f"{task.name} {split} has {n} examples in {where}, VTAB-1k expects {want}; regenerate the "
                         "split (TFDS version pinned in downstream.tasks) or point data_dir/root at the right data")


def tfds_split(task: Task, split: str, data_dir: Optional[str], validate: bool = True) -> ImageDataset:
    """``split`` of ``task`` read from TFDS data prepared under ``data_dir``.

    Raises:
        ValueError: unknown split, wrong size, labels out of range.
        FileNotFoundError: the dataset is not prepared under ``data_dir`` (the message says how).
    """
    import tensorflow_datasets as tfds

    sources, labels = [], []
    name, used = task.tfds, task.tfds
    for expr in task.split(split):
        try:
            src = tfds.data_source(name, split=expr, data_dir=data_dir, download=False)
        except Exception as e:  # TFDS raises several error types for data that is not there
            # newer TFDS releases drop old versions (oxford_iiit_pet 3.x -> 4.0.0): try the name alone
            try:
                name = task.tfds.split(":")[0]
                src = tfds.data_source(name, split=expr, data_dir=data_dir, download=False)
                used = f"{name} (not the pinned {task.tfds})"
            except Exception:
                raise FileNotFoundError(
                    f"TFDS {task.tfds} ({expr}) for task {task.name} is not prepared under data_dir {data_dir!r} "
                    f"({e}); prepare it with `pip install -e .[prepare]` then tfds.builder("
                    f"'{task.tfds.split(':')[0]}', data_dir=...).download_and_prepare(file_format='array_record')"
                ) from e
        sources.append(src)
        labels += [task.label(_example(src, j)) for j in range(len(src))]
    ds = ImageDataset(_TfdsTaskImages(sources, "image", task.tfds.startswith("dsprites")),
                      np.asarray(labels, dtype=np.int64), [str(c) for c in range(task.num_classes)],
                      f"VTAB-1k {task.name} {split} (TFDS {used}: {' + '.join(task.split(split))})")
    if validate:
        check_size(task, split, len(ds), f"TFDS data_dir {data_dir}")
    return ds


def _example(source: Any, j: int) -> dict:
    """One decoded example (TFDS prints a banner on stdout when TensorFlow is absent; keep it quiet)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return source[j]


def folder_split(task: Task, split: str, root: "str | Path", validate: bool = True,
                 folder: "Optional[Path]" = None) -> ImageDataset:
    """``split`` of ``task`` read from ``<root>/<task or alias>/<split>.txt`` (or ``<folder>/<split>.txt``).

    Raises:
        ValueError: unknown split, malformed line, wrong size, labels out of range.
        FileNotFoundError: no task folder or list file (the message lists what was looked for).
    """
    if split not in SPLITS:
        raise ValueError(f"unknown VTAB-1k split {split!r}: use one of {', '.join(SPLITS)}")
    root = Path(root)
    if folder is None:
        if not root.is_dir():
            raise FileNotFoundError(f"VTAB-1k folder root {str(root)!r} does not exist; pass --data-dir <root> "
                                    "holding one folder per task")
        names = [task.name, *task.aliases]
        folder = next((root / n for n in names if (root / n).is_dir()), None)
        if folder is None:
            raise FileNotFoundError(f"no folder for task {task.name} in {root} (looked for {', '.join(names)})")
    elif not folder.is_dir():
        raise FileNotFoundError(f"task folder {str(folder)!r} does not exist")
    listing = folder / f"{split}.txt"
    if not listing.is_file():
        raise FileNotFoundError(f"{listing} is missing; the folder format needs train800/val200/train800val200/test.txt")
    paths, labels = [], []
    for n, line in enumerate(listing.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ValueError(f"{listing} line {n}: expected 'relative/path label', got {line!r}")
        paths.append(str(folder / parts[0]))
        labels.append(int(parts[1]))
    ds = ImageDataset(FileImages(paths), np.asarray(labels, dtype=np.int64),
                      [str(c) for c in range(task.num_classes)], f"VTAB-1k {task.name} {split} ({listing})")
    if validate:
        check_size(task, split, len(ds), str(listing))
    return ds
