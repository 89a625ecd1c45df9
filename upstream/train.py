"""The upstream training loop, on ``accelerate`` (one CPU, several GPUs, TPUs).

A run folder ``<output_dir>/`` holds:

- ``config.yaml``: the resolved config; ``run.json``: command, machine, versions, data, label noise;
- ``checkpoints/last.pt``: resumable training state (model, optimiser, schedule, RNG, data
  position), rewritten atomically; ``checkpoints/best.pt``: the best model so far by
  ``train.best_metric`` (a :func:`harness.models.save_model` file);
- ``metrics.jsonl``: one line per evaluation; ``tb/``: TensorBoard logs (``train.log_with``, default
  ``[tensorboard]``; MLflow, W&B and accelerate's other trackers get the same: :mod:`harness.training.trackers`);
- ``fewshot.jsonl`` (with ``train.fewshot_every``): one line per few-shot evaluation of a task at a shot count
  (:func:`harness.tasks.probe.monitor_records`), also logged as ``fewshot/<task>/<shots>shot``;
- at the end: ``model.pt`` (final model), ``predictions.npz`` (final per-example logits on the
  evaluation split; ``heldout_predictions.npz`` likewise on ``data.heldout_split`` if set) and
  ``metrics.json`` (final metrics, those on the held-out split, best epoch, times, provenance). Its presence marks
  the run complete: running the same config again does nothing; an interrupted run resumes.

A run is these steps (:func:`_train`), each in its own module:

1. the data (:mod:`harness.upstream.rundata`): splits, label noise, the link's labels, the loss
   (:mod:`harness.upstream.losses`), the loaders;
2. the few-shot monitor's tasks (:mod:`harness.upstream.evaluation`), read before training;
3. the model, optimiser and schedule, prepared by accelerate (:mod:`harness.upstream.parts`);
4. a new run's ``config.yaml`` and ``run.json``, or the resumed state (:mod:`harness.upstream.checkpoint`);
5. the trackers, given the whole config (:mod:`harness.training.trackers`);
6. the epochs (:mod:`harness.upstream.epochs`), every micro-batch through the idiom the downstream stage shares
   (:mod:`harness.training.loop`), with evaluations, the monitor and checkpoints;
7. the final predictions, model and metrics (:mod:`harness.upstream.outputs`).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Callable, Optional

from harness.config import to_dict, to_yaml
from harness.data.split_identity import check_split_identity
from harness.io import RunLock
from harness.model_identity import MONITORING, NOT_IDENTITY, READING
from harness.training.loop import held_precision, in_fresh_process, make_accelerator
from harness.training.trackers import FOLDERS as TRACKER_FOLDERS
from harness.training.trackers import available, build, flat_params, keep_rng
from harness.upstream.checkpoint import (
    STATE_FORMAT,
    check_data_folder,
    check_monitor_data,
    record_resumed,
    resume,
    write_run_files,
)
from harness.upstream.config import UpstreamConfig, validate
from harness.upstream.epochs import Preempted, train_epochs
from harness.upstream.evaluation import LOWER_IS_BETTER, TrainingDiverged, fewshot_tasks, predict_loader
from harness.upstream.losses import forward_corrected_nll, training_loss
from harness.upstream.outputs import MODEL_FOLDER, write_outputs
from harness.upstream.parts import build_training
from harness.upstream.rundata import _noisy_heldout, read_run_data

__all__ = [
    "run",
    "same_config",
    "TrainingDiverged",
    "Preempted",
    "training_loss",
    "forward_corrected_nll",
    "predict_loader",
    "STATE_FORMAT",
    "LOWER_IS_BETTER",
    "_noisy_heldout",
    "NOT_IDENTITY",
]

#: the MLflow experiment / W&B project of upstream runs (unless MLFLOW_EXPERIMENT_NAME / WANDB_PROJECT name one)
PROJECT = "harness-upstream"


def _identity(text: str) -> Optional[str]:
    """A config's YAML text with the settings added since it was written at their defaults and the settings that change
    nothing a run trains left out (:data:`~harness.model_identity.NOT_IDENTITY`, the ``train`` keys of
    :data:`~harness.model_identity.MONITORING`, the ``data`` keys of :data:`~harness.model_identity.READING`); None when
    it does not read as an upstream config."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        filled = OmegaConf.to_container(
            OmegaConf.merge(OmegaConf.structured(UpstreamConfig), OmegaConf.create(text)), resolve=True
        )
    except (OmegaConfBaseException, ValueError):
        return None
    for key in (*NOT_IDENTITY, *(f"train.{k}" for k in MONITORING), *(f"data.{k}" for k in READING)):
        *section, name = key.split(".")
        ((filled.get(section[0]) or {}) if section else filled).pop(name, None)
    return OmegaConf.to_yaml(OmegaConf.create(filled))


def same_config(saved: str, config_yaml: str) -> bool:
    """Whether a saved ``config.yaml`` describes the requested run: the same text, or the same after
    the settings added since it was written take their defaults (so run folders written by an older
    version, before a setting existed, still resume and count as done), leaving out the trackers
    (:data:`NOT_IDENTITY`) and the settings of how a run is monitored and its data read (``MONITORING``, ``READING``:
    audit19 A19-10, as :func:`harness.model_identity.check_replicates` does), so a run resumes with a smaller
    evaluation batch or another logging interval (its ``config.yaml`` then says the new values:
    :func:`harness.upstream.checkpoint.record_resumed`). The comparison of a run folder here and of a recorded run's
    restore."""
    if saved == config_yaml:
        return True
    old = _identity(saved)
    return old is not None and old == _identity(config_yaml)


_same_config = same_config  # its name before it was public


def done_line(run_dir: "str | Path", config_yaml: str) -> str:
    """The line a finished run is skipped with (``harness upstream``, its ``--executor``), naming what the request
    asks that the finished run does not do (:func:`not_applied`)."""
    skipped = not_applied((Path(run_dir) / "config.yaml").read_text(), config_yaml, run_dir)
    return f"{run_dir}: already complete (metrics.json); nothing to do" + (f"; {skipped}" if skipped else "")


def not_applied(saved: str, config_yaml: str, run_dir: "str | Path") -> Optional[str]:
    """What a finished run does not do of what ``config_yaml`` asks beyond its saved config (``saved``, the same run by
    :func:`same_config`): the settings that act only while it trains (:data:`NOT_IDENTITY` but ``output_dir``, the
    ``train`` keys of ``MONITORING``; audit20 A20-05: a few-shot monitor or ``train.log_model`` asked of a finished run
    was met by "nothing to do"), as one sentence naming each ``key=value`` and how to get it now; None when they are
    all as saved (the ``data`` keys of ``READING`` change nothing a finished run gives)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from harness.model_identity import flat_settings

    try:
        old, new = (
            flat_settings(OmegaConf.to_container(OmegaConf.create(t), resolve=True)) for t in (saved, config_yaml)
        )
    except (OmegaConfBaseException, ValueError):
        return None
    keys = [k for k in (*NOT_IDENTITY, *(f"train.{k}" for k in MONITORING)) if k != "output_dir"]
    changed = [f"{k}={new[k]}" for k in keys if k in new and k in old and old[k] != new[k]]
    if not changed:
        return None
    how = []
    if any(c.startswith("train.fewshot") for c in changed):
        how.append(f"few-shot accuracy: harness fewshot --model {run_dir}/model.pt --tasks ... --shots ... --out DIR")
    if any(c.startswith("train.log_model=") for c in changed):
        how.append(f"the export: harness.runs.export_run('{run_dir}', OUT) (push_to_hub=True, repo_id=... to publish)")
    return (
        f"{', '.join(changed)} not applied: they act while a run trains, and this one is finished (its "
        f"config.yaml keeps its own values)"
        + (f"; for {'; for '.join(how)}" if how else "")
        + "; or train it again under another output_dir"
    )


#: what harness upstream writes in a run folder: with --overwrite, a folder holding files of others may hold none of
#: these (``submitit``: the job folder of ``--executor``, made when the job is submitted; ``tb``, ``wandb``: the
#: trackers' folders, made when the run starts; ``pretrained``: the export of ``train.log_model``)
RUN_FILES = (
    "config.yaml",
    "run.json",
    "metrics.json",
    "metrics.jsonl",
    "fewshot.jsonl",
    "model.pt",
    "predictions.npz",
    "heldout_predictions.npz",
    "checkpoints",
    *TRACKER_FOLDERS,
    "submitit",
    MODEL_FOLDER,
)


def check_output(run_dir: Path, overwrite: bool = False) -> None:
    """Refuse, before any work, a run folder holding files harness upstream did not write (a folder with no run's
    ``config.yaml``): with ``overwrite`` the run writes beside them, but never over one (:data:`RUN_FILES`).

    Raises:
        ValueError: naming the files, ``output_dir`` and ``--overwrite``.
    """
    from harness.io import LOCK_FILES, check_output_folder

    ours = (run_dir / "config.yaml").is_file() or (  # or only what a start that failed before config.yaml leaves
        run_dir.is_dir() and all(p.name in ("submitit", *TRACKER_FOLDERS, *LOCK_FILES) for p in run_dir.iterdir())
    )
    check_output_folder(run_dir, ours, RUN_FILES, overwrite, "harness upstream", "output_dir")


def _check_existing(run_dir: Path, config_yaml: str) -> str:
    """``"new"``, ``"resume"`` or ``"done"``; refuses a folder that holds another config's run, a run started on other
    data than ``data.path`` names from this working folder (:func:`harness.upstream.checkpoint.check_data_folder`,
    audit23 A23-03), a finished run whose predictions cannot be read or whose ``model.pt`` is not the model they
    measured (:func:`check_finished_run`), a resume whose few-shot monitor would read other task data
    (:func:`harness.upstream.checkpoint.check_monitor_data`), and a config.yaml whose settings were edited since its
    ``run.json`` recorded them (:mod:`harness.run_record`, audit26 A26-01)."""
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return "new"
    if not same_config(saved.read_text(), config_yaml):
        import difflib

        diff = "".join(
            difflib.unified_diff(
                saved.read_text().splitlines(True), config_yaml.splitlines(True), "saved", "requested", n=0
            )
        )
        raise ValueError(
            f"{run_dir} holds a run with a different config:\n{diff}\nuse another name or "
            "output_dir for the new run, or delete that folder to start it over"
        )
    import yaml

    from harness.io import read_json
    from harness.runs import run_config

    recorded = (read_json(run_dir / "run.json") or {}).get("config")  # config.yaml edited since (audit26 A26-01)
    if isinstance(recorded, dict) and not same_config(saved.read_text(), to_yaml(recorded)):
        run_config(run_dir)  # refuses, naming each setting that differs from run.json's
    data = (yaml.safe_load(config_yaml) or {}).get("data") or {}
    check_data_folder(run_dir, data.get("source"), data.get("path"))  # resumed or done on the data it started on
    if (run_dir / "metrics.json").is_file() and (run_dir / "model.pt").is_file():
        check_finished_run(run_dir)  # a finished run is skipped: what follows reads its predictions and model.pt
        return "done"
    if not (run_dir / "checkpoints" / "last.pt").is_file():
        return "new"
    check_monitor_data(run_dir, (yaml.safe_load(config_yaml) or {}).get("train") or {})  # audit25 A25-12
    return "resume"


def check_finished_run(run_dir: Path) -> None:
    """What a finished run (``metrics.json``, ``model.pt``) skipped as complete must be for what reads it next: its
    predictions read (:func:`check_finished_predictions`) and its ``model.pt`` the model they and its metrics
    measured (:func:`harness.checkpoint_files.check_run_model`; audit23 A23-04: a replaced model.pt was "already
    complete"). The one check of harness upstream (and ``--executor``) and of harness run's finished runs.

    Raises:
        ValueError: naming the run folder, the file and the fixes.
    """
    from harness.checkpoint_files import check_run_model

    check_finished_predictions(run_dir)
    check_run_model(run_dir)


def check_finished_predictions(run_dir: Path) -> None:
    """The predictions of a finished run (``predictions.npz``, and ``heldout_predictions.npz`` where it has one) read
    whole (:meth:`harness.uncertainty.predictions.Predictions.load`), before the run is skipped as complete: a
    damaged or truncated file would otherwise be met only by what reads it (an experiment's report, after every
    other stage), on every rerun.

    Raises:
        ValueError: a missing or unreadable file (a held-out one where the run wrote one:
            :func:`harness.heldout.check_heldout_file`), naming the run folder, the file, what is wrong and the fixes
            (rewrite the predictions from the run's model.pt without training, or delete the folder to train again).
    """
    from harness.heldout import HELDOUT_FILE, check_heldout_file
    from harness.uncertainty.predictions import Predictions

    for name in ("predictions.npz", HELDOUT_FILE):
        file = run_dir / name
        if name == HELDOUT_FILE and not file.exists():
            try:  # only a run without a held-out split lacks it (audit25 A25-04)
                check_heldout_file(run_dir)
            except FileNotFoundError as e:
                raise ValueError(f"{run_dir} is a finished run (metrics.json, model.pt), but {e}") from None
            continue
        try:
            Predictions.load(file)
        except (ValueError, OSError) as e:  # the reader's diagnosis, without its fix (a run writes it when it ends)
            raise ValueError(
                f"{run_dir} is a finished run (metrics.json, model.pt), but {str(e).split('; ')[0]}: it would be "
                f"skipped as complete and its {name} met only by what reads it: restore the file, or write "
                'the predictions again from its model.pt without training (python -c "from '
                f"harness.upstream.reevaluate import reevaluate; reevaluate('{run_dir}', force=True)\"), or delete "
                f"{run_dir} to train it again"
            ) from e


def _train_split(cfg: UpstreamConfig) -> str:
    """``data.train_split=train of image_folder at data.path=imgs``: how a message names the training split."""
    path = f" at data.path={cfg.data.path}" if cfg.data.path else ""
    return f"data.train_split={cfg.data.train_split} of {cfg.data.source}{path}"


def _cpu_only() -> bool:
    """Whether accelerate will train on the CPU: no accelerator device, or ``ACCELERATE_USE_CPU`` set (``accelerate
    launch --cpu``, ``harness upstream --executor``)."""
    from accelerate.utils import parse_flag_from_env

    from harness.training.precision import device_type

    return device_type() == "cpu" or parse_flag_from_env("ACCELERATE_USE_CPU")


def run(
    cfg: UpstreamConfig,
    progress: bool = True,
    stop_after_steps: Optional[int] = None,
    stop_requested: Optional[Callable[[], bool]] = None,
    overwrite: bool = False,
) -> Path:
    """Train and evaluate one upstream model; resume if its folder holds an interrupted run.

    accelerate holds one mixed precision per process (:mod:`harness.training.loop`): a run whose
    ``train.mixed_precision`` differs from the one an earlier run left in this process trains in a fresh process.

    Args:
        cfg: the run config.
        progress: show a progress bar.
        stop_after_steps: stop (after checkpointing) once this many optimiser steps are done in
            total, as an interruption would; for tests of resumption.
        stop_requested: polled after every optimiser step (by every process; the processes agree through
            ``accelerator.check_trigger``, one all-reduce of a scalar a step): once it returns True on any process,
            all of them save the state at that step and :class:`Preempted` is raised. Not polled after the last
            step (the run then finishes). :class:`harness.upstream.launch.PretrainJob` sets it to submitit's
            preemption flag.
        overwrite: train into a folder holding files harness upstream did not write, beside them (never over one:
            :func:`check_output`).

    Returns:
        The run folder.

    Raises:
        ValueError: bad config or data (unknown backbone, labels out of range, link not matching
            the labels, a folder holding a different run, a tracker that is not installed...).
        TrainingDiverged: NaN or infinite loss (the last checkpoint stays intact).
        Preempted: ``stop_requested`` returned True (the state is saved).
    """
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    from harness.training.precision import device_type
    from harness.training.precision import resolve as resolve_precision

    validate(cfg)
    trackers = available(list(cfg.train.log_with), "train.log_with")
    run_dir = Path(cfg.run_dir())
    config_yaml = to_yaml(cfg)
    status = _check_existing(run_dir, config_yaml)
    check_output(run_dir, overwrite)  # a folder of someone else's files: refused before any work
    precision = resolve_precision(
        cfg.train.mixed_precision, "cpu" if _cpu_only() else device_type(), "train.mixed_precision"
    )
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))  # as the Accelerator makes it
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1 and state.num_processes == 1:  # accelerate's silent fallback: W copies of one run
        raise ValueError(
            f"WORLD_SIZE={world} but accelerate started a single process (no process group): on CPUs "
            "set ACCELERATE_USE_CPU=true (accelerate launch --cpu and harness upstream --executor do) "
            "so that the processes join one gloo group; on GPUs check that torch sees CUDA"
        )
    if status == "done":
        if state.is_main_process:
            print(done_line(run_dir, config_yaml))
        return run_dir
    held = held_precision()
    if held is not None and held[0] != precision:
        if state.num_processes > 1 or stop_requested is not None:
            raise ValueError(
                f"accelerate holds mixed precision {held[0]!r} in this process and {cfg.name} asks for "
                f"{precision!r}: start this run in its own process"
            )
        return Path(in_fresh_process(run, cfg, progress, stop_after_steps))
    accelerator = make_accelerator(
        precision,
        cfg.train.grad_accum_steps,
        log_with=build(trackers, PROJECT, cfg.name, run_dir),
        project_dir=str(run_dir),
    )
    with RunLock(run_dir, subfolders=("checkpoints",)) if accelerator.is_main_process else contextlib.nullcontext():
        return _train(cfg, run_dir, config_yaml, status, accelerator, progress, stop_after_steps, stop_requested)


def _train(
    cfg: UpstreamConfig,
    run_dir: Path,
    config_yaml: str,
    status: str,
    accelerator: Any,
    progress: bool,
    stop_after_steps: Optional[int],
    stop_requested: Optional[Callable[[], bool]] = None,
) -> Path:
    """The body of :func:`run`, in a folder this process holds the lock of: the steps of a run (module
    docstring), in the order that fixes what the seeded RNG draws for each."""
    from accelerate.utils import set_seed

    set_seed(cfg.seed, device_specific=True)  # + process index: each rank draws its own HET noise
    try:
        data = read_run_data(cfg, accelerator.process_index, accelerator.num_processes)  # 1
        tasks = fewshot_tasks(cfg)  # 2: read and drawn now, bad few-shot data stops the run before training
        t = build_training(cfg, run_dir, data, accelerator, tasks)  # 3
        t.show_progress, t.stop_after_steps, t.stop_requested = progress, stop_after_steps, stop_requested
        if status == "resume":  # 4
            check_split_identity(run_dir, data.train, _train_split(cfg))  # the data it started on (audit26 A26-17)
            resume(t)
            record_resumed(t, config_yaml)  # the settings it resumes with (a smaller eval batch...), if others
        else:
            write_run_files(t, config_yaml)
        with keep_rng():  # 5: whatever a tracker draws as it starts leaves the training's random streams alone
            accelerator.init_trackers(PROJECT, config=flat_params(to_dict(cfg)))
        if train_epochs(t):  # 6
            write_outputs(t)  # 7
    except Exception as e:
        if not isinstance(e, Preempted):  # a preempted run has ended its trackers already
            for tracker in accelerator.trackers:
                tracker.finish()
        raise
    return run_dir
