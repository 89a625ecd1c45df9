"""A run whose project folder moved: its ``run.json`` records the absolute folder its relative ``data.path`` named when
it ran (``data_path``, :func:`harness.data.splits.recorded_path`), which is gone, while ``data.path`` names an existing
folder from the working folder now (audit24 A24-09: a moved or renamed project, runs and data together, was refused
with ``data.path '/old/imf' does not exist; set data.path ...``, a path the user never set and a key that cannot
help). The new folder is never read on its own (it may be other data): :func:`check_not_moved` refuses, naming both
folders, and :func:`accept_moved` (``python -m harness.moved_data RUN ...``) records the new place in run.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

#: how a message tells the user to record the new place of a run's data
ACCEPT = "python -m harness.moved_data"


class MovedDataError(ValueError):
    """A run's recorded data folder is gone and its ``data.path`` names another existing folder from here
    (:func:`check_not_moved`); a ValueError, so every reader's message is this one."""


def moved(path: Optional[str], read: Optional[str]) -> Optional[str]:
    """The folder a relative ``data.path`` ``path`` names from the working folder, made absolute, where the folder the
    run recorded, ``read`` (:func:`harness.data.splits.recorded_path`'s answer), no longer exists and that one does;
    else None (``read`` exists, ``path`` is absolute or the one read, or names nothing from here)."""
    if not path or not read or path == read or os.path.exists(read):
        return None
    here = os.path.expanduser(str(path))
    if os.path.isabs(here) or not os.path.exists(here):
        return None
    return os.path.abspath(here)


def check_not_moved(run_dir: "str | os.PathLike", path: Optional[str], read: Optional[str]) -> None:
    """Refuse a run whose recorded data folder ``read`` is gone while its relative ``data.path`` ``path`` names an
    existing folder from here (:func:`moved`); pass otherwise (a folder that is simply missing is named by the reader).

    Raises:
        MovedDataError: naming the run's run.json, data.path, the folder recorded, the folder it names here, and the
            fixes: record the new place (:func:`accept_moved`, :data:`ACCEPT`) if the project moved with its data, or
            bring the data back to the recorded folder.
    """
    here = moved(path, read)
    if here is None:
        return
    record = Path(run_dir) / "run.json"
    raise MovedDataError(
        f"{run_dir} was trained on data.path={path} = {read} (as its {record} records it: data_path), which no longer "
        f"exists; from this working folder ({os.getcwd()}) data.path={path} is {here}, which the harness does not read "
        f"in its place on its own (it may be other data): if the project folder moved with its data, record the new "
        f"place ({ACCEPT} {run_dir}, which rewrites {record}'s data_path to {here}) and run again; else put the data "
        f"back at {read}"
    )


def check_ensemble_path(spec_file: Path, path: Optional[str]) -> None:
    """An ensemble's ``--eval-data`` ``data.path`` recorded relative (by harness ensemble before audit23 A23-11's fix)
    names a folder from this working folder.

    Raises:
        ValueError: naming ``spec_file`` (its ``ensemble.json``), the path, this folder and the fixes.
    """
    given = Path(str(path)).expanduser() if path else None
    if given is None or given.is_absolute() or given.exists():
        return
    raise ValueError(
        f"{spec_file} records its --eval-data's data.path {path!r} relative to the folder the ensemble was built in, "
        f"and from this folder ({Path.cwd()}) it names nothing: run from that folder, or build the ensemble again "
        "(harness ensemble ... --eval-data FILE), which records the path absolute"
    )


def accept_moved(run_dir: "str | os.PathLike") -> str:
    """Record in a run's ``run.json`` that its data moved: ``data_path.absolute`` becomes the folder its relative
    ``data.path`` names from the working folder (:func:`moved`), the rest of the file kept; run it from the folder the
    data.path is relative to (the moved project's). Returns the folder now recorded.

    Raises:
        ValueError: a run whose data did not move (no run.json ``data_path`` for a relative data.path, its recorded
            folder still there, or data.path naming nothing from here), naming the run, the folders and the fix.
    """
    from omegaconf import OmegaConf

    from harness.data.splits import recorded_path
    from harness.io import atomic_write_text, read_json

    record = Path(run_dir) / "run.json"
    meta = read_json(record)
    data = OmegaConf.to_container(OmegaConf.load(Path(run_dir) / "config.yaml"), resolve=True).get("data") or {}
    path = data.get("path")
    recorded = meta.get("data_path") if isinstance(meta, dict) else None
    read = recorded_path(data.get("source"), path, recorded)
    here = moved(path, read)
    if here is None or not isinstance(meta, dict):
        raise ValueError(
            f"{run_dir}: its data did not move (data.path={path}, as {record} records it: {read}; from this working "
            f"folder ({os.getcwd()}) {path} is {os.path.abspath(str(path)) if path else None}): nothing to record; run "
            "this from the folder the moved project's data.path is relative to"
        )
    meta["data_path"] = {**recorded, "absolute": here}
    atomic_write_text(record, json.dumps(meta, indent=1))
    return here


def main(argv: "list[str]") -> int:
    """``python -m harness.moved_data RUN [RUN ...]``: :func:`accept_moved` for each run folder, a line each."""
    if not argv:
        print(f"usage: {ACCEPT} RUN [RUN ...] (run folders whose project moved; run from its folder)", file=sys.stderr)
        return 2
    for run in argv:
        try:
            print(f"{run}: data.path now recorded as {accept_moved(run)} (run.json's data_path)")
        except (ValueError, OSError) as e:
            print(f"Error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
