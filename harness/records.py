"""Compact records of finished runs (``records: true`` in an experiment): written beside the report to be committed,
verified before a run folder is recreated from one.

A record is a folder holding a finished run's :data:`RECORD_FILES` (predictions recompressed, no checkpoints) and,
last, :data:`HASHES_FILE`: the SHA-256 of each of them. Its ``config.yaml`` names the run folder relatively (its
``output_dir`` is the folder's name), so a record restores into any ``runs_root``; restoring sets it to the folder
it is restored into.

Before a record is used (:func:`verify_record`): it must hold its hashes, covering every file it holds, every file must
match the hash written with it, and the metrics recomputed from its predictions (and held-out predictions) must equal
those of its ``metrics.json``. A record without hashes (written before they existed; every committed record was
migrated on 2026-11-27) is refused, with the command that records it again from its finished run.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Dict, Optional

import numpy as np

from harness.io import atomic_write_bytes, atomic_write_text, quote, read_json
from harness.rules import setting

#: what a finished run's compact record keeps: enough to report on it and to count it as done (no
#: checkpoints; the final model.pt is kept because the covariance analysis and shift predictions need it)
RECORD_FILES = ("config.yaml", "run.json", "metrics.json", "predictions.npz", "heldout_predictions.npz", "model.pt")
#: the record's hashes, written last: ``{"format": HASHES_FORMAT, "files": {name: sha256}}``
HASHES_FILE = "record.json"
HASHES_FORMAT = "harness.record/1"
#: metrics recomputed from a record's predictions must equal its metrics.json's to this relative tolerance
#: (measured: at most 3e-15 over the 54 cifar10n records)
METRICS_RTOL = 1e-9


@dataclass
class RecordHashes:
    """The schema of a record's :data:`HASHES_FILE`: its format and the SHA-256 (64 hex digits) of each of its
    files, every name one of :data:`RECORD_FILES`, ``predictions.npz`` among them."""

    format: str = setting(HASHES_FORMAT, choices=(HASHES_FORMAT,))
    files: Dict[str, str] = field(default_factory=dict)

    def check(self) -> "RecordHashes":
        """Raises ValueError: a rule broken (the message names the key and the value)."""
        from harness.rules import check_rules

        check_rules(self)
        if not isinstance(self.files, dict) or "predictions.npz" not in self.files:
            raise ValueError(f"files must name predictions.npz, got {quote(str(self.files), 80)}")
        for name, digest in self.files.items():
            if name not in RECORD_FILES:
                raise ValueError(f"files names {quote(repr(name), 40)}: a record holds only {', '.join(RECORD_FILES)}")
            if not (isinstance(digest, str) and re.fullmatch("[0-9a-f]{64}", digest)):
                raise ValueError(f"files.{name} must be a SHA-256 of 64 hex digits, got {quote(repr(digest), 80)}")
        return self


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _with_output_dir(config_text: str, output_dir: str) -> str:
    """A run's ``config.yaml`` text with its ``output_dir`` set (the text as it was when it already says that)."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(config_text)
    if cfg.get("output_dir") == output_dir:
        return config_text
    cfg.output_dir = output_dir
    return OmegaConf.to_yaml(cfg)


def _write_hashes(record: Path) -> None:
    hashes = RecordHashes(files={n: _sha256(record / n) for n in RECORD_FILES if (record / n).is_file()}).check()
    atomic_write_text(record / HASHES_FILE, json.dumps(asdict(hashes), indent=1) + "\n")


def save_record(run_dir: "str | Path", dest: "str | Path") -> bool:
    """Copy a finished run's :data:`RECORD_FILES` to ``dest`` (predictions recompressed with ``np.savez_compressed``,
    ``config.yaml``'s ``output_dir`` made the folder's name), atomically file by file, ``metrics.json`` and then the
    hashes last. A record with its hashes whose ``metrics.json`` is already identical is left alone; one without
    hashes is written again from the run. Returns whether the record was (re)written (False also for an unfinished
    run)."""
    run_dir, dest = Path(run_dir), Path(dest)
    if not ((run_dir / "metrics.json").is_file() and (run_dir / "model.pt").is_file()):
        return False
    recorded, finished = dest / "metrics.json", run_dir / "metrics.json"
    if (
        recorded.is_file()
        and recorded.read_bytes() == finished.read_bytes()
        and read_json(dest / HASHES_FILE) is not None
    ):
        return False
    dest.mkdir(parents=True, exist_ok=True)
    (dest / HASHES_FILE).unlink(missing_ok=True)
    for name in RECORD_FILES:
        src = run_dir / name
        if not src.is_file():
            (dest / name).unlink(missing_ok=True)
            continue
        if name.endswith(".npz"):
            buf = io.BytesIO()
            with np.load(src, allow_pickle=False) as z:
                np.savez_compressed(buf, **{k: z[k] for k in z.files})
            atomic_write_bytes(dest / name, buf.getvalue())
        elif name == "config.yaml":
            atomic_write_text(dest / name, _with_output_dir(src.read_text(), run_dir.name))
        elif name != "metrics.json":
            atomic_write_bytes(dest / name, src.read_bytes())
    atomic_write_bytes(dest / "metrics.json", (run_dir / "metrics.json").read_bytes())  # marks it complete
    _write_hashes(dest)
    return True


def _refuse(record: Path, what: str) -> ValueError:
    return ValueError(
        f"record {record}: {what}; restore the record from version control (e.g. git checkout -- "
        f"{record}), or delete that record folder to train the run again"
    )


def metrics_mismatch(file: Path, stored: object, where: str) -> Optional[str]:
    """What differs between the metrics recomputed from the predictions ``file`` and those ``stored`` records
    (``{metric: value}``; those present and finite, to :data:`METRICS_RTOL`; ``where`` names the record in the
    answer): the one rule for "a result file is the one its record measured" (a record before it is restored,
    :func:`verify_record`; a run folder's predictions before they are reported, ensembled or exported,
    :func:`harness.checkpoint_files.check_run_predictions`; a sweep's recorded fine-tune before it is reused,
    :func:`check_recorded_predictions`). None: they agree, or there is nothing to compare (no file, no metrics).

    Raises:
        ValueError: the file cannot be read (the message says it is damaged).
    """
    from harness.uncertainty.predictions import Predictions

    if not Path(file).is_file() or not isinstance(stored, dict):
        return None
    try:
        recomputed = Predictions.load(file).metrics()
    except (ValueError, OSError) as e:
        raise ValueError(f"{Path(file).name} cannot be read ({type(e).__name__}): it is damaged") from None
    for name, value in stored.items():
        if (
            isinstance(value, (int, float))
            and math.isfinite(value)
            and name in recomputed
            and not math.isclose(recomputed[name], value, rel_tol=METRICS_RTOL, abs_tol=1e-12)
        ):
            return f"{name} recomputed from {Path(file).name} is {recomputed[name]:.6g} but {where} says {value:.6g}"
    return None


def check_recorded_predictions(file: "str | Path", record: dict, where: str, fix: str) -> None:
    """A sweep's fine-tune record (a ``runs.jsonl`` line: ``accuracy``, ``nll``) measured the predictions ``file`` it
    saved (:func:`metrics_mismatch`; audit26 A26-15: a hand-edited accuracy became vtab.md's headline number while
    the table of its predictions said otherwise). A record without them, or no file, passes.

    Raises:
        ValueError: naming ``where``, the file, the metric, both values and ``fix``.
    """
    stored = {"top1": record.get("accuracy"), "nll": record.get("nll")}
    try:
        differ = metrics_mismatch(Path(file), stored, "the record")
    except ValueError as e:
        raise ValueError(f"{file}: {e}; {fix}") from None
    if differ:
        raise ValueError(f"{where} is not what its predictions {file} measured: {differ}; {fix}")


def _check_metrics(record: Path, predictions: str, key: str, metrics: dict) -> None:
    """The metrics recomputed from ``record/predictions`` equal ``metrics[key]`` (:func:`metrics_mismatch`)."""
    try:
        differ = metrics_mismatch(record / predictions, metrics.get(key), f"its metrics.json ({key})")
    except ValueError as e:
        raise _refuse(record, str(e)) from None
    if differ:
        raise _refuse(record, f"{differ}: the predictions were changed or damaged")


def verify_record(record: "str | Path") -> bool:
    """Check a record before it is used: its hashes cover every file it holds, each file matches its hash, and the
    metrics recomputed from its predictions equal its ``metrics.json``. Returns True.

    Raises:
        ValueError: no hashes (with the command that records the run again), a file missing, unhashed, changed or
            damaged, or metrics that do not match (names the record, the file and the fix).
    """
    record = Path(record)
    metrics = read_json(record / "metrics.json")
    if metrics is None:
        raise _refuse(record, "metrics.json is missing or not JSON")
    hashes = read_json(record / HASHES_FILE)
    if hashes is None and (record / HASHES_FILE).is_file():
        raise _refuse(record, f"{HASHES_FILE} is not valid JSON (cut short or edited)")
    if hashes is None:
        raise ValueError(
            f"record {record}: {HASHES_FILE} is missing, so its files cannot be checked (a record without "
            "hashes is never used): record the run again from its finished run folder (harness run "
            "EXPERIMENT --sync-records, with the run in runs/), restore the record from version control, "
            "or delete the record folder to train the run again"
        )
    try:
        files = RecordHashes(**hashes).check().files
    except (TypeError, ValueError) as e:
        raise _refuse(record, f"{HASHES_FILE} is not a record's hash list ({quote(str(e), 200)})") from None
    unhashed = [n for n in RECORD_FILES if (record / n).is_file() and n not in files]
    if unhashed:
        raise _refuse(record, f"{', '.join(unhashed)} not in {HASHES_FILE}: a file the record holds must be hashed")
    for name, digest in files.items():
        if name not in RECORD_FILES or not (record / name).is_file() or _sha256(record / name) != digest:
            raise _refuse(
                record,
                f"{quote(str(name), 40)} does not match the SHA-256 written with the record: it "
                "was changed or damaged after the record was saved",
            )
    _check_metrics(record, "predictions.npz", "metrics", metrics)
    _check_metrics(record, "heldout_predictions.npz", "heldout_metrics", metrics)
    return True


def restore_record(
    record: "str | Path",
    run_dir: "str | Path",
    expected: Optional[str] = None,
    same: Optional[Callable[[str, str], bool]] = None,
) -> bool:
    """Recreate a finished run folder from its record (:func:`save_record`) when the folder holds no finished run;
    returns whether it did. The record is verified first (:func:`verify_record`), its ``config.yaml`` takes ``run_dir`` as ``output_dir``, and the run then counts as done
    (``harness.upstream.train``).

    Args:
        expected: the ``config.yaml`` text the experiment plans for ``run_dir`` (None: not compared).

    Raises:
        ValueError: a record that does not verify, or whose config is not ``expected`` (before anything is written).
    """
    record, run_dir = Path(record), Path(run_dir)
    if (run_dir / "metrics.json").is_file() or not (record / "metrics.json").is_file():
        return False
    verify_record(record)
    config = _with_output_dir((record / "config.yaml").read_text(), str(run_dir))
    if expected is not None:  # same(saved, planned): the caller's rule (the stage that writes the configs knows it)
        if not (same or (lambda a, b: a == b))(config, expected):
            diff = "".join(
                difflib.unified_diff(config.splitlines(True), expected.splitlines(True), "record", "planned", n=0)
            )
            raise ValueError(
                f"record {record} holds a run of another config than this experiment plans for "
                f"{run_dir.name}:\n{quote(diff, 1500)}\nmove that record folder away (the run then trains "
                "again), or set the experiment back to the settings it was recorded with"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in RECORD_FILES:
        if (record / name).is_file() and name not in ("metrics.json", "config.yaml"):
            atomic_write_bytes(run_dir / name, (record / name).read_bytes())
    atomic_write_text(run_dir / "config.yaml", config)
    atomic_write_bytes(run_dir / "metrics.json", (record / "metrics.json").read_bytes())
    return True
