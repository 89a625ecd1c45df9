"""Ensembles across upstream models of their transfers: the deep ensemble of several pretrained models (e.g. the
upstream seeds of one method), each fine-tuned on the same task by the same sweep recipe.

For every task and every fine-tuning seed s, the members are the upstream models' final fine-tunes with seed s,
their test probabilities averaged (:func:`harness.uncertainty.ensembles.average`); the metrics are given per s and
as mean ± std over s, beside the members' own mean. This is Lakshminarayanan et al. (2017)'s deep ensemble with
the diversity coming from pretraining, the setting of the paper's upstream ensembles (Sec. 5) carried to the
transfer tasks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.downstream.table import TRANSFER_METRICS, metric_cell
from harness.io import atomic_write_text
from harness.provenance import markdown_header, provenance
from harness.tasks.catalogue import GROUPS

#: what the table of an ensemble across upstream models is written to, in its folder
ENSEMBLE_FILES = ("ensemble.json", "ensemble.md")


def is_sweep(folder: "str | Path") -> bool:
    """Whether ``folder`` is a finished downstream sweep (it holds ``vtab.json``)."""
    return (Path(folder) / "vtab.json").is_file()


def _read_sweep(folder: Path) -> dict:
    vtab = json.loads((folder / "vtab.json").read_text())
    if "predictions" not in vtab:
        raise ValueError(
            f"{folder}/vtab.json lists no prediction files (written by an older harness): rerun the same "
            "harness downstream command into that folder; it trains nothing more and rewrites the table"
        )
    return vtab


def _check_same_task_data(folders: "list[Path]", tasks: "list[str]") -> None:
    """Every sweep of ``folders`` fine-tuned and scored each task of ``tasks`` on the same data, as its ``sweep.json``
    records it (``task_data``, :func:`harness.tasks.taskset.task_data`: the task folder resolved, a custom task's
    line, each list file's digest), compared by :func:`harness.provenance.changed_since` where both record it (audit26
    A26-08: sweeps of one task name and list text over other folders were averaged example by example, though their
    images differ).

    Raises:
        ValueError: naming the task, both sweeps, what differs with both values, and the fix.
    """
    from harness.io import read_json
    from harness.provenance import changed_since

    def recorded(folder: Path) -> dict:
        data = (read_json(folder / "sweep.json") or {}).get("task_data")
        return data if isinstance(data, dict) else {}

    first, *rest = [recorded(f) for f in folders]
    for f, data in zip(folders[1:], rest):
        for task in tasks:
            was, now = first.get(task), data.get(task)
            if not (isinstance(was, dict) and isinstance(now, dict)):
                continue
            differ = changed_since(was, {k: now[k] for k in ("folder", "spec") if k in now})
            differ += [
                (f"{split}.txt's digest", str(a)[:12] + "...", str(b)[:12] + "...")
                for split, a, b in changed_since(was.get("lists"), now.get("lists") or {})
            ]
            if differ:
                key, a, b = differ[0]
                raise ValueError(
                    f"task {task}: sweeps {folders[0]} and {f} fine-tuned and scored it on other data ({key}: {a} in "
                    f"{folders[0] / 'sweep.json'}, {b} in {f / 'sweep.json'}): an ensemble averages the members' test "
                    "predictions example by example, so they must score the same images; transfer every upstream "
                    "model to the same task folder and lists (harness downstream --tasks with one FOLDER)"
                )


def upstream_ensemble(folders: Sequence["str | Path"]) -> dict:
    """The ensemble across the upstream models of the finished sweeps ``folders`` (one upstream model each).

    Returns:
        ``{"members": [{folder, upstream}], "recipe": ..., "tasks": {task: {"group", "seeds": n,
        "ensemble": {"per_seed": [{metric: value}], "mean": {...}, "std": {...}}, "members": {metric: mean over
        members and seeds}}}, "groups": {group: {"tasks": n, "ensemble": {...}, "members": {...}}}}`` for the
        metrics :data:`harness.downstream.table.TRANSFER_METRICS` (top-1 as a fraction).

    Raises:
        ValueError: fewer than 2 folders, a folder given twice, a folder that is not a finished sweep, sweeps
            with different recipes or tasks, sweeps whose ``sweep.json`` records other data for a task (another
            folder, task line or list file: :func:`_check_same_task_data`), or test predictions of different images
            or classes.
    """
    from harness.uncertainty.ensembles import average
    from harness.uncertainty.predictions import Predictions

    folders = [Path(f) for f in folders]
    if len(folders) < 2:
        raise ValueError(f"an ensemble across upstream models needs 2 or more sweep folders, got {len(folders)}")
    if len({f.resolve() for f in folders}) < len(folders):
        raise ValueError("a sweep folder is given twice: each upstream model counts once")
    for f in folders:
        if not is_sweep(f):
            raise ValueError(f"{f} is not a finished downstream sweep (no vtab.json): run harness downstream --out {f}")
    sweeps = [_read_sweep(f) for f in folders]
    for f, s in zip(folders[1:], sweeps[1:]):
        if s["recipe"] != sweeps[0]["recipe"] or set(s["tasks"]) != set(sweeps[0]["tasks"]):
            raise ValueError(
                f"{f} and {folders[0]} differ in recipe or tasks: an ensemble across upstream models "
                "compares transfers made the same way; rerun them with the same settings and tasks"
            )
    _check_same_task_data(folders, list(sweeps[0]["tasks"]))
    out: dict = {
        "members": [{"folder": str(f), "upstream": s["upstream"]} for f, s in zip(folders, sweeps)],
        "recipe": sweeps[0]["recipe"],
        "tasks": {},
        "groups": {},
    }
    for task, info in sweeps[0]["tasks"].items():
        seeds = min(len(s["predictions"][task]) for s in sweeps)
        per_seed, members = [], []
        for i in range(seeds):
            preds = [Predictions.load(f / s["predictions"][task][i]) for f, s in zip(folders, sweeps)]
            if any(not np.array_equal(p.index, preds[0].index) for p in preds[1:]):
                raise ValueError(
                    f"task {task}: the sweeps' test predictions cover different images; transfer every "
                    "upstream model to the same test split"
                )
            per_seed.append(
                {k: v for k, v in average(preds, f"{task} ensemble").metrics().items() if k in TRANSFER_METRICS}
            )
            members += [{k: v for k, v in p.metrics().items() if k in TRANSFER_METRICS} for p in preds]
        out["tasks"][task] = {
            "group": info["group"],
            "seeds": seeds,
            "ensemble": {
                "per_seed": per_seed,
                "mean": {k: float(np.mean([r[k] for r in per_seed])) for k in TRANSFER_METRICS},
                "std": {
                    k: float(np.std([r[k] for r in per_seed], ddof=1)) if seeds > 1 else 0.0 for k in TRANSFER_METRICS
                },
            },
            "members": {k: float(np.mean([r[k] for r in members])) for k in TRANSFER_METRICS},
        }
    for g in (*GROUPS, "demo", "custom"):
        rows = [v for v in out["tasks"].values() if v["group"] == g]
        if rows:
            out["groups"][g] = {
                "tasks": len(rows),
                "ensemble": {k: float(np.mean([r["ensemble"]["mean"][k] for r in rows])) for k in TRANSFER_METRICS},
                "members": {k: float(np.mean([r["members"][k] for r in rows])) for k in TRANSFER_METRICS},
            }
    return out


def write_upstream_ensemble(folders: Sequence["str | Path"], out: "str | Path") -> dict:
    """:func:`upstream_ensemble` written to ``out/ensemble.json`` and ``out/ensemble.md`` (atomically, with the
    command, machine and versions); returns it. Raises as :func:`upstream_ensemble`."""
    from harness.uncertainty.metrics import METRICS

    result = upstream_ensemble(folders)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance()
    cell = metric_cell

    head = [METRICS[k].label for k in TRANSFER_METRICS]
    lines = [
        markdown_header("Downstream ensemble across upstream models", prov),
        f"Members: {', '.join(m['folder'] for m in result['members'])} (one upstream model each, fine-tuned by "
        "the same recipe). For each fine-tuning seed, the members' fine-tunes with that seed are averaged "
        "(probabilities); mean ± std over the fine-tuning seeds, beside the members' own mean.",
        "",
        "| task | group | seeds | ensemble "
        + " | ensemble ".join(head)
        + " | member "
        + " | member ".join(head)
        + " |",
        "|---|---|---|" + "---|" * (2 * len(head)),
    ]
    for task, v in result["tasks"].items():
        e = v["ensemble"]
        lines.append(
            f"| {task} | {v['group']} | {v['seeds']} | "
            + " | ".join(cell(k, e["mean"][k], e["std"][k]) for k in TRANSFER_METRICS)
            + " | "
            + " | ".join(cell(k, v["members"][k]) for k in TRANSFER_METRICS)
            + " |"
        )
    lines += [
        "",
        "| group | tasks | ensemble " + " | ensemble ".join(head) + " | member " + " | member ".join(head) + " |",
        "|---|---|" + "---|" * (2 * len(head)),
    ]
    for g, v in result["groups"].items():
        lines.append(
            f"| {g} | {v['tasks']} | "
            + " | ".join(cell(k, v["ensemble"][k]) for k in TRANSFER_METRICS)
            + " | "
            + " | ".join(cell(k, v["members"][k]) for k in TRANSFER_METRICS)
            + " |"
        )
    atomic_write_text(out / "ensemble.md", "\n".join(lines) + "\n")
    atomic_write_text(out / "ensemble.json", json.dumps({"provenance": prov, **result}, indent=1))
    return result
