"""Image data sources: one small interface, several real readers.

A source turns a config into :class:`ImageDataset` splits. Every dataset yields
``(PIL.Image RGB, target)`` with ``target`` an ``int`` class index (single-label) or a float32
multi-hot vector ``[K]`` (multi-label, stored sparsely as :class:`LabelSets`), and carries
``num_classes``, ``class_names`` and ``multilabel``. Readers:

- ``digits``: scikit-learn's bundled 8x8 handwritten digits (the embedded default, no files);
- ``cifar10n``: CIFAR-10 JPEGs with the CIFAR-10N human label sets (``../shared/data/cifar10n``);
- ``image_folder``: ImageNet-style ``<root>/<split>/<class>/<image>`` folders;
- ``tfds``: any TFDS dataset prepared as array_record, read with ``tfds.data_source``;
- ``manifest``: a JFT-style CSV/JSONL list of image paths and label ids.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
from PIL import Image

from harness.data.cache import as_rgb, decoded_images, file_digest

SOURCES = ("digits", "cifar10n", "image_folder", "tfds", "manifest")
CIFAR10N_LABEL_SETS = ("clean", "aggre", "random1", "random2", "random3", "worse")


@dataclass
class LabelSets:
    """Ragged multi-label targets in CSR form: example i has labels ``ids[offsets[i]:offsets[i+1]]``.

    Memory is O(total labels), so 300M examples x 18k classes stay small; :meth:`multi_hot` builds
    one dense row at a time.
    """

    ids: np.ndarray
    offsets: np.ndarray

    @classmethod
    def from_lists(cls, lists: "Sequence[Sequence[int]]") -> "LabelSets":
        sizes = np.fromiter((len(v) for v in lists), dtype=np.int64, count=len(lists))
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        ids = np.fromiter((int(c) for v in lists for c in v), dtype=np.int64, count=int(offsets[-1]))
        return cls(ids, offsets)

    @classmethod
    def from_labels(cls, labels: np.ndarray) -> "LabelSets":
        """One label per example (a one-hot view of single-label data)."""
        return cls(np.asarray(labels, dtype=np.int64), np.arange(len(labels) + 1, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i]:self.offsets[i + 1]]

    def take(self, rows: np.ndarray) -> "LabelSets":
        """The label sets of ``rows``, in that order."""
        return LabelSets.from_lists([self[int(i)] for i in rows])

    def head(self, n: int) -> "LabelSets":
        return LabelSets(self.ids[: self.offsets[n]], self.offsets[: n + 1])

    def multi_hot(self, i: int, num_classes: int) -> np.ndarray:
        row = np.zeros(num_classes, dtype=np.float32)
        row[self[i]] = 1.0
        return row

    def to_dense(self, num_classes: int) -> np.ndarray:
        """``[N, K]`` float32 multi-hot (for evaluation-sized splits)."""
        dense = np.zeros((len(self), num_classes), dtype=np.float32)
        rows = np.repeat(np.arange(len(self)), np.diff(self.offsets))
        dense[rows, self.ids] = 1.0
        return dense


class ImageDataset(torch.utils.data.Dataset):
    """``(image, target)`` pairs from a random-access image reader and labels.

    Args:
        load_image: ``i -> PIL.Image`` (any mode; converted to RGB here).
        labels: ``[N]`` int64 class indices (single-label), or :class:`LabelSets` (multi-label:
            the target is a float32 multi-hot row ``[K]``).
        class_names: K names.
        description: one line saying what this split is (for run metadata and reports).

    Raises:
        ValueError: a label outside [0, K).
    """

    def __init__(self, load_image: Callable[[int], Image.Image], labels: "np.ndarray | LabelSets",
                 class_names: Sequence[str], description: str) -> None:
        self.load_image, self.class_names, self.description = load_image, list(class_names), description
        self.labels = labels if isinstance(labels, LabelSets) else np.asarray(labels, dtype=np.int64)
        k = len(self.class_names)
        flat = self.labels.ids if self.multilabel else self.labels
        if len(flat) and (flat.min() < 0 or flat.max() >= k):
            raise ValueError(f"labels must lie in [0, {k}), got [{flat.min()}, {flat.max()}] in {description}; "
                             "set the number of classes (data.num_classes) to cover them, or fix the labels")

    @property
    def multilabel(self) -> bool:
        return isinstance(self.labels, LabelSets)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> "tuple[Image.Image, Any]":
        target = self.labels.multi_hot(i, self.num_classes) if self.multilabel else int(self.labels[i])
        try:
            return self.load_image(i).convert("RGB"), target
        except (OSError, ValueError, SyntaxError) as e:  # what PIL raises for missing, truncated, corrupt files
            raise ValueError(f"cannot read image {self.image_name(i)} of {self.description} ({type(e).__name__}: "
                             f"{e}); replace or remove that file") from e

    def image_name(self, i: int) -> str:
        """The file (or archive member) of example ``i``, for messages; ``#i`` when it has none."""
        name = getattr(self.load_image, "name", None)
        return repr(name(i)) if name else f"#{i}"

    def check_images(self, sample: int = 32, seed: int = 0) -> None:
        """Decode the first, the last and ``sample`` random images, so a broken file is found before
        training starts rather than hours into it (the PIL loader decodes on the fly).

        Raises:
            ValueError: an image cannot be read (the message names the file).
        """
        n = len(self)
        rows = {0, n - 1} | set(np.random.default_rng(seed).choice(n, min(sample, n), replace=False).tolist())
        for i in sorted(r for r in rows if 0 <= r < n):
            self[i]

    def pixels(self, cache_dir: "str | os.PathLike | None" = None) -> "Optional[np.ndarray]":
        """All images as one ``[N, H, W, 3]`` uint8 array, if the reader can give one (in-memory arrays;
        zip archives, decoded once and cached on disk by :mod:`harness.data.cache`); else None.

        Raises:
            ValueError: the images differ in size or one cannot be decoded.
        """
        array = getattr(self.load_image, "array", None)
        return None if array is None else array(cache_dir)[: len(self)]

    def targets(self) -> np.ndarray:
        """All targets: ``[N]`` ints, or ``[N, K]`` multi-hot (multi-label)."""
        return self.labels.to_dense(self.num_classes) if self.multilabel else self.labels

    def with_labels(self, labels: "np.ndarray | LabelSets", description: Optional[str] = None) -> "ImageDataset":
        """The same images with other labels (noisy labels, one-hot views)."""
        return ImageDataset(self.load_image, labels, self.class_names, description or self.description)

    def head(self, n: int) -> "ImageDataset":
        """The first ``n`` examples."""
        labels = self.labels.head(n) if self.multilabel else self.labels[:n]
        return self.with_labels(labels, f"{self.description} (first {n})")


@dataclass
class DataConfig:
    """Which data to read and how to feed it.

    Attributes:
        source: one of ``digits``, ``cifar10n``, ``image_folder``, ``tfds``, ``manifest``.
        path: data location (cifar10n folder, image folder root, manifest file, TFDS data_dir).
        name: TFDS dataset name (``imagenet2012``, ``imagenet21k``...).
        train_split, eval_split: split names (per source; see :func:`build_split`).
        heldout_split: optional held-out split (e.g. digits ``val``) on which the final model's
            predictions are also saved, for post-hoc calibration (temperature scaling).
        label_set: cifar10n training labels (``clean``, ``aggre``, ``random1..3``, ``worse``).
        multilabel: cifar10n: train on the multi-hot set of the three annotators' labels.
        num_classes: manifest / tfds override of K (default: read from the data).
        image_key, label_key: TFDS feature names.
        label_noise: synthetic noise on single-label training data, see ``harness.data.noise``.
        image_size, eval_resize, crop_scale, hflip: augmentation (see ``harness.data.transforms``).
        crop_padding: p > 0 replaces the random resized crop by a random translation of up to p
            pixels (``RandomCrop(size, padding=p)``, the CIFAR augmentation of He et al. 2016).
        loader: ``array`` decodes the split once into a uint8 array (cached on disk for zip
            sources) and augments whole batches as tensor ops (``harness.data.batched``); ``pil``
            decodes and transforms each image on every epoch, in ``num_workers`` processes (any
            source, any image size); ``auto`` takes ``array`` where the source supports it
            (digits, cifar10n) and ``pil`` elsewhere.
        cache_dir: folder of the decoded-image cache (default ``$HARNESS_CACHE`` or ``~/.cache/harness``).
        allow_outside_root: let manifest entries name images outside the manifest's folder (``../``,
            absolute paths); off by default, so a list from elsewhere cannot read arbitrary files.
        batch_size, eval_batch_size, num_workers: loader settings (batch per process; workers of
            the ``pil`` loader).
        limit_train, limit_eval: use only the first N examples (quick runs); 0 = all.
    """

    source: str = "digits"
    path: Optional[str] = None
    name: Optional[str] = None
    train_split: str = "train"
    eval_split: str = "test"
    heldout_split: Optional[str] = None
    label_set: str = "clean"
    multilabel: bool = False
    num_classes: Optional[int] = None
    image_key: str = "image"
    label_key: str = "label"
    label_noise: dict = field(default_factory=dict)
    image_size: int = 32
    eval_resize: Optional[int] = None
    crop_scale: float = 0.08
    hflip: bool = True
    crop_padding: int = 0
    loader: str = "auto"
    cache_dir: Optional[str] = None
    allow_outside_root: bool = False
    batch_size: int = 64
    eval_batch_size: int = 256
    num_workers: int = 0
    limit_train: int = 0
    limit_eval: int = 0


def build_split(cfg: DataConfig, split: str) -> ImageDataset:
    """Read one split of the configured source.

    Raises:
        ValueError: unknown source or split, missing path, labels out of range.
        FileNotFoundError: the data is not where the config says (the message names the setting).
    """
    if cfg.source not in SOURCES:
        raise ValueError(f"unknown data source {cfg.source!r}: use one of {', '.join(SOURCES)}")
    reader = {"digits": _digits, "cifar10n": _cifar10n, "image_folder": _image_folder, "tfds": _tfds,
              "manifest": _manifest}[cfg.source]
    ds = reader(cfg, split)
    limit = cfg.limit_train if split == cfg.train_split else cfg.limit_eval
    return ds.head(limit) if limit and limit < len(ds) else ds


def _need_path(cfg: DataConfig, what: str) -> Path:
    if not cfg.path:
        raise ValueError(f"data.path is required for source {cfg.source!r}: set it to {what}")
    path = Path(cfg.path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"data.path {str(path)!r} does not exist; set data.path to {what}")
    return path


# ----------------------------------------------------------- image readers (picklable, for loader workers)
class ArrayImages:
    """Images from an in-memory uint8 array ``[N, H, W]`` or ``[N, H, W, 3]``."""

    def __init__(self, pixels: np.ndarray) -> None:
        self.pixels = pixels

    def __call__(self, i: int) -> Image.Image:
        return Image.fromarray(self.pixels[i])

    def array(self, cache_dir: Any = None) -> np.ndarray:
        return as_rgb(self.pixels)


class FileImages:
    """Images from files."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def __call__(self, i: int) -> Image.Image:
        return Image.open(self.paths[i])

    def name(self, i: int) -> str:
        return self.paths[i]


# ------------------------------------------------------------------------------------------ digits
DIGITS_SPLITS = {"train": (0.0, 0.6), "val": (0.6, 0.8), "test": (0.8, 1.0), "all": (0.0, 1.0)}


def _digits(cfg: DataConfig, split: str) -> ImageDataset:
    """scikit-learn's 1,797 8x8 digits; fixed stratified-by-shuffle split 60/20/20 (train/val/test)."""
    from sklearn.datasets import load_digits

    if split not in DIGITS_SPLITS:
        raise ValueError(f"unknown digits split {split!r}: use one of {', '.join(DIGITS_SPLITS)}")
    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))  # the same split for every run
    lo, hi = (int(round(f * len(order))) for f in DIGITS_SPLITS[split])
    idx = order[lo:hi]
    pixels = np.clip(d.images[idx] * (255.0 / 16.0), 0, 255).astype(np.uint8)
    return ImageDataset(ArrayImages(pixels), d.target[idx].astype(np.int64),
                        [str(c) for c in range(10)], f"scikit-learn digits, {split} split ({len(idx)} images 8x8)")


# ---------------------------------------------------------------------------------------- cifar10n
class _ZipImages:
    """Random access to images in a zip file; one handle per process (safe with DataLoader workers)."""

    def __init__(self, path: Path, members: Sequence[str]) -> None:
        self.path, self.members = path, list(members)
        self._zip: "tuple[int, Optional[zipfile.ZipFile]]" = (-1, None)

    def __getstate__(self) -> dict:
        return {"path": self.path, "members": self.members, "_zip": (-1, None)}

    def __call__(self, i: int) -> Image.Image:
        if self._zip[0] != os.getpid():
            self._zip = (os.getpid(), zipfile.ZipFile(self.path))
        with self._zip[1].open(self.members[i]) as f:
            img = Image.open(io.BytesIO(f.read()))
            img.load()
        return img

    def name(self, i: int) -> str:
        return f"{self.path}:{self.members[i]}"

    def array(self, cache_dir: "str | os.PathLike | None" = None) -> np.ndarray:
        """The members decoded to ``[N, H, W, 3]`` uint8, cached by the zip's SHA-256 (see harness.data.cache)."""
        with zipfile.ZipFile(self.path) as z:
            return decoded_images(self.path.stem, file_digest(self.path), self.members, z.read, cache_dir)


def _cifar10n(cfg: DataConfig, split: str) -> ImageDataset:
    """CIFAR-10N: ``train`` (50,000, labels from ``cfg.label_set`` or the multi-hot annotator set)
    and ``test`` (10,000, clean labels), read from ``cifar10_jpeg.zip`` + ``cifar10n_labels.npz``."""
    root = _need_path(cfg, "the cifar10n folder (holding cifar10_jpeg.zip and cifar10n_labels.npz)")
    zpath, lpath = root / "cifar10_jpeg.zip", root / "cifar10n_labels.npz"
    for p in (zpath, lpath):
        if not p.is_file():
            raise FileNotFoundError(f"{str(p)!r} is missing; data.path must be the cifar10n folder")
    labels = np.load(lpath, allow_pickle=False)
    classes = [str(c) for c in labels["classes"]]
    if split in CIFAR10N_TRAIN_SPLITS:
        members = [str(p) for p in labels["train_path"]]
        if cfg.multilabel:
            sets = np.stack([labels[f"random_label{i}"] for i in (1, 2, 3)], axis=1)
            targets = LabelSets.from_lists([sorted(set(row.tolist())) for row in sets])
            what = "multi-label: the set of the three annotators' labels"
        else:
            if cfg.label_set not in CIFAR10N_LABEL_SETS:
                raise ValueError(f"unknown cifar10n label_set {cfg.label_set!r}: use one of "
                                 f"{', '.join(CIFAR10N_LABEL_SETS)}")
            key = {"random1": "random_label1", "random2": "random_label2", "random3": "random_label3"}.get(
                cfg.label_set, f"{cfg.label_set}_label")
            targets = labels[key].astype(np.int64)
            what = f"{cfg.label_set} labels ({(targets != labels['clean_label']).mean():.2%} differ from clean)"
        rows = cifar10n_rows(split)
        members = [members[i] for i in rows]
        targets = targets.take(rows) if isinstance(targets, LabelSets) else targets[rows]
        return ImageDataset(_ZipImages(zpath, members), targets, classes,
                            f"CIFAR-10N {split} ({len(rows)} of the 50,000 training images), {what}")
    if split == "test":
        with zipfile.ZipFile(zpath) as z:
            names = sorted(n for n in z.namelist() if n.startswith("test/") and n.endswith(".jpg"))
        cls = [n.split("/")[1] for n in names]
        unknown = sorted(set(cls) - set(classes))
        if unknown:
            raise ValueError(f"test folders {unknown} are not CIFAR-10 classes {classes}")
        targets = np.array([classes.index(c) for c in cls], dtype=np.int64)
        if cfg.multilabel:
            targets = LabelSets.from_labels(targets)
        return ImageDataset(_ZipImages(zpath, names), targets, classes, "CIFAR-10 test, clean labels")
    raise ValueError(f"unknown cifar10n split {split!r}: use one of {', '.join(CIFAR10N_TRAIN_SPLITS)}, test")


CIFAR10N_TRAIN_SPLITS = ("train", "train45k", "val5k")


def cifar10n_rows(split: str) -> np.ndarray:
    """Rows of the 50,000 CIFAR-10N training images in a split: ``train`` all of them in the original
    order; ``val5k`` 5,000 held out at random (a fixed permutation, seed 0), with their noisy labels
    (what a user has for choosing hyper-parameters and post-hoc calibration); ``train45k`` the other
    45,000, in the original order."""
    if split == "train":
        return np.arange(50_000)
    held = np.sort(np.random.default_rng(0).permutation(50_000)[:5_000])
    return held if split == "val5k" else np.setdiff1d(np.arange(50_000), held)


# ------------------------------------------------------------------------------------ image folder
def _image_folder(cfg: DataConfig, split: str) -> ImageDataset:
    """``<path>/<split>/<class>/<image>`` read with torchvision's ImageFolder (class = folder name)."""
    from torchvision.datasets import ImageFolder

    root = _need_path(cfg, "a folder with one subfolder per split, each with one folder per class")
    if not (root / split).is_dir():
        raise FileNotFoundError(f"no split folder {str(root / split)!r}; expected <data.path>/<split>/<class>/...")
    folder = ImageFolder(str(root / split))
    paths = [p for p, _ in folder.samples]
    return ImageDataset(FileImages(paths), np.asarray(folder.targets, dtype=np.int64), folder.classes,
                        f"image folder {root / split} ({len(paths)} images)")


# -------------------------------------------------------------------------------------------- tfds
class _TfdsImages:
    def __init__(self, source: Any, key: str) -> None:
        self.source, self.key = source, key

    def __call__(self, i: int) -> Image.Image:
        img = np.asarray(self.source[i][self.key])
        return Image.fromarray(img[..., 0] if img.ndim == 3 and img.shape[-1] == 1 else img)


def _tfds_labels(tfds: Any, cfg: DataConfig, split: str, source: Any) -> np.ndarray:
    """All labels of a split, reading records without decoding their images where TFDS allows it."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # TFDS prints a banner when TensorFlow is absent
            fast = tfds.data_source(cfg.name, split=split, data_dir=cfg.path, download=False,
                                    decoders={cfg.image_key: tfds.decode.SkipDecoding()})
            return np.asarray([fast[i][cfg.label_key] for i in range(len(fast))], dtype=np.int64).reshape(-1)
    except Exception:  # SkipDecoding is not available everywhere (TFDS mocks need TensorFlow for it)
        return np.asarray([source[i][cfg.label_key] for i in range(len(source))], dtype=np.int64).reshape(-1)


def _tfds(cfg: DataConfig, split: str) -> ImageDataset:
    """Any TFDS dataset prepared as array_record under ``data.path`` (TFDS data_dir), read with
    ``tfds.data_source`` (no TensorFlow at read time). ``split`` is a TFDS split string
    (``train``, ``validation``, ``train[:90%]``...)."""
    import tensorflow_datasets as tfds

    if not cfg.name:
        raise ValueError("data.name is required for source 'tfds' (a TFDS dataset name, e.g. imagenet2012)")
    try:
        source = tfds.data_source(cfg.name, split=split, data_dir=cfg.path, download=False)
    except Exception as e:  # tfds raises several types for missing data
        raise FileNotFoundError(
            f"TFDS dataset {cfg.name!r} split {split!r} is not prepared under data_dir {cfg.path!r} ({e}); "
            "prepare it with `pip install -e .[prepare]` and tfds.builder(name, data_dir=...).download_and_prepare("
            "file_format='array_record')") from e
    feature = source.dataset_info.features[cfg.label_key]
    names = list(getattr(feature, "names", []) or [])
    labels = _tfds_labels(tfds, cfg, split, source)
    k = cfg.num_classes or len(names) or int(labels.max()) + 1
    names = names or [str(c) for c in range(k)]
    return ImageDataset(_TfdsImages(source, cfg.image_key), labels.astype(np.int64), names,
                        f"TFDS {cfg.name} {split} ({len(labels)} examples)")


# ---------------------------------------------------------------------------------------- manifest
def _manifest(cfg: DataConfig, split: str) -> ImageDataset:
    """JFT-style multi-label list: ``<path>`` is a folder with ``<split>.csv`` or ``<split>.jsonl``
    (and optionally ``classes.txt``, one name per line). CSV rows: ``image_path,label_ids`` with
    ids separated by spaces or ``;``; JSONL lines: ``{"path": ..., "labels": [ids]}``. Image
    paths are relative to the folder. Targets are multi-hot ``[N, K]``."""
    root = _need_path(cfg, "a folder holding <split>.csv or <split>.jsonl")
    rows: "list[tuple[str, list[int]]]" = []
    if (root / f"{split}.jsonl").is_file():
        for n, line in enumerate((root / f"{split}.jsonl").read_text().splitlines(), 1):
            if line.strip():
                try:
                    rec = json.loads(line)
                    rows.append((rec["path"], [int(v) for v in rec["labels"]]))
                except (ValueError, KeyError, TypeError) as e:
                    raise ValueError(f"{root / f'{split}.jsonl'} line {n}: expected "
                                     f'{{"path": ..., "labels": [ids]}} ({e})') from e
    elif (root / f"{split}.csv").is_file():
        with open(root / f"{split}.csv", newline="") as f:
            for n, rec in enumerate(csv.reader(f), 1):
                if not rec or (n == 1 and rec[0] in ("path", "image", "image_path")):
                    continue
                ids = rec[1].replace(";", " ").split() if len(rec) > 1 else []
                try:
                    rows.append((rec[0], [int(v) for v in ids]))
                except ValueError as e:
                    raise ValueError(f"{root / f'{split}.csv'} line {n}: label ids must be integers ({e})") from e
    else:
        raise FileNotFoundError(f"no {split}.csv or {split}.jsonl in {str(root)!r}")
    names_file = root / "classes.txt"
    names = [s for s in names_file.read_text().splitlines() if s.strip()] if names_file.is_file() else []
    top = max((max(ids) for _, ids in rows if ids), default=-1)
    k = cfg.num_classes or len(names) or top + 1
    paths = [str(root / p) for p, _ in rows]
    if not cfg.allow_outside_root:
        inside = root.resolve()
        for n, p in enumerate(paths, 1):
            if not Path(p).resolve().is_relative_to(inside):
                raise ValueError(f"{root / split}: image path {rows[n - 1][0]!r} (entry {n}) lies outside the manifest "
                                 f"folder {str(root)!r}; move the images under it, or set data.allow_outside_root=true "
                                 "if the list is yours and meant to point elsewhere")
    return ImageDataset(FileImages(paths), LabelSets.from_lists([ids for _, ids in rows]),
                        names or [str(c) for c in range(k)],
                        f"manifest {root} {split} ({len(rows)} images, {k} classes)")
