"""One run folder per planned run: every upstream run an experiment may train, by its folder name under
``<runs_root>/<name>/upstream/``, checked over the whole plan before any work.

The names are built from the plan's own names (:mod:`harness.experiment.plan`): a study's ``<method>_s<seed>`` (a grid
method's ``<method>_t<τ>_s<seed>`` or ``<method>_<setting><value>_s<seed>``, ``grid_...`` with its own schedule), the
multi-label study's ``multilabel_<...>``, a condition's ``<condition>_<method>_s<seed>``, a budget curve's
``budget_<method>_e<epochs>`` and a frontier schedule's ``frontier<i>_<method>_s<seed>``; so a condition named
``multilabel``, or a method named ``c1_hom`` beside condition ``c1``'s ``hom``, would give two runs one folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterator

from harness.experiment.choice import possible_extensions
from harness.experiment.config import Experiment
from harness.experiment.plan import _Plan, _same_run


def check_run_folders(exp: Experiment, plans: "dict[str, _Plan]") -> None:
    """No two planned runs of ``exp`` share a run folder: the main and multi-label studies at every value of their
    grids and at every value an extension past a τ grid's edge may add (the value chosen is not known yet), the
    budget curves, the conditions and the frontier schedules. A budget or condition run equal to a planned run is that run, trained
    once (as :func:`harness.experiment.plan._derived` plans it), and takes no folder of its own; that is looked at
    (its config built) only when the names alone collide.

    Args:
        exp: the experiment.
        plans: its studies' plans (``main``, and ``multilabel`` when it has methods), as validated.

    Raises:
        ValueError: naming both runs (study or condition, method, seed), the folder and the fix (a rename).
    """
    try:
        _claim_all(exp, plans, same=False)
    except ValueError:
        _claim_all(exp, plans, same=True)


def _claim_all(exp: Experiment, plans: "dict[str, _Plan]", same: bool) -> None:
    """Claim every planned run's folder (:func:`_claim`), a budget or condition run equal to a planned run left out
    when ``same`` (which builds their configs)."""
    owners: "dict[str, tuple[str, str]]" = {}  # folder -> (the run, what to rename)
    main = plans["main"]
    for folder, who, rename in _study(main, exp.methods, "methods", "method", "", exp.grid_extensions):
        _claim(exp, owners, folder, who, rename)
    trial = replace(  # a stand-in for the chosen values: whether a run equals a planned one does not depend on it
        main, configs=dict(main.configs), chosen={**main.chosen, **{m: min(g) for m, g in main.grid.items() if g}}
    )
    for m in trial.grid if same else []:
        for seed in trial.seeds[0 if trial.grid_overrides else 1 :]:
            folder = trial.folder(m, trial.chosen[m], seed)
            trial.configs.setdefault(folder, trial.final(m, seed, folder))
    derived = [
        *(
            (f"budget_{m}_e{int(e)}", m, trial.seeds[0], [f"train.epochs={int(e)}", f"train.eval_every={int(e)}"])
            + (f"budget.methods {m} at {int(e)} epochs", f"method {m!r}")
            for m in exp.budget.methods
            for e in exp.budget.epochs
        ),
        *(
            (f"{name}_{m}_s{seed}", m, seed, list(c.upstream_overrides))
            + (f"conditions.{name}, method {m}, seed {seed}", f"condition {name!r}")
            for name, c in exp.conditions.items()
            for m in c.methods
            for seed in c.seeds
        ),
    ]
    for folder, m, seed, overrides, who, rename in derived:
        cfg = trial.final(m, seed, folder, overrides) if same else None
        if same and any(_same_run(c, cfg) for c in trial.configs.values()):
            continue  # that run, trained once
        _claim(exp, owners, folder, who, rename)
        trial.configs[folder] = cfg
    for i, name in enumerate(exp.frontier.schedules):
        for m in exp.frontier.names():
            who = f"frontier.schedules.{name}, method {m}, seed {exp.seeds[0]}"
            _claim(exp, owners, f"frontier{i}_{m}_s{exp.seeds[0]}", who, f"method {m!r}")
    if "multilabel" in plans:
        runs = _study(
            plans["multilabel"], exp.multilabel.methods, "multilabel.methods", "multilabel method", "multilabel_"
        )
        for folder, who, rename in runs:
            _claim(exp, owners, folder, who, rename)


def _study(
    plan: _Plan, methods: dict, key: str, kind: str, prefix: str, extensions: int = 0
) -> "Iterator[tuple[str, str, str]]":
    """(folder, the run, what to rename) of every run a study may train: each seed of a method without a grid; for a
    grid method, the grid run and the other seeds' runs at each value of its grid, and at each value ``extensions``
    extensions past the τ grid's edges may add (:func:`harness.experiment.choice.possible_extensions`)."""
    for m in methods:
        if m not in plan.grid:
            yield from ((f"{prefix}{m}_s{s}", f"{key}.{m}, seed {s}", f"{kind} {m!r}") for s in plan.seeds)
            continue
        grid = sorted(plan.grid[m])
        past = [] if m in plan.tuned else [v for v in possible_extensions(grid, extensions) if v not in grid]
        for v in [*grid, *past]:
            edge = " (an extension past the grid's edge, grid_extensions)" if v in past else ""
            at = f"{key}.{m} at {plan.parameter(m)}={v:g}{edge}"
            yield prefix + plan.folder(m, v, plan.seeds[0], grid=True), f"{at}, seed {plan.seeds[0]}", f"{kind} {m!r}"
            for s in plan.seeds[0 if plan.grid_overrides else 1 :]:
                yield prefix + plan.folder(m, v, s), f"{at}, seed {s}", f"{kind} {m!r}"


def _claim(exp: Experiment, owners: "dict[str, tuple[str, str]]", folder: str, who: str, rename: str) -> None:
    """Give ``folder`` to the run ``who``.

    Raises:
        ValueError: another planned run has it, naming both, the folder and the fix.
    """
    if folder not in owners:
        owners[folder] = who, rename
        return
    other, other_rename = owners[folder]
    fix = f"rename {other_rename} or {rename}" if other_rename != rename else f"rename {rename}"
    raise ValueError(
        f"{other} and {who} would share the run folder {Path(exp.runs_root) / exp.name / 'upstream' / folder} (runs "
        "are named <method>_s<seed>, <condition>_<method>_s<seed>, multilabel_<method>_s<seed>, ...), so one would "
        f"be trained over the other or taken for it: {fix} so that their run names differ"
    )
