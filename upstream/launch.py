"""Pretraining as a submitit job: several processes, several nodes, preemption and requeue.

``harness upstream --config CONFIG --executor slurm|submitit-local --nodes N --gpus-per-node G`` submits one
submitit job of ``N x T`` tasks (``T`` = G, one process per GPU; or ``--tasks-per-node T`` CPU processes when G = 0),
each running :class:`PretrainJob`, which trains with :func:`harness.upstream.train.run` exactly as a single process does.

Distributed set-up (:func:`export_distributed_env`): submitit's own
:class:`submitit.helpers.TorchDistributedEnvironment` reads the job environment (SLURM's ``SLURM_PROCID``,
``SLURM_NTASKS``, ``SLURM_LOCALID``, ``SLURM_JOB_NODELIST``, or the local executor's equivalents) and exports
``MASTER_ADDR`` (the job's first host), ``MASTER_PORT`` (drawn from the job id, or ``$MASTER_PORT``), ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``; on CPUs ``ACCELERATE_USE_CPU=true`` as well. The
``Accelerator`` created in :func:`harness.upstream.train.run` then initialises ``torch.distributed`` from them (``env://``):
NCCL on GPUs (each process on GPU ``LOCAL_RANK``), gloo on CPUs. Data: accelerate shards the training batches
(rank r takes batches r, r + W, ... of the seeded order), so a step of W processes with ``data.batch_size`` B
sees the same W·B examples as one process with batch W·B.

Preemption and time limits (:class:`PreemptionFlag`): submitit sends every task its preemption signal (USR2
unless ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise; SLURM ``--signal=USR2@<slurm_signal_delay_s>`` before the time
limit, the local executor likewise, and on preemption). Its own handler would checkpoint and requeue at once,
wherever the training loop is. Instead each process's handler only raises a flag; after every optimiser step the
processes agree (one all-reduce) whether any has it, and if so all save the whole training state
(``checkpoints/last.pt``) at that step and stop; then rank 0 hands over to submitit's handler, which calls
:meth:`PretrainJob.checkpoint` (the same job: the state lives in the run folder) and requeues the job (SLURM:
``scontrol requeue``; local: the controller restarts the tasks). The requeued job resumes from ``last.pt`` at that
step, with the same data order, augmentation and RNG of every process, so its final metrics equal those of an
uninterrupted run (tested). Requeues after a time limit count against ``max_timeouts``; preemptions do not.
The step in progress, and an evaluation in progress, finish first: they must fit in the signal's delay
(``--slurm slurm_signal_delay_s=...``, submitit's default 90 s). A job killed before it reaches that point (or
that gets no signal) is not requeued, and submitting the same command again resumes from the last state saved
(``train.checkpoint_every`` bounds the steps lost).

A ``submitit-local`` job belongs to the command that submitted it (which waits for it): each task watches that
process (:class:`SubmitterWatch`), and once it is gone (killed, even with ``kill -9``) the processes save the state
at the next step and stop without requeuing, releasing the run folder's lock; the same command resumes the run.

TPUs are not handled here: they run on accelerate's XLA path (``accelerate launch``; see the README), not tested.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import submitit
from submitit.helpers import Checkpointable, DelayedSubmission, TorchDistributedEnvironment

from harness.config import to_yaml
from harness.training.slurm import check_slurm_available, check_slurm_keys, update_parameters
from harness.upstream.config import UpstreamConfig, validate
from harness.upstream.train import Preempted, _check_existing, check_output, run

#: ``local`` trains in this process (``harness.upstream.train.run``); the others submit a submitit job
EXECUTORS = ("local", "submitit-local", "slurm")
#: the job's time limit when ``timeout_min`` is not given (minutes); a job that reaches it is requeued
DEFAULT_TIMEOUT_MIN = 24 * 60
#: how many times a job is requeued after reaching its time limit (submitit's ``max_num_timeout``)
DEFAULT_MAX_TIMEOUTS = 20


@dataclass(frozen=True)
class Resources:
    """The processes of a job.

    Attributes:
        nodes: machines (``--nodes``); ``submitit-local`` runs on this one only.
        gpus_per_node: GPUs a node (``--gpus-per-node``); one process per GPU. 0: CPU processes (gloo).
        tasks_per_node: processes a node (``--tasks-per-node``); None: ``gpus_per_node``, or 1 without GPUs.
    """

    nodes: int = 1
    gpus_per_node: int = 0
    tasks_per_node: Optional[int] = None

    @property
    def per_node(self) -> int:
        """Processes a node."""
        return self.tasks_per_node or self.gpus_per_node or 1

    @property
    def world_size(self) -> int:
        """Processes in the job."""
        return self.nodes * self.per_node


def check_resources(executor: str, res: Resources) -> None:
    """Check ``res`` for ``executor`` before anything is submitted.

    Raises:
        ValueError: an unknown executor; nodes, GPUs or tasks out of range; several nodes or processes with the
            ``local`` executor; several nodes, or more GPUs than this machine has, with ``submitit-local``; a
            ``tasks_per_node`` other than ``gpus_per_node`` on GPUs. The message names the option to change.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}: use one of {', '.join(EXECUTORS)}")
    for name, value, low in (
        ("--nodes", res.nodes, 1),
        ("--gpus-per-node", res.gpus_per_node, 0),
        ("--tasks-per-node", res.tasks_per_node, 1),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    if res.gpus_per_node and res.tasks_per_node not in (None, res.gpus_per_node):
        raise ValueError(
            f"--tasks-per-node {res.tasks_per_node} with --gpus-per-node {res.gpus_per_node}: the job "
            "runs one process per GPU; leave --tasks-per-node out (it is for CPU processes, "
            "--gpus-per-node 0)"
        )
    if executor == "local" and res.world_size > 1:
        raise ValueError(
            f"--nodes {res.nodes} x {res.per_node} process(es) need a launcher: use --executor slurm "
            "(several nodes) or --executor submitit-local (this machine), or accelerate launch"
        )
    if executor == "submitit-local":
        if res.nodes > 1:
            raise ValueError(
                f"--executor submitit-local runs on this machine only: use --nodes 1, or --executor "
                f"slurm for {res.nodes} nodes"
            )
        import torch

        have = torch.cuda.device_count()
        if res.gpus_per_node > have:
            raise ValueError(
                f"--gpus-per-node {res.gpus_per_node} but this machine has {have} GPU(s) visible to "
                "torch: lower it, or use --gpus-per-node 0 --tasks-per-node N for N CPU processes"
            )


def export_distributed_env(gpus_per_node: int) -> TorchDistributedEnvironment:
    """Export the ``torch.distributed`` environment of this task of a submitit job (see the module docstring).

    Sets ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` through
    :meth:`submitit.helpers.TorchDistributedEnvironment.export` (overwriting inherited values; ``CUDA_VISIBLE_DEVICES``
    is left alone, and accelerate puts the process on GPU ``LOCAL_RANK``), and with ``gpus_per_node`` 0
    ``ACCELERATE_USE_CPU=true``, without which accelerate would not form a CPU process group.

    Returns:
        submitit's environment record (``rank``, ``world_size``, ``local_rank``, ``master_addr``, ``master_port``).

    Raises:
        RuntimeError: not inside a submitit job (submitit's own error).
    """
    env = TorchDistributedEnvironment().export(set_cuda_visible_devices=False, overwrite=True)
    if gpus_per_node == 0:
        os.environ["ACCELERATE_USE_CPU"] = "true"
    else:
        os.environ.pop("ACCELERATE_USE_CPU", None)
    return env


class PreemptionFlag:
    """submitit's preemption / time-limit signal turned into a flag the training loop polls.

    :meth:`install` replaces the handler submitit set for its signal (``submitit.JobEnvironment.USR_SIG``, USR2 by
    default) with one that only sets the flag, keeping submitit's; :meth:`requeue` runs submitit's handler once the
    state is saved. A Python signal handler runs in the main thread between bytecodes (after a blocking call such
    as a collective returns), so setting a ``threading.Event`` there is safe wherever the loop is.
    """

    def __init__(self) -> None:
        self.signum = getattr(signal, "SIG" + submitit.JobEnvironment.USR_SIG)
        self._event = threading.Event()
        self._submitit_handler: Any = None

    def install(self) -> "PreemptionFlag":
        """Take over the signal (main thread only). Returns self."""
        self._submitit_handler = signal.signal(self.signum, self._set)
        return self

    def _set(self, signum: int, frame: Any) -> None:
        self._event.set()

    def is_set(self) -> bool:
        """Whether the signal has arrived."""
        return self._event.is_set()

    def requeue(self) -> None:
        """Run submitit's handler: on rank 0 it calls the job's ``checkpoint()``, writes the requeued submission and
        requeues the job; it ends the process (``SystemExit``) or, after too many time-outs, raises submitit's
        ``UncompletedJobError``.

        Raises:
            RuntimeError: submitit had no handler installed (not inside a submitit job), or it returned.
        """
        handler = self._submitit_handler
        if not callable(handler):
            raise RuntimeError(
                f"no submitit handler for signal {self.signum} to requeue the job with: "
                "PreemptionFlag.requeue runs inside a submitit job"
            )
        handler(self.signum, None)
        raise RuntimeError("submitit's signal handler returned without requeuing the job (not rank 0?)")


class SubmitterWatch:
    """Whether the process that submitted a ``submitit-local`` job is still alive, checked every ``interval``
    seconds by a daemon thread (``os.kill(pid, 0)``): a job whose submitter is gone stops (:class:`PretrainJob`).

    Args:
        pid: the submitting process.
        interval: seconds between checks.
    """

    def __init__(self, pid: int, interval: float = 1.0) -> None:
        self.pid, self.interval, self.gone = int(pid), float(interval), threading.Event()

    def start(self) -> "SubmitterWatch":
        """Start watching. Returns self."""
        threading.Thread(target=self._watch, name=f"watch-submitter-{self.pid}", daemon=True).start()
        return self

    def _watch(self) -> None:
        while not self.gone.is_set():
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.gone.set()
                return
            except PermissionError:  # alive, another user's (a reused PID cannot be ours: it would be gone first)
                pass
            time.sleep(self.interval)

    def is_set(self) -> bool:
        """Whether the submitter is gone."""
        return self.gone.is_set()


class PretrainJob(Checkpointable):
    """One task of a pretraining job: the distributed environment, then :func:`harness.upstream.train.run`.

    Picklable (submitit sends it to the tasks): it holds the config, the folder relative paths refer to (the
    submitting process's working directory) and the GPUs a node. Every process runs it; rank 0 writes the run folder.

    Args:
        cfg: the validated run config.
        workdir: the directory the job works in (``output_dir``, ``data.path`` may be relative to it).
        gpus_per_node: 0 for CPU processes (gloo), else NCCL with one process per GPU.
        submitter: the PID of the command that submitted a ``submitit-local`` job: the job stops (state saved, not
            requeued) when that process is gone (:class:`SubmitterWatch`); None (SLURM): not watched.
    """

    def __init__(
        self, cfg: UpstreamConfig, workdir: "str | Path", gpus_per_node: int = 0, submitter: Optional[int] = None
    ) -> None:
        self.cfg, self.workdir, self.gpus_per_node = cfg, str(workdir), int(gpus_per_node)
        self.submitter = submitter

    def __call__(self) -> dict:
        """Train (or resume, or find the run complete) in this task.

        Returns:
            ``{"rank", "world_size", "run_dir", "status"}``, status ``done``; ``preempted`` on ranks other than 0
            (rank 0 does not return then: submitit requeues the job); ``stopped`` when the submitter is gone (the
            state saved, nothing requeued).

        Raises:
            RuntimeError: GPUs were asked for and torch sees none on this node.
            ValueError, OSError, harness.upstream.train.TrainingDiverged: as :func:`harness.upstream.train.run`.
        """
        os.chdir(self.workdir)
        env = export_distributed_env(self.gpus_per_node)
        if self.gpus_per_node:
            import torch

            if torch.cuda.device_count() < 1:
                raise RuntimeError(
                    f"the job asked for {self.gpus_per_node} GPU(s) a node and torch sees no CUDA "
                    f"device on {socket.gethostname()}: check the partition "
                    "(--slurm slurm_partition=...) or use --gpus-per-node 0"
                )
        flag = PreemptionFlag().install()
        watch = SubmitterWatch(self.submitter).start() if self.submitter else None
        stop = (lambda: flag.is_set() or watch.is_set()) if watch is not None else flag.is_set
        out = {"rank": env.rank, "world_size": env.world_size, "run_dir": str(Path(self.cfg.run_dir()).resolve())}
        try:
            run(self.cfg, progress=False, stop_requested=stop, overwrite=True)  # the submitter checked the folder
        except Preempted as e:
            print(e, flush=True)
            if watch is not None and watch.is_set() and not flag.is_set():
                print(
                    f"the command that submitted this job (PID {self.submitter}) is gone: the job stops here, its "
                    "state saved; the same command resumes the run",
                    flush=True,
                )
                return {**out, "status": "stopped"}
            if env.rank == 0:
                flag.requeue()
            return {**out, "status": "preempted"}
        return {**out, "status": "done"}

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission:
        """What submitit requeues: this same job. The training state is in the run folder (``checkpoints/last.pt``,
        saved by the training loop when the flag was seen), and :func:`harness.upstream.train.run` resumes from it."""
        return DelayedSubmission(PretrainJob(self.cfg, self.workdir, self.gpus_per_node, self.submitter))


def _prior_world_size(run_dir: Path) -> Optional[int]:
    """The number of processes an interrupted run in ``run_dir`` was started with (its ``run.json``), if known."""
    try:
        return int(json.loads((run_dir / "run.json").read_text())["num_processes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def submit(
    cfg: UpstreamConfig,
    executor: str,
    resources: Resources,
    parameters: Optional[dict] = None,
    max_timeouts: int = DEFAULT_MAX_TIMEOUTS,
    folder: "str | Path | None" = None,
    overwrite: bool = False,
) -> "Optional[submitit.Job]":
    """Check everything that needs no data, then submit the run as one submitit job of ``resources.world_size``
    tasks running :class:`PretrainJob`.

    Args:
        cfg: the run config.
        executor: ``submitit-local`` (this machine; ``submitit.AutoExecutor(cluster="local")``) or ``slurm``.
        resources: nodes, GPUs and processes a node.
        parameters: further submitit parameters, as ``AutoExecutor.update_parameters`` takes them: generic
            (``timeout_min``, default :data:`DEFAULT_TIMEOUT_MIN`; ``cpus_per_task``, ``mem_gb``...) or SLURM ones
            (``slurm_partition``, ``slurm_signal_delay_s``, ``slurm_account``...).
        max_timeouts: requeues after reaching the time limit (preemptions do not count).
        folder: submitit's folder (logs, pickles); default ``<run folder>/submitit``.
        overwrite: train into a run folder holding files harness upstream did not write, beside them
            (:func:`harness.upstream.train.check_output`).

    Returns:
        The job (``job.results()`` gives one :meth:`PretrainJob.__call__` record per task), or None when the run
        folder already holds the finished run.

    Raises:
        ValueError: a bad config or resources; a run folder holding another config's run, or an interrupted run
            started with another number of processes; a ``--slurm`` key the executor does not read
            (:func:`harness.training.slurm.check_slurm_keys`: under ``submitit-local`` all but ``timeout_min``), or
            one that ``resources`` gives; a value submitit refuses; ``slurm`` on a machine without SLURM (no
            ``sbatch`` or ``srun``: :func:`harness.training.slurm.check_slurm_available`).
    """
    if executor == "local":
        raise ValueError("submit() submits a job: executor submitit-local or slurm (local: harness.upstream.train.run)")
    check_resources(executor, resources)
    clash = sorted(
        set(parameters or {})
        & {"nodes", "tasks_per_node", "gpus_per_node", "slurm_nodes", "slurm_ntasks_per_node", "slurm_gpus_per_node"}
    )
    if clash:
        raise ValueError(
            f"--slurm {', '.join(clash)}: give the processes with --nodes, --gpus-per-node and --tasks-per-node"
        )
    check_slurm_keys(executor, parameters or {})  # the keys this executor reads, then SLURM's programs
    check_slurm_available(executor)
    validate(cfg)
    run_dir = Path(cfg.run_dir()).resolve()
    status = _check_existing(run_dir, to_yaml(cfg))
    if status == "done":
        return None
    check_output(run_dir, overwrite)
    prior = _prior_world_size(run_dir) if status == "resume" else None
    if prior is not None and prior != resources.world_size:
        raise ValueError(
            f"{run_dir} holds a run interrupted with {prior} process(es) and this job has "
            f"{resources.world_size}: the data order and every process's random state are part of its "
            f"state, so resume it with {prior} processes (--nodes x --gpus-per-node, or --tasks-per-node "
            "on CPUs), or start a new run (another output_dir)"
        )
    if not isinstance(max_timeouts, int) or max_timeouts < 0:
        raise ValueError(f"--max-timeouts must be a whole number >= 0, got {max_timeouts!r}")
    cluster = "local" if executor == "submitit-local" else "slurm"
    folder = Path(folder) if folder is not None else run_dir / "submitit"
    try:
        ex = submitit.AutoExecutor(folder=str(folder), cluster=cluster, **{f"{cluster}_max_num_timeout": max_timeouts})
    except RuntimeError as e:  # no srun: not on a SLURM cluster
        raise ValueError(
            f"--executor {executor}: {e} Submit from a machine of the cluster (a login node), or use "
            "--executor submitit-local on this machine"
        ) from e
    params = {
        "timeout_min": DEFAULT_TIMEOUT_MIN,
        "name": cfg.name,
        **(parameters or {}),
        "nodes": resources.nodes,
        "tasks_per_node": resources.per_node,
        "gpus_per_node": resources.gpus_per_node,
    }
    update_parameters(ex, params, parameters or {})
    submitter = os.getpid() if executor == "submitit-local" else None  # the local job ends with this process
    return ex.submit(PretrainJob(cfg, Path.cwd(), resources.gpus_per_node, submitter))
