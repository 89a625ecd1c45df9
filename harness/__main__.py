"""``python -m harness`` and the ``harness`` console script: the command line (:func:`harness.cli.run`), with a
Ctrl-C before any command runs (while torch is imported) answered by one line and exit status 130 (the commands
answer their own, with what to rerun: :mod:`harness.cli.group`)."""

import sys


def main() -> None:
    """Run :func:`harness.cli.run` (click exits with the command's status).

    Raises:
        SystemExit: 130 on a Ctrl-C during the imports or outside a command (``interrupted`` on stderr).
    """
    try:
        from harness.cli import run
    except KeyboardInterrupt:  # in the instant the small harness.cli package is imported
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    run()


if __name__ == "__main__":
    main()
