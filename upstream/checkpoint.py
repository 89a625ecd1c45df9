"""Resumable state of an upstream run (step 4 of :func:`harness.upstream.train.run`): ``checkpoints/last.pt``,
one file written atomically that holds the model, optimiser, schedule, the RNG of every process, the data position
and the record so far, so a kill at any point leaves either the previous checkpoint or the next one, never a mix;
and the files a new run writes first (``config.yaml``, ``run.json``)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import torch

from harness.checkpoint_files import STATE_PREFIX
from harness.config import to_dict
from harness.data.split_identity import RECORD_KEY as SPLIT_KEY
from harness.data.split_identity import split_identity
from harness.data.splits import absolute_path
from harness.io import atomic_torch_save, atomic_write_text, json_dumps, read_json
from harness.provenance import provenance
from harness.upstream.parts import Progress, Training

STATE_FORMAT = f"{STATE_PREFIX}2"  # /2: one RNG state per process, in the same file


def _rng_state() -> dict:
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [int(v) if not isinstance(v, np.ndarray) else v.tolist() for v in np.random.get_state()[1:]],
        "python": list(random.getstate()[1]) + [random.getstate()[0]],
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state(("MT19937", np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    *py, version = state["python"]
    random.setstate((version, tuple(py), None))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def write_run_files(t: Training, config_yaml: str) -> None:
    """A new run's ``config.yaml`` and ``run.json`` (command, machine, versions, data, label noise, loss,
    processes, precision, ``data_path``: data.path as given and made absolute,
    :func:`harness.data.splits.absolute_path`, which :func:`harness.importing.run_data` reads, the few-shot
    monitor's task data, :func:`monitor_task_data`, and what the training split holds,
    :func:`harness.data.split_identity.split_identity`); main process only."""
    if not t.main:
        return
    d = t.data
    t.run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(t.run_dir / "config.yaml", config_yaml)
    meta = {
        **provenance(),
        "config": to_dict(t.cfg),
        "train_data": d.train.description,
        "eval_data": d.eval.description,
        "num_train": len(d.train),
        "num_eval": len(d.eval),
        "class_names": d.train.class_names,
        "label_noise": d.noise_info,
        "loss": d.loss_info,
        "num_processes": t.accelerator.num_processes,
        "mixed_precision": t.accelerator.mixed_precision,
        # the folder data.path named from where the run started (a relative one read from elsewhere: audit22 A22-02)
        "data_path": {"path": t.cfg.data.path, "absolute": absolute_path(t.cfg.data.source, t.cfg.data.path)},
        MONITOR_KEY: monitor_task_data(to_dict(t.cfg).get("train") or {}),  # a resume reads the same (audit25 A25-12)
        SPLIT_KEY: split_identity(d.train),  # what the training split holds: a resume compares (audit26 A26-17)
    }
    atomic_write_text(t.run_dir / "run.json", json_dumps(meta, indent=1))


def record_resumed(t: Training, config_yaml: str) -> None:
    """A resumed run's record of the settings it resumes with, where they differ from those it started with (only
    those that change nothing it trains may: :func:`harness.upstream.train.same_config`, audit19 A19-10: a smaller
    ``data.eval_batch_size``, another ``train.log_every``...): ``config.yaml`` and ``run.json``'s ``config`` are
    rewritten with the new values, and ``run.json``'s ``resumed`` list gets ``{"step": the step it resumed at,
    "changed": {"data.eval_batch_size": [256, 32], ...}}`` (the values before and after); main process only, nothing
    written when the settings are the same.
    """
    import yaml

    from harness.model_identity import flat_settings

    saved_file = t.run_dir / "config.yaml"
    if not t.main or not saved_file.is_file() or saved_file.read_text() == config_yaml:
        return
    old, new = (flat_settings(yaml.safe_load(text) or {}) for text in (saved_file.read_text(), config_yaml))
    changed = {k: [old.get(k), new.get(k)] for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)}
    if not changed:
        return
    meta = read_json(t.run_dir / "run.json") or {}
    meta["config"] = to_dict(t.cfg)
    meta["resumed"] = [*meta.get("resumed", []), {"step": t.p.step, "changed": changed}]
    atomic_write_text(t.run_dir / "run.json", json_dumps(meta, indent=1))  # first: one cut short here is redone
    atomic_write_text(saved_file, config_yaml)
    print(f"{t.run_dir}: resumed with {', '.join(f'{k}={v[1]!r} (was {v[0]!r})' for k, v in changed.items())}")


def resume(t: Training) -> None:
    """Load ``checkpoints/last.pt`` into the run: model, optimiser, schedule, position, record, and this process's
    RNG.

    Raises:
        ValueError: the file cannot be read as a training state, or is another kind of file; a shard stream read
            with other process / loader-worker counts; a state of another number of processes (each message
            names the fix).
    """
    path = t.ckpt_dir / "last.pt"
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # damaged, or holding objects that weights-only loading refuses to build
        raise ValueError(
            f"{path} cannot be read as a training state ({type(e).__name__}); delete it to start the run over"
        ) from e
    if state.get("format") == f"{STATE_PREFIX}1":  # one process's RNG, saved with the model
        state["rng"] = [state["rng"]]
    elif state.get("format") != STATE_FORMAT:
        raise ValueError(f"{path} is not an upstream training state; delete it to start over")
    try:
        t.accelerator.unwrap_model(t.model).load_state_dict(state["model"])
        t.optimizer.load_state_dict(state["optimizer"])
        t.scheduler.load_state_dict(state["scheduler"])
    except (RuntimeError, ValueError, KeyError, TypeError) as e:  # another model's or optimiser's state
        first = str(e).splitlines()[0][:160] if str(e) else ""
        raise ValueError(
            f"{path} does not fit this run's model or optimiser ({type(e).__name__}: {first}): it is "
            "another run's state; delete it to start the run over"
        ) from None
    p = t.p
    p.epoch, p.batch_in_epoch, p.step = state["epoch"], state["batch_in_epoch"], state["step"]
    p.history, p.best, p.timing = state["history"], state["best"], {"wall_seconds": 0.0, **state["timing"]}
    p.fewshot = list(state.get("fewshot", []))  # absent from states written before the monitor existed
    rng, world, cfg = state["rng"], t.data.world, t.cfg
    if t.data.stream and state.get("stream") != t.data.layout:
        saved = state.get("stream") or {}
        raise ValueError(
            f"{path} was written reading the shards with {saved.get('world_size')} "
            f"process(es) x {saved.get('num_workers')} loader worker(s) and this run has {world} x "
            f"{cfg.data.num_workers}: a shard stream's order depends on both, so the run resumes "
            f"exactly only with the same; resume with --num_processes {saved.get('world_size')} and "
            f"data.num_workers={saved.get('num_workers')}, or start a new run"
        )
    if len(rng) != t.accelerator.num_processes:
        raise ValueError(
            f"{path} was written by {len(rng)} processes and this run has "
            f"{t.accelerator.num_processes}; resume with --num_processes {len(rng)} (the data order "
            "and the HET noise of every process are part of the state)"
        )
    _set_rng_state(rng[t.accelerator.process_index])
    if t.main:
        print(f"{t.run_dir}: resuming at epoch {p.epoch}, batch {p.batch_in_epoch} (step {p.step})")


def save_state(t: Training) -> None:
    """Write ``checkpoints/last.pt`` (every process's RNG gathered, the file written by the main process), then
    wait for every process.

    Raises:
        KeyboardInterrupt: Ctrl-C during the write, whatever error the interrupted ``torch.save`` ended with (the
            temporary file is removed and the previous ``last.pt`` kept: :func:`harness.io.interrupted`).
    """
    from accelerate.utils import gather_object

    rng = gather_object([_rng_state()])
    p: Progress = t.p
    if t.main:
        timing_now = {**p.timing, "wall_seconds": p.timing["wall_seconds"] + time.perf_counter() - p.session_start}
        atomic_torch_save(
            {
                "format": STATE_FORMAT,
                "model": t.accelerator.unwrap_model(t.model).state_dict(),
                "optimizer": t.optimizer.state_dict(),
                "scheduler": t.scheduler.state_dict(),
                "rng": rng,
                "epoch": p.epoch,
                "batch_in_epoch": p.batch_in_epoch,
                "step": p.step,
                "history": p.history,
                "best": p.best,
                "timing": timing_now,
                "fewshot": p.fewshot,
                "stream": t.data.layout,
            },
            t.ckpt_dir / "last.pt",
        )
    t.accelerator.wait_for_everyone()


def check_data_folder(run_dir: "str | Path", source: "str | None", path: "str | None") -> None:
    """The data a run folder's run would read now is the data it started on: a relative ``data.path``, resolved from
    the current working folder (:func:`harness.data.splits.absolute_path`), is the folder its ``run.json`` records
    (``data_path``, written by :func:`write_run_files`); a run resumed, or skipped as complete, from another working
    folder would otherwise train (or be taken as finished) on another folder's data under the first one's record
    (audit23 A23-03). An absolute ``data.path``, another source and a run that recorded none pass.

    Raises:
        ValueError: naming the run folder, ``data.path``, the folder it recorded, the one it names from here and the
            fixes (the working folder the run started in, or another ``output_dir`` for a new run: an absolute
            ``data.path`` would be another config, :func:`harness.upstream.train.same_config`); where the recorded
            folder is gone (a moved project), :func:`harness.moved_data.check_not_moved`'s (audit24 A24-09).
    """
    import os

    from harness.data.splits import recorded_path
    from harness.moved_data import check_not_moved

    meta = read_json(Path(run_dir) / "run.json")
    recorded = meta.get("data_path") if isinstance(meta, dict) else None
    if recorded_path(source, path, recorded) == path:  # absolute, not recorded, or recorded for another path
        return
    then, here = str(recorded["absolute"]), absolute_path(source, path)
    if here == then:
        return
    check_not_moved(run_dir, path, then)  # the project moved: record its new place (audit24 A24-09)
    start = Path(then)
    for _ in Path(str(path)).parts:
        start = start.parent
    started = os.path.abspath(os.path.join(start, str(path))) == then
    where = f"from {start}" if started else "from the working folder it started in"
    raise ValueError(
        f"{run_dir} holds a run of data.path={path} = {then} (its run.json's data_path), and from this working "
        f"folder ({os.getcwd()}) data.path={path} is {here}: the run would go on (or be taken as finished) on other "
        f"data under its record: run this command {where} (its config.yaml keeps data.path={path}), or give another "
        f"output_dir to train a new run on {here}"
    )


#: the key of ``run.json`` that records the few-shot monitor's task data (:func:`monitor_task_data`)
MONITOR_KEY = "fewshot_task_data"


def monitor_task_data(train: dict) -> "dict | None":
    """The task data the few-shot monitor of a run whose ``train`` section (a dict) this is reads: each task folder
    resolved and its list files' digests (:func:`harness.tasks.taskset.task_data` of ``train.fewshot_tasks``, with the
    monitor's own :class:`~harness.tasks.taskset.TaskData`); None when the monitor is off. A task the config names
    that cannot be read records nothing (the monitor's check names it)."""
    if not (train.get("fewshot_every") or train.get("fewshot_every_steps")) or not train.get("fewshot_tasks"):
        return None
    from harness.tasks.taskset import TaskData, expand_tasks, task_data

    try:
        return task_data(expand_tasks([str(n) for n in train["fewshot_tasks"]]), TaskData())
    except (ValueError, OSError):
        return None


def check_monitor_data(run_dir: "str | Path", train: dict) -> None:
    """A run resumed reads the few-shot monitor's tasks from the data its ``run.json`` records
    (:func:`monitor_task_data`, written by :func:`write_run_files`): the same task folders, resolved, and list files
    (audit25 A25-12: a resume from another working folder, or after a task's list changed, monitored other data, and
    the run's few-shot curve read as one). A run that recorded none passes.

    Raises:
        ValueError: naming the run, the task, the folder or list file, both values and the fixes.
    """
    from harness.tasks.taskset import changed_task_data

    meta = read_json(Path(run_dir) / "run.json")
    recorded = meta.get(MONITOR_KEY) if isinstance(meta, dict) else None
    now = monitor_task_data(train)
    if not isinstance(recorded, dict) or now is None:
        return
    what = changed_task_data(recorded, now, f"its {Path(run_dir) / 'run.json'} ({MONITOR_KEY})", "the run started")
    if what:
        raise ValueError(
            f"{run_dir} holds a run whose few-shot monitor (train.fewshot_tasks) read other task data: {what}; "
            "resumed, its fewshot.jsonl would join two data sets' accuracies as one curve: resume it from the working "
            "folder it started in with the task data as it was, or give another output_dir to train a new run on "
            "this data"
        )
