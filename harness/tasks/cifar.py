"""Transfer tasks built from CIFAR-10, written in the VTAB-1k folder format (``harness data tasks-cifar``).

For the study of whether upstream models pretrained on CIFAR-10N transfer better: downstream tasks whose
training images come only from the upstream held-out split ``val5k`` (no upstream model trained on them) and
whose test images come from the CIFAR-10 test split. The 1k-example protocol is VTAB-1k's (Zhai et al. 2019,
"A Large-scale Study of Representation Learning with the Visual Task Adaptation Benchmark", arXiv 1910.04867):
``train800`` and ``val200`` for model selection, ``train800val200`` (their union) for the final fit, ``test``.

Tasks (all images 8-bit RGB PNG, lossless):

- ``cifar10`` (natural, 10 classes, 32x32): the CIFAR-10 image with its CLEAN label;
- ``cifar_rotation`` (structured, 4 classes, 32x32): the image rotated by k x 90 degrees counter-clockwise,
  label k;
- ``cifar_location`` (structured, 9 classes, 96x96): the image pasted in cell r*3+c of a 3x3 grid on a black
  canvas, label = the cell;
- ``cifar_count`` (structured, 4 classes, 128x128): 1 to 4 images pasted in distinct cells of a 4x4 grid on a
  black canvas, label = count - 1.

The structured tasks are built the way :mod:`harness.tasks.demo` builds its digits tasks (label drawn
uniformly, same grids), from CIFAR images; the four digits demo tasks stay built in and are only listed in
the summary's ``groups`` (``ood``). Within a task no source image is used twice, so train800, val200 and
test share no image (not even as a part of a composite).

Each task folder holds ``{train800,val200,train800val200,test}.txt`` (``relative/path label`` lines, read by
:func:`harness.tasks.folder_format.folder_split`), the PNGs under ``train800/``, ``val200/``, ``test/``, and
``sources.json``: for every PNG the source images it was made from (``split`` ``train``: the index in the
50,000 CIFAR-10 training images, always in ``val5k``; ``test``: the index in the sorted test members) and
their zip members. Read a task with the custom task line in the summary (``NAME=FOLDER:K[:no-flip][:no-crop]``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import numpy as np
from PIL import Image

#: task -> (group, K, random flips allowed, random crops allowed): flags as in harness.tasks.demo
CIFAR_TASKS = {
    "cifar10": ("natural", 10, True, True),
    "cifar_rotation": ("structured", 4, False, True),
    "cifar_location": ("structured", 9, False, False),
    "cifar_count": ("structured", 4, True, False),
}
#: the out-of-domain group: the built-in digits demo tasks (harness.tasks.demo), not rebuilt here
OOD_TASKS = ("demo_digit", "demo_rotation", "demo_position", "demo_count")
#: source images one example may use at most (cifar_count), which bounds the split sizes
MOST_PER_EXAMPLE = 4
SIDE = 32  # CIFAR images are 32x32
SPLITS = ("train800", "val200", "train800val200", "test")


def _balanced(labels: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` positions of ``labels`` drawn without replacement, as class-balanced as the counts allow, shuffled."""
    order = rng.permutation(len(labels))
    rank = np.empty(len(labels), np.int64)
    for c in np.unique(labels):
        mine = order[labels[order] == c]
        rank[mine] = np.arange(len(mine))
    return rng.permutation(order[np.argsort(rank[order], kind="stable")][:n])


def _example(
    task: str,
    rng: np.random.Generator,
    take: Callable[[int], "list[int]"],
    pixels: Callable[[int], np.ndarray],
    labels: np.ndarray,
) -> "tuple[np.ndarray, int, list[int]]":
    """One example of ``task``: (``[H, W, 3]`` uint8 image, label, positions of the source images used)."""
    if task == "cifar10":
        (i,) = take(1)
        return pixels(i), int(labels[i]), [i]
    if task == "cifar_rotation":
        k, (i,) = int(rng.integers(4)), take(1)
        return np.ascontiguousarray(np.rot90(pixels(i), k)), k, [i]
    if task == "cifar_location":
        cell, (i,) = int(rng.integers(9)), take(1)
        canvas = np.zeros((3 * SIDE, 3 * SIDE, 3), np.uint8)
        r, c = divmod(cell, 3)
        canvas[SIDE * r : SIDE * (r + 1), SIDE * c : SIDE * (c + 1)] = pixels(i)
        return canvas, cell, [i]
    count = int(rng.integers(1, MOST_PER_EXAMPLE + 1))
    used = take(count)
    canvas = np.zeros((4 * SIDE, 4 * SIDE, 3), np.uint8)
    for slot, i in zip(rng.permutation(16)[:count], used):  # 4x4 grid of non-overlapping slots
        r, c = divmod(int(slot), 4)
        canvas[SIDE * r : SIDE * (r + 1), SIDE * c : SIDE * (c + 1)] = pixels(i)
    return canvas, count - 1, used


class _Part:
    """The source images of one part (``train``: val5k; ``test``): decoded on demand, drawn without repeats."""

    def __init__(self, ds, index: np.ndarray, name: str) -> None:
        self.ds, self.index, self.name = ds, index, name
        self.members = list(ds.load_image.members)

    def pixels(self, i: int) -> np.ndarray:
        img = np.asarray(self.ds[int(i)][0])
        if img.shape != (SIDE, SIDE, 3):
            raise ValueError(
                f"{self.ds.image_name(int(i))} is {img.shape[1]}x{img.shape[0]}, not a 32x32 CIFAR image; "
                "pass the cifar10n folder as --data"
            )
        return img

    def source(self, used: "list[int]") -> dict:
        return {
            "split": self.name,
            "index": [int(self.index[i]) for i in used],
            "member": [self.members[i] for i in used],
        }


def _examples(
    task: str, seed: int, fit: _Part, test: _Part, sizes: "tuple[int, int]", test_size: int
) -> "Iterator[tuple[str, str, np.ndarray, int, dict]]":
    """``(split, relative path, image, label, sources)`` of every example of ``task``, seeded by (seed, task)."""
    rng = np.random.default_rng([seed, list(CIFAR_TASKS).index(task)])
    for part, splits in ((fit, (("train800", sizes[0]), ("val200", sizes[1]))), (test, (("test", test_size),))):
        labels = part.ds.labels
        if task == "cifar10" and part is test:  # class-balanced test sample; training lists drawn as VTAB draws them
            pool = iter(_balanced(labels, test_size, rng).tolist())
        else:
            pool = iter(rng.permutation(len(labels)).tolist())
        take = lambda n: [next(pool) for _ in range(n)]  # noqa: E731 - each source image used once per task
        for split, n in splits:
            for j in range(n):
                img, y, used = _example(task, rng, take, part.pixels, labels)
                yield split, f"{split}/{j:05d}.png", img, y, part.source(used)


def _check_sizes(fit: _Part, test: _Part, train: int, val: int, test_size: int) -> None:
    """Refuse split sizes that the source images cannot fill without repeats (``cifar_count`` uses up to
    :data:`MOST_PER_EXAMPLE` of them an example): ValueError."""
    if min(train, val) < 1 or (train + val) * MOST_PER_EXAMPLE > len(fit.index):
        raise ValueError(
            f"sizes {train}, {val}: each must be >= 1 and their sum at most {len(fit.index) // 4} "
            f"(cifar_count uses up to {MOST_PER_EXAMPLE} of the {len(fit.index)} val5k images an example)"
        )
    if not 1 <= test_size <= len(test.index) // MOST_PER_EXAMPLE:
        raise ValueError(
            f"test_size {test_size} must lie in [1, {len(test.index) // MOST_PER_EXAMPLE}] (cifar_count "
            f"uses up to {MOST_PER_EXAMPLE} of the {len(test.index)} test images an example)"
        )


def _write_task(
    out: Path,
    task: str,
    examples: "Iterator[tuple[str, str, np.ndarray, int, dict]]",
    seed: int,
    data_path: "str | os.PathLike",
) -> "dict[str, list[str]]":
    """Write the task folder ``out/<task>`` from its ``examples`` (:func:`_examples`): the PNGs, the split lists
    (``train800val200`` the union of ``train800`` and ``val200``) and ``sources.json``, in a temporary folder renamed
    to ``out/<task>`` once complete (an empty ``out/<task>`` is replaced; on any error the partial folder is
    deleted). Returns the split lists' lines (``relative/path label``)."""
    from harness.io import atomic_write_text, json_dumps

    tmp = Path(tempfile.mkdtemp(prefix=f".{task}.", suffix=".partial", dir=out))  # renamed when complete
    try:
        lists: "dict[str, list[str]]" = {"train800": [], "val200": [], "test": []}
        sources: dict = {}
        for split, rel, img, y, src in examples:
            (tmp / split).mkdir(exist_ok=True)
            Image.fromarray(img).save(tmp / rel, format="PNG")
            lists[split].append(f"{rel} {y}")
            sources[rel] = src
        lists["train800val200"] = lists["train800"] + lists["val200"]
        for split, lines in lists.items():
            atomic_write_text(tmp / f"{split}.txt", "\n".join(lines) + "\n")
        atomic_write_text(
            tmp / "sources.json",
            json_dumps(
                {
                    "task": task,
                    "seed": seed,
                    "data": str(data_path),
                    "train_source": "cifar10n val5k (clean labels)",
                    "test_source": "CIFAR-10 test",
                    "images": sources,
                },
                indent=1,
            ),
        )
        if (out / task).exists():
            (out / task).rmdir()  # empty (checked above)
        os.replace(tmp, out / task)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return lists


def build_cifar_tasks(
    data_path: "str | os.PathLike",
    out: "str | os.PathLike",
    seed: int = 0,
    test_size: int = 2000,
    progress: Optional[Callable[[str], None]] = print,
    sizes: "Sequence[int]" = (800, 200),
) -> dict:
    """Write the CIFAR transfer tasks (:data:`CIFAR_TASKS`) under ``out``, one VTAB-1k folder each.

    Training images (train800, val200; train800val200 is their union, in that order) come from the upstream
    held-out split ``val5k`` of :func:`harness.data.sources.cifar10n_rows`, test images from the CIFAR-10 test
    split, read with the project's ``cifar10n`` reader (clean labels). No image of ``train45k`` is read.

    Args:
        data_path: the cifar10n folder (``cifar10_jpeg.zip`` and ``cifar10n_labels.npz``).
        out: the output folder (created); ``out/<task>`` must not exist or be empty.
        seed: seed of every draw (which images, labels of the structured tasks, cells); the same seed and data
            give byte-identical lists and images.
        test_size: test examples per task (``cifar10``: class-balanced), at most a quarter of the test split.
        progress: where progress lines go (counts and time left, at most every 10 s); None: nowhere.
        sizes: (train800, val200) examples; (800, 200) is VTAB-1k, smaller values are for tests (the file
            names stay ``train800.txt``/``val200.txt``); their sum is at most a quarter of val5k (1,250).

    Returns:
        ``{"tasks": {task: {"group", "num_classes", "sizes": {split: n}, "spec": custom task line}},
        "groups": {"natural": [...], "structured": [...], "ood": [demo tasks]}, "seed", "data", "out"}``;
        also written to ``out/cifar_tasks.json``.

    Raises:
        ValueError: ``out/<task>`` already exists and is not empty (pass a new folder or delete it), checked again
            under ``out``'s :class:`harness.io.RunLock` (one build writes a folder at a time; another holding it is
            named); sizes out of range; an image that is not 32x32 RGB or does not decode.
        FileNotFoundError: ``data_path`` lacks the cifar10n files.
    """
    from harness.data.config import DataConfig
    from harness.data.sources import build_split, cifar10n_rows
    from harness.io import RunLock

    out, train, val = Path(out), int(sizes[0]), int(sizes[1])
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file: pass a folder")
    _check_free(out)
    cfg = DataConfig(source="cifar10n", path=str(data_path), label_set="clean")
    fit = _Part(build_split(cfg, "val5k"), cifar10n_rows("val5k"), "train")
    test_ds = build_split(cfg, "test")
    test = _Part(test_ds, np.arange(len(test_ds)), "test")
    _check_sizes(fit, test, train, val, test_size)
    busy = "another harness data tasks-cifar is writing there; wait for it to finish, or give another --out"
    with RunLock(out, what=busy):  # one writer of the task folders at a time
        _check_free(out)  # again: another build may have written them since
        return _write_tasks(out, fit, test, (train, val, test_size), seed, data_path, progress)


def _check_free(out: Path) -> None:
    """No task folder of :data:`CIFAR_TASKS` under ``out`` holds anything yet.

    Raises:
        ValueError: naming the task folders and the fix.
    """
    taken = [t for t in CIFAR_TASKS if (out / t).exists() and (not (out / t).is_dir() or any((out / t).iterdir()))]
    if taken:
        raise ValueError(
            f"{out} already holds {', '.join(str(out / t) for t in taken)}: pass a new --out folder, or "
            "delete those task folders to rebuild them"
        )


def _write_tasks(out: Path, fit, test, sizes: "tuple[int, int, int]", seed: int, data_path, progress) -> dict:
    """:func:`build_cifar_tasks`' writing, while it holds ``out``'s lock: each task folder, then ``cifar_tasks.json``."""
    from harness.io import atomic_write_text, json_dumps
    from harness.progress import Steps

    train, val, test_size = sizes
    steps = Steps(progress, "tasks-cifar", len(CIFAR_TASKS))
    summary: dict = {"tasks": {}, "seed": seed, "data": str(data_path), "out": str(out)}
    total = train + val + test_size
    for task, (group, k, flip, crop) in CIFAR_TASKS.items():
        steps.step(f"{task}: {total} images ({train} + {val} from val5k, {test_size} from test)")
        examples = _examples(task, seed, fit, test, (train, val), test_size)
        lists = _write_task(out, task, steps.count(examples, total, unit="images"), seed, data_path)
        spec = f"{task}={(out / task).absolute()}:{k}" + ("" if flip else ":no-flip") + ("" if crop else ":no-crop")
        summary["tasks"][task] = {
            "group": group,
            "num_classes": k,
            "spec": spec,
            "sizes": {s: len(lists[s]) for s in SPLITS},
        }
    summary["groups"] = {g: [t for t, v in CIFAR_TASKS.items() if v[0] == g] for g in ("natural", "structured")}
    summary["groups"]["ood"] = list(OOD_TASKS)
    atomic_write_text(out / "cifar_tasks.json", json_dumps(summary, indent=1))
    return summary
