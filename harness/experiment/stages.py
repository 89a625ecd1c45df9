"""Running an experiment: the stages (upstream waves, ensembles, shift, transfer, report) on a
pool of workers, the clock over sessions, and the records of finished runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

from harness.experiment.choice import _choose_temperatures, _extend_grids, unfinished_grid_runs
from harness.experiment.clock import _Clock
from harness.experiment.config import MAX_WORKERS, Experiment
from harness.experiment.jobs import planned_jobs
from harness.experiment.plan import (
    _budget_and_conditions,
    _finished,
    _first_wave,
    _interleaved,
    _Plan,
    _study_runs,
    frontier_plan,
)
from harness.experiment.report_stage import report_stage
from harness.experiment.validate import validate_experiment
from harness.folder_paths import EXPERIMENT_LOCK
from harness.io import RunLock, path_under
from harness.upstream.train import same_config


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
    """One upstream model's transfer sweep (in a worker process): its progress lines (each fine-tuning run as it
    ends, with the time left; a long run's steps every 15 s) printed with the model's name,
    ``[downstream hom_s0] 3/48 ...``."""
    from harness.downstream.sweep import sweep

    name = Path(out).name
    return sweep(
        model,
        tasks,
        out,
        settings,
        progress=lambda s: print(s.replace("[downstream]", f"[downstream {name}]", 1), flush=True),
    )


def run_experiment(
    exp: Experiment, progress: Callable[[str], None] = print, train: bool = True, reevaluate: bool = False
) -> Path:
    """Run (or finish) every stage of ``exp``; return the report folder. With ``train=False`` no upstream run
    is trained: the report is built from the runs that have finished (restored from records where missing),
    and a condition reports the seeds it has (the report lists the runs left out). Finished runs evaluated with
    another Monte Carlo noise than this version draws are named; with ``reevaluate`` they are re-evaluated first
    (:func:`harness.upstream.reevaluate.reevaluate`, no training) and recorded again.

    Raises:
        ValueError: a bad experiment (see :func:`validate_experiment`), or any stage's own errors.
    """
    from harness.experiment.verdicts import validate_primary
    from harness.workers import Workers

    workers = Workers(exp.workers)
    with workers:  # closed on every way out: a bad experiment stops the warmed processes at once
        if train and exp.workers <= MAX_WORKERS:  # (a larger count is refused by the checks below)
            workers.warm(_warm_up)  # the worker processes start and import while the experiment is checked
        plans = validate_experiment(exp)
        validate_primary(exp)
        with RunLock(
            exp.runs_root,
            name=EXPERIMENT_LOCK,
            clean=False,
            what="one harness run at a time uses a runs_root: wait for it to finish or stop it, or give this "
            "experiment its own runs_root=...",
        ):
            return _locked(exp, plans, workers, progress, train, reevaluate)


def _warm_up() -> None:
    """A worker process's start-up, before its first job: the libraries every upstream run imports (timm,
    torchvision, accelerate and the training loop; ``torch`` is imported by :func:`harness.workers.init_worker`)."""
    import harness.upstream.train  # noqa: F401


def _locked(
    exp: Experiment,
    plans: "dict[str, _Plan]",
    workers: Any,
    progress: Callable[[str], None],
    train: bool,
    reevaluate: bool,
) -> Path:
    """:func:`run_experiment` once its lock is held: the records restored, then every stage."""
    root = path_under(exp.runs_root, exp.name)
    if not train:  # before any folder is made (audit26 A26-09)
        _check_grids_finished(exp, plans)
    clock = _Clock(root / "sessions.json")  # its file checked before any work (audit19 A19-09)
    root.mkdir(parents=True, exist_ok=True)
    if exp.records:
        restored = sync_records(exp, restore=True, plans=plans)
        if restored:
            progress(f"[records] restored {restored} finished run(s) from {records_dir(exp)}")
    with workers:  # stopped before the lock is released
        _reevaluate_stage(exp, root, workers, progress, reevaluate)
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


def _reevaluate_stage(exp: Experiment, root: Path, workers: Any, progress: Callable[[str], None], run: bool) -> None:
    """The finished upstream runs whose metrics were evaluated with another Monte Carlo noise than this version
    draws (:func:`harness.upstream.reevaluate.needs_reevaluation`): named, or with ``run`` re-evaluated (one job
    each) and recorded again."""
    from harness.upstream.reevaluate import needs_reevaluation, reevaluate

    up = path_under(root, "upstream")
    stale = [d for d in sorted(up.glob("*")) if d.is_dir() and needs_reevaluation(d)] if up.is_dir() else []
    if not stale:
        return
    names = ", ".join(d.name for d in stale[:6]) + (f" and {len(stale) - 6} more" if len(stale) > 6 else "")
    if not run:
        progress(
            f"[reevaluate] {len(stale)} finished run(s) were evaluated with another Monte Carlo noise than this "
            f"version draws ({names}): their metrics are not comparable with new runs'; harness run --reevaluate "
            "re-evaluates them from their model.pt (no training)"
        )
        return
    workers.expect(len(stale))
    for d in stale:
        workers.submit("reevaluate", d.name, reevaluate, (str(d),))
    workers.wait(progress, lambda: sync_records(exp) if exp.records else None, stages={"reevaluate"})
    progress(f"[reevaluate] {len(stale)} run(s) re-evaluated with this version's noise ({names})")


def records_dir(exp: Experiment) -> Path:
    """Where the experiment keeps its runs' compact records (beside its report, ``<results_root>/<name>/records``;
    a restore also reads the reference's, ``<reference_root>/<name>/records``)."""
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
    if restore:  # from this run's records, then from the reference's (the committed ones) for runs it lacks
        planned = {Path(c.output_dir).name: to_yaml(c) for p in (plans or {}).values() for c in p.configs.values()}
        ref = path_under(exp.reference_root, exp.name, "records")
        found = {r.name: r for folder in (ref, rec) if folder.is_dir() for r in sorted(folder.glob("*")) if r.is_dir()}
        todo = [r for r in found.values() if not (up / r.name / "metrics.json").is_file()]
        for r in todo:  # every record checked before any is restored
            verify_record(r)
        return sum(restore_record(r, path_under(up, r.name), planned.get(r.name), same_config) for r in todo)
    return sum(save_record(d, rec / d.name) for d in sorted(up.glob("*")) if d.is_dir())


def sync_records_locked(exp: Experiment) -> "tuple[int, int]":
    """``harness run --sync-records``: restore the missing run folders from their records, then record the finished
    runs, holding the experiment's lock (:data:`EXPERIMENT_LOCK`), so a ``harness run`` training in the same
    ``runs_root`` refuses it. Returns ``(restored, saved)``.

    Raises:
        ValueError: no records kept (``records: false``), a root in or holding another experiment's
            (:func:`harness.experiment.roots.check_outside_experiments`), another process holds the lock, or a record
            does not verify.
    """
    if not exp.records:
        raise ValueError(
            f"experiment {exp.name!r} keeps no records (records: false), so --sync-records has nothing to save or "
            "restore: give records=true to keep a compact record of each finished run, or run without --sync-records"
        )
    from harness.experiment.roots import check_outside_experiments

    check_outside_experiments(exp)  # its roots apart from other experiments' (audit19 A19-17, audit20 A20-06)
    with RunLock(
        exp.runs_root,
        name=EXPERIMENT_LOCK,
        clean=False,
        what="a harness run is using this runs_root: sync the records when it has finished (it records "
        "its runs as they finish)",
    ):
        return sync_records(exp, restore=True), sync_records(exp)


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
    return report_stage(exp, plans, root, clock, workers, study, ensembles, stages, progress, train)


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
    evaluated = set(exp.evaluated())

    def follow_up(d: Path) -> None:  # a final run of the main study: shift predictions and transfer
        if final.get(str(d)) in evaluated:
            _evaluate_run(exp, root, workers, settings, d)

    def then(cfg: Any) -> "Optional[Callable[[Any], None]]":
        return (lambda _: follow_up(Path(cfg.output_dir))) if str(Path(cfg.output_dir)) in final else None

    def tick() -> None:  # after every job: the clock, and the records of runs that just finished
        clock.tick()
        if exp.records:
            sync_records(exp)

    # priority: the main study, then the budget curves, then the multi-label study, then the frontier
    queue([main.configs[f] for f in _first_wave(main, exp.methods, exp.seeds)], then)
    workers.wait(progress, tick, stages={"upstream"})
    _extend_main_grids(exp, main, workers, progress, queue, tick, train)
    second, grid_rows = _choose_temperatures(main, exp.methods, exp.seeds)
    runs = _study_runs(main, exp.methods, exp.seeds)
    final = {str(d): m for m, dirs in runs.items() for d in dirs}
    if not main.grid_overrides:
        for method in main.grid:  # the chosen τ's run is trained already
            follow_up(runs[method][0])
    queue([main.configs[f] for f in second], then)
    queued = set(main.configs)  # the main study's runs, all queued by now
    budget, conditions = _budget_and_conditions(exp, main)
    queue([main.configs[f] for f in _interleaved(conditions, budget) if f not in queued])
    ml_plan, ml_grid = plans.get("multilabel"), []
    if ml_plan is not None:
        queue([ml_plan.configs[f] for f in _first_wave(ml_plan, ml.methods, ml.seeds)])
    workers.wait(progress, tick, stages={"upstream"})
    if ml_plan is not None:
        folders, ml_grid = _choose_temperatures(ml_plan, ml.methods, ml.seeds)
        queue([ml_plan.configs[f] for f in folders])
    workers.wait(progress, tick)
    if exp.frontier.schedules:  # diagnostics: their time is not the experiment's
        _frontier_stage(exp, plans, clock, workers, progress, queue)
    workers.close()
    _check_main_finished(runs)
    ml_runs = {} if ml_plan is None else _study_runs(ml_plan, exp.multilabel.methods, exp.multilabel.seeds)
    return _Study(runs, grid_rows, budget, conditions, ml_runs, ml_grid, settings, left_out)


def _evaluate_run(exp: Experiment, root: Path, workers: Any, settings: Any, d: Path) -> None:
    """Queue what follows a final run ``d`` of the main study: its shift predictions (with a ``shift`` section) and
    its transfer (with downstream tasks; ``settings``: their :class:`harness.downstream.config.SweepSettings`)."""
    from harness.shift.predict import predict_run

    if exp.shift is not None:
        # the experiment's shift section defines its runs' sets: another subset there replaces them (overwrite)
        workers.submit("shift", d.name, partial(predict_run, overwrite=True), (d, exp.shift))
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


def _extend_main_grids(
    exp: Experiment,
    main: _Plan,
    workers: Any,
    progress: Callable[[str], None],
    queue: Callable[[list], None],
    tick: Callable[[], None],
    train: bool,
) -> None:
    """While the best τ of a grid of the main study lies on its edge, queue the runs past it
    (:func:`harness.experiment.choice._extend_grids`, at most ``grid_extensions`` per method) and wait for them."""
    more = _extend_grids(main, exp.temperature_grid, exp.grid_extensions)
    while more:  # the best τ lay on the grid's edge: try past it
        progress(f"[τ grid] extended: {', '.join(more)}")
        if not train:  # an extension not trained: nothing to choose from (audit26 A26-09)
            _check_grids_finished(exp, {"main": main}, more)
        workers.expect(len(more) if train else 0)
        queue([main.configs[f] for f in more])
        workers.wait(progress, tick, stages={"upstream"})
        more = _extend_grids(main, exp.temperature_grid, exp.grid_extensions)


def _frontier_stage(
    exp: Experiment,
    plans: "dict[str, _Plan]",
    clock: _Clock,
    workers: Any,
    progress: Callable[[str], None],
    queue: Callable[[list], None],
) -> None:
    """The frontier's runs (:func:`harness.experiment.plan.frontier_plan`, added to ``plans``), queued and waited
    for; diagnostics, so their time is left out of the experiment's clock."""
    plans["frontier"] = frontier_plan(plans["main"], exp)
    tic = time.perf_counter()
    queue(list(plans["frontier"].configs.values()))
    workers.wait(progress, lambda: sync_records(exp) if exp.records else None)
    clock.exclude(time.perf_counter() - tic)


def _check_grids_finished(exp: Experiment, plans: "dict[str, _Plan]", more: "list[str]" = ()) -> None:
    """Without training (``--no-train``) every grid run a method's τ is chosen from has finished or is in the records
    (restored first); ``more``: only these extensions. Raises ValueError naming the runs, where sought, the fix."""
    kept = set()
    for folder in (path_under(exp.reference_root, exp.name, "records"), records_dir(exp)) if exp.records else ():
        kept |= {r.name for r in folder.iterdir() if r.is_dir()} if folder.is_dir() else set()
    missing = unfinished_grid_runs([plans["main"]] if more else list(plans.values()), kept, more)
    if missing:
        said = "; ".join(f"{m}: {', '.join(names)}" for m, names in missing.items())
        raise ValueError(
            f"harness run --no-train builds its report from finished runs only, and the grid a method's τ (or tuned "
            f"setting) is chosen from has unfinished runs ({said}; looked for in "
            f"{path_under(exp.runs_root, exp.name, 'upstream')}): run harness run {exp.name} without --no-train to "
            f"train them, or give runs_root= the folder that holds this experiment's runs (now {exp.runs_root})"
        )


def _check_main_finished(runs: "dict[str, list[Path]]") -> None:
    """Every run of the main study has finished (only without training can one be missing).

    Raises:
        ValueError: naming the missing runs.
    """
    missing = [d.name for dirs in runs.values() for d in dirs if not (d / "metrics.json").is_file()]
    if missing:  # only without training: a trained study has every run
        raise ValueError(
            f"the main study is not finished ({', '.join(missing)} missing): run harness run without "
            "--no-train to train them"
        )


def _evaluation_stage(
    exp: Experiment, root: Path, workers: Any, study: _Study, progress: Callable[[str], None]
) -> "tuple[list[Path], dict[str, float]]":
    """The ensembles of each method's first seeds, and the ensembles' shifted predictions (averages of their
    members'); returns the ensemble folders and the seconds per stage."""
    from harness.ensemble_folder import build_ensemble
    from harness.shift.predict import average_ensemble

    stages: "dict[str, float]" = {}
    runs = study.runs
    tic = time.perf_counter()
    ensembles = []
    for method, dirs in runs.items():
        for size in exp.ensemble_sizes:
            out = path_under(root, "ensembles", f"{method}_x{size}")
            build_ensemble(dirs[:size], out, overwrite=True)  # the experiment's own: rebuilt from its runs now
            ensembles.append(out)
            progress(f"[ensemble] {method} x{size}")
    stages["ensembles"] = time.perf_counter() - tic
    for stage in ("shift", "downstream"):
        if stage in workers.seconds:
            stages[stage] = workers.seconds[stage]
    if exp.shift is not None:  # the ensembles' shifted predictions: averages of their members'
        tic = time.perf_counter()
        for e in ensembles:
            if e.name.rsplit("_x", 1)[0] in exp.evaluated():
                average_ensemble(e)
        stages["shift"] = stages.get("shift", 0.0) + time.perf_counter() - tic

    return ensembles, stages
