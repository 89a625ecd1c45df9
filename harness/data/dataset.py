"""The dataset every source returns, its multi-label targets, and the picklable image readers it wraps.

An :class:`ImageDataset` yields ``(PIL.Image RGB, target)`` with ``target`` an ``int`` class index
(single-label) or a float32 multi-hot vector ``[K]`` (multi-label, stored sparsely as
:class:`LabelSets`), and carries ``num_classes``, ``class_names`` and ``multilabel``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch
from PIL import Image

from harness.data.cache import as_rgb, rgb_image


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
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

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

    def __init__(
        self,
        load_image: Callable[[int], Image.Image],
        labels: "np.ndarray | LabelSets",
        class_names: Sequence[str],
        description: str,
    ) -> None:
        self.load_image, self.class_names, self.description = load_image, list(class_names), description
        self.labels = labels if isinstance(labels, LabelSets) else np.asarray(labels, dtype=np.int64)
        k = len(self.class_names)
        flat = self.labels.ids if self.multilabel else self.labels
        if len(flat) and flat.min() < 0:
            raise ValueError(
                f"labels must be class ids >= 0, got {flat.min()} in {description}: a negative label names no class "
                "(data.num_classes cannot cover it); fix the labels"
            )
        if len(flat) and flat.max() >= k:
            raise ValueError(
                f"labels must lie in [0, {k}), got [{flat.min()}, {flat.max()}] in {description}; "
                "set the number of classes (data.num_classes) to cover them, or fix the labels"
            )

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
            return rgb_image(self.load_image(i)), target
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:  # (the warning, made an error)
            raise ValueError(
                f"cannot read image {self.image_name(i)} of {self.description} ({type(e).__name__}: {e}): PIL refuses "
                "an image this large as a possible decompression bomb; shrink the image (e.g. to a few thousand "
                "pixels a side), or remove that file"
            ) from e
        except (OSError, ValueError, SyntaxError) as e:  # what PIL raises for missing, truncated, corrupt files
            raise ValueError(
                f"cannot read image {self.image_name(i)} of {self.description} ({type(e).__name__}: "
                f"{e}); replace or remove that file"
            ) from e

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

    def labels_sha256(self) -> str:
        """SHA-256 of the labels in the split's order: the int64 bytes of the labels (label sets: their ids, then their
        offsets). A pack records it (``labels_sha256``, :mod:`harness.data.pack`), a run its held-out split's
        (:func:`harness.heldout.heldout_record`)."""
        import hashlib

        h = hashlib.sha256()
        if self.multilabel:
            h.update(np.ascontiguousarray(self.labels.ids, dtype=np.int64).tobytes())
            h.update(np.ascontiguousarray(self.labels.offsets, dtype=np.int64).tobytes())
        else:
            h.update(np.ascontiguousarray(self.labels, dtype=np.int64).tobytes())
        return h.hexdigest()

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


# ----------------------------------------------------------- image readers (picklable, for loader workers)
class ArrayImages:
    """Images from an in-memory uint8 array ``[N, H, W]`` or ``[N, H, W, 3]``."""

    def __init__(self, pixels: np.ndarray) -> None:
        self.pixels = pixels

    def __call__(self, i: int) -> Image.Image:
        return Image.fromarray(self.pixels[i])

    def array(self, cache_dir: Any = None) -> np.ndarray:
        return as_rgb(self.pixels)


class Strings:
    """Many strings held in two arrays, without a Python object per string: their UTF-8 bytes one after another
    (``data``, uint8) and where each ends (``offsets`` ``[N + 1]`` int64, ``offsets[0] = 0``); ``strings[i]``
    decodes string i. A million 40-character ASCII paths take 48 MB here, 97 MB as a list of ``str``
    (``sys.getsizeof``).
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self.data, self.offsets = np.asarray(data, dtype=np.uint8), np.asarray(offsets, dtype=np.int64)

    @classmethod
    def from_list(cls, strings: Sequence[str]) -> "Strings":
        encoded = [s.encode() for s in strings]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes().decode()

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))


class FileImages:
    """Images from files.

    Args:
        paths: the files, a list or (for long lists) a :class:`Strings` column, kept as given.
        root: a folder the paths are relative to (absolute paths stay as they are); None: as given.
    """

    def __init__(self, paths: "Sequence[str] | Strings", root: "str | os.PathLike | None" = None) -> None:
        self.paths = paths if isinstance(paths, Strings) else list(paths)
        self.root = None if root is None else os.fspath(root)

    def path(self, i: int) -> str:
        """The file of example ``i``."""
        return self.paths[i] if self.root is None else os.path.join(self.root, self.paths[i])

    def __call__(self, i: int) -> Image.Image:
        return Image.open(self.path(i))

    def name(self, i: int) -> str:
        return self.path(i)

    def encoded(self, i: int) -> "tuple[bytes, str]":
        """The file's bytes as stored and its lower-case suffix without the dot (``jpg``, ``png``...), for
        writers that keep encoded images as they are (:func:`harness.data.pack.pack`)."""
        path = self.path(i)
        with open(path, "rb") as f:
            return f.read(), os.path.splitext(path)[1].lstrip(".").lower()
