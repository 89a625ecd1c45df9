"""The ``harness`` command group: what Ctrl-C and a missing extra end a command with."""

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


class _Main(click.Group):
    """The ``harness`` group and its subgroups: a missing optional package (:class:`harness.extras.MissingExtra`)
    ends any command with its one-line message (the ``pip install`` of its extra), and Ctrl-C with one line on
    what rerunning the command keeps (:data:`RESUMES`) and exit status 130 (128 + SIGINT, as a shell reports
    it), not a traceback."""

    group_class = type  # subgroups (harness data, harness bench) are of this class too

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
