"""Budget curves and the frontier: accuracy, NLL and ECE of runs trained for different budgets, against
CPU-minutes at a training-step rate measured side by side for all their methods in one process
(:func:`step_costs`, timed by :func:`harness.upstream.cost.step_seconds`), with the runs' recorded wall clock
beside it (it measures the machine's load as much as the run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from harness.experiment.config import Experiment
from harness.experiment.plan import _metrics, _Plan

#: the file in ``<runs_root>/<experiment>/`` that keeps the side-by-side step-cost measurements
STEP_COST_FILE = "step_cost.json"
STEP_COST_FORMAT = "harness.step-cost/1"
_WALL_HEADER = "recorded wall CPU-minutes (load varies)"


def _run_step(d: Path) -> "tuple[Any, int, str, int, int]":
    """What a finished run's training step was: its config (from run.json), K, precision and threads (from
    metrics.json), and its micro-batches per process (``steps`` x ``train.grad_accum_steps`` x processes).

    Raises:
        ValueError: a run.json config the current schema rejects.
    """
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig

    run, m = json.loads((d / "run.json").read_text()), _metrics(d)
    cfg = load_config(UpstreamConfig, base=run["config"])
    batches = int(m["steps"]) * int(cfg.train.grad_accum_steps) * int(run.get("num_processes") or 1)
    return cfg, len(run["class_names"]), str(m.get("mixed_precision") or "no"), int(m.get("threads") or 1), batches


def step_costs(
    runs: "dict[str, list[Path]]",
    cache: Path,
    reference: Optional[str] = None,
    progress: Callable[[str], None] = lambda s: None,
    **measure: Any,
) -> dict:
    """Each run's cost at the side-by-side rate: its micro-batches (optimiser steps, from its metrics.json,
    x gradient-accumulation steps x processes) x the median seconds of its training step x threads / 60,
    in CPU-minutes. The steps are measured by :func:`harness.upstream.cost.step_seconds`: one measurement per
    distinct :func:`harness.upstream.cost.step_key` (runs of a method that differ only in epochs share it), all of
    them together, interleaved, the reference method's first.

    The measurement is kept in ``cache`` (JSON, a list of measurements, written atomically) and reused
    by a later call on the same CPU (``lscpu``'s name) whose keys it all holds; otherwise all the keys
    asked for are measured again, together, and the measurement is added to the file.

    Args:
        runs: method -> finished run folders (run.json and metrics.json read).
        cache: the measurement file (``<runs_root>/<experiment>/step_cost.json``).
        reference: the method the ratios are to (default ``hom`` if present, else the first).
        measure: ``steps``, ``warmup``, ``rounds`` for :func:`harness.upstream.cost.step_seconds`.

    Returns:
        ``{"runs": {folder: {"method", "name", "key", "step_seconds", "micro_batches", "threads",
        "cpu_minutes"}}, "methods": {method: [{"name", "step_seconds", "ratio", "ratio_range"}]},
        "reference", "reference_config", "measurement": {"cpu", "date", "steps", "warmup", "rounds", "load",
        "device", "native_bf16", "reused", "file", "configs": {name: {"key", "median_seconds", "round_medians",
        "ratio", "ratio_range"}}}}``: ``name`` is the measured config's (``reference_config`` the
        reference method's first run's), ``step_seconds`` in seconds per step, ``cpu_minutes`` in CPU-minutes;
        ``ratio`` is the median over rounds of the round's median step time over the reference config's in the
        same round, ``ratio_range`` their min and max.

    Raises:
        ValueError: no runs, or :func:`harness.upstream.cost.step_seconds`'s errors.
    """
    from harness.io import atomic_write_text
    from harness.provenance import cpu_details, cpu_model
    from harness.upstream.cost import key_text, step_key, step_seconds

    if not any(runs.values()):
        raise ValueError("no runs to cost")
    reference = reference if reference in runs else ("hom" if "hom" in runs else next(iter(runs)))
    order = [reference] + [m for m in runs if m != reference]
    specs, per_run = {}, {}
    for m in order:
        for d in runs[m]:
            cfg, k, precision, threads, batches = _run_step(d)
            text = key_text(step_key(cfg, k, precision, threads))
            specs.setdefault(text, (m, cfg, k, precision, threads))
            per_run[str(d)] = {"method": m, "key": text, "micro_batches": batches, "threads": threads}
    cpu = cpu_details() or cpu_model()
    store = json.loads(cache.read_text()) if cache.is_file() else {"format": STEP_COST_FORMAT, "measurements": []}
    found = next(
        (
            x
            for x in reversed(store["measurements"])
            if x["cpu"] == cpu and set(specs) <= {key_text(c["key"]) for c in x["configs"].values()}
        ),
        None,
    )
    if found is None:
        names: "dict[str, str]" = {}
        for text, (m, *_) in specs.items():
            n = sum(1 for v in names.values() if v == m or v.startswith(f"{m} ("))
            names[text] = m if n == 0 else f"{m} ({n + 1})"
        progress(f"[step cost] measuring {len(specs)} training step(s) side by side")
        found = step_seconds(
            {names[t]: s[1] for t, s in specs.items()},
            num_classes={names[t]: s[2] for t, s in specs.items()},
            precision={names[t]: s[3] for t, s in specs.items()},
            threads={names[t]: s[4] for t, s in specs.items()},
            progress=progress,
            **measure,
        )
        store["measurements"].append(found)
        atomic_write_text(cache, json.dumps(store, indent=1))
        reused = False
    else:
        reused = True
    by_key = {key_text(c["key"]): name for name, c in found["configs"].items()}
    ref_name = by_key[next(iter(specs))]  # the step of the reference method's first run
    ref_rounds = found["configs"][ref_name]["round_medians"]
    configs = {}  # per measured config: its step and its ratio to the reference config, round by round
    for n, c in found["configs"].items():
        ratios = [a / b for a, b in zip(c["round_medians"], ref_rounds)]
        configs[n] = {
            **{k: c[k] for k in ("key", "median_seconds", "round_medians")},
            "ratio": float(np.median(ratios)),
            "ratio_range": [min(ratios), max(ratios)],
        }
    methods: "dict[str, list[dict]]" = {}
    for folder, r in per_run.items():
        name = by_key[r["key"]]
        c = configs[name]
        r.update(
            name=name,
            step_seconds=c["median_seconds"],
            cpu_minutes=r["micro_batches"] * c["median_seconds"] * r["threads"] / 60,
        )
        entry = {
            "name": name,
            "step_seconds": c["median_seconds"],
            "ratio": c["ratio"],
            "ratio_range": c["ratio_range"],
        }
        if entry not in methods.setdefault(r["method"], []):
            methods[r["method"]].append(entry)
    measurement = {k: found[k] for k in ("cpu", "date", "steps", "warmup", "rounds", "load", "device")}
    measurement["native_bf16"] = found.get("native_bf16")  # None: measured before it was recorded
    measurement.update(reused=reused, file=str(cache), configs=configs)
    return {
        "runs": per_run,
        "methods": {m: methods[m] for m in order if m in methods},
        "reference": reference,
        "reference_config": ref_name,
        "measurement": measurement,
    }


def _ratios(costs: dict) -> str:
    """``het 1.08, diag 1.05``: each method's step time over the reference's (median of the per-round ratios;
    a method with several measured steps, e.g. a frontier schedule on another backbone, names each config)."""
    return ", ".join(
        f"{m if len(es) == 1 else e['name']} {e['ratio']:.2f}"
        for m, es in costs["methods"].items()
        for e in es
        if e["name"] != costs["reference_config"]
    )


def _axis(costs: dict) -> str:
    """What the x axis of the budget and frontier sections is, in one clause for captions and the JSON."""
    s = costs["measurement"]
    return (
        f"CPU-minutes at the side-by-side rate: the run's recorded optimiser steps (epochs x steps per epoch) x "
        f"the median seconds of its training step x threads / 60, the steps timed side by side ({s['rounds']} "
        f"interleaved rounds x {s['steps']} steps per config) on {s['cpu']} on {s['date']}; step time x "
        f"{costs['reference']}: {_ratios(costs) or 'one config only'}"
    )


def step_cost_section(costs: dict) -> dict:
    """The side-by-side measurement of the training steps behind the budget and frontier axes: a table
    (per measured config: what it is, median seconds per step, each round's median, ratio to the
    reference), a paragraph saying what was and was not measured, when and where, and the JSON."""
    s, ref = costs["measurement"], costs["reference"]
    users: "dict[str, list[str]]" = {}
    for r in costs["runs"].values():
        if r["method"] not in users.setdefault(r["name"], []):
            users[r["name"]].append(r["method"])
    rows = []
    for name, c in s["configs"].items():
        if name not in users:  # a reused measurement may hold configs no section uses now
            continue
        k, (lo, hi) = c["key"], c["ratio_range"]
        head = ", ".join(f"{a}={b}" for a, b in k["head"].items()) or "default head"
        rows.append(
            [
                name,
                ", ".join(users[name]),
                f"{k['backbone']}; {head}; loss {k['loss']}",
                f"{k['batch_size']} x {k['image_size']} px",
                k["precision"],
                str(k["threads"]),
                f"{c['median_seconds']:.4f}",
                ", ".join(f"{v:.4f}" for v in c["round_medians"]),
                f"{c['ratio']:.2f} ({lo:.2f}-{hi:.2f})",
            ]
        )
    load = s["load"]
    text = (
        f"Cost axis of the budget curves and the frontier: CPU-minutes at the side-by-side rate, i.e. a run's "
        f"recorded optimiser steps (epochs x steps per epoch, from its metrics.json) x the median seconds of "
        f"its training step x threads / 60. Each distinct training step (backbone, head, batch, image size, "
        f"precision, threads, loss; runs that differ only in epochs share one) was built as harness.upstream.train "
        f"builds it and timed on a random batch of its shape (forward, training loss, backward, optimiser "
        f"step) in one process, {s['rounds']} rounds, each timing every config in turn for {s['steps']} steps "
        f"after {s['warmup']} untimed ones, so load that changes between rounds slows all of them alike "
        f"(harness.upstream.cost). Measured on {s['cpu']}"
        + (f" ({s['device']})" if s["device"] != "cpu" else "")
        + f" on {s['date']}, niceness "
        f"{load['start']['nice']}, 1-minute load average {load['start']['load_average'][0]:.1f} at the start and "
        f"{load['end']['load_average'][0]:.1f} at the end"
        + (f"; reused from {s['file']}" if s["reused"] else f"; kept in {s['file']}")
        + ". Not timed: "
        "data loading (the array loader decodes the split once and augments whole batches as tensor ops; it "
        "costs the same for every config of one batch shape, so timing it too would move every ratio towards "
        "1), evaluation and checkpoints. Step time x "
        f"{ref}: {_ratios(costs) or 'one config only'}. The recorded wall-clock CPU-minutes (wall minutes x "
        "threads) are kept beside it: the runs trained in different sessions of a shared machine, so they "
        "measure its load as much as the run."
        + (
            " This CPU has no native bf16: the runs' bf16 steps were timed emulated, far slower than on a CPU "
            "with it, so these minutes overstate the cost of runs trained there (the ratios between methods "
            "of one precision still compare them)."
            if s.get("native_bf16") is False and any(c["key"]["precision"] == "bf16" for c in s["configs"].values())
            else ""
        )
    )
    return {
        "tables": [
            (
                f"Training-step cost measured side by side ({s['rounds']} interleaved rounds x {s['steps']} "
                f"steps per config; {s['cpu']}; {s['date']}); ratio: each round's median over {ref}'s in "
                "the same round, median (range) over rounds",
                [
                    "config",
                    "methods",
                    "model",
                    "batch",
                    "precision",
                    "threads",
                    "median s/step",
                    "round medians (s)",
                    f"x {ref}",
                ],
                rows,
            )
        ],
        "text": [text],
        "json": {"step_cost": costs},
    }


def _minutes(v: float) -> str:
    """CPU-minutes as the tables print them: one decimal from 1 minute up, three below (the digits runs)."""
    return f"{v:.1f}" if v >= 1 else f"{v:.3f}"


def _point(d: Path, costs: dict) -> dict:
    """One run as a point of a curve: epochs, recorded optimiser steps, CPU-minutes at the side-by-side rate
    (``costs``, :func:`step_costs`), the recorded wall CPU-minutes (wall minutes x threads; load varies),
    evaluation-split top-1 (or prec@1), NLL and ECE, and the held-out split's NLL and top-1."""
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
    """Accuracy against CPU-minutes at the side-by-side rate (``costs``, :func:`step_costs`), per frontier
    method: each candidate schedule's run and the study's own (chosen)."""
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
    (``costs``, :func:`step_costs`: proportional to each run's recorded steps, the recorded wall
    CPU-minutes beside them); where each method's top-1 curve crosses the first method's (one seed per
    point: read small gaps as noise); a figure."""
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
