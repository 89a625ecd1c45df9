"""Few-shot linear evaluation of a frozen model on downstream tasks: ``harness fewshot`` and the upstream monitor.

The cheap representation probe of ViT and big_vision (Dosovitskiy et al., ICLR 2021, Sec. 4.1; google-research/
big_vision ``evaluators/fewshot_lsr.py``): frozen pre-logit features, closed-form ridge regression to ±1 one-hot
targets, several shot counts. The numbers are computed by :mod:`harness.fewshot` (the solver, the draws, the choice
of λ on held-out examples); this module supplies the tasks and the images:

- tasks are those of ``harness downstream`` (:func:`harness.downstream.sweep.expand_tasks`: VTAB-1k names and groups,
  ``demo``, custom ``NAME=FOLDER:K`` lines), checked as the sweep checks them (:func:`harness.downstream.sweep.check_tasks`)
  and read by :func:`harness.downstream.sweep.load_split`;
- the shots and the held-out examples that choose λ are drawn from ``train800val200`` (all 1,000 labelled training
  examples of a VTAB-1k task), the accuracy is measured on ``test``;
- every image is seen through the fine-tuning stage's evaluation view (:func:`harness.downstream.finetune.transforms`,
  resized to the crop size of :func:`harness.downstream.finetune.bit_resolution` or ``resolution``, with the model's own
  interpolation), with no augmentation, as big_vision's few-shot preprocessing (resize, no random crop or flip).

Bad input (an unknown task, shots < 1, more shots than a class of the pool has examples, missing data) is refused
by :func:`prepare_tasks` before any feature is extracted. :func:`fewshot` writes ``fewshot.json`` and
``fewshot.md`` atomically.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from harness.downstream.config import SweepSettings
from harness.downstream.finetune import _views, bit_resolution
from harness.downstream.sweep import check_device, check_tasks, expand_tasks, load_split, upstream_record
from harness.downstream.table import _data_text, _model_text
from harness.downstream.tasks import Task
from harness.data.dataset import ArrayImages, ImageDataset
from harness.fewshot import HELDOUT_PER_CLASS, L2_GRID, check_shots, draw_shots, extract_features, fewshot_scores
from harness.io import atomic_write_text, check_output_folder, check_writable, json_dumps, read_json
from harness.upstream.trackers import available

#: the split the shots and the held-out examples are drawn from, and the split scored
POOL_SPLIT, TEST_SPLIT = "train800val200", "test"
#: big_vision's shot counts (``configs/common_fewshot.py``)
DEFAULT_SHOTS = (1, 5, 10, 25)
SCHEMA = "harness.fewshot/1"


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
        draws: ``{shots: (shot indices, held-out indices)}`` into ``pool`` (:func:`harness.fewshot.draw_shots`).
        data: what was read (``dataset.source`` of each split).
    """

    task: Task
    pool: ImageDataset
    pool_size: int
    test: ImageDataset
    draws: "dict[int, tuple[np.ndarray, np.ndarray]]"
    data: "list[dict]"


def prepare_tasks(tasks: Sequence[str], shots: Sequence[int], settings: Optional[SweepSettings] = None,
                  seed: int = 0, heldout: int = HELDOUT_PER_CLASS, what: str = "--shots",
                  progress: Optional[Callable[[str], None]] = None) -> "list[TaskDraws]":
    """Resolve, check and read ``tasks`` and draw their shots, before any feature is extracted.

    Args:
        tasks: task names, groups, ``demo`` or custom lines ``NAME=FOLDER:K`` (:func:`harness.downstream.sweep.expand_tasks`).
        shots: shot counts, whole numbers >= 1.
        settings: the data settings (``data_format``, ``data_dir``, ``allow_outside_paths``, ``check_test_size``);
            default :class:`harness.downstream.config.SweepSettings` ``()`` (TFDS in its default folder).
        seed: the draw (:func:`harness.fewshot.draw_shots`).
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
    settings = settings or SweepSettings()
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
            raise ValueError(f"task {t.name} has {t.num_classes} class: a few-shot probe tells classes apart, so a task "
                             "needs at least 2 (check its NAME=FOLDER:K)")
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


def evaluate_tasks(model: Any, prepared: Sequence[TaskDraws], size: Optional[int] = None, device: Any = "cpu",
                   batch_size: int = 256, grid: Sequence[float] = L2_GRID,
                   progress: Optional[Callable[[str], None]] = None) -> "dict[str, dict]":
    """Few-shot accuracy of a frozen ``model`` on prepared tasks.

    Features (:func:`harness.fewshot.extract_features`) are computed for the drawn pool examples and the test
    split through the evaluation view at ``size`` px (default: the crop size of
    :func:`harness.downstream.finetune.bit_resolution` for the task's images, 128 below 96x96 pixels, else 480), with the
    model's own interpolation; then :func:`harness.fewshot.fewshot_scores` chooses λ on the held-out draw and
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
            progress(f"[fewshot] {p.task.name} (task {i}/{len(prepared)}): features of {len(p.pool)} drawn and "
                     f"{len(p.test)} test images at {side} px")

        def features(data: ImageDataset) -> "tuple[np.ndarray, np.ndarray]":
            loader = _views(data, False, False, False, side, side, batch_size, 0, interpolation)[0]
            x, y, _ = extract_features(model, loader, device)
            return x, y

        (px, py), (tx, ty) = features(p.pool), features(p.test)
        scores = fewshot_scores(px, py, p.draws, tx, ty, p.task.num_classes, grid)
        out[p.task.name] = {"group": p.task.group, "num_classes": p.task.num_classes, "resolution": side,
                            "pool_size": p.pool_size, "data": p.data,
                            "shots": {str(s): v for s, v in scores.items()}}
        if progress:
            progress(f"[fewshot] {p.task.name:22s} " + ", ".join(f"{s}-shot {100 * v['prec@1']:.2f} (λ {v['lam']:g})"
                                                       for s, v in scores.items()))
    return out


def _resolution(resolution: "Optional[int | Sequence[int]]") -> Optional[int]:
    """The evaluation side from ``SIZE`` or ``(RESIZE, CROP)`` (the view resizes to the crop)."""
    if resolution is None:
        return None
    values = [resolution] if isinstance(resolution, (int, np.integer)) else list(resolution)
    if not (1 <= len(values) <= 2 and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1
                                          for v in values) and values[-1] <= values[0]):
        raise ValueError(f"resolution (--resolution) must be SIZE or RESIZE,CROP: whole numbers >= 1 with CROP <= "
                         f"RESIZE, e.g. 32 or 160,128; got {resolution!r}")
    return int(values[-1])


def fewshot(source: str, tasks: Sequence[str], out: "str | Path", shots: Sequence[int] = DEFAULT_SHOTS,
            settings: Optional[SweepSettings] = None, seed: int = 0,
            resolution: "Optional[int | Sequence[int]]" = None, weights: "Optional[str | Path]" = None,
            random_init: bool = False, heldout: int = HELDOUT_PER_CLASS,
            progress: Callable[[str], None] = print, overwrite: bool = False, log_with: Sequence[str] = ()) -> dict:
    """Few-shot linear evaluation of a model on ``tasks``; writes ``<out>/fewshot.json`` and ``<out>/fewshot.md``.

    Everything is checked before any feature is extracted: the shots, the resolution, the device
    (``settings.device``), the output folder, the model (loaded once, by :func:`harness.models.load_source`), the
    tasks and all four splits of each, and that every class of each task's ``train800val200`` has more examples
    than the largest shot count.

    Args:
        source: a harness ``model.pt``, ``timm:NAME`` or ``torchvision:NAME`` (:func:`harness.models.load_source`).
        tasks: task names, groups, ``demo``, custom lines (:func:`prepare_tasks`).
        out: the output folder.
        shots: shot counts (default 1, 5, 10, 25, big_vision's).
        settings: the data settings and the device (:class:`harness.downstream.config.SweepSettings`).
        seed: the draw of the shots.
        resolution: ``SIZE`` or ``(RESIZE, CROP)``: the images are resized to the crop (default: the BiT rule's).
        weights, random_init: see :func:`harness.models.load_source`.
        heldout: held-out examples per class, to choose λ on.
        progress: called with a line per step from the model's load on (the tasks read, each task's features and
            accuracies).
        log_with: trackers (:mod:`harness.upstream.trackers`; the CLI's default is TensorBoard, in ``<out>/tb``),
            given the settings as parameters, each task's accuracy per shot count, the means and the files.
        overwrite: write into an ``out`` that holds other files, beside them (never replacing a file this command
            did not write; its own earlier fewshot.json and fewshot.md are replaced).

    Returns:
        The ``fewshot.json`` content: ``{"schema", "source", "preprocessing", "method", "seed", "shots", "tasks",
        "mean"}`` (``mean``: per shot count, the mean test accuracy over tasks).

    Raises:
        ValueError: bad shots, seed, resolution, device, task or data; weights that do not fit; an unwritable ``out``,
            or one holding files of others (without ``overwrite``; with it, others' fewshot.json or fewshot.md).
        FileNotFoundError: no such model, weights file or data.
    """
    from harness.sources import load_source

    shots = check_shots(shots, "--shots")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise ValueError(f"--seed must be a whole number in [0, 2**32 - 1], got {seed!r}")
    size = _resolution(resolution)
    settings = settings or SweepSettings()
    check_device(settings.device)
    out = check_writable(out, f"--out {out}", "--out DIR")
    ours = (read_json(Path(out) / "fewshot.json") or {}).get("schema") == SCHEMA
    check_output_folder(out, ours, ("fewshot.json", "fewshot.md"), overwrite, "harness fewshot", "--out")
    log_with = available(list(log_with), "--log-with", progress)
    record = upstream_record(source, weights, random_init)
    progress(f"[fewshot] loading the model {source}")
    model = load_source(source, weights, random_init).to(settings.device)
    prepared = prepare_tasks(tasks, shots, settings, seed, heldout, progress=progress)
    results = evaluate_tasks(model, prepared, size, settings.device, progress=progress)
    mean = {str(s): float(np.mean([r["shots"][str(s)]["prec@1"] for r in results.values()])) for s in shots}
    result = {"schema": SCHEMA, "source": record, "preprocessing": dict(model.config.preprocessing),
              "method": {"probe": "closed-form ridge regression to 2*onehot-1 on the standardised features with a "
                                  "constant bias feature of 100 (big_vision few-shot)", "lam_grid": list(L2_GRID),
                         "lam_chosen_on": f"held-out examples of {POOL_SPLIT}, disjoint from the shots",
                         "heldout_per_class": heldout, "pool": POOL_SPLIT, "test": TEST_SPLIT},
              "seed": seed, "shots": shots, "tasks": results, "mean": mean}
    write_result(result, Path(out))
    if log_with:
        _track(log_with, result, Path(out), {"tasks": list(tasks), "resolution": size, "settings": asdict(settings)})
    return result


def _track(names: Sequence[str], result: dict, out: Path, extra: dict) -> None:
    """The few-shot result to the trackers ``names``: the settings as parameters, each task's accuracy and λ per
    shot count (one step per task), the means, ``fewshot.md`` / ``fewshot.json`` and the table."""
    from harness.upstream.trackers import Tracking

    config = {"source": result["source"], "seed": result["seed"], "shots": result["shots"], **extra,
              "method": result["method"]}
    with Tracking(names, "harness-fewshot", out.name, out, config) as tracking:
        for step, (task, r) in enumerate(result["tasks"].items(), 1):
            tracking.log({f"{task}/{s}shot/{k}": v[k] for s, v in r["shots"].items() for k in ("prec@1", "lam")},
                         step=step)
        tracking.log({f"mean/{s}shot/prec@1": v for s, v in result["mean"].items()}, step=len(result["tasks"]) + 1)
        columns = ["task", "classes", "px", *(f"{s}-shot" for s in result["shots"])]
        rows = [[task, r["num_classes"], r["resolution"], *(r["shots"][str(s)]["prec@1"] for s in result["shots"])]
                for task, r in result["tasks"].items()]
        tracking.report([out / "fewshot.md", out / "fewshot.json"], {"fewshot": (columns, rows)})


def write_result(result: dict, out: Path) -> None:
    """``fewshot.json`` and ``fewshot.md`` (the command, machine and versions, the model, the method and one row per
    task: test accuracy and the λ chosen at each shot count), each written atomically."""
    from harness.provenance import markdown_header, provenance

    prov = provenance()
    shots = result["shots"]
    m = result["method"]
    lines = [markdown_header("Few-shot linear evaluation", prov),
             _model_text(result["source"], result.get("preprocessing") or {}), "",
             f"Probe: frozen pre-logit features; {m['probe']}. The shots are drawn from {m['pool']} (seed "
             f"{result['seed']}); λ is chosen from 2^-10 .. 2^19 on up to {m['heldout_per_class']} more examples per "
             f"class of {m['pool']}, disjoint from the shots; the accuracy (prec@1) is on {m['test']}. Each cell: "
             "test prec@1 in % (λ chosen).", "",
             "| task | classes | px | " + " | ".join(f"{s}-shot" for s in shots) + " | data read |",
             "|---|---|---|" + "---|" * len(shots) + "---|"]
    for name, r in result["tasks"].items():
        cells = [f"{100 * r['shots'][str(s)]['prec@1']:.2f} ({r['shots'][str(s)]['lam']:g})" for s in shots]
        lines.append(f"| {name} | {r['num_classes']} | {r['resolution']} | " + " | ".join(cells)
                     + f" | {_data_text(r['data'])} |")
    lines.append(f"| mean over {len(result['tasks'])} tasks | | | "
                 + " | ".join(f"{100 * result['mean'][str(s)]:.2f}" for s in shots) + " | |")
    atomic_write_text(out / "fewshot.json", json_dumps({"provenance": prov, **result}, indent=1))
    atomic_write_text(out / "fewshot.md", "\n".join(lines) + "\n")


def monitor_records(results: "dict[str, dict]", epoch: int, step: int) -> "list[dict]":
    """One flat record per task and shot count of :func:`evaluate_tasks`'s ``results`` (the lines of an upstream
    run's ``fewshot.jsonl``): ``{"epoch", "step", "task", "shots", "prec@1", "lam", "heldout_prec@1", "num_train",
    "num_heldout", "num_test", "resolution"}``."""
    return [{"epoch": epoch, "step": step, "task": task, "shots": int(s), **v, "resolution": r["resolution"]}
            for task, r in results.items() for s, v in r["shots"].items()]
