"""The ``harness`` command line (click): :func:`main`, the group, in :mod:`harness.cli.app`, imported on first use
(PEP 562), so that ``python -m harness.cli`` reaches the Ctrl-C handling of :mod:`harness.__main__` before torch is
imported (``from harness.cli import main`` imports it at once, as before)."""

__all__ = ["RESUMES", "main"]


def __getattr__(name: str):
    if name in __all__:
        from harness.cli import app

        return getattr(app, name)
    raise AttributeError(f"module 'harness.cli' has no attribute {name!r}")
