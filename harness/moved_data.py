"""A run whose project folder moved: its ``run.json`` records the absolute folder its relative ``data.path`` named when
it ran (``data_path``, :func:`harness.data.splits.recorded_path`), which is gone, while ``data.path`` names an existing
folder from the working folder now (audit24 A24-09: a moved or renamed project, runs and data together, was refused
with ``data.path '/old/imf' does not exist; set data.path ...``, a path the user never set and a key that cannot
help). The new folder is never read on its own (it may be other data): :func:`check_not_moved` refuses, naming both
folders, and :func:`accept_moved` (``harness moved-data FOLDER ...``, or ``python -m harness.moved_data FOLDER ...``)
records the new place in run.json. The same for an import (``harness import``'s folder: its evaluation data, and the
model it imported where that moved too) and an ensemble (``ensemble.json``'s members, recorded absolute, found at
their new place by the weights it records: :func:`check_members_here`); any other folder is refused naming what it is
and the fix (audit25 A25-02/05/07: a moved ensemble was "not a run folder", and ``python -m harness.moved_data`` of an
ensemble or any other folder an errno).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

#: how a message tells the user to record the new place of a moved project's run, import or ensemble folder
ACCEPT = "harness moved-data"


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
        f"{run_dir} {_read_on(run_dir)} data.path={path} = {read} (as its {record} records it: data_path), which no longer "
        f"exists; from this working folder ({os.getcwd()}) data.path={path} is {here}, which the harness does not read "
        f"in its place on its own (it may be other data): if the project folder moved with its data, record the new "
        f"place ({ACCEPT} {run_dir}, which rewrites {record}'s data_path to {here}) and run again; else put the data "
        f"back at {read}"
    )


def _read_on(folder: "str | os.PathLike") -> str:
    """How a message says which data a run folder read: ``was trained on``, or for an import (``harness import``'s
    folder, its config.yaml's ``imported``) ``(an import: harness import's folder) was evaluated on``."""
    try:
        imported = "imported:" in (Path(folder) / "config.yaml").read_text(encoding="utf-8")
    except (OSError, ValueError):
        imported = False
    return "(an import: harness import's folder) was evaluated on" if imported else "was trained on"


def check_ensemble_path(spec_file: Path, path: Optional[str], source: Optional[str] = None) -> None:
    """An ensemble's ``--eval-data`` ``data.path`` recorded relative (by harness ensemble before audit23 A23-11's fix)
    names a folder from this working folder; one recorded absolute (of a data ``source`` read from a folder) exists.

    Raises:
        ValueError: naming ``spec_file`` (its ``ensemble.json``), the path, this folder and the fixes.
        MovedDataError: an absolute path gone (a moved project: audit25 A25-02), naming it and the fixes.
    """
    from harness.data.splits import PATH_SOURCES

    given = Path(str(path)).expanduser() if path else None
    if given is None or given.exists() or (source is not None and source not in PATH_SOURCES):
        return
    if given.is_absolute():  # a moved project's (audit25 A25-02): an ensemble records no relative path to follow it
        raise MovedDataError(
            f"{spec_file} records its --eval-data's data.path {path}, which no longer exists (a moved project, or data "
            f"removed); an ensemble records the folder alone, so {ACCEPT} cannot follow it: put the data back at "
            f"{path}, or build the ensemble again from its members with an --eval-data config naming the data's place "
            "now (harness ensemble -m MEMBER ... --from-checkpoints --eval-data FILE --out NEW_FOLDER)"
        )
    raise ValueError(
        f"{spec_file} records its --eval-data's data.path {path!r} relative to the folder the ensemble was built in, "
        f"and from this folder ({Path.cwd()}) it names nothing: run from that folder, or build the ensemble again "
        "(harness ensemble ... --eval-data FILE), which records the path absolute"
    )


def moved_member(ens_dir: "str | os.PathLike", spec: dict, member: str) -> Optional[Path]:
    """Where an ensemble's ``member`` (recorded absolute in its ``ensemble.json``, ``spec``) is now, its folder gone:
    the folder as it was given (``summary.sources``) from here, or the same trailing path under a folder above the
    ensemble's (``runs/p0`` of ``/old/proj/runs/p0`` under ``/new/proj``), whose ``model.pt`` holds the weights the
    ensemble records for it (``member_weights``: so it is that model, not another one there); None where none does
    (or the ensemble recorded no weights)."""
    from harness.model_identity import weights_digest

    digest = (spec.get("member_weights") or {}).get(member)
    if not digest:
        return None
    members, given = list(spec.get("members") or []), list((spec.get("summary") or {}).get("sources") or [])
    tried = [Path(given[members.index(member)])] if len(given) == len(members) else []
    parts = Path(member).parts[1:]
    for above in list(Path(ens_dir).resolve().parents)[:8]:
        tried += [above.joinpath(*parts[-k:]) for k in range(1, min(len(parts), 8) + 1)]
    for folder in tried:
        if (folder / "model.pt").is_file() and weights_digest(folder / "model.pt") == digest:
            return Path(os.path.abspath(folder))
    return None


def check_members_here(ens_dir: "str | os.PathLike", spec: Optional[dict]) -> None:
    """An ensemble folder's members (its ``ensemble.json``, ``spec``, records them absolute) are where it records
    them (audit25 A25-02: a moved project's ensemble was refused as "'/old/proj/runs/p0' is not a run folder").

    Raises:
        MovedDataError: a member folder gone, naming it, where its model is now (:func:`moved_member`) and the fix
            (:data:`ACCEPT` of the ensemble), or, where no folder here holds it, that it is gone and the fixes.
    """
    gone = [str(m) for m in (spec or {}).get("members") or [] if not Path(str(m)).is_dir()]
    if not gone:
        return
    record, found = Path(ens_dir) / "ensemble.json", moved_member(ens_dir, spec or {}, gone[0])
    if found is not None:
        raise MovedDataError(
            f"{ens_dir}'s member {gone[0]} (as its {record} records it: members) no longer exists; {found} holds its "
            f"model (the weights {record} records for it): if the project folder moved with its runs, record their "
            f"new places ({ACCEPT} {ens_dir}, which rewrites {record}'s members) and run again; else put the member "
            f"back at {gone[0]}"
        )
    raise MovedDataError(
        f"{ens_dir}'s member {gone[0]} (as its {record} records it: members) no longer exists, and no folder here "
        f"holds its model (the weights {record} records for it): put the member back at {gone[0]}, or build the "
        "ensemble again from its members' folders now (harness ensemble -m MEMBER ... --out NEW_FOLDER)"
    )


def accept_moved(folder: "str | os.PathLike") -> str:
    """Record the new place of a moved project's folder: a run's or an import's data (:func:`_accept_run`), an
    ensemble's members (:func:`_accept_ensemble`); run it from the moved project's folder. Returns what was recorded,
    a phrase.

    Raises:
        ValueError: a folder that does not exist, a file, a folder of another kind (an export, a downstream sweep, a
            few-shot study, a report, a data pack, an experiment's folder, no harness folder), each named with what to
            do instead; a run or ensemble that did not move.
    """
    from harness.folder_paths import harness_folder_kind

    where = Path(folder)
    if not where.is_dir():
        said = "is a file" if where.exists() else "does not exist"
        raise ValueError(f"{folder} {said}: {ACCEPT} takes a moved project's run, import or ensemble folder")
    if (where / "ensemble.json").is_file():
        return _accept_ensemble(where)
    if (where / "config.yaml").is_file() and ((where / "run.json").is_file() or (where / "model.pt").is_file()):
        return _accept_run(where)
    kind = harness_folder_kind(where)
    raise ValueError(f"{folder} is {_OTHER.get(kind.kind if kind else '', _OTHER[''])}")


#: what :func:`accept_moved` says of a folder it does not handle, by :func:`harness.folder_paths.harness_folder_kind`
_OTHER = {
    "export": "an export (save_pretrained's folder), which records no data folder (a card names no paths): nothing to "
    "record; it is read from any place",
    "downstream sweep": "a downstream sweep (harness downstream --out), whose sweep.json records its tasks' folders and "
    "lists to refuse a resume on other data, not to be re-pointed: run the sweep again from the moved project into "
    "a new folder (harness downstream ... --out NEW_FOLDER)",
    "few-shot": "a few-shot study (harness fewshot --out), whose fewshot.json records its tasks' folders to refuse "
    "other data, not to be re-pointed: run the study again from the moved project (harness fewshot ... --out "
    "NEW_FOLDER)",
    "report": "a report (harness report), which records no data folder of its own: record the new place of its runs "
    f"and ensembles ({ACCEPT} FOLDER ...), then write the report again (harness report ...)",
    "data pack split": "a data pack's split (harness data pack), read where it is: nothing to record; to record the "
    "place of the folder it was packed from, pack it again (harness data pack ...)",
    "experiment": "an experiment's folder (harness run): give its run and ensemble folders, each "
    f"({ACCEPT} FOLDER ...), or run the experiment again from the moved project",
    "experiment runs_root": "an experiment's runs_root (harness run): give its run and ensemble folders, each "
    f"({ACCEPT} FOLDER ...), or run the experiment again from the moved project",
    "": f"no harness run, import or ensemble folder (no config.yaml beside run.json or model.pt, no ensemble.json): "
    f"{ACCEPT} records the new place of those; give one",
}


def _accept_run(run_dir: Path) -> str:
    """Record in a run's or an import's ``run.json`` that its data moved: ``data_path.absolute`` becomes the folder
    its relative ``data.path`` names from the working folder (:func:`moved`), the rest of the file kept; for an import
    whose imported model moved with it (``imported.source_absolute`` gone, ``source`` as typed naming from here a file
    of the same weights), its config.yaml's ``source_absolute`` too. Returns what was recorded.

    Raises:
        ValueError: a run whose data did not move (no data.path, an absolute one, its recorded folder still there, or
            data.path naming nothing from here), naming the run, the folders and the fix.
    """
    from omegaconf import OmegaConf

    from harness.data.splits import recorded_path
    from harness.io import atomic_write_text, read_json

    record = run_dir / "run.json"
    meta = read_json(record) if record.is_file() else None
    data = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True).get("data") or {}
    path = data.get("path")
    recorded = meta.get("data_path") if isinstance(meta, dict) else None
    read = recorded_path(data.get("source"), path, recorded)
    here = moved(path, read)
    if here is None or not isinstance(meta, dict):
        if not path:
            why = f"its config.yaml names no data.path (data.source={data.get('source')}): no folder of the project"
        elif os.path.isabs(os.path.expanduser(str(path))):
            why = f"its data.path {path} is absolute, read where it is from any folder"
        elif read and os.path.exists(read):
            why = f"data.path={path} is {read}, as {record} records it, and that folder is still there"
        else:
            why = f"data.path={path}, as {record} records it: {read}; from this working folder ({os.getcwd()}) it names nothing"
        raise ValueError(
            f"{run_dir}: its data did not move ({why}): nothing to record; run {ACCEPT} from the moved project's "
            "folder (the one its data.path is relative to), for a run whose data folder moved with it"
        )
    meta["data_path"] = {**recorded, "absolute": here}
    atomic_write_text(record, json.dumps(meta, indent=1))
    return f"data.path now recorded as {here} (run.json's data_path)" + _accept_source(run_dir)


def _accept_source(run_dir: Path) -> str:
    """For an import whose imported model moved with the project (:func:`_accept_run`): record its new place in
    config.yaml's ``imported.source_absolute``; returns a phrase saying so, else ``""``."""
    import yaml

    from harness.io import atomic_write_text
    from harness.model_identity import weights_digest

    cfg = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}
    imported = cfg.get("imported") if isinstance(cfg, dict) else None
    old, typed = (imported.get("source_absolute"), imported.get("source")) if isinstance(imported, dict) else (0, 0)
    if not isinstance(old, str) or os.path.exists(old) or not typed or not Path(str(typed)).expanduser().is_file():
        return ""
    if weights_digest(Path(str(typed)).expanduser()) != weights_digest(run_dir / "model.pt"):
        return ""
    imported["source_absolute"] = os.path.abspath(os.path.expanduser(str(typed)))
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))
    return f", and the model it imported as {imported['source_absolute']} (config.yaml's imported.source_absolute)"


def _accept_ensemble(ens_dir: Path) -> str:
    """Record in an ensemble's ``ensemble.json`` (and its shift sets' ``shift/shift.json``) the new place of members
    whose folders are gone (:func:`moved_member`: found by the weights it records). Returns what was recorded.

    Raises:
        ValueError: an ensemble whose members did not move, one a member of which no folder here holds, or whose
            --eval-data folder is gone (:func:`check_ensemble_path`), naming it and the fix.
    """
    from harness.io import atomic_write_text, read_json_object

    record = ens_dir / "ensemble.json"
    spec = read_json_object(record, "build the ensemble again (harness ensemble)") or {}
    members = [str(m) for m in spec.get("members") or []]
    new = {m: moved_member(ens_dir, spec, m) for m in members if not Path(m).is_dir()}
    if not new:
        raise ValueError(
            f"{ens_dir}: its members did not move (they are where {record} records them, {', '.join(members)}): "
            f"nothing to record; for a member's data, give the member ({ACCEPT} MEMBER)"
        )
    lost = [m for m, found in new.items() if found is None]
    if lost:
        check_members_here(ens_dir, {**spec, "members": lost})
    check_ensemble_path(
        record, (spec.get("data_config") or {}).get("path"), (spec.get("data_config") or {}).get("source")
    )
    for file in (record, ens_dir / "shift" / "shift.json"):
        got = read_json_object(file, "run harness shift on the ensemble again") if file.is_file() else None
        if got is None or [str(m) for m in got.get("members") or []] != members:
            continue  # sets of other members are not the ensemble's (harness.shift.store.load_sets)
        got["members"] = [str(new.get(m) or m) for m in members]
        if isinstance(got.get("member_weights"), dict):
            got["member_weights"] = {str(new.get(m) or m): d for m, d in got["member_weights"].items()}
        atomic_write_text(file, json.dumps(got, indent=1))
    return f"members now recorded as {', '.join(str(new.get(m) or m) for m in members)} (ensemble.json's members)"


def main(argv: "list[str]") -> int:
    """``python -m harness.moved_data FOLDER [FOLDER ...]`` (as ``harness moved-data``): :func:`accept_moved` for each
    folder, a line each."""
    if not argv:
        print(
            f"usage: {ACCEPT} FOLDER [FOLDER ...] (run, import or ensemble folders of a moved project; run from its folder)",
            file=sys.stderr,
        )
        return 2
    for folder in argv:
        try:
            print(f"{folder}: {accept_moved(folder)}")
        except (ValueError, OSError) as e:
            print(f"Error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
