"""Writing an ensemble folder (``harness ensemble``): :func:`build_ensemble` reads and checks every member run
folder, then writes the averaged predictions (and held-out predictions) and, last, ``ensemble.json``;
:func:`check_ensemble_out` says whether a folder may take one. The averaging and the ensemble's numbers are
:mod:`harness.uncertainty.ensembles`'; reading an ensemble folder back is :mod:`harness.runs`'
(:func:`~harness.runs.ensemble_spec`, :func:`~harness.runs.ensemble_members`, :func:`~harness.runs.load_heldout`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness.folder_paths import check_not_other_output
from harness.io import LOCK_FILES, RunLock, atomic_write_text, check_writable, quote
from harness.provenance import provenance
from harness.runs import (
    check_distinct_folders,
    check_distinct_predictions,
    ensemble_spec,
    load_heldout,
    run_method,
    run_summary,
)
from harness.uncertainty.ensembles import average, check_compatible, summarize
from harness.uncertainty.predictions import Predictions

#: the files an ensemble folder holds, ``ensemble.json`` (written last) marking it as complete
ENSEMBLE_FILES = ("predictions.npz", "heldout_predictions.npz", "ensemble.json")
#: written first into an ensemble folder, so a build killed before ``ensemble.json`` is still known as ours
ENSEMBLE_MARKER = ".harness-ensemble"
#: why a member is refused twice, or two members with one set of predictions
_ONCE = "an ensemble counts each model once"


def check_ensemble_out(
    out: "str | Path",
    overwrite: bool = False,
    members: "Optional[Sequence[str | Path]]" = None,
    settings: Optional[dict] = None,
) -> Path:
    """``out`` may take an ensemble: it is new, empty (or holds only a :class:`harness.io.RunLock`'s files: an
    ensemble being built), or an ensemble folder (``ensemble.json``, or the :data:`ENSEMBLE_MARKER` of a build that
    was interrupted); with
    ``overwrite``, any folder that is not a run folder and holds none of :data:`ENSEMBLE_FILES` written by someone
    else (an ensemble never replaces or deletes files it did not write). Given ``members`` (and the ``settings`` its
    ``ensemble.json`` records: ``from_checkpoints``, ``data``), a finished ensemble there must be of the same members
    and settings (a rerun), even with ``overwrite``: another ensemble is never replaced (its ``shift/`` sets would be
    left beside the new one). Checked before any work.

    Raises:
        ValueError: a run folder, a folder another writer owns (the message names ``--overwrite`` where it helps), or
            the ensemble of other members or settings (or an unreadable ``ensemble.json``).
    """
    out = Path(out)
    ours = (out / "ensemble.json").is_file() or (out / ENSEMBLE_MARKER).is_file()
    if members is not None and (out / "ensemble.json").is_file():
        _check_same_ensemble(out, [str(Path(m).resolve()) for m in members], settings or {})
    if not out.is_dir() or ours or _lock_only(out):
        return out
    if (out / "config.yaml").is_file() or (out / "model.pt").is_file():
        raise ValueError(
            f"--out {out} is a run folder: an ensemble there would replace the run's predictions; choose another --out"
        )
    check_not_other_output(out, "harness ensemble", "--out", ENSEMBLE_FILES)
    taken = [n for n in ENSEMBLE_FILES if (out / n).exists()]
    if taken:  # first: --overwrite is offered only where it would be accepted
        raise ValueError(
            f"--out {out} holds {', '.join(taken)} that no ensemble wrote: even with --overwrite an "
            "ensemble does not replace them; choose another --out"
        )
    if not overwrite:
        raise ValueError(
            f"--out {out} exists and holds files no ensemble wrote (no ensemble.json): choose another "
            "--out, or give --overwrite to add the ensemble's files beside them"
        )
    return out


def _lock_only(out: Path) -> bool:
    """``out`` holds nothing but a :class:`harness.io.RunLock`'s files (:data:`harness.io.LOCK_FILES`)."""
    return all(p.name in LOCK_FILES for p in out.iterdir())


def _check_same_ensemble(out: Path, members: "list[str]", settings: dict) -> None:
    """The finished ensemble in ``out`` is of ``members`` (resolved paths, in any order) and ``settings``."""
    fix = f"choose another --out, or remove {out} yourself to build this ensemble there"
    try:
        spec = ensemble_spec(out)
    except ValueError as e:
        raise ValueError(f"--out {out} holds an ensemble.json that cannot be read ({e}); {fix}") from None
    old = [str(m) for m in spec.get("members") or []]
    changed = [f"{k} {spec.get(k)!r} (now {v!r})" for k, v in settings.items() if k in spec and spec.get(k) != v]
    if sorted(old) != sorted(members):
        changed.insert(0, f"members {quote(', '.join(old), 300)} (now {quote(', '.join(members), 300)})")
    if changed:
        raise ValueError(
            f"--out {out} holds another ensemble ({'; '.join(changed)}): building this one there would replace it "
            f"and leave its shift sets (shift/) beside the new one, even with --overwrite; {fix}"
        )


def build_ensemble(
    members: Sequence["str | Path"],
    out: "str | Path",
    from_checkpoints: bool = False,
    repredict: Optional[Callable[[Path], Predictions]] = None,
    overwrite: bool = False,
    data: Optional[str] = None,
) -> dict:
    """Ensemble run folders and write ``out/predictions.npz``, ``out/heldout_predictions.npz`` (when
    every member has held-out predictions) and, last, ``out/ensemble.json``. ``out`` is checked by
    :func:`check_ensemble_out`: it may hold an earlier build of the same members and settings (a rerun, or a build
    that was interrupted, whose held-out predictions are removed if this one has none), never another ensemble.

    Every member is read and checked before anything is written: on any error ``out`` is left as it
    was (no partial ensemble folder). One ensemble writes a folder at a time: the build holds ``out``'s
    :class:`harness.io.RunLock` and checks ``out`` again under it, so an ensemble another process finished meanwhile
    is never replaced.

    Args:
        members: run folders, each given once.
        from_checkpoints: re-predict with each member's ``model.pt`` (one model in memory at a
            time) through ``repredict(run_dir) -> Predictions`` instead of reading saved predictions.
        data: the description of the data ``repredict`` evaluates on (``harness ensemble --eval-data``), recorded
            in ``ensemble.json``; default: the first member's recorded evaluation data.

    Raises:
        ValueError: fewer than 2 members; a member given twice or two members with identical
            predictions; members (or their held-out predictions) that differ in label space, link or
            evaluation data; ``from_checkpoints`` without ``repredict``; an ``out`` that is a run folder, holds
            files another writer made or the ensemble of other members or settings (:func:`check_ensemble_out`), or
            cannot be written; another harness ensemble writing ``out`` (naming its PID and command); a member's
            metrics.json that is not a JSON object.
        FileNotFoundError: a member is not a finished run folder.
    """
    members = [Path(m) for m in members]
    if len(members) < 2:
        raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}; give two or more run folders")
    if from_checkpoints and repredict is None:
        raise ValueError("from_checkpoints=True needs repredict(run_dir) -> Predictions")
    check_distinct_folders(members, "member", _ONCE, predictions=from_checkpoints)  # saved ones: checked once read
    out = Path(out)
    if any(out.resolve() == m.resolve() for m in members):
        raise ValueError(
            f"the ensemble folder {str(out)!r} is one of the members: writing there would replace the "
            "member's predictions; choose another --out"
        )
    data = data if data is not None else run_summary(members[0]).get("eval_data", "")
    settings = {"from_checkpoints": from_checkpoints, "data": data}
    check_ensemble_out(out, overwrite, members, settings)  # before the lock (which makes the folder) is taken
    check_writable(out, f"--out {out}", "--out ...")
    made = not out.exists()
    busy = f"another harness ensemble is being written there; wait for it to finish, or choose another --out than {out}"
    try:
        with RunLock(out, what=busy):
            check_ensemble_out(out, overwrite, members, settings)  # again: another ensemble may have finished since
            return _build(members, out, from_checkpoints, repredict, data)
    except BaseException:
        if made and out.is_dir() and _lock_only(out):  # a folder only the lock made: removed again
            for p in out.iterdir():
                p.unlink(missing_ok=True)
            out.rmdir()
        raise


def _build(members: "list[Path]", out: Path, from_checkpoints: bool, repredict, data: str) -> dict:
    """:func:`build_ensemble`'s reading, checking and writing, while it holds ``out``'s lock."""
    methods = sorted({run_method(m) for m in members})  # every member is a run folder, before any re-prediction
    preds = [repredict(m) if from_checkpoints else Predictions.load(m) for m in members]
    check_compatible(preds)
    check_distinct_predictions(preds, "member", _ONCE)
    held = [load_heldout(m) for m in members]
    held = held if all(h is not None for h in held) else None
    if held is not None:
        check_compatible([replace(h, source=f"{h.source} (held-out)") for h in held])
    summary = summarize(preds)
    spec = {
        "schema": "harness.ensemble/1",
        "method": "+".join(methods),
        "members": [str(m.resolve()) for m in members],
        "from_checkpoints": from_checkpoints,
        "data": data,
        "summary": summary,
        **provenance(),
    }
    text = json.dumps(spec, indent=1)

    # everything is read and checked: write, the marker of the folder's owner first, ensemble.json last
    ours = (out / "ensemble.json").is_file() or (out / ENSEMBLE_MARKER).is_file()
    atomic_write_text(
        out / ENSEMBLE_MARKER, "harness.ensemble/1: this folder's ensemble files are written by harness ensemble\n"
    )
    average(preds, str(out)).save(out / "predictions.npz")
    if held is not None:
        average(held, str(out)).save(out / "heldout_predictions.npz")
    elif (out / "heldout_predictions.npz").is_file() and ours:
        (out / "heldout_predictions.npz").unlink()  # a previous ensemble's, not this one's
    atomic_write_text(out / "ensemble.json", text)
    return spec
