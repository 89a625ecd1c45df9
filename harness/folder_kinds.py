"""What kind of harness folder a path is (:func:`folder_kind`: a run, an import, an ensemble of runs, a downstream
sweep, an ensemble of sweeps, a few-shot study, an export, a report, a folder's shift sets, a data pack's split, an
experiment's folders) and the one message of a folder of one kind given where another is expected
(:func:`wrong_kind`: "X is a <kind> (written by <command>; <its results>), not <expected>: <what to give instead>"),
said by every command that takes a folder (report, shift, ensemble, export_run, and the model sources of import,
fewshot, downstream and from_pretrained). The marking files are :data:`harness.folder_paths.OUTPUT_MARKS`'; this
module tells apart the kinds those files share (an import from a run, an ensemble of sweeps from one of runs)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple, Optional

from harness.folder_paths import harness_folder_kind
from harness.io import read_json_object

#: kind -> (how a message names it, the command that writes it, where its results are); kinds as
#: :func:`folder_kind` returns them
KINDS = {
    "run": ("an upstream run folder", "harness upstream", "its results are metrics.json and predictions.npz"),
    "import": ("an import's run folder", "harness import", "its results are metrics.json and predictions.npz"),
    "ensemble": ("an ensemble of run folders", "harness ensemble", "its results are ensemble.json"),
    "downstream sweep": ("a downstream sweep", "harness downstream", "its results are vtab.md and vtab.html"),
    "downstream ensemble": (
        "an ensemble of downstream sweeps",
        "harness ensemble of sweep folders",
        "its results are ensemble.md",
    ),
    "few-shot": ("a few-shot study", "harness fewshot", "its results are fewshot.md"),
    "export": ("an export", "save_pretrained or export_run", "Classifier.from_pretrained loads it"),
    "report": ("a report", "harness report", "its results are report.md and report.html"),
    "shift sets": ("a folder's shift sets", "harness shift", "harness report reads them from the folder above"),
    "data pack split": ("a data pack's split", "harness data pack", "a config's data.path reads it"),
    "experiment": ("an experiment's folder", "harness run", "its runs are in upstream/, its ensembles in ensembles/"),
    "experiment runs_root": ("an experiment's runs_root", "harness run", "its experiments' folders are inside it"),
}


class FolderKind(NamedTuple):
    """What :func:`folder_kind` finds: the ``kind`` (a key of :data:`KINDS`) and the ``sources``, the folders or model
    files it was made from (a sweep's upstream model.pt, an ensemble's members, the folder holding shift sets), as
    recorded; empty where none is recorded."""

    kind: str
    sources: "tuple[str, ...]" = ()

    @property
    def named(self) -> str:
        """How a message names the kind, with the command that writes it (``a downstream sweep (written by harness
        downstream; its results are vtab.md and vtab.html)``)."""
        name, writer, results = KINDS[self.kind]
        return f"{name} (written by {writer}; {results})"


def _recorded(folder: Path, file: str, *keys: str) -> "tuple[str, ...]":
    """The model files or folders ``folder/file`` records under the first of ``keys`` it holds (a string, a list of
    strings, or a list of objects with ``upstream``); () for a file that cannot be read."""
    try:
        spec = read_json_object(folder / file) or {}
    except (ValueError, OSError):
        return ()
    value = next((spec[k] for k in keys if k in spec), None)
    items = value if isinstance(value, list) else [value] if value else []
    return tuple(str(v.get("upstream") if isinstance(v, dict) else v) for v in items if v)


def folder_kind(path: "str | os.PathLike") -> Optional[FolderKind]:
    """What kind of harness folder ``path`` is (:data:`KINDS`), with what it was made from; None for a path that is
    no folder, or a folder no harness command marks as its own."""
    folder = Path(path)
    if not folder.is_dir():
        return None
    if (folder / "shift.json").is_file() and not (folder / "ensemble.json").is_file():
        return FolderKind("shift sets", (str(folder.parent),))
    marked = harness_folder_kind(folder)
    if marked is None:
        return None
    kind = marked.kind
    if kind == "run":
        config = folder / "config.yaml"
        text = config.read_text(encoding="utf-8", errors="replace") if config.is_file() else ""
        imported = any(line.startswith("imported:") for line in text.splitlines())
        return FolderKind("import" if imported else "run", (str(folder / "model.pt"),))
    if kind == "ensemble":
        members = _recorded(folder, "ensemble.json", "members")
        try:
            raw = (read_json_object(folder / "ensemble.json") or {}).get("members") or []
        except (ValueError, OSError):
            raw = []
        sweeps = isinstance(raw, list) and any(isinstance(m, dict) for m in raw)
        return FolderKind("downstream ensemble" if sweeps else "ensemble", members)
    sources = {
        "downstream sweep": ("sweep.json", "upstream"),
        "few-shot": ("fewshot.json", "source"),
        "report": ("report.json", "inputs"),
    }.get(kind)
    return FolderKind(kind, _recorded(folder, *sources) if sources else ())


def run_folders(sources: "tuple[str, ...]") -> "list[str]":
    """The run folders of ``sources`` (a model.pt's folder where it is a run's, a folder as it is); a source that is
    no run's model (a timm name, a file elsewhere) is left out."""
    out = []
    for s in sources:
        p = Path(s)
        if p.name == "model.pt" and (p.parent / "config.yaml").is_file():
            out.append(str(p.parent))
        elif p.is_dir():
            out.append(s)
    return out


#: what each expectation of :func:`wrong_kind` gives from a folder's sources: run folders or model files
EXPECTED = {
    "run": "a run folder (harness upstream or harness import wrote it)",
    "run or ensemble": "a run folder (harness upstream or harness import) or an ensemble of them (harness ensemble)",
    "run or sweep": "a run folder (harness upstream or harness import) or a downstream sweep (harness downstream)",
    "model": "a model (a harness model.pt, or a folder written by save_pretrained)",
}


def wrong_kind(path: "str | os.PathLike", expected: str, kind: Optional[FolderKind] = None) -> str:
    """The message of ``path``, a harness folder of one kind, given where ``expected`` (a key of :data:`EXPECTED`)
    belongs: what it is, the command that wrote it and where its results are, then what to give instead (its own
    sources of the expected kind where it records them: a sweep's upstream run, an ensemble's members, the folder
    holding shift sets).

    Raises:
        ValueError: ``path`` is of no harness kind (:func:`folder_kind`), or ``expected`` unknown (a caller's bug).
    """
    kind = kind or folder_kind(path)
    if kind is None or expected not in EXPECTED:
        raise ValueError(f"wrong_kind: {path!r} is no harness folder, or {expected!r} is no expectation")
    if expected == "model":
        found = [s if Path(s).is_file() or ":" in s else str(Path(s) / "model.pt") for s in kind.sources]
        found = [s for s in found if Path(s).is_file() or ":" in s]  # a model file, or a name (timm:NAME)
        what = "the model it was made from" if len(found) == 1 else "one of the models it was made from"
    else:
        found = run_folders(kind.sources)
        what = "the run folder it was made from" if len(found) == 1 else "the run folders it was made from"
        what = "the folder that holds them" if kind.kind == "shift sets" else what
        if kind.kind in ("run", "import") or (kind.kind == "ensemble" and expected == "run or ensemble"):
            found = []  # the folder itself was accepted by another rule; nothing else to suggest
    listed = ", ".join(repr(s) for s in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    fix = f"give {what}: {listed}" if found else f"give {EXPECTED[expected].split(' (')[0]}"
    if kind.kind in ("ensemble", "downstream ensemble") and expected in ("run", "model"):
        fix = "an ensemble is no single model: " + fix + ", or run the command once per member"
    return f"{str(path)!r} is {kind.named}, not {EXPECTED[expected]}: {fix}"


def check_kind(path: "str | os.PathLike", accepted: "tuple[str, ...]", expected: str) -> Path:
    """``path``, given where ``expected`` (a key of :data:`EXPECTED`) belongs, is not a harness folder of another kind
    than ``accepted`` (keys of :data:`KINDS`); a folder of no harness kind is left to the caller's own check (it names
    the file it lacks). Returns ``path`` as a Path.

    Raises:
        ValueError: :func:`wrong_kind`'s message.
    """
    kind = folder_kind(path)
    if kind is not None and kind.kind not in accepted:
        raise ValueError(wrong_kind(path, expected, kind))
    return Path(path)


def ensemble_json(ens_dir: "str | os.PathLike") -> Optional[dict]:
    """An ensemble folder's ``ensemble.json`` (members, method, summary, ...), or None if it has none: the reader of
    :func:`harness.runs.ensemble_spec`, which every reader of an ensemble of runs calls.

    Raises:
        ValueError: an ``ensemble.json`` that is not valid JSON or not a JSON object, naming it and the fix; that of an
            ensemble of downstream sweeps (its members sweeps, not runs: audit26 A26-10), named as such
            (:func:`wrong_kind`) with the runs its sweeps fine-tuned.
    """
    spec = read_json_object(
        Path(ens_dir) / "ensemble.json", "rebuild the ensemble (harness ensemble), or restore the file"
    )
    members = (spec or {}).get("members")
    if isinstance(members, list) and any(isinstance(m, dict) for m in members):  # harness ensemble of sweeps
        sources = tuple(str(m.get("upstream")) for m in members if isinstance(m, dict) and m.get("upstream"))
        raise ValueError(wrong_kind(ens_dir, "run or ensemble", FolderKind("downstream ensemble", sources)))
    return spec
