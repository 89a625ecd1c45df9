"""Which images each split of a source holds, and which splits share images: the one definition the split rules read
(:func:`harness.data.config.check_splits`, :func:`harness.model_identity.check_not_trained_on`, an OOD set's
"own data" rule) and the readers use (:func:`harness.data.sources.build_split`).

- ``digits``: fractions of one fixed permutation of scikit-learn's 1,797 images (:data:`DIGITS_SPLITS`): ``train``,
  ``val`` and ``test`` are disjoint, ``all`` holds every one of them;
- ``cifar10n``: rows of the 50,000 training images (:func:`cifar10n_rows`): ``train`` holds ``train45k`` and
  ``val5k`` (disjoint); ``test`` is the 10,000 test images;
- ``tfds``: a split spec ``name[slice]`` (``+`` between parts): the ranges of one split are compared (a whole split,
  or ``all``, holds every slice of it; ``train[:80%]`` shares images with ``train[70%:]``; percent against index
  bounds may share images: :func:`_tfds_relation`);
- any other source (an image folder's sub-folders, a manifest's files, a pack's folders): splits by their path under
  ``data.path`` (``train/``, ``./train`` and ``train/../train`` are ``train``; an image folder's ``train`` holds
  ``train/cat``).
"""

from __future__ import annotations

import os
import re
from typing import Optional

import numpy as np

#: digits: each split's ``[lo, hi)`` fraction of one fixed permutation of the 1,797 images
DIGITS_SPLITS = {"train": (0.0, 0.6), "val": (0.6, 0.8), "test": (0.8, 1.0), "all": (0.0, 1.0)}
#: cifar10n: the splits of its 50,000 training images (:func:`cifar10n_rows`); ``test`` is the other file
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


#: a TFDS sub-split ``name[selector]`` and one bound of a slice (``-10%``, ``200``, ``3shard``), as
#: ``tfds.core.ReadInstruction.from_spec`` reads them (tensorflow_datasets.core.splits: _SUB_SPEC_RE, _SLICE_RE)
_TFDS_SUB = re.compile(r"^(?P<name>[\w-]+)(\[(?P<sel>[\d\w%:.-]+)\])?$")
_TFDS_BOUND = re.compile(r"^((?P<val>-?[\d_.]+)(?P<unit>%|shard)?)?$")


def _tfds_parts(spec: str) -> Optional[list]:
    """A TFDS split spec (``train``, ``train[:90%]``, ``train[10:200]``, ``train[-10%:]+test``, ``train[3shard]``) as
    its parts ``(name, unit, lo, hi)``: ``unit`` ``"%"`` (``lo``/``hi`` in [0, 100], negative bounds counted from the
    end), ``"abs"`` or ``"shard"`` (each bound ``(frame, n)``: frame 0 from the start, 1 from the end), or None (the
    whole split); None when the spec is not one TFDS reads."""
    parts = []
    for sub in re.split(r"\s*\+\s*", re.sub(r"\s+(?=[^\[]*\])", "", spec.strip())):
        m = _TFDS_SUB.match(sub)
        if not m:
            return None
        if m["sel"] is None:
            parts.append((m["name"], None, None, None))
            continue
        bounds = [_TFDS_BOUND.match(x) for x in m["sel"].split(":")]
        if not all(bounds) or len(bounds) > 2 or not any(b.group(0) for b in bounds):
            return None
        units = {b["unit"] for b in bounds if b["unit"]}
        if len(bounds) == 1:  # train[3shard]: one shard
            if units != {"shard"}:
                return None
            bounds = [bounds[0], None]
        unit = units.pop() if len(units) == 1 else "abs" if not units else None
        if unit is None:
            return None
        try:
            vals = [None if b is None or b["val"] is None else float(b["val"].replace("_", "")) for b in bounds]
        except ValueError:
            return None
        if len(m["sel"].split(":")) == 1:
            vals[1] = vals[0] + 1 if vals[0] != -1 else None  # train[-1shard]: the last one
        lo, hi = vals
        if unit == "%":
            lo, hi = (
                (0.0 if lo is None else lo % 100 if lo < 0 else min(lo, 100.0)),
                (100.0 if hi is None else max(hi + 100, 0.0) if hi < 0 else min(hi, 100.0)),
            )
        else:
            lo = (0, 0.0) if lo is None else (1, lo) if lo < 0 else (0, lo)
            hi = (1, 0.0) if hi is None else (1, hi) if hi < 0 else (0, hi)
        parts.append((m["name"], unit, lo, hi))
    return parts


def _tfds_part_relation(a: tuple, b: tuple) -> str:
    """How one part of a TFDS spec relates to another: ``"holds"`` (every image of ``b`` is in ``a``; equal ranges
    hold each other), ``"meets"`` (they share an image), ``"apart"`` (no image in common), ``"unknown"`` (ranges
    in units that cannot be compared without the split's length: percent against an index, an index from the start
    against one from the end)."""
    (an, au, alo, ahi), (bn, bu, blo, bhi) = a, b
    if an != bn and "all" not in (an, bn):
        return "apart"  # two splits of one dataset share no example
    if au is None and (an == bn or an == "all"):
        return "holds"  # the whole split (or "all") holds every slice of it
    if au is None or bu is None or au != bu:
        return "unknown"

    def cmp(x, y):  # x <= y, or None when it depends on the split's length
        if au == "%":
            return x <= y
        return x[1] <= y[1] if x[0] == y[0] else None

    if blo == bhi or (au == "%" and bhi <= blo):
        return "apart"  # an empty slice
    if cmp(alo, blo) and cmp(bhi, ahi):
        return "holds"
    apart = [cmp(ahi, blo), cmp(bhi, alo)]
    if any(apart):
        return "apart"
    return "unknown" if None in apart else "meets"


def _tfds_relation(a: str, b: str) -> Optional[str]:
    """:func:`split_relation` of two TFDS split specs, by the ranges of the splits they slice (audit20 A20-01:
    ``train[:80%]`` shares images with ``train[70%:]``; ``train[0:90%]`` is ``train[:90%]``); ``"may share images
    with"`` where that cannot be told without the split's length (percent against index bounds) or a spec is not one
    TFDS reads."""
    pa, pb = _tfds_parts(a), _tfds_parts(b)
    if pa is None or pb is None:
        names = [{re.split(r"\[", x)[0].strip() for x in s.split("+")} for s in (a, b)]
        return "may share images with" if names[0] & names[1] or "all" in names[0] | names[1] else None
    rel = {(i, j): _tfds_part_relation(x, y) for i, x in enumerate(pa) for j, y in enumerate(pb)}
    rev = {(i, j): _tfds_part_relation(pb[j], pa[i]) for (i, j) in rel}
    a_holds = all(any(rel[i, j] == "holds" for i in range(len(pa))) for j in range(len(pb)))
    b_holds = all(any(rev[i, j] == "holds" for j in range(len(pb))) for i in range(len(pa)))
    if a_holds and b_holds:
        return "is"
    if a_holds or b_holds:
        return "holds" if a_holds else "is part of"
    if any(r in ("holds", "meets") for r in [*rel.values(), *rev.values()]):
        return "shares images with"
    return "may share images with" if "unknown" in rel.values() else None


def _holds(source: str, a: str, b: str) -> bool:
    """Whether split ``a`` of ``source`` holds every image of another split ``b`` (``a != b``)."""
    if source == "digits" and a in DIGITS_SPLITS and b in DIGITS_SPLITS:
        (alo, ahi), (blo, bhi) = DIGITS_SPLITS[a], DIGITS_SPLITS[b]
        return alo <= blo and bhi <= ahi
    if source == "cifar10n":
        return a == "train" and b in CIFAR10N_TRAIN_SPLITS
    return False


def _meet(source: str, a: str, b: str) -> bool:
    """Whether two splits, neither holding the other, still share images (digits' fractions overlap)."""
    if source == "digits" and a in DIGITS_SPLITS and b in DIGITS_SPLITS:
        (alo, ahi), (blo, bhi) = DIGITS_SPLITS[a], DIGITS_SPLITS[b]
        return alo < bhi and blo < ahi
    return False


def split_relation(source: str, a: Optional[str], b: Optional[str]) -> Optional[str]:
    """How split ``a`` of ``source`` relates to split ``b``: ``"is"`` (the same split), ``"holds"`` (every image of
    ``b`` is in ``a``: digits' ``all`` holds ``train``; cifar10n's ``train`` holds ``val5k``), ``"is part of"`` (the
    converse), ``"shares images with"`` (an overlap, neither holding the other), ``"may share images with"`` (TFDS
    slices whose ranges cannot be compared without the split's length: :func:`_tfds_relation`), or None (no image in
    common, or either split None).
    """
    if a is None or b is None:
        return None
    if source not in ("digits", "cifar10n", "tfds"):  # a folder under data.path: by its path (audit20 A20-13)
        a, b = os.path.normpath(str(a)), os.path.normpath(str(b))  # train/, ./train and train/../train are train
        if source == "image_folder" and a != b and (b.startswith(a + os.sep) or a.startswith(b + os.sep)):
            return "holds" if b.startswith(a + os.sep) else "is part of"  # train holds train/cat's images
    if a == b:
        return "is"
    if source == "tfds":
        return _tfds_relation(a, b)
    if _holds(source, a, b):
        return "holds"
    if _holds(source, b, a):
        return "is part of"
    return "shares images with" if _meet(source, a, b) else None


def splits_overlap(source: str, a: Optional[str], b: Optional[str]) -> bool:
    """Whether splits ``a`` and ``b`` of ``source`` have an image in common (the same split, one holding the other,
    or an overlap: :func:`split_relation`); False when either is None."""
    return split_relation(source, a, b) is not None
