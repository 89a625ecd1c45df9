"""The ``harness`` command line (click): :func:`main`, the group, in :mod:`harness.cli.app`, imported on first use
(PEP 562), so that :func:`run` (``harness``, ``python -m harness``, ``python -m harness.cli``) answers a Ctrl-C while
torch is imported with one line (``from harness.cli import main`` imports it at once, as before)."""

import sys

__all__ = ["RESUMES", "main", "run"]


def run() -> None:
    """Import and run :func:`main` (click exits with the command's status).

    Raises:
        SystemExit: 130 on a Ctrl-C during the import or outside a command (``interrupted`` on stderr); the commands
            answer their own, with what to rerun (:mod:`harness.cli.group`).
    """
    from harness.progress import install_ctrl_c

    install_ctrl_c()  # a Ctrl-C dropped in a finaliser is raised again at the next training step
    try:
        from harness.cli.app import main as cli

        cli()
    except KeyboardInterrupt:  # nothing started yet: nothing to resume
        print("interrupted", file=sys.stderr)
        sys.exit(130)


def __getattr__(name: str):
    if name in ("RESUMES", "main"):
        from harness.cli import app

        return getattr(app, name)
    raise AttributeError(f"module 'harness.cli' has no attribute {name!r}")
