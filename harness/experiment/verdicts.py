"""The experiment's verdicts: its declared primary endpoint, the family of secondary comparisons with
Holm's adjustment, and the summary table that opens the report.

Every method claim rests on one 95% interval that covers training randomness and the test sample together
(:func:`harness.uncertainty.compare.method_level`: seeds and images, a random-effects decomposition with a
Satterthwaite t); an interval with the trained models fixed (images resampled) is labelled "for these trained
models" and never decides a method verdict. The primary endpoint (``primary`` in the experiment file,
declared before the runs) is one family: its comparisons (each method against hom) are Holm-adjusted among
themselves. Every other verdict the report states is in the secondary family, adjusted together (Holm 1979,
"A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6: 65-70): a verdict says
better or worse only when its raw 95% interval excludes 0 *and* its Holm-adjusted p is below 0.05.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from harness.experiment.config import Experiment
from harness.runs import load_heldout
from harness.uncertainty import metrics as M

#: what a comparison's interval covers
SCOPE_METHOD = "seeds + images"
SCOPE_MODELS = "for these trained models (images)"
SCOPE_SEEDS = "seeds (test images fixed)"
ALPHA = 0.05


def _preds(dirs: "list[Path]", split: str) -> list:
    from harness.uncertainty.predictions import Predictions

    if split == "heldout":
        out = [load_heldout(d) for d in dirs]
        return [] if any(p is None for p in out) else out
    return [Predictions.load(d) for d in dirs]


def split_name(split: str) -> str:
    return "held-out, noisy labels" if split == "heldout" else "test"


def method_rows(study: str, runs: "dict[str, list[Path]]", keys: "tuple[str, ...]", split: str,
                reference: str = "hom") -> "list[dict]":
    """Each method of ``runs`` against ``reference`` on ``split`` (``heldout`` or ``eval``), one row per
    metric of ``keys``, from the interval over seeds and images
    (:func:`harness.uncertainty.compare.method_level`; seeds paired by position)."""
    from harness.uncertainty.compare import method_level

    if reference not in runs:
        return []
    ref = _preds(runs[reference], split)
    rows = []
    for method, dirs in runs.items():
        mine = _preds(dirs, split)
        if method == reference or not mine or not ref:
            continue
        n = min(len(mine), len(ref))
        for key, r in method_level(mine[:n], ref[:n], keys=keys).items():
            rows.append({"study": study, "comparison": f"{method} − {reference}", "method": method, "metric": key,
                         "split": split, "scope": SCOPE_METHOD if n > 1 else SCOPE_MODELS, "n_seeds": n,
                         "mean": r["mean"], "lo": r["lo"], "hi": r["hi"], "p": r.get("p"),
                         "interval": r.get("method", ""), "verdict_raw": r["verdict"]})
    return rows


def ensemble_rows(ensembles: "dict[str, Path]", keys: "tuple[str, ...]", reference: str = "hom") -> "list[dict]":
    """Each ensemble against the reference method's ensemble on the test split, images resampled with the
    members fixed (one ensemble per method: there is no seed level), worded "for these trained models"."""
    from harness.uncertainty.compare import image_level
    from harness.uncertainty.predictions import Predictions

    if reference not in ensembles:
        return []
    rows = []
    for method, e in ensembles.items():
        if method == reference:
            continue
        r = image_level([Predictions.load(e)], [Predictions.load(ensembles[reference])], keys=keys)
        for key, x in r.items():
            rows.append({"study": "ensembles", "comparison": f"{e.name} − {ensembles[reference].name}",
                         "method": method, "metric": key, "split": "eval", "scope": SCOPE_MODELS, "n_seeds": 1,
                         "mean": x.get("mean", x.get("diff")), "lo": x["lo"], "hi": x["hi"], "p": x.get("p"),
                         "interval": "paired bootstrap over images", "verdict_raw": x["verdict"]})
    return rows


def seed_rows(study: str, diffs: "list[dict]", reference: str = "hom") -> "list[dict]":
    """Rows from seed-level paired differences (:func:`harness.experiment.sections.paired_differences`), for
    metrics without per-image parts (the multi-label study): the test images are held fixed."""
    return [{"study": study, "comparison": f"{d['method']} − {reference}", "method": d["method"], "metric": d["metric"],
             "split": "eval", "scope": SCOPE_SEEDS, "n_seeds": d["n"], "mean": d["mean"], "lo": d["lo"],
             "hi": d["hi"], "p": d["p"], "interval": "paired t over seeds", "verdict_raw": d["verdict"]}
            for d in diffs]


def adjust(rows: "list[dict]") -> "list[dict]":
    """Holm's step-down adjustment over ``rows`` (one family; :func:`harness.uncertainty.stats.holm`): each row
    gains ``p_holm`` and ``verdict``, better/worse only when its raw interval excludes 0 and ``p_holm`` <
    0.05 (rows without a p-value keep "no detectable difference")."""
    from harness.uncertainty.stats import holm

    tested = [r for r in rows if r.get("p") is not None and np.isfinite(r["p"])]
    adjusted = _holm_adjusted(holm([r["p"] for r in tested], alpha=ALPHA)) if tested else []
    for r, p in zip(tested, adjusted):
        r["p_holm"] = float(p)
    for r in rows:
        r.setdefault("p_holm", None)
        raw = r["verdict_raw"]
        keeps = raw in ("better", "worse") and r["p_holm"] is not None and r["p_holm"] < ALPHA
        r["verdict"] = raw if keeps else ("no detectable difference after Holm" if raw in ("better", "worse")
                                          else raw)
        r["family_size"] = len(rows)
    return rows


def _holm_adjusted(result) -> "list[float]":
    if isinstance(result, dict):
        for key in ("adjusted", "p_adjusted", "adjusted_p", "pvals_corrected"):
            if key in result:
                return list(result[key])
    return list(result)


def _num(v: Optional[float], metric: str, sign: bool = True) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    pct = metric in M.METRICS and M.METRICS[metric].percent
    return f"{100 * v:{'+' if sign else ''}.2f}" if pct else f"{v:{'+' if sign else ''}.4f}"


def _p(v: Optional[float]) -> str:
    """A p-value as the tables print it: 3 decimals (2 significant digits below 0.001), with more decimals where
    3 would put it on the other side of :data:`ALPHA` (0.0496 is printed 0.0496, not 0.050)."""
    if v is None:
        return "n/a"
    if v < 0.001:
        return f"{v:.2g}"
    for decimals in range(3, 10):
        text = f"{v:.{decimals}f}"
        if (float(text) < ALPHA) == (v < ALPHA):
            break
    return text


def row_cells(r: dict) -> "list[str]":
    """A row as the tables print it: study, comparison, metric (split), difference [95% CI], what the interval
    covers, p, Holm-adjusted p, verdict (points for percentage metrics)."""
    unit = " (points)" if r["metric"] in M.METRICS and M.METRICS[r["metric"]].percent else ""
    return [r["study"], r["comparison"], f"{r['metric']}{unit}, {split_name(r['split'])}",
            f"{_num(r['mean'], r['metric'])} [{_num(r['lo'], r['metric'])}, {_num(r['hi'], r['metric'])}]",
            f"{r['scope']}, n = {r['n_seeds']}", _p(r.get("p")), _p(r.get("p_holm")), r["verdict"]]


HEADER = ["family / study", "comparison", "metric, split", "difference [95% CI]", "interval covers", "p",
          "Holm p", "verdict"]


def oracle_methods(exp: Experiment) -> "list[str]":
    """Methods given the true noise (``train.loss=forward`` uses the known transition matrix T): controls that
    know what the others must learn, reported as oracles."""
    return [m for m, h in exp.methods.items() if any(str(o).replace(" ", "") == "train.loss=forward"
                                                   for o in (h.get("overrides") or []))]


def _word(r: dict) -> str:
    what = f"{r['metric']} ({split_name(r['split'])})"
    return (f"{r['comparison']} on {what}: {r['verdict']}, {_num(r['mean'], r['metric'])} "
            f"[{_num(r['lo'], r['metric'])}, {_num(r['hi'], r['metric'])}], Holm p {_p(r.get('p_holm'))}")


def findings(primary: "list[dict]", secondary: "list[dict]", oracles: "list[str]") -> "list[str]":
    """One sentence per fact, each computed from the rows of the summary."""
    out = []
    if primary:
        out.append("Primary endpoint (declared before the runs): " + "; ".join(_word(r) for r in primary) + ".")
    kept = [r for r in secondary if r["verdict"] in ("better", "worse")]
    lost = [r for r in secondary if r["verdict"] == "no detectable difference after Holm"]
    out.append(f"Secondary family: {len(secondary)} comparisons, Holm-adjusted together; {len(kept)} keep a "
               f"better/worse verdict" + (f", {len(lost)} lose it (raw interval excludes 0, adjusted p ≥ 0.05)"
                                         if lost else "") + ".")
    for o in oracles:
        by_metric: "dict[tuple, list[dict]]" = {}
        for r in primary + secondary:
            if r["study"] in ("main", "primary"):
                by_metric.setdefault((r["metric"], r["split"]), []).append(r)
        for (metric, split), rs in by_metric.items():
            mine = next((r for r in rs if r["method"] == o), None)
            others = [r for r in rs if r["method"] != o]
            if mine is None or not others:
                continue
            hib = M.METRICS[metric].higher_is_better if metric in M.METRICS else True
            best = all((mine["mean"] > r["mean"]) if hib else (mine["mean"] < r["mean"]) for r in others)
            if best and mine["verdict"] in ("better",):
                out.append(f"The oracle control {o} (given the true transition matrix T, which the other methods "
                           f"must learn) is ahead of every method on {metric} ({split_name(split)}): "
                           f"{o} − hom {_num(mine['mean'], metric)} against at most "
                           f"{_num(max(r['mean'] for r in others) if hib else min(r['mean'] for r in others), metric)}"
                           " for the others.")
        noisy = [r for r in primary + secondary
                 if r["method"] == o and r["split"] == "heldout" and r["verdict"] == "worse"]
        if noisy:
            shown = ", ".join(f"{r['study']}: {_num(r['mean'], r['metric'])} {r['metric']}" for r in noisy)
            out.append(f"{o} is scored on what it outputs, its estimate of the clean label (forward correction applies "
                       f"T inside the loss only), so against the noisy held-out labels it is worse than hom ({shown}): "
                       "that measures how far clean and noisy labels differ, not how well it learned the noise.")
    return out


def summary_section(primary: "list[dict]", secondary: "list[dict]", exp: Experiment) -> dict:
    """The report's opening: one table (the primary endpoint per method against hom, then the secondary
    verdicts that survive Holm), the findings sentences, and the whole secondary family in a table below."""
    kept = [r for r in secondary if r["verdict"] in ("better", "worse")]
    ep = exp.primary
    title = (f"Summary: primary endpoint {ep.metric} on the {split_name(ep.split)} split (declared in the experiment "
             f"file; {len(primary)} comparison(s), Holm among them), then the {len(kept)} of {len(secondary)} "
             "secondary verdicts that survive Holm's adjustment")
    rows = [["primary", *row_cells(r)[1:]] for r in primary] + [["secondary: " + r["study"], *row_cells(r)[1:]]
                                                                for r in kept]
    text = findings(primary, secondary, oracle_methods(exp))
    return {"summary": {"title": title, "header": HEADER, "rows": rows, "findings": text},
            "tables": [(f"Secondary family ({len(secondary)} comparisons): raw 95% intervals, p and Holm-adjusted p",
                        HEADER, [row_cells(r) for r in secondary])],
            "json": {"primary_endpoint": {"declared": {"metric": ep.metric, "split": ep.split}, "comparisons": primary},
                     "secondary_family": {"size": len(secondary), "adjustment": "holm", "alpha": ALPHA,
                                          "comparisons": secondary, "surviving": len(kept)}}}


def validate_primary(exp: Experiment) -> None:
    """The declared primary endpoint is one the comparisons compute, checked before any work.

    Raises:
        ValueError: an unknown metric or split, naming the choices.
    """
    from harness.uncertainty.compare import IMAGE_KEYS

    if exp.primary.metric not in IMAGE_KEYS:
        raise ValueError(f"primary.metric={exp.primary.metric!r}: the primary endpoint is compared over seeds and "
                         f"images, which needs a per-image metric: use one of {', '.join(IMAGE_KEYS)}")
    if exp.primary.split not in ("heldout", "eval"):
        raise ValueError(f"primary.split={exp.primary.split!r}: use heldout (the held-out split, noisy labels) or "
                         "eval (the evaluation split)")


def experiment_verdicts(exp: Experiment, runs: "dict[str, list[Path]]", ensembles: "list[Path]",
                        conditions: "dict[str, dict[str, list[Path]]]",
                        multilabel_diffs: "Optional[list[dict]]" = None, multilabel_reference: str = "hom") -> dict:
    """The summary section of an experiment (:func:`summary_section`): the primary family (each method of the
    main study against hom on the declared endpoint) and the secondary family (the main study on the test
    split, ensembles, every condition with hom on the primary endpoint and the test split, the multi-label
    study's seed-level differences), each Holm-adjusted."""
    import json

    keys = ("top1", "nll", "ece")
    ep = exp.primary
    primary = adjust(method_rows("main", runs, (ep.metric,), ep.split))
    secondary = method_rows("main", runs, tuple(k for k in keys if (k, "eval") != (ep.metric, ep.split)), "eval")
    ens = {json.loads((e / "ensemble.json").read_text())["method"]: e for e in ensembles}
    secondary += ensemble_rows(ens, keys)
    for name, per in conditions.items():
        study = f"condition {name}"
        secondary += method_rows(study, per, (ep.metric,), ep.split) + method_rows(study, per, keys, "eval")
    secondary += seed_rows("multi-label", multilabel_diffs or [], multilabel_reference)
    out = summary_section(primary, adjust(secondary), exp)
    out["summary"]["findings"].append(_confidence_note([d for dirs in runs.values() for d in dirs]))
    return out


def _confidence_note(dirs: "list[Path]") -> str:
    """How many single models are under-confident on the test labels (mean top-label confidence below
    top-1): when all are, a lower test ECE means a sharper model, not one calibrated to the labels it learned."""
    under = 0
    for p in _preds(dirs, "eval"):
        conf, correct = M.top_label(p.log_probs(), np.asarray(p.targets, dtype=np.int64))
        under += int(conf.mean() < correct.mean())
    text = (f"On the test labels {under} of {len(dirs)} single models are under-confident (mean top-label "
            "confidence below top-1)")
    return text + (": there a lower ECE measures sharpness against these labels, not calibration to the noisy "
                   "labels the models were trained to predict." if under == len(dirs) else ".")


def report_summary(exp: Experiment, runs: "dict[str, list[Path]]", ensembles: "list[Path]", conditions: dict, main: Any,
             ml_runs: "dict[str, list[Path]]", extra: dict) -> dict:
    """The verdicts that open an experiment's report: the summary table goes to ``extra["summary"]``, the secondary
    family's table and JSON are returned to merge. ``main`` is the main study's plan (its ``configs`` by run folder),
    ``conditions`` the runs of each condition by method, ``ml_runs`` the multi-label study's runs by method."""
    with_hom = {name: {m: [Path(main.configs[f].output_dir) for f in fs] for m, fs in per.items()}
                for name, per in conditions.items() if "hom" in per and len(per) > 1}
    ml_diffs = extra.get("json", {}).get("multilabel_paired_differences") if ml_runs else None
    ref = next((m for m in ml_runs if exp.multilabel.methods[m].get("covariance", "low_rank") == "none"), "hom")
    part = experiment_verdicts(exp, runs, ensembles, with_hom, ml_diffs, ref)
    extra["summary"] = part.pop("summary")
    if exp.preregistration:
        part["text"] = [f"Pre-registration (written in the experiment file before the runs): {exp.preregistration}"]
    return part
