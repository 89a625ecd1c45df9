"""Running an experiment: the stages (upstream waves, ensembles, shift, transfer, report) on a
pool of workers, the clock over sessions, and the records of finished runs."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from harness.experiment.budget import (
    STEP_COST_FILE,
    budget_section,
    frontier_runs,
    frontier_section,
    step_cost_section,
    step_costs,
)
from harness.experiment.config import Experiment, _upstream_config_path
from harness.experiment.jobs import planned_jobs
from harness.experiment.plan import (
    _choose_temperatures,
    _derived,
    _extend_grids,
    _first_wave,
    _metrics,
    _Plan,
    _study_runs,
    frontier_plan,
    validate_experiment,
)
from harness.experiment.sections import (
    _merge,
    comparison_section,
    condition_record,
    downstream_section,
    multilabel_section,
    temperature_section,
    time_section,
)
from harness.experiment.sigma import experiment_sigma
from harness.experiment.summary import report_summary
from harness.io import RunLock, path_under


class _Clock:
    """Elapsed wall time of an experiment over all its sessions, kept in ``<runs>/<name>/sessions.json``:
    per session its start, its last tick (a killed session counts up to its last tick) and the
    seconds spent on diagnostics that do not count (the frontier runs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sessions = json.loads(path.read_text()) if path.is_file() else []
        self.sessions.append({"start": time.time(), "last": time.time(), "excluded": 0.0})

    def tick(self) -> None:
        from harness.io import atomic_write_text

        self.sessions[-1]["last"] = time.time()
        atomic_write_text(self.path, json.dumps(self.sessions, indent=1))

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` of this session out of :meth:`minutes`."""
        self.sessions[-1]["excluded"] += seconds
        self.tick()

    def minutes(self) -> float:
        """Elapsed minutes over all sessions, excluded time left out."""
        return sum(s["last"] - s["start"] - s.get("excluded", 0.0) for s in self.sessions) / 60


def _train_one(cfg: Any) -> str:
    from harness.upstream.train import run

    return str(run(cfg, progress=False))


def _train(
    workers: Any, configs: "list[Any]", then: Callable[[Any], Optional[Callable[[Any], None]]] = lambda cfg: None
) -> None:
    """Queue upstream runs on ``workers`` (trained, finished, or skipped when done); ``then(cfg)``
    gives each run's callback."""
    for cfg in configs:
        workers.submit("upstream", cfg.name, _train_one, (cfg,), then(cfg))


def _transfer_one(model: str, tasks: "list[str]", out: str, settings: Any) -> dict:
    from harness.downstream.sweep import sweep

    return sweep(model, tasks, out, settings, progress=lambda s: None)


#: the lock file in ``runs_root`` that one ``harness run`` holds from its checks to its report
EXPERIMENT_LOCK = ".harness-run.lock"


def run_experiment(exp: Experiment, progress: Callable[[str], None] = print, train: bool = True) -> Path:
    """Run (or finish) every stage of ``exp``; return the report folder. With ``train=False`` no upstream run
    is trained: the report is built from the runs that have finished (restored from records where missing),
    and a condition reports the seeds it has (the report lists the runs left out).

    Raises:
        ValueError: a bad experiment (see :func:`validate_experiment`), or any stage's own errors.
    """
    from harness.experiment.verdicts import validate_primary
    from harness.workers import Workers

    plans = validate_experiment(exp)
    validate_primary(exp)
    with RunLock(
        exp.runs_root,
        name=EXPERIMENT_LOCK,
        clean=False,
        what="one harness run at a time uses a runs_root: wait for it to finish or stop it, or give this "
        "experiment its own runs_root=...",
    ):
        root = path_under(exp.runs_root, exp.name)
        root.mkdir(parents=True, exist_ok=True)
        if exp.records:
            restored = sync_records(exp, restore=True, plans=plans)
            if restored:
                progress(f"[records] restored {restored} finished run(s) from {records_dir(exp)}")
        clock = _Clock(root / "sessions.json")
        with Workers(exp.workers) as workers:
            if train:  # the progress lines count over the whole plan (without training: the finished runs queued)
                workers.expect(planned_jobs(exp, plans))
                kinds = [
                    "upstream runs",
                    *(["shift predictions"] if exp.shift else []),
                    *(["transfers"] if exp.downstream.tasks else []),
                ]
                progress(
                    f"[plan] {workers.counts()[1]} jobs ({', '.join(kinds)})"
                    + (f" on {exp.workers} processes with {workers.threads} thread(s) each" if exp.workers > 1 else "")
                )
            return _run_stages(exp, plans, root, clock, workers, progress, train)


def same_config(saved: str, planned: str) -> bool:
    """Whether a recorded run's ``config.yaml`` is the planned one: the same text, or the same once the settings
    added since it was written take their defaults (as :mod:`harness.upstream.train` compares a run folder's)."""
    if saved == planned:
        return True
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from harness.upstream.config import UpstreamConfig

    try:
        filled = OmegaConf.merge(OmegaConf.structured(UpstreamConfig), OmegaConf.create(saved))
    except (OmegaConfBaseException, ValueError):
        return False
    return OmegaConf.to_yaml(filled, resolve=True) == planned


def records_dir(exp: Experiment) -> Path:
    """Where the experiment keeps its runs' compact records."""
    return path_under(exp.results_root, exp.name, "records")


def sync_records(exp: Experiment, restore: bool = False, plans: "Optional[dict[str, _Plan]]" = None) -> int:
    """Save the record of every finished upstream run of ``exp`` not yet recorded (or, with
    ``restore``, recreate every recorded run folder that is missing); returns how many.

    Every record is verified before it is restored (:func:`harness.records.verify_record`: its hashes and its
    metrics recomputed from its predictions); with ``plans`` (:func:`validate_experiment`), a record of a planned
    run folder must hold that run's config.

    Raises:
        ValueError: a record that does not verify, or holds another config than planned (nothing restored).
    """
    from harness.config import to_yaml
    from harness.records import restore_record, save_record, verify_record

    up, rec = path_under(exp.runs_root, exp.name, "upstream"), records_dir(exp)
    if restore:
        planned = {Path(c.output_dir).name: to_yaml(c) for p in (plans or {}).values() for c in p.configs.values()}
        todo = [r for r in sorted(rec.glob("*")) if r.is_dir() and not (up / r.name / "metrics.json").is_file()]
        for r in todo:  # every record checked before any is restored
            verify_record(r)
        return sum(restore_record(r, path_under(up, r.name), planned.get(r.name), same_config) for r in todo)
    return sum(save_record(d, rec / d.name) for d in sorted(up.glob("*")) if d.is_dir())


def sync_records_locked(exp: Experiment) -> "tuple[int, int]":
    """``harness run --sync-records``: restore the missing run folders from their records, then record the finished
    runs, holding the experiment's lock (:data:`EXPERIMENT_LOCK`), so a ``harness run`` training in the same
    ``runs_root`` refuses it. Returns ``(restored, saved)``.

    Raises:
        ValueError: another process holds the lock, or a record does not verify.
    """
    with RunLock(
        exp.runs_root,
        name=EXPERIMENT_LOCK,
        clean=False,
        what="a harness run is using this runs_root: sync the records when it has finished (it records "
        "its runs as they finish)",
    ):
        return sync_records(exp, restore=True), sync_records(exp)


def _finished(cfg: Any) -> bool:
    return (Path(cfg.output_dir) / "metrics.json").is_file()


@dataclass
class _Study:
    """What the upstream stage leaves for the evaluation and the report: the main study's runs per method,
    the τ-grid rows, the budget and condition runs (folder names in the main plan), the multi-label
    study's runs and grid rows, the downstream settings, and the runs left out (``train=False``)."""

    runs: "dict[str, list[Path]]"
    grid_rows: "list[dict]"
    budget: "dict[str, dict[int, str]]"
    conditions: "dict[str, dict[str, list[str]]]"
    ml_runs: "dict[str, list[Path]]"
    ml_grid: "list[dict]"
    settings: Any
    left_out: "list[str]" = field(default_factory=list)


def _run_stages(
    exp: Experiment,
    plans: "dict[str, _Plan]",
    root: Path,
    clock: _Clock,
    workers: Any,
    progress: Callable[[str], None],
    train: bool = True,
) -> Path:
    """The upstream waves, the evaluation (ensembles, shift, transfer) and the report, in that order."""
    study = _upstream_stage(exp, plans, root, clock, workers, progress, train)
    ensembles, stages = _evaluation_stage(exp, root, workers, study, progress)
    return _report_stage(exp, plans, root, clock, workers, study, ensembles, stages, progress, train)


def _upstream_stage(
    exp: Experiment,
    plans: "dict[str, _Plan]",
    root: Path,
    clock: _Clock,
    workers: Any,
    progress: Callable[[str], None],
    train: bool,
) -> _Study:
    """Queue every upstream run (priority: the main study, then the conditions and budget curves, then the
    multi-label study, then the frontier), with each final run's shift predictions and transfer behind it."""
    from harness.downstream.config import PRESETS, SweepSettings
    from harness.shift.predict import predict_run

    left_out: "list[str]" = []

    def queue(
        configs: "list[Any]", then: Callable[[Any], Any] = lambda cfg: None
    ) -> None:  # train=False: finished only
        left_out.extend(Path(c.output_dir).name for c in configs if not train and not _finished(c))
        _train(workers, [c for c in configs if train or _finished(c)], then)

    settings = (
        SweepSettings(**{**PRESETS[exp.downstream.preset], **exp.downstream.settings}) if exp.downstream.tasks else None
    )
    main = plans["main"]
    # final run folder -> its method: the methods without a grid now, every method once the grids have chosen
    final = {
        str(Path(main.configs[f"{m}_s{seed}"].output_dir)): m
        for m in exp.methods
        if m not in main.grid
        for seed in exp.seeds
    }
    ml = exp.multilabel
    evaluated = set(exp.evaluate_methods or exp.methods)

    def follow_up(d: Path) -> None:  # a final run of the main study: shift predictions and transfer
        if final.get(str(d)) not in evaluated:
            return
        if exp.shift is not None:
            workers.submit("shift", d.name, predict_run, (d, exp.shift))
        if settings is not None:
            workers.submit(
                "downstream",
                d.name,
                _transfer_one,
                (
                    str(d / "model.pt"),
                    list(exp.downstream.tasks),
                    str(path_under(root, "downstream", d.name)),
                    settings,
                ),
            )

    def then(cfg: Any) -> "Optional[Callable[[Any], None]]":
        return (lambda _: follow_up(Path(cfg.output_dir))) if str(Path(cfg.output_dir)) in final else None

    def tick() -> None:  # after every job: the clock, and the records of runs that just finished
        clock.tick()
        if exp.records:
            sync_records(exp)

    # priority: the main study, then the budget curves, then the multi-label study, then the frontier
    queue([main.configs[f] for f in _first_wave(main, exp.methods, exp.seeds)], then)
    workers.wait(progress, tick, stages={"upstream"})
    more = _extend_grids(main, exp.temperature_grid, exp.grid_extensions)
    while more:  # the best τ lay on the grid's edge: try past it
        progress(f"[τ grid] extended: {', '.join(more)}")
        workers.expect(len(more) if train else 0)
        queue([main.configs[f] for f in more])
        workers.wait(progress, tick, stages={"upstream"})
        more = _extend_grids(main, exp.temperature_grid, exp.grid_extensions)
    second, grid_rows = _choose_temperatures(main, exp.methods, exp.seeds)
    runs = _study_runs(main, exp.methods, exp.seeds)
    final = {str(d): m for m, dirs in runs.items() for d in dirs}
    if not main.grid_overrides:
        for method in main.grid:  # the chosen τ's run is trained already
            follow_up(runs[method][0])
    queue([main.configs[f] for f in second], then)
    queued = set(main.configs)  # the main study's runs, all queued by now
    budget = {
        m: {
            int(e): _derived(main, m, f"budget_{m}_e{int(e)}", [f"train.epochs={int(e)}", f"train.eval_every={int(e)}"])
            for e in exp.budget.epochs
        }
        for m in exp.budget.methods
    }
    # a condition's run that equals a planned one (e.g. a budget run) is that run, trained once
    conditions = {
        name: {
            m: [_derived(main, m, f"{name}_{m}_s{sd}", list(c.upstream_overrides), sd) for sd in c.seeds]
            for m in c.methods
        }
        for name, c in exp.conditions.items()
    }
    # seed-major, then by each condition's method order, then by condition: every condition's first seed of
    # its first method before any second one (an interrupted study has something to say about every condition)
    lists = [list(per.values()) for per in conditions.values()]
    depth = max((len(fs) for per in lists for fs in per), default=0), max((len(per) for per in lists), default=0)
    queue(
        [
            main.configs[f]
            for f in dict.fromkeys(
                [
                    *(
                        per[j][i]
                        for i in range(depth[0])
                        for j in range(depth[1])
                        for per in lists
                        if j < len(per) and i < len(per[j])
                    ),
                    *(f for per in budget.values() for f in per.values()),
                ]
            )
            if f not in queued
        ]
    )
    ml_plan, ml_grid = plans.get("multilabel"), []
    if ml_plan is not None:
        queue([ml_plan.configs[f] for f in _first_wave(ml_plan, ml.methods, ml.seeds)])
    workers.wait(progress, tick, stages={"upstream"})
    if ml_plan is not None:
        folders, ml_grid = _choose_temperatures(ml_plan, ml.methods, ml.seeds)
        queue([ml_plan.configs[f] for f in folders])
    workers.wait(progress, tick)
    if exp.frontier.schedules:  # diagnostics: their time is not the experiment's
        plans["frontier"] = frontier_plan(main, exp)
        tic = time.perf_counter()
        queue(list(plans["frontier"].configs.values()))
        workers.wait(progress, lambda: sync_records(exp) if exp.records else None)
        clock.exclude(time.perf_counter() - tic)
    workers.close()
    missing = [d.name for dirs in runs.values() for d in dirs if not (d / "metrics.json").is_file()]
    if missing:  # only without training: a trained study has every run
        raise ValueError(
            f"the main study is not finished ({', '.join(missing)} missing): run harness run without "
            "--no-train to train them"
        )

    ml_runs = {} if ml_plan is None else _study_runs(ml_plan, exp.multilabel.methods, exp.multilabel.seeds)
    return _Study(runs, grid_rows, budget, conditions, ml_runs, ml_grid, settings, left_out)


def _evaluation_stage(
    exp: Experiment, root: Path, workers: Any, study: _Study, progress: Callable[[str], None]
) -> "tuple[list[Path], dict[str, float]]":
    """The ensembles of each method's first seeds, and the ensembles' shifted predictions (averages of their
    members'); returns the ensemble folders and the seconds per stage."""
    from harness.runs import build_ensemble
    from harness.shift.predict import average_ensemble

    stages: "dict[str, float]" = {}
    runs = study.runs
    tic = time.perf_counter()
    ensembles = []
    for method, dirs in runs.items():
        for size in exp.ensemble_sizes:
            out = path_under(root, "ensembles", f"{method}_x{size}")
            build_ensemble(dirs[:size], out)
            ensembles.append(out)
            progress(f"[ensemble] {method} x{size}")
    stages["ensembles"] = time.perf_counter() - tic
    for stage in ("shift", "downstream"):
        if stage in workers.seconds:
            stages[stage] = workers.seconds[stage]
    if exp.shift is not None:  # the ensembles' shifted predictions: averages of their members'
        tic = time.perf_counter()
        for e in ensembles:
            if e.name.rsplit("_x", 1)[0] in (exp.evaluate_methods or exp.methods):
                average_ensemble(e)
        stages["shift"] = stages.get("shift", 0.0) + time.perf_counter() - tic

    return ensembles, stages


def _report_stage(
    exp: Experiment,
    plans: "dict[str, _Plan]",
    root: Path,
    clock: _Clock,
    workers: Any,
    study: _Study,
    ensembles: "list[Path]",
    stages: "dict[str, float]",
    progress: Callable[[str], None],
    train: bool,
) -> Path:
    """Every section of the report, then the report itself (:func:`harness.report.build.build`)."""
    from harness.report.build import build

    runs, main, settings, conditions = study.runs, plans["main"], study.settings, study.conditions
    grid_rows, ml_runs, ml_grid, budget, left_out = (
        study.grid_rows,
        study.ml_runs,
        study.ml_grid,
        study.budget,
        study.left_out,
    )
    extra: dict = {"tables": [], "text": [], "json": {}}
    if settings is not None:
        moved = {m: dirs for m, dirs in runs.items() if m in (exp.evaluate_methods or exp.methods)}
        per_run = {d: workers.results[("downstream", d.name)] for dirs in moved.values() for d in dirs}
        from harness.downstream.ensembles import upstream_ensemble

        across = {
            m: upstream_ensemble([path_under(root, "downstream", d.name) for d in dirs])
            for m, dirs in moved.items()
            if len(dirs) > 1
        }
        _merge(extra, downstream_section(moved, per_run, across))

    progress("[report]")
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
    if grid_rows:
        _merge(
            extra,
            temperature_section(
                grid_rows,
                " and ".join(dict.fromkeys(r["parameter"] for r in grid_rows)) + " chosen on the held-out split",
            ),
        )
    _merge(extra, comparison_section(runs, ensembles))
    if not train:  # a condition reports the seeds it has
        conditions = {
            name: {m: kept for m, fs in per.items() if (kept := [f for f in fs if _finished(main.configs[f])])}
            for name, per in conditions.items()
        }
        if left_out:
            extra["text"].append(
                f"Built without training (harness run --no-train): {len(set(left_out))} planned run(s) "
                "not finished yet are left out: " + ", ".join(sorted(set(left_out))) + "."
            )
    for name, per in conditions.items():
        if not per:
            continue
        cond = exp.conditions[name]
        dirs = {m: [Path(main.configs[f].output_dir) for f in fs] for m, fs in per.items()}
        part = comparison_section(
            dirs, [], label=f"Condition {name} ({cond.description or ' '.join(cond.upstream_overrides)})"
        )
        own = sorted({str(_metrics(d).get("mixed_precision")) for ds in dirs.values() for d in ds})
        record, line = condition_record(name, cond.description, cond.upstream_overrides, next(iter(dirs.values()))[0])
        extra["text"] += [line] + [n for n in [precision_note(f"condition {name}", own, precisions)] if n]
        extra["json"].setdefault("conditions", {})[name] = {**record, **part.pop("json"), "mixed_precision": own}
        _merge(extra, part)
    if ml_runs:
        _merge(extra, multilabel_section(ml_runs, ml_grid))
    _merge(extra, report_summary(exp, runs, ensembles, conditions, main, ml_runs, extra))
    if exp.covariance and exp.sigma_readout:
        tic = time.perf_counter()
        _merge(extra, experiment_sigma(exp, runs, conditions, main, progress))
        progress(f"[covariance] what Σ follows ({time.perf_counter() - tic:.0f} s)")
    curves = {m: {e: Path(main.configs[f].output_dir) for e, f in per.items()} for m, per in budget.items() if per}
    if curves or "frontier" in plans:  # their x axis: every run's steps at one side-by-side step rate
        costed: "dict[str, list[Path]]" = {}
        for m, per in curves.items():
            costed.setdefault(m, []).extend(per.values())
        if "frontier" in plans:
            for m, pairs in frontier_runs(plans["frontier"], runs, exp).items():
                costed.setdefault(m, []).extend(d for _, d in pairs)
        tic = time.perf_counter()
        costs = step_costs(costed, root / STEP_COST_FILE, progress=progress)
        progress(
            f"[step cost] {'reused' if costs['measurement']['reused'] else 'measured'} "
            f"({time.perf_counter() - tic:.0f} s)"
        )
        _merge(extra, step_cost_section(costs))
    if curves:
        plans["budget"] = _Plan(configs={f: c for f, c in main.configs.items() if f.startswith("budget_")})
        grids = {m: [Path(main.configs[f].output_dir) for f in main.grid.get(m, {}).values()] for m in curves}
        _merge(extra, budget_section(curves, costs, grids))
    if "frontier" in plans:
        _merge(extra, frontier_section(plans["frontier"], runs, exp, costs))
    extra["json"]["confusable_pairs"] = [list(p) for p in exp.confusable_pairs]
    times = {study: _run_times(plan) for study, plan in plans.items()}
    clock.tick()
    elapsed = clock.minutes()
    _merge(
        extra,
        time_section(
            times, {"main": grid_rows, "multilabel": ml_grid}, stages, elapsed, len(clock.sessions), exp.workers
        ),
    )
    tic = time.perf_counter()
    out = build(
        [d for dirs in runs.values() for d in dirs] + ensembles,
        exp.name,
        exp.results_root,
        covariance=exp.covariance,
        extra=extra,
        progress=progress,
    )
    progress(f"[report] {out} ({time.perf_counter() - tic:.0f} s)")
    return out


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
