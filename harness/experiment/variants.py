"""The main study's later runs, checked before any work (:func:`harness.experiment.validate.validate_experiment` calls
:func:`check_variant_configs`): the configs of every frontier schedule, condition and budget curve are built and
validated, and a condition or a frontier schedule must change something: a condition whose runs are the main study's
runs would be trained once (:func:`harness.experiment.plan._derived` plans it as that run) and reported as a condition
of its own, compared with itself; a frontier schedule whose runs are another schedule's, or the main study's, would be
trained again and shown as a point of its own (:func:`harness.experiment.plan.frontier_plan`). Two conditions may not
train the same runs (reported as two conditions, one a copy of the other), and a frontier schedule sets only how the
runs train (:data:`harness.experiment.config.SCHEDULE_KEYS`), never the data they train on or are scored on."""

from __future__ import annotations

from typing import Any

from harness.experiment.config import SCHEDULE_KEYS, ConditionSection, Experiment
from harness.experiment.plan import _Plan, untrained_settings


def check_variant_configs(exp: Experiment, main: _Plan) -> "dict[str, Any]":
    """The configs of the main study's later runs, each built and validated: every frontier schedule's
    (:func:`_check_schedules`; built at the chosen τ once it is known, :func:`harness.experiment.plan.frontier_plan`),
    every condition's (:func:`_check_condition`) and one budget run's per epoch count.

    Args:
        exp: the experiment (its settings checked on their own).
        main: the main study's plan, as validated (no value of a grid chosen yet).

    Returns:
        Every config built, by the section it comes from (``frontier.schedules.<name>, method <m>``,
        ``conditions.<name>, method <m>, seed <s>``, ``budget.epochs <e>, method <m>``): a method with a grid at its
        grid's first value (:func:`_stand_in`); what each run reads (its data, backbone, weights) is checked on them
        with the main study's runs (:func:`harness.experiment.run_inputs.check_run_inputs`).

    Raises:
        ValueError: a setting a config refuses, prefixed with the section it comes from (``frontier.schedules.<name>``,
            ``conditions.<name>``); a condition that changes nothing (:func:`_check_condition`) or trains another
            condition's runs (:func:`_check_conditions_apart`); a frontier schedule that sets a key outside
            :data:`~harness.experiment.config.SCHEDULE_KEYS` or trains another's runs or the main study's
            (:func:`_check_schedules`).
    """
    bases: "dict[tuple[str, int], Any]" = {}  # (method, seed) -> the main study's config, built once
    runs = _check_schedules(exp, main, bases)
    configs = {f"frontier.schedules.{n}, method {m}": cfg for n, per in runs.items() for m, cfg in per.items()}
    built: "dict[tuple[str, str, int], Any]" = {}  # (condition, method, seed) -> its config, built once
    for name, cond in exp.conditions.items():
        _check_condition(exp, main, name, cond, bases, built)
        _check_conditions_apart(exp, main, name, built)
    configs.update({f"conditions.{n}, method {m}, seed {s}": cfg for (n, m, s), cfg in built.items()})
    for e in exp.budget.epochs if exp.budget.methods else []:
        m = exp.budget.methods[0]
        extra = [f"train.epochs={e}", f"train.eval_every={e}"]
        configs[f"budget.epochs {e}, method {m}"] = main.make(m, *_stand_in(main, m, extra, exp.seeds[0]))
    return configs


def _check_condition(
    exp: Experiment,
    main: _Plan,
    name: str,
    cond: ConditionSection,
    bases: "dict[tuple[str, int], Any]",
    built: "dict[tuple[str, str, int], Any]",
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
    configs = {m: _condition_config(exp, main, name, m, seed, built) for m in cond.methods}
    ordered = sorted(cond.methods, key=lambda m: m in main.grid)  # the planned runs first: nothing to build
    if any(not _same_training(configs[m], _main_config(main, m, seed, bases)) for m in ordered):
        return
    raise ValueError(
        f"conditions.{name}.upstream_overrides={_shown(overrides)} changes nothing: {_unchanged(overrides)}, so the "
        f"runs of condition {name} would be the main study's ({', '.join(cond.methods)} at seed {seed}: the same "
        f"config), trained once and reported as a condition of its own, compared with itself: change a setting in "
        f"conditions.{name}.upstream_overrides, or remove the condition"
    )


def _condition_config(
    exp: Experiment, main: _Plan, name: str, method: str, seed: int, built: "dict[tuple[str, str, int], Any]"
) -> Any:
    """The config of ``method`` at ``seed`` in condition ``name`` (at the stand-in of :func:`_stand_in`), built once
    and kept in ``built``.

    Raises:
        ValueError: a setting the config refuses, prefixed ``conditions.<name>: ``.
    """
    if (name, method, seed) not in built:
        try:
            overrides = list(exp.conditions[name].upstream_overrides)
            built[name, method, seed] = main.make(method, *_stand_in(main, method, overrides, seed))
        except ValueError as e:  # the section the settings come from, then the setting's own message
            raise ValueError(f"conditions.{name}: {e}") from None
    return built[name, method, seed]


def _check_conditions_apart(exp: Experiment, main: _Plan, name: str, built: "dict[tuple[str, str, int], Any]") -> None:
    """Condition ``name`` trains none of the runs of a condition before it: a method both train, at a seed both have,
    is built under each one's overrides and compared as the planner compares runs
    (:func:`harness.experiment.plan._same_run`); the same config would be trained twice under two names and reported
    as two conditions, one a copy of the other (whether overrides change a config does not depend on the seed: the
    first shared one is compared).

    Raises:
        ValueError: naming both conditions' ``upstream_overrides``, the method and seed, and the fix.
    """
    cond = exp.conditions[name]
    for other in list(exp.conditions)[: list(exp.conditions).index(name)]:
        prior = exp.conditions[other]
        methods = [m for m in cond.methods if m in prior.methods]
        seed = next((s for s in cond.seeds if s in prior.seeds), None)
        if not methods or seed is None:
            continue  # no run in common: other methods or other seeds
        same = (
            m
            for m in methods
            if _same_training(
                _condition_config(exp, main, name, m, seed, built), _condition_config(exp, main, other, m, seed, built)
            )
        )
        m = next(same, None)
        if m is not None:
            raise ValueError(
                f"conditions.{name}.upstream_overrides={_shown(list(cond.upstream_overrides))} trains the same runs "
                f"as conditions.{other}.upstream_overrides={_shown(list(prior.upstream_overrides))} ({m} at seed "
                f"{seed}: the same config), so they would be trained twice and reported as two conditions, one a copy "
                f"of the other: remove condition {name} (add its methods and seeds to conditions.{other}), or change "
                f"a setting in conditions.{name}.upstream_overrides"
            )


def _check_schedule_keys(name: str, overrides: "list[str]") -> None:
    """Schedule ``name`` of ``frontier.schedules`` sets only keys of :data:`harness.experiment.config.SCHEDULE_KEYS`
    (each a key, or a section and its keys): how the runs train. A frontier shows each schedule's accuracy at its
    cost beside the others', so each point must be trained on the same examples and labels and scored on the same
    evaluation data; a schedule that sets a data key (``data.limit_eval``, ``data.eval_split``,
    ``data.label_noise``, ``data.source``...) or a head's method settings would be shown as another point of the
    same curve.

    Raises:
        ValueError: naming the schedule, the key, its override, the keys a schedule may set and the fix; a key of
            :func:`harness.experiment.plan.untrained_settings` (``data.eval_batch_size``, ``model.head.eval_seed``)
            named with what it sets, not what a run trains.
    """
    untrained = untrained_settings()
    for o in overrides:
        key = str(o).split("=", 1)[0].strip().lstrip("+~")
        if any(key == k or key.startswith(k + ".") for k in SCHEDULE_KEYS):
            continue
        allowed = ", ".join(k if "." in k else f"{k}.*" for k in SCHEDULE_KEYS)
        if key in untrained:  # as a schedule of only train.log_every is refused (audit19 A19-14, audit21 A21-12)
            raise ValueError(
                f"frontier.schedules.{name} sets {key} ({_shown([o])[1:-1]}), which changes nothing a run trains: "
                f"{key} sets {untrained[key]}; a frontier compares schedules of training, each point scored alike, so "
                f"a schedule sets only {allowed}: remove {key} from frontier.schedules.{name}"
            )
        raise ValueError(
            f"frontier.schedules.{name} sets {key} ({_shown([o])[1:-1]}), which is not a training schedule's "
            f"setting: a frontier compares schedules of training, each point trained on the same examples and labels "
            f"and scored on the same evaluation data, so a schedule sets only {allowed}: remove {key} from "
            f"frontier.schedules.{name}, or study other data as a condition (conditions.<name>.upstream_overrides: "
            f"[{_shown([o])[1:-1]}])"
        )


def _check_schedules(exp: Experiment, main: _Plan, bases: "dict[tuple[str, int], Any]") -> "dict[str, dict[str, Any]]":
    """Build the config of each frontier method at the first seed under each schedule of ``frontier.schedules`` (as
    :func:`harness.experiment.plan.frontier_plan` builds it, a method with a grid at its grid's first value:
    :func:`_stand_in`), and compare it, as the planner compares runs (:func:`harness.experiment.plan._same_run`), with
    the configs of the schedules before it and with the main study's config (the frontier's chosen point): a schedule
    whose runs are another's, or the main study's, would be trained again and shown as a point of its own.

    Returns:
        The configs built: schedule name -> method -> config.

    Raises:
        ValueError: a key a schedule may not set (:func:`_check_schedule_keys`, every schedule's before any config is
            built), a setting a schedule's config refuses (``frontier.schedules.<name>: ...``), or a schedule whose
            every method's config equals another schedule's or the main study's, naming both and the fix.
    """
    fr, seed = exp.frontier, exp.seeds[0]
    for name, overrides in fr.schedules.items():
        _check_schedule_keys(name, list(overrides))
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
            if all(_same_training(runs[name][m], runs[other][m]) for m in fr.names()):
                raise ValueError(
                    f"{given} trains the same runs as frontier.schedules.{other}={_shown(list(fr.schedules[other]))} "
                    f"({same}), so the frontier would show one schedule as two points: remove frontier.schedules."
                    f"{name}, or change a setting in it"
                )
        if all(_same_training(runs[name][m], _main_config(main, m, seed, bases)) for m in fr.names()):
            raise ValueError(
                f"{given} changes nothing: {_unchanged(list(overrides))}, so its runs would be the main study's "
                f"({same}), which the frontier shows already as this study's schedule (the chosen point): change a "
                f"setting in frontier.schedules.{name}, or remove the schedule"
            )
    return runs


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


def _same_training(a: Any, b: Any) -> bool:
    """Whether two upstream configs train the same model, as :func:`harness.experiment.plan._same_run` compares them
    but for the settings that change nothing a run trains (:func:`harness.experiment.plan.untrained_settings`: where
    its files and curves go, how often it is evaluated, logged or checkpointed, how its data is read, which evaluation
    keeps ``checkpoints/best.pt``, the head options only its evaluation or memory reads): a schedule or condition that
    sets only those would train the main study's runs again (audit19 A19-14, audit20 A20-03, audit21 A21-12)."""
    return split_untrained(a)[0] == split_untrained(b)[0]


def split_untrained(cfg: Any) -> "tuple[dict, dict[str, Any]]":
    """An upstream config as ``(what it trains, the rest)``: its settings as a dict without ``name``, ``output_dir``
    and the settings of :func:`harness.experiment.plan.untrained_settings`, and those settings' values by key
    (``{"model.head.eval_seed": 0, ...}``: the ones the config holds)."""
    from dataclasses import asdict

    kept = {k: v for k, v in asdict(cfg).items() if k not in ("name", "output_dir")}  # as _same_run strips
    values: "dict[str, Any]" = {}
    for key in untrained_settings():
        *sections, name = key.split(".")
        section = kept
        for part in sections:
            section = section.get(part) if isinstance(section, dict) else None
        if isinstance(section, dict) and name in section:
            values[key] = section.pop(name)
    return kept, values


def _unchanged(overrides: "list[str]") -> str:
    """Why ``overrides`` change nothing: the keys they set already have those values, set only what changes nothing a
    run trains (:func:`harness.experiment.plan.untrained_settings`, each group of keys named with what it sets), or
    they set none."""
    keys = list(dict.fromkeys(k for o in overrides for k in _set_keys(str(o))))
    if not keys:
        return "it sets no setting"
    untrained = untrained_settings()
    rest = [k for k in keys if k not in untrained]
    why = [f"{', '.join(rest)} already {'has' if len(rest) == 1 else 'have'} that value in the main study's runs"]
    groups: "dict[str, list[str]]" = {}
    for k in keys:
        if k in untrained:
            groups.setdefault(untrained[k], []).append(k)
    return "; ".join(
        why[: bool(rest)] + [f"{' and '.join(ks)} set{'s' * (len(ks) == 1)} {what}" for what, ks in groups.items()]
    )


def _set_keys(override: str) -> "list[str]":
    """The settings one ``key=value`` override sets, as dotted keys: ``model.head={eval_seed: 3}`` sets
    ``model.head.eval_seed``; the key as written where the value is not a section (or not read)."""
    from omegaconf import OmegaConf

    key, _, value = override.partition("=")
    key = key.strip().lstrip("+~")
    try:
        given = OmegaConf.to_container(OmegaConf.from_dotlist([f"{key}={value}"]))
    except Exception:  # not a valid override: refused with its own message when the runs are planned
        return [key]

    def leaves(node: Any, at: str) -> "list[str]":
        if isinstance(node, dict) and node:
            return [k for name, v in node.items() for k in leaves(v, f"{at}.{name}" if at else str(name))]
        return [at]

    return leaves(given, "")


def _shown(overrides: "list[str]") -> str:
    from harness.io import quote

    return f"[{', '.join(quote(str(o), 80) for o in overrides)}]"
