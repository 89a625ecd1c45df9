"""VTAB-1k sweeps: select on val200, retrain on train800val200, score on test, over seeds.

For each task (protocol.md Sec. 4.2): every (learning rate, steps) of the grid is trained on
``train800`` and scored on ``val200``; the best (ties: smaller lr, then fewer steps) is retrained on
``train800val200`` for each seed and scored on ``test``. Each finished run appends one JSON line
to ``<out>/runs.jsonl`` (a single ``write`` + fsync; a torn last line from a crash is ignored), so a
rerun skips what is done and a crash loses at most the runs in flight. Output: ``vtab.md`` and
``vtab.json`` (per-task test accuracy mean and std over seeds, group means, the mean over tasks:
the VTAB-1k score when all 19 are present) and per-example test predictions in ``predictions/``.

Runs execute in this process one after the other (``local``), or as separate processes through
submitit (``submitit-local``: one process per GPU when GPUs are given; ``slurm``: one SLURM job per
task and configuration).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from downstream.demo import DEMO_TASKS, demo_split
from downstream.tasks import GROUPS, TASKS, Task, get_task, resolve_tasks
from harness.io import atomic_write_text
from harness.provenance import markdown_header, provenance

EXECUTORS = ("local", "submitit-local", "slurm")


@dataclass
class SweepSettings:
    """Grid and fine-tuning settings shared by every task (the same sweep for all, as VTAB requires).

    Attributes:
        lrs, steps: the grid (default {0.001, 0.01} x {500, 2500}).
        seeds: final runs per task (mean and std over them).
        batch_size, micro_batch, resolution, clip_grad_norm, device: see
            :class:`downstream.finetune.FinetuneConfig` (``resolution`` = (resize, crop)).
        data_format: ``tfds`` or ``folder`` for VTAB tasks (demo tasks are generated).
        data_dir: TFDS data_dir or the folder-format root.
        check_test_size: refuse a test split whose size differs from the task's (train800, val200
            and train800val200 are always checked).
        schedule: ``bit``, ``ta`` or ``cosine`` (see :class:`downstream.finetune.FinetuneConfig`).
        lr_batch: the batch size the ``lrs`` are given for (scaled linearly to ``batch_size``).
    """

    lrs: "list[float]" = field(default_factory=lambda: [0.001, 0.01])
    steps: "list[int]" = field(default_factory=lambda: [500, 2500])
    seeds: int = 1
    batch_size: int = 512
    micro_batch: int = 64
    resolution: "Optional[list[int]]" = None
    clip_grad_norm: Optional[float] = None
    device: str = "cpu"
    data_format: str = "tfds"
    data_dir: Optional[str] = None
    check_test_size: bool = True
    schedule: str = "bit"
    lr_batch: Optional[int] = None


#: named settings: ``bit`` is the default VTAB-1k sweep (BiT-HyperRule, {0.001, 0.01} x {500, 2500},
#: batch 512); ``demo`` is CPU-sized for the digits demo suite (a few minutes on 2 cores).
PRESETS = {
    "bit": {},
    "demo": dict(lrs=[0.01, 0.05], steps=[50, 100], seeds=2, batch_size=64, micro_batch=64, resolution=[32, 32]),
}


def custom_task(spec: str) -> Task:
    """A user-defined task from one line ``NAME=FOLDER:NUM_CLASSES``: a folder in the VTAB-1k folder
    format (``train800.txt``, ``val200.txt``, ``train800val200.txt``, ``test.txt`` with
    ``relative/path label`` lines). Its split sizes are not checked; flips and crops are allowed.

    Raises:
        ValueError: a malformed line.
    """
    name, _, rest = spec.partition("=")
    folder, _, k = rest.rpartition(":")
    if not (name and folder and k.isdigit() and int(k) > 0):
        raise ValueError(f"custom task {spec!r} must look like NAME=FOLDER:NUM_CLASSES, e.g. birds=/data/birds:200")
    return Task(name, "custom", f"folder:{folder}", "-", int(k), _no_tfds_label, "val200", "test", None,
                train="train800")


def _no_tfds_label(example) -> int:
    raise ValueError("custom tasks are read from their folder, not from TFDS")


def find_task(name: str) -> Task:
    """A VTAB-1k task, a demo task, or a custom task line (``NAME=FOLDER:NUM_CLASSES``)."""
    if "=" in name:
        return custom_task(name)
    return DEMO_TASKS[name] if name in DEMO_TASKS else get_task(name)


def expand_tasks(names: Sequence[str]) -> "list[Task]":
    """``vtab1k``, group names, task names/aliases, ``demo`` (the 4 demo tasks) and custom task lines."""
    out: "list[Task]" = []
    for n in names:
        if n == "demo":
            picks = list(DEMO_TASKS.values())
        elif "=" in n or n in DEMO_TASKS:
            picks = [find_task(n)]
        else:
            picks = resolve_tasks([n])
        out += [t for t in picks if t not in out]
    return out


def load_split(task: Task, split: str, settings: SweepSettings):
    """The task's split from the configured reader (demo tasks: generated)."""
    from downstream.data import folder_split, tfds_split

    if task.group == "demo":
        return demo_split(task, split)
    if task.group == "custom":
        folder = Path(task.tfds.removeprefix("folder:"))
        return folder_split(task, split, folder.parent, validate=False, folder=folder)
    validate = settings.check_test_size or split != "test"
    if settings.data_format == "folder":
        if not settings.data_dir:
            raise ValueError("the folder format needs --data-dir <root with one folder per task>")
        return folder_split(task, split, settings.data_dir, validate)
    return tfds_split(task, split, settings.data_dir, validate)


def run_one(spec: dict) -> dict:
    """One fine-tuning run (picklable: runs in-process or in a submitit job). Returns its record."""
    from downstream.finetune import FinetuneConfig, finetune

    settings = SweepSettings(**spec["settings"])
    task = find_task(spec.get("task_spec", spec["task"]))
    train_split, eval_split = ("train800", "val200") if spec["phase"] == "select" else ("train800val200", "test")
    cfg = FinetuneConfig(lr=spec["lr"], steps=spec["steps"], batch_size=settings.batch_size,
                         micro_batch=settings.micro_batch, seed=spec["seed"], device=settings.device,
                         clip_grad_norm=settings.clip_grad_norm, schedule=settings.schedule,
                         lr_batch=settings.lr_batch,
                         resolution=tuple(settings.resolution) if settings.resolution else None)
    acc, preds = finetune(spec["upstream"], load_split(task, train_split, settings),
                          load_split(task, eval_split, settings), cfg, task.flip, task.crop)
    if spec.get("predictions"):
        preds.save(spec["predictions"])
    return {"key": spec["key"], "task": task.name, "group": task.group, "phase": spec["phase"], "lr": spec["lr"],
            "steps": spec["steps"], "seed": spec["seed"], "split": eval_split, "accuracy": acc}


def _key(task: str, phase: str, lr: float, steps: int, seed: int) -> str:
    return f"{task}|{phase}|lr={lr:g}|steps={steps}|seed={seed}"


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


def sweep(upstream: str, tasks: Sequence[str], out: "str | Path", settings: SweepSettings,
          executor: str = "local", slurm: Optional[dict] = None, progress: Callable[[str], None] = print) -> dict:
    """Run (or finish) the sweep; write the table. Returns the table dict (see :func:`table`).

    Raises:
        ValueError: unknown task or executor; an output folder of another sweep.
        FileNotFoundError: no upstream checkpoint.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: use one of {', '.join(EXECUTORS)}")
    if not Path(upstream).is_file():
        raise FileNotFoundError(f"no upstream checkpoint at {upstream!r}; pass the model.pt of an upstream run")
    from harness.models import load_model

    load_model(upstream)  # fails early: not a checkpoint, or a backbone this timm does not know
    chosen = expand_tasks(tasks)
    out = Path(out)
    (out / "predictions").mkdir(parents=True, exist_ok=True)
    header = {"upstream": str(Path(upstream).resolve()), "settings": asdict(settings)}
    meta = out / "sweep.json"
    if meta.is_file() and json.loads(meta.read_text()) != header:
        raise ValueError(f"{out} holds a sweep of another upstream checkpoint or settings; use another --out")
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
            spec["task_spec"] = f"{t.name}={t.tfds.removeprefix('folder:')}:{t.num_classes}"
        return spec

    run([{**common, **ident(t), "key": _key(t.name, "select", lr, st, 0), "phase": "select", "lr": lr,
          "steps": st, "seed": 0} for t in chosen for lr, st in grid])
    finals = []
    for t in chosen:
        lr, st = min(grid, key=lambda g: (-done[_key(t.name, "select", *g, 0)]["accuracy"], g[0], g[1]))
        finals += [{**common, **ident(t), "key": _key(t.name, "final", lr, st, s), "phase": "final", "lr": lr,
                    "steps": st, "seed": s, "predictions": str(out / "predictions" / f"{t.name}_seed{s}.npz")}
                   for s in range(settings.seeds)]
    run(finals)
    result = table([done[f["key"]] for f in finals], chosen)
    write_table(result, out)
    return result


def table(finals: "list[dict]", tasks: "list[Task]") -> dict:
    """Per-task mean/std test accuracy over seeds, group means, and the mean over tasks.

    The VTAB-1k score is the unweighted mean of the 19 per-task accuracies (not the mean of the
    group means; protocol.md Sec. 3); it is reported only when all 19 tasks are present.
    """
    per_task = {}
    for t in tasks:
        accs = [r["accuracy"] for r in finals if r["task"] == t.name]
        sel = next(r for r in finals if r["task"] == t.name)
        per_task[t.name] = {"group": t.group, "mean": float(np.mean(accs)),
                            "std": float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0, "seeds": len(accs),
                            "lr": sel["lr"], "steps": sel["steps"]}
    groups = {}
    for g in (*GROUPS, "demo", "custom"):
        vals = [v["mean"] for v in per_task.values() if v["group"] == g]
        if vals:
            groups[g] = {"mean": float(np.mean(vals)), "tasks": len(vals)}
    vtab = [v["mean"] for k, v in per_task.items() if k in TASKS]
    return {"tasks": per_task, "groups": groups, "mean_over_tasks": float(np.mean([v["mean"] for v in per_task.values()])),
            "vtab1k_score": float(np.mean(vtab)) if len(vtab) == len(TASKS) else None}


def write_table(result: dict, out: Path) -> None:
    """``vtab.md`` and ``vtab.json`` with the command, machine and versions."""
    prov = provenance()
    lines = [markdown_header("Downstream transfer (VTAB-1k protocol)", prov),
             "Fresh zero-initialised linear head, BiT-HyperRule fine-tuning; (lr, steps) chosen on val200 after "
             "training on train800; final runs on train800val200, top-1 accuracy on test (mean ± std over seeds).",
             "", "| task | group | lr | steps | test top-1 | seeds |", "|---|---|---|---|---|---|"]
    for name, v in result["tasks"].items():
        lines.append(f"| {name} | {v['group']} | {v['lr']:g} | {v['steps']} | {100 * v['mean']:.2f} ± "
                     f"{100 * v['std']:.2f} | {v['seeds']} |")
    lines += ["", "| group | mean top-1 | tasks |", "|---|---|---|"]
    lines += [f"| {g} | {100 * v['mean']:.2f} | {v['tasks']} |" for g, v in result["groups"].items()]
    score = result["vtab1k_score"]
    lines += ["", f"Mean over the {len(result['tasks'])} tasks: {100 * result['mean_over_tasks']:.2f}."
              + (f" VTAB-1k score (19-task mean): {100 * score:.2f}." if score is not None else
                 " (Not a VTAB-1k score: that needs all 19 tasks.)"), ""]
    atomic_write_text(out / "vtab.md", "\n".join(lines))
    atomic_write_text(out / "vtab.json", json.dumps({"provenance": prov, **result}, indent=1))
