"""``--slurm key=value`` options, read once for both stages (``harness upstream`` and ``harness downstream``) into
submitit's parameters (``submitit.AutoExecutor.update_parameters``)."""

from __future__ import annotations

from typing import Sequence

import click


def slurm_parameters(options: Sequence[str]) -> dict:
    """``--slurm key=value`` pairs as submitit parameters: whole numbers and decimals become numbers
    (``mem_gb=1.5`` is 1.5, ``timeout_min=60`` is 60), anything else stays text (``slurm_partition=gpu``).

    Raises:
        click.BadParameter: a pair without ``=`` or without a key (the message shows the form).
    """
    out: dict = {}
    for opt in options:
        key, eq, value = opt.partition("=")
        if not (key and eq):
            raise click.BadParameter(
                f"--slurm {opt!r}: expected key=value, e.g. --slurm slurm_partition=gpu", param_hint="--slurm"
            )
        out[key] = value
        for kind in (int, float):
            try:
                out[key] = kind(value)
                break
            except ValueError:
                continue
    return out
