"""The main study's later runs, checked before any work (:func:`harness.experiment.validate.validate_experiment` calls
:func:`check_variant_configs`): the configs of every frontier schedule, condition and budget curve are built and
validated, and a condition must change something: a condition whose runs are the main study's runs would be
trained once (:func:`harness.experiment.plan._derived` plans it as that run) and reported as a condition of its own,
compared with itself."""

from __future__ import annotations

from typing import Any

from harness.experiment.config import ConditionSection, Experiment
from harness.experiment.plan import _Plan, _same_run


def check_variant_configs(exp: Experiment, main: _Plan) -> None:
    """The configs of the main study's later runs, each built and validated: every frontier schedule's (at each
    method's given head; built at the chosen τ once it is known, :func:`harness.experiment.plan.frontier_plan`), every
    condition's (:func:`_check_condition`) and one budget run's per epoch count.

    Args:
        exp: the experiment (its settings checked on their own).
        main: the main study's plan, as validated (no value of a grid chosen yet).

    Raises:
        ValueError: a setting a config refuses, prefixed with the section it comes from (``frontier.schedules.<name>``,
            ``conditions.<name>``); a condition that changes nothing (:func:`_check_condition`).
    """
    fr = exp.frontier
    for name, overrides in fr.schedules.items():
        for m in fr.names():
            try:
                main.make(m, main.heads[m], exp.seeds[0], "check", list(overrides))
            except ValueError as e:  # the section the settings come from, then the setting's own message
                raise ValueError(f"frontier.schedules.{name}: {e}") from None
    bases: "dict[tuple[str, int], Any]" = {}  # (method, seed) -> the main study's config, built once
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
    from harness.io import quote

    overrides = list(cond.upstream_overrides)
    seed = next((s for s in cond.seeds if s in exp.seeds), cond.seeds[0])
    configs, heads = {}, {}
    for m in cond.methods:
        heads[m] = main.setting(m, min(main.grid[m])) if main.grid.get(m) else (dict(main.heads[m]), [])
        try:
            configs[m] = main.make(m, heads[m][0], seed, "check", [*heads[m][1], *overrides])
        except ValueError as e:  # the section the settings come from, then the setting's own message
            raise ValueError(f"conditions.{name}: {e}") from None

    def base(m: str) -> Any:
        planned = main.configs.get(f"{m}_s{seed}") if m not in main.grid else None
        if planned is None and (m, seed) not in bases:
            bases[m, seed] = main.make(m, heads[m][0], seed, "check", heads[m][1])
        return planned if planned is not None else bases[m, seed]

    ordered = sorted(cond.methods, key=lambda m: m in main.grid)  # the planned runs first: nothing to build
    if any(not _same_run(configs[m], base(m)) for m in ordered):
        return
    keys = list(dict.fromkeys(str(o).split("=", 1)[0].strip() for o in overrides))
    what = (
        f"{', '.join(keys)} already {'has' if len(keys) == 1 else 'have'} that value in the main study's runs"
        if keys
        else "it sets no setting"
    )
    raise ValueError(
        f"conditions.{name}.upstream_overrides=[{', '.join(quote(str(o), 80) for o in overrides)}] changes nothing: "
        f"{what}, so the runs of condition {name} would be the main study's ({', '.join(cond.methods)} at seed "
        f"{seed}: the same config), trained once and reported as a condition of its own, compared with itself: "
        f"change a setting in conditions.{name}.upstream_overrides, or remove the condition"
    )
