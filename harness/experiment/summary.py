"""The summary that opens an experiment's report: the verdicts of :mod:`harness.experiment.verdicts` (the primary
endpoint, the secondary family, the models-fixed family), read against what else the report knows: the replication
study's verdicts (which are fragile), the premise of human noise against a synthetic condition, the effect sizes
beside hom's level, and the confidence the models have on their own predictions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from harness.experiment.config import Experiment
from harness.experiment.summary_table import summary_section
from harness.experiment.verdicts import (
    _num,
    _p,
    _preds,
    _row,
    _strong,
    adjust,
    ensemble_rows,
    method_rows,
    oracle_methods,
    seed_rows,
    split_name,
)
from harness.uncertainty import metrics as M


def experiment_verdicts(
    exp: Experiment,
    runs: "dict[str, list[Path]]",
    ensembles: "list[Path]",
    conditions: "dict[str, dict[str, list[Path]]]",
    multilabel_diffs: "Optional[list[dict]]" = None,
    multilabel_reference: str = "hom",
) -> dict:
    """The summary section of an experiment (:func:`summary_section`): the primary family (each method of the
    main study against hom on the declared endpoint, oracles outside it), the secondary family (the main study on
    the test split, every condition with hom on the primary endpoint and the test split, the human − class-
    conditional difference of het's gain, the multi-label study's seed-level differences) and the models-fixed
    family (ensembles), each Holm-adjusted on its own."""
    import json

    keys = ("top1", "nll", "ece")
    ep = exp.primary
    oracles = oracle_methods(exp)
    noisy_main = {m: d for m, d in runs.items() if m not in oracles}
    primary = adjust(method_rows("main", noisy_main, (ep.metric,), ep.split), "primary")
    oracle_rows = [r for r in method_rows("main", runs, (ep.metric,), ep.split) if r["method"] in oracles]
    for r in oracle_rows:
        r.update(p_holm=None, verdict=r["verdict_raw"] + " (oracle, unadjusted)", family="oracle", fragile=False)
    secondary = method_rows("main", runs, tuple(k for k in keys if (k, "eval") != (ep.metric, ep.split)), "eval")
    for name, per in conditions.items():
        study = f"condition {name}"
        rows = method_rows(study, per, (ep.metric,), ep.split) + method_rows(study, per, keys, "eval")
        reason = exp.conditions[name].exploratory if name in exp.conditions else ""
        for r in rows:
            r["exploratory"] = reason
        secondary += rows
    premise = human_minus_condition(exp, runs, conditions)
    secondary += premise
    secondary += seed_rows("multi-label", multilabel_diffs or [], multilabel_reference)
    ens = {json.loads((e / "ensemble.json").read_text())["method"]: e for e in ensembles}
    fixed = adjust(ensemble_rows(ens, keys), "models fixed")
    secondary = adjust(secondary)
    replicated = mark_replication(exp, primary + secondary + fixed)
    out = summary_section(primary, secondary, exp, fixed, oracle_rows)
    out["summary"]["findings"] += replicated
    out["summary"]["findings"] += effect_sizes(primary, runs, ens, ep) + premise_sentence(
        premise, primary, secondary, ep
    )
    out["summary"]["findings"].append(_confidence_note([d for dirs in runs.values() for d in dirs]))
    return out


def _key(r: dict) -> tuple:
    return r["study"], r["comparison"], r["metric"], r["split"]


def mark_replication(exp: Experiment, rows: "list[dict]") -> "list[str]":
    """Each better/worse verdict of ``rows`` marked ``replication``: "replicated" when the replication experiment's
    report (``exp.replication``) gives the same row the same verdict, else "fragile"; a sentence with the counts.
    Nothing when the experiment names no replication; a sentence saying so when its report is not there yet."""
    import json

    own = Path(exp.results_root) / exp.replication / "report.json"  # this machine's replication, else the reference's
    path = own if own.is_file() else Path(exp.reference_root) / exp.replication / "report.json"
    if not exp.replication:
        return []
    if not path.is_file():
        return [
            f"Replication ({exp.replication}): its report is not there yet (neither {own} nor {path}), so no verdict "
            f"is marked replicated or fragile; `harness run {exp.replication}` writes it."
        ]
    rep = json.loads(path.read_text())
    theirs = {
        _key(r): r["verdict"]
        for part in ("primary_endpoint", "secondary_family", "models_fixed_family")
        for r in rep.get(part, {}).get("comparisons", [])
    }
    strong = [r for r in rows if r["verdict"] in ("better", "worse")]
    for r in strong:
        r["replication"] = "replicated" if theirs.get(_key(r)) == r["verdict"] else "fragile"
        r["replication_verdict"] = theirs.get(_key(r))
    changed = sum(1 for r in rows if _key(r) in theirs and _strong(theirs[_key(r)]) != _strong(r["verdict"]))
    fragile = [r for r in strong if r["replication"] == "fragile"]
    from harness.experiment.config import load_experiment

    return [
        f"Replication ({exp.replication}: {load_experiment(exp.replication).description}): "
        f"{len(strong) - len(fragile)} of {len(strong)} better/worse verdicts replicated"
        + (
            ", fragile: "
            + "; ".join(
                f"{r['study']}: {r['comparison']} {r['metric']} ({split_name(r['split'])}) "
                f"{r['verdict']} → {r['replication_verdict'] or 'no such row'}"
                for r in fragile
            )
            if fragile
            else ""
        )
        + f"; {changed} of {sum(_key(r) in theirs for r in rows)} verdict labels differ."
    ]


def human_minus_condition(
    exp: Experiment, runs: "dict[str, list[Path]]", conditions: "dict[str, dict[str, list[Path]]]"
) -> "list[dict]":
    """The pre-registered secondary "is het's gain larger for human (image-dependent) noise than for class-conditional
    noise with the same T?": per seed s and held-out image i, (het − hom) in the main study minus (het − hom) in
    the ``sigma_readout.class_conditional`` condition, on the primary endpoint, one interval over seeds and images
    (:func:`harness.uncertainty.method.anova_interval`; the two studies' held-out images are the same, their labels
    carry each study's own noise). Negative (NLL) means a larger gain on human noise, the paper's premise."""
    from harness.uncertainty.compare import HIGHER_IS_BETTER, parts, per_image_difference
    from harness.uncertainty.method import anova_interval

    name = exp.sigma_readout.get("class_conditional")
    per = conditions.get(name or "", {})
    het = next((m for m, h in exp.methods.items() if h.get("covariance") == "low_rank"), None)
    ep = exp.primary
    if het is None or ep.metric == "ece" or not {het, "hom"} <= set(per) or not {het, "hom"} <= set(runs):
        return []
    sides = [[_preds(dirs, ep.split) for dirs in (group[het], group["hom"])] for group in (runs, per)]
    n = min(len(x) for side in sides for x in side)
    if n == 0 or any(not np.array_equal(sides[0][0][0].index, x[0].index) for x in sides[1]):
        return []
    d = np.stack(
        [
            per_image_difference(ep.metric, parts(sides[0][0][s]), parts(sides[0][1][s]))
            - per_image_difference(ep.metric, parts(sides[1][0][s]), parts(sides[1][1][s]))
            for s in range(n)
        ]
    )
    r = anova_interval(d, higher_is_better=HIGHER_IS_BETTER[ep.metric])
    return [
        _row(
            f"human − {name}",
            f"({het} − hom) human noise − ({het} − hom) {name}",
            het,
            ep.metric,
            ep.split,
            n,
            {**r, "verdict_df_n1": r.get("verdict_df_n1")},
        )
    ]


def premise_sentence(premise: "list[dict]", primary: "list[dict]", secondary: "list[dict]", ep: Any) -> "list[str]":
    """The pre-registered secondary on the paper's premise, worded against it, with the study whose het − hom point
    gain on the primary endpoint is largest."""
    if not premise:
        return []
    r = premise[0]
    het = r["method"]
    gains = [
        x
        for x in primary + secondary
        if x["method"] == het
        and x["comparison"] == f"{het} − hom"
        and (x["metric"], x["split"]) == (ep.metric, ep.split)
        and not x.get("exploratory")
    ]
    hib = M.METRICS[ep.metric].higher_is_better if ep.metric in M.METRICS else True
    best = (max if hib else min)(gains, key=lambda x: x["mean"]) if gains else None
    word = {"better": "supported", "worse": "contradicted"}.get(r["verdict"], "not established")
    return [
        f"The paper's premise (HET gains more under image-dependent human noise than under class-conditional noise "
        f"with the same T): {het}'s gain on human noise minus its gain in {r['study'].split(' − ', 1)[1]}, "
        f"{_num(r['mean'], r['metric'])} [{_num(r['lo'], r['metric'])}, {_num(r['hi'], r['metric'])}], p "
        f"{_p(r['p'])}, Holm p {_p(r.get('p_holm'))}: {word} here"
        + (
            f"; among the confirmatory studies the largest point gain is in {best['study']} "
            f"({_num(best['mean'], best['metric'])})"
            if best
            else ""
        )
        + "."
    ]


def effect_sizes(
    primary: "list[dict]", runs: "dict[str, list[Path]]", ensembles: "dict[str, Path]", ep: Any
) -> "list[str]":
    """The primary differences relative to hom's metric and to what a hom ensemble gains over its members on the
    same split (the yardstick a practitioner has)."""
    from harness.uncertainty.compare import metric_stat, parts

    if not primary or "hom" not in runs or ep.metric == "ece":
        return []
    stat = metric_stat(ep.metric, 1)
    homs = _preds(runs["hom"], ep.split)
    if not homs:
        return []
    hom_mean = float(np.mean([stat(*parts(p)) for p in homs]))
    text = ", ".join(
        f"{r['comparison']} {_num(r['mean'], r['metric'])} ({100 * r['mean'] / hom_mean:+.1f}% of hom's "
        f"{_num(hom_mean, r['metric'], False)})"
        for r in primary
    )
    out = f"Effect sizes on the primary endpoint: {text}"
    if "hom" in ensembles:
        ens = _preds([ensembles["hom"]], ep.split)
        if ens:
            gain = stat(*parts(ens[0])) - hom_mean
            out += (
                f"; the hom ensemble ({ensembles['hom'].name}) gains {_num(gain, ep.metric)} over its members' "
                "mean on the same split, so each method's difference is "
                + ", ".join(f"{r['method']} {r['mean'] / gain:.2f}x" for r in primary)
                + " the ensemble's gain"
                if gain
                else ""
            )
    return [out + "."]


def _confidence_note(dirs: "list[Path]") -> str:
    """How many single models are under-confident on the test labels (mean top-label confidence below
    top-1): when all are, a lower test ECE means a sharper model, not one calibrated to the labels it learned."""
    under = 0
    for p in _preds(dirs, "eval"):
        conf, correct = M.top_label(p.log_probs(), np.asarray(p.targets, dtype=np.int64))
        under += int(conf.mean() < correct.mean())
    text = (
        f"On the test labels {under} of {len(dirs)} single models are under-confident (mean top-label "
        "confidence below top-1)"
    )
    return text + (
        ": there a lower ECE measures sharpness against these labels, not calibration to the noisy "
        "labels the models were trained to predict."
        if under == len(dirs)
        else "."
    )


def report_summary(
    exp: Experiment,
    runs: "dict[str, list[Path]]",
    ensembles: "list[Path]",
    conditions: dict,
    main: Any,
    ml_runs: "dict[str, list[Path]]",
    extra: dict,
) -> dict:
    """The verdicts that open an experiment's report: the summary table goes to ``extra["summary"]``, the secondary
    family's table and JSON are returned to merge. ``main`` is the main study's plan (its ``configs`` by run folder),
    ``conditions`` the runs of each condition by method, ``ml_runs`` the multi-label study's runs by method."""
    with_hom = {
        name: {m: [Path(main.configs[f].output_dir) for f in fs] for m, fs in per.items()}
        for name, per in conditions.items()
        if "hom" in per and len(per) > 1
    }
    ml_diffs = extra.get("json", {}).get("multilabel_paired_differences") if ml_runs else None
    ref = next((m for m in ml_runs if exp.multilabel.methods[m].get("covariance", "low_rank") == "none"), "hom")
    part = experiment_verdicts(exp, runs, ensembles, with_hom, ml_diffs, ref)
    extra["summary"] = part.pop("summary")
    if exp.preregistration:
        part["text"] = [
            f"Pre-registration (the experiment file's `preregistration`; each part says when it was written "
            f"and for which runs): {exp.preregistration}"
        ]
    return part
