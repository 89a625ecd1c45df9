"""The report sections an experiment adds, computed from its run folders: comparisons with
intervals and verdicts, the τ grid, budget curves and frontier (against CPU-minutes at a training-step
rate measured side by side, :func:`step_costs`), multi-label study, downstream table, wall time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from harness.experiment.config import Experiment, _noisy
from harness.experiment.plan import _metrics, _Plan
from harness.uncertainty import metrics as M


def _merge(into: dict, part: dict) -> dict:
    """Append a section's tables, text and JSON to ``into``; returns ``into``."""
    into.setdefault("tables", []).extend(part.get("tables", []))
    into.setdefault("text", []).extend(part.get("text", []))
    into.setdefault("json", {}).update(part.get("json", {}))
    into.setdefault("figures", []).extend(part.get("figures", []))
    return into


def time_section(times: "dict[str, dict[str, float]]", grids: "dict[str, list[dict]]", stages: "dict[str, float]",
                 elapsed: float, sessions: int, workers: int) -> dict:
    """Wall time: the experiment's elapsed minutes over all its sessions (without the frontier runs),
    and per stage: each study's upstream runs (each run's own total over its sessions, from its
    metrics.json), of which the τ-grid runs not kept, then ensembles and downstream (this session)."""
    from harness.provenance import machine

    rows, total = [], 0.0
    labels = {"main": "upstream", "multilabel": "multi-label study"}
    for study, per in times.items():
        if not per or study not in labels:
            continue
        dropped = sum(per.get(Path(r["run"]).name, 0.0) for r in grids.get(study, []) if not r["chosen"])
        rows.append([f"{labels[study]}: {len(per)} runs", f"{sum(per.values()) / 60:.1f}",
                     f"of which {dropped / 60:.1f} in τ-grid runs not kept" if dropped else ""])
        total += sum(per.values())
    for k, v in stages.items():
        rows.append([k, f"{v / 60:.1f}", "this session" + (": its jobs' own time, summed" if k != "ensembles" else "")])
        total += v
    m = machine()
    rows.append(["sum of the above", f"{total / 60:.1f}", f"{workers} job(s) at a time"])
    rows.append(["elapsed, start to report (the experiment's wall time)", f"{elapsed:.1f}",
                 f"{sessions} session(s); {m.get('cpu')}, {m.get('cores')} cores"])
    if times.get("frontier"):
        rows.append([f"frontier: {len(times['frontier'])} runs (diagnostic, not in the total)",
                     f"{sum(times['frontier'].values()) / 60:.1f}", ""])
    return {"tables": [("Wall time per stage (minutes; upstream runs: each run's own time, summed over its sessions; "
                        "shift and downstream: their jobs' own time; jobs run side by side and overlap, so the sum "
                        "exceeds the elapsed time)",
                        ["stage", "minutes", "note"], rows)],
            "text": [f"Wall time: {elapsed:.1f} minutes from start to report ({sessions} session(s), {workers} "
                     f"job(s) at a time) on {m.get('cpu')} with {m.get('cores')} cores, frontier runs excluded."],
            "json": {"wall_minutes": {"elapsed": elapsed, "sessions": sessions, "sum_of_stages": total / 60,
                                      "runs": {s: {k: v / 60 for k, v in per.items()} for s, per in times.items()},
                                      "stages": {k: v / 60 for k, v in stages.items()}}}}


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
    from upstream.config import UpstreamConfig

    run, m = json.loads((d / "run.json").read_text()), _metrics(d)
    cfg = load_config(UpstreamConfig, base=run["config"])
    batches = int(m["steps"]) * int(cfg.train.grad_accum_steps) * int(run.get("num_processes") or 1)
    return cfg, len(run["class_names"]), str(m.get("mixed_precision") or "no"), int(m.get("threads") or 1), batches


def step_costs(runs: "dict[str, list[Path]]", cache: Path, reference: Optional[str] = None,
               progress: Callable[[str], None] = lambda s: None, **measure: Any) -> dict:
    """Each run's cost at the side-by-side rate: its micro-batches (optimiser steps, from its metrics.json,
    x gradient-accumulation steps x processes) x the median seconds of its training step x threads / 60,
    in CPU-minutes. The steps are measured by :func:`upstream.cost.step_seconds`: one measurement per
    distinct :func:`upstream.cost.step_key` (runs of a method that differ only in epochs share it), all of
    them together, interleaved, the reference method's first.

    The measurement is kept in ``cache`` (JSON, a list of measurements, written atomically) and reused
    by a later call on the same CPU (``lscpu``'s name) whose keys it all holds; otherwise all the keys
    asked for are measured again, together, and the measurement is added to the file.

    Args:
        runs: method -> finished run folders (run.json and metrics.json read).
        cache: the measurement file (``<runs_root>/<experiment>/step_cost.json``).
        reference: the method the ratios are to (default ``hom`` if present, else the first).
        measure: ``steps``, ``warmup``, ``rounds`` for :func:`upstream.cost.step_seconds`.

    Returns:
        ``{"runs": {folder: {"method", "name", "key", "step_seconds", "micro_batches", "threads",
        "cpu_minutes"}}, "methods": {method: [{"name", "step_seconds", "ratio", "ratio_range"}]},
        "reference", "reference_config", "measurement": {"cpu", "date", "steps", "warmup", "rounds", "load",
        "device", "reused", "file", "configs"}}``: ``name`` is the measured config's (``reference_config`` the
        reference method's first run's), ``step_seconds`` in seconds per step, ``cpu_minutes`` in CPU-minutes;
        ``ratio`` is the median over rounds of the round's median step time over the reference config's in the
        same round, ``ratio_range`` their min and max.

    Raises:
        ValueError: no runs, or :func:`upstream.cost.step_seconds`'s errors.
    """
    from harness.io import atomic_write_text
    from harness.provenance import cpu_details, cpu_model
    from upstream.cost import key_text, step_key, step_seconds

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
    found = next((x for x in reversed(store["measurements"]) if x["cpu"] == cpu
                  and set(specs) <= {key_text(c["key"]) for c in x["configs"].values()}), None)
    if found is None:
        names: "dict[str, str]" = {}
        for text, (m, *_) in specs.items():
            n = sum(1 for v in names.values() if v == m or v.startswith(f"{m} ("))
            names[text] = m if n == 0 else f"{m} ({n + 1})"
        progress(f"[step cost] measuring {len(specs)} training step(s) side by side")
        found = step_seconds({names[t]: s[1] for t, s in specs.items()},
                             num_classes={names[t]: s[2] for t, s in specs.items()},
                             precision={names[t]: s[3] for t, s in specs.items()},
                             threads={names[t]: s[4] for t, s in specs.items()}, progress=progress, **measure)
        store["measurements"].append(found)
        atomic_write_text(cache, json.dumps(store, indent=1))
        reused = False
    else:
        reused = True
    by_key = {key_text(c["key"]): (name, c) for name, c in found["configs"].items()}
    ref_name, ref_config = by_key[next(iter(specs))]  # the step of the reference method's first run
    ref_rounds = ref_config["round_medians"]
    methods: "dict[str, list[dict]]" = {}
    for folder, r in per_run.items():
        name, c = by_key[r["key"]]
        r.update(name=name, step_seconds=c["median_seconds"],
                 cpu_minutes=r["micro_batches"] * c["median_seconds"] * r["threads"] / 60)
        ratios = [a / b for a, b in zip(c["round_medians"], ref_rounds)]
        entry = {"name": name, "step_seconds": c["median_seconds"], "ratio": float(np.median(ratios)),
                 "ratio_range": [min(ratios), max(ratios)]}
        if entry not in methods.setdefault(r["method"], []):
            methods[r["method"]].append(entry)
    measurement = {k: found[k] for k in ("cpu", "date", "steps", "warmup", "rounds", "load", "device")}
    measurement.update(reused=reused, file=str(cache),
                       configs={n: {k: c[k] for k in ("key", "median_seconds", "round_medians")}
                                for n, c in found["configs"].items()})
    return {"runs": per_run, "methods": {m: methods[m] for m in order if m in methods}, "reference": reference,
            "reference_config": ref_name, "measurement": measurement}


def _ratios(costs: dict) -> str:
    """``het 1.08, diag 1.05``: each method's step time over the reference's (median of the per-round ratios;
    a method with several measured steps, e.g. a frontier schedule on another backbone, names each config)."""
    return ", ".join(f"{m if len(es) == 1 else e['name']} {e['ratio']:.2f}" for m, es in costs["methods"].items()
                     for e in es if e["name"] != costs["reference_config"])


def _axis(costs: dict) -> str:
    """What the x axis of the budget and frontier sections is, in one clause for captions and the JSON."""
    s = costs["measurement"]
    return (f"CPU-minutes at the side-by-side rate: the run's recorded optimiser steps (epochs x steps per epoch) x "
            f"the median seconds of its training step x threads / 60, the steps timed side by side ({s['rounds']} "
            f"interleaved rounds x {s['steps']} steps per config) on {s['cpu']} on {s['date']}; step time x "
            f"{costs['reference']}: {_ratios(costs) or 'one config only'}")


def step_cost_section(costs: dict) -> dict:
    """The side-by-side measurement of the training steps behind the budget and frontier axes: a table
    (per measured config: what it is, median seconds per step, each round's median, ratio to the
    reference), a paragraph saying what was and was not measured, when and where, and the JSON."""
    s, ref = costs["measurement"], costs["reference"]
    ref_rounds = s["configs"][costs["reference_config"]]["round_medians"]
    users: "dict[str, list[str]]" = {}
    for r in costs["runs"].values():
        if r["method"] not in users.setdefault(r["name"], []):
            users[r["name"]].append(r["method"])
    rows = []
    for name, c in s["configs"].items():
        if name not in users:  # a reused measurement may hold configs no section uses now
            continue
        k, ratios = c["key"], [a / b for a, b in zip(c["round_medians"], ref_rounds)]
        head = ", ".join(f"{a}={b}" for a, b in k["head"].items()) or "default head"
        rows.append([name, ", ".join(users[name]), f"{k['backbone']}; {head}; loss {k['loss']}",
                     f"{k['batch_size']} x {k['image_size']} px", k["precision"], str(k["threads"]),
                     f"{c['median_seconds']:.4f}", ", ".join(f"{v:.4f}" for v in c["round_medians"]),
                     f"{np.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"])
    load = s["load"]
    text = (f"Cost axis of the budget curves and the frontier: CPU-minutes at the side-by-side rate, i.e. a run's "
            f"recorded optimiser steps (epochs x steps per epoch, from its metrics.json) x the median seconds of "
            f"its training step x threads / 60. Each distinct training step (backbone, head, batch, image size, "
            f"precision, threads, loss; runs that differ only in epochs share one) was built as upstream.train "
            f"builds it and timed on a random batch of its shape (forward, training loss, backward, optimiser "
            f"step) in one process, {s['rounds']} rounds, each timing every config in turn for {s['steps']} steps "
            f"after {s['warmup']} untimed ones, so load that changes between rounds slows all of them alike "
            f"(upstream.cost). Measured on {s['cpu']}"
            + (f" ({s['device']})" if s["device"] != "cpu" else "") + f" on {s['date']}, niceness "
            f"{load['start']['nice']}, 1-minute load average {load['start']['load_average'][0]:.1f} at the start and "
            f"{load['end']['load_average'][0]:.1f} at the end"
            + (f"; reused from {s['file']}" if s["reused"] else f"; kept in {s['file']}") + ". Not timed: "
            "data loading (the array loader decodes the split once and augments whole batches as tensor ops; it "
            "costs the same for every config of one batch shape, so timing it too would move every ratio towards "
            "1), evaluation and checkpoints. Step time x "
            f"{ref}: {_ratios(costs) or 'one config only'}. The recorded wall-clock CPU-minutes (wall minutes x "
            "threads) are kept beside it: the runs trained in different sessions of a shared machine, so they "
            "measure its load as much as the run.")
    return {"tables": [(f"Training-step cost measured side by side ({s['rounds']} interleaved rounds x {s['steps']} "
                        f"steps per config; {s['cpu']}; {s['date']}); ratio: each round's median over {ref}'s in "
                        "the same round, median (range) over rounds",
                        ["config", "methods", "model", "batch", "precision", "threads", "median s/step",
                         "round medians (s)", f"x {ref}"], rows)],
            "text": [text], "json": {"step_cost": costs}}


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
    return {"epochs": cfg["train"]["epochs"], "steps": m.get("steps"), "backbone": cfg["model"]["backbone"],
            "wall_minutes": wall, "threads": m.get("threads"), "cpu_minutes": cost["cpu_minutes"],
            "step_seconds": cost["step_seconds"], "recorded_cpu_minutes": wall * (m.get("threads") or 1),
            acc: m["metrics"][acc], "nll": m["metrics"].get("nll", m["metrics"].get("sigmoid_nll")),
            "ece": m["metrics"].get("ece"), "heldout_nll": held.get("nll"), "heldout_top1": held.get("top1"),
            "precision": m.get("mixed_precision"), "run": str(d)}


def frontier_runs(plan: _Plan, runs: "dict[str, list[Path]]", exp: Experiment) -> "dict[str, list[tuple[str, Path]]]":
    """Per frontier method, (schedule, run folder): the study's own (chosen) run first, then each candidate's."""
    out = {}
    for m in exp.frontier.names():
        out[m] = [("this study's schedule (chosen)" + (f": {' '.join(exp.upstream_overrides)}"
                                                       if exp.upstream_overrides else ""), runs[m][0])]
        out[m] += [(name, Path(plan.configs[f"frontier{i}_{m}_s{exp.seeds[0]}"].output_dir))
                   for i, name in enumerate(exp.frontier.schedules)]
    return out


def frontier_section(plan: _Plan, runs: "dict[str, list[Path]]", exp: Experiment, costs: dict) -> dict:
    """Accuracy against CPU-minutes at the side-by-side rate (``costs``, :func:`step_costs`), per frontier
    method: each candidate schedule's run and the study's own (chosen)."""
    rows = [{"method": m, "schedule": name, **_point(d, costs)}
            for m, pairs in frontier_runs(plan, runs, exp).items() for name, d in pairs]
    rows.sort(key=lambda r: (exp.frontier.names().index(r["method"]), r["cpu_minutes"]))
    acc = "top1" if "top1" in rows[0] else "prec@1"
    table = [[r["method"], r["schedule"], r["backbone"], str(r["epochs"]), str(r["steps"]),
              _minutes(r["cpu_minutes"]), _minutes(r["recorded_cpu_minutes"]), f"{100 * r[acc]:.2f}%",
              f"{r['nll']:.4f}", "" if r["heldout_nll"] is None else f"{r['heldout_nll']:.4f}"] for r in rows]
    text = []
    for m in exp.frontier.names():
        mine = [r for r in rows if r["method"] == m]
        best = max(mine, key=lambda r: r[acc])
        text.append(f"Frontier ({m}, first seed): {acc} from {100 * mine[0][acc]:.2f}% at "
                    f"{_minutes(mine[0]['cpu_minutes'])} CPU-minutes to {100 * best[acc]:.2f}% at "
                    f"{_minutes(best['cpu_minutes'])} CPU-minutes per run at the side-by-side rate "
                    f"({best['schedule']}).")
    axis = _axis(costs)
    return {"tables": [(f"Frontier: {acc} (first seed, evaluation split) for candidate schedules against {axis}",
                        ["method", "schedule", "backbone", "epochs", "steps", "CPU-minutes (side-by-side rate)",
                         _WALL_HEADER, acc, "NLL", "held-out NLL"], table)],
            "text": text, "json": {"frontier": rows, "frontier_axis": axis}}


def budget_section(curves: "dict[str, dict[int, Path]]", costs: dict) -> dict:
    """Budget curves: per method, the first seed trained for each epoch count (its own schedule),
    with top-1, NLL and ECE on the evaluation split against CPU-minutes at the side-by-side rate
    (``costs``, :func:`step_costs`: proportional to each run's recorded steps, the recorded wall
    CPU-minutes beside them); where each method's top-1 curve crosses the first method's (one seed per
    point: read small gaps as noise); a figure."""
    points = {m: [{**_point(d, costs), "epochs": e} for e, d in sorted(per.items())] for m, per in curves.items()}
    first = next(iter(points))
    acc = "top1" if "top1" in points[first][0] else "prec@1"
    table = [[m, str(p["epochs"]), str(p["steps"]), _minutes(p["cpu_minutes"]), _minutes(p["recorded_cpu_minutes"]),
              f"{100 * p[acc]:.2f}%", f"{p['nll']:.4f}", f"{100 * p['ece']:.2f}",
              "" if p["heldout_nll"] is None else f"{p['heldout_nll']:.4f}", str(p["precision"])]
             for m, ps in points.items() for p in ps]
    text, crossings = [], {}
    ref = {p["epochs"]: p for p in points[first]}
    for m, ps in points.items():
        if m == first:
            continue
        common = [p for p in ps if p["epochs"] in ref]
        diffs = [(p["epochs"], p[acc] - ref[p["epochs"]][acc]) for p in common]
        cross = [(a[0], b[0]) for a, b in zip(diffs, diffs[1:]) if np.sign(a[1]) != np.sign(b[1])]
        crossings[m] = {"diffs": {str(e): d for e, d in diffs}, "crossings": cross}
        where = ("; the curves cross between " + ", ".join(f"{a} and {b} epochs" for a, b in cross)) if cross else (
            f"; {m} stays {'above' if diffs and diffs[0][1] > 0 else 'below'} {first} at every point")
        text.append(f"Budget curve, {m} − {first} {acc} (first seed, points): " + ", ".join(
            f"{e} ep {100 * d:+.2f}" for e, d in diffs) + where + " (one seed per point).")
    axis = _axis(costs)
    return {"tables": [(f"Budget curves: first seed trained for each epoch count (its own schedule); evaluation split "
                        f"({acc}, NLL, ECE) and held-out NLL (noisy labels) against {axis}",
                        ["method", "epochs", "steps", "CPU-minutes (side-by-side rate)", _WALL_HEADER, acc, "NLL",
                         "ECE (%)", "held-out NLL", "precision"], table)],
            "text": text, "json": {"budget_curves": {"points": points, "reference": first, "crossings": crossings,
                                                     "axis": axis}},
            "figures": [(f"Budget curves: evaluation-split top-1, NLL and ECE (first seed; labels: epochs) against "
                         f"{axis}", "budget_curves.png", budget_png(points, acc))]}


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
                ax.annotate(str(p["epochs"]), (p["cpu_minutes"], yy), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("CPU-minutes per run (side-by-side step rate)")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    from harness.report.figures import png

    return png(fig)


def temperature_section(rows: "list[dict]", title: str) -> dict:
    """The τ grid: held-out metrics of every τ tried and the choice (never the test split)."""
    key = rows[0]["key"]
    acc = "top1" if key == "nll" else "prec@1"
    table = [[r["method"], f"{r['temperature']:g}", f"{r['heldout'][key]:.4f}",
              f"{100 * r['heldout'][acc]:.2f}%", "chosen" if r["chosen"] else ""] for r in rows]
    text = [f"{title}: " + "; ".join(f"{r['method']} τ = {r['temperature']:g}" for r in rows if r["chosen"])
            + f" (lowest held-out {key}, first seed; the test split was not used)."]
    return {"tables": [(f"{title} (held-out split, noisy labels; first seed)",
                        ["method", "τ", f"held-out {key}", f"held-out {acc}", ""], table)],
            "text": text, "json": {"temperature_grid": rows}}


def paired_differences(runs: "dict[str, list[Path]]", keys: "tuple[str, ...]", reference: str = "hom") -> "list[dict]":
    """Seed level: per method and metric, the per-seed differences against ``reference`` (same seed
    index) with their mean, 95% t-interval, paired t-test and verdict
    (:func:`harness.uncertainty.compare.seed_level`).

    Returns:
        One dict per (method, metric): ``diffs``, ``mean``, ``std``, ``lo``, ``hi``, ``n``,
        ``p`` (paired t-test; None with < 2 seeds), ``verdict``.
    """
    from harness.uncertainty.compare import seed_level

    ref = {k: [_metrics(d)["metrics"][k] for d in runs[reference]] for k in keys}
    out = []
    for method, dirs in runs.items():
        if method == reference:
            continue
        mine = {k: [_metrics(d)["metrics"][k] for d in dirs] for k in keys}
        for k, r in seed_level(mine, ref).items():
            out.append({"method": method, "metric": k, **r})
    return out


def _num(v: float, k: str, pct: "set[str]", sign: bool = False) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    return f"{100 * v:{'+' if sign else ''}.2f}" if k in pct else f"{v:{'+' if sign else ''}.4f}"


def _ci(r: dict, k: str, pct: "set[str]", sign: bool = True) -> str:
    return f"{_num(r['mean' if 'mean' in r else 'diff'], k, pct, sign)} [{_num(r['lo'], k, pct, sign)}, " \
           f"{_num(r['hi'], k, pct, sign)}]"


def _diff_table(rows: "list[dict]", pct: "set[str]") -> "list[list[str]]":
    return [[r["method"], r["metric"], ", ".join(_num(v, r["metric"], pct, True) for v in r["diffs"]),
             _ci(r, r["metric"], pct), "n/a" if r["p"] is None else f"{r['p']:.3f}", r["verdict"]]
            for r in rows]


_DIFF_HEADER = ["method", "metric", "per seed", "mean [95% t-interval]", "paired t-test p", "verdict"]


def comparison_section(runs: "dict[str, list[Path]]", ensembles: "list[Path]", label: str = "") -> dict:
    """Every method against hom, seed level and image level, the per-method intervals that separate
    seed variance from test-sampling variance, and ensemble against ensemble; verdicts from the 95%
    intervals only (:mod:`harness.uncertainty.compare`), sentences computed from the numbers.
    ``label`` prefixes every title and sentence (a condition other than the main study's)."""
    out = _comparison(runs, ensembles)
    if label:
        out["tables"] = [(f"{label}: {t}", h, r) for t, h, r in out["tables"]]
        out["text"] = [f"{label}: {t}" for t in out["text"] if not t.startswith(_GENERIC)]
    return out


_HOW_TO_READ = ("How to read the comparisons: seed-level intervals cover training randomness (seed i of a method "
                "against seed i of hom; with n seeds the t-interval has n − 1 degrees of freedom, so it is wide at "
                "n = 3); image-level intervals cover which evaluation images were drawn, with the trained models "
                "fixed. A verdict says better or worse only when its 95% interval excludes 0.")


_PAPER = "The paper (ImageNet, Table 1) finds het and diag better than hom on top-1 and NLL."


_GENERIC = (_HOW_TO_READ[:20], _PAPER[:20])


def _comparison(runs: "dict[str, list[Path]]", ensembles: "list[Path]") -> dict:
    from harness.uncertainty.compare import image_level, seed_summary, test_sampling_se
    from harness.uncertainty.predictions import Predictions

    out: dict = {"tables": [], "text": [], "json": {}}
    acc_key = "top1" if "top1" in _metrics(next(iter(runs.values()))[0])["metrics"] else "prec@1"
    nll_key = "nll" if acc_key == "top1" else "sigmoid_nll"
    keys = (acc_key, nll_key, "ece")
    pct = {k for k in keys if M.METRICS[k].percent}
    single = acc_key == "top1"
    preds = {m: [Predictions.load(d) for d in dirs] for m, dirs in runs.items()} if single else {}
    rows, summary = [], {}
    for m, dirs in runs.items():
        s = seed_summary({k: [_metrics(d)["metrics"][k] for d in dirs] for k in keys})
        se = test_sampling_se(preds[m]) if single else {}
        summary[m] = {"seeds": s, "test_sampling_se": se}
        rows.append([m, str(len(dirs))] + [_ci(s[k], k, pct, False) for k in keys]
                    + [" / ".join(_num(s[k]["std"], k, pct) for k in keys)]
                    + ([" / ".join(_num(se[k], k, pct) for k in keys)] if single else []))
    out["tables"].append((f"Per method (single models): mean over seeds with its 95% t-interval; seed std (training "
                          "randomness) and test-sampling standard error (bootstrap over evaluation images, models "
                          f"fixed); {acc_key} in points",
                          ["method", "seeds", *(f"{k} mean [95% CI]" for k in keys), "seed std (" + " / ".join(keys)
                           + ")"] + (["test-sampling SE (" + " / ".join(keys) + ")"] if single else []), rows))
    out["json"]["method_intervals"] = summary
    if "hom" not in runs or len(runs) < 2:
        return out
    out["text"].append(_HOW_TO_READ)
    seed_rows = paired_differences(runs, keys)
    out["tables"].append(("Paired differences against hom, seed level (method − hom, seed i against seed i; 95% "
                          f"t-interval over seeds; {acc_key} in points)", _DIFF_HEADER, _diff_table(seed_rows, pct)))
    out["json"]["paired_differences"] = seed_rows
    image: "dict[str, dict]" = {}
    if single:
        img_rows = []
        for m in [m for m in runs if m != "hom"]:
            image[m] = image_level(preds[m], preds["hom"])
            for k, r in image[m].items():
                mc = "; ".join(f"{x['n10']}/{x['n01']} p={x['p']:.3g}" for x in r.get("mcnemar", []))
                img_rows.append([m, k, _ci(r, k, pct), mc, r["verdict"]])
        out["tables"].append(("Paired differences against hom, image level (difference of the seed-averaged metric, "
                              "models fixed; 95% paired bootstrap interval over evaluation images, 1,000 resamples; "
                              "McNemar's exact test per seed pair: images only the method gets right / only hom "
                              f"gets right; {acc_key} in points)",
                              ["method", "metric", "difference [95% CI]", "McNemar per seed", "verdict"], img_rows))
        out["json"]["image_level_differences"] = image
    for method in [m for m in runs if m != "hom"]:
        r = {x["metric"]: x for x in seed_rows if x["method"] == method}
        parts = [f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}" for k in keys]
        text = f"{method} vs hom over {r[acc_key]['n']} paired seeds (95% t-intervals): " + "; ".join(parts) + "."
        if method in image:
            text += " On the evaluation images with the models fixed (95% bootstrap): " + "; ".join(
                f"{k} {_ci(image[method][k], k, pct)} → {image[method][k]['verdict']}" for k in keys) + "."
        out["text"].append(text)
    out["text"].append(_PAPER)
    ens = {json.loads((e / "ensemble.json").read_text())["method"]: e for e in ensembles}
    if single and "hom" in ens and len(ens) > 1:
        ens_rows, ens_json = [], {}
        for m, e in ens.items():
            if m == "hom":
                continue
            r = image_level([Predictions.load(e)], [Predictions.load(ens["hom"])])
            ens_json[m] = r
            for k, x in r.items():
                mc = "; ".join(f"{y['n10']}/{y['n01']} p={y['p']:.3g}" for y in x.get("mcnemar", []))
                ens_rows.append([f"{e.name} − {ens['hom'].name}", k, _ci(x, k, pct), mc, x["verdict"]])
            out["text"].append(f"Ensemble {e.name} vs {ens['hom'].name} (images, 95% bootstrap): " + "; ".join(
                f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}" for k in keys) + ".")
        out["tables"].append(("Ensemble against ensemble, image level (95% paired bootstrap over evaluation images; "
                              f"McNemar's exact test; {acc_key} in points)",
                              ["ensembles", "metric", "difference [95% CI]", "McNemar", "verdict"], ens_rows))
        out["json"]["ensemble_differences"] = ens_json
    for e in ensembles:
        spec = json.loads((e / "ensemble.json").read_text())["summary"]
        en, mean = spec["ensemble"], spec["member_mean"]
        out["text"].append(f"{e.name}: ensemble {acc_key} {100 * en[acc_key]:.2f}% vs members' mean "
                           f"{100 * mean[acc_key]:.2f}%, NLL {spec['ensemble_nll']:.4f} vs Gibbs cross-entropy "
                           f"{spec['gibbs_ce']:.4f} (the ensemble NLL can never exceed it; one ensemble, so no interval).")
    return out


def multilabel_section(runs: "dict[str, list[Path]]", grid_rows: "list[dict]") -> dict:
    """The multi-label study's table (mean ± std over seeds of prec@1, macro mAP, micro AP, sigmoid
    NLL and top-label ECE on the evaluation split), its τ grid and its paired differences."""
    keys = ("prec@1", "macro_map", "micro_ap", "sigmoid_nll", "ece")
    pct = {k for k in keys if M.METRICS[k].percent}
    rows = []
    for method, dirs in runs.items():
        ms = [_metrics(d)["metrics"] for d in dirs]
        cells = [method, str(len(ms))]
        for k in keys:
            v = np.array([m[k] for m in ms])
            scale = 100 if k in pct else 1
            cells.append(f"{scale * v.mean():.{2 if k in pct else 4}f} ± {scale * (v.std(ddof=1) if len(v) > 1 else 0):.{2 if k in pct else 4}f}")
        rows.append(cells)
    data = _metrics(next(iter(runs.values()))[0])
    title = (f"Multi-label study: sigmoid heads trained on {data['train_data']}; evaluated on {data['eval_data']} "
             "(mean ± std over seeds; prec@1, mAP and AP in %)")
    out = {"tables": [(title, ["method", "seeds", "prec@1", "macro mAP", "micro AP", "sigmoid NLL", "top-label ECE"],
                       rows)], "text": [], "json": {"multilabel_study": {m: [str(d) for d in ds] for m, ds in runs.items()}}}
    if grid_rows:
        _merge(out, temperature_section(grid_rows, "Multi-label study: τ chosen on the held-out split"))
    ref = next((m for m in runs if not _noisy(_head(runs[m][0]))), None)
    if ref is not None and len(runs) > 1:
        diffs = paired_differences(runs, ("prec@1", "macro_map", "sigmoid_nll"), reference=ref)
        out["tables"].append((f"Multi-label study: paired differences against {ref}, seed level (95% t-interval; points "
                              "for prec@1 and mAP)", _DIFF_HEADER, _diff_table(diffs, pct)))
        out["json"]["multilabel_paired_differences"] = diffs
        for method in [m for m in runs if m != ref]:
            r = {x["metric"]: x for x in diffs if x["method"] == method}
            out["text"].append(
                f"Multi-label: {method} vs {ref} over {r['prec@1']['n']} paired seeds (95% t-intervals): " + "; ".join(
                    f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}"
                    for k in ("prec@1", "macro_map", "sigmoid_nll")) + ".")
    return out


def _head(run_dir: Path) -> dict:
    from harness.runs import run_head

    return run_head(run_dir)


def downstream_section(runs: "dict[str, list[Path]]", per_run: "dict[Path, dict]",
                       ensembles: "Optional[dict[str, dict]]" = None) -> dict:
    """The shape of the paper's Table 6: per task, the test accuracy of each method (mean ± std over
    the upstream seeds of that method, each the mean over its fine-tuning seeds), then group means
    and the mean over tasks; the calibration of the fine-tunes; and, per method with 2 or more upstream seeds,
    the ensemble across them (``ensembles``: method -> :func:`downstream.ensembles.upstream_ensemble`)."""
    methods = list(runs)
    first = per_run[runs[methods[0]][0]]
    tasks = list(first["tasks"])
    groups = list(first["groups"])

    def cell(values: "list[float]") -> str:
        return f"{100 * np.mean(values):.2f} ± {100 * np.std(values, ddof=1):.2f}" if len(values) > 1 else \
            f"{100 * values[0]:.2f}"

    rows, summary = [], {}
    for t in tasks:
        vals = {m: [per_run[d]["tasks"][t]["mean"] for d in runs[m]] for m in methods}
        rows.append([t, first["tasks"][t]["group"]] + [cell(vals[m]) for m in methods])
        summary[t] = {m: float(np.mean(v)) for m, v in vals.items()}
    for g in groups:
        vals = {m: [per_run[d]["groups"][g]["mean"] for d in runs[m]] for m in methods}
        rows.append([f"mean ({g})", g] + [cell(vals[m]) for m in methods])
    vals = {m: [per_run[d]["mean_over_tasks"] for d in runs[m]] for m in methods}
    rows.append(["mean over tasks", "all"] + [cell(vals[m]) for m in methods])
    title = ("Downstream transfer (layout of the paper's Table 6): test top-1 after fine-tuning a fresh "
             "homoscedastic head, mean ± std over upstream seeds")
    out = {"tables": [(title, ["task", "group", *methods], rows)],
           "json": {"downstream": {"per_task": summary, "mean_over_tasks": {m: float(np.mean(v)) for m, v in
                                                                            vals.items()}}}}
    if all(per_run[d].get("uncertainty", {}).get("tasks") for dirs in runs.values() for d in dirs):
        table, calib = _downstream_calibration(runs, per_run, methods, tasks)
        out["tables"].append(table)
        out["json"]["downstream"]["calibration"] = calib
    if ensembles:
        out["tables"].append(_downstream_ensembles(ensembles, tasks))
        out["json"]["downstream"]["ensembles"] = {m: {t: {"ensemble": e["tasks"][t]["ensemble"]["mean"],
                                                          "members": e["tasks"][t]["members"]} for t in tasks}
                                                  for m, e in ensembles.items()}
    return out


def _downstream_ensembles(ensembles: "dict[str, dict]", tasks: "list[str]") -> tuple:
    """Per task and method: test top-1, NLL and ECE of the ensemble across the method's upstream seeds (one
    fine-tune per upstream model, mean over fine-tuning seeds), with the members' mean beside it."""
    rows = []
    for t in tasks:
        row = [t]
        for e in ensembles.values():
            ens, mem = e["tasks"][t]["ensemble"]["mean"], e["tasks"][t]["members"]
            row += [f"{100 * ens['top1']:.2f} ({100 * mem['top1']:.2f})", f"{ens['nll']:.4f} ({mem['nll']:.4f})",
                    f"{ens['ece']:.4f} ({mem['ece']:.4f})"]
        rows.append(row)
    header = ["task"] + [f"{m} ×{len(e['members'])} {what}" for m, e in ensembles.items()
                         for what in ("top-1 %", "NLL", "ECE")]
    title = ("Downstream ensembles across upstream seeds: test metrics of the ensemble of one fine-tune per upstream "
             "model (probabilities averaged; mean over fine-tuning seeds), the members' mean in brackets")
    return title, header, rows


def _downstream_calibration(runs: "dict[str, list[Path]]", per_run: "dict[Path, dict]", methods: "list[str]",
                            tasks: "list[str]") -> "tuple[tuple, dict]":
    """Per task: each method's test NLL and ECE of the fine-tunes, and the ECE after temperature scaling (T fit on
    val200; see :func:`downstream.table.uncertainty_table`), mean ± std over its upstream seeds."""
    def cell(values: "list[float]") -> str:
        return f"{np.mean(values):.4f} ± {np.std(values, ddof=1):.4f}" if len(values) > 1 else f"{values[0]:.4f}"

    rows, calib = [], {}
    for t in tasks:
        row, calib[t] = [t], {}
        for m in methods:
            u = [per_run[d]["uncertainty"]["tasks"][t] for d in runs[m]]
            nll, ece = [v["mean"]["nll"] for v in u], [v["mean"]["ece"] for v in u]
            ts = [v["scaled"]["mean"]["ece"] for v in u if v.get("scaled")]
            row += [cell(nll), cell(ece), cell(ts) if len(ts) == len(u) else "-"]
            calib[t][m] = {"nll": float(np.mean(nll)), "ece": float(np.mean(ece)),
                           "ece_after_temperature": float(np.mean(ts)) if len(ts) == len(u) else None}
        rows.append(row)
    header = ["task"] + [f"{m} {what}" for m in methods for what in ("NLL", "ECE", "ECE after T")]
    title = ("Downstream calibration: test NLL and ECE of the fine-tunes (mean over fine-tuning seeds), and ECE "
             "after temperature scaling fit on val200; mean ± std over upstream seeds")
    return (title, header, rows), calib
