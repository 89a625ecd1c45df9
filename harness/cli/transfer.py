"""Transfer commands: ``harness downstream`` (VTAB-1k fine-tuning) and ``harness fewshot`` (linear probes)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.options import LocalPath, PathText, _model_source, _source_folder, overwrite_option, seed_option
from harness.heads.variants import TRANSFER_HEADS, TRANSFER_NUM_FACTORS, VARIANTS
from harness.training.precision import ACCEPTED
from harness.training.slurm import check_slurm_keys, slurm_parameters
from harness.training.trackers import FOLDERS as TRACKER_FOLDERS

#: what harness downstream writes in its --out folder (``reliability_<group>.png`` too); ``predictions``, the trackers'
#: folders and ``submitit`` may be made before ``sweep.json``
SWEEP_FILES = (
    "sweep.json",
    "runs.jsonl",
    "predictions",
    "vtab.md",
    "vtab.html",
    "vtab.json",
    *TRACKER_FOLDERS,
    "submitit",
    "jobs",
)


def _check_sweep_out(out: Path, overwrite: bool, read: "dict[Path, str]", upstream: "str | None" = None) -> None:
    """Refuse, before any work, an ``--out`` inside a run, export or other harness output folder, or inside a folder
    the tasks read (``read``: :func:`harness.tasks.taskset.task_read_folders`) or the model ``upstream`` was trained
    with (:func:`harness.importing.trained_read_folders`; :func:`harness.folder_paths.check_outside_outputs`), or
    holding files harness downstream did not write (no ``sweep.json``): with ``overwrite`` the sweep writes beside
    them, never over one.

    Raises:
        ValueError: naming the folder or the files and the fix (harness.io.check_output_folder).
    """
    from harness.folder_paths import check_outside_outputs
    from harness.importing import trained_read_folders
    from harness.io import LOCK_FILES, check_output_folder

    read = {**trained_read_folders(upstream, "--upstream"), **read} if upstream else read  # its data (A25-01)
    check_outside_outputs(out, "--out", "harness downstream", read)  # not inside a run, export, sweep or task
    ours = (out / "sweep.json").is_file() or (
        out.is_dir()
        and all(p.name in ("predictions", *TRACKER_FOLDERS, "submitit", *LOCK_FILES) for p in out.iterdir())
    )
    taken = SWEEP_FILES + tuple(p.name for p in out.glob("reliability_*.png")) if out.is_dir() else SWEEP_FILES
    check_output_folder(out, ours, taken, overwrite, "harness downstream", "--out")


def _check_executor_options(executor: str, gpus: str, slurm_opts: "tuple[str, ...]") -> None:
    """Refuse, before any work, ``--gpus`` and ``--slurm`` under an executor that would ignore them: ``--gpus`` is
    read by ``submitit-local`` only, ``--slurm`` by ``slurm`` (and ``submitit-local``, for ``timeout_min``); each
    ``--slurm`` key by the rule of :func:`harness.training.slurm.check_slurm_keys` (the one both stages use).

    Raises:
        click.UsageError: naming the option, its value and the executor it needs.
        click.BadParameter: a ``--slurm`` option that is not key=value.
    """
    if gpus and executor != "submitit-local":
        raise click.UsageError(
            f"--gpus {gpus} spreads the runs over this machine's GPUs, which only --executor submitit-local does; "
            f"--executor {executor} would ignore it: add --executor submitit-local, or leave out --gpus"
        )
    if slurm_opts and executor == "local":
        raise click.UsageError(
            f"--slurm {' '.join(slurm_opts)} describes SLURM jobs, which --executor local (the default: runs in "
            "this process) does not submit: add --executor slurm, or leave out --slurm"
        )
    try:
        check_slurm_keys(executor, slurm_parameters(slurm_opts))
    except ValueError as e:
        raise click.UsageError(str(e)) from e


def _task_names(tasks: "tuple[str, ...]", data_dir: "str | None", allow_outside_paths: bool) -> "list[str]":
    """The task names of ``--tasks`` (repeated or comma-separated), checked before any work with the data options
    against the tasks that read them: ``--data-dir`` is read by VTAB-1k tasks only (where their TFDS or folder data
    lies); ``--data-format`` by VTAB-1k tasks, and custom tasks (``NAME=FOLDER:K``) are folders (``--data-format
    folder`` agrees with them); ``--allow-outside-paths`` by folder lists; demo tasks are generated and read none.

    Raises:
        click.UsageError: ``--tasks`` names no task (empty, or only commas); ``--data-dir`` without a VTAB-1k task; ``--data-format`` or ``--allow-outside-paths``
            given with demo tasks only (each naming the option, its value and the fix).
        click.ClickException: an unknown task name or a bad custom task line.
    """
    from click.core import ParameterSource

    from harness.tasks.taskset import expand_tasks

    names = [n for t in tasks for n in t.split(",") if n.strip()]
    if not names:
        raise click.UsageError(
            f"--tasks {' '.join(repr(t) for t in tasks)} names no task, and a transfer over no task has no score: "
            "give task names (e.g. demo_digit), a group (vtab1k, natural, specialized, structured, demo) or a custom "
            "task NAME=FOLDER:K"
        )
    try:
        chosen = expand_tasks(names)
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    groups = {t.group for t in chosen}
    ctx = click.get_current_context(silent=True)
    fmt = ctx.params.get("data_format") if ctx else None
    fmt_given = ctx is not None and ctx.get_parameter_source("data_format") not in (None, ParameterSource.DEFAULT)
    given = [f"--data-dir {data_dir}"] if data_dir and not groups - {"demo", "custom"} else []
    if groups == {"demo"}:
        given += [f"--data-format {fmt}"] * fmt_given + ["--allow-outside-paths"] * bool(allow_outside_paths)
    if given:
        options = " and ".join(g.split()[0] for g in given)
        raise click.UsageError(
            f"{' and '.join(given)}: read by VTAB-1k tasks only (where their data lies), and --tasks "
            f"{','.join(names)[:200]} names none (demo tasks are generated, custom tasks NAME=FOLDER:K are read "
            f"from their own folders), so {'it' if len(given) == 1 else 'they'} would change nothing: remove "
            f"{options}, or add the VTAB-1k tasks {'it is' if len(given) == 1 else 'they are'} for"
        )
    return names


@click.command()
@_model_source("--upstream", "upstream_ckpt", "The model", "vtab.md")
@click.option(
    "--tasks",
    required=True,
    multiple=True,
    help="vtab1k, natural, specialized, structured, demo, task names, or a custom task "
    "`NAME=FOLDER:K[:no-flip][:no-crop]` (a folder in the VTAB-1k folder format, K classes; no-flip / "
    "no-crop turn those augmentations off); repeat or comma-separate.",
)
@click.option("--data-dir", type=PathText(), default=None, help="TFDS data_dir, or the root of the folder format.")
@click.option("--data-format", type=click.Choice(["tfds", "folder"]), default="tfds", show_default=True)
@click.option(
    "--preset",
    default="vtab_sweep",
    show_default=True,
    metavar="[vtab_sweep|bit_hyperrule|demo]",
    help="vtab_sweep: the VTAB-1k sweep, {0.001, 0.01} x {500, 2500} steps chosen on val200, batch 512; "
    "bit_hyperrule: the published BiT-HyperRule (lr 0.003 at batch 512, 500 / 10k / 20k steps by "
    "training-set size); demo: CPU-sized for the demo suite. The options below override it.",
)
@click.option("--lrs", default=None, help="Learning-rate grid, e.g. 0.001,0.01.")
@click.option("--steps", default=None, help="Steps grid, e.g. 500,2500.")
@click.option("--seeds", type=click.IntRange(1), default=None, help="Final runs per task.")
@click.option("--batch-size", type=click.IntRange(1), default=None, help="Examples per step (BiT: 512).")
@click.option(
    "--micro-batch",
    type=click.IntRange(1),
    default=None,
    help="Examples per forward pass (gradient accumulation up to --batch-size), at most --batch-size. Default: "
    "the preset's, capped at --batch-size.",
)
@click.option("--resolution", default=None, help="RESIZE,CROP instead of the BiT rule (e.g. 32,32).")
@click.option(
    "--lr-batch",
    type=click.IntRange(1),
    default=None,
    help="Batch size the --lrs are given for; scaled linearly to --batch-size (BiT: 512).",
)
@click.option(
    "--schedule",
    type=click.Choice(["staircase", "bit_hyperrule", "ta", "cosine"]),
    default=None,
    help="staircase: warm-up 20%, x0.1 at 40/60/80% of the steps (the VTAB sweep's); bit_hyperrule: the "
    "BiT-HyperRule's; ta: task_adaptation defaults; cosine: big_vision-style. Default: the preset's.",
)
@click.option(
    "--head",
    default=None,
    metavar="[" + "|".join(TRANSFER_HEADS) + "]",
    help="The fresh transfer head. hom (default): the paper's Table 6 protocol, a zero-initialised linear "
    "head; "
    + "; ".join(f"{t}: {VARIANTS[c].description}" for t, c in TRANSFER_HEADS.items() if t != "hom")
    + f" (R = min({TRANSFER_NUM_FACTORS}, K)): beyond that protocol, τ chosen on val200 with "
    "(lr, steps).",
)
@click.option(
    "--temperatures", default=None, help="With --head diag/het/pe: the τ grid, e.g. 0.5,1,2 (default 0.5,1,2,3)."
)
@click.option(
    "--allow-outside-paths",
    is_flag=True,
    help="Folder format: accept list paths outside the task folder (../x.jpg, /data/x.jpg, a link out of it). Off by "
    "default, so a split list cannot make the harness read other files.",
)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option(
    "--channels-last",
    is_flag=True,
    help="NHWC activations: faster convolutions on CPUs and tensor cores, the same result up to rounding.",
)
@click.option(
    "--out",
    type=LocalPath(file_okay=False, path_type=Path),
    default=None,
    help="Output folder (default results/downstream/<upstream run name>).",
)
@overwrite_option
@click.option(
    "--executor",
    type=click.Choice(["local", "submitit-local", "slurm"]),
    default="local",
    show_default=True,
    help="In this process; one process per run (per GPU with --gpus); SLURM jobs.",
)
@click.option("--gpus", default="", help="submitit-local: GPU ids to spread runs over, e.g. 0,1,2,3.")
@click.option(
    "--slurm",
    "slurm_opts",
    multiple=True,
    help="submitit parameter key=value (slurm_partition=gpu ...); submitit-local reads timeout_min only.",
)
@click.option(
    "--mixed-precision",
    type=click.Choice(ACCEPTED),
    default="no",
    show_default=True,
    help="no: fp32; auto: bf16 where the device computes it natively (GPUs with bf16, CPUs with AVX512-BF16 "
    "or AMX), else fp32; bf16; fp16 (GPUs only). Part of the recipe.",
)
@click.option(
    "--log-with",
    default="tensorboard",
    show_default=True,
    help="Experiment trackers, comma-separated: tensorboard (<out>/tb), mlflow, wandb, ... (accelerate's); "
    'none for no tracking. mlflow and wandb: pip install "het-harness[track]".',
)
def downstream(
    upstream_ckpt,
    tasks,
    data_dir,
    data_format,
    preset,
    lrs,
    steps,
    seeds,
    batch_size,
    micro_batch,
    resolution,
    lr_batch,
    schedule,
    allow_outside_paths,
    device,
    channels_last,
    out,
    executor,
    gpus,
    slurm_opts,
    weights,
    random_init,
    head,
    temperatures,
    overwrite,
    mixed_precision,
    log_with,
) -> None:
    """VTAB-1k transfer: fresh zero-initialised head, lr x steps sweep on val200 (or the BiT-HyperRule),
    final runs on train800val200 scored on test; checks every task's data first; resumes a killed sweep. Under
    accelerate launch (--num_processes N) the processes split the runs."""
    from harness.downstream.config import PRESETS, SweepSettings
    from harness.downstream.sweep import sweep
    from harness.tasks.taskset import expand_tasks, task_read_folders
    from harness.training.trackers import parse_log_with

    def numbers(text, option, kind, example, count=None):
        if text is None:
            return None
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values or (count is not None and len(values) != count):
            what = f"{count} comma-separated" if count else "comma-separated"
            unit = "whole numbers" if kind is int else "numbers"
            raise click.BadParameter(
                f"{option} {text!r}: expected {what} {unit}, e.g. {option} {example}", param_hint=option
            )
        return values

    _check_executor_options(executor, gpus, slurm_opts)
    names = _task_names(tasks, data_dir, allow_outside_paths)
    given = {
        "lrs": numbers(lrs, "--lrs", float, "0.001,0.01"),
        "steps": numbers(steps, "--steps", int, "500,2500"),
        "seeds": seeds,
        "batch_size": batch_size,
        "micro_batch": micro_batch,
        "lr_batch": lr_batch,
        "schedule": schedule,
        "resolution": numbers(resolution, "--resolution", int, "160,128", count=2),
        "head": head,
        "temperatures": numbers(temperatures, "--temperatures", float, "0.5,1,2"),
    }
    slurm = slurm_parameters(slurm_opts)
    if gpus:
        slurm["visible_gpus"] = numbers(gpus, "--gpus", int, "0,1,2,3")
    out = out or Path("results/downstream") / _source_folder(upstream_ckpt, random_init)
    try:
        if micro_batch is None and batch_size is not None:  # the preset's micro-batch shrinks to a smaller batch
            given["micro_batch"] = min(SweepSettings(**PRESETS[preset]).micro_batch, batch_size)
        settings = SweepSettings(
            **{**PRESETS[preset], **{k: v for k, v in given.items() if v is not None}},
            device=device,
            data_format=data_format,
            data_dir=data_dir,
            allow_outside_paths=allow_outside_paths,
            channels_last=channels_last,
            mixed_precision=mixed_precision,
        )
        _check_sweep_out(out, overwrite, task_read_folders(expand_tasks(names), settings), upstream_ckpt)
        result = sweep(
            upstream_ckpt,
            names,
            out,
            settings,
            executor,
            slurm,
            progress=click.echo,
            weights=weights,
            random_init=random_init,
            log_with=parse_log_with(log_with),
        )
    except (ValueError, OSError) as e:  # OSError: missing data (FileNotFoundError), an unwritable --out
        raise click.ClickException(str(e)) from e
    click.echo(
        f"mean over {len(result['tasks'])} tasks: {100 * result['mean_over_tasks']:.2f}; wrote {out / 'vtab.md'}"
    )


@click.command()
@_model_source("--model", "source", "The frozen model", "fewshot.md")
@click.option(
    "--tasks",
    required=True,
    multiple=True,
    help="As harness downstream: vtab1k, natural, specialized, structured, demo, task names, or a custom task "
    "NAME=FOLDER:K; repeat or comma-separate.",
)
@click.option(
    "--shots",
    default="1,5,10,25",
    show_default=True,
    help="Training examples per class, comma-separated (big_vision's 1,5,10,25).",
)
@click.option("--data-dir", type=PathText(), default=None, help="TFDS data_dir, or the root of the folder format.")
@click.option("--data-format", type=click.Choice(["tfds", "folder"]), default="tfds", show_default=True)
@click.option(
    "--resolution",
    default=None,
    help="SIZE, or RESIZE,CROP as harness downstream (the images are resized to CROP); default the BiT rule's "
    "crop: 128 below 96x96 pixels, else 480.",
)
@click.option(
    "--allow-outside-paths",
    is_flag=True,
    help="Folder format: accept list paths outside the task folder (../x.jpg, /data/x.jpg).",
)
@seed_option("Draws the shots and the held-out examples.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option(
    "--out",
    type=LocalPath(file_okay=False, path_type=Path),
    default=None,
    help="Output folder (default results/fewshot/<model name>).",
)
@overwrite_option
@click.option(
    "--log-with",
    default="tensorboard",
    show_default=True,
    help="Experiment trackers, comma-separated: tensorboard (<out>/tb), mlflow, wandb, ... (accelerate's); "
    'none for no tracking. mlflow and wandb: pip install "het-harness[track]".',
)
def fewshot(
    source,
    weights,
    random_init,
    tasks,
    shots,
    data_dir,
    data_format,
    resolution,
    allow_outside_paths,
    seed,
    device,
    out,
    overwrite,
    log_with,
) -> None:
    """Few-shot linear evaluation (big_vision's probe): frozen pre-logit features, closed-form ridge regression to
    ±1 one-hot targets on 1/5/10/25 examples per class of train800val200, λ chosen on held-out examples of that
    split (never on test), prec@1 on test; writes fewshot.json and fewshot.md."""
    from harness.downstream.config import SweepSettings
    from harness.downstream.fewshot import fewshot as run_fewshot
    from harness.training.trackers import parse_log_with

    def whole_numbers(text, option, example):
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values:
            raise click.BadParameter(
                f"{option} {text!r}: expected comma-separated whole numbers, e.g. {option} {example}", param_hint=option
            )
        return values

    names = _task_names(tasks, data_dir, allow_outside_paths)
    out = out or Path("results/fewshot") / _source_folder(source, random_init)
    try:
        settings = SweepSettings(
            device=device, data_format=data_format, data_dir=data_dir, allow_outside_paths=allow_outside_paths
        )
        result = run_fewshot(
            source,
            names,
            out,
            whole_numbers(shots, "--shots", "1,5,10,25"),
            settings,
            seed,
            whole_numbers(resolution, "--resolution", "32") if resolution else None,
            weights,
            random_init,
            progress=click.echo,
            overwrite=overwrite,
            log_with=parse_log_with(log_with),
        )
    except (ValueError, OSError) as e:  # OSError: missing data or model (FileNotFoundError), an unwritable --out
        raise click.ClickException(str(e)) from e
    click.echo(
        "mean over tasks: "
        + ", ".join(f"{s}-shot {100 * v:.2f}" for s, v in result["mean"].items())
        + f"; wrote {out / 'fewshot.md'}"
    )
