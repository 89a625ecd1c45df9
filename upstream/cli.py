"""The upstream stage's command: ``harness upstream`` (registered by :mod:`harness.cli`) and
``python -m harness.upstream`` / ``accelerate launch -m harness.upstream --config CONFIG [OVERRIDES]``."""

from __future__ import annotations

from pathlib import Path

import click

from harness.path_options import LocalPath
from harness.training.slurm import slurm_parameters


@click.command(context_settings={"ignore_unknown_options": True})
@click.option(
    "--config",
    "config_path",
    type=LocalPath(dir_okay=False, path_type=Path),
    required=True,
    help="A YAML config, e.g. upstream/configs/digits_het.yaml.",
)
@click.option("--no-progress", is_flag=True, help="No progress bar (logs only).")
@click.option(
    "--executor",
    type=click.Choice(["local", "submitit-local", "slurm"]),
    default="local",
    show_default=True,
    help="local: this process (or each process of accelerate launch); submitit-local: "
    "a submitit job of --tasks-per-node processes on this machine; slurm: a SLURM "
    "job of --nodes x --gpus-per-node processes, requeued on preemption/timeout.",
)
@click.option("--nodes", type=int, default=1, show_default=True, help="Machines (slurm).")
@click.option(
    "--gpus-per-node",
    type=int,
    default=0,
    show_default=True,
    help="GPUs a node, one process each (NCCL). 0: CPU processes (gloo).",
)
@click.option(
    "--tasks-per-node", type=int, default=None, help="CPU processes a node (with --gpus-per-node 0; default 1)."
)
@click.option(
    "--slurm",
    "slurm_opts",
    multiple=True,
    metavar="KEY=VALUE",
    help="submitit parameter, e.g. slurm_partition=gpu, timeout_min=4320, cpus_per_task=10, "
    "slurm_signal_delay_s=120 (repeat the option); submitit-local reads timeout_min only.",
)
@click.option(
    "--max-timeouts",
    type=int,
    default=None,
    help="Requeues after the job reaches its time limit (default 20; preemptions do not count).",
)
@click.option("--wait", is_flag=True, help="slurm: wait for the job to end (submitit-local always waits).")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Train into an output_dir that holds other files, beside them (a file it did not write is never replaced).",
)
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def upstream(
    config_path: Path,
    no_progress: bool,
    executor: str,
    nodes: int,
    gpus_per_node: int,
    tasks_per_node: "int | None",
    slurm_opts: "tuple[str, ...]",
    max_timeouts: "int | None",
    wait: bool,
    overwrite: bool,
    overrides: "tuple[str, ...]",
) -> None:
    """Pretrain a heteroscedastic or baseline model (accelerate; resumes an interrupted run).

    OVERRIDES are key=value pairs applied over the config, e.g. optim.lr=0.05 train.epochs=3.
    Several GPUs on one machine: accelerate launch -m harness.upstream --config CONFIG [OVERRIDES].
    Several nodes: --executor slurm --nodes N --gpus-per-node G (a submitit job that checkpoints and requeues
    itself on preemption or timeout and resumes from its last step).
    """
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig
    from harness.upstream.train import TrainingDiverged, run

    resources_given = nodes != 1 or gpus_per_node != 0 or tasks_per_node is not None
    if executor == "local" and (resources_given or slurm_opts or max_timeouts is not None or wait):
        raise click.UsageError(
            "--nodes, --gpus-per-node, --tasks-per-node, --slurm, --max-timeouts and --wait "
            "describe a submitit job: add --executor submitit-local (this machine) or --executor "
            "slurm (several nodes); one machine's GPUs: accelerate launch -m harness.upstream ..."
        )
    try:
        cfg = load_config(UpstreamConfig, config_path, overrides)  # each key once
        if executor == "local":
            run_dir = run(cfg, progress=not no_progress, overwrite=overwrite)
            click.echo(f"run folder: {run_dir}")
            return
        _submit(
            cfg,
            executor,
            nodes,
            gpus_per_node,
            tasks_per_node,
            slurm_parameters(slurm_opts),
            max_timeouts,
            wait or executor == "submitit-local",
            overwrite,
        )
    except (ValueError, OSError, TrainingDiverged) as e:
        raise click.ClickException(str(e)) from e


def _submit(
    cfg,
    executor: str,
    nodes: int,
    gpus_per_node: int,
    tasks_per_node: "int | None",
    parameters: dict,
    max_timeouts: "int | None",
    wait: bool,
    overwrite: bool = False,
) -> None:
    """``harness upstream --executor submitit-local|slurm``: submit the job, wait if asked, report."""
    from harness.extras import MissingExtra, require

    try:
        submitit = require("submitit", f"--executor {executor}")
    except MissingExtra as e:
        raise click.ClickException(str(e)) from e

    from harness.upstream.launch import DEFAULT_MAX_TIMEOUTS, Resources, submit

    resources = Resources(nodes, gpus_per_node, tasks_per_node)
    job = submit(
        cfg,
        executor,
        resources,
        parameters,
        DEFAULT_MAX_TIMEOUTS if max_timeouts is None else max_timeouts,
        overwrite=overwrite,
    )
    if job is None:
        from harness.config import to_yaml
        from harness.upstream.train import done_line

        click.echo(done_line(cfg.run_dir(), to_yaml(cfg)))
        return
    what = f"{resources.nodes} node(s) x {resources.per_node} process(es)"
    click.echo(f"submitted job {job.job_id} ({what}); logs: {job.paths.folder}")
    if not wait:
        click.echo(
            f"run folder: {Path(cfg.run_dir()).resolve()} (the job requeues itself on preemption and "
            "timeout; the same command resumes it after a failure)"
        )
        return
    try:
        records = job.results()
    except submitit.core.utils.FailedJobError as e:  # the job raised: its traceback
        raise click.ClickException(f"job {job.job_id} failed; logs in {job.paths.folder}:\n{e}") from e
    except submitit.core.utils.UncompletedJobError as e:  # killed, or too many time-outs
        raise click.ClickException(
            f"job {job.job_id} ended without finishing: {e}; logs in {job.paths.folder}; "
            "the same command resumes the run"
        ) from e
    except KeyboardInterrupt:
        if executor != "slurm":  # submitit-local: the job's processes got the Ctrl-C too (harness.cli says the rest)
            raise
        click.echo(
            f"\ninterrupted: stopped waiting; SLURM job {job.job_id} keeps running (scancel {job.job_id} stops "
            f"it; logs in {job.paths.folder})",
            err=True,
        )
        raise click.exceptions.Exit(130) from None
    click.echo(f"run folder: {records[0]['run_dir']} ({records[0]['status']}, {len(records)} process(es))")
