"""A small built-in suite of DEMO transfer tasks derived from scikit-learn's digits.

These are **not** VTAB-1k tasks: they exist so the downstream stage runs end to end on a fresh
machine with no downloads. Each mirrors a VTAB group in spirit:

- ``demo_digit`` (natural-like): the digit class, 10 classes;
- ``demo_rotation`` (structured, orientation): the digit rotated by 0/90/180/270 degrees, 4 classes;
- ``demo_position`` (structured, location): the digit pasted in one of 3x3 cells of a 24x24 canvas,
  9 classes;
- ``demo_count`` (structured, counting): 1 to 4 digits pasted on a 32x32 canvas, label = count - 1.

Splits follow the VTAB-1k sizes: train800, val200, train800val200 and a test split of 500. Digit
images for train/val come from the ``digits`` source's ``val`` split and those for test from its ``test``
split (:data:`DEMO_DIGITS_SPLITS`), drawn with replacement; never from its ``train`` split, which the
harness's digits configs train on, so a digits model is not scored on images it was trained on (audit23
A23-12: the draws were from two halves of all digits before, a fifth of the test images being ``train``
images). Every image is generated deterministically from its split and index.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from harness.data.dataset import ArrayImages, ImageDataset
from harness.tasks.catalogue import SPLITS, Task

DEMO_TEST_SIZE = 500


#: the ``digits`` source's split (:data:`harness.data.splits.DIGITS_SPLITS`) each part of a demo task draws on
DEMO_DIGITS_SPLITS = {"fit": "val", "test": "test"}


@functools.lru_cache(maxsize=2)
def _digits(part: str) -> "tuple[np.ndarray, np.ndarray]":
    """Digit images (uint8 8x8) and labels of the ``digits`` source's split for ``part`` (``fit``: train/val;
    ``test``), read by the source itself (:func:`harness.data.sources.build_split`; cached: read-only)."""
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    split = build_split(DataConfig(source="digits"), DEMO_DIGITS_SPLITS[part])
    images, labels = np.array(split.load_image.pixels), np.array(split.labels)
    images.flags.writeable = labels.flags.writeable = False
    return images, labels


def digits_shared(data: "Optional[Mapping[str, Any]]", scored: "Sequence[str]") -> Optional[str]:
    """For a model trained on ``data`` (a data section: ``source``, ``train_split``), the words naming a demo task
    split among ``scored`` (``train800``, ``val200``, ``train800val200``, ``test``) whose digits the model was trained
    on (its ``digits`` training split holds or shares the :data:`DEMO_DIGITS_SPLITS` split that part draws on:
    ``data.train_split=all``, ``val``, ``test``), or None (not trained on digits, or on ``train`` only)."""
    from harness.data.splits import split_relation

    if not data or data.get("source") != "digits":
        return None
    for split in scored:
        part = "test" if split == "test" else "fit"
        relation = split_relation("digits", data.get("train_split"), DEMO_DIGITS_SPLITS[part])
        if relation:
            return (
                f"data.train_split={data.get('train_split')} of digits {relation} the digits "
                f"{DEMO_DIGITS_SPLITS[part]} split its {split} split draws on"
            )
    return None


def _make(kind: str, rng: np.random.Generator, images: np.ndarray, labels: np.ndarray) -> "tuple[np.ndarray, int]":
    pick = int(rng.integers(len(images)))
    if kind == "digit":
        return images[pick], int(labels[pick])
    if kind == "rotation":
        k = int(rng.integers(4))
        return np.rot90(images[pick], k).copy(), k
    if kind == "position":
        cell = int(rng.integers(9))
        canvas = np.zeros((24, 24), np.uint8)
        r, c = divmod(cell, 3)
        canvas[8 * r : 8 * r + 8, 8 * c : 8 * c + 8] = images[pick]
        return canvas, cell
    count = int(rng.integers(1, 5))
    canvas = np.zeros((32, 32), np.uint8)
    for slot in rng.permutation(16)[:count]:  # 4x4 grid of non-overlapping slots
        r, c = divmod(int(slot), 4)
        canvas[8 * r : 8 * r + 8, 8 * c : 8 * c + 8] = images[int(rng.integers(len(images)))]
    return canvas, count - 1


def demo_split(task: Task, split: str) -> ImageDataset:
    """Generate ``split`` of a demo task (deterministic).

    Raises:
        ValueError: not a demo task, or unknown split.
    """
    if task.group != "demo":
        raise ValueError(f"{task.name} is not a demo task")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: use one of {', '.join(SPLITS)}")
    kind = task.name.removeprefix("demo_")
    parts = {
        "train800": [("train", 800)],
        "val200": [("val", 200)],
        "train800val200": [("train", 800), ("val", 200)],
        "test": [("test", DEMO_TEST_SIZE)],
    }[split]
    pixels, labels = [], []
    for part, n in parts:
        images, digit_labels = _digits("test" if part == "test" else "fit")
        rng = np.random.default_rng([sum(map(ord, kind)), ("train", "val", "test").index(part)])
        for _ in range(n):
            img, y = _make(kind, rng, images, digit_labels)
            pixels.append(img)
            labels.append(y)
    return ImageDataset(
        ArrayImages(np.stack(pixels)),
        np.asarray(labels, np.int64),
        [str(c) for c in range(task.num_classes)],
        f"DEMO task {task.name} (digits), {split}",
    )


def _no_label(example) -> int:  # demo tasks are generated with their labels
    raise ValueError("demo tasks are generated by harness.tasks.demo.demo_split")


def _demo(name: str, k: int, flip: bool, crop: bool) -> Task:
    return Task(
        name,
        "demo",
        "sklearn:digits",
        "-",
        k,
        _no_label,
        "generated",
        "generated",
        DEMO_TEST_SIZE,
        train="generated",
        flip=flip,
        crop=crop,
    )


DEMO_TASKS: "dict[str, Task]" = {
    t.name: t
    for t in [
        _demo("demo_digit", 10, flip=False, crop=True),
        _demo("demo_rotation", 4, flip=False, crop=True),
        _demo("demo_position", 9, flip=False, crop=False),
        _demo("demo_count", 4, flip=True, crop=False),
    ]
}
