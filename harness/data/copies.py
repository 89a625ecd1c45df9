"""Images of one split that are byte-for-byte copies of the training split's (audit26 A26-14: an image folder whose
test split was a plain copy of its training split trained and reported its training accuracy as test accuracy, rc 0;
a link of it was refused by the split rules, which compare files, not bytes).

The rule (:func:`copies`, :func:`warn_copies`): two image files are one image when their bytes are equal. Copies are
named in a warning, with their count and share of the split, not refused: real data sets hold a few exact duplicates
across their splits (Barz & Denzler, "Do We Train on Test Data? Purging CIFAR of Near-Duplicates", J. Imaging 2020,
found duplicates and near-duplicates of training images among CIFAR-10's and CIFAR-100's test images), which a user
may keep knowingly; a split that is mostly copies says so in the same words. Cost: one ``stat`` of every file of both
splits (their sizes); only files of a size met in both splits are read, each once, for its SHA-256. Compressed images
(PNG, JPEG) rarely share a size, so few are read; splits of uncompressed images of one size (BMP, PPM) are read whole,
once."""

from __future__ import annotations

import hashlib
import os
import warnings
from typing import Any, Optional


def _paths(ds: Any) -> "Optional[list[str]]":
    """The files a split reads (its image reader's paths), or None for a split read from no files (digits, TFDS,
    packs)."""
    load = getattr(ds, "load_image", None)
    if load is None or getattr(load, "paths", None) is None or not hasattr(load, "path"):
        return None
    return [load.path(i) for i in range(len(ds))]


def _by_size(paths: "list[str]") -> "dict[int, list[str]]":
    by: "dict[int, list[str]]" = {}
    for p in paths:
        try:
            by.setdefault(os.path.getsize(p), []).append(p)
        except OSError:  # its reader names a missing file
            continue
    return by


def _digest(path: str) -> "Optional[str]":
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def copies(train: Any, other: Any) -> "list[tuple[str, str]]":
    """``[(file of train, file of other)]``: each image of split ``other`` whose bytes equal an image of split
    ``train`` (both :class:`~harness.data.dataset.ImageDataset` read from files; a split read from no files: none).
    Cost: the module's."""
    pa, pb = _paths(train), _paths(other)
    if not pa or not pb:
        return []
    sa, sb = _by_size(pa), _by_size(pb)
    found = []
    for size in sorted(sa.keys() & sb.keys()):
        seen: "dict[str, str]" = {}
        for p in sa[size]:
            d = _digest(p)
            if d is not None:
                seen.setdefault(d, p)
        for p in sb[size]:
            d = _digest(p)
            if d is not None and d in seen:
                found.append((seen[d], p))
    return found


def warn_copies(train: Any, splits: "dict[str, Any]", train_key: str) -> None:
    """Warn (``UserWarning``) for each split of ``splits`` (``{"data.eval_split=test": dataset}``; None values
    skipped) holding copies of images of the training split ``train`` (``train_key`` names it; :func:`copies`),
    naming the count, the share of the split, the first pair and the fix."""
    for key, ds in splits.items():
        found = copies(train, ds) if ds is not None else []
        if found:
            first_train, first = found[0]
            warnings.warn(
                f"{key}: {len(found)} of its {len(ds)} images ({len(found) / len(ds):.0%}) are byte-for-byte copies "
                f"of images of {train_key} (first: {first} = {first_train}): the run scores them as unseen images "
                f"although it trains on them; a split made by copying the training split is no test of the model. "
                f"Give {key.split('=')[0]} a split of its own, or remove the copies (a few exact duplicates, as real "
                "data sets hold, may be kept knowingly)",
                stacklevel=2,
            )
