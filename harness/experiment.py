"""``harness run EXPERIMENT``: pretraining -> ensembles -> VTAB-style transfer -> one report.

An experiment file (YAML, in ``harness/experiments/`` or any path) names the upstream methods and
seeds, the temperature grid of the het methods, the ensemble sizes, an optional multi-label study
and the downstream tasks. Every setting is checked before the first run. Every stage resumes:
upstream runs finish or skip, sweeps skip finished fine-tunes, ensembles and the report are
recomputed from what is on disk. Outputs: run folders under ``runs/<name>/`` and the report under
``results/<name>/``.

Temperature (paper Sec. 4: "τ is chosen from a grid on a held-out set"): for every method with a
noisy head, the first seed is trained at each τ of ``temperature_grid``; the τ with the lowest NLL
on the held-out split (``data.heldout_split``, noisy labels, as a user has them) is kept and the
other seeds are trained at it. The evaluation split is never used to choose anything.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from harness import metrics as M
from harness.shift import ShiftSettings

EXPERIMENTS = Path(__file__).parent / "experiments"


@dataclass
class DownstreamSection:
    """Transfer of every upstream model (see :class:`downstream.sweep.SweepSettings`)."""

    tasks: List[str] = field(default_factory=lambda: ["demo"])
    preset: str = "demo"
    settings: Dict[str, Any] = field(default_factory=dict)


@dataclass
class MultilabelSection:
    """A second study on the same images with multi-label targets (the JFT-style case), reported in
    its own table: sigmoid heads trained on label sets, scored by prec@1, mAP and sigmoid NLL.

    Attributes:
        upstream_overrides: ``key=value`` overrides added to the experiment's (e.g.
            ``data.multilabel=true``).
        methods: method name -> head options (``link: sigmoid``); empty skips the study.
        seeds: seeds of every method.
        temperature_grid: τ grid of its noisy methods (chosen on held-out sigmoid NLL); empty keeps
            the head's τ.
    """

    upstream_overrides: List[str] = field(default_factory=list)
    methods: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    seeds: List[int] = field(default_factory=list)
    temperature_grid: List[float] = field(default_factory=list)


@dataclass
class FrontierSection:
    """Accuracy against CPU-minutes of candidate schedules: the first seed of each of ``methods``
    (at its chosen τ) trained with each schedule's overrides, reported beside the experiment's own
    schedule (the chosen point). These runs are diagnostics: they come after the study and their
    time is reported apart.

    Attributes:
        methods: some of the experiment's methods (default ``[method]``).
        method: the single method of older experiment files.
        schedules: name -> ``key=value`` overrides (e.g. ``{"10 epochs": [train.epochs=10]}``).
    """

    method: str = "hom"
    schedules: Dict[str, List[str]] = field(default_factory=dict)
    methods: List[str] = field(default_factory=list)

    def names(self) -> "list[str]":
        return list(self.methods) or [self.method]


@dataclass
class BudgetSection:
    """Budget curves: the first seed of each of ``methods`` (at its chosen τ) trained for each of
    ``epochs`` (its own schedule of that length: warm-up and cosine decay scale with it), so
    top-1, NLL and ECE can be read against CPU-minutes. A run whose config equals one of the study's
    (the main schedule, or a τ-grid run at the chosen τ) is reused, not trained again.

    Attributes:
        methods: some of the experiment's methods, in order of priority (they are queued so).
        epochs: epoch counts of the curve.
    """

    methods: List[str] = field(default_factory=list)
    epochs: List[int] = field(default_factory=list)


@dataclass
class ConditionSection:
    """Another training condition of the same methods (e.g. another kind of label noise): each of
    ``methods`` (names of the experiment's methods, at their chosen τ) trained for each of ``seeds``
    with ``upstream_overrides`` added, compared against hom like the main study.

    Attributes:
        description: one line for the report.
        upstream_overrides: ``key=value`` overrides of the condition.
        methods: some of the experiment's methods (``hom`` among them for the comparison).
        seeds: seeds of every method.
    """

    description: str = ""
    upstream_overrides: List[str] = field(default_factory=list)
    methods: List[str] = field(default_factory=list)
    seeds: List[int] = field(default_factory=lambda: [0])


@dataclass
class Experiment:
    """One experiment.

    Attributes:
        name: report folder ``results/<name>``; run folders under ``runs/<name>``.
        upstream_config: an upstream config (a path, or a file name in ``upstream/configs``).
        upstream_overrides: ``key=value`` overrides of that config for every run.
        methods: method name -> head options (replacing the config's ``model.head``); the key
            ``overrides`` holds the method's own ``key=value`` training settings (e.g.
            ``[train.loss=forward]`` for a forward-corrected hom baseline).
        seeds: upstream seeds of every method.
        temperature_grid: τ values tried for every method whose head has noise (covariance not
            ``none``), on the first seed, chosen by held-out NLL; empty keeps the head's τ.
        grid_overrides: ``key=value`` overrides of the τ-grid runs only (e.g. a shorter schedule,
            ``[train.epochs=6, train.eval_every=6]``); when given, every seed of the chosen τ is
            trained at the study's own schedule after the grid.
        grid_extensions: when the chosen τ lies on the edge of the values tried, the grid is
            extended past that edge (τ/2 below, 1.5τ above), at most this many times per method.
        ensemble_sizes: ensembles of the first n seeds of each method.
        multilabel: the optional multi-label study.
        frontier: optional candidate schedules, for accuracy against CPU-minutes.
        budget: optional budget curves (epochs against CPU-minutes, per method).
        conditions: optional further training conditions (name -> :class:`ConditionSection`), each
            compared against hom in its own section; their runs are under ``runs/<name>/upstream/``
            as ``<condition>_<method>_s<seed>``.
        downstream: transfer settings; ``tasks: []`` skips the stage.
        covariance: run the covariance analysis in the report.
        runs_root, results_root: where the run folders and the report go.
        confusable_pairs: class pairs people are known to confuse (e.g. cat/dog); the report says how
            many of the top covariance pairs are among them.
        workers: jobs (upstream runs, shift predictions, transfers) run at once, each in its own
            process (see :class:`Workers`).
        shift: evaluation under distribution shift of every model and ensemble of the main study
            (:class:`harness.shift.ShiftSettings`: corrupted copies of the evaluation split, OOD sets),
            reported in the shift section; None (the default) skips the stage. The multi-label study
            (sigmoid heads) and the frontier runs are not evaluated under shift.
        evaluate_methods: the methods whose final runs get the shift predictions and the transfer
            (default: all).
        records: keep a compact record of every finished upstream run (config, metrics, compressed
            predictions, final model; no checkpoints) in ``<results_root>/<name>/records/``, to commit as
            runs land; a rerun on a machine that lost ``runs/`` restores them instead of retraining.
    """

    name: str = "digits"
    upstream_config: str = "digits_base.yaml"
    upstream_overrides: List[str] = field(default_factory=list)
    methods: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    seeds: List[int] = field(default_factory=lambda: [0])
    temperature_grid: List[float] = field(default_factory=list)
    grid_overrides: List[str] = field(default_factory=list)
    grid_extensions: int = 0
    ensemble_sizes: List[int] = field(default_factory=list)
    multilabel: MultilabelSection = field(default_factory=MultilabelSection)
    frontier: FrontierSection = field(default_factory=FrontierSection)
    budget: BudgetSection = field(default_factory=BudgetSection)
    conditions: Dict[str, ConditionSection] = field(default_factory=dict)
    downstream: DownstreamSection = field(default_factory=DownstreamSection)
    covariance: bool = True
    runs_root: str = "runs"
    results_root: str = "results"
    description: str = ""
    confusable_pairs: List[List[str]] = field(default_factory=list)
    workers: int = 1
    shift: Optional[ShiftSettings] = None
    records: bool = False
    evaluate_methods: List[str] = field(default_factory=list)


def find_experiment(name_or_path: str) -> Path:
    """A path, or the name of a file in ``harness/experiments`` (``digits`` -> ``digits.yaml``).

    Raises:
        FileNotFoundError: neither (the message lists the built-in experiments).
    """
    p = Path(name_or_path)
    if p.is_file():
        return p
    built_in = EXPERIMENTS / f"{name_or_path}.yaml"
    if built_in.is_file():
        return built_in
    names = sorted(f.stem for f in EXPERIMENTS.glob("*.yaml"))
    raise FileNotFoundError(f"no experiment {name_or_path!r}: give a YAML path or one of {', '.join(names)}")


def _upstream_config_path(ref: str) -> Path:
    import upstream

    p = Path(ref)
    return p if p.is_file() else Path(upstream.__file__).parent / "configs" / ref


def _noisy(head: dict) -> bool:
    return head.get("covariance", "low_rank") != "none"


@dataclass
class _Plan:
    """The upstream runs of one study: per method, the grid runs (τ -> folder) and the seeds' configs."""

    configs: "dict[str, Any]" = field(default_factory=dict)  # folder name -> UpstreamConfig
    grid: "dict[str, dict[float, str]]" = field(default_factory=dict)  # method -> τ -> folder name
    chosen: "dict[str, float]" = field(default_factory=dict)  # method -> τ chosen on the held-out split
    heads: "dict[str, dict]" = field(default_factory=dict)  # method -> head options
    seeds: "list[int]" = field(default_factory=list)
    grid_overrides: "list[str]" = field(default_factory=list)  # of the grid runs (own schedule when given)
    make: Optional[Callable[..., Any]] = None  # (method, head, seed, folder, extra overrides) -> config

    def grid_run(self, method: str, tau: float) -> str:
        """Add the grid run of ``method`` at ``tau`` (first seed); returns its folder name."""
        folder = f"{'grid_' if self.grid_overrides else ''}{method}_t{tau:g}_s{self.seeds[0]}"
        self.configs[folder] = self.make(method, {**self.heads[method], "temperature": float(tau)}, self.seeds[0],
                                         folder, self.grid_overrides)
        self.grid[method][float(tau)] = folder
        return folder

    def final_head(self, method: str) -> dict:
        """The method's head options at its chosen τ (as given when it has no grid)."""
        head = dict(self.heads[method])
        if method in self.grid:
            head["temperature"] = self.chosen[method]
        return head


def _plan(exp: Experiment, root: Path, prefix: str, methods: dict, seeds: list, grid: list, overrides: list,
          grid_overrides: "list[str]" = ()) -> _Plan:
    """Every config of a study, validated (nothing is run or written)."""
    from harness.config import load_config
    from upstream.config import UpstreamConfig, validate

    base = _upstream_config_path(exp.upstream_config)
    own = {m: list(h.get("overrides", [])) for m, h in methods.items()}  # a method's own training settings
    methods = {m: {k: v for k, v in h.items() if k != "overrides"} for m, h in methods.items()}
    plan = _Plan(heads={m: dict(h) for m, h in methods.items()}, seeds=list(seeds), grid_overrides=list(grid_overrides))

    def config(method: str, head: dict, seed: int, folder: str, extra: "list[str]" = ()) -> Any:
        cfg = load_config(UpstreamConfig, base, [*exp.upstream_overrides, *overrides, *own.get(method, []), *extra,
                                                 f"name={exp.name}_{prefix}{folder}", f"seed={seed}",
                                                 f"output_dir={root / 'upstream' / (prefix + folder)}"])
        cfg.model.head = dict(head)
        try:
            validate(cfg)
        except ValueError as e:
            raise ValueError(f"method {method!r}: {e}") from e
        if cfg.data.heldout_split is None and grid and _noisy(head):
            raise ValueError(f"temperature_grid needs a held-out split to choose on: set data.heldout_split in "
                             f"{base.name} or upstream_overrides")
        return cfg

    plan.make = config
    for method, head in methods.items():
        if grid and _noisy(head):
            plan.grid[method] = {}
            for tau in grid:
                plan.grid_run(method, tau)
        else:
            for seed in seeds:
                plan.configs[f"{method}_s{seed}"] = config(method, head, seed, f"{method}_s{seed}")
    return plan


def _same_run(a: Any, b: Any) -> bool:
    """Whether two upstream configs train the same model (they differ at most in name and folder)."""
    from dataclasses import asdict

    strip = lambda c: {k: v for k, v in asdict(c).items() if k not in ("name", "output_dir")}  # noqa: E731
    return strip(a) == strip(b)


def _derived(plan: _Plan, method: str, folder: str, overrides: "list[str]") -> str:
    """Add the first seed of ``method`` at its final head with ``overrides`` under ``folder``, unless a
    planned run is the same (then that run's folder is returned and nothing is added)."""
    cfg = plan.make(method, plan.final_head(method), plan.seeds[0], folder, overrides)
    same = next((f for f, c in plan.configs.items() if _same_run(c, cfg)), None)
    if same is not None:
        return same
    plan.configs[folder] = cfg
    return folder


def validate_experiment(exp: Experiment) -> "dict[str, _Plan]":
    """Check the whole experiment before any work: methods, seeds, ensembles, every upstream config
    (each method, seed and τ), the multi-label study and the downstream settings.

    Returns:
        The plans of the studies (``main``, and ``multilabel`` when it has methods).

    Raises:
        ValueError: the first problem found; the message names the setting and the fix.
    """
    from downstream.sweep import PRESETS, SweepSettings

    if not exp.methods:
        raise ValueError("the experiment names no methods: add e.g. methods: {hom: {covariance: none}}")
    if not exp.seeds:
        raise ValueError("seeds is empty: give at least one seed, e.g. seeds: [0]")
    if len(set(exp.seeds)) != len(exp.seeds):
        raise ValueError(f"seeds {exp.seeds} repeat a seed: give distinct seeds")
    if exp.workers < 1:
        raise ValueError(f"workers must be >= 1, got {exp.workers}")
    unknown = [m for m in exp.evaluate_methods if m not in exp.methods]
    if unknown:
        raise ValueError(f"evaluate_methods {', '.join(unknown)} not among the methods {', '.join(exp.methods)}")
    if any(n > len(exp.seeds) or n < 2 for n in exp.ensemble_sizes):
        raise ValueError(f"ensemble sizes {exp.ensemble_sizes} must lie in [2, number of seeds = {len(exp.seeds)}]")
    for tau in [*exp.temperature_grid, *exp.multilabel.temperature_grid]:
        if not tau > 0:
            raise ValueError(f"temperature_grid values must be > 0, got {tau}")
    if exp.downstream.tasks:
        try:
            SweepSettings(**{**PRESETS[exp.downstream.preset], **exp.downstream.settings})
        except TypeError as e:
            raise ValueError(f"downstream.settings: {e}; see downstream.sweep.SweepSettings for the keys") from e
    if exp.grid_overrides and not exp.temperature_grid:
        raise ValueError("grid_overrides without a temperature_grid have nothing to apply to: drop them or add a grid")
    if exp.grid_extensions < 0:
        raise ValueError(f"grid_extensions must be >= 0, got {exp.grid_extensions}")
    for section, names in (("budget", exp.budget.methods), ("frontier", exp.frontier.names() if exp.frontier.schedules
                                                             else [])):
        unknown = [m for m in names if m not in exp.methods]
        if unknown:
            raise ValueError(f"{section} method(s) {', '.join(unknown)} not among the methods {', '.join(exp.methods)}")
    for cname, cond in exp.conditions.items():
        unknown = [m for m in cond.methods if m not in exp.methods]
        if unknown or not cond.methods or not cond.seeds:
            raise ValueError(f"condition {cname!r}: methods must be some of {', '.join(exp.methods)} and seeds non-empty "
                             f"(got methods {cond.methods}, seeds {cond.seeds})")
    if exp.budget.methods and (not exp.budget.epochs or any(int(e) != e or e < 1 for e in exp.budget.epochs)):
        raise ValueError(f"budget.epochs must be a non-empty list of whole numbers >= 1, got {exp.budget.epochs}")
    root = Path(exp.runs_root) / exp.name
    plans = {"main": _plan(exp, root, "", exp.methods, exp.seeds, exp.temperature_grid, [], exp.grid_overrides)}
    if exp.shift is not None:
        from harness.shift import check_settings

        cfgs = list(plans["main"].configs.values())
        if any(cfg.model.head.get("link", "softmax") != "softmax" for cfg in cfgs):
            raise ValueError("shift: the main study's methods must use the softmax link (shift evaluation covers "
                             "single-label models); drop the shift section or the sigmoid method")
        try:
            check_settings(exp.shift, cfgs[0].data)
        except ValueError as e:
            raise ValueError(f"shift: {e}") from e
    ml = exp.multilabel
    if ml.methods:
        if not ml.seeds:
            raise ValueError("multilabel.seeds is empty: give at least one seed")
        plans["multilabel"] = _plan(exp, root, "multilabel_", ml.methods, ml.seeds, ml.temperature_grid,
                                    ml.upstream_overrides)
        for folder, cfg in plans["multilabel"].configs.items():
            if cfg.model.head.get("link") != "sigmoid":
                raise ValueError(f"multilabel study run {folder}: set link: sigmoid in its head (label sets need "
                                 "the sigmoid link)")
    fr = exp.frontier
    if fr.schedules:  # checked here; built at the chosen τ once it is known (frontier_plan)
        for overrides in fr.schedules.values():
            for method in fr.names():
                plans["main"].make(method, plans["main"].heads[method], exp.seeds[0], "check", list(overrides))
    for cond in exp.conditions.values():
        for method in cond.methods:
            plans["main"].make(method, plans["main"].heads[method], cond.seeds[0], "check", list(cond.upstream_overrides))
    for e in exp.budget.epochs if exp.budget.methods else []:
        plans["main"].make(exp.budget.methods[0], plans["main"].heads[exp.budget.methods[0]], exp.seeds[0], "check",
                           [f"train.epochs={e}", f"train.eval_every={e}"])
    return plans


def _first_wave(plan: _Plan, methods: dict, seeds: list) -> "list[str]":
    """Runs that need no choice: every seed of the methods without a grid, every τ of the grids."""
    return [f for m in methods for f in (list(plan.grid[m].values()) if m in plan.grid else
                                           [f"{m}_s{seed}" for seed in seeds])]


def _heldout(plan: _Plan, method: str) -> "tuple[dict[float, dict], str]":
    """Held-out metrics of every grid run of ``method`` (by τ) and the key that chooses."""
    held = {tau: _metrics(Path(plan.configs[f].output_dir))["heldout_metrics"] for tau, f in plan.grid[method].items()}
    return held, "nll" if "nll" in next(iter(held.values())) else "sigmoid_nll"


def _best_tau(plan: _Plan, method: str) -> float:
    """The τ with the lowest held-out NLL (ties: the smaller τ)."""
    held, key = _heldout(plan, method)
    return min(held, key=lambda t: (held[t][key], t))


def _extend_grids(plan: _Plan, base: "list[float]", limit: int) -> "list[str]":
    """Grid runs to add where the best τ so far lies on the edge of the values tried: τ/2 below the
    smallest, 1.5τ above the largest, at most ``limit`` additions per method. Returns their folders."""
    new = []
    for method, runs in plan.grid.items():
        if len(set(runs) - {float(t) for t in base}) >= limit:
            continue
        best, taus = _best_tau(plan, method), sorted(runs)
        if len(taus) > 1 and best == taus[0]:
            new.append(plan.grid_run(method, float(f"{best / 2:.4g}")))
        elif len(taus) > 1 and best == taus[-1]:
            new.append(plan.grid_run(method, float(f"{best * 1.5:.4g}")))
    return new


def _choose_temperatures(plan: _Plan, methods: dict, seeds: list) -> "tuple[list[str], list[dict]]":
    """After the grid: the τ with the lowest held-out NLL per grid method (ties: the smaller τ); the
    configs of the seeds still to train at it are added to the plan (all of them when the grid runs
    had their own schedule, else all but the first).

    Returns:
        (run folders of the second wave, grid rows: method, τ, held-out metrics, chosen).
    """
    second, rows = [], []
    for method in methods:
        if method not in plan.grid:
            continue
        held, key = _heldout(plan, method)
        best = _best_tau(plan, method)
        for tau in sorted(plan.grid[method]):
            rows.append({"method": method, "temperature": tau, "heldout": held[tau], "chosen": tau == best,
                         "run": plan.configs[plan.grid[method][tau]].output_dir, "key": key})
        plan.chosen[method] = best
        for seed in seeds[0 if plan.grid_overrides else 1:]:
            folder = f"{method}_t{best:g}_s{seed}"
            if folder not in plan.configs:
                plan.configs[folder] = plan.make(method, plan.final_head(method), seed, folder)
            second.append(folder)
    return second, rows


def _study_runs(plan: _Plan, methods: dict, seeds: list) -> "dict[str, list[Path]]":
    """{method: [run folder of each seed]} once both waves are done."""
    runs = {}
    for m in methods:
        if m in plan.grid:
            best = plan.chosen[m]
            own = plan.grid_overrides
            folders = ([] if own else [plan.grid[m][best]]) + [f"{m}_t{best:g}_s{seed}" for seed in seeds[0 if own else 1:]]
        else:
            folders = [f"{m}_s{seed}" for seed in seeds]
        runs[m] = [Path(plan.configs[f].output_dir) for f in folders]
    return runs


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
    from upstream.train import run

    return str(run(cfg, progress=False))


def _train(workers: Any, configs: "list[Any]",
           then: Callable[[Any], Optional[Callable[[Any], None]]] = lambda cfg: None) -> None:
    """Queue upstream runs on ``workers`` (trained, finished, or skipped when done); ``then(cfg)``
    gives each run's callback."""
    for cfg in configs:
        workers.submit("upstream", cfg.name, _train_one, (cfg,), then(cfg))


def _transfer_one(model: str, tasks: "list[str]", out: str, settings: Any) -> dict:
    from downstream.sweep import sweep

    return sweep(model, tasks, out, settings, progress=lambda s: None)


def run_experiment(exp: Experiment, progress: Callable[[str], None] = print) -> Path:
    """Run (or finish) every stage of ``exp``; return the report folder.

    Raises:
        ValueError: a bad experiment (see :func:`validate_experiment`), or any stage's own errors.
    """
    plans = validate_experiment(exp)
    root = Path(exp.runs_root) / exp.name
    root.mkdir(parents=True, exist_ok=True)
    if exp.records:
        restored = sync_records(exp, restore=True)
        if restored:
            progress(f"[records] restored {restored} finished run(s) from {records_dir(exp)}")
    clock = _Clock(root / "sessions.json")
    from harness.workers import Workers

    with Workers(exp.workers) as workers:
        if exp.workers > 1:
            progress(f"[workers] {exp.workers} processes with {workers.threads} thread(s) each")
        return _run_stages(exp, plans, root, clock, workers, progress)


def records_dir(exp: Experiment) -> Path:
    """Where the experiment keeps its runs' compact records."""
    return Path(exp.results_root) / exp.name / "records"


def sync_records(exp: Experiment, restore: bool = False) -> int:
    """Save the record of every finished upstream run of ``exp`` not yet recorded (or, with
    ``restore``, recreate every recorded run folder that is missing); returns how many."""
    from harness.runs import restore_record, save_record

    up, rec = Path(exp.runs_root) / exp.name / "upstream", records_dir(exp)
    if restore:
        return sum(restore_record(r, up / r.name) for r in sorted(rec.glob("*")) if r.is_dir())
    return sum(save_record(d, rec / d.name) for d in sorted(up.glob("*")) if d.is_dir())


def _run_stages(exp: Experiment, plans: "dict[str, _Plan]", root: Path, clock: _Clock, workers: Any,
                progress: Callable[[str], None]) -> Path:
    from downstream.sweep import PRESETS, SweepSettings
    from harness.ensembles import build_ensemble
    from harness.report import build
    from harness.shift import average_ensemble, predict_run

    stages: "dict[str, float]" = {}
    settings = (SweepSettings(**{**PRESETS[exp.downstream.preset], **exp.downstream.settings})
                if exp.downstream.tasks else None)
    main = plans["main"]
    final = {str(Path(main.configs[f].output_dir)) for f in _first_wave(main, exp.methods, exp.seeds)
             if f not in {g for grid in main.grid.values() for g in grid.values()}}
    ml = exp.multilabel
    evaluated = [re.compile(rf"{re.escape(m)}(_t[^_]+)?_s\d+") for m in (exp.evaluate_methods or exp.methods)]

    def follow_up(d: Path) -> None:  # a final run of the main study: shift predictions and transfer
        if not any(r.fullmatch(d.name) for r in evaluated):
            return
        if exp.shift is not None:
            workers.submit("shift", d.name, predict_run, (d, exp.shift))
        if settings is not None:
            workers.submit("downstream", d.name, _transfer_one, (str(d / "model.pt"), list(exp.downstream.tasks),
                                                                 str(root / "downstream" / d.name), settings))

    def then(cfg: Any) -> "Optional[Callable[[Any], None]]":
        return (lambda _: follow_up(Path(cfg.output_dir))) if str(Path(cfg.output_dir)) in final else None

    def tick() -> None:  # after every job: the clock, and the records of runs that just finished
        clock.tick()
        if exp.records:
            sync_records(exp)

    # priority: the main study, then the budget curves, then the multi-label study, then the frontier
    _train(workers, [main.configs[f] for f in _first_wave(main, exp.methods, exp.seeds)], then)
    workers.wait(progress, tick, stages={"upstream"})
    more = _extend_grids(main, exp.temperature_grid, exp.grid_extensions)
    while more:  # the best τ lay on the grid's edge: try past it
        progress(f"[τ grid] extended: {', '.join(more)}")
        _train(workers, [main.configs[f] for f in more])
        workers.wait(progress, tick, stages={"upstream"})
        more = _extend_grids(main, exp.temperature_grid, exp.grid_extensions)
    second, grid_rows = _choose_temperatures(main, exp.methods, exp.seeds)
    runs = _study_runs(main, exp.methods, exp.seeds)
    final = {str(d) for dirs in runs.values() for d in dirs}
    if not main.grid_overrides:
        for method in main.grid:  # the chosen τ's run is trained already
            follow_up(runs[method][0])
    _train(workers, [main.configs[f] for f in second], then)
    conditions = {name: {m: [main.configs.setdefault(f"{name}_{m}_s{sd}", main.make(
        m, main.final_head(m), sd, f"{name}_{m}_s{sd}", list(c.upstream_overrides))) for sd in c.seeds]
        for m in c.methods} for name, c in exp.conditions.items()}
    _train(workers, [cfg for per in conditions.values() for cfgs in per.values() for cfg in cfgs])
    budget = {m: {int(e): _derived(main, m, f"budget_{m}_e{int(e)}", [f"train.epochs={int(e)}",
                                                                      f"train.eval_every={int(e)}"])
                  for e in exp.budget.epochs} for m in exp.budget.methods}
    _train(workers, [main.configs[f] for f in dict.fromkeys(f for per in budget.values() for f in per.values())
                   if f.startswith("budget_")])
    ml_plan, ml_grid = plans.get("multilabel"), []
    if ml_plan is not None:
        _train(workers, [ml_plan.configs[f] for f in _first_wave(ml_plan, ml.methods, ml.seeds)])
    workers.wait(progress, tick, stages={"upstream"})
    if ml_plan is not None:
        folders, ml_grid = _choose_temperatures(ml_plan, ml.methods, ml.seeds)
        _train(workers, [ml_plan.configs[f] for f in folders])
    workers.wait(progress, tick)
    if exp.frontier.schedules:  # diagnostics: their time is not the experiment's
        plans["frontier"] = frontier_plan(main, exp)
        tic = time.perf_counter()
        _train(workers, list(plans["frontier"].configs.values()))
        workers.wait(progress, lambda: sync_records(exp) if exp.records else None)
        clock.exclude(time.perf_counter() - tic)
    workers.close()

    tic = time.perf_counter()
    ensembles = []
    for method, dirs in runs.items():
        for size in exp.ensemble_sizes:
            out = root / "ensembles" / f"{method}_x{size}"
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

    ml_runs = {} if ml_plan is None else _study_runs(ml_plan, exp.multilabel.methods, exp.multilabel.seeds)

    extra: dict = {"tables": [], "text": [], "json": {}}
    if settings is not None:
        moved = {m: dirs for m, dirs in runs.items() if m in (exp.evaluate_methods or exp.methods)}
        per_run = {d: workers.results[("downstream", d.name)] for dirs in moved.values() for d in dirs}
        _merge(extra, downstream_section(moved, per_run))

    progress("[report]")
    base = _upstream_config_path(exp.upstream_config)
    extra["text"].append(f"Experiment: {exp.description or exp.name}. Schedule: upstream config {base.name} with "
                         f"{' '.join(exp.upstream_overrides) or 'no overrides'}; seeds {list(exp.seeds)}; methods "
                         + "; ".join(f"{m} {dict(h)}" for m, h in exp.methods.items()) + ".")
    first = main.configs[Path(runs[next(iter(runs))][0]).name]
    precisions = sorted({str(_metrics(d).get("mixed_precision")) for dirs in runs.values() for d in dirs})
    extra["json"]["schedule"] = {"upstream_config": base.name, "upstream_overrides": list(exp.upstream_overrides),
                                 "epochs": first.train.epochs, "backbone": first.model.backbone,
                                 "batch_size": first.data.batch_size, "grid_overrides": list(exp.grid_overrides),
                                 "mixed_precision": precisions}
    if len(precisions) > 1:
        extra["text"].append(f"Note: the study's runs used different precisions ({', '.join(precisions)}; train."
                             "mixed_precision=auto follows each machine's CPU): part of any difference may come from it.")
    if grid_rows:
        _merge(extra, temperature_section(grid_rows, "Temperature τ chosen on the held-out split"))
    _merge(extra, comparison_section(runs, ensembles))
    for name, per in conditions.items():
        cond = exp.conditions[name]
        part = comparison_section({m: [Path(c.output_dir) for c in cfgs] for m, cfgs in per.items()}, [],
                                  label=f"Condition {name} ({cond.description or ' '.join(cond.upstream_overrides)})")
        extra["json"].setdefault("conditions", {})[name] = part.pop("json")
        _merge(extra, part)
    if ml_runs:
        _merge(extra, multilabel_section(ml_runs, ml_grid))
    if budget:
        plans["budget"] = _Plan(configs={f: c for f, c in main.configs.items() if f.startswith("budget_")})
        _merge(extra, budget_section({m: {e: Path(main.configs[f].output_dir) for e, f in per.items()}
                                      for m, per in budget.items()}))
    if "frontier" in plans:
        _merge(extra, frontier_section(plans["frontier"], runs, exp))
    extra["json"]["confusable_pairs"] = [list(p) for p in exp.confusable_pairs]
    times = {study: _run_times(plan) for study, plan in plans.items()}
    clock.tick()
    elapsed = clock.minutes()
    _merge(extra, time_section(times, {"main": grid_rows, "multilabel": ml_grid}, stages, elapsed,
                               len(clock.sessions), exp.workers))
    tic = time.perf_counter()
    out = build([d for dirs in runs.values() for d in dirs] + ensembles, exp.name, exp.results_root,
                covariance=exp.covariance, extra=extra)
    progress(f"[report] {out} ({time.perf_counter() - tic:.0f} s)")
    return out


def _merge(into: dict, part: dict) -> dict:
    """Append a section's tables, text and JSON to ``into``; returns ``into``."""
    into.setdefault("tables", []).extend(part.get("tables", []))
    into.setdefault("text", []).extend(part.get("text", []))
    into.setdefault("json", {}).update(part.get("json", {}))
    into.setdefault("figures", []).extend(part.get("figures", []))
    return into


def _metrics(d: Path) -> dict:
    return json.loads((d / "metrics.json").read_text())


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


def time_section(times: "dict[str, dict[str, float]]", grids: "dict[str, list[dict]]", stages: "dict[str, float]",
                 elapsed: float, sessions: int, workers: int) -> dict:
    """Wall time: the experiment's elapsed minutes over all its sessions (without the frontier runs),
    and per stage: each study's upstream runs (each run's own total over its sessions, from its
    metrics.json), of which the τ-grid runs not kept, then ensembles and downstream (this session)."""
    from harness.provenance import machine

    rows, total = [], 0.0
    labels = {"main": "upstream", "multilabel": "multi-label study"}
    for study, per in times.items():
        if not per or study not in labels:
            continue
        dropped = sum(per.get(Path(r["run"]).name, 0.0) for r in grids.get(study, []) if not r["chosen"])
        rows.append([f"{labels[study]}: {len(per)} runs", f"{sum(per.values()) / 60:.1f}",
                     f"of which {dropped / 60:.1f} in τ-grid runs not kept" if dropped else ""])
        total += sum(per.values())
    for k, v in stages.items():
        rows.append([k, f"{v / 60:.1f}", "this session" + (": its jobs' own time, summed" if k != "ensembles" else "")])
        total += v
    m = machine()
    rows.append(["sum of the above", f"{total / 60:.1f}", f"{workers} job(s) at a time"])
    rows.append(["elapsed, start to report (the experiment's wall time)", f"{elapsed:.1f}",
                 f"{sessions} session(s); {m.get('cpu')}, {m.get('cores')} cores"])
    if times.get("frontier"):
        rows.append([f"frontier: {len(times['frontier'])} runs (diagnostic, not in the total)",
                     f"{sum(times['frontier'].values()) / 60:.1f}", ""])
    return {"tables": [("Wall time per stage (minutes; upstream runs: each run's own time, summed over its sessions; "
                        "shift and downstream: their jobs' own time; jobs run side by side and overlap, so the sum "
                        "exceeds the elapsed time)",
                        ["stage", "minutes", "note"], rows)],
            "text": [f"Wall time: {elapsed:.1f} minutes from start to report ({sessions} session(s), {workers} "
                     f"job(s) at a time) on {m.get('cpu')} with {m.get('cores')} cores, frontier runs excluded."],
            "json": {"wall_minutes": {"elapsed": elapsed, "sessions": sessions, "sum_of_stages": total / 60,
                                      "runs": {s: {k: v / 60 for k, v in per.items()} for s, per in times.items()},
                                      "stages": {k: v / 60 for k, v in stages.items()}}}}


def _point(d: Path) -> dict:
    """One run as a point of a curve: epochs, CPU-minutes (wall minutes x threads), evaluation-split
    top-1 (or prec@1), NLL and ECE, and the held-out split's NLL and top-1."""
    m = _metrics(d)
    acc = "top1" if "top1" in m["metrics"] else "prec@1"
    cfg = json.loads((d / "run.json").read_text())["config"]
    wall = float(m.get("wall_seconds") or 0.0) / 60
    held = m.get("heldout_metrics") or {}
    return {"epochs": cfg["train"]["epochs"], "backbone": cfg["model"]["backbone"], "wall_minutes": wall,
            "threads": m.get("threads"), "cpu_minutes": wall * (m.get("threads") or 1), acc: m["metrics"][acc],
            "nll": m["metrics"].get("nll", m["metrics"].get("sigmoid_nll")), "ece": m["metrics"].get("ece"),
            "heldout_nll": held.get("nll"), "heldout_top1": held.get("top1"),
            "precision": m.get("mixed_precision"), "run": str(d)}


def frontier_plan(main: _Plan, exp: Experiment) -> _Plan:
    """The frontier's runs: the first seed of each frontier method, at its chosen τ, per schedule."""
    plan = _Plan()
    for i, overrides in enumerate(exp.frontier.schedules.values()):
        for m in exp.frontier.names():
            folder = f"frontier{i}_{m}_s{exp.seeds[0]}"
            plan.configs[folder] = main.make(m, main.final_head(m), exp.seeds[0], folder, list(overrides))
    return plan


def frontier_section(plan: _Plan, runs: "dict[str, list[Path]]", exp: Experiment) -> dict:
    """Accuracy against CPU-minutes, per frontier method: each candidate schedule's run and the study's
    own (chosen)."""
    rows = []
    for m in exp.frontier.names():
        rows.append({"method": m, "schedule": "this study's schedule (chosen)" + (
            f": {' '.join(exp.upstream_overrides)}" if exp.upstream_overrides else ""), **_point(runs[m][0])})
        for i, name in enumerate(exp.frontier.schedules):
            cfg = plan.configs[f"frontier{i}_{m}_s{exp.seeds[0]}"]
            rows.append({"method": m, "schedule": name, **_point(Path(cfg.output_dir))})
    rows.sort(key=lambda r: (exp.frontier.names().index(r["method"]), r["cpu_minutes"]))
    acc = "top1" if "top1" in rows[0] else "prec@1"
    table = [[r["method"], r["schedule"], r["backbone"], str(r["epochs"]), f"{r['cpu_minutes']:.1f}",
              f"{100 * r[acc]:.2f}%", f"{r['nll']:.4f}", "" if r["heldout_nll"] is None else f"{r['heldout_nll']:.4f}"]
             for r in rows]
    text = []
    for m in exp.frontier.names():
        mine = [r for r in rows if r["method"] == m]
        best = max(mine, key=lambda r: r[acc])
        text.append(f"Frontier ({m}, first seed): {acc} from {100 * mine[0][acc]:.2f}% at {mine[0]['cpu_minutes']:.1f} "
                    f"CPU-minutes to {100 * best[acc]:.2f}% at {best['cpu_minutes']:.1f} CPU-minutes per run "
                    f"({best['schedule']}).")
    return {"tables": [(f"Frontier: {acc} (first seed, evaluation split) against CPU-minutes per run (wall minutes x "
                        "threads) for candidate schedules", ["method", "schedule", "backbone", "epochs", "CPU-minutes",
                                                             acc, "NLL", "held-out NLL"], table)],
            "text": text, "json": {"frontier": rows}}


def budget_section(curves: "dict[str, dict[int, Path]]") -> dict:
    """Budget curves: per method, the first seed trained for each epoch count (its own schedule),
    with top-1, NLL and ECE on the evaluation split against CPU-minutes; where each method's top-1
    curve crosses the first method's (one seed per point: read small gaps as noise); a figure."""
    points = {m: [{**_point(d), "epochs": e} for e, d in sorted(per.items())] for m, per in curves.items()}
    first = next(iter(points))
    acc = "top1" if "top1" in points[first][0] else "prec@1"
    table = [[m, str(p["epochs"]), f"{p['cpu_minutes']:.1f}", f"{100 * p[acc]:.2f}%", f"{p['nll']:.4f}",
              f"{100 * p['ece']:.2f}", "" if p["heldout_nll"] is None else f"{p['heldout_nll']:.4f}", str(p["precision"])]
             for m, ps in points.items() for p in ps]
    text, crossings = [], {}
    ref = {p["epochs"]: p for p in points[first]}
    for m, ps in points.items():
        if m == first:
            continue
        common = [p for p in ps if p["epochs"] in ref]
        diffs = [(p["epochs"], p[acc] - ref[p["epochs"]][acc]) for p in common]
        cross = [(a[0], b[0]) for a, b in zip(diffs, diffs[1:]) if np.sign(a[1]) != np.sign(b[1])]
        crossings[m] = {"diffs": {str(e): d for e, d in diffs}, "crossings": cross}
        where = ("; the curves cross between " + ", ".join(f"{a} and {b} epochs" for a, b in cross)) if cross else (
            f"; {m} stays {'above' if diffs and diffs[0][1] > 0 else 'below'} {first} at every point")
        text.append(f"Budget curve, {m} − {first} {acc} (first seed, points): " + ", ".join(
            f"{e} ep {100 * d:+.2f}" for e, d in diffs) + where + " (one seed per point).")
    return {"tables": [(f"Budget curves: first seed trained for each epoch count (its own schedule); evaluation split "
                        f"({acc}, NLL, ECE) and held-out NLL (noisy labels) against CPU-minutes per run",
                        ["method", "epochs", "CPU-minutes", acc, "NLL", "ECE (%)", "held-out NLL", "precision"], table)],
            "text": text, "json": {"budget_curves": {"points": points, "reference": first, "crossings": crossings}},
            "figures": [("Budget curves: evaluation-split top-1, NLL and ECE against CPU-minutes per run (first seed; "
                         "labels: epochs)", "budget_curves.png", budget_png(points, acc))]}


def budget_png(points: "dict[str, list[dict]]", acc: str) -> bytes:
    """Three panels (accuracy, NLL, ECE against CPU-minutes), one line per method, points labelled by epochs."""
    from harness.figures import pyplot

    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, label in zip(axes, (acc, "nll", "ece"), (acc, "NLL", "ECE")):
        for m, ps in points.items():
            x, y = [p["cpu_minutes"] for p in ps], [p[key] for p in ps]
            ax.plot(x, y, marker="o", label=m)
            for p, yy in zip(ps, y):
                ax.annotate(str(p["epochs"]), (p["cpu_minutes"], yy), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("CPU-minutes per run")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    from harness.figures import png

    return png(fig)


def temperature_section(rows: "list[dict]", title: str) -> dict:
    """The τ grid: held-out metrics of every τ tried and the choice (never the test split)."""
    key = rows[0]["key"]
    acc = "top1" if key == "nll" else "prec@1"
    table = [[r["method"], f"{r['temperature']:g}", f"{r['heldout'][key]:.4f}",
              f"{100 * r['heldout'][acc]:.2f}%", "chosen" if r["chosen"] else ""] for r in rows]
    text = [f"{title}: " + "; ".join(f"{r['method']} τ = {r['temperature']:g}" for r in rows if r["chosen"])
            + f" (lowest held-out {key}, first seed; the test split was not used)."]
    return {"tables": [(f"{title} (held-out split, noisy labels; first seed)",
                        ["method", "τ", f"held-out {key}", f"held-out {acc}", ""], table)],
            "text": text, "json": {"temperature_grid": rows}}


def paired_differences(runs: "dict[str, list[Path]]", keys: "tuple[str, ...]", reference: str = "hom") -> "list[dict]":
    """Seed level: per method and metric, the per-seed differences against ``reference`` (same seed
    index) with their mean, 95% t-interval, paired t-test and verdict
    (:func:`harness.uncertainty.compare.seed_level`).

    Returns:
        One dict per (method, metric): ``diffs``, ``mean``, ``std``, ``lo``, ``hi``, ``n``,
        ``p`` (paired t-test; None with < 2 seeds), ``verdict``.
    """
    from harness.uncertainty.compare import seed_level

    ref = {k: [_metrics(d)["metrics"][k] for d in runs[reference]] for k in keys}
    out = []
    for method, dirs in runs.items():
        if method == reference:
            continue
        mine = {k: [_metrics(d)["metrics"][k] for d in dirs] for k in keys}
        for k, r in seed_level(mine, ref).items():
            out.append({"method": method, "metric": k, **r})
    return out


def _num(v: float, k: str, pct: "set[str]", sign: bool = False) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    return f"{100 * v:{'+' if sign else ''}.2f}" if k in pct else f"{v:{'+' if sign else ''}.4f}"


def _ci(r: dict, k: str, pct: "set[str]", sign: bool = True) -> str:
    return f"{_num(r['mean' if 'mean' in r else 'diff'], k, pct, sign)} [{_num(r['lo'], k, pct, sign)}, " \
           f"{_num(r['hi'], k, pct, sign)}]"


def _diff_table(rows: "list[dict]", pct: "set[str]") -> "list[list[str]]":
    return [[r["method"], r["metric"], ", ".join(_num(v, r["metric"], pct, True) for v in r["diffs"]),
             _ci(r, r["metric"], pct), "n/a" if r["p"] is None else f"{r['p']:.3f}", r["verdict"]]
            for r in rows]


_DIFF_HEADER = ["method", "metric", "per seed", "mean [95% t-interval]", "paired t-test p", "verdict"]


def comparison_section(runs: "dict[str, list[Path]]", ensembles: "list[Path]", label: str = "") -> dict:
    """Every method against hom, seed level and image level, the per-method intervals that separate
    seed variance from test-sampling variance, and ensemble against ensemble; verdicts from the 95%
    intervals only (:mod:`harness.uncertainty.compare`), sentences computed from the numbers.
    ``label`` prefixes every title and sentence (a condition other than the main study's)."""
    out = _comparison(runs, ensembles)
    if label:
        out["tables"] = [(f"{label}: {t}", h, r) for t, h, r in out["tables"]]
        out["text"] = [f"{label}: {t}" for t in out["text"] if not t.startswith(_GENERIC)]
    return out


_HOW_TO_READ = ("How to read the comparisons: seed-level intervals cover training randomness (seed i of a method "
                "against seed i of hom; with n seeds the t-interval has n − 1 degrees of freedom, so it is wide at "
                "n = 3); image-level intervals cover which evaluation images were drawn, with the trained models "
                "fixed. A verdict says better or worse only when its 95% interval excludes 0.")
_PAPER = "The paper (ImageNet, Table 1) finds het and diag better than hom on top-1 and NLL."
_GENERIC = (_HOW_TO_READ[:20], _PAPER[:20])


def _comparison(runs: "dict[str, list[Path]]", ensembles: "list[Path]") -> dict:
    from harness.runs import Predictions
    from harness.uncertainty.compare import image_level, seed_summary, test_sampling_se

    out: dict = {"tables": [], "text": [], "json": {}}
    acc_key = "top1" if "top1" in _metrics(next(iter(runs.values()))[0])["metrics"] else "prec@1"
    nll_key = "nll" if acc_key == "top1" else "sigmoid_nll"
    keys = (acc_key, nll_key, "ece")
    pct = {k for k in keys if M.METRICS[k].percent}
    single = acc_key == "top1"
    preds = {m: [Predictions.load(d) for d in dirs] for m, dirs in runs.items()} if single else {}
    rows, summary = [], {}
    for m, dirs in runs.items():
        s = seed_summary({k: [_metrics(d)["metrics"][k] for d in dirs] for k in keys})
        se = test_sampling_se(preds[m]) if single else {}
        summary[m] = {"seeds": s, "test_sampling_se": se}
        rows.append([m, str(len(dirs))] + [_ci(s[k], k, pct, False) for k in keys]
                    + [" / ".join(_num(s[k]["std"], k, pct) for k in keys)]
                    + ([" / ".join(_num(se[k], k, pct) for k in keys)] if single else []))
    out["tables"].append((f"Per method (single models): mean over seeds with its 95% t-interval; seed std (training "
                          "randomness) and test-sampling standard error (bootstrap over evaluation images, models "
                          f"fixed); {acc_key} in points",
                          ["method", "seeds", *(f"{k} mean [95% CI]" for k in keys), "seed std (" + " / ".join(keys)
                           + ")"] + (["test-sampling SE (" + " / ".join(keys) + ")"] if single else []), rows))
    out["json"]["method_intervals"] = summary
    if "hom" not in runs or len(runs) < 2:
        return out
    out["text"].append(_HOW_TO_READ)
    seed_rows = paired_differences(runs, keys)
    out["tables"].append(("Paired differences against hom, seed level (method − hom, seed i against seed i; 95% "
                          f"t-interval over seeds; {acc_key} in points)", _DIFF_HEADER, _diff_table(seed_rows, pct)))
    out["json"]["paired_differences"] = seed_rows
    image: "dict[str, dict]" = {}
    if single:
        img_rows = []
        for m in [m for m in runs if m != "hom"]:
            image[m] = image_level(preds[m], preds["hom"])
            for k, r in image[m].items():
                mc = "; ".join(f"{x['n10']}/{x['n01']} p={x['p']:.3g}" for x in r.get("mcnemar", []))
                img_rows.append([m, k, _ci(r, k, pct), mc, r["verdict"]])
        out["tables"].append(("Paired differences against hom, image level (difference of the seed-averaged metric, "
                              "models fixed; 95% paired bootstrap interval over evaluation images, 1,000 resamples; "
                              "McNemar's exact test per seed pair: images only the method gets right / only hom "
                              f"gets right; {acc_key} in points)",
                              ["method", "metric", "difference [95% CI]", "McNemar per seed", "verdict"], img_rows))
        out["json"]["image_level_differences"] = image
    for method in [m for m in runs if m != "hom"]:
        r = {x["metric"]: x for x in seed_rows if x["method"] == method}
        parts = [f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}" for k in keys]
        text = f"{method} vs hom over {r[acc_key]['n']} paired seeds (95% t-intervals): " + "; ".join(parts) + "."
        if method in image:
            text += " On the evaluation images with the models fixed (95% bootstrap): " + "; ".join(
                f"{k} {_ci(image[method][k], k, pct)} → {image[method][k]['verdict']}" for k in keys) + "."
        out["text"].append(text)
    out["text"].append(_PAPER)
    ens = {json.loads((e / "ensemble.json").read_text())["method"]: e for e in ensembles}
    if single and "hom" in ens and len(ens) > 1:
        ens_rows, ens_json = [], {}
        for m, e in ens.items():
            if m == "hom":
                continue
            r = image_level([Predictions.load(e)], [Predictions.load(ens["hom"])])
            ens_json[m] = r
            for k, x in r.items():
                mc = "; ".join(f"{y['n10']}/{y['n01']} p={y['p']:.3g}" for y in x.get("mcnemar", []))
                ens_rows.append([f"{e.name} − {ens['hom'].name}", k, _ci(x, k, pct), mc, x["verdict"]])
            out["text"].append(f"Ensemble {e.name} vs {ens['hom'].name} (images, 95% bootstrap): " + "; ".join(
                f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}" for k in keys) + ".")
        out["tables"].append(("Ensemble against ensemble, image level (95% paired bootstrap over evaluation images; "
                              f"McNemar's exact test; {acc_key} in points)",
                              ["ensembles", "metric", "difference [95% CI]", "McNemar", "verdict"], ens_rows))
        out["json"]["ensemble_differences"] = ens_json
    for e in ensembles:
        spec = json.loads((e / "ensemble.json").read_text())["summary"]
        en, mean = spec["ensemble"], spec["member_mean"]
        out["text"].append(f"{e.name}: ensemble {acc_key} {100 * en[acc_key]:.2f}% vs members' mean "
                           f"{100 * mean[acc_key]:.2f}%, NLL {spec['ensemble_nll']:.4f} vs Gibbs cross-entropy "
                           f"{spec['gibbs_ce']:.4f} (the ensemble NLL can never exceed it; one ensemble, so no interval).")
    return out


def multilabel_section(runs: "dict[str, list[Path]]", grid_rows: "list[dict]") -> dict:
    """The multi-label study's table (mean ± std over seeds of prec@1, macro mAP, micro AP, sigmoid
    NLL and top-label ECE on the evaluation split), its τ grid and its paired differences."""
    keys = ("prec@1", "macro_map", "micro_ap", "sigmoid_nll", "ece")
    pct = {k for k in keys if M.METRICS[k].percent}
    rows = []
    for method, dirs in runs.items():
        ms = [_metrics(d)["metrics"] for d in dirs]
        cells = [method, str(len(ms))]
        for k in keys:
            v = np.array([m[k] for m in ms])
            scale = 100 if k in pct else 1
            cells.append(f"{scale * v.mean():.{2 if k in pct else 4}f} ± {scale * (v.std(ddof=1) if len(v) > 1 else 0):.{2 if k in pct else 4}f}")
        rows.append(cells)
    data = _metrics(next(iter(runs.values()))[0])
    title = (f"Multi-label study: sigmoid heads trained on {data['train_data']}; evaluated on {data['eval_data']} "
             "(mean ± std over seeds; prec@1, mAP and AP in %)")
    out = {"tables": [(title, ["method", "seeds", "prec@1", "macro mAP", "micro AP", "sigmoid NLL", "top-label ECE"],
                       rows)], "text": [], "json": {"multilabel_study": {m: [str(d) for d in ds] for m, ds in runs.items()}}}
    if grid_rows:
        _merge(out, temperature_section(grid_rows, "Multi-label study: τ chosen on the held-out split"))
    ref = next((m for m in runs if not _noisy(_head(runs[m][0]))), None)
    if ref is not None and len(runs) > 1:
        diffs = paired_differences(runs, ("prec@1", "macro_map", "sigmoid_nll"), reference=ref)
        out["tables"].append((f"Multi-label study: paired differences against {ref}, seed level (95% t-interval; points "
                              "for prec@1 and mAP)", _DIFF_HEADER, _diff_table(diffs, pct)))
        out["json"]["multilabel_paired_differences"] = diffs
        for method in [m for m in runs if m != ref]:
            r = {x["metric"]: x for x in diffs if x["method"] == method}
            out["text"].append(
                f"Multi-label: {method} vs {ref} over {r['prec@1']['n']} paired seeds (95% t-intervals): " + "; ".join(
                    f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}"
                    for k in ("prec@1", "macro_map", "sigmoid_nll")) + ".")
    return out


def _head(run_dir: Path) -> dict:
    from harness.runs import run_head

    return run_head(run_dir)


def downstream_section(runs: "dict[str, list[Path]]", per_run: "dict[Path, dict]") -> dict:
    """The shape of the paper's Table 6: per task, the test accuracy of each method (mean ± std over
    the upstream seeds of that method, each the mean over its fine-tuning seeds), then group means
    and the mean over tasks."""
    methods = list(runs)
    first = per_run[runs[methods[0]][0]]
    tasks = list(first["tasks"])
    groups = list(first["groups"])

    def cell(values: "list[float]") -> str:
        return f"{100 * np.mean(values):.2f} ± {100 * np.std(values, ddof=1):.2f}" if len(values) > 1 else \
            f"{100 * values[0]:.2f}"

    rows, summary = [], {}
    for t in tasks:
        vals = {m: [per_run[d]["tasks"][t]["mean"] for d in runs[m]] for m in methods}
        rows.append([t, first["tasks"][t]["group"]] + [cell(vals[m]) for m in methods])
        summary[t] = {m: float(np.mean(v)) for m, v in vals.items()}
    for g in groups:
        vals = {m: [per_run[d]["groups"][g]["mean"] for d in runs[m]] for m in methods}
        rows.append([f"mean ({g})", g] + [cell(vals[m]) for m in methods])
    vals = {m: [per_run[d]["mean_over_tasks"] for d in runs[m]] for m in methods}
    rows.append(["mean over tasks", "all"] + [cell(vals[m]) for m in methods])
    title = ("Downstream transfer (layout of the paper's Table 6): test top-1 after fine-tuning a fresh "
             "homoscedastic head, mean ± std over upstream seeds")
    return {"tables": [(title, ["task", "group", *methods], rows)],
            "json": {"downstream": {"per_task": summary, "mean_over_tasks": {m: float(np.mean(v)) for m, v in
                                                                             vals.items()}}}}


def load_experiment(name_or_path: Optional[str] = None, overrides: "tuple[str, ...]" = ()) -> Experiment:
    """Read an experiment file (default: the embedded digits experiment) with ``key=value`` overrides."""
    from harness.config import load_config

    return load_config(Experiment, find_experiment(name_or_path or "digits"), overrides)
