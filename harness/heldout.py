"""A run's held-out split (``data.heldout_split``) against what its folder holds: the record a run keeps of the split
it was evaluated on (``metrics.json``'s ``heldout_labels``, :func:`heldout_record`), and the rules by which the readers
of its ``heldout_predictions.npz`` (:func:`harness.runs.load_heldout`, :func:`harness.runs.clean_heldout`: harness
report's calibration, temperature-scaling and per-class sections, harness ensemble, an experiment's verdicts) refuse a
held-out split changed since the run, with or without label noise (audit25 A25-03; audit24 A24-12 for stored labels),
a missing ``heldout_predictions.npz`` of a run that wrote one (A25-04), and a held-out folder that is gone (A25-13).

Layering: :mod:`harness.data`, :mod:`harness.io`, :mod:`harness.checkpoint_files` <- this module <- :mod:`harness.runs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from harness.checkpoint_files import rewrite_predictions
from harness.io import read_json

#: a run's (or an ensemble's) predictions on its held-out split
HELDOUT_FILE = "heldout_predictions.npz"
#: the key of ``metrics.json`` that records the held-out split the run was evaluated on (:func:`heldout_record`)
RECORD_KEY = "heldout_labels"


def heldout_record(split: Optional[str], ds: Any) -> Optional[dict]:
    """What a run's ``metrics.json`` records (:data:`RECORD_KEY`) of the held-out split ``split`` it was evaluated on,
    ``ds`` as the run read it (its label set, before the synthetic label noise drawn on it): ``{"split", "examples",
    "labels_sha256"}`` (:meth:`harness.data.dataset.ImageDataset.labels_sha256`). None without a split, or for a split
    read as a shard stream (a pack's index records its shards' label digests itself)."""
    if not split or ds is None or not hasattr(ds, "labels_sha256"):
        return None
    return {"split": split, "examples": int(len(ds)), "labels_sha256": ds.labels_sha256()}


def _where(data: Any) -> str:
    """``data.heldout_split=val of image_folder at data.path=imf (/abs/imf/val)``: how a message names the split."""
    from harness.data.splits import split_location

    at = split_location(data.source, data.path, data.heldout_split)
    path = f" at data.path={data.path}" if data.path else ""
    return f"data.heldout_split={data.heldout_split} of {data.source}{path}{f' ({at})' if at else ''}"


def _recorded_in(run_dir: "str | Path") -> Optional[Path]:
    """The run folder whose ``metrics.json`` records ``run_dir``'s held-out split: the run's own; an ensemble's first
    member's (its held-out predictions average the members' saved ones); None for an ensemble re-predicted on
    ``--eval-data`` (its held-out split is that data's, which no run recorded)."""
    spec = read_json(Path(run_dir) / "ensemble.json")
    if not isinstance(spec, dict) or not spec.get("members"):
        return Path(run_dir)
    return None if spec.get("data_config") else Path(spec["members"][0])


def check_heldout_record(run_dir: "str | Path", data: Any, ds: Any) -> None:
    """The held-out split ``ds`` (``data.heldout_split`` of ``data`` read now, its label set, no synthetic noise) is
    the one the run recorded when it wrote its held-out predictions (:func:`heldout_record`): the same number of
    examples and the same labels in the same order, whatever the run's label noise (audit25 A25-03: with noise the
    stored labels differ from the folder's anyway, so a changed folder passed as noise). A run that recorded none
    (written before the record, or an ensemble on ``--eval-data``) passes.

    Raises:
        ValueError: naming the run, the split (key, source, folder), what it held then and now, and the fixes.
    """
    folder = _recorded_in(run_dir)
    recorded = (read_json(folder / "metrics.json") or {}).get(RECORD_KEY) if folder is not None else None
    now = heldout_record(data.heldout_split, ds)
    if not isinstance(recorded, dict) or now is None or recorded.get("split") != data.heldout_split:
        return
    if (recorded.get("examples"), recorded.get("labels_sha256")) == (now["examples"], now["labels_sha256"]):
        return
    raise ValueError(
        f"the held-out split of {run_dir} ({_where(data)}) changed since the run was evaluated on it: it held "
        f"{recorded.get('examples')} examples, labels digest {str(recorded.get('labels_sha256'))[:12]}... then (as "
        f"{folder / 'metrics.json'} records it: {RECORD_KEY}) and holds {now['examples']} examples, labels digest "
        f"{now['labels_sha256'][:12]}... now: the report's calibration and temperature-scaling sections would score "
        f"its {HELDOUT_FILE} against other labels (with label noise, the change would read as noise); restore the "
        f"held-out data as it was, or evaluate the run on it as it is now: {rewrite_predictions(folder)}"
    )


def check_stored_labels(run_dir: "str | Path", data: Any, preds: Any, clean: np.ndarray) -> None:
    """The examples of ``run_dir``'s held-out predictions ``preds`` are in the clean split read now (``clean``: its
    labels), and, for a run whose data has no label noise (clean labels, no synthetic noise, single labels), the
    labels they stored are those (audit24 A24-12; a run with noise, or that stored other labels, is compared by its
    :func:`heldout_record`).

    Raises:
        ValueError: examples past the split (other data); labels that differ, naming their count, the run, the split
            and the fixes.
    """
    if preds.index.max(initial=-1) >= len(clean):
        raise ValueError(
            f"held-out predictions of {run_dir} index past the clean split ({len(clean)} examples): "
            "they were made on other data"
        )
    noise = (data.label_noise or {}).get("kind", "none")
    if data.label_set != "clean" or noise != "none" or data.multilabel:
        return
    differ = int(np.sum(clean[preds.index] != np.asarray(preds.targets)))
    if differ:  # no noise, so the stored labels are the clean ones: the folder changed
        raise ValueError(
            f"{differ} of {len(preds.index)} held-out labels of {run_dir} (its {HELDOUT_FILE}, as the run "
            f"stored them) differ from those its held-out split ({data.heldout_split} of {data.source}"
            f"{f' at {data.path}' if data.path else ''}) holds now, and the run's data has no label noise: the data "
            "changed since the run was evaluated, and the difference is no label noise; restore the data, or "
            f"evaluate the run again on it: {rewrite_predictions(_recorded_in(run_dir) or run_dir)}"
        )


def read_heldout_split(run_dir: "str | Path", data: Any, read: Callable[[], Any]) -> Any:
    """``read()``, the reading of ``run_dir``'s held-out split (``data``'s ``data.heldout_split``), with a folder that
    is gone named as the run's (audit25 A25-13: the reader's message named neither the run nor a fix).

    Raises:
        FileNotFoundError: naming the run, the key and folder, the reader's message and the fixes (put the data back;
            a project that moved with its data: :mod:`harness.moved_data`).
    """
    from harness.moved_data import ACCEPT

    try:
        return read()
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"the held-out split of {run_dir} ({_where(data)}, as the run's data section sets them) cannot be read "
            f"({e}): its {HELDOUT_FILE} is scored against that split's labels (the report's calibration, "
            "temperature-scaling and per-class held-out sections); put the held-out data back where data.path and "
            f"data.heldout_split name it, or, if the project moved with its data, record its new place ({ACCEPT} "
            f"{run_dir}, from the folder its data.path is relative to)"
        ) from e


def expects_heldout(folder: "str | Path") -> bool:
    """Whether a run or ensemble folder wrote a :data:`HELDOUT_FILE`: a run whose ``metrics.json`` records held-out
    metrics (one that records none: whose ``config.yaml`` sets ``data.heldout_split``); an ensemble on ``--eval-data``
    with a held-out split; another ensemble whose members' held-out predictions it did not leave out, by its first
    member's record."""
    import yaml

    folder = Path(folder)
    spec = read_json(folder / "ensemble.json")
    if isinstance(spec, dict) and spec.get("members"):
        if "heldout" in (spec.get("left_out") or {}):
            return False
        if isinstance(spec.get("data_config"), dict):
            return bool(spec["data_config"].get("heldout_split"))
        folder = Path(spec["members"][0])
    metrics = read_json(folder / "metrics.json") or {}
    if "heldout_metrics" in metrics:
        return metrics["heldout_metrics"] is not None
    try:
        cfg = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
        return bool((cfg.get("data") or {}).get("heldout_split"))
    except (OSError, ValueError, AttributeError, yaml.YAMLError):  # its own readers name a damaged config
        return False


def check_heldout_file(folder: "str | Path") -> None:
    """A run (or ensemble) folder that wrote a :data:`HELDOUT_FILE` (:func:`expects_heldout`) still holds it; only
    one without a held-out split lacks it (audit25 A25-04: a missing file silently dropped the report's held-out
    sections and harness ensemble's held-out predictions).

    Raises:
        FileNotFoundError: naming the folder, the file, why it is expected and the fix (write it again: an upstream
            run from its model.pt, :func:`harness.checkpoint_files.rewrite_predictions`; an ensemble built again).
    """
    folder = Path(folder)
    if (folder / HELDOUT_FILE).is_file() or not expects_heldout(folder):
        return
    spec = read_json(folder / "ensemble.json")
    if isinstance(spec, dict) and spec.get("members"):
        members = " ".join(f"-m {m}" for m in spec["members"])
        fix = (
            f"build the ensemble again (harness ensemble {members} --out {folder} --overwrite, with the options it was "
            "built with), each member holding its own"
        )
        why = "an ensemble of members with a held-out split"
    else:
        fix = f"restore the file, or {rewrite_predictions(folder)}"
        why = "a run evaluated on a held-out split (data.heldout_split; its metrics.json records heldout_metrics)"
    raise FileNotFoundError(
        f"{folder / HELDOUT_FILE} is missing, and {folder} is {why}: the report's calibration, temperature-scaling and "
        f"per-class held-out sections, harness ensemble and an experiment's held-out verdicts read it, and would "
        f"leave it out without a word; {fix}"
    )
