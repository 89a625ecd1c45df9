"""The ``harness`` command group: what Ctrl-C and a missing extra end a command with, the refusal of a
single-valued option given twice, and of a value given twice in a list option."""

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


#: The one rule of list options: a value given twice in one is refused (:func:`refuse_repeated_values`), as a
#: single-valued option given twice is: the repeat would run twice (bench coverage --setting X --setting X) or be
#: dropped without a word. List options are every option declared ``multiple=True`` (each occurrence one value), and
#: these options that take a comma-separated list (by the command's path below ``harness``), with the type a value
#: is compared as (``--shots 1,01`` names 1 twice); an option in both (``--tasks``) pools the values of every
#: occurrence.
COMMA_LISTS = {
    "fewshot": {"--shots": int, "--tasks": str},
    "downstream": {"--tasks": str, "--gpus": int},
}
#: list options whose command refuses a repeat itself, with a message of its own, for more than the text given twice
#: (the same folder by another path, the same number written otherwise, an OOD name with other keys, a corruption in
#: its family): the rule is theirs, not applied twice
OWN_REPEAT_CHECK = {
    "ensemble": {"--members": "harness.runs.check_distinct_folders (after resolving links; -m and arguments)"},
    "shift": {
        "--corruptions": "harness.shift.settings.check_settings (a corruption its family or all holds too)",
        "--severities": "harness.shift.settings.check_settings",
        "--ood": "harness.shift.settings.check_settings (an OOD set's name given twice, with other keys too)",
    },
    "downstream": {
        "--lrs": "downstream.config.SweepSettings (as numbers)",
        "--steps": "downstream.config.SweepSettings (as numbers)",
        "--temperatures": "downstream.config.SweepSettings (as numbers)",
        "--log-with": "harness.training.trackers.parse_log_with",
    },
    "fewshot": {"--log-with": "harness.training.trackers.parse_log_with"},
    "report": {"--calibrators": "harness.uncertainty.calibrators (a calibrator named twice)"},
}
#: comma-separated options that are not lists: one value of each of several settings, which may be equal
NOT_LISTS = {
    "downstream": {"--resolution": "RESIZE,CROP: 32,32 resizes to 32 and crops 32"},
    "fewshot": {"--resolution": "SIZE or RESIZE,CROP: 32,32 resizes to 32 and crops 32"},
}


def _occurrences(cmd: click.Command, ctx: click.Context, args: "list[str]") -> "Optional[dict]":
    """Each option of ``cmd`` given in ``args`` (its command line after its name), with how it was written each
    time: ``(option, value)``, ``("--name", "r08")``, or a flag alone: ``("--in-order", None)``; read with click's
    public parameter attributes
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
        found.setdefault(param.name, (param, []))[1].append((opt, value))
    return found


def refuse_repeated_options(cmd: click.Command, ctx: click.Context, args: "list[str]") -> None:
    """Refuse a single-valued option of ``cmd`` given twice in ``args`` (its command line after its name): click
    keeps the last value without a word (``--log-with none ... --log-with mlflow`` logged to MLflow). Options
    declared ``multiple=True`` or ``count=True`` may repeat; a command line asking for ``--help`` is left to it.

    Raises:
        click.BadOptionUsage: naming the option, both values and the fix (give it once).
    """
    found = _occurrences(cmd, ctx, args)
    for param, occurrences in (found or {}).values():
        given = [opt if value is None else f"{opt} {value}" for opt, value in occurrences]
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


def refuse_repeated_values(path: str, cmd: click.Command, ctx: click.Context, args: "list[str]") -> None:
    """Refuse a value given twice in a list option of ``cmd`` (the command ``path`` below ``harness``, e.g.
    ``bench coverage``) in ``args`` (its command line after its name): an option declared ``multiple=True`` given
    the same value twice, or a comma list (:data:`COMMA_LISTS`) naming a value twice, in one occurrence or across
    them. Options whose command refuses a repeat itself (:data:`OWN_REPEAT_CHECK`) are left to it; values are
    compared as the option's type reads them (as text where it refuses one: the command's parse names it).

    Raises:
        click.BadOptionUsage: naming the option, the value, the rule and the fix (give it once).
    """
    found = _occurrences(cmd, ctx, args)
    commas, own = COMMA_LISTS.get(path, {}), OWN_REPEAT_CHECK.get(path, {})
    for param, occurrences in (found or {}).values():
        name = max(param.opts, key=len)
        if name in own or not (param.multiple or name in commas):
            continue
        seen: "dict[object, tuple[int, str, str]]" = {}  # value -> (occurrence, its text, the value's spelling)
        for i, (opt, text) in enumerate(occurrences):
            for value in [v.strip() for v in str(text).split(",") if v.strip()] if name in commas else [text]:
                key = _compared(value, commas.get(name), param, ctx)
                if key in seen:
                    first, said, spelt = seen[key]
                    where = f"{opt} {text}" if first == i else f"{said} and {opt} {text}"
                    shown = value if spelt == value else f"{key} (as {spelt} and {value})"
                    raise click.BadOptionUsage(
                        name,
                        f"{name} names {shown} twice ({where}): each value of a list option counts once, and the "
                        f"repeat would be run twice or dropped without a word; give {spelt} once",
                        ctx=ctx,
                    )
                seen[key] = (i, f"{opt} {text}", value)


def _compared(value: str, kind: "Optional[type]", param: click.Option, ctx: click.Context) -> object:
    """``value`` as compared for repeats: converted by ``kind`` (a comma list's) or the option's own type; the text
    where it does not convert (the command's parse refuses it)."""
    try:
        return kind(value) if kind is not None else param.type.convert(value, param, ctx)
    except (ValueError, click.BadParameter):
        return value


class _Main(click.Group):
    """The ``harness`` group and its subgroups: a missing optional package (:class:`harness.extras.MissingExtra`)
    ends any command with its one-line message (the ``pip install`` of its extra), and Ctrl-C with one line on
    what rerunning the command keeps (:data:`RESUMES`) and exit status 130 (128 + SIGINT, as a shell reports
    it), not a traceback. A single-valued option given twice, and a value given twice in a list option, are refused
    for every command of the group (:func:`refuse_repeated_options`, :func:`refuse_repeated_values`), before the
    command runs."""

    group_class = type  # subgroups (harness data, harness bench) are of this class too

    def resolve_command(self, ctx: click.Context, args: "list[str]"):
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, click.Group) and not ctx.resilient_parsing:
            sub = cmd.context_class(cmd, info_name=name, parent=ctx)
            refuse_repeated_options(cmd, sub, rest)
            names, c = [name], ctx
            while c.parent is not None:  # the command's path below ``harness``: "coverage" in "bench coverage"
                names.insert(0, c.info_name)
                c = c.parent
            refuse_repeated_values(" ".join(names), cmd, sub, rest)
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
