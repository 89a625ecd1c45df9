"""VTAB-1k sweeps: select on val200, retrain on train800val200, score on test, over seeds.

For each task (Zhai et al. 2019, VTAB, Sec. 4; google-research/task_adaptation): every (learning rate, steps) of the grid is trained on
``train800`` and scored on ``val200``; the best (ties: smaller lr, then fewer steps) is retrained on
``train800val200`` for each seed and scored on ``test``. A grid of one configuration has nothing to
select: its final runs start at once. Each finished run appends one JSON line to
``<out>/runs.jsonl`` (a single ``write`` + fsync; a torn last line from a crash is ignored), with the
data it read (TFDS name and version, or the list files), so a rerun skips what is done and a crash
loses at most the runs in flight. Output: ``vtab.md`` and ``vtab.json`` (the recipe used, per-task
test accuracy mean and std over seeds, the data read, group means, the mean over tasks: the VTAB-1k
score when all 19 are present) and per-example test predictions in ``predictions/``.

Before the first run, the settings, the device and all four splits of every task are checked
(:func:`check_tasks`), so bad data is reported before hours of training, not after.

Recipes (:data:`PRESETS`): ``vtab_sweep`` (default), the VTAB-1k sweep {0.001, 0.01} x {500, 2500}
steps on the staircase schedule; ``bit_hyperrule``, the BiT-HyperRule as published (lr 0.003 at
batch 512, 500 / 10k / 20k steps by training-set size, no selection); ``demo``, CPU-sized settings
for the DEMO tasks.

Runs execute in this process one after the other (``local``), or as separate processes through
submitit (``submitit-local``: one process per GPU when GPUs are given; ``slurm``: one SLURM job per
task and configuration).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from downstream.demo import DEMO_TASKS, demo_split
from downstream.finetune import SCHEDULES
from downstream.tasks import GROUPS, SPLITS, TASKS, Task, get_task, resolve_tasks
from harness.io import atomic_write_text
from harness.provenance import markdown_header, provenance

EXECUTORS = ("local", "submitit-local", "slurm")
DATA_FORMATS = ("tfds", "folder")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclass
class SweepSettings:
    """Grid and fine-tuning settings shared by every task (the same sweep for all, as VTAB requires).

    Attributes:
        lrs, steps: the grid (default {0.001, 0.01} x {500, 2500}: the VTAB sweep); a steps entry of
            None (``bit_hyperrule`` schedule only) means the BiT-HyperRule's 500 / 10k / 20k steps.
        seeds: final runs per task (mean and std over them).
        batch_size, micro_batch, resolution, clip_grad_norm, device, channels_last: see
            :class:`downstream.finetune.FinetuneConfig` (``resolution`` = (resize, crop)).
        data_format: ``tfds`` or ``folder`` for VTAB tasks (demo tasks are generated).
        data_dir: TFDS data_dir or the folder-format root.
        check_test_size: refuse a test split whose size differs from the task's (train800, val200
            and train800val200 are always checked).
        schedule: ``staircase``, ``bit_hyperrule``, ``ta`` or ``cosine`` (see
            :class:`downstream.finetune.FinetuneConfig`; ``bit``, its old name, means ``staircase``).
        lr_batch: the batch size the ``lrs`` are given for (scaled linearly to ``batch_size``).
        allow_outside_paths: accept folder-format list paths outside their task folder (``../``,
            absolute paths); off by default, so a list cannot make the harness read other files.
        preset: the name of the :data:`PRESETS` entry these settings start from (reported in
            ``vtab.md``; not a setting itself).

    Raises:
        ValueError: a value out of range (the message names the setting and its CLI option).
    """

    lrs: "list[float]" = field(default_factory=lambda: [0.001, 0.01])
    steps: "list[Optional[int]]" = field(default_factory=lambda: [500, 2500])
    seeds: int = 1
    batch_size: int = 512
    micro_batch: int = 64
    resolution: "Optional[list[int]]" = None
    clip_grad_norm: Optional[float] = None
    device: str = "cpu"
    data_format: str = "tfds"
    data_dir: Optional[str] = None
    check_test_size: bool = True
    schedule: str = "staircase"
    lr_batch: Optional[int] = None
    allow_outside_paths: bool = False
    channels_last: bool = False
    preset: str = "vtab_sweep"

    def __post_init__(self) -> None:
        if self.schedule == "bit":
            self.schedule = "staircase"
        _require(self.schedule in SCHEDULES, f"unknown schedule {self.schedule!r} (--schedule): use one of "
                 f"{', '.join(SCHEDULES)}")
        _require(isinstance(self.lrs, (list, tuple)) and len(self.lrs) > 0 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in self.lrs),
            f"learning rates (--lrs, lrs) must be a non-empty list of positive numbers, e.g. 0.001,0.01; got "
            f"{self.lrs!r}")
        rule = self.schedule == "bit_hyperrule"
        _require(isinstance(self.steps, (list, tuple)) and len(self.steps) > 0,
                 f"steps (--steps, steps) must be a non-empty list, e.g. 500,2500; got {self.steps!r}")
        if rule:
            _require(list(self.steps) == [None], f"the BiT-HyperRule sets the steps from the training-set size (500 "
                     f"below 20k examples, 10k below 500k, 20k above), so steps (--steps) cannot be given "
                     f"({self.steps!r}); use --schedule staircase to choose the steps")
        else:
            _require(all(_is_int(v) and v >= 1 for v in self.steps), f"steps (--steps, steps) must be whole numbers "
                     f">= 1, e.g. 500,2500; got {self.steps!r}")
        for name, option in (("seeds", "--seeds"), ("batch_size", "--batch-size"), ("micro_batch", "--micro-batch")):
            v = getattr(self, name)
            _require(_is_int(v) and v >= 1, f"{name} ({option}) must be a whole number >= 1, got {v!r}")
        _require(self.lr_batch is None or (_is_int(self.lr_batch) and self.lr_batch >= 1),
                 f"lr_batch (--lr-batch) must be a whole number >= 1 or unset, got {self.lr_batch!r}")
        if self.resolution is not None:
            r = self.resolution
            _require(isinstance(r, (list, tuple)) and len(r) == 2 and all(_is_int(v) and v >= 1 for v in r)
                     and r[1] <= r[0], f"resolution (--resolution) must be RESIZE,CROP: two whole numbers with "
                     f"1 <= CROP <= RESIZE, e.g. 160,128; got {r!r}")
            self.resolution = [int(v) for v in r]
        _require(self.clip_grad_norm is None or (isinstance(self.clip_grad_norm, (int, float)) and
                                                 math.isfinite(self.clip_grad_norm) and self.clip_grad_norm > 0),
                 f"clip_grad_norm must be a positive number or unset, got {self.clip_grad_norm!r}")
        _require(self.data_format in DATA_FORMATS, f"unknown data format {self.data_format!r} (--data-format): use "
                 f"one of {', '.join(DATA_FORMATS)}")
        PRESETS[self.preset]  # noqa: B018 -- an unknown name raises its ValueError


class _Presets(dict):
    """Preset name -> SweepSettings fields; an unknown name raises ValueError naming the known ones."""

    def __missing__(self, name: str):
        if name == "bit":
            raise ValueError("preset 'bit' was renamed: it was the VTAB sweep ({0.001, 0.01} x {500, 2500} steps), not "
                             "the BiT-HyperRule; use --preset vtab_sweep for that grid, or --preset bit_hyperrule for "
                             "the published BiT-HyperRule")
        raise ValueError(f"unknown preset {name!r}: use one of {', '.join(self)}")


#: named settings (each records its own name in ``preset``)
PRESETS = _Presets(
    vtab_sweep=dict(preset="vtab_sweep"),
    bit_hyperrule=dict(preset="bit_hyperrule", lrs=[0.003], steps=[None], batch_size=512, lr_batch=512,
                       schedule="bit_hyperrule"),
    demo=dict(preset="demo", lrs=[0.01, 0.05], steps=[50, 100], seeds=2, batch_size=64, micro_batch=64,
              resolution=[32, 32]),
)

PRESET_TEXT = {
    "vtab_sweep": "the VTAB-1k sweep (Zhai et al. 2019; google-research/task_adaptation): lr {0.001, 0.01} x steps {500, 2500} chosen on "
                  "val200, batch 512, staircase schedule",
    "bit_hyperrule": "the BiT-HyperRule as published (Kolesnikov et al. 2020; big_transfer bit_hyperrule.py): "
                     "lr 0.003 at batch 512; 500 steps below 20k training examples, 10k below 500k, 20k above; "
                     "no selection",
    "demo": "CPU-sized settings for the DEMO tasks; neither the BiT-HyperRule nor the VTAB sweep",
}

SCHEDULE_TEXT = {
    "staircase": "linear warm-up over 20% of the steps, x0.1 at 40/60/80%",
    "bit_hyperrule": "the BiT-HyperRule's: warm-up from 0 over 100 (500) steps, x0.1 after steps 200/300/400 "
                     "(3k/6k/9k; 6k/12k/18k)",
    "ta": "task_adaptation's: warm-up 8%, x0.1 at 30/60/90%",
    "cosine": "warm-up 5%, cosine decay to 0",
}

#: fields that change what a run computes (the recipe); the others say where and how it runs
RECIPE_FIELDS = ("lrs", "steps", "seeds", "batch_size", "micro_batch", "resolution", "clip_grad_norm", "schedule",
                 "lr_batch")


def recipe(settings: SweepSettings) -> dict:
    """The preset, what was changed from it, and the recipe fields, for ``vtab.json`` / ``vtab.md``."""
    base, used = asdict(SweepSettings(**PRESETS[settings.preset])), asdict(settings)
    return {"preset": settings.preset, "description": PRESET_TEXT[settings.preset],
            "changed": [k for k in RECIPE_FIELDS if used[k] != base[k]], **{k: used[k] for k in RECIPE_FIELDS}}


# ------------------------------------------------------------------------------------------ tasks
CUSTOM_FLAGS = ("no-flip", "no-crop")
_RESERVED = {"vtab1k", "vtab", "all", "demo", *GROUPS}


def custom_task(spec: str) -> Task:
    """A user-defined task from one line ``NAME=FOLDER:NUM_CLASSES[:no-flip][:no-crop]``: a folder in
    the VTAB-1k folder format (``train800.txt``, ``val200.txt``, ``train800val200.txt``, ``test.txt``
    with ``relative/path label`` lines). Its split sizes are not checked; random flips and crops are
    on unless ``no-flip`` / ``no-crop`` turn them off (for labels that a flip or crop would change:
    positions, orientations, counts).

    Raises:
        ValueError: a malformed line; a name that is not a plain file name, or that a VTAB-1k task,
            alias, group or demo task already uses.
    """
    name, _, rest = spec.partition("=")
    flags = set()
    while rest.rpartition(":")[2] in CUSTOM_FLAGS:
        rest, _, flag = rest.rpartition(":")
        flags.add(flag)
    folder, _, k = rest.rpartition(":")
    if not (name and folder and k.isdigit() and int(k) > 0):
        raise ValueError(f"custom task {spec!r} must look like NAME=FOLDER:NUM_CLASSES[:no-flip][:no-crop], e.g. "
                         "birds=/data/birds:200")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ValueError(f"custom task name {name!r} must be letters, digits, '_', '.' or '-' (it names result "
                         "files): rename it in the task line")
    try:
        taken = f"the VTAB-1k task {get_task(name).name}"
    except ValueError:
        taken = "a task group" if name.lower() in _RESERVED else ("a demo task" if name in DEMO_TASKS else None)
    if taken:
        raise ValueError(f"custom task name {name!r} is already {taken}: give the custom task another name, e.g. "
                         f"my_{name}={rest}")
    return Task(name, "custom", f"folder:{folder}", "-", int(k), _no_tfds_label, "val200", "test", None,
                train="train800", flip="no-flip" not in flags, crop="no-crop" not in flags)


def custom_spec(task: Task) -> str:
    """The task line of a custom task (inverse of :func:`custom_task`)."""
    flags = ("" if task.flip else ":no-flip") + ("" if task.crop else ":no-crop")
    return f"{task.name}={task.tfds.removeprefix('folder:')}:{task.num_classes}{flags}"


def _no_tfds_label(example) -> int:
    raise ValueError("custom tasks are read from their folder, not from TFDS")


def find_task(name: str) -> Task:
    """A VTAB-1k task, a demo task, or a custom task line (``NAME=FOLDER:NUM_CLASSES``)."""
    if "=" in name:
        return custom_task(name)
    return DEMO_TASKS[name] if name in DEMO_TASKS else get_task(name)


def expand_tasks(names: Sequence[str]) -> "list[Task]":
    """``vtab1k``, group names, task names/aliases, ``demo`` (the 4 demo tasks) and custom task lines.

    Raises:
        ValueError: an unknown name; a bad custom task line; two different custom tasks of one name.
    """
    out: "list[Task]" = []
    custom: "dict[str, Task]" = {}
    for n in names:
        if n == "demo":
            picks = list(DEMO_TASKS.values())
        elif "=" in n or n in DEMO_TASKS:
            picks = [find_task(n)]
        else:
            picks = resolve_tasks([n])
        for t in picks:
            if t.group == "custom" and custom.setdefault(t.name.lower(), t) != t:
                raise ValueError(f"two custom tasks are named {t.name!r} ({custom_spec(custom[t.name.lower()])} and "
                                 f"{custom_spec(t)}): give each its own name")
        out += [t for t in picks if t not in out]
    return out


def load_split(task: Task, split: str, settings: SweepSettings):
    """The task's split from the configured reader (demo tasks: generated); ``dataset.source`` says
    what was read."""
    from downstream.data import folder_split, tfds_split

    if task.group == "demo":
        ds = demo_split(task, split)
        ds.source = {"format": "demo"}
        return ds
    allow = settings.allow_outside_paths
    if task.group == "custom":
        folder = Path(task.tfds.removeprefix("folder:"))
        return folder_split(task, split, folder.parent, validate=False, folder=folder, allow_outside=allow)
    validate = settings.check_test_size or split != "test"
    if settings.data_format == "folder":
        if not settings.data_dir:
            raise ValueError("the folder format needs --data-dir <root with one folder per task>")
        return folder_split(task, split, settings.data_dir, validate, allow_outside=allow)
    return tfds_split(task, split, settings.data_dir, validate)


def check_tasks(tasks: Sequence[Task], settings: SweepSettings) -> None:
    """Check all four splits of every task before any run: folder lists (two columns, integer labels
    in [0, K), paths inside the task folder, VTAB-1k sizes including the test split unless
    ``check_test_size`` is off), that every listed image exists and a sample decode; TFDS splits
    (prepared, sizes, a sample of examples decode with labels in range). Demo tasks are generated.

    Raises:
        ValueError / FileNotFoundError: the first problem found, naming the file (and line) and the fix.
    """
    from downstream.data import check_split, check_tfds_split

    for t in tasks:
        if t.group == "demo":
            continue
        for split in SPLITS:
            if t.group != "custom" and settings.data_format == "tfds":
                check_tfds_split(t, split, settings.data_dir, settings.check_test_size or split != "test")
            else:
                check_split(load_split(t, split, settings))


def check_device(device: str) -> None:
    """Refuse a device this machine cannot run on (before any work).

    Raises:
        ValueError: not ``cpu`` / ``cuda`` / ``cuda:N``; CUDA asked for without a usable GPU, or a GPU
            index beyond the GPUs visible (the message names the fix).
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"unknown device {device!r} (--device): use cpu, cuda or cuda:N") from e
    if dev.type == "cpu":
        return
    if dev.type != "cuda":
        raise ValueError(f"device {device!r} (--device): fine-tuning runs on cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        raise ValueError(f"--device {device}: no CUDA GPU is usable on this machine (torch.cuda.is_available() is "
                         f"False; torch {torch.__version__} is {build}); use --device cpu, or run where nvidia-smi "
                         "shows a GPU (and CUDA_VISIBLE_DEVICES does not hide it)")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) are visible; use cuda:0 .. "
                         f"cuda:{torch.cuda.device_count() - 1}")


# ------------------------------------------------------------------------------------------- runs
def run_one(spec: dict) -> dict:
    """One fine-tuning run (picklable: runs in-process or in a submitit job). Returns its record:
    task, phase, lr, steps actually run, seed, split scored, accuracy and ``data`` (what was read)."""
    from downstream.finetune import FinetuneConfig, finetune, resolved_steps

    settings = SweepSettings(**spec["settings"])
    task = find_task(spec.get("task_spec", spec["task"]))
    train_split, eval_split = ("train800", "val200") if spec["phase"] == "select" else ("train800val200", "test")
    cfg = FinetuneConfig(lr=spec["lr"], steps=spec["steps"], batch_size=settings.batch_size,
                         micro_batch=settings.micro_batch, seed=spec["seed"], device=settings.device,
                         clip_grad_norm=settings.clip_grad_norm, schedule=settings.schedule,
                         lr_batch=settings.lr_batch, channels_last=settings.channels_last,
                         resolution=tuple(settings.resolution) if settings.resolution else None)
    train, evaluation = load_split(task, train_split, settings), load_split(task, eval_split, settings)
    acc, preds = finetune(spec["upstream"], train, evaluation, cfg, task.flip, task.crop)
    if spec.get("predictions"):
        preds.save(spec["predictions"])
    data = [train.source] + ([evaluation.source] if evaluation.source != train.source else [])
    return {"key": spec["key"], "task": task.name, "group": task.group, "phase": spec["phase"], "lr": spec["lr"],
            "steps": resolved_steps(cfg, len(train)), "seed": spec["seed"], "split": eval_split, "accuracy": acc,
            "data": data}


def _key(task: str, phase: str, lr: float, steps: Optional[int], seed: int) -> str:
    return f"{task}|{phase}|lr={lr:g}|steps={'rule' if steps is None else steps}|seed={seed}"


def append_record(path: Path, record: dict) -> None:
    """Append one JSON line with a single write and fsync."""
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_records(path: Path) -> "dict[str, dict]":
    """Finished runs by key; a torn or malformed line (a crash mid-write) is skipped."""
    out = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
                out[rec["key"]] = rec
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    return out


def _execute(specs: "list[dict]", executor: str, folder: Path, slurm: dict) -> "list[dict]":
    if executor == "local" or not specs:
        return [run_one(s) for s in specs]
    import submitit

    if executor == "submitit-local":
        ex = submitit.LocalExecutor(folder=str(folder))
        gpus = slurm.get("visible_gpus") or ()
        ex.update_parameters(timeout_min=slurm.get("timeout_min", 600), gpus_per_node=1 if gpus else 0,
                             visible_gpus=tuple(gpus))
    else:
        ex = submitit.AutoExecutor(folder=str(folder))
        ex.update_parameters(**{k: v for k, v in slurm.items() if k != "visible_gpus"})
    jobs = ex.map_array(run_one, specs)
    return [j.result() for j in jobs]


def _same_sweep(old: dict, new: dict) -> bool:
    """Whether a ``sweep.json`` header describes the sweep ``new`` (settings compared after filling
    fields added since with their defaults; the preset name is a label, and the device and memory
    format say how runs execute, so a resumed sweep may change them)."""
    free = {"preset": new["settings"]["preset"], "device": new["settings"]["device"],
            "channels_last": new["settings"]["channels_last"]}
    try:
        settings = asdict(SweepSettings(**{**old["settings"], **free}))
    except (KeyError, TypeError, ValueError):
        return False
    return old.get("upstream") == new["upstream"] and settings == new["settings"]


def sweep(upstream: str, tasks: Sequence[str], out: "str | Path", settings: SweepSettings,
          executor: str = "local", slurm: Optional[dict] = None, progress: Callable[[str], None] = print) -> dict:
    """Run (or finish) the sweep; write the table. Returns the table dict (see :func:`table`).

    Everything is checked before the first run and before anything is written: the executor, the
    device (for ``local`` and ``submitit-local``; a SLURM job's GPU is not visible from here), the
    checkpoint, the task names and all four splits of every task (:func:`check_tasks`).

    Raises:
        ValueError: unknown task or executor; a device this machine lacks; bad data; an output folder
            of another sweep.
        FileNotFoundError: no upstream checkpoint; missing data.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: use one of {', '.join(EXECUTORS)}")
    if executor != "slurm":
        check_device(settings.device)
    if not Path(upstream).is_file():
        raise FileNotFoundError(f"no upstream checkpoint at {upstream!r}; pass the model.pt of an upstream run")
    from harness.models import load_model

    load_model(upstream)  # fails early: not a checkpoint, or a backbone this timm does not know
    chosen = expand_tasks(tasks)
    out = Path(out)
    header = {"upstream": str(Path(upstream).resolve()), "settings": asdict(settings)}
    meta = out / "sweep.json"
    if meta.is_file() and not _same_sweep(json.loads(meta.read_text()), header):
        raise ValueError(f"{out} holds a sweep of another upstream checkpoint or settings; write this one "
                         "elsewhere (--out; runs_root for harness run) or delete that folder to start it over")
    check_tasks(chosen, settings)
    (out / "predictions").mkdir(parents=True, exist_ok=True)
    atomic_write_text(meta, json.dumps(header, indent=1))
    store = out / "runs.jsonl"
    done = read_records(store)
    common = {"upstream": header["upstream"], "settings": header["settings"]}

    def run(specs: "list[dict]") -> None:
        todo = [s for s in specs if s["key"] not in done]
        if executor == "local":
            for s in todo:
                rec = run_one(s)
                append_record(store, rec)
                done[rec["key"]] = rec
                progress(f"{rec['task']:22s} {rec['phase']:6s} lr={rec['lr']:g} steps={rec['steps']} "
                         f"seed={rec['seed']}: {rec['split']} accuracy {rec['accuracy']:.4f}")
            return
        for rec in _execute(todo, executor, out / "jobs", slurm or {}):
            append_record(store, rec)
            done[rec["key"]] = rec

    grid = [(lr, st) for lr in settings.lrs for st in settings.steps]

    def ident(t: Task) -> dict:
        spec = {"task": t.name}
        if t.group == "custom":
            spec["task_spec"] = custom_spec(t)
        return spec

    if len(grid) > 1:
        run([{**common, **ident(t), "key": _key(t.name, "select", lr, st, 0), "phase": "select", "lr": lr,
              "steps": st, "seed": 0} for t in chosen for lr, st in grid])
    finals = []
    for t in chosen:
        lr, st = grid[0] if len(grid) == 1 else min(
            grid, key=lambda g: (-done[_key(t.name, "select", *g, 0)]["accuracy"], g[0], g[1] or 0))
        finals += [{**common, **ident(t), "key": _key(t.name, "final", lr, st, s), "phase": "final", "lr": lr,
                    "steps": st, "seed": s, "predictions": str(out / "predictions" / f"{t.name}_seed{s}.npz")}
                   for s in range(settings.seeds)]
    run(finals)
    result = {"recipe": recipe(settings), **table([done[f["key"]] for f in finals], chosen)}
    write_table(result, out)
    return result


# ------------------------------------------------------------------------------------------ table
def table(finals: "list[dict]", tasks: "list[Task]") -> dict:
    """Per-task mean/std test accuracy over seeds with the data read, group means, and the mean over tasks.

    The VTAB-1k score is the unweighted mean of the 19 per-task accuracies (not the mean of the
    group means; Zhai et al. 2019); it is reported only when all 19 tasks are present.
    """
    per_task = {}
    for t in tasks:
        recs = [r for r in finals if r["task"] == t.name]
        accs = [r["accuracy"] for r in recs]
        data = []
        for r in recs:
            data += [d for d in r.get("data", []) if d not in data]
        per_task[t.name] = {"group": t.group, "mean": float(np.mean(accs)),
                            "std": float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0, "seeds": len(accs),
                            "lr": recs[0]["lr"], "steps": recs[0]["steps"], "data": data}
    groups = {}
    for g in (*GROUPS, "demo", "custom"):
        vals = [v["mean"] for v in per_task.values() if v["group"] == g]
        if vals:
            groups[g] = {"mean": float(np.mean(vals)), "tasks": len(vals)}
    vtab = [v["mean"] for k, v in per_task.items() if k in TASKS]
    return {"tasks": per_task, "groups": groups, "mean_over_tasks": float(np.mean([v["mean"] for v in per_task.values()])),
            "vtab1k_score": float(np.mean(vtab)) if len(vtab) == len(TASKS) else None}


def _data_text(data: "list[dict]") -> str:
    """What a task's runs read, in a few words (TFDS name and version; list folder; generated)."""
    parts = []
    for d in data:
        if d.get("format") == "tfds":
            text = f"TFDS {d['name']} {d['version']}"
            parts.append(text + (f" (pinned {d['pinned']} not available)" if d.get("fallback") else ""))
        elif d.get("format") == "folder":
            parts.append(f"folder {Path(d['list']).parent}")
        elif d.get("format") == "demo":
            parts.append("generated (digits)")
    return "; ".join(dict.fromkeys(parts)) or "not recorded"


def _recipe_text(r: dict) -> "list[str]":
    """The recipe paragraph of ``vtab.md``: preset, changes, and every fine-tuning setting used."""
    steps = ("500 / 10k / 20k by training-set size (BiT-HyperRule)" if r["steps"] == [None]
             else "{" + ", ".join(str(s) for s in r["steps"]) + "}")
    lrs = "{" + ", ".join(f"{v:g}" for v in r["lrs"]) + "}"
    if r["lr_batch"] is not None:
        lrs += f" (given for batch {r['lr_batch']}, scaled linearly)"
    res = ("BiT rule (160 -> 128 below 96x96 pixels, else 512 -> 480)" if r["resolution"] is None
           else f"resize {r['resolution'][0]}, crop {r['resolution'][1]}")
    select = ("(lr, steps) chosen on val200 after training on train800; final runs on train800val200"
              if len(r["lrs"]) * len(r["steps"]) > 1 else "one configuration, so no selection: final runs on "
              "train800val200")
    changed = f" Changed from the preset: {', '.join(r['changed'])}." if r["changed"] else ""
    return [f"Recipe: preset `{r['preset']}`, {r['description']}.{changed}", "",
            f"Fresh zero-initialised linear head; SGD momentum 0.9, no weight decay; batch {r['batch_size']} "
            f"({r['micro_batch']} per forward pass); lr {lrs} x steps {steps}; schedule {r['schedule']}: "
            f"{SCHEDULE_TEXT[r['schedule']]}; mixup from 20k training examples (alpha 0.1, one lambda per step); "
            f"resolution {res}. {select}; top-1 accuracy on test (mean ± std over seeds)."]


def write_table(result: dict, out: Path) -> None:
    """``vtab.md`` and ``vtab.json`` with the command, machine, versions, the recipe and the data read."""
    prov = provenance()
    lines = [markdown_header("Downstream transfer (VTAB-1k protocol)", prov)]
    if "recipe" in result:
        lines += _recipe_text(result["recipe"])
    lines += ["", "| task | group | lr | steps | test top-1 | seeds | data read |", "|---|---|---|---|---|---|---|"]
    for name, v in result["tasks"].items():
        lines.append(f"| {name} | {v['group']} | {v['lr']:g} | {v['steps']} | {100 * v['mean']:.2f} ± "
                     f"{100 * v['std']:.2f} | {v['seeds']} | {_data_text(v.get('data', []))} |")
    lines += ["", "| group | mean top-1 | tasks |", "|---|---|---|"]
    lines += [f"| {g} | {100 * v['mean']:.2f} | {v['tasks']} |" for g, v in result["groups"].items()]
    score = result["vtab1k_score"]
    lines += ["", f"Mean over the {len(result['tasks'])} tasks: {100 * result['mean_over_tasks']:.2f}."
              + (f" VTAB-1k score (19-task mean): {100 * score:.2f}." if score is not None else
                 " (Not a VTAB-1k score: that needs all 19 tasks.)"), ""]
    atomic_write_text(out / "vtab.md", "\n".join(lines))
    atomic_write_text(out / "vtab.json", json.dumps({"provenance": prov, **result}, indent=1))
