"""Planning an experiment: every upstream run's config, built and validated before any work (the checks of the
whole experiment are :mod:`harness.experiment.validate`); the τ grid (its extension past an edge and the choice on
the held-out split are :mod:`harness.experiment.choice`); runs derived from the study's (budget curves, conditions,
frontier) and the order they are queued in."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from harness.experiment.config import Experiment, _noisy, _upstream_config_path

#: what the monitoring keys (``train.<key>`` for :data:`harness.model_identity.MONITORING`) set, as every message of the
#: experiment names it: a tune of one, a frontier schedule or a condition that sets only them (audit19 A19-14)
MONITORING_WHAT = "how often a run is evaluated, logged or checkpointed, not what it trains"


def untrained_settings() -> "dict[str, str]":
    """The settings that change nothing a run trains, key (``train.log_every``) -> what it sets, as messages name it:
    :data:`harness.model_identity.NOT_IDENTITY` (where a run's files and curves go), the ``train`` keys of
    :data:`~harness.model_identity.MONITORING`, the ``data`` keys of :data:`~harness.model_identity.READING` (how its
    data is read), ``train.best_metric`` (which evaluation keeps ``checkpoints/best.pt``; a study reads each run's
    final ``model.pt``) and the head options of :data:`harness.heads.checks.UNTRAINED_OPTIONS` (``model.head.eval_seed``: its evaluation or
    memory). The one list of the condition, frontier schedule, tune and methods rules (audit19 A19-14, A20-03,
    audit21 A21-12)."""
    from harness.heads.checks import UNTRAINED_OPTIONS
    from harness.model_identity import MONITORING, NOT_IDENTITY, READING

    return {
        **{k: "where a run's files and curves go, not what it trains" for k in NOT_IDENTITY},
        **{f"train.{k}": MONITORING_WHAT for k in MONITORING},
        **{f"data.{k}": "how a run's data is read, not which data or what it trains" for k in READING},
        "train.best_metric": "which evaluation keeps checkpoints/best.pt, not what a run trains (the study reads each "
        "run's final model.pt)",
        **{f"model.head.{k}": what for k, what in UNTRAINED_OPTIONS.items()},
    }


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
    whole: "set[str]" = field(default_factory=set)  # methods whose tuned setting is a whole number (train.epochs)

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
            given = int(value) if method in self.whole else float(value)
            return dict(self.heads[method]), [f"{self.tuned[method]}={given!r}"]
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
    from harness.experiment.roots import check_roots_outside_data
    from harness.io import path_under
    from harness.upstream.config import UpstreamConfig, validate

    base = _upstream_config_path(exp.upstream_config)
    for m, h in methods.items():
        if not isinstance(h.get("overrides", []), (list, tuple)):
            raise ValueError(
                f"methods.{m}.overrides must be a list of key=value settings, got {h['overrides']!r:.80}: "
                f"write overrides: [{h['overrides']}]"
            )
    own = {m: list(h.get("overrides", [])) for m, h in methods.items()}  # a method's own training settings
    tunes = {m: _tune(m, h, grid) for m, h in methods.items() if h.get("tune") is not None}
    ml = "multilabel." if prefix else ""
    for m, (key, values) in tunes.items():
        lists = [("upstream_overrides", exp.upstream_overrides), (f"{ml}upstream_overrides", overrides)]
        _check_tune_key(
            m, key, values, [*lists, (f"{ml}methods.{m}.overrides", own[m]), ("grid_overrides", grid_overrides)]
        )
    methods = {m: {k: v for k, v in h.items() if k not in ("overrides", "tune")} for m, h in methods.items()}
    plan = _Plan(
        heads={m: dict(h) for m, h in methods.items()},
        seeds=list(seeds),
        grid_overrides=list(grid_overrides),
        tuned={m: key for m, (key, _) in tunes.items()},
        whole={m for m, (key, _) in tunes.items() if _tuned_kind(m, key) is int},
    )

    def config(method: str, head: dict, seed: int, folder: str, extra: "list[str]" = ()) -> Any:
        cfg = load_config(
            UpstreamConfig,
            base,
            [
                *exp.upstream_overrides,
                *overrides,
                *own.get(method, []),
                *extra,  # then the settings of RUN_KEYS (harness.experiment.config), which no override may set
                f"name={exp.name}_{prefix}{folder}",
                f"seed={seed}",
                f"output_dir={path_under(root, 'upstream', prefix + folder)}",
            ],
            distinct=False,  # the experiment's lists joined, later ones over earlier ones
        )
        given = _head_overrides([*exp.upstream_overrides, *overrides, *own.get(method, []), *extra])
        if "temperature" in given and grid and _noisy(methods[method]):
            raise ValueError(
                f"method {method!r}: model.head.temperature={given['temperature']} in the overrides would "
                "replace the τ the temperature_grid chooses: drop one of them"
            )
        cfg.model.head = {**head, **given}  # the method's head, with the head keys of the overrides over it
        check_roots_outside_data(exp, cfg)  # named as runs_root / results_root, not output_dir (audit23 A23-15)
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
    if key in ("seed", "seeds"):
        raise ValueError(
            f"method {method!r}: tune.key {key} would choose a seed by its held-out score; the seeds are the "
            "experiment's own list: set seeds: [0, 1, 2] (every method trains on each) and tune a training setting "
            "such as train.label_smoothing"
        )
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", key):
        raise ValueError(
            f"method {method!r}: tune.key {quote(key, 60)} is not a config setting (dotted names such as "
            "train.label_smoothing; it also names the run folders)"
        )
    _check_trains(method, key)  # a setting that changes nothing a run trains named as such (model.head.eval_seed)
    if key == "model.head" or key.startswith("model.head."):
        raise ValueError(
            f"method {method!r}: tune.key {key!r} is a head option; a head's τ is tuned by "
            "temperature_grid and tune takes a training setting such as train.label_smoothing"
        )
    if grid and _noisy(head):
        raise ValueError(
            f"method {method!r} has noise, so temperature_grid tunes its τ: one grid per method, drop its tune"
        )
    if _tuned_kind(method, key) is int and any(float(v) != int(v) for v in values):
        raise ValueError(
            f"method {method!r}: {key} counts whole units, so tune.values must be whole numbers, got {values}"
        )
    check_grid_values(values, f"method {method!r}: tune.values")
    return key, [float(v) for v in values]


def _check_tune_key(method: str, key: str, values: "list[float]", lists: "list[tuple[str, list]]") -> None:
    """No override list (``(its key, the list)``) of a tuned method's runs sets the setting its ``tune`` names (``key``,
    or a section holding it): the tune's value replaces the overrides' (``upstream_overrides``, the method's
    ``overrides``), or ``grid_overrides``' replaces every tune value; either way a value the user wrote is not trained.

    Raises:
        ValueError: naming the method, the key, the list that also sets it and the fix.
    """
    from omegaconf import OmegaConf

    from harness.io import quote

    for where, overrides in lists:
        for o in overrides if isinstance(overrides, (list, tuple)) else ():
            given = str(o).split("=", 1)[0].strip()
            try:  # `train={label_smoothing: 0.3}` sets it too
                inside = (
                    key.startswith(f"{given}.") and OmegaConf.select(OmegaConf.from_dotlist([str(o)]), key) is not None
                )
            except Exception:  # not a valid override: refused with its own message when the runs are planned
                continue
            if given == key or inside:
                shown = [int(v) if float(v).is_integer() else v for v in values]
                lost = f"every run of the method trains one of tune.values {shown} instead, so that value is not"
                if where == "grid_overrides":
                    lost = f"every grid run would train that value, so none of tune.values {shown} would be"
                raise ValueError(
                    f"method {method!r}: tune.key {key} is also set in {where} ({quote(str(o), 80)}): {lost} "
                    f"trained: drop {key} from {where}, or drop the method's tune"
                )


def _check_trains(method: str, key: str) -> None:
    """A method's ``tune.key`` is a setting of how its runs train (audit17 A17-06/07): not the data's label noise (a
    condition's question), not one the evaluation reads (:data:`harness.data.eval_keys.EVAL_KEYS`: the runs would
    train one model and the choice compare held-out scores of other evaluations), not
    :func:`untrained_settings` (which changes nothing a run trains).

    Raises:
        ValueError: naming the method, the key, why it is no training setting and what to do instead.
    """
    from harness.data.eval_keys import EVAL_KEYS

    section, _, name = key.partition(".")
    why, untrained = None, untrained_settings()
    if key in untrained:
        why = f"sets {untrained[key]}; tune a training setting"
    elif key.startswith("data.label_noise"):
        why = (
            "sets the data's label noise, not how a run trains: choosing it by held-out NLL would choose the data; "
            f"study noise rates as conditions (conditions.<name>: {{upstream_overrides: [{key}=...]}})"
        )
    elif section == "data" and name in EVAL_KEYS:
        why = (
            "is read by the evaluation, not by training: the runs would train one model, and the choice would compare "
            "held-out scores of other evaluations; tune a training setting (optim.*, train.*, model.*, "
            "data.batch_size or an augmentation)"
        )
    if why:
        raise ValueError(f"method {method!r}: tune.key {key} {why}")


def _tuned_kind(method: str, key: str) -> type:
    """``int`` or ``float``: the type of the upstream setting ``key`` a method's ``tune`` names (a training setting:
    :func:`_check_trains`).

    Raises:
        ValueError: ``key`` names no setting of the upstream config (the section's settings listed), one that is
            not a number, or no training setting.
    """
    import dataclasses
    import typing

    from harness.upstream.config import UpstreamConfig

    _check_trains(method, key)
    kind: Any = UpstreamConfig
    parts = key.split(".")
    for i, part in enumerate(parts):
        names = [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else []
        if part not in names:
            section = ".".join(parts[:i])
            has = f"{section} holds {', '.join(names)}" if names else f"{section} has no settings inside"
            raise ValueError(f"method {method!r}: tune.key {key!r} is not a setting of the upstream config ({has})")
        kind = typing.get_type_hints(kind)[part]
    kinds = [a for a in typing.get_args(kind) if a is not type(None)] or [kind]
    if kinds[0] not in (int, float) or kinds[0] is bool:
        raise ValueError(
            f"method {method!r}: tune.key {key!r} is not a number setting; tune takes one, e.g. {key.split('.')[0]}.NAME"
        )
    return kinds[0]


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


def _first_wave(plan: _Plan, methods: dict, seeds: list) -> "list[str]":
    """Runs that need no choice: every seed of the methods without a grid, every τ of the grids."""
    return [
        f
        for m in methods
        for f in (list(plan.grid[m].values()) if m in plan.grid else [f"{m}_s{seed}" for seed in seeds])
    ]


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


def _budget_and_conditions(exp: Experiment, main: _Plan) -> "tuple[dict, dict]":
    """The budget curves' runs (``{method: {epochs: folder}}``) and each condition's runs (``{condition: {method:
    [folder per seed]}}``), added to the main plan; a condition's run that equals a planned one (e.g. a budget run)
    is that run, trained once."""
    budget = {
        m: {
            int(e): _derived(main, m, f"budget_{m}_e{int(e)}", [f"train.epochs={int(e)}", f"train.eval_every={int(e)}"])
            for e in exp.budget.epochs
        }
        for m in exp.budget.methods
    }
    conditions = {
        name: {
            m: [_derived(main, m, f"{name}_{m}_s{sd}", list(c.upstream_overrides), sd) for sd in c.seeds]
            for m in c.methods
        }
        for name, c in exp.conditions.items()
    }
    return budget, conditions


def _interleaved(conditions: dict, budget: dict) -> "list[str]":
    """The conditions' run folders seed-major, then by each condition's method order, then by condition (every
    condition's first seed of its first method before any second one: an interrupted study has something to say
    about every condition), then the budget runs; each folder once."""
    lists = [list(per.values()) for per in conditions.values()]
    depth = max((len(fs) for per in lists for fs in per), default=0), max((len(per) for per in lists), default=0)
    order = [
        per[j][i] for i in range(depth[0]) for j in range(depth[1]) for per in lists if j < len(per) and i < len(per[j])
    ]
    return list(dict.fromkeys([*order, *(f for per in budget.values() for f in per.values())]))


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
