"""``python -m harness.cli``: as ``python -m harness`` (a Ctrl-C while torch is imported: one line, exit 130)."""

from harness.cli import run

run()
