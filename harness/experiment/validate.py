"""Checking a whole experiment before any work: its settings (methods, seeds, workers, grids, the budget,
frontier and condition sections), every upstream config of every study (each method, seed and τ, as
:func:`harness.experiment.plan._plan` builds them), the shift and multi-label studies, the settings that need the
data's number of classes, the downstream settings and the output folders."""

from __future__ import annotations

from typing import Any

from harness.experiment.config import Experiment
from harness.experiment.plan import _Plan, _plan, check_grid_values
from harness.heads.variants import has_factors
from harness.rules import check_rules


def validate_experiment(exp: Experiment) -> "dict[str, _Plan]":
    """Check the whole experiment before any work: the rules declared on its fields
    (:mod:`harness.experiment.config`), then what relates them: methods, seeds, ensembles, every upstream config
    (each method, seed and τ), the multi-label study and the downstream settings.

    Returns:
        The plans of the studies (``main``, and ``multilabel`` when it has methods).

    Raises:
        ValueError: the first problem found; the message names the setting and the fix.
    """
    from harness.downstream.config import PRESETS, SweepSettings
    from harness.io import check_location, check_writable, path_under

    if exp.transfer is not None:
        raise ValueError(
            f"experiment {exp.name!r} is a transfer study of committed models (its `transfer:` section): "
            "run it with `harness run` or harness.experiment.transfer.run_transfer"
        )

    check_rules(exp)
    for key in ("runs_root", "results_root", "upstream_config"):
        check_location(getattr(exp, key), key)

    _check_methods_and_seeds(exp)
    _check_grids_and_sections(exp)
    root = path_under(exp.runs_root, exp.name)
    plans = {"main": _plan(exp, root, "", exp.methods, exp.seeds, exp.temperature_grid, [], exp.grid_overrides)}
    if exp.shift is not None:
        _check_shift(exp, plans["main"])
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
    _check_variant_configs(exp, plans["main"])
    _check_classes(plans, exp.confusable_pairs)
    _check_downstream(exp, PRESETS, SweepSettings)
    for what, folder in (("runs_root", exp.runs_root), ("results_root", exp.results_root)):
        check_writable(folder, f"{what} {str(folder)!r}", f"{what}=...")
    from harness.report.build import report_folder

    # refuses a folder another writer owns, before any work
    report_folder(exp.results_root, exp.name, overwrite=None, elsewhere="give the experiment another results_root=PATH")
    return plans


def _check_methods_and_seeds(exp: Experiment) -> None:
    """The methods and their names, the seeds (distinct), ``evaluate_methods`` and the ensemble sizes (at most the
    seeds)."""
    if not exp.methods:
        raise ValueError("the experiment names no methods: add e.g. methods: {hom: {covariance: none}}")
    _check_names(exp)
    _check_references(exp)
    if not exp.seeds:
        raise ValueError("seeds is empty: give at least one seed, e.g. seeds: [0]")
    for key, seeds in (
        ("seeds", exp.seeds),
        ("multilabel.seeds", exp.multilabel.seeds),
        *((f"conditions.{name}.seeds", c.seeds) for name, c in exp.conditions.items()),
        ("ensemble_sizes", exp.ensemble_sizes),
    ):
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"{key} {seeds} repeats a value (it would be counted twice): give distinct values")
    unknown = [m for m in exp.evaluate_methods if m not in exp.methods]
    if unknown:
        raise ValueError(f"evaluate_methods {', '.join(unknown)} not among the methods {', '.join(exp.methods)}")
    if any(n > len(exp.seeds) for n in exp.ensemble_sizes):
        raise ValueError(
            f"ensemble_sizes {exp.ensemble_sizes} must be at most the number of seeds ({len(exp.seeds)}): "
            "add seeds or drop the larger ensembles"
        )


def _check_grids_and_sections(exp: Experiment) -> None:
    """The τ grids' run folders, ``grid_overrides``, the methods the budget, frontier and conditions name, the
    conditions' seeds and the budget's epochs (given when it has methods)."""
    check_grid_values(exp.temperature_grid, "temperature_grid")
    check_grid_values(exp.multilabel.temperature_grid, "multilabel.temperature_grid")
    if exp.grid_overrides and not exp.temperature_grid and not any(h.get("tune") for h in exp.methods.values()):
        raise ValueError(
            "grid_overrides without a temperature_grid (or a method's tune) have nothing to apply to: "
            "drop them or add a grid"
        )
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
    if exp.budget.methods and not exp.budget.epochs:
        raise ValueError("budget.epochs is empty but budget.methods is not: give the epoch counts, e.g. [3, 10]")


def _check_shift(exp: Experiment, main: _Plan) -> None:
    """The shift section against the main study's configs: softmax links only, and its settings for their data."""
    from harness.shift.settings import check_settings

    cfgs = list(main.configs.values())
    if any(cfg.model.head.get("link", "softmax") != "softmax" for cfg in cfgs):
        raise ValueError(
            "shift: the main study's methods must use the softmax link (shift evaluation covers "
            "single-label models); drop the shift section or the sigmoid method"
        )
    try:
        check_settings(exp.shift, cfgs[0].data)
        if exp.shift.split is not None:  # read now, not after the training
            from harness.data.sources import build_split

            build_split(cfgs[0].data, exp.shift.split)
    except ValueError as e:
        raise ValueError(f"shift: {e}") from e


def _check_variant_configs(exp: Experiment, main: _Plan) -> None:
    """The configs of the main study's later runs, built at each method's given head: every frontier schedule's,
    every condition's and one budget run's per epoch count."""
    fr = exp.frontier
    variants = [  # the frontier's: checked here; built at the chosen τ once it is known (frontier_plan)
        *(
            (f"frontier.schedules.{name}", m, exp.seeds[0], list(o))
            for name, o in fr.schedules.items()
            for m in fr.names()
        ),
        *(
            (f"conditions.{name}", m, c.seeds[0], list(c.upstream_overrides))
            for name, c in exp.conditions.items()
            for m in c.methods
        ),
    ]
    for key, method, seed, overrides in variants:
        try:
            main.make(method, main.heads[method], seed, "check", overrides)
        except ValueError as e:  # the section the settings come from, then the setting's own message
            raise ValueError(f"{key}: {e}") from None
    for e in exp.budget.epochs if exp.budget.methods else []:
        main.make(
            exp.budget.methods[0],
            main.heads[exp.budget.methods[0]],
            exp.seeds[0],
            "check",
            [f"train.epochs={e}", f"train.eval_every={e}"],
        )


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
    if exp.replication:
        check_name(exp.replication, "replication (an experiment's name)")
        from harness.experiment.config import find_experiment

        try:  # the report reads its description (and the user runs it by that name)
            find_experiment(exp.replication)
        except FileNotFoundError as e:
            raise ValueError(
                f"replication {exp.replication!r} names no experiment ({e}); give the name of the experiment that "
                "reruns this one, or leave replication unset"
            ) from None


def _check_references(exp: Experiment) -> None:
    """What one section says of another: the studies ``primary``, ``sigma_readout`` and ``single_pair`` name exist;
    the read-out's keys; the single-pair spreads; ``confusable_pairs`` are pairs."""
    from harness.experiment.sigma import READOUTS

    studies = ["main", *exp.conditions]
    named = [
        ("primary.prospective_for", list(exp.primary.prospective_for), studies),
        ("sigma_readout", list(exp.sigma_readout.values()), list(exp.conditions)),
        ("single_pair.arms", list(exp.single_pair.arms) if exp.single_pair else [], list(exp.conditions)),
    ]
    for key, names, known in named:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(
                f"{key} names {', '.join(map(repr, unknown))}, which is not "
                f"{'main or ' if 'main' in known else ''}a condition of this experiment "
                f"({', '.join(exp.conditions) or 'it has none'}): name one of them"
            )
    if set(exp.sigma_readout) - set(READOUTS):
        raise ValueError(f"sigma_readout takes the keys {', '.join(READOUTS)}, got {sorted(exp.sigma_readout)}")
    spread = {k: v for k, v in (exp.single_pair.spread if exp.single_pair else {}).items() if not 0 < v <= 1}
    if spread:
        raise ValueError(
            f"single_pair.spread {spread} must be in (0, 1] each (a seed standard deviation of a mean correlation): "
            "give the spreads measured when the design was registered"
        )
    bad_pairs = [p for p in exp.confusable_pairs if len(p) != 2]
    if bad_pairs:
        raise ValueError(f"confusable_pairs must be pairs of class names, e.g. [[cat, dog]], got {bad_pairs}")


def _check_classes(plans: "dict[str, _Plan]", confusable_pairs: "list[list[str]]" = ()) -> None:
    """Settings that need the classes of the data (read once per study from its evaluation split): ``model.num_classes``
    and the heads' ``num_factors`` (<= K for noise on the logits); the main study's classes hold every name of
    ``confusable_pairs``."""
    from harness.data.sources import build_split

    for study, plan in plans.items():
        if not plan.configs:
            continue
        first = next(iter(plan.configs.values()))
        names = [str(c) for c in build_split(first.data, first.data.eval_split).class_names]
        k = len(names)
        unknown = sorted({str(c) for pair in confusable_pairs for c in pair} - set(names)) if study == "main" else []
        if unknown:
            raise ValueError(
                f"confusable_pairs names {', '.join(map(repr, unknown))}, not classes of the data (its classes: "
                f"{', '.join(names[:20])}{' ...' if k > 20 else ''}): name pairs of its classes, e.g. "
                f"[[{names[0]}, {names[-1]}]]"
            )
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
    except ValueError as e:  # a declared rule: its key is one of downstream.settings
        raise ValueError(f"downstream.settings.{e}") from None
    try:
        check_device(settings.device)
        check_tasks(expand_tasks(exp.downstream.tasks), settings)
    except (ValueError, FileNotFoundError) as e:
        raise ValueError(f"downstream: {e}") from e
