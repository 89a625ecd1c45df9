"""``python -m harness.upstream`` / ``accelerate launch -m harness.upstream --config CONFIG [OVERRIDES]``."""

from harness.upstream.cli import upstream

if __name__ == "__main__":
    upstream(prog_name="upstream")
