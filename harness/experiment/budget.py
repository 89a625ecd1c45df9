"""Budget curves and the frontier: accuracy, NLL and ECE of runs trained for different budgets, against
CPU-minutes at a training-step rate measured side by side for all their methods in one process
(:func:`harness.experiment.step_cost.step_costs`, timed by :func:`harness.upstream.cost.step_seconds`), with the
runs' recorded wall clock beside it (it measures the machine's load as much as the run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from harness.experiment.config import Experiment
from harness.experiment.plan import _metrics, _Plan
from harness.experiment.step_cost import _axis

_WALL_HEADER = "recorded wall CPU-minutes (load varies)"


def _minutes(v: float) -> str:
    """CPU-minutes as the tables print them: one decimal from 1 minute up, three below (the digits runs)."""
    return f"{v:.1f}" if v >= 1 else f"{v:.3f}"


def _point(d: Path, costs: dict) -> dict:
    """One run as a point of a curve: epochs, recorded optimiser steps, CPU-minutes at the side-by-side rate
    (``costs``, :func:`harness.experiment.step_cost.step_costs`), the recorded wall CPU-minutes (wall minutes x
    threads; load varies), evaluation-split top-1 (or prec@1), NLL and ECE, and the held-out split's NLL and top-1."""
    m = _metrics(d)
    acc = "top1" if "top1" in m["metrics"] else "prec@1"
    cfg = json.loads((d / "run.json").read_text())["config"]
    wall = float(m.get("wall_seconds") or 0.0) / 60
    held = m.get("heldout_metrics") or {}
    cost = costs["runs"][str(d)]
    return {
        "epochs": cfg["train"]["epochs"],
        "steps": m.get("steps"),
        "backbone": cfg["model"]["backbone"],
        "wall_minutes": wall,
        "threads": m.get("threads"),
        "cpu_minutes": cost["cpu_minutes"],
        "step_seconds": cost["step_seconds"],
        "recorded_cpu_minutes": wall * (m.get("threads") or 1),
        acc: m["metrics"][acc],
        "nll": m["metrics"].get("nll", m["metrics"].get("sigmoid_nll")),
        "ece": m["metrics"].get("ece"),
        "heldout_nll": held.get("nll"),
        "heldout_top1": held.get("top1"),
        "precision": m.get("mixed_precision"),
        "run": str(d),
    }


def frontier_runs(plan: _Plan, runs: "dict[str, list[Path]]", exp: Experiment) -> "dict[str, list[tuple[str, Path]]]":
    """Per frontier method, (schedule, run folder): the study's own (chosen) run first, then each candidate's."""
    out = {}
    for m in exp.frontier.names():
        out[m] = [
            (
                "this study's schedule (chosen)"
                + (f": {' '.join(exp.upstream_overrides)}" if exp.upstream_overrides else ""),
                runs[m][0],
            )
        ]
        out[m] += [
            (name, Path(plan.configs[f"frontier{i}_{m}_s{exp.seeds[0]}"].output_dir))
            for i, name in enumerate(exp.frontier.schedules)
        ]
    return out


def frontier_section(plan: _Plan, runs: "dict[str, list[Path]]", exp: Experiment, costs: dict) -> dict:
    """Accuracy against CPU-minutes at the side-by-side rate (``costs``,
    :func:`harness.experiment.step_cost.step_costs`), per frontier method: each candidate schedule's run and the
    study's own (chosen)."""
    rows = [
        {"method": m, "schedule": name, **_point(d, costs)}
        for m, pairs in frontier_runs(plan, runs, exp).items()
        for name, d in pairs
    ]
    rows.sort(key=lambda r: (exp.frontier.names().index(r["method"]), r["cpu_minutes"]))
    acc = "top1" if "top1" in rows[0] else "prec@1"
    table = [
        [
            r["method"],
            r["schedule"],
            r["backbone"],
            str(r["epochs"]),
            str(r["steps"]),
            _minutes(r["cpu_minutes"]),
            _minutes(r["recorded_cpu_minutes"]),
            f"{100 * r[acc]:.2f}%",
            f"{r['nll']:.4f}",
            "" if r["heldout_nll"] is None else f"{r['heldout_nll']:.4f}",
        ]
        for r in rows
    ]
    text = []
    for m in exp.frontier.names():
        mine = [r for r in rows if r["method"] == m]
        best = max(mine, key=lambda r: r[acc])
        text.append(
            f"Frontier ({m}, first seed): {acc} from {100 * mine[0][acc]:.2f}% at "
            f"{_minutes(mine[0]['cpu_minutes'])} CPU-minutes to {100 * best[acc]:.2f}% at "
            f"{_minutes(best['cpu_minutes'])} CPU-minutes per run at the side-by-side rate "
            f"({best['schedule']})."
        )
    last = max(rows, key=lambda r: r["cpu_minutes"])
    m = _metrics(Path(last["run"]))
    images = int(m.get("train_images") or 0) // max(int(last["epochs"]), 1)
    text.append(
        f"Frontier protocol: {acc} of the model at the last epoch (no epoch chosen on the test split), "
        f"{images:,} training images a epoch ({m.get('train_data', 'training split')}), backbone "
        f"{last['backbone']}." + (f" Reference: {exp.frontier.reference}" if exp.frontier.reference else "")
    )
    axis = _axis(costs)
    return {
        "tables": [
            (
                f"Frontier: {acc} (first seed, evaluation split) for candidate schedules against {axis}",
                [
                    "method",
                    "schedule",
                    "backbone",
                    "epochs",
                    "steps",
                    "CPU-minutes (side-by-side rate)",
                    _WALL_HEADER,
                    acc,
                    "NLL",
                    "held-out NLL",
                ],
                table,
            )
        ],
        "text": text,
        "json": {"frontier": rows, "frontier_axis": axis},
    }


def _search_cost(grids: "dict[str, list[Path]]", points: "dict[str, list[dict]]") -> "dict[str, dict]":
    """Per method, the CPU-minutes of its τ-grid runs at the side-by-side rate: each finished grid run's
    recorded steps x the method's measured step seconds (τ does not change a step's cost) x threads / 60."""
    out = {}
    for m, dirs in grids.items():
        rate = next((p for p in points.get(m, []) if p.get("step_seconds")), None)
        done = [d for d in dirs if (Path(d) / "metrics.json").is_file()]
        if rate is None or not done:
            continue
        steps = sum(int(_metrics(Path(d)).get("steps") or 0) for d in done)
        out[m] = {
            "runs": len(done),
            "steps": steps,
            "cpu_minutes": steps * rate["step_seconds"] * (rate.get("threads") or 1) / 60,
        }
    return out


def budget_section(
    curves: "dict[str, dict[int, Path]]", costs: dict, grids: "Optional[dict[str, list[Path]]]" = None
) -> dict:
    """Budget curves: per method, the first seed trained for each epoch count (its own schedule),
    with top-1, NLL and ECE on the evaluation split against CPU-minutes at the side-by-side rate
    (``costs``, :func:`harness.experiment.step_cost.step_costs`: proportional to each run's recorded steps, the
    recorded wall CPU-minutes beside them); where each method's top-1 curve crosses the first method's (one seed
    per point: read small gaps as noise); a figure."""
    points = {m: [{**_point(d, costs), "epochs": e} for e, d in sorted(per.items())] for m, per in curves.items()}
    first = next(iter(points))
    acc = "top1" if "top1" in points[first][0] else "prec@1"
    table = [
        [
            m,
            str(p["epochs"]),
            str(p["steps"]),
            _minutes(p["cpu_minutes"]),
            _minutes(p["recorded_cpu_minutes"]),
            f"{100 * p[acc]:.2f}%",
            f"{p['nll']:.4f}",
            f"{100 * p['ece']:.2f}",
            "" if p["heldout_nll"] is None else f"{p['heldout_nll']:.4f}",
            str(p["precision"]),
        ]
        for m, ps in points.items()
        for p in ps
    ]
    text, crossings = [], {}
    ref = {p["epochs"]: p for p in points[first]}
    for m, ps in points.items():
        if m == first:
            continue
        common = [p for p in ps if p["epochs"] in ref]
        diffs = [(p["epochs"], p[acc] - ref[p["epochs"]][acc]) for p in common]
        cross = [(a[0], b[0]) for a, b in zip(diffs, diffs[1:]) if np.sign(a[1]) != np.sign(b[1])]
        crossings[m] = {"diffs": {str(e): d for e, d in diffs}, "crossings": cross}
        signs = (
            ("; the sign of the difference changes between " + ", ".join(f"{a} and {b}" for a, b in cross) + " epochs")
            if cross
            else ""
        )
        text.append(
            f"Budget curve, {m} − {first} {acc} (first seed, points): "
            + ", ".join(f"{e} ep {100 * d:+.2f}" for e, d in diffs)
            + signs
            + ". One seed per point and no interval: no verdict "
            "on where (or whether) the curves cross."
        )
    search = _search_cost(grids or {}, points)
    if search:
        text.append(
            "τ search, off the curves' axis: each noisy head's τ was chosen by held-out NLL among its grid "
            "runs, which cost "
            + "; ".join(f"{m} {_minutes(v['cpu_minutes'])} CPU-minutes ({v['runs']} runs)" for m, v in search.items())
            + " at the side-by-side rate, on top of the points below. The grid's epoch count is a point of "
            "the curve, and that point is the grid run at the chosen τ: chosen on the held-out split "
            "among the grid's runs, so it is flattered by the choice (selection on the held-out split, "
            "not the test split)."
        )
    axis = _axis(costs)
    return {
        "tables": [
            (
                f"Budget curves: first seed trained for each epoch count (its own schedule); evaluation split "
                f"({acc}, NLL, ECE) and held-out NLL (noisy labels) against {axis}",
                [
                    "method",
                    "epochs",
                    "steps",
                    "CPU-minutes (side-by-side rate)",
                    _WALL_HEADER,
                    acc,
                    "NLL",
                    "ECE (%)",
                    "held-out NLL",
                    "precision",
                ],
                table,
            )
        ],
        "text": text,
        "json": {
            "budget_curves": {
                "points": points,
                "reference": first,
                "crossings": crossings,
                "axis": axis,
                "tau_search": search,
            }
        },
        "figures": [
            (
                f"Budget curves: evaluation-split top-1, NLL and ECE (first seed; labels: epochs) against {axis}",
                "budget_curves.png",
                budget_png(points, acc),
            )
        ],
    }


def budget_png(points: "dict[str, list[dict]]", acc: str) -> bytes:
    """Three panels (accuracy, NLL, ECE against CPU-minutes at the side-by-side rate, ``cpu_minutes`` of
    :func:`_point`), one line per method, points labelled by epochs."""
    from harness.report.figures import pyplot

    plt = pyplot()

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, key, label in zip(axes, (acc, "nll", "ece"), (acc, "NLL", "ECE")):
        for m, ps in points.items():
            x, y = [p["cpu_minutes"] for p in ps], [p[key] for p in ps]
            ax.plot(x, y, marker="o", label=m)
            for p, yy in zip(ps, y):
                ax.annotate(
                    str(p["epochs"]), (p["cpu_minutes"], yy), fontsize=7, xytext=(3, 3), textcoords="offset points"
                )
        ax.set_xscale("log")
        ax.set_xlabel("CPU-minutes per run (side-by-side step rate)")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    from harness.report.figures import png

    return png(fig)
