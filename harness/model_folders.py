"""What a folder given where a model or a run belongs is instead, with the fix: an ensemble folder or an unfinished
run given as a model (:func:`check_model_folder`), a file or a model folder given as a run (:func:`not_a_run_folder`)."""

from __future__ import annotations

import os
from pathlib import Path

from harness.checkpoint_files import checkpoint_kind
from harness.folder_kinds import folder_kind, wrong_kind
from harness.io import read_json_object


def check_model_folder(folder: Path, source: str) -> None:
    """A folder given as a model source is no harness output folder that holds no one model (audit19 A19-15): an
    ensemble folder (``ensemble.json``: its members' models), an unfinished run folder (``run.json`` or
    ``checkpoints/`` beside ``config.yaml``, no ``model.pt`` yet) or another command's output folder (a sweep, an
    ensemble of sweeps, a few-shot study, a report, shift sets, a data pack: :func:`harness.folder_kinds.wrong_kind`,
    naming the model it was made from). A folder with ``config.json`` (an export, a timm folder) or
    ``model.pt`` (a finished run: :func:`harness.weights.read_config_json` names the file to give; it calls this check for a folder
    without config.json) passes.

    Raises:
        ValueError: naming the folder, what it is and the model to give instead.
    """
    if not folder.is_dir() or (folder / "config.json").is_file() or (folder / "model.pt").is_file():
        return
    kind = folder_kind(folder)
    if kind is not None and kind.kind not in ("run", "import", "ensemble", "export"):  # a sweep, a study... (A26-10)
        raise ValueError(wrong_kind(source, "model", kind))
    if (folder / "ensemble.json").is_file():
        try:
            members = (read_json_object(folder / "ensemble.json") or {}).get("members") or []
        except ValueError:
            members = []
        members = members if isinstance(members, list) else []
        first = f" ({str(Path(str(members[0])) / 'model.pt')!r}, its first member's)" if members else ""
        raise ValueError(
            f"{str(source)!r} is an ensemble folder (it holds ensemble.json): an ensemble is no single "
            f"model: give one member's model.pt{first}, or run the command once per member"
        )
    if (folder / "run.json").is_file() or ((folder / "config.yaml").is_file() and (folder / "checkpoints").is_dir()):
        raise ValueError(
            f"{str(source)!r} is an unfinished run (run.json and checkpoints, no model.pt): it has no final "
            f"model yet; rerun harness upstream --config {folder / 'config.yaml'} output_dir={folder}, which resumes "
            "from its last checkpoint, to write model.pt, then give that file"
        )


def not_a_run_folder(path: "str | os.PathLike") -> "str | None":
    """What ``path``, given where a run or ensemble folder belongs, is instead, with the fix: a file of a run or
    ensemble folder (its folder), another file (a model file: ``harness import`` makes a run folder of it), a model folder
    (``config.json``: an export or a timm folder, which ``harness import`` scores); None for any other folder (the
    command's own check names what it lacks)."""
    path = Path(path)
    run = "a run folder (harness upstream or harness import wrote it) or an ensemble folder (harness ensemble)"
    imported = "harness import --model {} --data CONFIG --out FOLDER makes a run folder of it: give that FOLDER"
    if path.is_file():
        holder = next((h for h in ("config.yaml", "ensemble.json") if (path.parent / h).is_file()), None)
        if holder:
            what = "a run's model.pt" if path.name == "model.pt" else f"a file of the folder {str(path.parent)!r}"
            return f"{str(path)!r} is {what}: give the folder itself, {str(path.parent)!r}"
        model = "; a harness model file: " + imported.format(path) if checkpoint_kind(path) == "model" else ""
        return f"{str(path)!r} is a file, not {run}{model}"
    if (path / "config.json").is_file() and not (path / "config.yaml").is_file():
        return (
            f"{str(path)!r} is a model folder (config.json: an export written by save_pretrained, or a timm "
            f"folder), not {run}; " + imported.format(f"local-dir:{path}")
        )
    return None
