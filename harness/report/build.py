"""``harness report``: the report of any mix of run folders (``harness upstream``) and ensemble folders
(``harness ensemble``), gathered from the folders and written as ``<out_root>/<name>/report.{md,html,json}``
plus its PNG figures.

Every number comes from :mod:`harness.uncertainty` (metrics, temperature scaling, calibration against both
label sets, covariance analysis) or :mod:`harness.shift.results`; this package only gathers and renders them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness.checkpoint_files import check_run_model, check_run_predictions
from harness.io import atomic_write_bytes, atomic_write_text, json_dumps
from harness.progress import Steps
from harness.provenance import provenance
from harness.report import calibrators as calibrator_section
from harness.report.covariance import (
    TOP_PAIRS,
    check_top_pairs,
    covariance_figure,
    covariance_model,
    covariance_section,
)
from harness.report.figures import reliability_png
from harness.report.inputs import (  # noqa: F401 (report_folder, REPORT_*: imported from here too)
    REPORT_EXTRAS,
    REPORT_FILES,
    REPORT_LOCK,
    SCHEMA,
    input_weights,
    read_report,
    remove_stale,
    report_folder,
    resolved,
)
from harness.report.page import html_page
from harness.report.render import calibration_note, fmt, main_columns, markdown
from harness.report.shift import section
from harness.runs import (
    check_distinct_folders,
    check_model_classes,
    clean_heldout,
    ensemble_spec,
    heldout_description,
    load_heldout,
    run_config,
    run_head,
    run_method,
    run_summary,
)
from harness.uncertainty.calibration import fit_temperature, scale
from harness.uncertainty.labels import label_calibration, per_class_accuracy
from harness.uncertainty.multilabel import macro_map
from harness.uncertainty.predictions import Predictions


@dataclass
class Entry:
    """One row of the report: a single run or an ensemble."""

    label: str
    method: str
    kind: str  # "single" | "ensemble"
    preds: Predictions
    command: str = ""
    heldout: Optional[Predictions] = None
    members: "list[str]" = field(default_factory=list)
    summary: Optional[dict] = None
    data: str = ""
    head: dict = field(default_factory=dict)
    run_dir: Optional[Path] = None  # the model.pt the covariance analysis reads (an ensemble's: its first member's)
    folder: Optional[Path] = None  # the entry's own folder, whose data its held-out split is read from


def _run_entry(run_dir: Path) -> Entry:
    check_run_predictions(run_dir)  # the predictions its metrics.json measured, not another run's (audit26 A26-05)
    cfg = run_config(run_dir)
    head = run_head(run_dir)
    meta = run_summary(run_dir)
    method = run_method(run_dir)
    return Entry(
        method if "imported" in cfg else f"{method} seed {cfg.get('seed', '?')}",  # an import has no seed
        method,
        "single",
        command=meta.get("command", ""),
        preds=Predictions.load(run_dir),
        heldout=load_heldout(run_dir),
        data=meta.get("eval_data", ""),
        head=head,
        run_dir=run_dir,
        folder=run_dir,
    )


def load_entry(path: "str | Path") -> Entry:
    """A run folder or an ensemble folder (``ensemble.json`` listing its members).

    Raises:
        FileNotFoundError: neither kind of folder. ValueError: its metrics.json or ensemble.json is not a JSON object;
            an ensemble of a member's earlier weights (:func:`harness.ensemble_folder.check_members_unchanged`); a run's
            predictions that are not those its metrics.json measured (:func:`harness.checkpoint_files.check_run_predictions`);
            a harness folder of another kind (a sweep, an ensemble of sweeps: :func:`harness.folder_kinds.check_kind`).
    """
    from harness.ensemble_folder import check_members_unchanged
    from harness.folder_kinds import check_kind

    path = check_kind(path, ("run", "import", "ensemble"), "run or ensemble")  # A26-10/11
    spec = ensemble_spec(path) if (path / "ensemble.json").is_file() else None
    if spec is not None:
        check_members_unchanged(path, spec)  # not an ensemble of a member's earlier run (audit24 A24-05)
        first = Path(spec["members"][0])
        head = run_head(first)
        return Entry(
            f"{spec['method']} ensemble of {len(spec['members'])}",
            spec["method"],
            "ensemble",
            command=spec.get("command", ""),
            preds=Predictions.load(path),
            heldout=load_heldout(path),
            members=spec["members"],
            summary=spec["summary"],
            data=spec["data"],
            head=head,
            run_dir=first,
            folder=path,  # its --eval-data's held-out split, not the first member's (audit18 A18-08)
        )
    if (path / "config.yaml").is_file() and (path / "predictions.npz").is_file():
        return _run_entry(path)
    if (path / "config.yaml").is_file():  # a run folder without its predictions: what is missing, and its fix
        from harness.checkpoint_files import rewrite_predictions

        raise FileNotFoundError(
            f"{str(path)!r} is a run folder without its predictions.npz: {rewrite_predictions(path)}"
        )
    raise FileNotFoundError(
        f"{str(path)!r} is neither a finished run folder (config.yaml + predictions.npz) nor an "
        "ensemble folder (ensemble.json); run harness upstream / harness ensemble first"
    )


def _entry_json(e: Entry, multilabel: bool) -> dict:
    """An entry's part of ``report.json``: its metrics, temperature scaling and calibration against both label
    sets (with a held-out split), per-class top-1 and, for an ensemble, its summary."""
    m = e.preds.metrics()
    item = {
        "label": e.label,
        "method": e.method,
        "kind": e.kind,
        "source": e.preds.source,
        "metrics": m,
        "members": e.members,
        "command": e.command,
    }
    if e.heldout is not None:
        cal = (
            label_calibration(e.preds, e.heldout, clean_heldout(e.heldout, e.folder))
            if not multilabel and e.run_dir is not None
            else None
        )
        t = cal["fit_noisy"]["temperature"] if cal else fit_temperature(e.heldout)  # the same fit, done once
        item["temperature_scaling"] = {
            "temperature": t,
            "after": scale(e.preds, t).metrics(),
            "fitted_on": "held-out split",
        }
        if cal:
            item["calibration"] = cal
            item["temperature_scaling"]["fitted_on"] = (
                "held-out split, noisy labels" if cal["noisy_labels_differ"] else "held-out split"
            )
    if not multilabel:
        item["per_class_top1"] = {
            "test": per_class_accuracy(e.preds).tolist(),
            "heldout": per_class_accuracy(e.heldout).tolist() if e.heldout is not None else None,
        }
    if e.summary is not None:
        item["ensemble"] = {k: v for k, v in e.summary.items() if k not in ("members",)}
        item["ensemble"]["member_metrics"] = e.summary["members"]
    return item


def _check_same_data(entries: "list[Entry]", paths: Sequence["str | Path"]) -> None:
    """Every entry was evaluated on the first one's examples, classes and targets, and every entry with a held-out
    split on the first such entry's (:func:`harness.uncertainty.ensembles.evaluation_mismatch`, the ensemble's rule;
    links may differ): the calibration, temperature-scaling and per-class sections read the held-out predictions.
    No two entries share a label (a single run is named by its method and seed, an ensemble by its method and size):
    the tables name entries by it and the per-method rows average a method's runs as seeds, so the single runs of
    one method are replicates (:func:`harness.model_identity.check_replicates`).

    Raises:
        ValueError: naming the first entry that was not, and how; or the two folders of one label and the fix.
    """
    from harness.model_identity import check_replicates
    from harness.uncertainty.ensembles import evaluation_mismatch

    ref = entries[0].preds
    for e in entries[1:]:
        what = evaluation_mismatch(e.preds, ref, compare_link=False)
        if what:
            raise ValueError(
                f"{e.label} ({e.preds.source}) was evaluated on other data, classes or labels than "
                f"{entries[0].label}: {what}; report runs of one experiment together"
            )
    held = [e for e in entries if e.heldout is not None]
    for e in held[1:]:
        what = evaluation_mismatch(e.heldout, held[0].heldout, compare_link=False)
        if what:
            raise ValueError(
                f"{e.label} ({e.heldout.source}) saved predictions of another held-out split than {held[0].label} "
                f"({held[0].heldout.source}): {what}; the report's calibration, temperature-scaling and per-class "
                "sections read the held-out predictions, so report runs of one experiment together"
            )
    seen: "dict[str, str | Path]" = {}
    for e, path in zip(entries, paths):
        if e.label in seen and " import " in e.method:  # harness.runs.run_method: an import is named by its folder
            raise ValueError(
                f"{seen[e.label]} and {path} are both {e.label!r}: an imported run is named by its folder's name, and "
                "the report names each entry once; import one of them into a folder of another name (harness import "
                f"... --out {Path(path).parent / (Path(path).name + '_2')})"
            )
        if e.label in seen:
            raise ValueError(
                f"{seen[e.label]} and {path} are both {e.label!r}: the report names each entry by its method and "
                "seed (an ensemble by its method and size) and averages a method's runs as its seeds, so two of one "
                f"label would read as one (or as replicates); report them apart (harness report {path} --name "
                "<another name>), or give runs of other seeds"
            )
        seen[e.label] = path
    methods: "dict[str, list[tuple[str, dict]]]" = {}
    for e, path in zip(entries, paths):
        if e.kind == "single" and e.run_dir is not None:
            methods.setdefault(e.method, []).append((str(path), run_config(e.run_dir)))
    for method, runs in methods.items():
        check_replicates(runs, method)  # a method's runs are averaged as its seeds: replicates


def _entry_rows(
    entries: "list[Entry]",
    cols: "list[tuple[str, str, bool]]",
    multilabel: bool,
    out: Path,
    steps: Steps,
    starmap: Callable = itertools.starmap,
) -> "tuple[list[list[str]], list[dict], list[tuple[str, str, bytes]]]":
    """Each entry's row of the main table (``cols``: :func:`~harness.report.render.main_columns`, and an ensemble's
    members as mean ± std), its part of ``report.json`` (:func:`_entry_json`) and its reliability diagram, written to
    ``out`` as ``reliability_<i>.png``: ``(rows, json entries, figures as (label, file name, PNG bytes))``; ``steps``
    counts the entries done. ``starmap(fn, argument tuples)`` draws the diagrams (a pool's, to draw them side by
    side)."""
    rows, json_entries, figures = [], [], []
    images = iter(list(starmap(reliability_png, [(e.preds, e.label) for e in entries])))
    for e in steps.count(entries, len(entries), unit="entries"):
        json_entries.append(_entry_json(e, multilabel))
        m = json_entries[-1]["metrics"]
        cells = [e.label, e.kind] + [fmt(m.get(k), pct) for _, k, pct in cols]
        if e.summary is not None:
            std = e.summary["member_std"]
            mean = e.summary["member_mean"]
            cells.append(
                "members: " + ", ".join(f"{lbl} {fmt(mean[k], pct)} ± {fmt(std[k], pct)}" for lbl, k, pct in cols[:3])
            )
        else:
            cells.append("")
        rows.append(cells)
        fname = f"reliability_{len(figures)}.png"
        image = next(images)
        atomic_write_bytes(out / fname, image)
        figures.append((e.label, fname, image))
    return rows, json_entries, figures


def _figure_names(figures: list, cov_png: Optional[bytes], shift_part: Optional[dict], extra: dict) -> dict:
    """``report.json``'s ``figures``: the file names of the figures the report wrote, by section."""
    return {
        "reliability": [f for _, f, _ in figures],
        "covariance_ranks": "covariance_ranks.png" if cov_png else None,
        "shift": [f for _, f, _ in shift_part["figures"]] if shift_part else [],
        **({"extra": [f for _, f, _ in extra["figures"]]} if extra.get("figures") else {}),
    }


def _report_json(
    name: str,
    prov: dict,
    entries: "list[Entry]",
    json_entries: "list[dict]",
    extra: dict,
    skipped: Optional[int],
    cov: Optional[dict],
    shift_part: Optional[dict],
    figures: dict,
    inputs: "list[str]",
) -> dict:
    """``report.json`` (schema :data:`SCHEMA`): the evaluation data, the entries' numbers (``json_entries``), the
    notes (the extra sections' text, then :func:`~harness.report.render.calibration_note`), the extra sections' JSON
    and tables, the covariance analysis, the shift section's record and the figures' file names (``figures``:
    :func:`_figure_names`) and the input folders (``inputs``: :func:`harness.report.inputs.resolved`)."""
    ref = entries[0].preds
    heldout_data = heldout_description(entries[0].folder) if entries[0].folder and entries[0].heldout else None
    notes = list(extra.get("text", [])) + calibration_note(json_entries)
    return {
        "schema": SCHEMA,
        "name": name,
        "inputs": inputs,
        "input_weights": input_weights(inputs),  # a report of the same folders' other weights is another report
        "provenance": prov,
        "summary": extra.get("summary"),
        "data": entries[0].data,
        "heldout_data": heldout_data,
        **extra.get("json", {}),
        "extra_tables": [list(t) for t in extra.get("tables", [])],
        "notes": notes,
        "num_examples": int(len(ref.index)),
        "num_classes": len(ref.class_names),
        "multilabel": ref.multilabel,
        "class_names": list(ref.class_names),
        "macro_map_skipped_classes": skipped,
        "entries": json_entries,
        "covariance": cov,
        "shift": shift_part["json"] if shift_part else None,
        "figures": figures,
    }


def build(
    paths: Sequence["str | Path"],
    name: str,
    out_root: "str | Path" = "results",
    covariance: bool = True,
    top_pairs: Optional[int] = None,
    extra: Optional[dict] = None,
    shift: bool = True,
    overwrite: bool = False,
    progress: Optional[Callable[[str], None]] = None,
    calibrators: Sequence[str] = (),
    starmap: Callable = itertools.starmap,
    inputs_under: "Optional[str | Path]" = None,
    elsewhere: str = "choose another --name or --out-root",
) -> Path:
    """Write ``<out_root>/<name>/report.{md,html,json}`` and figures for the given run/ensemble folders;
    ``progress`` gets a line per step and the entries done and time left (:class:`harness.progress.Steps`);
    ``starmap`` draws the reliability diagrams (``harness run`` passes its worker processes', which draw them side by
    side; the figures are the same).

    ``extra`` adds sections: ``{"tables": [(title, header, rows)], "text": [str], "json": {...}}``
    (the experiment runner puts the downstream table there). With ``shift``, entries that hold shift
    predictions (``harness shift``) get the distribution-shift section of :mod:`harness.report.shift`
    (its figures, tables and text; ``report.json`` key ``shift``). ``calibrators`` (names of
    :data:`harness.uncertainty.calibrators.CALIBRATORS`) adds their NLL/ECE rows with intervals
    (:mod:`harness.report.calibrators`; ``report.json`` key ``calibrators``). ``top_pairs``: the class pairs of the
    covariance analysis (unset: :data:`TOP_PAIRS`).

    Raises:
        FileNotFoundError: a path is neither a run nor an ensemble folder.
        ValueError: another report being written into the same folder (its lock, :data:`REPORT_LOCK`, is held for
            the whole build: two reports of one name never replace each other's files without a word); a folder
            given twice (after resolving links and relative paths) or two folders with identical
            predictions (the same arrays: :func:`harness.runs.check_distinct_folders`); a metrics.json or
            ensemble.json that is not a JSON object (:func:`harness.io.read_json_object`); a report name that is not a
            plain folder name, or a folder that holds files no report wrote or the report of other inputs (not
            inside ``inputs_under``, an experiment's runs folder), without ``overwrite`` (:func:`report_folder`;
            ``elsewhere``: the messages' fix); entries with different label spaces, evaluation data or held-out data,
            or two of one label (method and seed: :func:`_check_same_data`); an unknown calibrator, netcal missing, or
            ``calibrators`` for multi-label entries; ``top_pairs`` given without a covariance analysis to read it (no
            entry with a low-rank or PE covariance and its model.pt, or ``covariance`` off).
    """
    from harness.io import RunLock

    check_distinct_folders(paths, "folder", "a report lists each run or ensemble once")
    checks = dict(inputs=paths, inputs_under=inputs_under)
    out = report_folder(out_root, name, overwrite, elsewhere, **checks)  # a bad name: before any folder is made
    steps = Steps(progress, "report", 3 + bool(covariance) + bool(shift) + bool(calibrators))
    steps.step(f"reading {len(paths)} folder(s)")
    entries = [load_entry(p) for p in paths]
    _check_same_data(entries, paths)
    het = covariance_model(entries) if covariance else None
    if top_pairs is not None:
        check_top_pairs(top_pairs, entries, covariance, het)
    top_pairs = TOP_PAIRS if top_pairs is None else top_pairs
    if het is not None:  # a model.pt of another class count, or of other weights: refused before anything is written
        check_run_model(het.run_dir)
        check_model_classes(het.run_dir / "model.pt", len(het.preds.class_names), f"{het.run_dir}/predictions.npz")
    calibrators = calibrator_section.check(calibrators, entries)  # names, netcal and the link: before any work
    busy = f"another harness report is being written there; wait for it to finish, or {elsewhere}"
    with RunLock(out, REPORT_LOCK, what=busy):  # makes the folder: one report writes it at a time
        report_folder(out_root, name, overwrite, elsewhere, **checks)  # again: a report finished meanwhile is seen
        return _write(paths, name, out, entries, steps, covariance, top_pairs, extra, shift, calibrators, starmap)


def _write(
    paths: Sequence["str | Path"],
    name: str,
    out: Path,
    entries: "list[Entry]",
    steps: Steps,
    covariance: bool,
    top_pairs: int,
    extra: Optional[dict],
    shift: bool,
    calibrators: Sequence[str],
    starmap: Callable,
) -> Path:
    """The report of :func:`build` of the read and checked ``entries`` written into ``out`` (locked by the caller)."""
    old = read_report(out)  # an earlier report here: its figures not written again are removed at the end
    ref = entries[0].preds
    prov = provenance()
    multilabel = ref.multilabel
    skipped = macro_map(ref.logits, ref.targets, return_skipped=True)[1] if multilabel else None
    cols = main_columns(multilabel)
    steps.step(f"metrics, calibration and reliability diagrams of {len(entries)} entries")
    rows, json_entries, figures = _entry_rows(entries, cols, multilabel, out, steps, starmap)

    if covariance:
        steps.step("covariance analysis (the first het model against hom)")
    cov = covariance_section(entries, top_pairs) if covariance else None
    cov_png = covariance_figure(cov, out)

    shift_part = None
    if shift:
        steps.step("distribution-shift section")
        shift_part = section([(e.label, e.method, e.kind, e.preds.source) for e in entries])
        for _, fname, image in (shift_part or {}).get("figures", []):
            atomic_write_bytes(out / fname, image)

    part = calibrator_section.section(entries, calibrators, steps) if calibrators else None
    extra = calibrator_section.merge(extra, part)
    for _, fname, image in extra.get("figures", []):
        atomic_write_bytes(out / fname, image)
    figure_names = _figure_names(figures, cov_png, shift_part, extra)
    inputs = resolved(paths)
    report = _report_json(name, prov, entries, json_entries, extra, skipped, cov, shift_part, figure_names, inputs)
    steps.step(f"writing {out / 'report.md'}, report.html and report.json")
    atomic_write_text(out / "report.json", json_dumps(report, indent=1))
    more = list(extra.get("figures", []))
    atomic_write_text(out / "report.md", markdown(report, rows, cols, figures, cov_png is not None, shift_part, more))
    atomic_write_text(out / "report.html", html_page(report, rows, cols, figures, cov_png, shift_part, more))
    if old.get("schema") == SCHEMA:
        remove_stale(out, old, figure_names)
    return out
