"""Choosing on the held-out split: after an experiment's τ (or ``tune``) grid has trained, the value with the lowest
held-out NLL per method (:func:`_choose_temperatures`), the grid's extension past an edge while the best value lies on
it (:func:`_extend_grids`), and every value such extensions may add (:func:`possible_extensions`, which the run folder
check claims before any work)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from harness.experiment.plan import _finished, _metrics, _Plan


def unfinished_grid_runs(
    plans: "list[_Plan]", kept: "set[str]" = frozenset(), more: "Sequence[str]" = ()
) -> "dict[str, list[str]]":
    """The grid runs of ``plans`` (only those named in ``more``, where given) not finished (no ``metrics.json``) and not
    among ``kept`` (folder names of runs a record restores), by method: what ``harness run --no-train`` cannot choose
    from (:func:`_heldout` reads every grid run's metrics)."""
    missing: "dict[str, list[str]]" = {}
    for plan in plans:
        for method, runs in plan.grid.items():
            for f in (f for f in runs.values() if not more or f in more):
                name = Path(plan.configs[f].output_dir).name
                if not _finished(plan.configs[f]) and name not in kept:
                    missing.setdefault(method, []).append(name)
    return missing


def _heldout(plan: _Plan, method: str) -> "tuple[dict[float, dict], str]":
    """Held-out metrics of every grid run of ``method`` (by τ) and the key that chooses."""
    held = {tau: _metrics(Path(plan.configs[f].output_dir))["heldout_metrics"] for tau, f in plan.grid[method].items()}
    return held, "nll" if "nll" in next(iter(held.values())) else "sigmoid_nll"


def _best_tau(plan: _Plan, method: str, held: "Optional[tuple[dict[float, dict], str]]" = None) -> float:
    """The τ with the lowest held-out NLL (ties: the smaller τ); ``held``: :func:`_heldout`, if read already."""
    held, key = held or _heldout(plan, method)
    return min(held, key=lambda t: (held[t][key], t))


def _past_edge(tau: float, below: bool) -> float:
    """The next τ past a grid's edge: τ/2 below its smallest value, 1.5τ above its largest (4 significant digits)."""
    return float(f"{tau / 2:.4g}") if below else float(f"{tau * 1.5:.4g}")


def possible_extensions(taus: "list[float]", limit: int) -> "list[float]":
    """Every τ :func:`_extend_grids` may add to a grid of values ``taus`` (two or more) in at most ``limit``
    extensions: the best τ moves one way only (a value added below the smallest leaves the others' held-out NLL as it
    was), so ``limit`` halvings below the smallest value or ``limit`` steps of 1.5x above the largest."""
    out: "list[float]" = []
    for below, tau in ((True, min(taus)), (False, max(taus))):
        for _ in range(limit if len(taus) > 1 else 0):
            tau = _past_edge(tau, below)
            out.append(tau)
    return out


def _extend_grids(plan: _Plan, base: "list[float]", limit: int) -> "list[str]":
    """τ-grid runs to add where the best τ so far lies on the edge of the values tried: τ/2 below the
    smallest, 1.5τ above the largest, at most ``limit`` additions per method (a ``tune`` grid is not
    extended: its setting may have bounds, e.g. ε < 1). Returns their folders."""
    new = []
    for method, runs in plan.grid.items():
        if method in plan.tuned or len(set(runs) - {float(t) for t in base}) >= limit:
            continue
        best, taus = _best_tau(plan, method), sorted(runs)
        if len(taus) > 1 and best in (taus[0], taus[-1]):
            new.append(plan.grid_run(method, _past_edge(best, below=best == taus[0])))
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
