"""The post-hoc calibrators' section of ``harness report --calibrators``: each calibrator of
:mod:`harness.uncertainty.calibrators` fitted on an entry's held-out predictions and applied to its evaluation
predictions, and the NLL and ECE differences (calibrated − uncalibrated) with the intervals every comparison of the
harness uses (:func:`harness.uncertainty.compare.method_level`): per run and per ensemble with the model fixed (one
seed: images only), and per method over its seeds (seeds and images) where a method has two or more single runs.
Numbers come from :mod:`harness.uncertainty`; this module gathers and lays them out."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from harness.report.render import fmt
from harness.uncertainty.calibrators import CALIBRATORS, EPS, calibrate, check_names
from harness.uncertainty.compare import method_level
from harness.uncertainty.predictions import Predictions

KEYS = ("nll", "ece")
#: the metrics recorded before and after each calibrator
SHOWN = ("top1", "nll", "ece", "brier")
HEADER = [
    "entry",
    "calibrator",
    "top-1 before",
    "top-1 after",
    "NLL before",
    "NLL after",
    "Δ NLL (95% interval)",
    "ECE before",
    "ECE after",
    "Δ ECE (95% interval)",
]


def check(names: "str | Sequence[str]", entries: Sequence[Any]) -> "list[str]":
    """The calibrator names (:func:`harness.uncertainty.calibrators.check_names`), checked against the entries before
    any work.

    Raises:
        ValueError: an unknown name, netcal missing, multi-label entries, or no entry with held-out predictions (the
            calibrators are fitted on them: they would apply to nothing).
    """
    names = check_names(names)
    if names and any(e.preds.multilabel for e in entries):
        raise ValueError(
            "--calibrators: the entries are multi-label (sigmoid link); the calibrators take single-label "
            "predictions (the report's temperature scaling covers multi-label runs)"
        )
    if names and entries and all(e.heldout is None for e in entries):
        shown = ", ".join(e.label for e in entries[:5]) + (f" and {len(entries) - 5} more" if len(entries) > 5 else "")
        raise ValueError(
            f"--calibrators {','.join(names)}: the calibrators are fitted on each entry's held-out predictions "
            f"(heldout_predictions.npz), and no entry has them ({shown}), so none would be calibrated: train the runs "
            "with a held-out split (data.heldout_split=val for digits), or leave out --calibrators"
        )
    return names


def _interval(r: dict) -> dict:
    keep = ("mean", "lo", "hi", "se", "df", "p", "verdict", "method", "n_seeds")
    return {k: r.get(k) for k in keep}


def _metrics(p: Predictions) -> dict:
    m = p.metrics()
    return {k: m[k] for k in SHOWN}


def _rows(label: str, kind: str, name: str, before: list, after: list) -> dict:
    """One row: the metrics (averaged over the models) and the intervals of after − before."""
    r = method_level(after, before, keys=KEYS)
    mean = lambda ps: {k: sum(m[k] for m in ps) / len(ps) for k in SHOWN}  # noqa: E731
    return {
        "entry": label,
        "kind": kind,
        "calibrator": name,
        "calibrated": [p.source for p in after],
        "before": mean([_metrics(p) for p in before]),
        "after": mean([_metrics(p) for p in after]),
        "difference": {k: _interval(r[k]) for k in KEYS},
    }


def _cell(d: dict) -> str:
    return f"{d['mean']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}] {d['verdict']}"


def table(rows: "list[dict]") -> "tuple[str, list[str], list[list[str]]]":
    """(title, header, rows) of the section's table."""
    body = [
        [r["entry"], r["calibrator"]]
        + [fmt(r[w]["top1"], True) for w in ("before", "after")]
        + [fmt(r["before"]["nll"]), fmt(r["after"]["nll"]), _cell(r["difference"]["nll"])]
        + [fmt(r["before"]["ece"]), fmt(r["after"]["ece"]), _cell(r["difference"]["ece"])]
        for r in rows
    ]
    title = (
        "Post-hoc calibrators fitted on the held-out split, applied to the evaluation split: Δ = calibrated − "
        "uncalibrated with its 95% interval (per run or ensemble: the model fixed, images resampled; per method: "
        "its seeds and the images, harness.uncertainty.compare.method_level)"
    )
    return title, HEADER, body


def text(names: "list[str]", skipped: "list[str]") -> "list[str]":
    """The sentences that go with the table: the multiclass rule, the NLL floor, and which entries had no held-out
    split."""
    ovr = [n for n in names if CALIBRATORS[n].rule == "one-vs-rest"]
    out = []
    if ovr:
        out.append(
            f"Calibrators {', '.join(ovr)} act on one score: one-vs-rest per class, each class's calibrated score "
            f"clipped below at {EPS:g} and the row divided by its sum (NLL at most log(K/{EPS:g}) per example); they "
            "can change top-1, as vector and Dirichlet scaling can; temperature scaling cannot "
            "(harness.uncertainty.calibrators)."
        )
    if skipped:
        out.append(f"Not calibrated (no held-out predictions): {', '.join(skipped)}.")
    return out


def section(entries: Sequence[Any], names: "list[str]", progress: Optional[Any] = None) -> dict:
    """The section for report entries (:class:`harness.report.build.Entry`: ``label``, ``kind``, ``method``,
    ``preds``, ``heldout``), as the ``extra`` of :func:`harness.report.build.build` takes it: ``{"tables": [table],
    "text": [...], "json": {"calibrators": {...}}}``; ``progress`` (a :class:`harness.progress.Steps`) gets the step
    and the entries done.

    Raises:
        ValueError: as :func:`harness.uncertainty.calibrators.calibrate`.
    """
    rows, by_method = [], {}
    done = [e for e in entries if e.heldout is not None]
    skipped = [e.label for e in entries if e.heldout is None]
    steps = done
    if progress is not None:
        progress.step(f"post-hoc calibrators {', '.join(names)}, fitted on the held-out split")
        steps = progress.count(done, len(done), unit="entries")
    for e in steps:
        cal = calibrate(names, e.heldout, e.preds)
        for n in names:
            rows.append(_rows(e.label, e.kind, n, [e.preds], [cal[n]]))
        if e.kind == "single":
            by_method.setdefault(e.method, []).append((e.preds, cal))
    for method, items in by_method.items():
        if len(items) >= 2:
            for n in names:
                label = f"{method} ({len(items)} seeds)"
                rows.append(_rows(label, "method", n, [b for b, _ in items], [c[n] for _, c in items]))
    spec = {"names": names, "eps": EPS, "fitted_on": "held-out split", "rows": rows, "skipped": skipped}
    return {"tables": [table(rows)], "text": text(names, skipped), "json": {"calibrators": spec}}


def merge(extra: Optional[dict], part: Optional[dict]) -> dict:
    """``extra`` of :func:`harness.report.build.build` with ``part`` (:func:`section`) added: its tables after
    ``extra``'s, its text and JSON beside them."""
    extra = dict(extra or {})
    for key in ("tables", "text"):
        extra[key] = [*extra.get(key, []), *(part or {}).get(key, [])]
    extra["json"] = {**extra.get("json", {}), **(part or {}).get("json", {})}
    return extra
