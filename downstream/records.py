"""One fine-tuning run of a sweep and its record: ``run_one`` (picklable, for in-process runs and submitit jobs),
the records' keys, and ``<out>/runs.jsonl`` (one JSON line appended per finished run, a single ``write`` + fsync; a
torn last line from a crash is ignored); the sweep's header ``<out>/sweep.json`` and whether a rerun resumes it
(:func:`check_resume`). Re-exported by :mod:`harness.downstream.sweep`."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional

from harness.downstream.config import SweepSettings
from harness.io import read_json
from harness.provenance import changed_since
from harness.tasks.catalogue import Task
from harness.tasks.taskset import TaskData, changed_task_data, find_task, load_split
from harness.tasks.taskset import task_data as taskset_task_data


def run_one(spec: dict, progress: Optional[Callable[[str], None]] = None) -> dict:
    """One fine-tuning run (picklable: runs in-process or in a submitit job); ``progress`` gets its step lines
    (:func:`harness.downstream.finetune.finetune`). Returns its record:
    task, phase, lr, steps actually run, seed, split scored, accuracy, NLL (nats, mean over the split) and
    ``data`` (what was read); with a noisy head also ``head`` and ``temperature`` (the spec's τ)."""
    from harness.downstream.finetune import FinetuneConfig, finetune
    from harness.downstream.schedules import resolved_steps

    settings = SweepSettings(**spec["settings"])
    task = find_task(spec.get("task_spec", spec["task"]))
    train_split, eval_split = ("train800", "val200") if spec["phase"] == "select" else ("train800val200", "test")
    cfg = FinetuneConfig(
        **{**settings.training_fields(), "resolution": tuple(settings.resolution) if settings.resolution else None},
        lr=spec["lr"],
        steps=spec["steps"],
        seed=spec["seed"],
        **({} if spec.get("temperature") is None else {"temperature": spec["temperature"]}),
    )
    train, evaluation = load_split(task, train_split, settings), load_split(task, eval_split, settings)
    acc, preds = finetune(spec["upstream"], train, evaluation, cfg, task.flip, task.crop, progress)
    if spec.get("predictions"):
        preds.save(spec["predictions"])
    data = [train.source] + ([evaluation.source] if evaluation.source != train.source else [])
    noisy = {} if settings.head == "hom" else {"head": settings.head, "temperature": spec["temperature"]}
    return {
        "key": spec["key"],
        "task": task.name,
        "group": task.group,
        "phase": spec["phase"],
        "lr": spec["lr"],
        "steps": resolved_steps(cfg, len(train)),
        "seed": spec["seed"],
        "split": eval_split,
        "accuracy": acc,
        "nll": preds.nll(),
        **noisy,
        **_precision(settings),
        "data": data,
    }


def _precision(settings: SweepSettings) -> dict:
    """``{"mixed_precision": <resolved>}`` for a run record when the sweep asks for mixed precision (fp32 runs
    keep the records they had before the setting existed)."""
    if settings.mixed_precision == "no":
        return {}
    import torch

    from harness.training.precision import resolve

    return {"mixed_precision": resolve(settings.mixed_precision, torch.device(settings.device).type)}


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


#: a fine-tune job's time limit (minutes) when ``--slurm timeout_min`` is not given, under both submitit executors
#: (submitit's own default, 5 minutes, would end most fine-tunes on a cluster)
JOB_TIMEOUT_MIN = 600


def slurm_job_parameters(slurm: dict) -> dict:
    """The parameters of a SLURM fine-tune job: the ``--slurm`` ones (``visible_gpus``, ``--gpus`` of submitit-local,
    left out), with ``timeout_min`` :data:`JOB_TIMEOUT_MIN` unless given."""
    return {"timeout_min": JOB_TIMEOUT_MIN, **{k: v for k, v in slurm.items() if k != "visible_gpus"}}


def _execute(specs: "list[dict]", executor: str, folder: Path, slurm: dict) -> "list[dict]":
    """Run ``specs`` with ``executor``: in this process (``local``), as submitit jobs on this machine
    (``submitit-local``: ``slurm``'s ``timeout_min``, default :data:`JOB_TIMEOUT_MIN`, and ``visible_gpus``, one GPU a job), or as a
    SLURM job array (``slurm``: ``submitit.AutoExecutor(cluster="slurm")`` with the ``slurm`` parameters, never the
    local fall-back AutoExecutor picks on a machine without SLURM). Returns one record per spec, in order.

    Raises:
        ValueError: ``slurm`` on a machine without SLURM (submitit finds no ``srun``), or parameters submitit refuses
            (its text's first line, after the ``--slurm`` options); the sweep checks both before any work
            (:mod:`harness.training.slurm`).
    """
    if executor == "local" or not specs:
        return [run_one(s) for s in specs]
    from harness.extras import require
    from harness.training.slurm import update_parameters

    submitit = require("submitit", f"--executor {executor}")

    if executor == "submitit-local":
        ex = submitit.LocalExecutor(folder=str(folder))
        gpus = slurm.get("visible_gpus") or ()
        ex.update_parameters(
            timeout_min=slurm.get("timeout_min", JOB_TIMEOUT_MIN),
            gpus_per_node=1 if gpus else 0,
            visible_gpus=tuple(gpus),
        )
    else:
        given = slurm_job_parameters(slurm)
        try:
            ex = submitit.AutoExecutor(folder=str(folder), cluster="slurm")
        except RuntimeError as e:  # no srun: not on a SLURM cluster
            raise ValueError(
                f"--executor slurm: {e} Submit from a machine of the cluster (a login node), or use "
                "--executor submitit-local on this machine"
            ) from e
        update_parameters(ex, given, {k: v for k, v in slurm.items() if k != "visible_gpus"})
    jobs = ex.map_array(run_one, specs)
    return [j.result() for j in jobs]


def _sweep_changes(old: dict, new: dict) -> "list[tuple]":
    """How a ``sweep.json`` header (``old``) differs from the sweep ``new``: ``(key, value there, value now)`` for
    the upstream model's record and each setting that differs (:func:`harness.provenance.changed_since`; settings
    compared after filling fields added since with their defaults; the preset name is a label, and the device and
    memory format say how runs execute, so a resumed sweep may change them; audit26 A26-07: the refusal names them).
    Settings that no longer read give ``("settings", old, new)``."""
    free = {k: new["settings"][k] for k in ("preset", "device", "channels_last")}
    try:
        settings = asdict(SweepSettings(**{**old["settings"], **free}))
    except (KeyError, TypeError, ValueError):
        return [("settings", old.get("settings"), new["settings"])]
    return changed_since(
        {"upstream": old.get("upstream"), **settings}, {"upstream": new["upstream"], **new["settings"]}
    )


def _same_sweep(old: dict, new: dict) -> bool:
    """Whether a ``sweep.json`` header describes the sweep ``new`` (:func:`_sweep_changes` finds nothing, and the
    weights are the same: :func:`changed_weights`)."""
    return not _sweep_changes(old, new) and not changed_weights(old, new)


def changed_weights(old: dict, new: dict) -> Optional[str]:
    """How a sweep's harness ``model.pt`` changed since its ``sweep.json`` (``old``) was written: the weights digest
    each header records (``upstream_weights``, :func:`harness.model_identity.weights_digest`) differs (audit22 A22-01:
    a rerun after the model.pt was retrained, or replaced, resumed the old sweep and reported its numbers under the new
    model). A phrase naming both digests, or None when they agree or ``old`` recorded none (a sweep of an earlier
    version, or of another source, whose ``upstream`` record carries its own sha256)."""
    for _, before, now in changed_since(old, {"upstream_weights": new.get("upstream_weights")}):
        return f"its weights' digest is now {str(now)[:12]}..., the sweep's sweep.json records {str(before)[:12]}..."
    return None


def task_data(tasks: "list[Task]", settings: TaskData) -> "dict[str, dict]":
    """What each task's runs read, as a sweep's ``sweep.json`` records it (``task_data``; audit24 A24-03):
    :func:`harness.tasks.taskset.task_data` (each task's folder resolved, its list files' digests and a custom task's
    line, K and flags included: audit26 A26-06)."""
    return taskset_task_data(tasks, settings)


def changed_data(old: dict, new: dict) -> Optional[str]:
    """How a task's data changed since the sweep's ``sweep.json`` (``old``) recorded it (:func:`task_data`, its
    ``task_data``): :func:`harness.tasks.taskset.changed_task_data` (another folder resolved, another custom task line,
    or a list file's other digest; audit24 A24-03, audit26 A26-06). A phrase naming the task, what changed and both
    values, or None."""
    return changed_task_data(
        old.get("task_data"), new.get("task_data") or {}, "the sweep's sweep.json", "the sweep ran"
    )


def check_resume(out: Path, header: dict, upstream: Any) -> Path:
    """``out`` may take the sweep ``header`` (``{"upstream", "settings"}`` and, where given, ``task_data``:
    :func:`task_data`; given here the weights digest of a harness ``model.pt``, ``upstream_weights``): no
    ``sweep.json`` yet, or that of the same sweep, which then resumes; ``header["task_data"]`` then also keeps the
    earlier record's tasks this run does not name (a later rerun with them is compared to it). Returns the
    ``sweep.json`` path.

    Raises:
        ValueError: a ``sweep.json`` that is not a sweep's record; the sweep of the same model.pt before its weights
            changed (:func:`changed_weights`; audit22 A22-01); the sweep of a task's other folder or list files
            (:func:`changed_data`; audit24 A24-03); the sweep of another model or settings.
    """
    if isinstance(header["upstream"], str):  # a harness model.pt: its weights, so a rerun after they change is new
        from harness.model_identity import weights_digest

        header["upstream_weights"] = weights_digest(header["upstream"])
    meta = out / "sweep.json"
    stored = read_json(meta)
    if meta.is_file() and not (isinstance(stored, dict) and isinstance(stored.get("settings"), dict)):
        raise ValueError(
            f"{meta} is not a sweep's record (not a JSON object with its settings): a sweep writes it; write this "
            "one elsewhere (--out), or move that folder's files away"
        )
    fix = "write this sweep elsewhere (--out; runs_root for harness run), or delete that folder to start it over"
    # the same model.pt's weights changed; another model's sweep is named below (audit26 A26-02's rule)
    same_source = meta.is_file() and stored.get("upstream") == header["upstream"]
    changed = changed_weights(stored, header) if same_source else None
    if changed:
        raise ValueError(
            f"{out} holds a sweep of another model in {upstream} ({changed}): the model.pt was replaced or trained "
            f"again since that sweep ran, and resuming it would report the old model's runs under the new one; {fix}"
        )
    changed = changed_data(stored, header) if meta.is_file() else None
    if changed:
        raise ValueError(
            f"{out} holds a sweep of other task data ({changed}): resuming it would report the runs of the data it "
            f"read then as this data's; {fix}"
        )
    differ = _sweep_changes(stored, header) if meta.is_file() else []
    if differ:
        said = "; ".join(f"{k}: {was!r} there, {now!r} now" for k, was, now in differ)
        raise ValueError(
            f"{out} holds a sweep of another upstream checkpoint or settings ({said}; recorded in {meta}): resuming it "
            f"would report its runs as this sweep's; {fix}"
        )
    if "task_data" in header and isinstance(stored, dict) and isinstance(stored.get("task_data"), dict):
        header["task_data"] = {**stored["task_data"], **header["task_data"]}
    return meta
