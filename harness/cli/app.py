"""The ``harness`` command line (click): the group, ``run`` and ``env``; the other commands, one module per family;
stages add their own (``harness upstream``). Imported on first use of :data:`harness.cli.main`."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.group import RESUMES, _Main
from harness.cli.options import LocalPath, user_path
from harness.cli.preparation import data
from harness.cli.runs import ensemble, import_cmd, report, shift
from harness.cli.tools import bench
from harness.cli.transfer import downstream, fewshot

__all__ = ["RESUMES", "main"]


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="het-harness")
def main() -> None:
    """Heteroscedastic (HET / HET-XL) classification: heads, pretraining, VTAB-1k transfer,
    ensembles and calibration reports."""


def _register_stages() -> None:
    """Each stage's own subcommands (``upstream``: pretraining)."""
    from harness.upstream.cli import upstream

    main.add_command(upstream)


_register_stages()

for _command in (ensemble, import_cmd, report, shift, downstream, fewshot, bench, data):
    main.add_command(_command)


@main.command(name="run", context_settings={"ignore_unknown_options": True})
@click.argument("experiment", required=False)
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--no-train",
    is_flag=True,
    help="Train nothing: build the report from the runs that have finished (restored from records where "
    "missing); conditions report the seeds they have, and the report lists the runs left out. A transfer study "
    "fine-tunes nothing and reports the methods whose transfers have finished.",
)
@click.option(
    "--sync-records",
    is_flag=True,
    help="Only save the records of finished runs (and restore missing run folders from records); "
    "train nothing. For an experiment with records: true.",
)
@click.option(
    "--reference",
    is_flag=True,
    help="Write the report into the reference folder (reference_root, results/: the committed reports) instead of "
    "<runs_root>/results/: the project's own regeneration of its reference results.",
)
@click.option(
    "--reevaluate",
    is_flag=True,
    help="First re-evaluate the finished runs whose metrics were evaluated with another Monte Carlo noise than this "
    "version draws (from their model.pt, no training; their records are written again).",
)
def run_cmd(experiment, overrides, no_train, sync_records, reference, reevaluate) -> None:
    """The main job: pretrain every method and seed, ensemble, transfer, and write one report.

    EXPERIMENT is a YAML path or a built-in name (default: digits, the embedded data). OVERRIDES are
    key=value pairs, e.g. seeds=[0,1] (`harness run seeds=[0,1]` overrides the default). Rerunning
    after an interruption redoes only what is missing. The report goes to <runs_root>/results/<name>/ (runs/results/
    digits/ by default), never over the committed reference in results/ (unless --reference), and is compared with
    that reference: which verdicts agree, which differ, the largest metric differences (comparison.md).
    """
    from harness.experiment import load_experiment, run_experiment
    from harness.experiment.config import Experiment
    from harness.upstream.train import TrainingDiverged

    if experiment and "=" in experiment and not Path(experiment).exists():  # `harness run key=value`: the default
        experiment, overrides = None, (experiment, *overrides)
    elif experiment:  # a YAML path: ~ expanded, a $ refused, as every path option (a name passes unchanged)
        experiment = user_path(experiment, next(p for p in run_cmd.params if p.name == "experiment"))

    try:
        exp = load_experiment(experiment, overrides)
        if reference:
            exp.results_root = exp.reference_root
        elif exp.results_root == Experiment().results_root and not any(
            o.startswith("results_root=") for o in overrides
        ):
            exp.results_root = str(Path(exp.runs_root) / "results")  # the user's results, beside their runs
        if sync_records:
            from harness.experiment import records_dir
            from harness.experiment.stages import sync_records_locked

            restored, saved = sync_records_locked(exp)  # under the experiment's lock; records verified first
            click.echo(f"records in {records_dir(exp)}: {saved} saved, {restored} run folder(s) restored")
            return
        if exp.transfer is not None:  # a transfer study of committed models: nothing upstream to train
            from harness.experiment.transfer import run_transfer

            out = run_transfer(exp, progress=click.echo, train=not no_train)
        else:
            out = run_experiment(exp, progress=click.echo, train=not no_train, reevaluate=reevaluate)
        click.echo("report: " + " and ".join(str(out / f) for f in ("report.md", "report.html") if (out / f).is_file()))
        from harness.experiment.reference import compare_with_reference

        compare_with_reference(out, Path(exp.reference_root) / exp.name, click.echo)
    except (ValueError, OSError, TrainingDiverged) as e:
        raise click.ClickException(str(e)) from e


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of lines.")
def env(as_json: bool) -> None:
    """Versions, devices and CPU features of this machine (bf16 native or emulated, AVX512/AMX): paste the output
    into a bug report."""
    import json

    from harness.env import describe, environment

    info = environment()
    click.echo(json.dumps(info, indent=1) if as_json else describe(info))


@main.command("moved-data")
@click.argument("folders", nargs=-1, required=True, type=LocalPath())
def moved_data(folders: "tuple[str, ...]") -> None:
    """Record the new place of a moved project's run, import or ensemble folders (runs and data moved or renamed
    together): a run's or an import's data.path as it names the data from here (its run.json), an ensemble's members
    found by their weights (its ensemble.json). Run it from the moved project's folder, the one its data.paths are
    relative to; any other folder is refused, naming what to do instead."""
    from harness.moved_data import accept_moved

    for folder in folders:
        try:
            click.echo(f"{folder}: {accept_moved(folder)}")
        except (ValueError, OSError) as e:
            raise click.ClickException(str(e)) from e
