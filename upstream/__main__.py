"""``python -m upstream`` / ``accelerate launch -m upstream --config CONFIG [OVERRIDES]``."""

from upstream.cli import upstream

if __name__ == "__main__":
    upstream(prog_name="upstream")
