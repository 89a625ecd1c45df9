"""How many jobs an experiment's plan holds, before its later stages are decided: the total behind the
progress lines of ``harness run`` (``[12/87 jobs done, 75 left]``, :meth:`harness.workers.Workers.expect`)."""

from __future__ import annotations

from dataclasses import replace

from harness.experiment.config import Experiment
from harness.experiment.plan import _derived, _first_wave, _Plan


def _second_wave(plan: _Plan, methods: dict, seeds: list) -> "list[tuple[str, int]]":
    """(method, seed) of the runs :func:`harness.experiment.choice._choose_temperatures` adds once each grid
    method's τ is chosen: every seed when the grid runs had their own schedule, else all but the first."""
    return [(m, seed) for m in methods if m in plan.grid for seed in seeds[0 if plan.grid_overrides else 1 :]]


def planned_jobs(exp: Experiment, plans: "dict[str, _Plan]") -> int:
    """The jobs ``harness run`` submits for ``exp`` (:func:`harness.experiment.stages.run_experiment`): the
    upstream runs of the main study (grid, then the seeds at the chosen τ), of the conditions and budget curves
    that are not runs of the study, of the multi-label study and of the frontier, plus one shift and one
    transfer job per final run of each evaluated method. Grid extensions past an edge are not known yet (the
    runner announces them when it adds them).

    Which condition and budget runs equal a study run does not depend on the value chosen (τ, or a tuned setting:
    every run of a method is trained at it), so a stand-in (the grid's smallest) decides it here. ``plans`` is left
    unchanged.

    Args:
        exp: the experiment.
        plans: its plans from :func:`harness.experiment.validate.validate_experiment` (``main``, ``multilabel``).
    """
    main = plans["main"]
    second = _second_wave(main, exp.methods, exp.seeds)
    jobs = len(_first_wave(main, exp.methods, exp.seeds)) + len(second)
    trial = replace(
        main, configs=dict(main.configs), chosen={**main.chosen, **{m: min(g) for m, g in main.grid.items() if g}}
    )
    for m, seed in second:
        folder = trial.folder(m, trial.chosen[m], seed)
        trial.configs.setdefault(folder, trial.final(m, seed, folder))
    study = set(trial.configs)
    more = {
        _derived(trial, m, f"budget_{m}_e{int(e)}", [f"train.epochs={int(e)}", f"train.eval_every={int(e)}"])
        for m in exp.budget.methods
        for e in exp.budget.epochs
    }
    more |= {
        _derived(trial, m, f"{name}_{m}_s{sd}", list(c.upstream_overrides), sd)
        for name, c in exp.conditions.items()
        for m in c.methods
        for sd in c.seeds
    }
    jobs += len(more - study)
    ml = plans.get("multilabel")
    if ml is not None:
        jobs += len(_first_wave(ml, exp.multilabel.methods, exp.multilabel.seeds))
        jobs += len(_second_wave(ml, exp.multilabel.methods, exp.multilabel.seeds))
    if exp.frontier.schedules:
        jobs += len(exp.frontier.schedules) * len(exp.frontier.names())
    follow_ups = (exp.shift is not None) + bool(exp.downstream.tasks)  # per final run of an evaluated method
    return jobs + follow_ups * len(exp.evaluated()) * len(exp.seeds)
