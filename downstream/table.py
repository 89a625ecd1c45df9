"""The VTAB table: per-task test accuracy over seeds, group means, the VTAB-1k score, and ``vtab.md`` /
``vtab.json`` (with the recipe used and the data each task read).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np

from harness.heads.variants import TRANSFER_HEADS, has_factors
from harness.io import atomic_write_bytes, atomic_write_text
from harness.provenance import markdown_header, provenance
from harness.tasks.catalogue import GROUPS, TASKS, Task

#: the schedules of :data:`harness.downstream.schedules.SCHEDULES` as ``vtab.md`` describes them
SCHEDULE_TEXT = {
    "staircase": "linear warm-up over 20% of the steps, x0.1 at 40/60/80%",
    "bit_hyperrule": "the BiT-HyperRule's: warm-up from 0 over 100 (500) steps, x0.1 after steps 200/300/400 "
    "(3k/6k/9k; 6k/12k/18k)",
    "ta": "task_adaptation's: warm-up 8%, x0.1 at 30/60/90%",
    "cosine": "warm-up 5%, cosine decay to 0",
}


def table(finals: "list[dict]", tasks: "list[Task]") -> dict:
    """Per-task mean/std test accuracy over seeds with the data read, group means, and the mean over tasks.

    The VTAB-1k score is the unweighted mean of the 19 per-task accuracies (not the mean of the
    group means; Zhai et al. 2019); it is reported only when all 19 tasks are present.
    """
    per_task = {}
    for t in tasks:
        recs = [r for r in finals if r["task"] == t.name]
        accs = [r["accuracy"] for r in recs]
        data = []
        for r in recs:
            data += [d for d in r.get("data", []) if d not in data]
        per_task[t.name] = {
            "group": t.group,
            "mean": float(np.mean(accs)),
            "std": float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0,
            "seeds": len(accs),
            "lr": recs[0]["lr"],
            "steps": recs[0]["steps"],
            "data": data,
        }
    groups = {}
    for g in (*GROUPS, "demo", "custom"):
        vals = [v["mean"] for v in per_task.values() if v["group"] == g]
        if vals:
            groups[g] = {"mean": float(np.mean(vals)), "tasks": len(vals)}
    vtab = [v["mean"] for k, v in per_task.items() if k in TASKS]
    return {
        "tasks": per_task,
        "groups": groups,
        "mean_over_tasks": float(np.mean([v["mean"] for v in per_task.values()])),
        "vtab1k_score": float(np.mean(vtab)) if len(vtab) == len(TASKS) else None,
    }


#: the metrics of every transfer task's test predictions (names of :data:`harness.uncertainty.metrics.METRICS`)
TRANSFER_METRICS = ("top1", "nll", "ece", "brier")


def uncertainty_table(
    predictions: "dict[str, list[str]]", tasks: "list[Task]", heldout: "Optional[dict[str, str]]" = None
) -> dict:
    """Top-1, NLL, ECE and Brier on test of every task's final fine-tunes, from their saved predictions: per
    seed, mean and std over seeds, the ensemble of the seeds (member probabilities averaged,
    :func:`harness.uncertainty.ensembles.average`) when there are two or more, and each metric's mean per group;
    with temperature scaling (Guo et al. 2017; :func:`harness.uncertainty.calibration.fit_temperature`): T fit on
    val200 by the fine-tune of the chosen configuration trained on train800 (the final fine-tunes train on
    train800val200, so val200 is held out only from that one), applied to every final seed's test logits.

    Args:
        predictions: task name -> the ``predictions.npz`` files of its final seeds.
        heldout: task name -> the val200 ``predictions.npz`` of its chosen configuration trained on train800.

    Returns:
        ``{"tasks": {task: {"seeds": [{metric: value}], "mean": {...}, "std": {...}, "ensemble": {...} | None,
        "temperature": T | None, "scaled": {"mean": {nll, ece}, "std": {nll, ece}} | None}},
        "groups": {group: {"mean": {metric: value}, "ensemble": {metric: value} | None, "scaled": {nll, ece} | None,
        "tasks": n}}}``.
    """
    from harness.uncertainty.calibration import fit_temperature, scale
    from harness.uncertainty.ensembles import average
    from harness.uncertainty.predictions import Predictions

    out: dict = {"tasks": {}, "groups": {}}
    for t in tasks:
        preds = [Predictions.load(p) for p in predictions.get(t.name, []) if Path(p).is_file()]
        if not preds:
            continue
        seeds = [{k: m[k] for k in TRANSFER_METRICS} for m in (p.metrics() for p in preds)]
        ens = (
            {k: v for k, v in average(preds, f"{t.name} ensemble").metrics().items() if k in TRANSFER_METRICS}
            if len(preds) > 1
            else None
        )
        held = (heldout or {}).get(t.name)
        temp, scaled = None, None
        if held and Path(held).is_file():
            temp = fit_temperature(Predictions.load(held))
            after = [{k: m[k] for k in ("nll", "ece")} for m in (scale(p, temp).metrics() for p in preds)]
            scaled = {
                "mean": {k: float(np.mean([a[k] for a in after])) for k in ("nll", "ece")},
                "std": {
                    k: float(np.std([a[k] for a in after], ddof=1)) if len(after) > 1 else 0.0 for k in ("nll", "ece")
                },
            }
        out["tasks"][t.name] = {
            "group": t.group,
            "seeds": seeds,
            "ensemble": ens,
            "temperature": temp,
            "scaled": scaled,
            "mean": {k: float(np.mean([s[k] for s in seeds])) for k in TRANSFER_METRICS},
            "std": {
                k: float(np.std([s[k] for s in seeds], ddof=1)) if len(seeds) > 1 else 0.0 for k in TRANSFER_METRICS
            },
        }
    for g in (*GROUPS, "demo", "custom"):
        rows = [v for v in out["tasks"].values() if v["group"] == g]
        if rows:
            with_ens = [v["ensemble"] for v in rows if v["ensemble"] is not None]
            with_t = [v["scaled"]["mean"] for v in rows if v["scaled"] is not None]
            out["groups"][g] = {
                "tasks": len(rows),
                "mean": {k: float(np.mean([v["mean"][k] for v in rows])) for k in TRANSFER_METRICS},
                "ensemble": (
                    {k: float(np.mean([e[k] for e in with_ens])) for k in TRANSFER_METRICS}
                    if len(with_ens) == len(rows)
                    else None
                ),
                "scaled": (
                    {k: float(np.mean([s[k] for s in with_t])) for k in ("nll", "ece")}
                    if len(with_t) == len(rows)
                    else None
                ),
            }
    return out


def metric_cell(k: str, v: float, sd: "float | None" = None) -> str:
    """A table cell of metric ``k`` (:data:`harness.uncertainty.metrics.METRICS`): percent with 2 decimals for
    top-1, 4 decimals otherwise, with ``± sd`` when given."""
    from harness.uncertainty.metrics import METRICS

    scale, unit = (100, "%") if METRICS[k].percent else (1, "")
    text = f"{scale * v:.2f}{unit}" if METRICS[k].percent else f"{v:.4f}"
    return text if sd is None else f"{text} ± {scale * sd:.{2 if METRICS[k].percent else 4}f}"


def _uncertainty_tables(u: dict) -> "list[tuple[str, list[str], list[list[str]]]]":
    """The uncertainty tables: per task and per group, single models (mean ± std over seeds), after temperature
    scaling, and the ensemble of the seeds."""
    from harness.uncertainty.metrics import METRICS

    cell = metric_cell
    head = [METRICS[k].label for k in TRANSFER_METRICS]
    ens_head = [f"ensemble {h}" for h in head]
    ts = ["T", "NLL after T", "ECE after T"]
    tasks = []
    for name, v in u["tasks"].items():
        ens, sc = v["ensemble"], v["scaled"]
        after = (
            [f"{v['temperature']:.3f}"] + [cell(k, sc["mean"][k], sc["std"][k]) for k in ("nll", "ece")]
            if sc
            else ["-"] * len(ts)
        )
        tasks.append(
            [name]
            + [cell(k, v["mean"][k], v["std"][k]) for k in TRANSFER_METRICS]
            + after
            + [cell(k, ens[k]) if ens else "-" for k in TRANSFER_METRICS]
        )
    groups = []
    for g, v in u["groups"].items():
        ens, sc = v["ensemble"], v["scaled"]
        after = [cell(k, sc[k]) for k in ("nll", "ece")] if sc else ["-", "-"]
        groups.append(
            [g, str(v["tasks"])]
            + [cell(k, v["mean"][k]) for k in TRANSFER_METRICS]
            + after
            + [cell(k, ens[k]) if ens else "-" for k in TRANSFER_METRICS]
        )
    return [
        (
            "Uncertainty on test: single fine-tunes (mean ± std over seeds), after temperature scaling (T fit on "
            "val200 by the chosen configuration's fine-tune on train800, applied to every seed), and the ensemble of "
            "the seeds (averaged probabilities)",
            ["task", *head, *ts, *ens_head],
            tasks,
        ),
        (
            "Uncertainty on test per group (means over the group's tasks)",
            ["group", "tasks", *head, *ts[1:], *ens_head],
            groups,
        ),
    ]


def _group_reliability(result: dict, out: Path) -> "list[tuple[str, str, bytes]]":
    """Per group, the reliability diagram of the test predictions of all its tasks' final fine-tunes (every seed)
    pooled: ``(caption, file name, PNG bytes)``; none when the predictions are not listed or not on disk."""
    from harness.report.figures import confidence_reliability_figure, png, top_label
    from harness.uncertainty.predictions import Predictions

    figures = []
    for g in result["groups"]:
        files = [
            out / p
            for t, v in result["tasks"].items()
            if v["group"] == g
            for p in result.get("predictions", {}).get(t, [])
        ]
        if not files or not all(f.is_file() for f in files):
            continue
        conf, correct = (np.concatenate(a) for a in zip(*(top_label(Predictions.load(f)) for f in files)))
        tasks = sum(v["group"] == g for v in result["tasks"].values())
        caption = f"{g}: {tasks} task(s), {len(conf)} test predictions (every fine-tuning seed pooled)"
        figures.append((caption, f"reliability_{g}.png", png(confidence_reliability_figure(conf, correct, caption))))
    return figures


def _data_text(data: "list[dict]") -> str:
    """What a task's runs read, in a few words (TFDS name and version; list folder; generated)."""
    parts = []
    for d in data:
        if d.get("format") == "tfds":
            text = f"TFDS {d['name']} {d['version']}"
            parts.append(text + (f" (pinned {d['pinned']} not available)" if d.get("fallback") else ""))
        elif d.get("format") == "folder":
            parts.append(f"folder {Path(d['list']).parent}")
        elif d.get("format") == "demo":
            parts.append("generated (digits)")
    return "; ".join(dict.fromkeys(parts)) or "not recorded"


def _recipe_text(r: dict) -> "list[str]":
    """The recipe paragraph of ``vtab.md``: preset, changes, the head (a noisy one: its options, that it goes beyond
    the paper's Table 6 protocol, and the τ chosen per task) and every fine-tuning setting used."""
    steps = (
        "500 / 10k / 20k by training-set size (BiT-HyperRule)"
        if r["steps"] == [None]
        else "{" + ", ".join(str(s) for s in r["steps"]) + "}"
    )
    lrs = "{" + ", ".join(f"{v:g}" for v in r["lrs"]) + "}"
    if r["lr_batch"] is not None:
        lrs += f" (given for batch {r['lr_batch']}, scaled linearly)"
    res = (
        "BiT rule (160 -> 128 below 96x96 pixels, else 512 -> 480)"
        if r["resolution"] is None
        else f"resize {r['resolution'][0]}, crop {r['resolution'][1]}"
    )
    head, taus = r.get("head", "hom"), r.get("temperatures") or []
    select = (
        f"(lr, steps{', τ' if len(taus) > 1 else ''}) chosen on val200 after training on train800; final runs "
        "on train800val200"
        if len(r["lrs"]) * len(r["steps"]) * max(1, len(taus)) > 1
        else "one configuration, so no selection: final runs on "
        "train800val200 (and one fine-tune on train800 scored on val200, which only fits the temperature of "
        "temperature scaling)"
    )
    changed = f" Changed from the preset: {', '.join(r['changed'])}." if r["changed"] else ""
    fresh = "Fresh zero-initialised linear head; "
    if head != "hom":
        kind = TRANSFER_HEADS.get(head, head).replace("_", "-")
        rank = f", R = min({r['num_factors']}, K) factors" if has_factors(TRANSFER_HEADS.get(head, "none")) else ""
        chosen = r.get("chosen_temperatures") or {}
        fresh = (
            f"Fresh heteroscedastic head `{head}` ({kind} covariance{rank}; mean layer zero-initialised, "
            f"covariance layers as harness.heads initialises them; {r['train_mc_samples']} MC samples in "
            f"training, {r['eval_mc_samples']} in evaluation), beyond the paper's Table 6 protocol (fresh "
            f"homoscedastic head). "
            + (
                f"τ = {taus[0]:g}, the only value given"
                if len(taus) == 1
                else f"τ from {{{', '.join(f'{t:g}' for t in taus)}}} chosen per task on val200 with (lr, steps) "
                "(highest accuracy, ties broken by the lower NLL)"
                + (": " + ", ".join(f"{k} τ = {v:g}" for k, v in chosen.items()) if chosen else "")
            )
            + ". Fine-tuning: "
        )
    return [
        f"Recipe: preset `{r['preset']}`, {r['description']}.{changed}",
        "",
        f"{fresh}SGD momentum 0.9, no weight decay; batch {r['batch_size']} "
        f"({r['micro_batch']} per forward pass); lr {lrs} x steps {steps}; schedule {r['schedule']}: "
        f"{SCHEDULE_TEXT[r['schedule']]}; mixup from 20k training examples (alpha 0.1, one lambda per step); "
        f"resolution {res}. {select}; top-1 accuracy on test (mean ± std over seeds).",
    ]


def source_text(upstream: "str | dict") -> str:
    """Where a model's weights came from, for every kind of source a sweep or few-shot run records
    (:func:`harness.downstream.sweep.upstream_record`): a harness checkpoint; ``timm:`` / ``torchvision:`` with a
    weights file (its name and digest) or randomly initialised; a folder (``local-dir:``, a ``save_pretrained``
    export or timm's own); a Hugging Face Hub repository; timm's published weights."""
    if isinstance(upstream, str):
        return f"harness checkpoint {upstream}"
    source, sha = upstream["source"], upstream.get("sha256")
    if upstream.get("weights"):
        return f"{source} with weights {Path(upstream['weights']).name} (sha256 {sha})"
    if upstream.get("random_init"):
        return f"{source}, RANDOMLY INITIALISED (--random-init)"
    name = source[len("timm:") :] if source.startswith("timm:") else source
    if name.startswith("local-dir:"):
        digest = f" (model.safetensors, sha256 {sha})" if sha else ""
        return f"{source}, weights read from the folder {name[len('local-dir:') :]}{digest}"
    if name.startswith("hf-hub:"):
        return (
            f"{source}, weights of the Hugging Face Hub repository {name[len('hf-hub:') :]} (downloaded, or read "
            "from the local Hugging Face cache offline)"
        )
    return (
        f"{source}, timm's published weights (downloaded by timm, or read from the local timm / Hugging Face cache "
        "offline)"
    )


def _model_text(upstream: "str | dict", prep: dict) -> str:
    """The model line of ``vtab.md`` and ``fewshot.md``: where its weights came from (:func:`source_text`), and the
    input normalisation used."""
    what = f"Model: {source_text(upstream)}"
    norm = (
        f"mean {prep['mean']}, std {prep['std']} (the model's own: timm's pretrained_cfg, or torchvision's "
        "ImageNet transforms)"
        if prep.get("mean")
        else "the harness's (mean = std = 0.5)"
    )
    crop = (
        f"; the model's crop_pct {prep['crop_pct']:g} is recorded, not applied: the protocol's resize and crop "
        "(BiT rule or --resolution) set the view"
        if prep.get("crop_pct") not in (None, 1.0)
        else ""
    )
    return (
        f"{what}. Input normalisation: {norm}. Interpolation: {prep.get('interpolation', 'bilinear')} (the "
        f"model's own){crop}."
    )


def _md_table(title: str, header: "list[str]", rows: "list[list[str]]") -> "list[str]":
    return ["", f"{title}:", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(r) + " |" for r in rows
    ]


def write_table(result: dict, out: Path) -> None:
    """``vtab.md``, ``vtab.html`` (with a reliability diagram per group, also saved as ``reliability_<group>.png``)
    and ``vtab.json``, with the command, machine, versions, the model, the recipe and the data read; atomic writes."""
    import html

    from harness.report.page import html_document, html_figure, html_header, html_table

    prov = provenance()
    paragraphs = []
    if "upstream" in result:
        paragraphs.append(_model_text(result["upstream"], result.get("preprocessing") or {}))
    if "recipe" in result:
        paragraphs += [p for p in _recipe_text(result["recipe"]) if p]
    noisy = any("temperature" in v for v in result["tasks"].values())
    rows = [
        [name, v["group"], f"{v['lr']:g}", str(v["steps"])]
        + ([f"{v['temperature']:g}"] if noisy else [])
        + [f"{100 * v['mean']:.2f} ± {100 * v['std']:.2f}", str(v["seeds"]), _data_text(v.get("data", []))]
        for name, v in result["tasks"].items()
    ]
    tables = [
        (
            "Test top-1 per task (mean ± std over fine-tuning seeds)",
            ["task", "group", "lr", "steps"] + (["τ"] if noisy else []) + ["test top-1", "seeds", "data read"],
            rows,
        ),
        (
            "Group means",
            ["group", "mean top-1", "tasks"],
            [[g, f"{100 * v['mean']:.2f}", str(v["tasks"])] for g, v in result["groups"].items()],
        ),
    ]
    score = result["vtab1k_score"]
    closing = f"Mean over the {len(result['tasks'])} tasks: {100 * result['mean_over_tasks']:.2f}." + (
        f" VTAB-1k score (19-task mean): {100 * score:.2f}."
        if score is not None
        else " (Not a VTAB-1k score: that needs all 19 tasks.)"
    )
    after = _uncertainty_tables(result["uncertainty"]) if result.get("uncertainty", {}).get("tasks") else []
    figures = _group_reliability(result, out)
    lines = [markdown_header("Downstream transfer (VTAB-1k protocol)", prov)]
    for p in paragraphs:
        lines += [p, ""]
    for t in tables:
        lines += _md_table(*t)
    lines += ["", closing]
    for t in after:
        lines += _md_table(*t)
    if figures:
        lines += ["", "Reliability diagrams per group (vtab.html shows them too):", ""]
        lines += [f"![{caption}]({name})" for caption, name, _ in figures]
    lines.append("")
    parts = [html_header("Downstream transfer (VTAB-1k protocol)", prov)]
    parts += [f"<p>{html.escape(p)}</p>" for p in paragraphs]
    parts += [html_table(*t, tag="h3") for t in tables] + [f"<p>{html.escape(closing)}</p>"]
    parts += [html_table(*t, tag="h3") for t in after]
    if figures:
        parts.append(
            "<h3>Reliability diagrams per group</h3><div class='grid'>"
            + "".join(html_figure(data, caption) for caption, _, data in figures)
            + "</div>"
        )
    for _, name, data in figures:
        atomic_write_bytes(out / name, data)
    atomic_write_text(out / "vtab.md", "\n".join(lines))
    atomic_write_text(out / "vtab.html", html_document("Downstream transfer (VTAB-1k protocol)", parts))
    atomic_write_text(out / "vtab.json", json.dumps({"provenance": prov, **result}, indent=1))
