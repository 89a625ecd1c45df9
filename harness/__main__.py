"""``python -m harness`` and the ``harness`` console script: the command line, with a Ctrl-C before any command runs
(while torch is imported) answered by one line and exit status 130 (the commands answer their own, with what to
rerun: :mod:`harness.cli.group`)."""

import sys


def main() -> None:
    """Import and run :func:`harness.cli.main` (click exits with the command's status).

    Raises:
        SystemExit: 130 on a Ctrl-C during the import or outside a command (``interrupted`` on stderr).
    """
    try:
        from harness.cli import main as cli

        cli()
    except KeyboardInterrupt:  # nothing started yet: nothing to resume
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
