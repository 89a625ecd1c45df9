"""An experiment's roots are not inside another experiment's folder (audit19 A19-17), and its folders are not, nor
hold, another experiment's runs_root or results_root (audit20 A20-06): :func:`check_outside_experiments`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

#: the schemas of the report.json an experiment writes in ``<results_root>/<name>`` (``harness run``'s report, and a
#: transfer study's)
REPORT_SCHEMAS = ("harness.report/1", "harness.transfer/1")


def check_outside_experiments(exp: Any) -> None:
    """``runs_root`` and ``results_root`` of ``exp`` lie neither in nor inside another experiment's folder
    (``<runs_root>/<name>``, marked by its clock: :data:`harness.folder_paths.EXPERIMENT_MARKS`, kind
    ``experiment``), whose runs or report would then hold this experiment's (moving or removing that folder to rerun
    its study would take this one's runs with it). This experiment's own folder may hold its results_root; several
    experiments may share one runs_root (it is marked by the lock only). Then the converse
    (:func:`_check_not_holding_roots`): this experiment's folders hold no other experiment's roots. Paths are compared
    resolved.

    Raises:
        ValueError: naming the key, its value, the other experiment's folder and the fix.
    """
    from harness.folder_paths import EXPERIMENT_MARKS

    files = [f for kind, marks in EXPERIMENT_MARKS if kind == "experiment" for f in marks]
    own = (Path(exp.runs_root) / exp.name).resolve()
    for key in ("runs_root", "results_root"):
        value = Path(getattr(exp, key)).resolve()
        for place in (value, *value.parents):
            if place == own or not files or not all((place / f).is_file() for f in files):
                continue
            raise ValueError(
                f"{key}={getattr(exp, key)} is {'' if place == value else 'inside '}the folder of another experiment, "
                f"{place} (it holds {' and '.join(files)}: experiment {place.name!r} of runs_root {place.parent}), "
                f"whose runs would then hold this experiment's folders (moving or removing it to rerun that study "
                f"would take them with it): give {key} a folder outside {place}, e.g. {key}={place.parent} (several "
                "experiments may share one runs_root)"
            )
    _check_not_holding_roots(exp)


def _root_of(folder: Path, kinds: "tuple[str, ...]" = ("runs_root", "results_root")) -> "Optional[str]":
    """What marks ``folder`` as an experiment's root, of ``kinds``: a ``runs_root`` holds the lock of ``harness run``
    (:data:`harness.folder_paths.EXPERIMENT_LOCK`), a ``results_root`` a folder holding a ``report.json`` of
    :data:`REPORT_SCHEMAS`; the kind with what marks it (``"runs_root (it holds .harness-run.lock)"``), or None.
    Reads the start of each child's ``report.json`` only."""
    from harness.folder_paths import EXPERIMENT_LOCK

    if "runs_root" in kinds and (folder / EXPERIMENT_LOCK).is_file():
        return f"runs_root (it holds {EXPERIMENT_LOCK})"
    try:
        children = [c for c in folder.iterdir() if (c / "report.json").is_file()] if folder.is_dir() else []
    except OSError:  # unreadable: its writers say so
        return None
    for child in sorted(children) if "results_root" in kinds else ():
        try:
            with open(child / "report.json", encoding="utf-8", errors="replace") as f:
                head = f.read(2000)
        except OSError:
            continue
        if any(f'"schema": "{schema}"' in head for schema in REPORT_SCHEMAS):
            return f"results_root (it holds {child.name}/report.json, the report of experiment {child.name!r})"
    return None


def _check_not_holding_roots(exp: Any) -> None:
    """This experiment's folders hold no other experiment's roots (:func:`_root_of`; audit20 A20-06): its folder
    ``<runs_root>/<name>`` is not, and none of the folders directly in it is, another experiment's runs_root or
    results_root, nor is its report's folder ``<results_root>/<name>`` (this study's folder would hold that study's
    runs or reports: removing it to rerun this study would take them with it, and this one's lock and runs would lock
    the other out); its results_root is no other experiment's runs_root and its runs_root no other experiment's
    results_root (one folder, one kind of tree). Its own roots are left out; several experiments may share one
    runs_root, or one results_root. Looks one level down only.

    Raises:
        ValueError: naming the key, its value, the other experiment's root, what marks it and the fix.
    """
    runs_root, results_root = Path(exp.runs_root).resolve(), Path(exp.results_root).resolve()
    own, report = runs_root / exp.name, results_root / exp.name
    try:
        inside = sorted(c for c in own.iterdir() if c.is_dir()) if own.is_dir() else []
    except OSError:
        inside = []
    places = [(p, "runs_root", {runs_root, results_root, report}) for p in (own, *inside)]
    for place, key, mine in [*places, (report, "results_root", {runs_root, own})]:
        kind = None if place in mine else _root_of(place)
        if kind:
            folder = f"folder {own}" if key == "runs_root" else f"report's folder {report}"
            where = "is" if place in (own, report) else f"holds {place}, which is"
            raise ValueError(
                f"{key}={getattr(exp, key)} and name={exp.name}: this experiment's {folder} {where} the {kind} of "
                f"another experiment, whose runs or reports would then lie inside this experiment's folder (removing "
                f"it to rerun this study would take them with it, and this study's lock and runs would lock the other "
                f"out): give this experiment a folder apart, another name or {key} (e.g. "
                f"{key}={place.parent if place in (own, report) else own.parent} with a name no folder there has)"
            )
    for key, value, other in (("results_root", results_root, "runs_root"), ("runs_root", runs_root, "results_root")):
        kind = None if runs_root == results_root else _root_of(value, (other,))
        apart = value.parent / ("runs" if value.name != "runs" else f"runs_{exp.name}")
        if kind:
            raise ValueError(
                f"{key}={getattr(exp, key)} is the {kind} of another experiment: one folder would hold runs of one "
                f"study and reports of another (removing either tree to rerun its study would meet the other's): "
                f"give {key} a folder of its own, e.g. {key}={value / 'results' if key == 'results_root' else apart}"
            )


def check_roots_outside_data(exp: Any, cfg: Any) -> None:
    """The experiment's folders (``<runs_root>/<name>``: its runs and sweeps; ``<results_root>/<name>``: its report)
    lie outside every split folder the planned run ``cfg`` reads (:func:`harness.data.splits.read_folders`: an image
    folder's or pack's train, eval and held-out splits), where they would become a class of it, or files of the pack
    (audit22 A22-11 for harness upstream's ``output_dir``). Checked for each planned run before its own config's
    check, so the message names the key harness run takes (audit23 A23-15: the advice was an ``output_dir``, which
    an experiment does not set) and the experiment file (where :func:`harness.experiment.config.load_experiment`
    read it).

    Raises:
        ValueError: naming the key, its value, the experiment (and its file), the split folder and the fix.
    """
    from harness.data.splits import read_folders
    from harness.folder_paths import check_outside_outputs
    from harness.io import path_under

    d = cfg.data
    inputs = read_folders(d.source, d.path, (d.train_split, d.eval_split, d.heldout_split))
    if not inputs:
        return
    file = getattr(exp, "source_file", None)
    where = f" in {file}" if file else " in the experiment file"
    # a manifest's images may lie anywhere: the folder met is named, not data.path (audit25)
    data = f"the images data.path={d.path} lists" if d.source == "manifest" else f"the data (data.path={d.path})"
    for key in ("runs_root", "results_root"):
        value = getattr(exp, key)
        check_outside_outputs(
            path_under(value, exp.name),
            key,
            "harness run",
            inputs,
            shown=f"{key}={value} (experiment {exp.name}'s folder {path_under(value, exp.name)})",
            fix=f"give {key} a folder outside {{folder}} and every other folder of {data}{where}, or as {key}=PATH "
            f"on the command line, e.g. {key}={getattr(type(exp), key, key)}",
        )
