"""The report stage of ``harness run``: every section of the report from the finished runs (the downstream and
temperature sections, the comparisons, each condition, the multi-label study, the summary, Σ, the step-cost axis
with the budget curves and the frontier, the times), then the report itself (:func:`harness.report.build.build`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Optional

from harness.experiment.budget import budget_section, frontier_runs, frontier_section
from harness.experiment.comparison import comparison_section
from harness.experiment.config import Experiment, _upstream_config_path
from harness.experiment.plan import _finished, _metrics, _Plan
from harness.experiment.sections import (
    _merge,
    condition_label,
    condition_record,
    downstream_section,
    multilabel_section,
    temperature_section,
    time_section,
)
from harness.experiment.sigma import experiment_sigma
from harness.experiment.step_cost import STEP_COST_FILE, step_cost_section, step_costs
from harness.experiment.summary import report_summary
from harness.io import path_under

#: the fix of a report folder an experiment may not write (as :func:`harness.experiment.validate.validate` says)
ELSEWHERE = "give the experiment another results_root=PATH (or another name)"


def report_stage(
    exp: Experiment,
    plans: "dict[str, _Plan]",
    root: Path,
    clock: Any,
    workers: Any,
    study: Any,
    ensembles: "list[Path]",
    stages: "dict[str, float]",
    progress: Callable[[str], None],
    train: bool,
) -> Path:
    """Every section of the report, then the report itself (:func:`harness.report.build.build`).

    ``clock``: the experiment's clock over sessions (``tick``, ``minutes``, ``sessions``); ``workers``: the pool
    whose ``results`` hold the downstream sweeps; ``study``: what the upstream stage left (runs per method, grid
    rows, conditions, budget, the multi-label study, the downstream settings, the runs left out).

    Raises:
        ValueError: ``<results_root>/<name>`` holds the report of runs outside ``root`` (another experiment's, with
            this name and results_root), checked before the sections are computed
            (:func:`harness.report.build.report_folder`); see :func:`harness.report.build.build`.
    """
    from harness.report.build import build, report_folder

    # the report of another experiment (other runs_root) is never replaced
    report_folder(exp.results_root, exp.name, None, ELSEWHERE, inputs_under=root)

    runs, main = study.runs, plans["main"]
    extra: dict = {"tables": [], "text": [], "json": {}}
    if study.settings is not None:
        _merge(extra, _downstream(exp, runs, root, workers))
    progress("[report]")
    precisions = _schedule(exp, main, runs, extra)
    if study.grid_rows:
        chosen = " and ".join(dict.fromkeys(r["parameter"] for r in study.grid_rows)) + " chosen on the held-out split"
        _merge(extra, temperature_section(study.grid_rows, chosen))
    _merge(extra, comparison_section(runs, ensembles))
    conditions = study.conditions
    if not train:  # a condition reports the seeds it has
        conditions = {
            name: {m: kept for m, fs in per.items() if (kept := [f for f in fs if _finished(main.configs[f])])}
            for name, per in conditions.items()
        }
        if study.left_out:
            extra["text"].append(
                f"Built without training (harness run --no-train): {len(set(study.left_out))} planned run(s) "
                "not finished yet are left out: " + ", ".join(sorted(set(study.left_out))) + "."
            )
    main_data = next((_metrics(d).get("eval_data") or "" for ds in runs.values() for d in ds), "")
    _conditions(exp, conditions, main, precisions, extra, main_data)
    if study.ml_runs:
        _merge(extra, multilabel_section(study.ml_runs, study.ml_grid))
    _merge(extra, report_summary(exp, runs, ensembles, conditions, main, study.ml_runs, extra))
    if exp.covariance and exp.sigma_readout:
        tic = time.perf_counter()
        _merge(extra, experiment_sigma(exp, runs, conditions, main, progress))
        progress(f"[covariance] what Σ follows ({time.perf_counter() - tic:.0f} s)")
    _costs(exp, plans, root, study, runs, extra, progress)
    extra["json"]["confusable_pairs"] = [list(p) for p in exp.confusable_pairs]
    times = {name: _run_times(plan) for name, plan in plans.items()}
    clock.tick()
    grids = {"main": study.grid_rows, "multilabel": study.ml_grid}
    _merge(extra, time_section(times, grids, stages, clock.minutes(), len(clock.sessions), exp.workers))
    tic = time.perf_counter()
    dirs = [d for ds in runs.values() for d in ds] + ensembles
    out = build(
        dirs,
        exp.name,
        exp.results_root,
        covariance=exp.covariance,
        extra=extra,
        overwrite=None,
        progress=progress,
        starmap=workers.starmap,
        inputs_under=root,
        elsewhere=ELSEWHERE,
    )
    progress(f"[report] {out} ({time.perf_counter() - tic:.0f} s)")
    return out


def _downstream(exp: Experiment, runs: "dict[str, list[Path]]", root: Path, workers: Any) -> dict:
    """The transfer section: each moved model's sweep and, per method with several seeds, their ensemble."""
    from harness.downstream.ensembles import upstream_ensemble

    moved = {m: dirs for m, dirs in runs.items() if m in exp.evaluated()}
    per_run = {d: workers.results[("downstream", d.name)] for dirs in moved.values() for d in dirs}
    across = {
        m: upstream_ensemble([path_under(root, "downstream", d.name) for d in dirs])
        for m, dirs in moved.items()
        if len(dirs) > 1
    }
    return downstream_section(moved, per_run, across)


def _schedule(exp: Experiment, main: _Plan, runs: "dict[str, list[Path]]", extra: dict) -> "list[str]":
    """The schedule's sentence and record (``extra``), and the precisions the main study's runs trained in."""
    base = _upstream_config_path(exp.upstream_config)
    extra["text"].append(
        f"Experiment: {exp.description or exp.name}. Schedule: upstream config {base.name} with "
        f"{' '.join(exp.upstream_overrides) or 'no overrides'}; seeds {list(exp.seeds)}; methods "
        + "; ".join(f"{m} {dict(h)}" for m, h in exp.methods.items())
        + "."
    )
    first = main.configs[Path(runs[next(iter(runs))][0]).name]
    precisions = sorted({str(_metrics(d).get("mixed_precision")) for dirs in runs.values() for d in dirs})
    extra["json"]["schedule"] = {
        "upstream_config": base.name,
        "upstream_overrides": list(exp.upstream_overrides),
        "epochs": first.train.epochs,
        "backbone": first.model.backbone,
        "batch_size": first.data.batch_size,
        "grid_overrides": list(exp.grid_overrides),
        "mixed_precision": precisions,
    }
    if len(precisions) > 1:
        extra["text"].append(
            f"Note: the study's runs used different precisions ({', '.join(precisions)}; train."
            "mixed_precision=auto follows each machine's CPU): part of any difference may come from it."
        )
    return precisions


def _conditions(
    exp: Experiment, conditions: dict, main: _Plan, precisions: "list[str]", extra: dict, main_data: str
) -> None:
    """Each condition's comparison section (titled by :func:`~harness.experiment.sections.condition_label`, naming
    evaluation data other than the main study's, ``main_data``), its record and its precision note, merged into
    ``extra``."""
    for name, per in conditions.items():
        if not per:
            continue
        cond = exp.conditions[name]
        dirs = {m: [Path(main.configs[f].output_dir) for f in fs] for m, fs in per.items()}
        data = _metrics(next(iter(dirs.values()))[0]).get("eval_data") or ""
        label = condition_label(name, cond.description, list(cond.upstream_overrides), data, main_data)
        part = comparison_section(dirs, [], label=label)
        own = sorted({str(_metrics(d).get("mixed_precision")) for ds in dirs.values() for d in ds})
        record, line = condition_record(name, cond.description, cond.upstream_overrides, next(iter(dirs.values()))[0])
        extra["text"] += [line] + [n for n in [precision_note(f"condition {name}", own, precisions)] if n]
        extra["json"].setdefault("conditions", {})[name] = {**record, **part.pop("json"), "mixed_precision": own}
        _merge(extra, part)


def _costs(
    exp: Experiment,
    plans: "dict[str, _Plan]",
    root: Path,
    study: Any,
    runs: "dict[str, list[Path]]",
    extra: dict,
    progress: Callable[[str], None],
) -> None:
    """The step-cost axis (every costed run's steps at one side-by-side step rate), the budget curves and the
    frontier, merged into ``extra``; adds the ``budget`` plan to ``plans`` when there are curves."""
    main = plans["main"]
    curves = {
        m: {e: Path(main.configs[f].output_dir) for e, f in per.items()} for m, per in study.budget.items() if per
    }
    if not curves and "frontier" not in plans:
        return
    costed: "dict[str, list[Path]]" = {}
    for m, per in curves.items():
        costed.setdefault(m, []).extend(per.values())
    if "frontier" in plans:
        for m, pairs in frontier_runs(plans["frontier"], runs, exp).items():
            costed.setdefault(m, []).extend(d for _, d in pairs)
    tic = time.perf_counter()
    costs = step_costs(costed, root / STEP_COST_FILE, progress=progress)
    what = "reused" if costs["measurement"]["reused"] else "measured"
    progress(f"[step cost] {what} ({time.perf_counter() - tic:.0f} s)")
    _merge(extra, step_cost_section(costs))
    if curves:
        plans["budget"] = _Plan(configs={f: c for f, c in main.configs.items() if f.startswith("budget_")})
        grids = {m: [Path(main.configs[f].output_dir) for f in main.grid.get(m, {}).values()] for m in curves}
        _merge(extra, budget_section(curves, costs, grids))
    if "frontier" in plans:
        _merge(extra, frontier_section(plans["frontier"], runs, exp, costs))


def precision_note(what: str, own: "list[str]", main: "list[str]") -> Optional[str]:
    """The report's note when a part of a study (``what``, e.g. ``condition b``) trained in other mixed precisions
    (``own``, from its runs' metrics.json) than the main study (``main``); None when they are the same."""
    if sorted(own) == sorted(main):
        return None
    name = {"no": "fp32"}  # accelerate's mixed_precision "no"

    def words(ps: "list[str]") -> str:
        return " and ".join(name.get(p, p) for p in ps)

    return (
        f"Note: {what}'s runs trained in {words(own)}, the main study's in {words(main)} "
        "(train.mixed_precision=auto follows each machine's CPU): a difference between them may partly come "
        "from it."
    )


def _run_times(plan: "Optional[_Plan]") -> "dict[str, float]":
    """Wall seconds of every finished run of a study (from its metrics.json: all its sessions)."""
    if plan is None:
        return {}
    out = {}
    for folder, cfg in plan.configs.items():
        f = Path(cfg.output_dir) / "metrics.json"
        if f.is_file():
            out[folder] = float(json.loads(f.read_text()).get("wall_seconds") or 0.0)
    return out
