"""The ``harness`` command group: what Ctrl-C and a missing extra end a command with, and the refusal of a
single-valued option given twice."""

from __future__ import annotations

from typing import Optional

import click

#: what rerunning a command keeps after Ctrl-C, by command (the message the interrupted command ends with)
RESUMES = {
    "upstream": "rerun the same command to resume from the run's last checkpoint (checkpoints/last.pt, written at "
    "the end of every epoch and every train.checkpoint_every steps); the steps after it are redone",
    "run": "rerun the same command to resume: finished runs, shift predictions and fine-tuning runs are kept, and "
    "each interrupted training run continues from its last checkpoint",
    "downstream": "rerun the same command to resume the sweep: its finished fine-tuning runs are kept (runs.jsonl), "
    "the interrupted one starts over",
    "import": "rerun the same command to start over: nothing is kept (the run folder is written once every "
    "prediction is done; stopped while it was written, it is left incomplete: delete it first)",
    "data pack": "rerun the same command to resume: finished shards are kept, the interrupted one is written again",
}


def _occurrences(cmd: click.Command, ctx: click.Context, args: "list[str]") -> "Optional[dict]":
    """Each option of ``cmd`` given in ``args`` (its command line after its name), with how it was written each
    time (``--name r08``, or a flag alone: ``--in-order``), read with click's public parameter attributes
    (``opts``, ``secondary_opts``, ``is_flag``, ``count``, ``nargs``); None when the line asks for an eager option
    (``--help``, ``--version``). Tokens after ``--``, arguments and unknown options are skipped (the command's own
    parse says what is wrong with them)."""
    names = {o: p for p in cmd.get_params(ctx) if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}
    found: "dict[str, tuple[click.Option, list[str]]]" = {}
    i = 0
    while i < len(args) and args[i] != "--":
        token = args[i]
        opt, value = token.split("=", 1) if token.startswith("--") and "=" in token else (token, None)
        param = names.get(opt)
        i += 1
        if param is None:
            continue
        if param.is_eager:
            return None
        if value is None and not (param.is_flag or param.count):  # its value(s): the next token(s)
            value, i = " ".join(args[i : i + max(1, param.nargs)]), i + max(1, param.nargs)
        found.setdefault(param.name, (param, []))[1].append(opt if value is None else f"{opt} {value}")
    return found


def refuse_repeated_options(cmd: click.Command, ctx: click.Context, args: "list[str]") -> None:
    """Refuse a single-valued option of ``cmd`` given twice in ``args`` (its command line after its name): click
    keeps the last value without a word (``--log-with none ... --log-with mlflow`` logged to MLflow). Options
    declared ``multiple=True`` or ``count=True`` may repeat; a command line asking for ``--help`` is left to it.

    Raises:
        click.BadOptionUsage: naming the option, both values and the fix (give it once).
    """
    found = _occurrences(cmd, ctx, args)
    for param, given in (found or {}).values():
        if len(given) > 1 and not (param.multiple or param.count):
            name = max(param.opts, key=len)
            times = "twice" if len(given) == 2 else f"{len(given)} times"
            raise click.BadOptionUsage(
                name,
                f"{name} was given {times} ({' and '.join(given)}): "
                + ("it is a switch, on or off" if param.is_flag else "it takes one value and only the last would count")
                + f"; give {name} once",
                ctx=ctx,
            )


class _Main(click.Group):
    """The ``harness`` group and its subgroups: a missing optional package (:class:`harness.extras.MissingExtra`)
    ends any command with its one-line message (the ``pip install`` of its extra), and Ctrl-C with one line on
    what rerunning the command keeps (:data:`RESUMES`) and exit status 130 (128 + SIGINT, as a shell reports
    it), not a traceback. A single-valued option given twice is refused for every command of the group
    (:func:`refuse_repeated_options`), before the command runs."""

    group_class = type  # subgroups (harness data, harness bench) are of this class too

    def resolve_command(self, ctx: click.Context, args: "list[str]"):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, click.Group) and not ctx.resilient_parsing:
            sub = cmd.context_class(cmd, info_name=name, parent=ctx)
            refuse_repeated_options(cmd, sub, rest)
        return name, cmd, rest

    def invoke(self, ctx: click.Context):
        from harness.extras import MissingExtra

        try:
            return super().invoke(ctx)
        except MissingExtra as e:
            raise click.ClickException(str(e)) from e
        except KeyboardInterrupt:
            names, c = [ctx.invoked_subcommand or ""], ctx
            while c.parent is not None:  # the command's path below ``harness``: "upstream", "data pack"
                names.insert(0, c.info_name)
                c = c.parent
            said = RESUMES.get(" ".join(n for n in names if n))
            click.echo("\ninterrupted" + (f": {said}" if said else ""), err=True)
            ctx.exit(130)
