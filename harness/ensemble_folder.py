"""Writing an ensemble folder (``harness ensemble``): :func:`build_ensemble` reads and checks every member run
folder, then writes the averaged predictions (and held-out predictions) and, last, ``ensemble.json``;
:func:`check_ensemble_out` says whether a folder may take one. The averaging and the ensemble's numbers are
:mod:`harness.uncertainty.ensembles`'; reading an ensemble folder back is :mod:`harness.runs`'
(:func:`~harness.runs.ensemble_spec`, :func:`~harness.runs.ensemble_members`, :func:`~harness.runs.load_heldout`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from harness.checkpoint_files import check_run_model, check_run_predictions
from harness.data.splits import absolute_path
from harness.folder_paths import check_not_other_output
from harness.io import LOCK_FILES, RunLock, atomic_write_text, check_writable, quote
from harness.model_identity import check_distinct_weights
from harness.provenance import changed_since, provenance
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

if TYPE_CHECKING:
    from harness.data.config import DataConfig

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
        _check_same_ensemble(out, [str(Path(m).resolve()) for m in members], settings or {}, overwrite)
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


def _check_same_ensemble(out: Path, members: "list[str]", settings: dict, overwrite: bool = False) -> None:
    """The finished ensemble in ``out`` is of ``members`` (resolved paths, in any order) and ``settings`` and, without
    ``overwrite``, of the members' weights now (:func:`changed_member`)."""
    from harness.moved_data import check_members_here

    fix = f"choose another --out, or remove {out} yourself to build this ensemble there"
    try:
        spec = ensemble_spec(out)
    except ValueError as e:
        raise ValueError(f"--out {out} holds an ensemble.json that cannot be read ({e}); {fix}") from None
    old = [str(m) for m in spec.get("members") or []]
    if sorted(old) != sorted(members):  # the same ensemble of a moved project: harness moved-data (audit25 A25-02)
        check_members_here(out, spec)
    changed = [f"{k} {spec.get(k)!r} (now {v!r})" for k, v in settings.items() if k in spec and spec.get(k) != v]
    if sorted(old) != sorted(members):
        changed.insert(0, f"members {quote(', '.join(old), 300)} (now {quote(', '.join(members), 300)})")
    if changed:
        raise ValueError(
            f"--out {out} holds another ensemble ({'; '.join(changed)}): building this one there would replace it "
            f"and leave its shift sets (shift/) beside the new one, even with --overwrite; {fix}"
        )
    changed = None if overwrite else changed_member(spec)
    if changed:
        raise ValueError(
            f"--out {out} holds the ensemble of {changed}: the member was trained again or replaced since, so this is "
            "another ensemble; give --overwrite to replace it (its shift sets are then left out until harness shift "
            "averages them again), or choose another --out"
        )


def member_weights(members: "Sequence[str | Path]") -> "dict[str, Optional[str]]":
    """``{member folder resolved: the weights digest of its model.pt}`` (:func:`harness.model_identity.weights_digest`;
    None without a readable one), as ``ensemble.json`` records it (``member_weights``) and its shift sets' shift.json
    copies it."""
    from harness.model_identity import weights_digest

    return {str(Path(m).resolve()): weights_digest(Path(m) / "model.pt") for m in members}


def changed_member(spec: dict) -> Optional[str]:
    """The first member of an ensemble (``spec``: its ``ensemble.json``) whose model.pt now holds other weights than
    the ``member_weights`` it records (:func:`member_weights`): a phrase naming the member and both digests, or None
    (an ensemble recorded before the digests were, and a member with no readable model.pt, are not compared)."""
    recorded = spec.get("member_weights")
    if not isinstance(recorded, dict):
        return None
    now = member_weights([m for m, digest in recorded.items() if digest])
    for m, was, digest in changed_since(recorded, {m: d for m, d in now.items() if d}):
        return (
            f"member {m}'s earlier weights (its model.pt's weights digest is now {digest[:12]}..., ensemble.json "
            f"records {str(was)[:12]}...)"
        )
    return None


def check_member_list(ens_dir: "str | Path", spec: dict) -> None:
    """An ensemble's ``ensemble.json`` lists the members whose weights it recorded when it was built (its
    ``member_weights``, keyed by member: audit26 A26-13, a members list edited by hand had shift predict other models
    than the ensemble's own predictions, and the digest check, keyed by the recorded members, never saw them). An
    ensemble recorded before the digests were passes (nothing to compare).

    Raises:
        ValueError: naming ensemble.json, the members listed and not recorded (and recorded and not listed), and the
            fix: the list back as harness ensemble wrote it, or another ensemble of those members in another folder.
    """
    recorded = spec.get("member_weights")
    if not isinstance(recorded, dict):
        return
    listed = [str(m) for m in spec.get("members") or []]
    added, dropped = [m for m in listed if m not in recorded], [m for m in recorded if m not in listed]
    if added or dropped:
        members = " ".join(f"-m {m}" for m in listed)
        raise ValueError(
            f"{Path(ens_dir) / 'ensemble.json'} lists members its predictions were not built from: "
            f"{', '.join(added) or 'none'} listed but not recorded in its member_weights, {', '.join(dropped) or 'none'} "
            "recorded and no longer listed (its members list was edited since harness ensemble wrote it): put the "
            f"list back as it was ({', '.join(recorded)}), or build the ensemble of the members now listed in another "
            f"folder (harness ensemble {members} --out NEW_FOLDER)"
        )


def check_members_unchanged(ens_dir: "str | Path", spec: Optional[dict] = None) -> None:
    """An ensemble folder read back (``harness report``, the ensemble's shift sets) is of its members' models as they
    are now: none was trained again or replaced since the ensemble was built (:func:`changed_member`; audit24 A24-05:
    a report showed the ensemble of a member's earlier run beside that member's new one). ``spec``: its
    ``ensemble.json``, read here when not given.

    Raises:
        ValueError: naming the ensemble, the member, both digests and the fix (build the ensemble again); a member
            folder gone (a moved project: :func:`harness.moved_data.check_members_here`, audit25 A25-02); a members
            list edited since (:func:`check_member_list`).
    """
    from harness.moved_data import check_members_here

    spec = spec if spec is not None else ensemble_spec(ens_dir) or {}
    check_members_here(ens_dir, spec)  # where a moved project's members are, not "not a run folder"
    check_member_list(ens_dir, spec)
    changed = changed_member(spec)
    if changed:
        members = " ".join(f"-m {m}" for m in spec.get("members") or [])
        raise ValueError(
            f"{ens_dir} was built from {changed}: its predictions are not those of the member's model now; build the "
            f"ensemble again (harness ensemble {members} --out {ens_dir} --overwrite), or put the member's earlier "
            "model.pt back"
        )


def check_same_view(members: "Sequence[str | Path]") -> None:
    """Every member was evaluated at one view of its images: the same ``data.image_size`` and evaluation resize
    (``data.eval_resize``, null being ``image_size / 0.875``: :func:`harness.data.transforms.eval_transform`), read from
    each member's data section (:func:`harness.runs.data_config`). Part of the members' compatibility (with
    :func:`harness.uncertainty.ensembles.check_compatible`, which compares what the predictions hold: a view is not in
    them; audit19 A19-11: a run at eval_resize 32 and an import at null passed as the same evaluation data).

    Raises:
        ValueError: naming the first member whose view differs from the first member's, both views and the fix.
    """
    from harness.runs import data_config

    def view(m: "str | Path") -> "Optional[tuple[int, int, Optional[int]]]":
        try:
            d = data_config(m)
        except (OSError, ValueError):  # not a run folder, or a config that does not read: its reader names it
            return None
        return d.image_size, d.eval_resize or int(round(d.image_size / 0.875)), d.eval_resize

    first, ref = members[0], view(members[0])
    for m in members[1:]:
        v = view(m)
        if ref is not None and v is not None and v[:2] != ref[:2]:
            raise ValueError(
                f"member {str(m)!r} was evaluated at data.image_size={v[0]}, data.eval_resize={v[2]} (resize {v[1]}) "
                f"and member {str(first)!r} at data.image_size={ref[0]}, data.eval_resize={ref[2]} (resize {ref[1]}): "
                "an ensemble averages predictions of one view of the same images; evaluate the members at one view "
                "(harness ensemble --from-checkpoints --eval-data FILE, whose data section sets image_size and "
                "eval_resize), or give members evaluated alike"
            )


def build_ensemble(
    members: Sequence["str | Path"],
    out: "str | Path",
    from_checkpoints: bool = False,
    repredict: Optional[Callable[[Path], Predictions]] = None,
    overwrite: bool = False,
    data: Optional[str] = None,
    eval_data: "Optional[DataConfig]" = None,
    device: str = "cpu",
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
        data: the description of other data ``repredict`` evaluates on, recorded in ``ensemble.json``; default:
            the first member's recorded evaluation data. Given, the members' held-out predictions and shift sets (of
            their own data) are left out (``ensemble.json``'s ``left_out`` says so: audit18 A18-08).
        eval_data: other data to re-predict every member on (``harness ensemble --eval-data``; with
            ``from_checkpoints``, without ``repredict``, on ``device``): its evaluation split, and its held-out split
            (where it names one) for the held-out predictions (:func:`eval_predictors`); recorded in ``ensemble.json``
            (``data``, ``heldout_data``, ``data_config``, its ``path`` made absolute:
            :func:`harness.data.splits.absolute_path`, so a reader from another working folder reads the same folder,
            audit23 A23-11).

    Raises:
        ValueError: fewer than 2 members; a member given twice, two members with identical predictions or the same
            weights (:func:`harness.model_identity.check_distinct_weights`); without ``eval_data``, members evaluated
            at other views (:func:`check_same_view`); members (or their held-out predictions) that differ in label space, link or
            evaluation data; ``from_checkpoints`` without ``repredict`` or ``eval_data``; an ``out`` that is a run folder, holds
            files another writer made or the ensemble of other members or settings (:func:`check_ensemble_out`), or
            cannot be written; another harness ensemble writing ``out`` (naming its PID and command); a member's
            metrics.json that is not a JSON object; ``eval_data`` without ``from_checkpoints`` or beside
            ``repredict``, or whose evaluation or held-out split a member was trained on (:func:`eval_predictors`);
            with ``from_checkpoints``, a member whose ``model.pt`` is not the model its run measured
            (:func:`harness.checkpoint_files.check_run_model`); without, a member whose saved predictions are not those
            its metrics.json measured (:func:`harness.checkpoint_files.check_run_predictions`).
        FileNotFoundError: a member is not a finished run folder.
    """
    members = [Path(m) for m in members]
    if len(members) < 2:
        raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}; give two or more run folders")
    if from_checkpoints and repredict is None and eval_data is None:
        raise ValueError("from_checkpoints=True needs repredict(run_dir) -> Predictions")
    check_distinct_folders(members, "member", _ONCE, predictions=from_checkpoints)  # saved ones: checked once read
    check_distinct_weights(members, "member", _ONCE)
    for m in members:  # the member's own model (audit21 A21-16), or its own saved predictions (audit26 A26-05)
        if from_checkpoints:
            check_run_model(m)
        else:
            check_run_predictions(m)
    if eval_data is None:  # each member scored at its own view; --eval-data scores every one at its own
        check_same_view(members)
    out = Path(out)
    if any(out.resolve() == m.resolve() for m in members):
        raise ValueError(
            f"the ensemble folder {str(out)!r} is one of the members: writing there would replace the "
            "member's predictions; choose another --out"
        )
    heldout, left_out, extra = None, {}, {}
    if eval_data is not None:
        if not from_checkpoints or repredict is not None:
            raise ValueError("eval_data goes with from_checkpoints=True and without repredict (it makes its own)")
        check_ensemble_out(out, overwrite)  # before the data is read
        repredict, heldout, data, held_data = eval_predictors(members, eval_data, device)
        recorded = replace(eval_data, path=absolute_path(eval_data.source, eval_data.path))  # any folder (A23-11)
        extra = {"heldout_data": held_data, "data_config": json.loads(json.dumps(asdict(recorded), default=str))}
    if data is not None:  # other data than the members': their held-out predictions and shift sets are not of it
        left_out["shift"] = (
            "the members' shift sets (harness shift) are of their own data, not of this ensemble's evaluation data: "
            "not averaged"
        )
        if heldout is None:
            left_out["heldout"] = "the members' held-out predictions are of their own data: not carried over"
    data = data if data is not None else run_summary(members[0]).get("eval_data", "")
    settings = {"from_checkpoints": from_checkpoints, "data": data, **extra}
    check_ensemble_out(out, overwrite, members, settings)  # before the lock (which makes the folder) is taken
    check_writable(out, f"--out {out}", "--out ...")
    made = not out.exists()
    busy = f"another harness ensemble is being written there; wait for it to finish, or choose another --out than {out}"
    try:
        with RunLock(out, what=busy):
            check_ensemble_out(out, overwrite, members, settings)  # again: another ensemble may have finished since
            return _build(members, out, from_checkpoints, repredict, data, heldout, {**extra, "left_out": left_out})
    except BaseException:
        if made and out.is_dir() and _lock_only(out):  # a folder only the lock made: removed again
            for p in out.iterdir():
                p.unlink(missing_ok=True)
            out.rmdir()
        raise


def _build(
    members: "list[Path]", out: Path, from_checkpoints: bool, repredict, data: str, heldout, record: dict
) -> dict:
    """:func:`build_ensemble`'s reading, checking and writing, while it holds ``out``'s lock: the held-out predictions
    by ``heldout(run_dir)`` when given, else the members' saved ones unless ``record['left_out']`` leaves them out;
    ``record`` is added to ``ensemble.json``."""
    methods = sorted({run_method(m) for m in members})  # every member is a run folder, before any re-prediction
    preds = [repredict(m) if from_checkpoints else Predictions.load(m) for m in members]
    check_compatible(preds)
    check_distinct_predictions(preds, "member", _ONCE)
    keep = heldout is not None or "heldout" not in record["left_out"]
    held = [(heldout(m) if heldout is not None else load_heldout(m)) for m in members] if keep else [None]
    held = held if all(h is not None for h in held) else None
    if held is not None:
        check_compatible([replace(h, source=f"{h.source} (held-out)") for h in held])
    summary = summarize(preds)
    spec = {
        "schema": "harness.ensemble/1",
        "method": "+".join(methods),
        "members": [str(m.resolve()) for m in members],
        "member_weights": member_weights(members),  # a member trained again is another ensemble (audit24 A24-05)
        "from_checkpoints": from_checkpoints,
        "data": data,
        **record,
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


def eval_predictors(members: "Sequence[str | Path]", data: "DataConfig", device: str = "cpu") -> tuple:
    """``(repredict, heldout, description, heldout description)`` for an ensemble re-predicted on other ``data``
    (``harness ensemble --from-checkpoints --eval-data``): ``repredict(run_dir)`` and ``heldout(run_dir)`` (None without
    ``data.heldout_split``) load the member's ``model.pt`` and predict ``data``'s evaluation and held-out splits, each
    split read once here (a packed split streamed once per model: :func:`harness.run_streams.read_split`). Checked
    before any split is read: the device, and that ``data``'s held-out split is not its evaluation split, nor either
    the split a member was trained on (:func:`harness.model_identity.check_not_trained_on`, audit18 A18-12).

    Raises:
        ValueError: a device this machine cannot run on; one of those splits. FileNotFoundError: missing data, or a
            member that is not a run folder.
    """
    from harness.data.config import check_splits
    from harness.model_identity import check_not_trained_on
    from harness.run_streams import read_split
    from harness.runs import predict_checkpoint
    from harness.training.precision import check_device

    check_device(device)
    check_splits(data, training=False)
    for m in members:
        trained, whence = _trained_on(m)
        check_not_trained_on(trained, data, f"member {m}", whence)
    base = read_split(data, data.eval_split)
    held = read_split(data, data.heldout_split) if data.heldout_split else None

    def repredict(run_dir):
        return predict_checkpoint(run_dir, data, device=device, base=base)

    def heldout(run_dir):
        return predict_checkpoint(run_dir, data, data.heldout_split, device=device, base=held)

    return repredict, heldout if held is not None else None, base.description, held.description if held else None


def _trained_on(run_dir: "str | Path") -> "tuple[Optional[dict], str]":
    """``(data, whence)``: the data a member's model was trained on (:func:`harness.importing.trained_data`): an
    imported run's recorded ``trained_on`` (the model's own, None when unknown; the data of the run whose model.pt it
    imported where that still holds the same weights), another run's ``data`` section (its ``config.yaml``, with the
    defaults of the keys it leaves out)."""
    from harness.importing import trained_data
    from harness.runs import data_config, run_config

    cfg = run_config(run_dir)
    if "imported" not in cfg:  # data.path as the run read it (audit22 A22-02)
        return asdict(data_config(run_dir)), "as it records"
    return trained_data(Path(run_dir) / "model.pt", cfg.get("trained_on") or None)


def data_folders(folders: "Sequence[str | Path]", eval_data: "Optional[DataConfig]" = None) -> "dict[Path, str]":
    """The split folders (an image folder's, a pack's: :func:`harness.data.splits.read_folders`, resolved) that the
    runs or ensembles ``folders`` read (each one's data section, :func:`harness.runs.data_config`: its training,
    evaluation and held-out splits) and ``eval_data`` (``harness ensemble --eval-data``: its evaluation and held-out
    splits) -> how a message names each, as :func:`harness.folder_paths.check_outside_outputs`' ``inputs`` of a writer
    that reads them (``harness ensemble --out``, ``harness report --out-root``): an output folder inside one would
    become a class folder of it (audit23 A23-07). A folder whose data section cannot be read adds none (its own check
    names it)."""
    from harness.data.splits import read_folders
    from harness.runs import data_config

    found: "dict[Path, str]" = {}
    if eval_data is not None:
        for where, how in read_folders(
            eval_data.source, eval_data.path, (eval_data.eval_split, eval_data.heldout_split)
        ).items():
            found.setdefault(where, f"{how[:-1]}, of --eval-data)")
    for f in folders:
        try:
            d = data_config(f)
        except Exception:  # noqa: BLE001 - any unreadable section (bad YAML too): the folder's own reader names it
            continue
        for where, how in read_folders(d.source, d.path, (d.train_split, d.eval_split, d.heldout_split)).items():
            found.setdefault(where, f"{how[:-1]}, read by {f})")
    return found
