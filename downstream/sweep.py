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

import contextlib
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from harness.downstream.config import SweepSettings, recipe
from harness.downstream.records import (  # noqa: F401
    _execute,
    _key,
    _same_sweep,
    append_record,
    changed_data,
    changed_weights,
    check_resume,
    read_records,
    run_one,
    task_data,
)
from harness.downstream.table import table, uncertainty_table, write_table
from harness.io import RunLock, atomic_write_text, path_under
from harness.progress import duration
from harness.records import check_recorded_predictions
from harness.tasks.catalogue import Task
from harness.tasks.taskset import check_tasks, custom_spec, expand_tasks
from harness.tasks.trained_images import SWEEP_SCORED, check_scored_not_trained
from harness.training.loop import batch_norm_layers
from harness.training.precision import check_device
from harness.training.slurm import check_slurm_available, check_slurm_keys

EXECUTORS = ("local", "submitit-local", "slurm")


def upstream_record(upstream: str, weights: "Optional[str | Path]" = None, random_init: bool = False) -> "str | dict":
    """What a sweep records and its runs load (:func:`harness.sources.load_source`, the one loader of every model
    source): a harness ``model.pt`` as its resolved path; an export folder (bare, or spelled ``local-dir:PATH``) as
    ``{source: "local-dir:<resolved folder>", weights: None, sha256 of its model.safetensors, random_init}``;
    ``hf-hub:ORG/NAME`` as ``{source, ...}``; ``timm:NAME`` or ``torchvision:NAME`` as ``{source, weights (resolved
    path), sha256 of the weights, random_init}``.

    Raises:
        FileNotFoundError: no such ``model.pt``, folder or weights file (the message lists every spelling).
        ValueError: ``local-dir:`` of a file (:func:`harness.sources.check_local_dir`); a run folder's ``model.pt``
            that is not the model its run measured (:func:`harness.checkpoint_files.check_run_model`: its weights;
            the head's evaluation options are not compared, the transfer drops the head: audit23 A23-20).
    """
    from harness.data.cache import file_digest
    from harness.sources import check_local_dir
    from harness.weights import HF_HUB_PREFIX, LOCAL_DIR_PREFIX, TIMM_PREFIX, TORCHVISION_PREFIX

    text = str(upstream)
    check_local_dir(text, text)
    if text.startswith(HF_HUB_PREFIX):
        return {"source": text, "weights": None, "sha256": None, "random_init": bool(random_init)}
    folder = Path(text[len(LOCAL_DIR_PREFIX) :] if text.startswith(LOCAL_DIR_PREFIX) else text)
    if text.startswith(LOCAL_DIR_PREFIX) or folder.is_dir():
        if not folder.is_dir():
            raise FileNotFoundError(f"no folder at {str(folder)!r} ({text}): give the folder save_pretrained wrote")
        held = folder / "model.safetensors"
        return {
            "source": LOCAL_DIR_PREFIX + str(folder.resolve()),
            "weights": None,
            "sha256": file_digest(held) if held.is_file() else None,
            "random_init": bool(random_init),
        }
    if not text.startswith((TIMM_PREFIX, TORCHVISION_PREFIX)):
        if not Path(upstream).is_file():
            raise FileNotFoundError(
                f"no upstream checkpoint at {upstream!r}; give a harness model.pt, a folder save_pretrained wrote "
                "(or local-dir:PATH, hf-hub:ORG/NAME), or timm:NAME / torchvision:NAME with --weights FILE"
            )
        from harness.checkpoint_files import check_run_model, followed

        file = followed(upstream)  # a link to a run's model.pt is that run's (audit23 A23-10)
        if file.name == "model.pt":  # in a run folder: the run's own weights (audit22 A22-10); the head is dropped,
            check_run_model(file.parent, options=False)  # so its evaluation options are not compared (audit23 A23-20)
        return str(Path(upstream).resolve())
    if weights is not None and not Path(weights).is_file():
        raise FileNotFoundError(f"no weights file at {str(weights)!r} (--weights)")

    return {
        "source": str(upstream),
        "weights": str(Path(weights).resolve()) if weights else None,
        "sha256": file_digest(weights) if weights else None,
        "random_init": bool(random_init),
    }


def sweep(
    upstream: str,
    tasks: Sequence[str],
    out: "str | Path",
    settings: SweepSettings,
    executor: str = "local",
    slurm: Optional[dict] = None,
    progress: Callable[[str], None] = print,
    weights: "Optional[str | Path]" = None,
    random_init: bool = False,
    log_with: Sequence[str] = (),
) -> dict:
    """Run (or finish) the sweep; write the table. Returns the table dict (see :func:`harness.downstream.table.table`).

    ``upstream`` is any model source of :func:`harness.models.load_source` (a harness ``model.pt``, or
    ``timm:NAME`` with ``weights``, the local cache, or ``random_init``).

    Everything is checked before the first run and before anything is written: the executor, the
    device (for ``local`` and ``submitit-local``; a SLURM job's GPU is not visible from here), the trackers, the
    model (loaded once), the task names and all four splits of every task (:func:`check_tasks`). ``progress`` gets a
    line from the first load on: the model, each task's data check, each phase with the runs left, each run done.

    Selection, on val200 only (test chooses nothing): the hom head takes the (lr, steps) of the highest val200
    accuracy (ties: smaller lr, then fewer steps; the VTAB rule, unchanged). A noisy head (``settings.head``
    diag / het / pe) takes the (lr, steps, τ) of the highest val200 accuracy, ties broken by the lower val200 NLL
    (then smaller lr, fewer steps, smaller τ). Accuracy, because it is VTAB's criterion and Table 6's metric, so the
    noisy head is chosen by the same rule as the hom head it is compared with; NLL next, because 200 examples give
    accuracy in steps of 0.5 points, so ties are common, and held-out NLL is how the paper and the upstream
    experiments choose τ. The chosen τ is in each task's row (``temperature``) and in the recipe
    (``chosen_temperatures``).

    With the ``local`` executor under ``accelerate launch`` the processes split each phase's runs
    (:mod:`harness.downstream.processes`). ``log_with``: trackers (:mod:`harness.training.trackers`; the CLI's
    default is TensorBoard, in ``<out>/tb``) that get the header, every run's accuracy and NLL, and the table.

    Raises:
        ValueError: no task, an unknown task, executor or tracker; a tracker not installed; a device this machine lacks; bad
            data; weights that do not fit the architecture, or none offline; an output folder of another sweep (or of
            the same model.pt before its weights changed: :func:`changed_weights`; or of a task's other folder or
            list files: :func:`changed_data`); a run folder's model.pt that
            is not its run's (:func:`harness.checkpoint_files.check_run_model`); a
            ``slurm`` key the executor does not read (:func:`harness.training.slurm.check_slurm_keys`; ``slurm``'s
            ``visible_gpus`` is ``--gpus``, read by ``submitit-local``); ``slurm`` on a machine without ``sbatch`` or
            ``srun`` (:func:`harness.training.slurm.check_slurm_available`); fine-tuning passes of one image
            (micro_batch 1, or a training split of one example) for a model with BatchNorm (:func:`_check_batch_norm`);
            a task's val200 or test list naming an image the harness model.pt was trained on
            (:func:`harness.tasks.trained_images.check_scored_not_trained`).
        FileNotFoundError: no upstream checkpoint or weights file; missing data.
    """
    from harness.downstream.processes import Processes, SweepLog, processes
    from harness.training.trackers import available

    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: use one of {', '.join(EXECUTORS)}")
    # the --slurm keys this executor reads (visible_gpus: --gpus, for submitit-local), then SLURM's programs
    check_slurm_keys(executor, {k: v for k, v in (slurm or {}).items() if k != "visible_gpus"})
    check_slurm_available(executor)
    if not any(str(t).strip() for t in tasks):
        raise ValueError(
            f"tasks (--tasks) {list(tasks)!r} names no task, and a sweep over no task has no score: give task names "
            "(e.g. demo_digit), a group (vtab1k, natural, specialized, structured, demo) or a custom task NAME=FOLDER:K"
        )
    if executor != "slurm":
        check_device(settings.device)
    log_with = available(list(log_with), "--log-with", progress)
    procs = processes(settings.device) if executor == "local" else Processes()
    chosen = expand_tasks(tasks)  # task names before the model: a typo costs no load
    record = upstream_record(upstream, weights, random_init)
    check_scored_not_trained(upstream, chosen, settings, SWEEP_SCORED, "--upstream")  # audit22 A22-07
    progress(f"[downstream] loading the model {upstream}")
    preprocessing, norms = _load_model(upstream, weights, random_init, settings)
    out = Path(out)
    # each task's folder and list digests: a rerun after they changed is another sweep (audit24 A24-03)
    header = {"upstream": record, "settings": asdict(settings), "task_data": task_data(chosen, settings)}
    meta = check_resume(out, header, upstream)
    sizes = check_tasks(chosen, settings, lambda line: progress(f"[downstream] {line}"))
    _check_batch_norm(norms, settings, sizes, upstream)  # a training split of one example
    # one sweep at a time in a folder: its main process holds the folder's lock, which on entry also removes the
    # temporaries a killed write left (in the folder and in predictions/, e.g. an orphan .sweep.json.<random>.tmp)
    lock = RunLock(out, subfolders=("predictions",)) if procs.main else contextlib.nullcontext()
    with lock:
        if procs.main:
            (out / "predictions").mkdir(parents=True, exist_ok=True)
            atomic_write_text(meta, json.dumps(header, indent=1))
        procs.wait()
        with SweepLog(log_with if procs.main else (), out, header, [t.name for t in chosen]) as log:
            runner = _Runner(out, executor, slurm or {}, progress, procs, log)
            result = _phases(chosen, settings, header, out, preprocessing, runner)
            if procs.main:
                write_table(result, out)
                log.table(result, out)
    return result


def check_finished(upstream: str, tasks: Sequence[str], out: "str | Path", settings: SweepSettings) -> None:
    """A finished sweep read without resuming it (``harness run --no-train`` reports a transfer study's sweeps as they
    are) is the sweep :func:`sweep` would resume now: of ``upstream`` (a harness ``model.pt``) as it is now, of
    ``settings``, and of each task's folder and list files as they are now (:func:`check_resume`'s rules; a
    ``--no-train`` report read the sweeps without that check).

    Raises:
        ValueError: as :func:`check_resume`, naming the sweep folder, what changed and the fix.
    """
    header = {"upstream": upstream_record(upstream), "settings": asdict(settings)}
    header["task_data"] = task_data(expand_tasks(tasks), settings)
    check_resume(Path(out), header, upstream)


def _load_model(upstream: Any, weights: Any, random_init: bool, settings: SweepSettings) -> "tuple[dict, list[str]]":
    """Load the model once, before any data is read: not a checkpoint, an unknown backbone, unfit weights and
    passes of one image for its BatchNorm layers (:func:`_check_batch_norm`) fail now. Returns what is kept in
    memory: its preprocessing and the names of its BatchNorm layers."""
    from harness.sources import load_source

    model = load_source(upstream, weights, random_init)
    preprocessing, norms = dict(model.config.preprocessing), batch_norm_layers(model)
    _check_batch_norm(norms, settings, {}, upstream)
    return preprocessing, norms


def _check_batch_norm(norms: "list[str]", settings: SweepSettings, sizes: dict, upstream: Any) -> None:
    """Refuse fine-tuning forward passes of one image for a model with BatchNorm layers ``norms``
    (:func:`harness.training.loop.check_batch_norm_batch`): a pass takes ``micro_batch`` images (at most
    ``batch_size``, whose passes are accumulated), and a training split (train800, train800val200; ``sizes``: those of
    :func:`check_tasks`) smaller than that is one pass of all its examples (a larger one drops its last partial pass,
    :func:`harness.tasks.views.task_views`), so a split of one example trains passes of one image.

    Raises:
        ValueError: naming micro_batch (--micro-batch) or the task's split, a BatchNorm layer and the fix.
    """
    from harness.training.loop import check_batch_norm_batch

    micro, owner = min(settings.micro_batch, settings.batch_size), f"the model {upstream}"
    check_batch_norm_batch(
        norms,
        micro,
        f"micro_batch={settings.micro_batch} (--micro-batch) is the images of one fine-tuning forward pass "
        f"(batch_size={settings.batch_size}, --batch-size, accumulates passes)",
        "use --micro-batch 2 or more, and a --batch-size it divides",
        owner,
    )
    check_split_passes(norms, micro, sizes, owner, f"micro_batch={micro}, --micro-batch,")


def check_split_passes(norms: "list[str]", micro: int, sizes: dict, owner: str, shown: str) -> None:
    """Refuse a transfer task's training split (train800, train800val200) of one example for a model with BatchNorm
    layers ``norms``: a split smaller than the ``micro`` images of a fine-tuning pass is one pass of all its examples
    (:func:`harness.tasks.views.task_views`), here of one image (:func:`harness.training.loop.check_batch_norm_batch`).
    The rule of the sweep and of an experiment's downstream stage (before its upstream training).

    Args:
        norms: the model's BatchNorm layers; none: nothing to refuse.
        micro: the images of one fine-tuning forward pass (``min(micro_batch, batch_size)``).
        sizes: the examples of each split by task (:func:`harness.tasks.taskset.check_tasks`).
        owner: the model, as the message names it.
        shown: how the message names ``micro`` (``micro_batch=8, --micro-batch,``).

    Raises:
        ValueError: naming the task, its split and size, a BatchNorm layer and the fix.
    """
    from harness.training.loop import check_batch_norm_batch

    for task, splits in sizes.items():
        for split in ("train800", "train800val200"):  # the splits fine-tunes train on
            n = splits.get(split, micro)
            check_batch_norm_batch(
                norms,
                min(n, micro),
                f"task {task}'s {split} split has {n} example(s), fine-tuned as one forward pass of them all (a split "
                f"smaller than {shown} is not cut into passes)",
                f"list 2 or more examples in the task's {split}.txt",
                owner,
            )


class _Runner:
    """Runs a phase's specs not done yet (this process's share of them under a launch), records each in
    ``<out>/runs.jsonl``, logs it, and (several processes) waits for the others and reads their records back."""

    def __init__(
        self, out: Path, executor: str, slurm: dict, progress: Callable[[str], None], procs: Any, log: Any
    ) -> None:
        self.out, self.executor, self.slurm, self.progress = out, executor, slurm, progress
        self.procs, self.log = procs, log
        self.store = out / "runs.jsonl"
        self.done = read_records(self.store)

    def _record(self, rec: dict) -> None:
        append_record(self.store, rec)
        self.done[rec["key"]] = rec
        self.log.runs([rec])

    def run(self, specs: "list[dict]", what: str) -> None:
        from harness.downstream.processes import new_records

        for s in specs:  # a record reused is what its saved predictions measured (audit26 A26-15)
            if s["key"] in self.done and s.get("predictions"):
                fix = f"delete that line of {self.store} to fine-tune the run again, or restore the file"
                check_recorded_predictions(s["predictions"], self.done[s["key"]], f"{self.store}'s {s['key']}", fix)
        todo = [s for s in specs if s["key"] not in self.done]
        if not todo:
            return
        if self.executor != "local":
            self.progress(f"[downstream] {what}: {len(todo)} of {len(specs)} run(s) to do, as {self.executor} jobs")
            for rec in _execute(todo, self.executor, self.out / "jobs", self.slurm):
                self._record(rec)
            return
        mine = self.procs.share(todo)
        share = f"; {len(mine)} in process {self.procs.rank} of {self.procs.world}" if self.procs.world > 1 else ""
        self.progress(f"[downstream] {what}: {len(todo)} of {len(specs)} run(s) to do{share}")
        tic = time.perf_counter()
        for i, s in enumerate(mine, 1):
            name = f"{s['task']} {s['phase']} lr={s['lr']:g}"
            rec = run_one(s, lambda line, name=name, i=i: self.progress(f"[downstream] {i}/{len(mine)} {name}: {line}"))
            self._record(rec)
            tau = "" if rec.get("temperature") is None else f" tau={rec['temperature']:g}"
            left = (time.perf_counter() - tic) / i * (len(mine) - i)
            self.progress(
                f"[downstream] {i}/{len(mine)} {rec['task']:22s} {rec['phase']:6s} lr={rec['lr']:g} "
                f"steps={rec['steps']}{tau} seed={rec['seed']}: {rec['split']} accuracy {rec['accuracy']:.4f}"
                + (f" (about {duration(left)} left)" if i < len(mine) else "")
            )
        if self.procs.world > 1:
            self.procs.wait()
            self.log.runs(new_records(self.store, self.done, read_records))


def _phases(
    chosen: "list[Task]", settings: SweepSettings, header: dict, out: Path, preprocessing: dict, runner: _Runner
) -> dict:
    """The selection runs (train800 -> val200, every grid point of every task), the final seeds of each task's
    choice (train800val200 -> test), and the table's content (see :func:`sweep`)."""
    done = runner.done
    common = {"upstream": header["upstream"], "settings": header["settings"]}
    noisy = settings.head != "hom"
    grid = [
        (lr, st, tau)
        for lr in settings.lrs
        for st in settings.steps
        for tau in (settings.temperatures if noisy else [None])
    ]

    def ident(t: Task) -> dict:
        spec = {"task": t.name}
        if t.group == "custom":
            spec["task_spec"] = custom_spec(t)
        return spec

    def select(t: Task, lr: float, st: "Optional[int]", tau: "Optional[float]") -> dict:  # train800 -> val200
        tag = "" if tau is None else f"_tau{tau:g}"
        name = f"{t.name}_val200_lr{lr:g}_steps{'rule' if st is None else st}{tag}.npz"
        return {
            **common,
            **ident(t),
            "key": _key(t.name, "select", lr, st, 0, tau),
            "phase": "select",
            "lr": lr,
            "steps": st,
            "seed": 0,
            "temperature": tau,
            "predictions": str(path_under(out, "predictions", name)),
        }

    def rank(t: Task, g: tuple) -> tuple:  # the selection criterion on val200 (see the docstring)
        rec = done[_key(t.name, "select", g[0], g[1], 0, g[2])]
        return (-rec["accuracy"], rec["nll"], g[0], g[1] or 0, g[2]) if noisy else (-rec["accuracy"], g[0], g[1] or 0)

    if len(grid) > 1:
        runner.run([select(t, *g) for t in chosen for g in grid], "selection on val200")
    finals, chosen_runs = [], {}
    for t in chosen:
        lr, st, tau = grid[0] if len(grid) == 1 else min(grid, key=lambda g: rank(t, g))
        chosen_runs[t.name] = select(t, lr, st, tau)
        finals += [
            {
                **common,
                **ident(t),
                "key": _key(t.name, "final", lr, st, s, tau),
                "phase": "final",
                "lr": lr,
                "steps": st,
                "seed": s,
                "temperature": tau,
                "predictions": str(path_under(out, "predictions", f"{t.name}_seed{s}.npz")),
            }
            for s in range(settings.seeds)
        ]
    runner.run(finals, "final seeds on test")
    if len(grid) == 1:  # no selection ran: one fine-tune on train800 scored on val200, for temperature scaling
        runner.run(list(chosen_runs.values()), "val200 fine-tunes for temperature scaling")
    paths: "dict[str, list[str]]" = {}
    for f in finals:
        paths.setdefault(f["task"], []).append(f["predictions"])
    heldout = {name: spec["predictions"] for name, spec in chosen_runs.items()}
    used = recipe(settings)
    if noisy:
        used["chosen_temperatures"] = {name: spec["temperature"] for name, spec in chosen_runs.items()}
    result = {
        "recipe": used,
        "upstream": header["upstream"],
        "preprocessing": preprocessing,
        **table([done[f["key"]] for f in finals], chosen),
        "uncertainty": uncertainty_table(paths, chosen, heldout),
        "predictions": {t: [str(Path(p).relative_to(out)) for p in ps] for t, ps in paths.items()},
    }
    if noisy:
        for name, spec in chosen_runs.items():
            result["tasks"][name]["temperature"] = spec["temperature"]
    return result
