"""The rules of an experiment's grids and optional sections (the τ grid, ``grid_overrides``, ``grid_extensions``, the
budget, frontier, multi-label and condition sections), checked on its settings alone before any plan is built
(:func:`harness.experiment.validate.validate_experiment` calls :func:`check_grids_and_sections`)."""

from __future__ import annotations

import dataclasses

from harness.experiment.config import SECTION_SWITCHES, Experiment, _noisy
from harness.experiment.plan import check_grid_values


def check_grids_and_sections(exp: Experiment) -> None:
    """The τ grids' run folders, ``grid_overrides``, keys of a section or mechanism the experiment leaves off
    (:func:`_check_inactive_keys`), the methods the budget, frontier and conditions name, the conditions' seeds and
    the budget's epochs (given when it has methods).

    Raises:
        ValueError: naming the key, its value, the rule and the fix.
    """
    check_grid_values(exp.temperature_grid, "temperature_grid")
    check_grid_values(exp.multilabel.temperature_grid, "multilabel.temperature_grid")
    if exp.grid_overrides and not any(
        h.get("tune") or exp.temperature_grid and _noisy(h) for h in exp.methods.values()
    ):
        why = "no temperature_grid" if not exp.temperature_grid else "temperature_grid tunes methods with noise only"
        raise ValueError(
            f"grid_overrides [{', '.join(map(str, exp.grid_overrides))}] set the grid runs only, and no method has a grid ({why}; no "
            "method has a tune), so they would be ignored: drop grid_overrides, or add a grid (temperature_grid with "
            "a noisy method, or a method's tune: {key: ..., values: [...]})"
        )
    _check_inactive_keys(exp)
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


def _check_inactive_keys(exp: Experiment) -> None:
    """No key set away from its default whose section or mechanism this experiment leaves off, so would ignore:
    ``grid_extensions`` without a τ grid of two values or more for a noisy method
    (:func:`harness.experiment.plan._extend_grids`), a key of an optional section whose switch
    (:data:`~harness.experiment.config.SECTION_SWITCHES`) is empty: ``budget.*`` without ``budget.methods``,
    ``frontier.*`` without ``frontier.schedules``, ``multilabel.*`` without ``multilabel.methods``."""
    extended = len(exp.temperature_grid) > 1 and any(_noisy(h) and not h.get("tune") for h in exp.methods.values())
    unread = [
        ("grid_extensions", exp.grid_extensions, "temperature_grid of two values or more, with a noisy method", "")
    ]
    unread = [u for u in unread if u[1] and not extended]
    for name, on in SECTION_SWITCHES.items():
        section = getattr(exp, name)
        default = type(section)()
        if not getattr(section, on):
            keys = [f.name for f in dataclasses.fields(section) if f.name != on]
            unread += [
                (
                    f"{name}.{k}",
                    getattr(section, k),
                    f"{name}.{on}",
                    f" (an override {name}.{on}={{}} switches it off whole)",
                )
                for k in keys
                if getattr(section, k) != getattr(default, k)
            ]
    if unread:
        key, value, needs, off = unread[0]
        raise ValueError(
            f"{key}={value} is read only with {needs}, and this experiment has none, so it would be ignored: remove "
            f"{key}, or give {needs}{off}"
        )
