"""The summary table that opens an experiment's report (:func:`summary_section`): the verdict rows of
:mod:`harness.experiment.verdicts` as the tables print them, when the primary endpoint was declared, and the
findings, one sentence per fact computed from the rows (the oracle controls' included)."""

from __future__ import annotations

from typing import Optional

from harness.experiment.config import Experiment
from harness.experiment.verdicts import ALPHA, _num, _p, oracle_methods, split_name
from harness.uncertainty import metrics as M


def row_cells(r: dict) -> "list[str]":
    """A row as the tables print it: study, comparison, metric (split), difference [95% CI], what the interval
    covers, p, Holm-adjusted p, the same at df = n − 1, verdict (points for percentage metrics; "fragile" where the
    verdict changes at df = n − 1)."""
    unit = " (points)" if r["metric"] in M.METRICS and M.METRICS[r["metric"]].percent else ""
    robust = (
        f"{_p(r['p_holm_df_n1'])}" + (" (fragile)" if r.get("fragile") else "")
        if r.get("p_holm_df_n1") is not None
        else "—"
    )
    return [
        r["study"],
        r["comparison"],
        f"{r['metric']}{unit}, {split_name(r['split'])}",
        f"{_num(r['mean'], r['metric'])} [{_num(r['lo'], r['metric'])}, {_num(r['hi'], r['metric'])}]",
        f"{r['scope']}, n = {r['n_seeds']}",
        _p(r.get("p")),
        _p(r.get("p_holm")),
        robust,
        r["verdict"]
        + (", fragile" if r.get("fragile") else "")
        + (
            f", {'replicated' if r['replication'] == 'replicated' else 'not replicated'}"
            if r.get("replication")
            else ""
        ),
    ]


HEADER = [
    "family / study",
    "comparison",
    "metric, split",
    "difference [95% CI]",
    "interval covers",
    "p",
    "Holm p",
    "Holm p at df = n − 1",
    "verdict",
]


def _word(r: dict) -> str:
    what = f"{r['metric']} ({split_name(r['split'])})"
    return (
        f"{r['comparison']} on {what}: {r['verdict']}, {_num(r['mean'], r['metric'])} "
        f"[{_num(r['lo'], r['metric'])}, {_num(r['hi'], r['metric'])}], Holm p {_p(r.get('p_holm'))}"
    )


def declaration(exp: Experiment) -> str:
    """When the primary endpoint was declared and for which studies' rows it is prospective."""
    ep = exp.primary
    when = f"declared {ep.declared}" if ep.declared else "declared in the experiment file"
    pro = [s for s in ep.prospective_for]
    if "main" in pro:
        return f"{when}, before the runs"
    return f"{when}, after the main study's runs: retrospective for the main study's rows" + (
        f", prospective for condition(s) {', '.join(pro)} only" if pro else ""
    )


def findings(
    primary: "list[dict]", secondary: "list[dict]", oracles: "list[str]", declared: str = "declared before the runs"
) -> "list[str]":
    """One sentence per fact, each computed from the rows of the summary."""
    out = []
    if primary:
        out.append(f"Primary endpoint ({declared}): " + "; ".join(_word(r) for r in primary) + ".")
    kept = [r for r in secondary if r["verdict"] in ("better", "worse")]
    lost = [r for r in secondary if r["verdict"] == "no detectable difference after Holm"]
    fragile = [r for r in primary + secondary if r.get("fragile")]
    out.append(
        f"Secondary family (method level): {len(secondary)} comparisons, Holm-adjusted together; {len(kept)} "
        f"keep a better/worse verdict"
        + (f", {len(lost)} lose it (raw interval excludes 0, adjusted p ≥ 0.05)" if lost else "")
        + "."
    )
    if fragile:
        out.append(
            "Fragile verdicts (the verdict changes when the same test uses df = n − 1 instead of "
            "Satterthwaite's df): "
            + "; ".join(f"{r['study']}: {r['comparison']} {r['metric']} ({split_name(r['split'])})" for r in fragile)
            + "."
        )
    top1 = [
        r
        for r in secondary
        if r["study"] == "main" and r["metric"] == "top1" and r["split"] == "eval" and r["method"] not in oracles
    ]
    if top1 and not any(r["verdict"] == "better" for r in top1):
        out.append(
            "Clean-test top-1: no method's gain over hom is established at the main study's schedule ("
            + "; ".join(
                f"{r['comparison']} {_num(r['mean'], 'top1')} points [{_num(r['lo'], 'top1')}, "
                f"{_num(r['hi'], 'top1')}], {r['verdict']}"
                for r in top1
            )
            + ")."
        )
    exploratory = sorted({r["study"] for r in secondary if r.get("exploratory")})
    if exploratory:
        out.append(
            "Exploratory (chosen after seeing results, so not confirmatory): "
            + "; ".join(f"{st} ({next(r['exploratory'] for r in secondary if r['study'] == st)})" for st in exploratory)
            + "."
        )
    for o in oracles:
        out += _oracle_sentences(o, primary + secondary)
    return out


def _oracle_sentences(o: str, rows: "list[dict]") -> "list[str]":
    """What the oracle control ``o`` shows among ``rows`` (the primary and secondary ones): on each metric of the
    main study where it is ahead of every method, by how much; and, where it is worse than hom on the noisy
    held-out labels, why that is no failure to learn the noise."""
    out = []
    by_metric: "dict[tuple, list[dict]]" = {}
    for r in rows:
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
            out.append(
                f"The oracle control {o} (given the true transition matrix T, which the other methods "
                f"must learn) is ahead of every method on {metric} ({split_name(split)}): "
                f"{o} − hom {_num(mine['mean'], metric)} against at most "
                f"{_num(max(r['mean'] for r in others) if hib else min(r['mean'] for r in others), metric)}"
                " for the others."
            )
    noisy = [r for r in rows if r["method"] == o and r["split"] == "heldout" and r["verdict"] == "worse"]
    if noisy:
        shown = ", ".join(f"{r['study']}: {_num(r['mean'], r['metric'])} {r['metric']}" for r in noisy)
        out.append(
            f"{o} is scored on what it outputs, its estimate of the clean label (forward correction applies "
            f"T inside the loss only), so against the noisy held-out labels it is worse than hom ({shown}): "
            "that measures how far clean and noisy labels differ, not how well it learned the noise."
        )
    return out


def summary_section(
    primary: "list[dict]",
    secondary: "list[dict]",
    exp: Experiment,
    fixed: "Optional[list[dict]]" = None,
    oracle_rows: "Optional[list[dict]]" = None,
) -> dict:
    """The report's opening: one table (the primary endpoint per method against hom, the oracle's row outside the
    family, then the secondary verdicts that survive Holm), the findings sentences, the whole secondary family in a
    table below, and the descriptive family of models-fixed rows (ensembles: "for these trained models")."""
    fixed, oracle_rows = fixed or [], oracle_rows or []
    kept = [r for r in secondary if r["verdict"] in ("better", "worse")]
    ep = exp.primary
    declared = declaration(exp)
    title = (
        f"Summary: primary endpoint {ep.metric} on the {split_name(ep.split)} split ({declared}; "
        f"{len(primary)} comparison(s), Holm among them), then the {len(kept)} of {len(secondary)} "
        "secondary verdicts that survive Holm's adjustment"
    )

    def label(r: dict, head: str) -> str:
        return f"{head}, exploratory: {r['study']}" if r.get("exploratory") else f"{head}: {r['study']}"

    rows = (
        [["primary", *row_cells(r)[1:]] for r in primary]
        + [["oracle (outside the family)", *row_cells(r)[1:]] for r in oracle_rows]
        + [[label(r, "secondary"), *row_cells(r)[1:]] for r in kept]
    )
    text = findings(primary, secondary, oracle_methods(exp), declared)
    fixed_kept = [r for r in fixed if r["verdict"] in ("better", "worse")]
    if fixed:
        text.append(
            f'Models-fixed family (descriptive, "for these trained models"; ensembles: {len(fixed)} '
            f"comparisons, unfloored p, Holm-adjusted together): {len(fixed_kept)} better/worse."
        )
    tables = [
        (
            f"Secondary family ({len(secondary)} comparisons, method level): raw 95% intervals, p and Holm-adjusted "
            "p, and the same at df = n − 1",
            HEADER,
            [row_cells(r) for r in secondary],
        )
    ]
    if fixed:
        tables.append(
            (
                f"Models-fixed family ({len(fixed)} comparisons, descriptive: for these trained models, images "
                "resampled; p without a floor, Holm-adjusted together)",
                HEADER,
                [row_cells(r) for r in fixed],
            )
        )
    return {
        "summary": {"title": title, "header": HEADER, "rows": rows, "findings": text},
        "tables": tables,
        "json": {
            "primary_endpoint": {
                "declared": {
                    "metric": ep.metric,
                    "split": ep.split,
                    "date": ep.declared,
                    "prospective_for": list(ep.prospective_for),
                    "statement": declared,
                },
                "comparisons": primary,
                "oracle_rows": oracle_rows,
            },
            "secondary_family": {
                "size": len(secondary),
                "adjustment": "holm",
                "alpha": ALPHA,
                "comparisons": secondary,
                "surviving": len(kept),
            },
            "models_fixed_family": {
                "size": len(fixed),
                "adjustment": "holm",
                "alpha": ALPHA,
                "comparisons": fixed,
                "surviving": len(fixed_kept),
            },
        },
    }
