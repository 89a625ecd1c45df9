"""Which images each split of a source holds, and which splits share images: the one definition the split rules read
(:func:`harness.data.config.check_splits`, :func:`harness.model_identity.check_not_trained_on`, an OOD set's
"own data" rule) and the readers use (:func:`harness.data.sources.build_split`).

- ``digits``: fractions of one fixed permutation of scikit-learn's 1,797 images (:data:`DIGITS_SPLITS`): ``train``,
  ``val`` and ``test`` are disjoint, ``all`` holds every one of them;
- ``cifar10n``: rows of the 50,000 training images (:func:`cifar10n_rows`): ``train`` holds ``train45k`` and
  ``val5k`` (disjoint); ``test`` is the 10,000 test images;
- ``tfds``: a split spec ``name[slice]``; a whole split holds every slice of it (``train`` holds ``train[:10%]``);
- any other source (an image folder's sub-folders, a manifest's files): splits by name.
"""

from __future__ import annotations

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


def _holds(source: str, a: str, b: str) -> bool:
    """Whether split ``a`` of ``source`` holds every image of another split ``b`` (``a != b``)."""
    if source == "digits" and a in DIGITS_SPLITS and b in DIGITS_SPLITS:
        (alo, ahi), (blo, bhi) = DIGITS_SPLITS[a], DIGITS_SPLITS[b]
        return alo <= blo and bhi <= ahi
    if source == "cifar10n":
        return a == "train" and b in CIFAR10N_TRAIN_SPLITS
    if source == "tfds":  # "train" holds "train[:90%]"; two slices of one split are not compared
        return "[" not in a and "+" not in a and any(re.split(r"\[", p)[0].strip() == a for p in b.split("+"))
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
    converse), ``"shares images with"`` (an overlap, neither holding the other), or None (no image in common, or
    either split None).
    """
    if a is None or b is None:
        return None
    if a == b:
        return "is"
    if _holds(source, a, b):
        return "holds"
    if _holds(source, b, a):
        return "is part of"
    return "shares images with" if _meet(source, a, b) else None


def splits_overlap(source: str, a: Optional[str], b: Optional[str]) -> bool:
    """Whether splits ``a`` and ``b`` of ``source`` have an image in common (the same split, one holding the other,
    or an overlap: :func:`split_relation`); False when either is None."""
    return split_relation(source, a, b) is not None
