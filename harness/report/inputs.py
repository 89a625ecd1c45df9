"""Whose report a report folder holds: the run and ensemble folders a report was built from (``report.json`` key
``inputs``), the one rule by which ``harness report`` and the report stage of ``harness run`` refuse to replace the
report of other inputs (:func:`check_same_inputs`), and the removal of the files an earlier report of the folder
wrote that the new one does not (:func:`remove_stale`); the folder a report may be written into
(:func:`report_folder`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from harness.io import quote, read_json
from harness.provenance import changed_since

#: the schema of ``report.json`` (a folder whose ``report.json`` has it holds a report)
SCHEMA = "harness.report/1"


def resolved(paths: Sequence["str | Path"]) -> "list[str]":
    """The folders ``paths`` as ``report.json`` records them (key ``inputs``): absolute, links resolved, sorted."""
    return sorted(str(Path(p).resolve()) for p in paths)


def read_report(out: Path) -> dict:
    """``out/report.json`` as a dict (an unreadable or non-object one: empty)."""
    return read_json_file(out / "report.json")


def recorded_inputs(spec: dict) -> "list[str]":
    """The input folders a report recorded (``inputs``; a report written before that key: its entries' ``source``,
    the folders as they were given), resolved as :func:`resolved` does."""
    inputs = spec.get("inputs")
    if not isinstance(inputs, list):
        entries = spec.get("entries") if isinstance(spec.get("entries"), list) else []
        inputs = [e.get("source") for e in entries if isinstance(e, dict)]
    return resolved([p for p in inputs if isinstance(p, str) and p])


def input_weights(inputs: Sequence[str]) -> "dict[str, Optional[str]]":
    """What each input folder (:func:`resolved`) holds now, for ``report.json``'s ``input_weights``: a run's
    ``model.pt`` weights digest (:func:`harness.model_identity.weights_digest`), an ensemble's members' digests as its
    ``ensemble.json`` records them (``member_weights``, joined), else None (not recorded)."""
    from harness.model_identity import weights_digest

    out: "dict[str, Optional[str]]" = {}
    for folder in map(Path, inputs):
        members = read_json_file(folder / "ensemble.json").get("member_weights")
        if (folder / "model.pt").is_file():
            out[str(folder)] = weights_digest(folder / "model.pt")
        elif isinstance(members, dict) and members:
            out[str(folder)] = ",".join(str(members[k]) for k in sorted(members))
        else:
            out[str(folder)] = None
    return out


def read_json_file(path: Path) -> dict:
    """``path`` as a JSON object (:func:`harness.io.read_json`; absent, unreadable or not an object: empty)."""
    got = read_json(path)
    return got if isinstance(got, dict) else {}


def _changed_weights(out: Path, inputs: "list[str]") -> "list[str]":
    """The inputs whose weights differ from those ``out``'s report recorded (``input_weights``; none recorded: none
    compared), each as the message says it."""
    recorded = read_report(out).get("input_weights")
    if not isinstance(recorded, dict):
        return []
    now = {p: d for p, d in input_weights(inputs).items() if d}
    return [f"{p}: {str(was)[:12]}... there, {str(d)[:12]}... now" for p, was, d in changed_since(recorded, now)]


def check_same_inputs(
    out: Path,
    inputs: Optional[Sequence["str | Path"]],
    inputs_under: "Optional[str | Path]",
    overwrite: Optional[bool],
    elsewhere: str,
) -> None:
    """The report already in ``out`` (``report.json`` of :data:`SCHEMA`) is of the same
    inputs: the same set of folders as ``inputs``, and every one of them inside ``inputs_under`` (an experiment's runs
    folder: its report grows as its runs finish); None: not compared. A rerun of the same report passes; with
    ``overwrite`` any report is replaced. ``elsewhere``: how the caller's user chooses another folder; ``overwrite``
    None: the caller has no ``--overwrite``, and the message does not offer it.

    Raises:
        ValueError: a report of other inputs, or of the same run folders' earlier weights (``input_weights``: audit24
            A24-13), naming the folder, the inputs it holds, the new ones and the fix.
    """
    if overwrite or (inputs is None and inputs_under is None):
        return
    old = recorded_inputs(read_report(out))
    new = resolved(inputs) if inputs is not None else None
    if inputs_under is not None:
        root = Path(inputs_under).resolve()
        other = [p for p in old if not Path(p).is_relative_to(root)]
        if not other and (new is None or all(Path(p).is_relative_to(root) for p in new)):
            return
        theirs = f"of {quote(', '.join(other or old), 300)} (outside {root})"
    elif new == old and not (changed := _changed_weights(out, new or [])):
        return
    elif new == old:  # the same folders, trained again since (audit24 A24-13: a report replaced another model's)
        theirs = f"of the same folders' earlier weights (digests {'; '.join(changed)})"
    else:
        theirs = f"of {quote(', '.join(old), 300) or 'inputs it does not record'}"
    mine = f"{root}" if inputs_under is not None else quote(", ".join(new or []), 300)
    offer = "" if overwrite is None else ", or give --overwrite to replace it"
    raise ValueError(
        f"{out} holds the report {theirs}, not of {mine}: writing this report there would replace it; "
        f"{elsewhere}{offer}"
    )


#: the first 8 bytes of every PNG file (the PNG specification, section 5.2), which every report figure is
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def remove_stale(out: Path, old: dict, figures: dict) -> "list[str]":
    """Remove from ``out`` the figure files the earlier report ``old`` (its ``report.json``, read before the new one
    was written) listed that the new report (its ``figures``) does not: plain file names of PNG images only (a
    ``.png`` name, the file starting with :data:`PNG_SIGNATURE`, as every figure a report writes); a file the old
    report did not list, or one that is no figure although an edited ``report.json`` lists it (audit13 A13-18), is
    never touched. Returns the names removed."""
    from harness.io import check_name

    def names(figs: object) -> "set[str]":
        found: "set[str]" = set()
        for v in figs.values() if isinstance(figs, dict) else []:
            for f in v if isinstance(v, list) else [v]:
                if isinstance(f, str):
                    found.add(f)
        return found

    removed = []
    for f in sorted(names(old.get("figures")) - names(figures)):
        try:
            check_name(f, "figure file")
        except ValueError:
            continue
        path = out / f
        if f.endswith(".png") and path.is_file() and not path.is_symlink():
            with open(path, "rb") as image:
                if image.read(len(PNG_SIGNATURE)) != PNG_SIGNATURE:
                    continue
            path.unlink()
            removed.append(f)
    return removed


#: what a report folder may hold besides the report: the experiment's records of its runs, its comparison with the
#: reference, and the lock (and holder) of the report being written
REPORT_EXTRAS = ("records", "comparison.md", ".report.lock", ".report.lock.pid")
#: the lock a report holds on its folder while it is built (:class:`harness.io.RunLock`): one writer per report
REPORT_LOCK = ".report.lock"
#: the files every report writes (a file of these names that no report wrote is never replaced)
REPORT_FILES = ("report.md", "report.html", "report.json")


def report_folder(
    out_root: "str | Path",
    name: str,
    overwrite: Optional[bool] = False,
    elsewhere: str = "choose another --name or --out-root",
    inputs: Optional[Sequence["str | Path"]] = None,
    inputs_under: "Optional[str | Path]" = None,
) -> Path:
    """``<out_root>/<name>``, checked before any work: ``name`` is a plain folder name
    (:func:`harness.io.check_name`), and an existing folder is one a report wrote (its ``report.json`` has this
    schema), holds only :data:`REPORT_EXTRAS`, or ``overwrite`` is given and none of :data:`REPORT_FILES` is there
    (a report writes beside files of others and never replaces one). ``elsewhere``: how the caller's user chooses
    another folder (the messages' fix); a caller with no ``--overwrite`` passes ``overwrite=None``, and the messages
    do not offer it. A report already there must be of the same ``inputs`` (the run and ensemble folders) or of inputs
    inside ``inputs_under``, unless ``overwrite`` (:func:`check_same_inputs`; None: not
    compared).

    Raises:
        ValueError: a bad name, a path leaving ``out_root``, a folder that cannot be written, one that holds
            something else (another command's output folder even with ``overwrite``:
            :func:`harness.folder_paths.check_not_other_output`), or the report of other inputs.
    """
    from harness.folder_paths import check_not_other_output
    from harness.io import check_name, check_writable, path_under

    out = path_under(out_root, check_name(name, "report name"))
    check_writable(out, f"the report folder {out}", elsewhere)
    if not out.is_dir():
        return out
    spec = out / "report.json"
    ours = spec.is_file() and f'"schema": "{SCHEMA}"' in spec.read_text(errors="replace")[:2000]
    if ours:
        check_same_inputs(out, inputs, inputs_under, overwrite, elsewhere)
        return out
    # a run's or an experiment's folder, even with --overwrite (a report.json no report wrote: checked below)
    check_not_other_output(out, "harness report", "--out-root (with --name)", REPORT_FILES)
    if not overwrite and any(p.name not in REPORT_EXTRAS for p in out.iterdir()):
        offer = (
            ""
            if overwrite is None
            else ", or give --overwrite (a report then writes beside them and never replaces one)"
        )
        raise ValueError(f"{out} exists and holds files no report wrote: {elsewhere}{offer}")
    taken = [n for n in REPORT_FILES if (out / n).exists()]
    if taken:
        raise ValueError(
            f"{out} holds {', '.join(taken)} that no report wrote: even with --overwrite they are not "
            f"replaced; move them, or {elsewhere}"
        )
    return out
