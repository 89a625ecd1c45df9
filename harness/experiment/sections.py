"""The report sections an experiment adds, computed from its run folders: the τ grid, what a condition changed,
the multi-label study, the downstream table, wall time. The comparisons with intervals and verdicts are
:mod:`harness.experiment.comparison`; budget curves and the frontier are :mod:`harness.experiment.budget`, their
cost axis :mod:`harness.experiment.step_cost`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from harness.experiment.comparison import _DIFF_HEADER, _ci, _diff_table, paired_differences
from harness.experiment.config import _noisy
from harness.experiment.plan import _metrics
from harness.uncertainty import metrics as M


def _merge(into: dict, part: dict) -> dict:
    """Append a section's tables, text and JSON to ``into``; returns ``into``."""
    into.setdefault("tables", []).extend(part.get("tables", []))
    into.setdefault("text", []).extend(part.get("text", []))
    into.setdefault("json", {}).update(part.get("json", {}))
    into.setdefault("figures", []).extend(part.get("figures", []))
    return into


def time_section(
    times: "dict[str, dict[str, float]]",
    grids: "dict[str, list[dict]]",
    stages: "dict[str, float]",
    elapsed: float,
    sessions: int,
    workers: int,
) -> dict:
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
        rows.append(
            [
                f"{labels[study]}: {len(per)} runs",
                f"{sum(per.values()) / 60:.1f}",
                f"of which {dropped / 60:.1f} in τ-grid runs not kept" if dropped else "",
            ]
        )
        total += sum(per.values())
    for k, v in stages.items():
        rows.append([k, f"{v / 60:.1f}", "this session" + (": its jobs' own time, summed" if k != "ensembles" else "")])
        total += v
    m = machine()
    rows.append(["sum of the above", f"{total / 60:.1f}", f"{workers} job(s) at a time"])
    rows.append(
        [
            "elapsed, start to report (the experiment's wall time)",
            f"{elapsed:.1f}",
            f"{sessions} session(s); {m.get('cpu')}, {m.get('cores')} cores",
        ]
    )
    if times.get("frontier"):
        rows.append(
            [
                f"frontier: {len(times['frontier'])} runs (diagnostic, not in the total)",
                f"{sum(times['frontier'].values()) / 60:.1f}",
                "",
            ]
        )
    return {
        "tables": [
            (
                "Wall time per stage (minutes; upstream runs: each run's own time, summed over its sessions; "
                "shift and downstream: their jobs' own time; jobs run side by side and overlap, so the sum "
                "exceeds the elapsed time)",
                ["stage", "minutes", "note"],
                rows,
            )
        ],
        "text": [
            f"Wall time: {elapsed:.1f} minutes from start to report ({sessions} session(s), {workers} "
            f"job(s) at a time) on {m.get('cpu')} with {m.get('cores')} cores, frontier runs excluded."
        ],
        "json": {
            "wall_minutes": {
                "elapsed": elapsed,
                "sessions": sessions,
                "sum_of_stages": total / 60,
                "runs": {s: {k: v / 60 for k, v in per.items()} for s, per in times.items()},
                "stages": {k: v / 60 for k, v in stages.items()},
            }
        },
    }


def temperature_section(rows: "list[dict]", title: str) -> dict:
    """The grids: held-out metrics of every value tried (τ of a noisy head, or a method's tuned setting such as
    ``train.label_smoothing``) and the choice (never the test split)."""
    key = rows[0]["key"]
    acc = "top1" if key == "nll" else "prec@1"
    table = [
        [
            r["method"],
            r["parameter"],
            f"{r['value']:g}",
            f"{r['heldout'][key]:.4f}",
            f"{100 * r['heldout'][acc]:.2f}%",
            "chosen" if r["chosen"] else "",
        ]
        for r in rows
    ]
    text = [
        f"{title}: "
        + "; ".join(f"{r['method']} {r['parameter']} = {r['value']:g}" for r in rows if r["chosen"])
        + f" (lowest held-out {key}, first seed; the test split was not used)."
    ]
    return {
        "tables": [
            (
                f"{title} (held-out split, noisy labels; first seed)",
                ["method", "setting", "value", f"held-out {key}", f"held-out {acc}", ""],
                table,
            )
        ],
        "text": text,
        "json": {"grid": rows},
    }


#: the data keys only an evaluation reads (of :data:`harness.data.eval_keys.EVAL_KEYS`; the others are read by
#: training too): a condition that sets one scores its runs on other data, or another view, than the main study's
EVAL_ONLY = ("eval_split", "heldout_split", "limit_eval", "eval_resize")


def condition_label(name: str, description: str, overrides: "list[str]", data: str, main_data: str) -> str:
    """The title of condition ``name``'s section: its description (else its overrides) and, when its runs were scored
    on other data than the main study's (its runs' ``eval_data``, ``data``, is not the main study's, ``main_data``, or
    it sets a key of :data:`EVAL_ONLY`), that data and those overrides named, so no reader compares its numbers with
    the main study's as if on the same test split (audit20 A20-10)."""
    label = f"Condition {name} ({description or ' '.join(overrides)})"
    keys = [o for o in overrides if str(o).split("=", 1)[0].strip().lstrip("+~") in {f"data.{k}" for k in EVAL_ONLY}]
    if keys or (data and main_data and data != main_data):
        how = f" ({', '.join(keys)})" if keys else ""
        label += f", scored on {data or 'other evaluation data'}{how}, not on the main study's {main_data or 'data'}"
    return label


def condition_record(name: str, description: str, overrides: "list[str]", run_dir: Path) -> "tuple[dict, str]":
    """What a condition changed, for ``report.json`` (``conditions.<name>``) and one report line: its description,
    its ``upstream_overrides`` and the label noise its first run drew (``run.json``'s ``label_noise``: kind, rate,
    realised rate and, for class-permuted noise, π as indices and as class names, ``airplane→truck, ...``)."""
    run = json.loads((run_dir / "run.json").read_text())
    noise, names = run.get("label_noise") or {}, run.get("class_names") or []
    drawn = {k: noise[k] for k in ("kind", "rate", "realised_rate", "permutation") if k in noise}
    line = f"Condition {name}: {description or 'no description'}; upstream overrides: {', '.join(overrides) or 'none'}."
    if "permutation" in drawn and len(names) == len(drawn["permutation"]):
        drawn["permutation_names"] = {names[c]: names[p] for c, p in enumerate(drawn["permutation"])}
        line += (
            " π (class c's noise row moved to class π(c)): "
            + ", ".join(f"{a}→{b}" for a, b in drawn["permutation_names"].items())
            + "."
        )
    if "realised_rate" in drawn:
        line += f" Labels changed in its first run's training set: {100 * drawn['realised_rate']:.1f}%."
    return {"description": description, "upstream_overrides": list(overrides), "label_noise": drawn}, line


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
            cells.append(
                f"{scale * v.mean():.{2 if k in pct else 4}f} ± {scale * (v.std(ddof=1) if len(v) > 1 else 0):.{2 if k in pct else 4}f}"
            )
        rows.append(cells)
    data = _metrics(next(iter(runs.values()))[0])
    title = (
        f"Multi-label study: sigmoid heads trained on {data['train_data']}; evaluated on {data['eval_data']} "
        "(mean ± std over seeds; prec@1, mAP and AP in %)"
    )
    out = {
        "tables": [
            (title, ["method", "seeds", "prec@1", "macro mAP", "micro AP", "sigmoid NLL", "top-label ECE"], rows)
        ],
        "text": [],
        "json": {"multilabel_study": {m: [str(d) for d in ds] for m, ds in runs.items()}},
    }
    if grid_rows:
        _merge(out, temperature_section(grid_rows, "Multi-label study: τ chosen on the held-out split"))
    else:
        fixed = sorted(
            {f"{m} τ = {_head(ds[0]).get('temperature', 1.0):g}" for m, ds in runs.items() if _noisy(_head(ds[0]))}
        )
        if fixed:
            out["text"].append(
                "Multi-label study: τ untuned (" + ", ".join(fixed) + ", fixed in the experiment file, "
                "not chosen on the held-out split as the main study's τ is)."
            )
    ref = next((m for m in runs if not _noisy(_head(runs[m][0]))), None)
    if ref is not None and len(runs) > 1:
        diffs = paired_differences(runs, ("prec@1", "macro_map", "sigmoid_nll"), reference=ref)
        out["tables"].append(
            (
                f"Multi-label study: paired differences against {ref}, seed level (95% t-interval; points "
                "for prec@1 and mAP)",
                _DIFF_HEADER,
                _diff_table(diffs, pct),
            )
        )
        out["json"]["multilabel_paired_differences"] = diffs
        for method in [m for m in runs if m != ref]:
            r = {x["metric"]: x for x in diffs if x["method"] == method}
            out["text"].append(
                f"Multi-label: {method} vs {ref} over {r['prec@1']['n']} paired seeds (95% t-intervals): "
                + "; ".join(
                    f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}" for k in ("prec@1", "macro_map", "sigmoid_nll")
                )
                + "."
            )
    return out


def _head(run_dir: Path) -> dict:
    from harness.runs import run_head

    return run_head(run_dir)


def downstream_section(
    runs: "dict[str, list[Path]]", per_run: "dict[Path, dict]", ensembles: "Optional[dict[str, dict]]" = None
) -> dict:
    """The shape of the paper's Table 6: per task, the test accuracy of each method (mean ± std over
    the upstream seeds of that method, each the mean over its fine-tuning seeds), then group means
    and the mean over tasks; the calibration of the fine-tunes; and, per method with 2 or more upstream seeds,
    the ensemble across them (``ensembles``: method -> :func:`harness.downstream.ensembles.upstream_ensemble`)."""
    methods = list(runs)
    first = per_run[runs[methods[0]][0]]
    tasks = list(first["tasks"])
    groups = list(first["groups"])

    def cell(values: "list[float]") -> str:
        return (
            f"{100 * np.mean(values):.2f} ± {100 * np.std(values, ddof=1):.2f}"
            if len(values) > 1
            else f"{100 * values[0]:.2f}"
        )

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
    title = (
        "Downstream transfer (layout of the paper's Table 6): test top-1 after fine-tuning a fresh "
        "homoscedastic head, mean ± std over upstream seeds"
    )
    out = {
        "tables": [(title, ["task", "group", *methods], rows)],
        "json": {
            "downstream": {"per_task": summary, "mean_over_tasks": {m: float(np.mean(v)) for m, v in vals.items()}}
        },
    }
    if all(per_run[d].get("uncertainty", {}).get("tasks") for dirs in runs.values() for d in dirs):
        table, calib = _downstream_calibration(runs, per_run, methods, tasks)
        out["tables"].append(table)
        out["json"]["downstream"]["calibration"] = calib
    if ensembles:
        out["tables"].append(_downstream_ensembles(ensembles, tasks))
        out["json"]["downstream"]["ensembles"] = {
            m: {t: {"ensemble": e["tasks"][t]["ensemble"]["mean"], "members": e["tasks"][t]["members"]} for t in tasks}
            for m, e in ensembles.items()
        }
    return out


def _downstream_ensembles(ensembles: "dict[str, dict]", tasks: "list[str]") -> tuple:
    """Per task and method: test top-1, NLL and ECE of the ensemble across the method's upstream seeds (one
    fine-tune per upstream model, mean over fine-tuning seeds), with the members' mean beside it."""
    rows = []
    for t in tasks:
        row = [t]
        for e in ensembles.values():
            ens, mem = e["tasks"][t]["ensemble"]["mean"], e["tasks"][t]["members"]
            row += [
                f"{100 * ens['top1']:.2f} ({100 * mem['top1']:.2f})",
                f"{ens['nll']:.4f} ({mem['nll']:.4f})",
                f"{ens['ece']:.4f} ({mem['ece']:.4f})",
            ]
        rows.append(row)
    header = ["task"] + [
        f"{m} ×{len(e['members'])} {what}" for m, e in ensembles.items() for what in ("top-1 %", "NLL", "ECE")
    ]
    title = (
        "Downstream ensembles across upstream seeds: test metrics of the ensemble of one fine-tune per upstream "
        "model (probabilities averaged; mean over fine-tuning seeds), the members' mean in brackets"
    )
    return title, header, rows


def _downstream_calibration(
    runs: "dict[str, list[Path]]", per_run: "dict[Path, dict]", methods: "list[str]", tasks: "list[str]"
) -> "tuple[tuple, dict]":
    """Per task: each method's test NLL and ECE of the fine-tunes, and the ECE after temperature scaling (T fit on
    val200; see :func:`harness.downstream.table.uncertainty_table`), mean ± std over its upstream seeds."""

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
            calib[t][m] = {
                "nll": float(np.mean(nll)),
                "ece": float(np.mean(ece)),
                "ece_after_temperature": float(np.mean(ts)) if len(ts) == len(u) else None,
            }
        rows.append(row)
    header = ["task"] + [f"{m} {what}" for m in methods for what in ("NLL", "ECE", "ECE after T")]
    title = (
        "Downstream calibration: test NLL and ECE of the fine-tunes (mean over fine-tuning seeds), and ECE "
        "after temperature scaling fit on val200; mean ± std over upstream seeds"
    )
    return (title, header, rows), calib
