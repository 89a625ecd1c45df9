"""The saved shift sets of a run or ensemble folder: ``<folder>/shift/<set>/predictions.npz`` and ``mc.npz``,
and ``<folder>/shift/shift.json`` (settings, and which sets are done)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from harness.io import path_under, read_json


def save_set(folder: Path, preds: Any, mean_entropy: Optional[np.ndarray]) -> None:
    import io

    from harness.io import atomic_write_bytes

    if mean_entropy is not None:
        buf = io.BytesIO()
        np.savez(buf, index=preds.index, mean_entropy=mean_entropy.astype(np.float64))
        atomic_write_bytes(folder / "mc.npz", buf.getvalue())
    elif (folder / "mc.npz").is_file():
        (folder / "mc.npz").unlink()
    preds.save(folder / "predictions.npz")


def load_set(folder: "str | Path") -> "tuple[Any, Optional[np.ndarray]]":
    """One saved set: its :class:`~harness.uncertainty.predictions.Predictions` and the components' mean entropy
    ``[N]`` (None for a model without noise).

    Raises:
        FileNotFoundError: no predictions in ``folder``.
    """
    from harness.uncertainty.predictions import Predictions

    folder = Path(folder)
    preds = Predictions.load(folder)
    ent = None
    if (folder / "mc.npz").is_file():
        with np.load(folder / "mc.npz", allow_pickle=False) as z:
            order = np.argsort(z["index"], kind="stable")
            ent = z["mean_entropy"][order]
    return preds, ent


def load_sets(folder: "str | Path") -> "Optional[tuple[dict, dict]]":
    """The ``shift.json`` of a run or ensemble folder and its sets ``{name: (predictions, mean
    entropy)}`` in the recorded order; None if the folder has no shift predictions, or an ensemble folder's
    sets were averaged over other members than its ``ensemble.json`` lists (a rebuilt ensemble), or over other
    weights of them (its ``member_weights``, where ``ensemble.json`` records them: an ensemble rebuilt with
    ``--overwrite`` after a member was trained again, audit24 A24-05)."""
    from harness.runs import ensemble_spec

    spec = read_json(Path(folder) / "shift" / "shift.json")
    if spec is None:
        return None
    ens = ensemble_spec(folder)
    if ens is not None and [str(m) for m in ens.get("members", [])] != [str(m) for m in spec.get("members", [])]:
        return None
    if ens is not None and ens.get("member_weights") and ens["member_weights"] != spec.get("member_weights"):
        return None
    names = [n for n in spec.get("order", spec["sets"]) if n in spec["sets"]]
    return spec, {n: load_set(Path(folder) / "shift" / n) for n in names}


def clear_sets(folder: "str | Path", names: "Sequence[str]") -> None:
    """Remove the files of the sets ``names`` written in ``<folder>/shift/`` (their ``predictions.npz`` and
    ``mc.npz``, then each emptied set folder) and ``shift.json``; anything else there is left alone.

    Raises:
        ValueError: a name (read from ``shift.json``) that is no plain name or leads out of ``<folder>/shift``
            (``../../other_run``), checked for every name before anything is removed.
    """
    out = Path(folder) / "shift"
    try:
        sets = [path_under(out, name) for name in names]
    except ValueError as e:
        raise ValueError(
            f"{out / 'shift.json'} names a set that is not a folder of {out} ({e}); the file was edited by hand or "
            "is damaged: nothing was removed; move it away and run the same command again"
        ) from e
    for folder_of_set in sets:
        for f in ("predictions.npz", "mc.npz"):
            (folder_of_set / f).unlink(missing_ok=True)
        if folder_of_set.is_dir() and not any(folder_of_set.iterdir()):
            folder_of_set.rmdir()
    (out / "shift.json").unlink(missing_ok=True)
