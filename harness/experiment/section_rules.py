"""The rules of an experiment's grids and optional sections (the τ grid, ``grid_overrides``, ``grid_extensions``, the
budget, frontier, multi-label, condition, Σ read-out and single-pair sections), checked on its settings alone before
any plan is built (:func:`harness.experiment.validate.validate_experiment` calls :func:`check_grids_and_sections`),
and the downstream recipe of a section (:func:`sweep_settings`: ``downstream.settings``, ``transfer.settings``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.experiment.config import SECTION_SWITCHES, Experiment, _noisy, class_pair
from harness.experiment.plan import check_grid_values


def check_grids_and_sections(exp: Experiment) -> None:
    """The τ grids' run folders, ``grid_overrides``, a τ grid of a study with no noisy method (:func:`_check_grid_read`),
    keys of a section or mechanism the experiment leaves off
    (:func:`_check_inactive_keys`), the methods the budget, frontier and conditions name (``frontier.method`` and
    ``frontier.methods`` not both given), the conditions' seeds and the budget's epochs (given when it has methods).

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
            f"grid_overrides [{', '.join(map(str, exp.grid_overrides))}] set the grid runs only, and no method has a "
            f"grid ({why}; no method has a tune), so they would be ignored: drop grid_overrides, or add a grid "
            "(temperature_grid with a noisy method, or a method's tune: {key: ..., values: [...]})"
        )
    _check_grid_read(exp.temperature_grid, exp.methods, "temperature_grid", "methods")
    if exp.multilabel.methods:  # without them, multilabel.* is refused as a section left off (_check_inactive_keys)
        ml = exp.multilabel
        _check_grid_read(ml.temperature_grid, ml.methods, "multilabel.temperature_grid", "multilabel.methods")
    _check_inactive_keys(exp)
    _check_sigma_sections(exp)
    fr = exp.frontier
    if fr.method is not None and fr.methods is not None:  # one was read, the other ignored (audit19 A19-08)
        raise ValueError(
            f"frontier.method={fr.method} is the older single-method spelling and frontier.methods="
            f"[{', '.join(map(str, fr.methods))}] is given too, and the frontier reads only one of them: keep one "
            f"(frontier.methods: [{fr.method}] for that method alone, or remove frontier.method)"
        )
    if exp.frontier.methods == [] and exp.frontier.schedules:  # unset is [frontier.method]; [] would read so too
        raise ValueError(
            "frontier.methods=[] names no method: to switch the frontier off, give frontier.schedules={}; for the "
            "default method (frontier.method), leave frontier.methods unset"
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


def _check_grid_read(grid: "list[float]", methods: dict, key: str, where: str) -> None:
    """A τ grid (``temperature_grid``, ``multilabel.temperature_grid``) is read only for the methods of its study whose
    head has noise (:func:`harness.experiment.config._noisy`, as :func:`harness.experiment.plan._plan` plans the grid
    runs; a method's ``tune`` is a grid of its own, which never reads it), so a non-empty grid of a study without
    one would be ignored.

    Raises:
        ValueError: naming the key, its values, the study's methods and the fix.
    """
    if not grid or any(_noisy(h) for h in methods.values()):
        return
    shown = ", ".join(f"{m}: covariance {h.get('covariance', 'low_rank')}" for m, h in methods.items())
    raise ValueError(
        f"{key}={[float(v) for v in grid]} tunes the τ of methods with noise only (covariance other than none), and "
        f"no method of {'this experiment' if where == 'methods' else where} has noise ({shown}), so it would be "
        "ignored (a method's tune is a grid of its own): add a method with noise or drop the grid"
    )


def _check_inactive_keys(exp: Experiment) -> None:
    """No key set away from its default whose section or mechanism this experiment leaves off, so would ignore:
    ``grid_extensions`` without a τ grid of two values or more for a noisy method
    (:func:`harness.experiment.plan._extend_grids`), a key of an optional section whose switch
    (:data:`~harness.experiment.config.SECTION_SWITCHES`) is empty: ``budget.*`` without ``budget.methods``,
    ``frontier.*`` without ``frontier.schedules``, ``multilabel.*`` without ``multilabel.methods``, ``downstream.*``
    without ``downstream.tasks``."""
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
            empty = "[]" if isinstance(getattr(section, on), list) else "{}"
            unread += [
                (
                    f"{name}.{k}",
                    getattr(section, k),
                    f"{name}.{on}",
                    f" (an override {name}.{on}={empty} switches it off whole)",
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


def _check_sigma_sections(exp: Experiment) -> None:
    """The Σ read-out and the single-pair design are read only by the covariance analysis (``covariance: true``; the
    summary reads ``sigma_readout.class_conditional`` whatever it is), the single-pair design only beside a
    ``sigma_readout`` (:func:`harness.experiment.report_stage` reads both under ``covariance and sigma_readout``);
    the design has two distinct arms, two different pairs of two distinct classes, and a pilot of at most
    ``max_seeds``."""
    sp = exp.single_pair
    shown = f"{{arms: {list(sp.arms)}, pairs: {list(map(list, sp.pairs))}}}" if sp is not None else ""
    unread = [("single_pair", shown)] if sp is not None else []
    unread += [(f"sigma_readout.{k}", v) for k, v in exp.sigma_readout.items() if k != "class_conditional"]
    if unread and not exp.covariance:
        key, value = unread[0]
        raise ValueError(
            f"{key}={value} is read only by the covariance analysis (covariance: true), and this experiment has "
            f"covariance: false, so it would be ignored: remove {key}, or set covariance: true"
        )
    if sp is None:
        return
    if not exp.sigma_readout:
        raise ValueError(
            f"single_pair={shown} is read only with sigma_readout (the Σ read-out it is reported in), and this "
            "experiment has none, so it would be ignored: remove single_pair, or give sigma_readout, e.g. "
            "sigma_readout: {clean: <condition>}"
        )
    if len(sp.arms) != 2 or sp.arms[0] == sp.arms[1]:
        raise ValueError(
            f"single_pair.arms={list(sp.arms)} must be two distinct condition names [D1, D2] (arm i carries the "
            "noise on pairs[i]): give two, e.g. arms: [d1, d2]"
        )
    if (
        len(sp.pairs) != 2
        or any(not isinstance(p, (list, tuple)) or len(set(map(str, p))) != 2 or len(p) != 2 for p in sp.pairs)
        or class_pair(sp.pairs[0]) == class_pair(sp.pairs[1])  # one pair in both arms: Δ is 0 by construction
    ):
        raise ValueError(
            f"single_pair.pairs={list(map(list, sp.pairs))} must be two pairs of two distinct class names "
            "[[a, b], [c, d]], the two pairs different (pair i carries the noise in arm i; a pair is unordered): give "
            "two, e.g. pairs: [[cat, dog], [car, truck]]"
        )
    unknown = [n for n in sp.spread_from if n not in exp.conditions]
    if unknown:
        raise ValueError(
            f"single_pair.spread_from names {', '.join(map(repr, unknown))}, which is not a condition of this "
            f"experiment ({', '.join(exp.conditions) or 'it has none'}): name one of them"
        )
    if sp.pilot_seeds > sp.max_seeds:
        raise ValueError(
            f"single_pair.pilot_seeds={sp.pilot_seeds} is more than single_pair.max_seeds={sp.max_seeds} (the pilot "
            "may raise the seeds per arm up to max_seeds): give max_seeds >= pilot_seeds, or pilot_seeds: 0"
        )


def sweep_settings(preset: str, given: "dict[str, Any]", key: str) -> Any:
    """The :class:`harness.downstream.config.SweepSettings` of a section: its ``preset`` with ``given`` over it.

    Args:
        preset: a name of :data:`harness.downstream.config.PRESETS` (checked by the caller).
        given: the section's ``settings`` mapping.
        key: the section's key in the experiment file (``downstream.settings``, ``transfer.settings``), for messages.

    Raises:
        ValueError: an unknown key, or a value its rule refuses, naming ``key``, the setting, its value and the fix.
    """
    from harness.downstream.config import PRESETS, SweepSettings

    try:
        return SweepSettings(**{**PRESETS[preset], **given})
    except TypeError as e:
        raise ValueError(f"{key}: {e}; see harness.downstream.config.SweepSettings for the keys") from None
    except ValueError as e:
        if any(str(e).startswith(f"{k} ") for k in given):  # a declared rule: its message starts with the key
            raise ValueError(f"{key}.{e}") from None
        for k, v in given.items():  # the setting refused on its own with the same message
            try:
                SweepSettings(**{**PRESETS[preset], k: v})
            except ValueError as alone:
                if str(alone) == str(e):
                    raise ValueError(f"{key}.{k}={v!r}: {e}") from None
        raise ValueError(f"{key}: {e}") from None
