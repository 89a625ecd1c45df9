"""The split folders a data section reads, for the ``inputs`` of a writer's output-folder rule
(:func:`harness.folder_paths.check_outside_outputs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def data_read_folders(data: "Callable[[], Any]") -> "dict[Path, str]":
    """:func:`harness.data.splits.read_folders` of the training, evaluation and held-out splits of the data section
    ``data()`` returns (a :class:`harness.data.config.DataConfig`, e.g. ``lambda: harness.runs.data_config(run)``), as
    :func:`harness.folder_paths.check_outside_outputs`' ``inputs`` of a writer that takes a run
    (:func:`harness.runs.export_run`, audit25 A25-01); empty where that section cannot be read (moved, unreadable: the
    run's readers name why)."""
    from harness.data.splits import read_folders

    try:
        d = data()
    except (OSError, ValueError):
        return {}
    return read_folders(d.source, d.path, (d.train_split, d.eval_split, d.heldout_split))
