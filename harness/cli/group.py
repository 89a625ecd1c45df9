"""The ``harness`` command group: what Ctrl-C and a missing extra end a command with, and the refusal of a
single-valued option given twice."""

from __future__ import annotations

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


def _shown(opt, value) -> str:
    """One occurrence of an option as the user typed it: ``--name r08``, or the flag alone (``--in-order``)."""
    first = (opt._long_opts or opt._short_opts or [opt.dest])[0]
    if opt.action != "store":  # a flag: its spelling is its value
        return first
    return f"{first} {' '.join(map(str, value)) if isinstance(value, (tuple, list)) else value}"


def refuse_repeated_options(cmd: click.Command, ctx: click.Context, args: "list[str]") -> None:
    """Refuse a single-valued option of ``cmd`` given twice in ``args`` (its command line after its name): click
    keeps the last value without a word (``--log-with none ... --log-with mlflow`` logged to MLflow). Options
    declared ``multiple=True`` or ``count=True`` may repeat; a command line asking for ``--help`` is left to it.
    A line click cannot parse is left to the command's own parse (which says what is wrong).

    Raises:
        click.BadOptionUsage: naming the option, both values and the fix (give it once).
    """
    parser = cmd.make_parser(ctx)
    seen: "dict[int, list[str]]" = {}
    wrapped = {id(o): o for o in (*parser._long_opt.values(), *parser._short_opt.values())}
    for opt in wrapped.values():
        param = opt.obj
        if not isinstance(param, click.Option) or param.multiple or param.count or param.is_eager:
            continue

        def process(value, state, opt=opt, original=opt.process):
            seen.setdefault(id(opt.obj), []).append(_shown(opt, value))
            original(value, state)

        opt.process = process
    try:
        _, _, order = parser.parse_args(list(args))
    except click.UsageError:
        return
    if any(isinstance(p, click.Option) and p.is_eager for p in order):  # --help: the help, not a refusal
        return
    for param in dict.fromkeys(order):
        given = seen.get(id(param), [])
        if len(given) > 1:
            name = max(param.opts, key=len)
            raise click.BadOptionUsage(
                name,
                f"{name} was given {'twice' if len(given) == 2 else f'{len(given)} times'} ({' and '.join(given)}): it takes one value and only the last "
                f"would count; give {name} once",
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
