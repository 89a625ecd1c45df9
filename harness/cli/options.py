"""Options shared by the commands that take a model from any source."""

from __future__ import annotations

import math
from pathlib import Path

import click

from harness.path_options import LocalPath, PathText, user_path

__all__ = ["LocalPath", "PathText", "user_path"]  # the path rule of every option, for the commands here

#: ``--overwrite`` of the commands that write into an ``--out`` folder beside files of others (one text for all)
overwrite_option = click.option(
    "--overwrite",
    is_flag=True,
    help="Write into an --out that holds other files, beside them (a file it did not write is never replaced).",
)


class FiniteFloat(click.FloatRange):
    """The type of every float option: a finite number in the range (click's ``FloatRange`` lets NaN through every
    bound, and infinity through an open end), e.g. ``FiniteFloat(0)`` for a number >= 0."""

    name = "finite float"

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 (click's signature)
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(
                f"{value!r} is not a finite number: give a number in the range {self._describe_range()}", param, ctx
            )
        return super().convert(number, param, ctx)


def seed_option(help: str):
    """``--seed`` of every command: a whole number in the one seed range (:data:`harness.rules.SEED`, numpy's), so
    ``--seed -1`` is refused by name before any work, as a config's ``seed`` is."""
    from harness.rules import SEED

    return click.option(
        "--seed", type=click.IntRange(SEED["low"], SEED["high"]), default=0, show_default=True, help=help
    )


def _model_source(flag: str, dest: str, what: str, said_in: str, random_init: bool = True):
    """The options that name a model from any source (harness.sources.load_source): ``flag`` (a ``model.pt``,
    ``timm:NAME`` or ``torchvision:NAME``), ``--weights`` and ``--random-init`` (``random_init=False``: a
    command that takes trained models only; the flag stays, hidden from ``--help``, for the command to refuse)."""

    def wrap(f):
        f = click.option(
            "--random-init",
            is_flag=True,
            hidden=not random_init,
            help=f"With timm:NAME or torchvision:NAME and no weights: random weights on purpose (said in {said_in}).",
        )(f)
        f = click.option(
            "--weights",
            type=LocalPath(dir_okay=False, exists=True, path_type=Path),
            default=None,
            help="With timm:NAME or torchvision:NAME: the weights file (.safetensors, a .pth/.pt state "
            "dict, or for timm a BiT .npz).",
        )(f)
        return click.option(
            flag,
            dest,
            type=PathText(),
            required=True,
            help=f"{what}: the model.pt of an upstream run; timm:NAME (any timm model name, e.g. "
            "timm:resnet50.a1_in1k) with --weights, or with timm's weights (downloaded as timm "
            "does; from the local cache only with HF_HUB_OFFLINE=1); timm:hf-hub:ORG/NAME or "
            "timm:local-dir:PATH (timm's sources); or torchvision:NAME with --weights.",
        )(f)

    return wrap


def _source_folder(source: str, random_init: bool) -> str:
    """The default output folder name of a model source: ``timm_resnet18`` (``_random_init`` appended when
    asked), or the name of a ``model.pt``'s run folder."""
    if ":" in source and not Path(source).exists():  # timm:NAME, torchvision:NAME
        return source.replace(":", "_").replace("/", "_") + ("_random_init" if random_init else "")
    return Path(source).resolve().parent.name
