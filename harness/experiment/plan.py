"""Planning an experiment: every upstream run's config, checked before any work; the τ grid, its
extension past an edge and the choice on the held-out split; runs derived from the study's (budget,
frontier)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from harness.experiment.config import Experiment, _noisy, _upstream_config_path
from harness.heads.variants import has_factors

#: the most processes ``workers`` may start (each trains with cores / workers threads; more only queue)
MAX_WORKERS = 256


@dataclass
class _Plan:
    """The upstream runs of one study: per method, the grid runs (value -> folder) and the seeds' configs.

    A method's grid tunes its head's τ (``temperature_grid``, methods with noise) or, for a method with
    ``tune: {key: ..., values: [...]}``, that training setting (e.g. ``train.label_smoothing``); either is chosen
    by the lowest held-out NLL."""

    configs: "dict[str, Any]" = field(default_factory=dict)  # folder name -> UpstreamConfig
    grid: "dict[str, dict[float, str]]" = field(default_factory=dict)  # method -> value -> folder name
    chosen: "dict[str, float]" = field(default_factory=dict)  # method -> value chosen on the held-out split
    heads: "dict[str, dict]" = field(default_factory=dict)  # method -> head options
    seeds: "list[int]" = field(default_factory=list)
    grid_overrides: "list[str]" = field(default_factory=list)  # of the grid runs (own schedule when given)
    make: Optional[Callable[..., Any]] = None  # (method, head, seed, folder, extra overrides) -> config
    tuned: "dict[str, str]" = field(default_factory=dict)  # method -> the training setting its grid tunes (not τ)

    def parameter(self, method: str) -> str:
        """What the grid of ``method`` tunes: ``"τ"`` or a training setting such as ``train.label_smoothing``."""
        return self.tuned.get(method, "τ")

    def folder(self, method: str, value: float, seed: int, grid: bool = False) -> str:
        """Run folder of ``method`` at grid ``value``: ``het_t1.3_s0`` (τ), ``ls_label_smoothing0.2_s0`` (a setting);
        ``grid_...`` for a grid run with its own schedule (``grid_overrides``)."""
        tag = self.tuned[method].rsplit(".", 1)[-1] if method in self.tuned else "t"
        return f"{'grid_' if grid and self.grid_overrides else ''}{method}_{tag}{value:g}_s{seed}"

    def setting(self, method: str, value: float) -> "tuple[dict, list[str]]":
        """(head options, overrides) of ``method`` at grid ``value``."""
        if method in self.tuned:
            return dict(self.heads[method]), [f"{self.tuned[method]}={float(value)!r}"]
        return {**self.heads[method], "temperature": float(value)}, []

    def grid_run(self, method: str, value: float) -> str:
        """Add the grid run of ``method`` at ``value`` (first seed); returns its folder name."""
        folder = self.folder(method, value, self.seeds[0], grid=True)
        head, own = self.setting(method, value)
        self.configs[folder] = self.make(method, head, self.seeds[0], folder, [*own, *self.grid_overrides])
        self.grid[method][float(value)] = folder
        return folder

    def final(self, method: str, seed: int, folder: str, extra: "list[str]" = ()) -> Any:
        """The config of ``method`` at its chosen value (as given when it has no grid), with ``extra`` overrides."""
        head, own = self.setting(method, self.chosen[method]) if method in self.grid else (dict(self.heads[method]), [])
        return self.make(method, head, seed, folder, [*own, *extra])


def _plan(
    exp: Experiment,
    root: Path,
    prefix: str,
    methods: dict,
    seeds: list,
    grid: list,
    overrides: list,
    grid_overrides: "list[str]" = (),
) -> _Plan:
    """Every config of a study, validated (nothing is run or written)."""
    from harness.config import load_config
    from harness.io import path_under
    from harness.upstream.config import UpstreamConfig, validate

    base = _upstream_config_path(exp.upstream_config)
    own = {m: list(h.get("overrides", [])) for m, h in methods.items()}  # a method's own training settings
    tunes = {m: _tune(m, h, grid) for m, h in methods.items() if h.get("tune") is not None}
    methods = {m: {k: v for k, v in h.items() if k not in ("overrides", "tune")} for m, h in methods.items()}
    plan = _Plan(
        heads={m: dict(h) for m, h in methods.items()},
        seeds=list(seeds),
        grid_overrides=list(grid_overrides),
        tuned={m: key for m, (key, _) in tunes.items()},
    )

    def config(method: str, head: dict, seed: int, folder: str, extra: "list[str]" = ()) -> Any:
        cfg = load_config(
            UpstreamConfig,
            base,
            [
                *exp.upstream_overrides,
                *overrides,
                *own.get(method, []),
                *extra,
                f"name={exp.name}_{prefix}{folder}",
                f"seed={seed}",
                f"output_dir={path_under(root, 'upstream', prefix + folder)}",
            ],
        )
        given = _head_overrides([*exp.upstream_overrides, *overrides, *own.get(method, []), *extra])
        if "temperature" in given and grid and _noisy(methods[method]):
            raise ValueError(
                f"method {method!r}: model.head.temperature={given['temperature']} in the overrides would "
                "replace the τ the temperature_grid chooses: drop one of them"
            )
        cfg.model.head = {**head, **given}  # the method's head, with the head keys of the overrides over it
        try:
            validate(cfg)
        except ValueError as e:
            raise ValueError(f"method {method!r}: {e}") from e
        if cfg.data.heldout_split is None and (grid and _noisy(head) or method in tunes):
            what = "tune" if method in tunes else "temperature_grid"
            raise ValueError(
                f"{what} needs a held-out split to choose on: set data.heldout_split in {base.name} or "
                "upstream_overrides"
            )
        return cfg

    plan.make = config
    for method, head in methods.items():
        if method in tunes or (grid and _noisy(head)):
            plan.grid[method] = {}
            for value in tunes[method][1] if method in tunes else grid:
                plan.grid_run(method, value)
        else:
            for seed in seeds:
                plan.configs[f"{method}_s{seed}"] = config(method, head, seed, f"{method}_s{seed}")
    return plan


def check_grid_values(values: "list[float]", key: str) -> None:
    """The one rule for a grid's values: each value names its run folder (``{value:g}``, 6 significant digits), so
    two values that print alike would share one folder and one of them would never be trained. Values must differ
    in their first 6 significant digits.

    Raises:
        ValueError: two values with the same folder name, naming the key, both values and the fix.
    """
    seen: "dict[str, float]" = {}
    for v in values:
        name = f"{float(v):g}"
        if name in seen:
            raise ValueError(
                f"{key}: {seen[name]!r} and {v!r} name the same run folder ({name}), so one would never be "
                "trained: give values that differ in their first 6 significant digits"
            )
        seen[name] = float(v)


def _tune(method: str, head: dict, grid: list) -> "tuple[str, list[float]]":
    """(key, values) of a method's ``tune: {key: train.label_smoothing, values: [0.05, 0.1, 0.2]}``, checked."""
    from harness.io import quote

    tune = head["tune"]
    example = "e.g. tune: {key: train.label_smoothing, values: [0.05, 0.1, 0.2, 0.4]}"
    if not isinstance(tune, dict) or set(tune) != {"key", "values"}:
        raise ValueError(f"method {method!r}: tune takes a key and its values, {example}")
    key, values = str(tune["key"]), tune["values"]
    if (
        not isinstance(values, (list, tuple))
        or not values
        or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in values)
        or len(set(values)) != len(values)
    ):
        raise ValueError(f"method {method!r}: tune.values must be distinct numbers, {example}")
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", key):
        raise ValueError(
            f"method {method!r}: tune.key {quote(key, 60)} is not a config setting (dotted names such as "
            "train.label_smoothing; it also names the run folders)"
        )
    if key == "model.head" or key.startswith("model.head."):
        raise ValueError(
            f"method {method!r}: tune.key {key!r} is a head option; a head's τ is tuned by "
            "temperature_grid and tune takes a training setting such as train.label_smoothing"
        )
    if grid and _noisy(head):
        raise ValueError(
            f"method {method!r} has noise, so temperature_grid tunes its τ: one grid per method, drop its tune"
        )
    check_grid_values(values, f"method {method!r}: tune.values")
    return key, [float(v) for v in values]


def _head_overrides(overrides: "list[str]") -> dict:
    """The ``model.head`` settings among ``key=value`` overrides (``model.head.temperature=0.25``,
    ``model.head={...}``), merged in order as :func:`harness.config.load_config` merges them; ``{}`` if none. A plan
    sets each run's head from its method, so these are put over it (they would otherwise be lost)."""
    from omegaconf import OmegaConf

    picked = [
        o
        for o in overrides
        if o.split("=", 1)[0].strip() == "model.head" or o.split("=", 1)[0].strip().startswith("model.head.")
    ]
    if not picked:
        return {}
    merged = OmegaConf.merge(*(OmegaConf.from_dotlist([o]) for o in picked))
    return dict(OmegaConf.to_container(merged, resolve=True)["model"]["head"] or {})


def _same_run(a: Any, b: Any) -> bool:
    """Whether two upstream configs train the same model (they differ at most in name and folder)."""
    from dataclasses import asdict

    strip = lambda c: {k: v for k, v in asdict(c).items() if k not in ("name", "output_dir")}  # noqa: E731
    return strip(a) == strip(b)


def _derived(plan: _Plan, method: str, folder: str, overrides: "list[str]", seed: Optional[int] = None) -> str:
    """Add ``seed`` (default: the first seed) of ``method`` at its final head with ``overrides`` under
    ``folder``, unless a planned run is the same (then that run's folder is returned and nothing is added)."""
    cfg = plan.final(method, plan.seeds[0] if seed is None else seed, folder, overrides)
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
    from harness.downstream.config import PRESETS, SweepSettings
    from harness.io import check_location, check_writable, path_under, quote

    if exp.transfer is not None:
        raise ValueError(
            f"experiment {exp.name!r} is a transfer study of committed models (its `transfer:` section): "
            "run it with `harness run` or harness.experiment.transfer.run_transfer"
        )

    for key in ("runs_root", "results_root", "upstream_config"):
        check_location(getattr(exp, key), key)

    if not exp.methods:
        raise ValueError("the experiment names no methods: add e.g. methods: {hom: {covariance: none}}")
    _check_names(exp)
    if not exp.seeds:
        raise ValueError("seeds is empty: give at least one seed, e.g. seeds: [0]")
    all_seeds = [*exp.seeds, *exp.multilabel.seeds, *(s for c in exp.conditions.values() for s in c.seeds)]
    if any(int(seed) != seed or not 0 <= seed < 2**32 for seed in all_seeds):
        raise ValueError(
            f"seeds must be whole numbers in [0, 2**32 - 1] (numpy's seed range), got {quote(str(all_seeds), 120)}"
        )
    if len(set(exp.seeds)) != len(exp.seeds):
        raise ValueError(f"seeds {exp.seeds} repeat a seed: give distinct seeds")
    if not 1 <= exp.workers <= MAX_WORKERS:
        raise ValueError(
            f"workers must be between 1 and {MAX_WORKERS} (one process each, {os.cpu_count()} CPU core(s) "
            f"here), got {quote(str(exp.workers), 40)}"
        )
    unknown = [m for m in exp.evaluate_methods if m not in exp.methods]
    if unknown:
        raise ValueError(f"evaluate_methods {', '.join(unknown)} not among the methods {', '.join(exp.methods)}")
    if any(n > len(exp.seeds) or n < 2 for n in exp.ensemble_sizes):
        raise ValueError(f"ensemble sizes {exp.ensemble_sizes} must lie in [2, number of seeds = {len(exp.seeds)}]")
    for tau in [*exp.temperature_grid, *exp.multilabel.temperature_grid]:
        if not tau > 0:
            raise ValueError(f"temperature_grid values must be > 0, got {tau}")
    check_grid_values(exp.temperature_grid, "temperature_grid")
    check_grid_values(exp.multilabel.temperature_grid, "multilabel.temperature_grid")
    if exp.grid_overrides and not exp.temperature_grid and not any(h.get("tune") for h in exp.methods.values()):
        raise ValueError(
            "grid_overrides without a temperature_grid (or a method's tune) have nothing to apply to: "
            "drop them or add a grid"
        )
    if exp.grid_extensions < 0:
        raise ValueError(f"grid_extensions must be >= 0, got {exp.grid_extensions}")
    for section, names in (
        ("budget", exp.budget.methods),
        ("frontier", exp.frontier.names() if exp.frontier.schedules else []),
    ):
        unknown = [m for m in names if m not in exp.methods]
        if unknown:
            raise ValueError(f"{section} method(s) {', '.join(unknown)} not among the methods {', '.join(exp.methods)}")
    for cname, cond in exp.conditions.items():
        unknown = [m for m in cond.methods if m not in exp.methods]
        if unknown or not cond.methods or not cond.seeds:
            raise ValueError(
                f"condition {cname!r}: methods must be some of {', '.join(exp.methods)} and seeds non-empty "
                f"(got methods {cond.methods}, seeds {cond.seeds})"
            )
    if exp.budget.methods and (not exp.budget.epochs or any(int(e) != e or e < 1 for e in exp.budget.epochs)):
        raise ValueError(f"budget.epochs must be a non-empty list of whole numbers >= 1, got {exp.budget.epochs}")
    root = path_under(exp.runs_root, exp.name)
    plans = {"main": _plan(exp, root, "", exp.methods, exp.seeds, exp.temperature_grid, [], exp.grid_overrides)}
    if exp.shift is not None:
        from harness.shift.settings import check_settings

        cfgs = list(plans["main"].configs.values())
        if any(cfg.model.head.get("link", "softmax") != "softmax" for cfg in cfgs):
            raise ValueError(
                "shift: the main study's methods must use the softmax link (shift evaluation covers "
                "single-label models); drop the shift section or the sigmoid method"
            )
        try:
            check_settings(exp.shift, cfgs[0].data)
        except ValueError as e:
            raise ValueError(f"shift: {e}") from e
    ml = exp.multilabel
    if ml.methods:
        if not ml.seeds:
            raise ValueError("multilabel.seeds is empty: give at least one seed")
        plans["multilabel"] = _plan(
            exp, root, "multilabel_", ml.methods, ml.seeds, ml.temperature_grid, ml.upstream_overrides
        )
        for folder, cfg in plans["multilabel"].configs.items():
            if cfg.model.head.get("link") != "sigmoid":
                raise ValueError(
                    f"multilabel study run {folder}: set link: sigmoid in its head (label sets need the sigmoid link)"
                )
    fr = exp.frontier
    if fr.schedules:  # checked here; built at the chosen τ once it is known (frontier_plan)
        for overrides in fr.schedules.values():
            for method in fr.names():
                plans["main"].make(method, plans["main"].heads[method], exp.seeds[0], "check", list(overrides))
    for cond in exp.conditions.values():
        for method in cond.methods:
            plans["main"].make(
                method, plans["main"].heads[method], cond.seeds[0], "check", list(cond.upstream_overrides)
            )
    for e in exp.budget.epochs if exp.budget.methods else []:
        plans["main"].make(
            exp.budget.methods[0],
            plans["main"].heads[exp.budget.methods[0]],
            exp.seeds[0],
            "check",
            [f"train.epochs={e}", f"train.eval_every={e}"],
        )
    _check_classes(plans)
    _check_downstream(exp, PRESETS, SweepSettings)
    for what, folder in (("runs_root", exp.runs_root), ("results_root", exp.results_root)):
        check_writable(folder, f"{what} {str(folder)!r}", f"{what}=...")
    from harness.report.build import report_folder

    report_folder(exp.results_root, exp.name)  # refuses a folder another writer owns, before any work
    return plans


def _check_names(exp: Experiment) -> None:
    """Every name that becomes a folder name (:func:`harness.io.check_name`)."""
    from harness.io import check_name

    check_name(exp.name, "experiment name")
    for section, names in (
        ("method", exp.methods),
        ("multilabel method", exp.multilabel.methods),
        ("condition", exp.conditions),
    ):
        for n in names:
            check_name(n, f"{section} name")
    for name, cond in exp.conditions.items():
        for m in cond.methods:
            check_name(f"{name}_{m}", f"condition {name!r} run name")


def _check_classes(plans: "dict[str, _Plan]") -> None:
    """Settings that need the number of classes K of the data (read once per study from its evaluation split):
    ``model.num_classes`` and the heads' ``num_factors`` (<= K for noise on the logits)."""
    from harness.data.sources import build_split

    for study, plan in plans.items():
        if not plan.configs:
            continue
        first = next(iter(plan.configs.values()))
        k = len(build_split(first.data, first.data.eval_split).class_names)
        for folder, cfg in plan.configs.items():
            if cfg.model.num_classes and cfg.model.num_classes != k:
                raise ValueError(
                    f"run {folder}: model.num_classes={cfg.model.num_classes} but the data has {k} "
                    "classes; leave model.num_classes unset"
                )
            head = cfg.model.head
            r = head.get("num_factors")
            if (
                r is not None
                and has_factors(head.get("covariance", "low_rank"))
                and head.get("noise_space", "logits") == "logits"
                and int(r) > k
            ):
                raise ValueError(
                    f"run {folder}: model.head.num_factors={r} exceeds the {k} classes of the data "
                    f"(noise on the logits has rank at most K): use num_factors <= {k}"
                )


def _check_downstream(exp: Experiment, presets: dict, settings_type: Any) -> None:
    """The downstream settings, device, task names and all four splits of every task (their data)."""
    if not exp.downstream.tasks:
        return
    from harness.tasks.taskset import check_tasks, expand_tasks
    from harness.training.precision import check_device

    if exp.downstream.preset not in presets:
        raise ValueError(f"unknown downstream.preset {exp.downstream.preset!r}: use one of {', '.join(presets)}")
    try:
        settings = settings_type(**{**presets[exp.downstream.preset], **exp.downstream.settings})
    except TypeError as e:
        raise ValueError(f"downstream.settings: {e}; see harness.downstream.config.SweepSettings for the keys") from e
    try:
        check_device(settings.device)
        check_tasks(expand_tasks(exp.downstream.tasks), settings)
    except (ValueError, FileNotFoundError) as e:
        raise ValueError(f"downstream: {e}") from e


def _first_wave(plan: _Plan, methods: dict, seeds: list) -> "list[str]":
    """Runs that need no choice: every seed of the methods without a grid, every τ of the grids."""
    return [
        f
        for m in methods
        for f in (list(plan.grid[m].values()) if m in plan.grid else [f"{m}_s{seed}" for seed in seeds])
    ]


def _heldout(plan: _Plan, method: str) -> "tuple[dict[float, dict], str]":
    """Held-out metrics of every grid run of ``method`` (by τ) and the key that chooses."""
    held = {tau: _metrics(Path(plan.configs[f].output_dir))["heldout_metrics"] for tau, f in plan.grid[method].items()}
    return held, "nll" if "nll" in next(iter(held.values())) else "sigmoid_nll"


def _best_tau(plan: _Plan, method: str, held: "Optional[tuple[dict[float, dict], str]]" = None) -> float:
    """The τ with the lowest held-out NLL (ties: the smaller τ); ``held``: :func:`_heldout`, if read already."""
    held, key = held or _heldout(plan, method)
    return min(held, key=lambda t: (held[t][key], t))


def _extend_grids(plan: _Plan, base: "list[float]", limit: int) -> "list[str]":
    """τ-grid runs to add where the best τ so far lies on the edge of the values tried: τ/2 below the
    smallest, 1.5τ above the largest, at most ``limit`` additions per method (a ``tune`` grid is not
    extended: its setting may have bounds, e.g. ε < 1). Returns their folders."""
    new = []
    for method, runs in plan.grid.items():
        if method in plan.tuned or len(set(runs) - {float(t) for t in base}) >= limit:
            continue
        best, taus = _best_tau(plan, method), sorted(runs)
        if len(taus) > 1 and best == taus[0]:
            new.append(plan.grid_run(method, float(f"{best / 2:.4g}")))
        elif len(taus) > 1 and best == taus[-1]:
            new.append(plan.grid_run(method, float(f"{best * 1.5:.4g}")))
    return new


def _choose_temperatures(plan: _Plan, methods: dict, seeds: list) -> "tuple[list[str], list[dict]]":
    """After the grid: the value (τ, or the tuned setting) with the lowest held-out NLL per grid method (ties:
    the smaller); the configs of the seeds still to train at it are added to the plan (all of them when the
    grid runs had their own schedule, else all but the first).

    Returns:
        (run folders of the second wave, grid rows: method, parameter, value, held-out metrics, chosen).
    """
    second, rows = [], []
    for method in methods:
        if method not in plan.grid:
            continue
        held, key = _heldout(plan, method)
        best = _best_tau(plan, method, (held, key))
        for tau in sorted(plan.grid[method]):
            rows.append(
                {
                    "method": method,
                    "parameter": plan.parameter(method),
                    "value": tau,
                    "heldout": held[tau],
                    "chosen": tau == best,
                    "run": plan.configs[plan.grid[method][tau]].output_dir,
                    "key": key,
                }
            )
        plan.chosen[method] = best
        for seed in seeds[0 if plan.grid_overrides else 1 :]:
            folder = plan.folder(method, best, seed)
            if folder not in plan.configs:
                plan.configs[folder] = plan.final(method, seed, folder)
            second.append(folder)
    return second, rows


def _study_runs(plan: _Plan, methods: dict, seeds: list) -> "dict[str, list[Path]]":
    """{method: [run folder of each seed]} once both waves are done."""
    runs = {}
    for m in methods:
        if m in plan.grid:
            best = plan.chosen[m]
            own = plan.grid_overrides
            folders = ([] if own else [plan.grid[m][best]]) + [
                plan.folder(m, best, seed) for seed in seeds[0 if own else 1 :]
            ]
        else:
            folders = [f"{m}_s{seed}" for seed in seeds]
        runs[m] = [Path(plan.configs[f].output_dir) for f in folders]
    return runs


def frontier_plan(main: _Plan, exp: Experiment) -> _Plan:
    """The frontier's runs: the first seed of each frontier method, at its chosen τ, per schedule."""
    plan = _Plan()
    for i, overrides in enumerate(exp.frontier.schedules.values()):
        for m in exp.frontier.names():
            folder = f"frontier{i}_{m}_s{exp.seeds[0]}"
            plan.configs[folder] = main.final(m, exp.seeds[0], folder, list(overrides))
    return plan


def _metrics(d: Path) -> dict:
    return json.loads((d / "metrics.json").read_text())


def _finished(cfg: Any) -> bool:
    """Whether the run of upstream config ``cfg`` has finished (its ``metrics.json`` is written)."""
    return (Path(cfg.output_dir) / "metrics.json").is_file()
