"""VTAB-1k sweeps: select on val200, retrain on train800val200, score on test, over seeds.

For each task (Zhai et al. 2019, VTAB, Sec. 4; google-research/task_adaptation): every (learning rate, steps) of the grid is trained on
``train800`` and scored on ``val200``; the best (ties: smaller lr, then fewer steps) is retrained on
``train800val200`` for each seed and scored on ``test``. A grid of one configuration has nothing to
select: its final runs start at once. With a noisy transfer head (``SweepSettings.head`` diag / het / pe, beyond
the paper's Table 6 protocol) every τ of ``SweepSettings.temperatures`` joins the grid: (lr, steps, τ) are chosen
together on val200 (see :func:`sweep`). Each finished run appends one JSON line to
``<out>/runs.jsonl`` (a single ``write`` + fsync; a torn last line from a crash is ignored), with the
data it read (TFDS name and version, or the list files), so a rerun skips what is done and a crash
loses at most the runs in flight. Output: ``vtab.md`` and ``vtab.json`` (the recipe used, per-task
test accuracy mean and std over seeds, the data read, group means, the mean over tasks: the VTAB-1k
score when all 19 are present) and per-example test predictions in ``predictions/``.

Before the first run, the settings, the device and all four splits of every task are checked
(:func:`check_tasks`), so bad data is reported before hours of training, not after.

The settings and recipes are :class:`harness.downstream.config.SweepSettings` and
:data:`harness.downstream.config.PRESETS`; the table is written by :mod:`harness.downstream.table`.

Runs execute in this process one after the other (``local``), or as separate processes through
submitit (``submitit-local``: one process per GPU when GPUs are given; ``slurm``: one SLURM job per
task and configuration).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness.downstream.config import SweepSettings, recipe
from harness.downstream.demo import DEMO_TASKS, demo_split
from harness.downstream.table import table, uncertainty_table, write_table
from harness.downstream.tasks import GROUPS, SPLITS, Task, get_task, resolve_tasks
from harness.io import atomic_write_text, check_name, path_under

EXECUTORS = ("local", "submitit-local", "slurm")


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
    check_name(name, "custom task name")  # it names result files
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
    from harness.downstream.data import folder_split, tfds_split

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
    from harness.downstream.data import check_split, check_tfds_split

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
    task, phase, lr, steps actually run, seed, split scored, accuracy, NLL (nats, mean over the split) and
    ``data`` (what was read); with a noisy head also ``head`` and ``temperature`` (the spec's τ)."""
    from harness.downstream.finetune import FinetuneConfig, finetune, resolved_steps

    settings = SweepSettings(**spec["settings"])
    task = find_task(spec.get("task_spec", spec["task"]))
    train_split, eval_split = ("train800", "val200") if spec["phase"] == "select" else ("train800val200", "test")
    cfg = FinetuneConfig(lr=spec["lr"], steps=spec["steps"], batch_size=settings.batch_size,
                         micro_batch=settings.micro_batch, seed=spec["seed"], device=settings.device,
                         clip_grad_norm=settings.clip_grad_norm, schedule=settings.schedule,
                         lr_batch=settings.lr_batch, channels_last=settings.channels_last,
                         resolution=tuple(settings.resolution) if settings.resolution else None,
                         head=settings.head, num_factors=settings.num_factors,
                         train_mc_samples=settings.train_mc_samples, eval_mc_samples=settings.eval_mc_samples,
                         **({} if spec.get("temperature") is None else {"temperature": spec["temperature"]}))
    train, evaluation = load_split(task, train_split, settings), load_split(task, eval_split, settings)
    acc, preds = finetune(spec["upstream"], train, evaluation, cfg, task.flip, task.crop)
    if spec.get("predictions"):
        preds.save(spec["predictions"])
    data = [train.source] + ([evaluation.source] if evaluation.source != train.source else [])
    noisy = {} if settings.head == "hom" else {"head": settings.head, "temperature": spec["temperature"]}
    return {"key": spec["key"], "task": task.name, "group": task.group, "phase": spec["phase"], "lr": spec["lr"],
            "steps": resolved_steps(cfg, len(train)), "seed": spec["seed"], "split": eval_split, "accuracy": acc,
            "nll": preds.nll(), **noisy, "data": data}


def _key(task: str, phase: str, lr: float, steps: Optional[int], seed: int, temperature: Optional[float] = None) -> str:
    """A run's key in ``runs.jsonl``; a noisy head's τ is appended (``|tau=1``), so a hom sweep's keys are those of
    sweeps written before noisy heads existed."""
    key = f"{task}|{phase}|lr={lr:g}|steps={'rule' if steps is None else steps}|seed={seed}"
    return key if temperature is None else f"{key}|tau={temperature:g}"


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
    from harness.extras import require

    submitit = require("submitit", f"--executor {executor}")

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


def upstream_record(upstream: str, weights: "Optional[str | Path]" = None, random_init: bool = False) -> "str | dict":
    """What a sweep records and its runs load (:func:`harness.models.load_source`): a harness ``model.pt`` as its
    resolved path; ``timm:NAME`` or ``torchvision:NAME`` as ``{source, weights (resolved path), sha256 of the
    weights, random_init}``.

    Raises:
        FileNotFoundError: no such ``model.pt`` or weights file.
    """
    from harness.weights import TIMM_PREFIX, TORCHVISION_PREFIX

    if not str(upstream).startswith((TIMM_PREFIX, TORCHVISION_PREFIX)):
        if not Path(upstream).is_file():
            raise FileNotFoundError(f"no upstream checkpoint at {upstream!r}; pass the model.pt of an upstream run, "
                                    "or timm:NAME with --weights FILE")
        return str(Path(upstream).resolve())
    if weights is not None and not Path(weights).is_file():
        raise FileNotFoundError(f"no weights file at {str(weights)!r} (--weights)")
    from harness.data.cache import file_digest

    return {"source": str(upstream), "weights": str(Path(weights).resolve()) if weights else None,
            "sha256": file_digest(weights) if weights else None, "random_init": bool(random_init)}


def sweep(upstream: str, tasks: Sequence[str], out: "str | Path", settings: SweepSettings,
          executor: str = "local", slurm: Optional[dict] = None, progress: Callable[[str], None] = print,
          weights: "Optional[str | Path]" = None, random_init: bool = False) -> dict:
    """Run (or finish) the sweep; write the table. Returns the table dict (see :func:`harness.downstream.table.table`).

    ``upstream`` is any model source of :func:`harness.models.load_source` (a harness ``model.pt``, or
    ``timm:NAME`` with ``weights``, the local cache, or ``random_init``).

    Everything is checked before the first run and before anything is written: the executor, the
    device (for ``local`` and ``submitit-local``; a SLURM job's GPU is not visible from here), the
    model (loaded once), the task names and all four splits of every task (:func:`check_tasks`).

    Selection, on val200 only (test chooses nothing): the hom head takes the (lr, steps) of the highest val200
    accuracy (ties: smaller lr, then fewer steps; the VTAB rule, unchanged). A noisy head (``settings.head``
    diag / het / pe) takes the (lr, steps, τ) of the highest val200 accuracy, ties broken by the lower val200 NLL
    (then smaller lr, fewer steps, smaller τ). Accuracy, because it is VTAB's criterion and Table 6's metric, so the
    noisy head is chosen by the same rule as the hom head it is compared with; NLL next, because 200 examples give
    accuracy in steps of 0.5 points, so ties are common, and held-out NLL is how the paper and the upstream
    experiments choose τ. The chosen τ is in each task's row (``temperature``) and in the recipe
    (``chosen_temperatures``).

    Raises:
        ValueError: unknown task or executor; a device this machine lacks; bad data; weights that do not fit
            the architecture, or none offline; an output folder of another sweep.
        FileNotFoundError: no upstream checkpoint or weights file; missing data.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: use one of {', '.join(EXECUTORS)}")
    if executor != "slurm":
        check_device(settings.device)
    record = upstream_record(upstream, weights, random_init)
    from harness.models import load_source

    # fails early: not a checkpoint, an unknown backbone, unfit weights; only its preprocessing is kept in memory
    preprocessing = dict(load_source(upstream, weights, random_init).config.preprocessing)
    chosen = expand_tasks(tasks)
    out = Path(out)
    header = {"upstream": record, "settings": asdict(settings)}
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
                tau = "" if rec.get("temperature") is None else f" tau={rec['temperature']:g}"
                progress(f"{rec['task']:22s} {rec['phase']:6s} lr={rec['lr']:g} steps={rec['steps']}{tau} "
                         f"seed={rec['seed']}: {rec['split']} accuracy {rec['accuracy']:.4f}")
            return
        for rec in _execute(todo, executor, out / "jobs", slurm or {}):
            append_record(store, rec)
            done[rec["key"]] = rec

    noisy = settings.head != "hom"
    grid = [(lr, st, tau) for lr in settings.lrs for st in settings.steps
            for tau in (settings.temperatures if noisy else [None])]

    def ident(t: Task) -> dict:
        spec = {"task": t.name}
        if t.group == "custom":
            spec["task_spec"] = custom_spec(t)
        return spec

    def select(t: Task, lr: float, st: "Optional[int]", tau: "Optional[float]") -> dict:  # train800 -> val200
        tag = "" if tau is None else f"_tau{tau:g}"
        name = f"{t.name}_val200_lr{lr:g}_steps{'rule' if st is None else st}{tag}.npz"
        return {**common, **ident(t), "key": _key(t.name, "select", lr, st, 0, tau), "phase": "select", "lr": lr,
                "steps": st, "seed": 0, "temperature": tau, "predictions": str(path_under(out, "predictions", name))}

    def rank(t: Task, g: tuple) -> tuple:  # the selection criterion on val200 (see the docstring)
        rec = done[_key(t.name, "select", g[0], g[1], 0, g[2])]
        return ((-rec["accuracy"], rec["nll"], g[0], g[1] or 0, g[2]) if noisy
                else (-rec["accuracy"], g[0], g[1] or 0))

    if len(grid) > 1:
        run([select(t, *g) for t in chosen for g in grid])
    finals, chosen_runs = [], {}
    for t in chosen:
        lr, st, tau = grid[0] if len(grid) == 1 else min(grid, key=lambda g: rank(t, g))
        chosen_runs[t.name] = select(t, lr, st, tau)
        finals += [{**common, **ident(t), "key": _key(t.name, "final", lr, st, s, tau), "phase": "final", "lr": lr,
                    "steps": st, "seed": s, "temperature": tau,
                    "predictions": str(path_under(out, "predictions", f"{t.name}_seed{s}.npz"))}
                   for s in range(settings.seeds)]
    run(finals)
    if len(grid) == 1:  # no selection ran: one fine-tune on train800 scored on val200, for temperature scaling
        run(list(chosen_runs.values()))
    paths: "dict[str, list[str]]" = {}
    for f in finals:
        paths.setdefault(f["task"], []).append(f["predictions"])
    heldout = {name: spec["predictions"] for name, spec in chosen_runs.items()}
    used = recipe(settings)
    if noisy:
        used["chosen_temperatures"] = {name: spec["temperature"] for name, spec in chosen_runs.items()}
    result = {"recipe": used, "upstream": record, "preprocessing": preprocessing,
              **table([done[f["key"]] for f in finals], chosen),
              "uncertainty": uncertainty_table(paths, chosen, heldout),
              "predictions": {t: [str(Path(p).relative_to(out)) for p in ps] for t, ps in paths.items()}}
    if noisy:
        for name, spec in chosen_runs.items():
            result["tasks"][name]["temperature"] = spec["temperature"]
    write_table(result, out)
    return result
