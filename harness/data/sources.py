"""Image data sources: one small interface, several real readers.

A source turns a config (:class:`harness.data.config.DataConfig`) into
:class:`harness.data.dataset.ImageDataset` splits. Every dataset yields ``(PIL.Image RGB, target)``
with ``target`` an ``int`` class index (single-label) or a float32 multi-hot vector ``[K]``
(multi-label, stored sparsely as :class:`~harness.data.dataset.LabelSets`), and carries
``num_classes``, ``class_names`` and ``multilabel``. Readers:

- ``digits``: scikit-learn's bundled 8x8 handwritten digits (the embedded default, no files);
- ``cifar10n``: CIFAR-10 JPEGs with the CIFAR-10N human label sets (``../shared/data/cifar10n``);
- ``image_folder``: ImageNet-style ``<root>/<split>/<class>/<image>`` folders;
- ``tfds``: any TFDS dataset prepared as array_record, read with ``tfds.data_source``;
- ``manifest``: a JFT-style CSV/JSONL list of image paths and label ids.
"""

from __future__ import annotations

import array
import contextlib
import functools
import io
import os
import zipfile
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
from PIL import Image

from harness.data.cache import decoded_images, file_digest
from harness.data.config import LABEL_SETS, SOURCES, STREAM_SOURCES, DataConfig
from harness.data.dataset import ArrayImages, FileImages, ImageDataset, LabelSets, Strings
from harness.data.folders import inside, read_image_folder, resolver
from harness.data.manifest import manifest_file as _manifest_file
from harness.data.manifest import manifest_rows as _manifest_rows
from harness.data.splits import CIFAR10N_TRAIN_SPLITS, DIGITS_SPLITS, cifar10n_rows
from harness.io import check_location


def build_split(cfg: DataConfig, split: str) -> ImageDataset:
    """Read one split of the configured source.

    Raises:
        ValueError: unknown source or split, missing path, labels out of range; a stream source (``shards``).
        FileNotFoundError: the data is not where the config says (the message names the setting).
    """
    if cfg.source in STREAM_SOURCES:
        raise ValueError(
            f"data.source={cfg.source!r} (data.path={cfg.path}) is read as a stream, not by index, and this step reads "
            f"the split by index: give the data source the pack was made from (its data.source and data.path; "
            f"{cfg.path}/<split>/index.json names it); from Python, stream the pack with harness.data.shards.shard_loader"
        )
    if cfg.source not in SOURCES:
        raise ValueError(f"unknown data source {cfg.source!r}: use one of {', '.join(SOURCES)}")
    reader = {
        "digits": _digits,
        "cifar10n": _cifar10n,
        "image_folder": _image_folder,
        "tfds": _tfds,
        "manifest": _manifest,
    }[cfg.source]
    ds = reader(cfg, split)
    if cfg.num_classes is not None and ds.num_classes != cfg.num_classes:  # manifest and tfds take it as K
        raise ValueError(
            f"data.num_classes={cfg.num_classes}, but the {cfg.source} data has {ds.num_classes} classes: unset it "
            "(data.num_classes=null); it sets K for a manifest or a TFDS dataset whose labels do not show them all"
        )
    limit = getattr(cfg, limit_key(cfg, split))  # at most that many: a larger limit reads the whole split
    return ds.head(limit) if limit and limit < len(ds) else ds


def limit_key(cfg: DataConfig, split: str) -> str:
    """The data key that limits ``split`` when it is read (``limit_train`` or ``limit_eval``): by role, the evaluated
    split takes ``limit_eval`` even where it is also the training split (``harness import`` with eval_split=train; an
    upstream run refuses that pair, :func:`harness.data.config.check_data`; audit12 A12-11), and every split but the
    training split (the held-out split, a packed test split) takes it too."""
    return "limit_train" if split == cfg.train_split and split != cfg.eval_split else "limit_eval"


def _need_path(cfg: DataConfig, what: str) -> Path:
    if not cfg.path:
        raise ValueError(f"data.path is required for source {cfg.source!r}: set it to {what}")
    path = Path(cfg.path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"data.path {str(path)!r} does not exist; set data.path to {what}")
    return path


# ------------------------------------------------------------------------------------------ digits
@functools.lru_cache(maxsize=1)
def _digits_arrays() -> "tuple[np.ndarray, np.ndarray]":
    """scikit-learn's digits (images ``[1797, 8, 8]`` in 0-16, targets ``[1797]``), read once per process (an
    experiment's checks and report read its splits many times); read-only, callers index copies."""
    from sklearn.datasets import load_digits

    d = load_digits()
    d.images.flags.writeable = False
    d.target.flags.writeable = False
    return d.images, d.target


def _digits(cfg: DataConfig, split: str) -> ImageDataset:
    """scikit-learn's 1,797 8x8 digits; fixed stratified-by-shuffle split 60/20/20 (train/val/test)."""
    if split not in DIGITS_SPLITS:
        raise ValueError(f"unknown digits split {split!r}: use one of {', '.join(DIGITS_SPLITS)}")
    images, target = _digits_arrays()
    order = np.random.default_rng(0).permutation(len(target))  # the same split for every run
    lo, hi = (int(round(f * len(order))) for f in DIGITS_SPLITS[split])
    idx = order[lo:hi]
    pixels = np.clip(images[idx] * (255.0 / 16.0), 0, 255).astype(np.uint8)
    return ImageDataset(
        ArrayImages(pixels),
        target[idx].astype(np.int64),
        [str(c) for c in range(10)],
        f"scikit-learn digits, {split} split ({len(idx)} images 8x8)",
    )


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

    def encoded(self, i: int) -> "tuple[bytes, str]":
        """The member's bytes as stored and its lower-case suffix without the dot (see ``FileImages.encoded``)."""
        if self._zip[0] != os.getpid():
            self._zip = (os.getpid(), zipfile.ZipFile(self.path))
        return self._zip[1].read(self.members[i]), os.path.splitext(self.members[i])[1].lstrip(".").lower()

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
            if cfg.label_set not in LABEL_SETS:
                raise ValueError(f"unknown cifar10n label_set {cfg.label_set!r}: use one of {', '.join(LABEL_SETS)}")
            key = {"random1": "random_label1", "random2": "random_label2", "random3": "random_label3"}.get(
                cfg.label_set, f"{cfg.label_set}_label"
            )
            targets = labels[key].astype(np.int64)
            what = f"{cfg.label_set} labels ({(targets != labels['clean_label']).mean():.2%} differ from clean)"
        rows = cifar10n_rows(split)
        members = [members[i] for i in rows]
        targets = targets.take(rows) if isinstance(targets, LabelSets) else targets[rows]
        return ImageDataset(
            _ZipImages(zpath, members),
            targets,
            classes,
            f"CIFAR-10N {split} ({len(rows)} of the 50,000 training images), {what}",
        )
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


# ------------------------------------------------------------------------------------ image folder
def _image_folder(cfg: DataConfig, split: str) -> ImageDataset:
    """``<path>/<split>/<class>/<image>`` (:func:`harness.data.folders.read_image_folder`)."""
    root = _need_path(cfg, "a folder with one subfolder per split, each with one folder per class")
    return read_image_folder(root, split, cfg.allow_outside_root)


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
            fast = tfds.data_source(
                cfg.name,
                split=split,
                data_dir=cfg.path,
                download=False,
                decoders={cfg.image_key: tfds.decode.SkipDecoding()},
            )
            return np.asarray([fast[i][cfg.label_key] for i in range(len(fast))], dtype=np.int64).reshape(-1)
    except Exception:  # SkipDecoding is not available everywhere (TFDS mocks need TensorFlow for it)
        return np.asarray([source[i][cfg.label_key] for i in range(len(source))], dtype=np.int64).reshape(-1)


def _tfds(cfg: DataConfig, split: str) -> ImageDataset:
    """Any TFDS dataset prepared as array_record under ``data.path`` (TFDS data_dir), read with
    ``tfds.data_source`` (no TensorFlow at read time). ``split`` is a TFDS split string
    (``train``, ``validation``, ``train[:90%]``...)."""
    from harness.extras import require

    tfds = require("tensorflow_datasets", "data.source=tfds")
    if not cfg.name:
        raise ValueError("data.name is required for source 'tfds' (a TFDS dataset name, e.g. imagenet2012)")
    try:
        source = tfds.data_source(cfg.name, split=split, data_dir=cfg.path, download=False)
    except Exception as e:  # tfds raises several types for missing data
        raise FileNotFoundError(
            f"TFDS dataset {cfg.name!r} split {split!r} is not prepared under data_dir {cfg.path!r} ({e}); "
            "prepare it with `pip install -e .[prepare]` and tfds.builder(name, data_dir=...).download_and_prepare("
            "file_format='array_record')"
        ) from e
    feature = source.dataset_info.features[cfg.label_key]
    names = list(getattr(feature, "names", []) or [])
    labels = _tfds_labels(tfds, cfg, split, source)
    k = cfg.num_classes or len(names) or int(labels.max()) + 1
    names = names or [str(c) for c in range(k)]
    return ImageDataset(
        _TfdsImages(source, cfg.image_key),
        labels.astype(np.int64),
        names,
        f"TFDS {cfg.name} {split} ({len(labels)} examples)",
    )


# ---------------------------------------------------------------------------------------- manifest
def _refuse_repeats(root: Path, split: str, keys: np.ndarray, paths: Strings, multilabel: bool) -> None:
    """Refuse a manifest that lists one image path (after ``os.path.normpath``) on two lines: it would be trained
    on twice, with labels that may disagree. ``keys[i]`` is ``hash`` of entry i's normalised path (8 bytes an
    entry; equal keys are compared as strings, so a hash collision is never refused); ``multilabel``: the lists are
    label sets (``data.multilabel``), which the fix may merge.

    Raises:
        ValueError: the first repeated path: the file, both lines and their labels, and the fix.
    """
    order = np.argsort(keys, kind="stable")
    same = np.flatnonzero(keys[order][1:] == keys[order][:-1])
    pairs = sorted((int(order[j + 1]), int(order[j])) for j in same)  # (later entry, earlier entry), file order
    for later, earlier in pairs:
        if os.path.normpath(paths[later]) != os.path.normpath(paths[earlier]):
            continue  # a hash collision
        rows = {e: (n, labels) for e, (n, _, labels) in enumerate(_manifest_rows(root, split)) if e in (earlier, later)}
        (n1, l1), (n2, l2) = rows[earlier], rows[later]
        fix = (
            f"delete line {n2} (an image listed twice is trained on twice)"
            if sorted(l1) == sorted(l2)
            else f"keep one line for it, with every label that holds in its list (e.g. {sorted(set(l1 + l2))} "
            + (
                "if both do: several labels in one line's list make a multi-label set)"
                if multilabel
                else "if both do, with data.multilabel=true: several labels a line make a label set), or with its one "
                "class (data.multilabel=false, the default: one label a line)"
            )
        )
        also = "" if paths[later] == paths[earlier] else f" (as {paths[earlier]!r})"
        raise ValueError(
            f"{_manifest_file(root, split)}: image path {paths[later]!r} is listed twice, on line {n1}{also} (labels "
            f"{l1}) and line {n2} (labels {l2}); list each image once: {fix}"
        )


def _manifest(cfg: DataConfig, split: str) -> ImageDataset:
    """JFT-style list: ``<path>`` is a folder with ``<split>.csv`` or ``<split>.jsonl``
    (and optionally ``classes.txt``, one name per line). CSV rows: ``image_path,label_ids`` with
    ids separated by spaces or ``;``; JSONL lines: ``{"path": ..., "labels": [ids]}``. Image
    paths are relative to the folder. ``data.multilabel`` says which labels the list holds (audit14 A14-10; never
    guessed from the lines, :mod:`harness.data.manifest`): false (the default) single labels, exactly one id a line,
    read as integer class targets ``[N]`` (a softmax model's); true label sets, targets multi-hot ``[N, K]`` (a
    sigmoid model's), an empty list an image of no class (all K targets 0).

    Memory is flat in the number of entries: the file is read line by line into columns (the paths as one UTF-8
    buffer and offsets, :class:`~harness.data.dataset.Strings`; the label sets as CSR arrays,
    :class:`~harness.data.dataset.LabelSets`, or the single labels as one int64 array), about (path length + 8 +
    8 x labels per entry + 8) bytes an entry, no Python object per entry.

    Raises:
        ValueError: an entry that is not ``path`` and integer label ids, with ``data.multilabel=false`` an entry of
            no label or of several (naming the file, line and both fixes), an image path outside the folder (unless
            ``data.allow_outside_root``), one image path listed twice, a ``classes.txt`` with a name given twice, a
            blank line between names, too few names for the labels or another count than ``data.num_classes``
            (:func:`_class_names`; each message names the file, its line and the fix).
        FileNotFoundError: no ``<split>.csv`` or ``<split>.jsonl``.
    """
    root = _need_path(cfg, "a folder holding <split>.csv or <split>.jsonl")
    data, ends, ids, sizes = bytearray(), array.array("q", [0]), array.array("q"), array.array("q", [0])
    keys = array.array("q")  # hash of each normalised path, for :func:`_refuse_repeats`
    real_root, resolve = os.path.realpath(root), resolver(root)
    for entry, (_, path, labels) in enumerate(_manifest_rows(root, split, single=not cfg.multilabel), 1):
        check_location(path, f"{root / split}: image path (entry {entry})")  # a pipe: entry is refused by name
        if not cfg.allow_outside_root:
            if not inside(resolve(path), real_root):
                raise ValueError(
                    f"{root / split}: image path {path!r} (entry {entry}) lies outside the manifest "
                    f"folder {str(root)!r}; move the images under it, or set data.allow_outside_root=true "
                    "if the list is yours and meant to point elsewhere"
                )
        data += path.encode()
        ends.append(len(data))
        keys.append(hash(os.path.normpath(path)))
        ids.extend(labels)
        sizes.append(len(labels))
    n = len(ends) - 1
    names = _class_names(root / "classes.txt")
    # numpy views of the buffers (no copy)
    flat = np.frombuffer(ids, dtype=np.int64) if len(ids) else np.zeros(0, dtype=np.int64)
    _check_names_cover(root, split, cfg, names, flat)
    k = cfg.num_classes or len(names) or (int(flat.max()) + 1 if len(flat) else 0)
    paths = Strings(
        np.frombuffer(data, dtype=np.uint8) if data else np.zeros(0, np.uint8), np.frombuffer(ends, dtype=np.int64)
    )
    hashes = np.frombuffer(keys, dtype=np.int64) if keys else np.zeros(0, np.int64)
    _refuse_repeats(root, split, hashes, paths, cfg.multilabel)
    # one label a line when single-label (manifest_rows checked it): the flat ids are the class of each line
    labels = LabelSets(flat, np.cumsum(np.frombuffer(sizes, dtype=np.int64))) if cfg.multilabel else flat
    kind = "label sets, data.multilabel=true" if cfg.multilabel else "one label each"
    return ImageDataset(
        FileImages(paths, root),
        labels,
        names or [str(c) for c in range(k)],
        f"manifest {root} {split} ({n} images, {k} classes, {kind})",
    )


def _class_names(path: Path) -> "list[str]":
    """The class names of a manifest's ``classes.txt``: one a line, line i + 1 naming class i (each name stripped of
    surrounding spaces; blank lines at the end ignored); ``[]`` when there is no such file.

    Raises:
        ValueError: a file that is not UTF-8, a blank line before the last name (it would shift the names of the
            classes after it), or a name given twice (reports and comparisons tell classes apart by name); the
            message names the file, the line(s) and the fix.
    """
    if not path.is_file():
        return []
    try:
        names = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines()]
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason}): save it as UTF-8, one class name a line") from None
    while names and not names[-1]:
        names.pop()
    seen: "dict[str, int]" = {}
    for i, name in enumerate(names):
        if not name:
            raise ValueError(
                f"{path} line {i + 1} is empty, between class names: line i + 1 names class i, so each class needs a "
                f"name on its line; write the name of class {i} there, or delete the line if no class is missing"
            )
        if name in seen:
            raise ValueError(
                f"{path}: class name {name!r} is on line {seen[name] + 1} (class {seen[name]}) and line {i + 1} (class "
                f"{i}): each class needs its own name (reports tell classes apart by name); rename one, e.g. "
                f"{name}_{i}, or delete classes.txt to name the classes by their ids"
            )
        seen[name] = i
    return names


def _check_names_cover(root: Path, split: str, cfg: DataConfig, names: "list[str]", flat: np.ndarray) -> None:
    """A manifest's ``classes.txt`` (``names``, K of them) names every label id the split uses, and agrees with
    ``data.num_classes`` where both are given.

    Raises:
        ValueError: a label id >= K (naming the manifest's line that uses it) or a ``data.num_classes`` other than K.
    """
    if not names:
        return
    if cfg.num_classes is not None and cfg.num_classes != len(names):
        raise ValueError(
            f"data.num_classes={cfg.num_classes}, and {root / 'classes.txt'} names {len(names)} classes: classes.txt "
            f"sets K; unset data.num_classes (data.num_classes=null), or give classes.txt {cfg.num_classes} names"
        )
    if len(flat) and int(flat.max()) >= len(names):
        line, label = next((n, max(ls)) for n, _, ls in _manifest_rows(root, split) if ls and max(ls) >= len(names))
        raise ValueError(
            f"{_manifest_file(root, split)} line {line} holds label id {label}, and "
            f"{root / 'classes.txt'} names {len(names)} classes (ids 0 to {len(names) - 1}): add the names of the "
            "missing classes to classes.txt (line i + 1 naming class i), or fix the labels"
        )
