"""The few-shot probe on tasks: the tasks resolved, checked and read, their shots drawn, and a frozen model's few-shot
accuracy on each, for ``harness fewshot`` (:mod:`harness.downstream.fewshot`) and the upstream few-shot monitor.

The probe of ViT and big_vision (Dosovitskiy et al., ICLR 2021, Sec. 4.1; google-research/big_vision
``evaluators/fewshot_lsr.py``); the numbers (the solver, the draws, the choice of λ on held-out examples) are
computed by :mod:`harness.tasks.fewshot`; this module supplies the tasks and the images:

- tasks are those of ``harness downstream`` (:func:`harness.tasks.taskset.expand_tasks`: VTAB-1k names and groups,
  ``demo``, custom ``NAME=FOLDER:K`` lines), checked as a sweep checks them (:func:`harness.tasks.taskset.check_tasks`)
  and read by :func:`harness.tasks.taskset.load_split`;
- the shots and the held-out examples that choose λ are drawn from ``train800val200`` (all 1,000 labelled training
  examples of a VTAB-1k task), the accuracy is measured on ``test``;
- every image is seen through the fine-tuning stage's evaluation view (:func:`harness.tasks.views.task_views`,
  resized to the crop size of :func:`harness.tasks.views.bit_resolution` or a given size, with the model's own
  interpolation), with no augmentation, as big_vision's few-shot preprocessing (resize, no random crop or flip).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

from harness.data.dataset import ArrayImages, ImageDataset
from harness.tasks.catalogue import Task
from harness.tasks.fewshot import HELDOUT_PER_CLASS, L2_GRID, check_shots, draw_shots, extract_features, fewshot_scores
from harness.tasks.taskset import TaskData, check_tasks, expand_tasks, load_split
from harness.tasks.views import bit_resolution, task_views

#: the split the shots and the held-out examples are drawn from, and the split scored
POOL_SPLIT, TEST_SPLIT = "train800val200", "test"


class _Rows:
    """The images ``rows`` of another reader, renumbered 0 .. len(rows) - 1 (picklable)."""

    def __init__(self, base: ImageDataset, rows: np.ndarray) -> None:
        self.base, self.rows = base, rows

    def __call__(self, i: int):
        return self.base.load_image(int(self.rows[i]))

    def name(self, i: int) -> str:
        return self.base.image_name(int(self.rows[i]))


def _subset(data: ImageDataset, rows: np.ndarray) -> ImageDataset:
    """The examples ``rows`` of ``data`` (in-memory arrays stay arrays, so the batched view applies)."""
    pixels = data.pixels()
    images = ArrayImages(pixels[rows]) if pixels is not None else _Rows(data, rows)
    return ImageDataset(images, data.labels[rows], data.class_names, f"{data.description} ({len(rows)} drawn)")


@dataclass
class TaskDraws:
    """One task ready for few-shot evaluation: the drawn pool examples, the test split and the draws.

    Attributes:
        task: the task.
        pool: only the examples of ``train800val200`` that some draw uses (renumbered).
        pool_size: the examples of the whole ``train800val200``.
        test: the test split.
        draws: ``{shots: (shot indices, held-out indices)}`` into ``pool`` (:func:`harness.tasks.fewshot.draw_shots`).
        data: what was read (``dataset.source`` of each split).
    """

    task: Task
    pool: ImageDataset
    pool_size: int
    test: ImageDataset
    draws: "dict[int, tuple[np.ndarray, np.ndarray]]"
    data: "list[dict]"


def prepare_tasks(
    tasks: Sequence[str],
    shots: Sequence[int],
    settings: Optional[TaskData] = None,
    seed: int = 0,
    heldout: int = HELDOUT_PER_CLASS,
    what: str = "--shots",
    progress: Optional[Callable[[str], None]] = None,
) -> "list[TaskDraws]":
    """Resolve, check and read ``tasks`` and draw their shots, before any feature is extracted.

    Args:
        tasks: task names, groups, ``demo`` or custom lines ``NAME=FOLDER:K`` (:func:`harness.tasks.taskset.expand_tasks`).
        shots: shot counts, whole numbers >= 1.
        settings: the data settings (``data_format``, ``data_dir``, ``allow_outside_paths``, ``check_test_size``);
            default :class:`harness.tasks.taskset.TaskData` ``()`` (TFDS in its default folder).
        seed: the draw (:func:`harness.tasks.fewshot.draw_shots`).
        heldout: held-out examples per class, to choose λ on.
        what: how messages name the shot setting (``--shots``, ``train.fewshot_shots``).
        progress: called with a line per task checked and per task read (``[fewshot] ...``).

    Returns:
        One :class:`TaskDraws` per task, in order.

    Raises:
        ValueError: shots < 1 or not whole numbers; an unknown task; bad data; a class of ``train800val200`` with
            fewer than max(shots) + 1 examples (the message names the task, the class and the largest shot count
            it allows).
        FileNotFoundError: missing data (the message names the file or folder).
    """
    shots = check_shots(shots, what)
    settings = settings or TaskData()
    chosen = expand_tasks(tasks)
    if not chosen:
        raise ValueError("no task given: name tasks, e.g. demo_digit, demo, natural or NAME=FOLDER:K")
    say = (lambda line: progress(f"[fewshot] {line}")) if progress else None
    check_tasks(chosen, settings, say)
    out = []
    for i, t in enumerate(chosen, 1):
        if say:
            say(f"reading {t.name} (task {i}/{len(chosen)}): {POOL_SPLIT} and {TEST_SPLIT}")
        if t.num_classes < 2:
            raise ValueError(
                f"task {t.name} has {t.num_classes} class: a few-shot probe tells classes apart, so a task "
                "needs at least 2 (check its NAME=FOLDER:K)"
            )
        pool, test = load_split(t, POOL_SPLIT, settings), load_split(t, TEST_SPLIT, settings)
        try:
            draws = draw_shots(pool.labels, t.num_classes, shots, seed, heldout, where=f"task {t.name} {POOL_SPLIT}")
        except ValueError as e:
            raise ValueError(f"{e} ({what})") from None
        rows = np.unique(np.concatenate([np.concatenate(d) for d in draws.values()]))
        renumber = np.full(len(pool), -1, dtype=np.int64)
        renumber[rows] = np.arange(len(rows))
        draws = {s: (renumber[a], renumber[b]) for s, (a, b) in draws.items()}
        data = []
        for d in (getattr(pool, "source", None), getattr(test, "source", None)):
            if d and d not in data:
                data.append(d)
        out.append(TaskDraws(t, _subset(pool, rows), len(pool), test, draws, data))
    return out


def evaluate_tasks(
    model: Any,
    prepared: Sequence[TaskDraws],
    size: Optional[int] = None,
    device: Any = "cpu",
    batch_size: int = 256,
    grid: Sequence[float] = L2_GRID,
    progress: Optional[Callable[[str], None]] = None,
) -> "dict[str, dict]":
    """Few-shot accuracy of a frozen ``model`` on prepared tasks.

    Features (:func:`harness.tasks.fewshot.extract_features`) are computed for the drawn pool examples and the test
    split through the evaluation view at ``size`` px (default: the crop size of
    :func:`harness.tasks.views.bit_resolution` for the task's images, 128 below 96x96 pixels, else 480), with the
    model's own interpolation; then :func:`harness.tasks.fewshot.fewshot_scores` chooses λ on the held-out draw and
    scores the test split.

    Args:
        model: a :class:`harness.models.Classifier` (its head is not used).
        prepared: from :func:`prepare_tasks`.
        size: the side of the square images the model sees, in pixels.
        device: where the model runs.
        batch_size: images per forward pass.
        grid: the λ values to choose from.
        progress: called with a line per task as its features are extracted and one with its accuracies.

    Returns:
        ``{task: {"group", "num_classes", "resolution", "pool_size", "data", "shots": {"<s>": {"prec@1", "lam",
        "heldout_prec@1", "num_train", "num_heldout", "num_test"}}}}``.
    """
    interpolation = model.config.preprocessing.get("interpolation", "bilinear")
    out = {}
    for i, p in enumerate(prepared, 1):
        side = size or bit_resolution(p.pool[0][0].size)[1]
        if progress:
            progress(
                f"[fewshot] {p.task.name} (task {i}/{len(prepared)}): features of {len(p.pool)} drawn and "
                f"{len(p.test)} test images at {side} px"
            )

        def features(data: ImageDataset) -> "tuple[np.ndarray, np.ndarray]":
            loader = task_views(data, False, False, False, side, side, batch_size, 0, interpolation)[0]
            x, y, _ = extract_features(model, loader, device)
            return x, y

        (px, py), (tx, ty) = features(p.pool), features(p.test)
        scores = fewshot_scores(px, py, p.draws, tx, ty, p.task.num_classes, grid)
        out[p.task.name] = {
            "group": p.task.group,
            "num_classes": p.task.num_classes,
            "resolution": side,
            "pool_size": p.pool_size,
            "data": p.data,
            "shots": {str(s): v for s, v in scores.items()},
        }
        if progress:
            progress(
                f"[fewshot] {p.task.name:22s} "
                + ", ".join(f"{s}-shot {100 * v['prec@1']:.2f} (λ {v['lam']:g})" for s, v in scores.items())
            )
    return out


def monitor_records(results: "dict[str, dict]", epoch: int, step: int) -> "list[dict]":
    """One flat record per task and shot count of :func:`evaluate_tasks`'s ``results`` (the lines of an upstream
    run's ``fewshot.jsonl``): ``{"epoch", "step", "task", "shots", "prec@1", "lam", "heldout_prec@1", "num_train",
    "num_heldout", "num_test", "resolution"}``."""
    return [
        {"epoch": epoch, "step": step, "task": task, "shots": int(s), **v, "resolution": r["resolution"]}
        for task, r in results.items()
        for s, v in r["shots"].items()
    ]
