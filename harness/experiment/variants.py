"""The main study's later runs, checked before any work (:func:`harness.experiment.validate.validate_experiment` calls
:func:`check_variant_configs`): the configs of every frontier schedule, condition and budget curve are built and
validated, and a condition or a frontier schedule must change something: a condition whose runs are the main study's
runs would be trained once (:func:`harness.experiment.plan._derived` plans it as that run) and reported as a condition
of its own, compared with itself; a frontier schedule whose runs are another schedule's, or the main study's, would be
trained again and shown as a point of its own (:func:`harness.experiment.plan.frontier_plan`)."""

from __future__ import annotations

from typing import Any

from harness.experiment.config import ConditionSection, Experiment
from harness.experiment.plan import _Plan, _same_run


def check_variant_configs(exp: Experiment, main: _Plan) -> None:
    """The configs of the main study's later runs, each built and validated: every frontier schedule's
    (:func:`_check_schedules`; built at the chosen τ once it is known, :func:`harness.experiment.plan.frontier_plan`),
    every condition's (:func:`_check_condition`) and one budget run's per epoch count.

    Args:
        exp: the experiment (its settings checked on their own).
        main: the main study's plan, as validated (no value of a grid chosen yet).

    Raises:
        ValueError: a setting a config refuses, prefixed with the section it comes from (``frontier.schedules.<name>``,
            ``conditions.<name>``); a condition that changes nothing (:func:`_check_condition`); a frontier schedule
            that trains another's runs or the main study's (:func:`_check_schedules`).
    """
    bases: "dict[tuple[str, int], Any]" = {}  # (method, seed) -> the main study's config, built once
    _check_schedules(exp, main, bases)
    for name, cond in exp.conditions.items():
        _check_condition(exp, main, name, cond, bases)
    for e in exp.budget.epochs if exp.budget.methods else []:
        main.make(
            exp.budget.methods[0],
            main.heads[exp.budget.methods[0]],
            exp.seeds[0],
            "check",
            [f"train.epochs={e}", f"train.eval_every={e}"],
        )


def _check_condition(
    exp: Experiment, main: _Plan, name: str, cond: ConditionSection, bases: "dict[tuple[str, int], Any]"
) -> None:
    """Build the config of each method of condition ``name`` at one of its seeds (one the main study has, if any) and
    compare it with the main study's config of that method and seed (the planned run where there is one, else built
    and kept in ``bases``), as the planner compares them (:func:`harness.experiment.plan._same_run`); a method with a
    grid is built at its grid's first value on both sides (a stand-in for the value chosen later: whether the
    condition changes its config does not depend on it). Whether the overrides change a config does not depend on
    the seed either, so one seed is enough.

    Raises:
        ValueError: a setting the condition's config refuses (``conditions.<name>: ...``), or no method's config
            differs from the main study's, naming ``conditions.<name>.upstream_overrides``, the keys it sets and the
            fix.
    """
    overrides = list(cond.upstream_overrides)
    seed = next((s for s in cond.seeds if s in exp.seeds), cond.seeds[0])
    configs = {}
    for m in cond.methods:
        try:
            configs[m] = main.make(m, *_stand_in(main, m, overrides, seed))
        except ValueError as e:  # the section the settings come from, then the setting's own message
            raise ValueError(f"conditions.{name}: {e}") from None
    ordered = sorted(cond.methods, key=lambda m: m in main.grid)  # the planned runs first: nothing to build
    if any(not _same_run(configs[m], _main_config(main, m, seed, bases)) for m in ordered):
        return
    raise ValueError(
        f"conditions.{name}.upstream_overrides={_shown(overrides)} changes nothing: {_unchanged(overrides)}, so the "
        f"runs of condition {name} would be the main study's ({', '.join(cond.methods)} at seed {seed}: the same "
        f"config), trained once and reported as a condition of its own, compared with itself: change a setting in "
        f"conditions.{name}.upstream_overrides, or remove the condition"
    )


def _check_schedules(exp: Experiment, main: _Plan, bases: "dict[tuple[str, int], Any]") -> None:
    """Build the config of each frontier method at the first seed under each schedule of ``frontier.schedules`` (as
    :func:`harness.experiment.plan.frontier_plan` builds it, a method with a grid at its grid's first value:
    :func:`_stand_in`), and compare it, as the planner compares runs (:func:`harness.experiment.plan._same_run`), with
    the configs of the schedules before it and with the main study's config (the frontier's chosen point): a schedule
    whose runs are another's, or the main study's, would be trained again and shown as a point of its own.

    Raises:
        ValueError: a setting a schedule's config refuses (``frontier.schedules.<name>: ...``), or a schedule whose
            every method's config equals another schedule's or the main study's, naming both and the fix.
    """
    fr, seed = exp.frontier, exp.seeds[0]
    runs: "dict[str, dict[str, Any]]" = {}  # schedule -> method -> config
    for name, overrides in fr.schedules.items():
        runs[name] = {}
        for m in fr.names():
            try:
                runs[name][m] = main.make(m, *_stand_in(main, m, list(overrides), seed))
            except ValueError as e:  # the section the settings come from, then the setting's own message
                raise ValueError(f"frontier.schedules.{name}: {e}") from None
        given = f"frontier.schedules.{name}={_shown(list(overrides))}"
        same = f"{', '.join(fr.names())} at seed {seed}: the same config"
        for other in list(runs)[:-1]:
            if all(_same_run(runs[name][m], runs[other][m]) for m in fr.names()):
                raise ValueError(
                    f"{given} trains the same runs as frontier.schedules.{other}={_shown(list(fr.schedules[other]))} "
                    f"({same}), so the frontier would show one schedule as two points: remove frontier.schedules."
                    f"{name}, or change a setting in it"
                )
        if all(_same_run(runs[name][m], _main_config(main, m, seed, bases)) for m in fr.names()):
            raise ValueError(
                f"{given} changes nothing: {_unchanged(list(overrides))}, so its runs would be the main study's "
                f"({same}), which the frontier shows already as this study's schedule (the chosen point): change a "
                f"setting in frontier.schedules.{name}, or remove the schedule"
            )


def _stand_in(main: _Plan, method: str, overrides: "list[str]", seed: int) -> "tuple[dict, int, str, list[str]]":
    """The arguments of ``main.make`` for ``method`` at ``seed`` with ``overrides`` added: a method with a grid at its
    grid's first value (a stand-in for the value chosen later: whether overrides change its config does not depend
    on it), as given otherwise."""
    head, own = (
        main.setting(method, min(main.grid[method])) if main.grid.get(method) else (dict(main.heads[method]), [])
    )
    return head, seed, "check", [*own, *overrides]


def _main_config(main: _Plan, method: str, seed: int, bases: "dict[tuple[str, int], Any]") -> Any:
    """The main study's config of ``method`` at ``seed``: the planned run where there is one, else built at the
    stand-in (:func:`_stand_in`) and kept in ``bases``."""
    planned = main.configs.get(f"{method}_s{seed}") if method not in main.grid else None
    if planned is None and (method, seed) not in bases:
        bases[method, seed] = main.make(method, *_stand_in(main, method, [], seed))
    return planned if planned is not None else bases[method, seed]


def _unchanged(overrides: "list[str]") -> str:
    """Why ``overrides`` change nothing: the keys they set already have those values, or they set none."""
    keys = list(dict.fromkeys(str(o).split("=", 1)[0].strip() for o in overrides))
    if not keys:
        return "it sets no setting"
    return f"{', '.join(keys)} already {'has' if len(keys) == 1 else 'have'} that value in the main study's runs"


def _shown(overrides: "list[str]") -> str:
    from harness.io import quote

    return f"[{', '.join(quote(str(o), 80) for o in overrides)}]"
