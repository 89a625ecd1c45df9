"""The upstream stage's command: ``harness upstream`` (registered by :mod:`harness.cli`) and
``python -m upstream`` / ``accelerate launch -m upstream --config CONFIG [OVERRIDES]``."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="A YAML config, e.g. upstream/configs/digits_het.yaml.")
@click.option("--no-progress", is_flag=True, help="No progress bar (logs only).")
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def upstream(config_path: Path, no_progress: bool, overrides: "tuple[str, ...]") -> None:
    """Pretrain a heteroscedastic or baseline model (accelerate; resumes an interrupted run).

    OVERRIDES are key=value pairs applied over the config, e.g. optim.lr=0.05 train.epochs=3.
    Several GPUs: accelerate launch -m upstream --config CONFIG [OVERRIDES].
    """
    from harness.config import load_config
    from upstream.config import UpstreamConfig
    from upstream.train import TrainingDiverged, run

    try:
        cfg = load_config(UpstreamConfig, config_path, overrides)
        run_dir = run(cfg, progress=not no_progress)
    except (ValueError, OSError, TrainingDiverged) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"run folder: {run_dir}")
