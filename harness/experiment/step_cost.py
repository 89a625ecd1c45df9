"""The cost axis of the budget curves and the frontier: each run's recorded training steps at a step rate measured
side by side for all their methods in one process (:func:`step_costs`, timed by
:func:`harness.upstream.cost.step_seconds` and kept in the experiment's ``step_cost.json``), and the report section
that states that measurement (:func:`step_cost_section`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from harness.experiment.plan import _metrics

#: the file in ``<runs_root>/<experiment>/`` that keeps the side-by-side step-cost measurements
STEP_COST_FILE = "step_cost.json"
STEP_COST_FORMAT = "harness.step-cost/1"


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
    from harness.upstream.cost import key_text

    if not any(runs.values()):
        raise ValueError("no runs to cost")
    reference = reference if reference in runs else ("hom" if "hom" in runs else next(iter(runs)))
    order = [reference] + [m for m in runs if m != reference]
    specs, per_run = _steps(runs, order)
    found, reused = _measurement(specs, cache, progress, measure)
    by_key = {key_text(c["key"]): name for name, c in found["configs"].items()}
    ref_name = by_key[next(iter(specs))]  # the step of the reference method's first run
    configs = _config_ratios(found, ref_name)
    methods = _run_costs(per_run, by_key, configs)
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


def _steps(runs: "dict[str, list[Path]]", order: "list[str]") -> "tuple[dict[str, tuple], dict[str, dict]]":
    """The distinct training steps of the runs (key text -> (method, config, K, precision, threads), in ``order``
    of the methods, so the reference method's first run's step comes first) and per run folder its method, key,
    micro-batches and threads."""
    from harness.upstream.cost import key_text, step_key

    specs, per_run = {}, {}
    for m in order:
        for d in runs[m]:
            cfg, k, precision, threads, batches = _run_step(d)
            text = key_text(step_key(cfg, k, precision, threads))
            specs.setdefault(text, (m, cfg, k, precision, threads))
            per_run[str(d)] = {"method": m, "key": text, "micro_batches": batches, "threads": threads}
    return specs, per_run


def _measurement(
    specs: "dict[str, tuple]", cache: Path, progress: Callable[[str], None], measure: "dict[str, Any]"
) -> "tuple[dict, bool]":
    """The side-by-side measurement of the steps ``specs``: the newest one in ``cache`` on this CPU that holds all
    their keys, or else a new one of all of them, added to ``cache`` (written atomically). Returns it and whether
    it was reused."""
    from harness.io import atomic_write_text
    from harness.provenance import cpu_details, cpu_model
    from harness.upstream.cost import key_text, step_seconds

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
    if found is not None:
        return found, True
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
    return found, False


def _config_ratios(found: dict, ref_name: str) -> "dict[str, dict]":
    """Per measured config of ``found``: its key, median seconds and round medians, and its step time over the
    reference config's (``ref_name``) round by round: the median of those ratios and their range."""
    ref_rounds = found["configs"][ref_name]["round_medians"]
    configs = {}  # per measured config: its step and its ratio to the reference config, round by round
    for n, c in found["configs"].items():
        ratios = [a / b for a, b in zip(c["round_medians"], ref_rounds)]
        configs[n] = {
            **{k: c[k] for k in ("key", "median_seconds", "round_medians")},
            "ratio": float(np.median(ratios)),
            "ratio_range": [min(ratios), max(ratios)],
        }
    return configs


def _run_costs(
    per_run: "dict[str, dict]", by_key: "dict[str, str]", configs: "dict[str, dict]"
) -> "dict[str, list[dict]]":
    """Each run's measured config, step seconds and CPU-minutes (micro-batches x step seconds x threads / 60),
    written into ``per_run``; returns per method its distinct measured steps with their ratios."""
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
    return methods


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
