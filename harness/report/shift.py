"""The distribution-shift section of a report, from the results of each folder's saved shift sets
(:mod:`harness.shift.results`):

- the metrics on the clean subset and on every corrupted set; a figure in the layout of Ovadia et al.
  (NeurIPS 2019, *Can You Trust Your Model's Uncertainty?*, Fig. 2): one box per method (single models:
  each corruption's value averaged over seeds) and per ensemble at each severity, the box spanning the
  corruptions; and the ImageNet-C-style summary table (Hendrycks & Dietterich 2019);
- risk-coverage curves on the clean subset and on all corrupted sets pooled, and AURC per severity;
- OOD detection of every OOD set against the clean subset.

:func:`section` returns ``{"title", "text", "tables", "figures", "json"}`` for the report writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from harness.report.figures import png, risk_coverage_figure, severity_figure
from harness.shift.corruptions import describe
from harness.shift.results import CLEAN, METRICS, add_pooled_curves, entry_results, severity
from harness.uncertainty import metrics as M
from harness.uncertainty import ood as O

SCORE_NAMES = {
    "one_minus_max_prob": "1 − max probability",
    "entropy": "entropy",
    "mutual_information": "mutual information",
}


def _groups(items: "list[dict]") -> "list[dict]":
    """Single models grouped by method (in order of first appearance); each ensemble on its own."""
    groups: "list[dict]" = []
    for it in items:
        if it["kind"] == "ensemble":
            groups.append({"name": it["label"], "members": [it]})
            continue
        g = next((g for g in groups if g.get("method") == it["method"]), None)
        if g is None:
            groups.append({"name": it["method"], "method": it["method"], "members": [it]})
        else:
            g["members"].append(it)
    for g in groups:
        if "method" in g and len(g["members"]) > 1:
            g["name"] = f"{g['method']} ({len(g['members'])} seeds)"
    return groups


def _cell(values: "list[float]", pct: bool) -> str:
    """Mean (± std over seeds when there are several)."""
    if not values or any(v is None for v in values):
        return "-"
    scale, digits = (100, 2) if pct else (1, 4)
    mean = f"{scale * np.mean(values):.{digits}f}" + ("%" if pct else "")
    return mean if len(values) == 1 else f"{mean} ± {scale * np.std(values, ddof=1):.{digits}f}"


def _mean(group: dict, key: str, names: "list[str]") -> "list[float]":
    """Per member of a group: the mean of ``key`` over the sets ``names``."""
    return [float(np.mean([m["results"]["sets"][n][key] for n in names])) for m in group["members"]]


def _summary_table(groups: "list[dict]", pairs: "list[tuple[str, int]]") -> "list[list[str]]":
    corrupted = [f"{c}-{s}" for c, s in pairs]
    return [
        [g["name"]]
        + [_cell(_mean(g, key, names), M.METRICS[key].percent) for key in METRICS for names in ([CLEAN], corrupted)]
        for g in groups
    ]


def _findings(groups: "list[dict]", corruptions: "list[str]", worst: int) -> "list[str]":
    """One sentence per group: clean against the worst severity (means over corruptions and seeds)."""
    out = []
    for g in groups:
        at = {k: float(np.mean(_mean(g, k, [f"{c}-{worst}" for c in corruptions]))) for k in ("top1", "nll", "ece")}
        clean = {k: float(np.mean(_mean(g, k, [CLEAN]))) for k in ("top1", "nll", "ece")}
        out.append(
            f"{g['name']}: top-1 {100 * clean['top1']:.2f}% clean, {100 * at['top1']:.2f}% at severity {worst} "
            f"(mean over corruptions); NLL {clean['nll']:.4f} → {at['nll']:.4f}; ECE {clean['ece']:.4f} → "
            f"{at['ece']:.4f}."
        )
    return out


def _ood_table(groups: "list[dict]", ood_names: "list[str]") -> "list[list[str]]":
    rows = []
    for g in groups:
        for name in ood_names:
            for score in O.SCORES:
                vals = [m["results"]["ood"][name].get(score) for m in g["members"]]
                if all(v is not None for v in vals):
                    rows.append(
                        [g["name"], name, SCORE_NAMES[score]]
                        + [_cell([v[k] for v in vals], True) for k in ("auroc", "aupr_in", "aupr_out", "fpr95")]
                    )
    return rows


def section(items: Sequence["tuple[str, str, str, str | Path]"]) -> Optional[dict]:
    """The shift section for report entries ``(label, method, kind, folder)``; None when no entry has
    shift predictions.

    Returns:
        ``{"title", "text": [str], "tables": [(title, header, rows)], "figures": [(caption, file name,
        PNG bytes)], "json": {...}}``.

    Raises:
        ValueError: entries evaluated under shift on different examples.
    """
    results, missing = _gather(items)
    if not results:
        return None
    corruptions, severities, ood_names = _shared_sets(results)
    pairs = [(c, s) for c in corruptions for s in severities]
    add_pooled_curves([it["results"] for it in results], pairs)  # over the sets every entry has, as in the tables
    ref = results[0]["results"]
    spec, settings = ref["spec"], ref["spec"].get("settings", {})
    groups = _groups(results)
    what = _description(spec, settings, pairs, ood_names, missing) + _left_out(results, pairs, ood_names)
    text, tables, figures = [what], [], []
    if pairs:
        tables.append(
            (
                f"Corrupted sets: clean subset and mean over all {len(pairs)} corrupted sets "
                f"({len(corruptions)} corruptions x {len(severities)} severities; the ImageNet-C-style summary)",
                [
                    "method",
                    "top-1 clean",
                    "top-1 corrupted",
                    "NLL clean",
                    "NLL corrupted",
                    "ECE clean",
                    "ECE corrupted",
                ],
                _summary_table(groups, pairs),
            )
        )
        figures.append(
            (
                "Top-1, NLL and ECE against corruption severity; each box spans the corruptions (layout of "
                "Ovadia et al. 2019, Fig. 2)",
                "shift_severity.png",
                png(severity_figure(groups, severities, corruptions)),
            )
        )
        text += _findings(groups, corruptions, severities[-1])
    tables.append(_aurc_table(groups, corruptions, severities))
    figures.append(
        (
            "Risk-coverage curves, accepting the most confident first (single models: mean curve over seeds)",
            "shift_risk_coverage.png",
            png(risk_coverage_figure(groups)),
        )
    )
    if ood_names:
        tables.append(
            (
                "Out-of-distribution detection against the clean subset (AUROC, AUPR: higher is better; FPR at "
                "95% TPR: lower is better; mutual information for models with MC samples or members)",
                ["method", "OOD set", "score", "AUROC", "AUPR-in", "AUPR-out", "FPR at 95% TPR"],
                _ood_table(groups, ood_names),
            )
        )
    out_json = _record(results, spec, settings, corruptions, severities, ood_names, what, missing, figures)
    return {
        "title": "Distribution shift: corruptions, out-of-distribution detection, selective prediction",
        "text": text,
        "tables": tables,
        "figures": figures,
        "json": out_json,
    }


def _shared_sets(results: "list[dict]") -> "tuple[list[str], list[int], list[str]]":
    """``(corruptions, severities, OOD sets)`` that every entry was evaluated on: the corruptions that every entry has
    at every severity (no severities without such a corruption), and the OOD sets every entry has.

    Raises:
        ValueError: entries evaluated under shift on different examples.
    """
    ref = results[0]["results"]
    for it in results[1:]:
        if not np.array_equal(it["results"]["index"], ref["index"]):
            raise ValueError(
                f"{it['label']} ({it['folder']}) was evaluated under shift on other examples than "
                f"{results[0]['label']}: run harness shift on all of them with the same settings"
            )
    names = [n for n in ref["sets"] if all(n in it["results"]["sets"] for it in results)]
    severities = sorted({severity(n) for n in names if n != CLEAN})
    corruptions = [
        c
        for c in dict.fromkeys(n.rsplit("-", 1)[0] for n in names if n != CLEAN)
        if all(f"{c}-{s}" in names for s in severities)
    ]
    if not corruptions:  # no corruption was evaluated at every severity by every entry
        severities = []
    ood_names = [n for n in ref["ood"] if all(n in it["results"]["ood"] for it in results)]
    return corruptions, severities, ood_names


def _left_out(results: "list[dict]", pairs: "list[tuple[str, int]]", ood_names: "list[str]") -> str:
    """A sentence naming, entry by entry, the shift sets the section leaves out because not every entry has them
    (:func:`_shared_sets`; audit17 A17-11: two runs' different sets read as "no corrupted sets"); '' if none."""
    kept = {CLEAN, *(f"{c}-{s}" for c, s in pairs)}
    parts = []
    for it in results:
        sets = [n for n in it["results"]["sets"] if n not in kept]
        sets += [f"OOD {n}" for n in it["results"]["ood"] if n not in ood_names]
        if sets:
            parts.append(f"{it['label']} ({it['folder']}): {', '.join(sets)}")
    if not parts:
        return ""
    return (
        " Left out, as not every entry has them (the section compares the sets all entries share; harness shift with "
        "the same settings on every entry includes them): " + "; ".join(parts) + "."
    )


def _description(
    spec: dict, settings: dict, pairs: "list[tuple[str, int]]", ood_names: "list[str]", missing: "list[str]"
) -> str:
    """The section's first sentence: the images (how many, of which split, which subset), the corrupted sets
    (:func:`harness.shift.corruptions.describe`) and OOD sets, and the entries without shift predictions."""
    subset = "all of them" if not settings.get("examples") else f"a fixed random subset, seed {settings.get('seed')}"
    return (
        f"Distribution shift, from the shift predictions saved in each folder (shift/): {spec['examples']} "
        f"images of the evaluation split ({spec['eval_data']}; {subset}), the same images in every set; "
        + (describe(pairs) if pairs else "no corrupted sets")
        + (f"; OOD sets: {', '.join(ood_names)} (as many images as the clean subset)" if ood_names else "")
        + ". Single models: mean ± std over seeds."
        + (f" Not evaluated under shift (no shift predictions): {', '.join(missing)}." if missing else "")
    )


def _aurc_table(
    groups: "list[dict]", corruptions: "list[str]", severities: "list[int]"
) -> "tuple[str, list[str], list[list[str]]]":
    """The selective-prediction table: each group's AURC on the clean subset and, per severity, the mean over
    corruptions."""
    return (
        "Selective prediction by maximum probability: AURC, the area under the risk-coverage curve (lower "
        "is better; per severity: mean over corruptions)",
        ["method", "clean"] + [f"severity {s}" for s in severities],
        [
            [g["name"]]
            + [
                _cell(_mean(g, "aurc", sets), False)
                for sets in [[CLEAN]] + [[f"{c}-{s}" for c in corruptions] for s in severities]
            ]
            for g in groups
        ],
    )


def _gather(items: Sequence["tuple[str, str, str, str | Path]"]) -> "tuple[list[dict], list[str]]":
    """The entries with shift predictions (label, method, kind, folder, results) and the labels of those without."""
    results, missing = [], []
    for label, method, kind, folder in items:
        r = entry_results(folder)
        if r is None:
            missing.append(label)
        else:
            results.append({"label": label, "method": method, "kind": kind, "folder": str(folder), "results": r})
    return results, missing


def _record(
    results: "list[dict]",
    spec: dict,
    settings: dict,
    corruptions: "list[str]",
    severities: "list[int]",
    ood_names: "list[str]",
    what: str,
    missing: "list[str]",
    figures: list,
) -> dict:
    """The section's ``report.json`` record: the settings, the sets and every entry's numbers."""
    return {
        "settings": settings,
        "examples": spec["examples"],
        "eval_data": spec["eval_data"],
        "corruptions": corruptions,
        "severities": severities,
        "ood_sets": ood_names,
        "package": spec.get("key", {}).get("package"),
        "description": what,
        "not_evaluated": missing,
        "entries": [
            {
                "label": it["label"],
                "method": it["method"],
                "kind": it["kind"],
                "folder": it["folder"],
                "sets": it["results"]["sets"],
                "mean_corrupted": it["results"]["mean_corrupted"],
                "by_severity": {str(k): v for k, v in it["results"]["by_severity"].items()},
                "ood": it["results"]["ood"],
            }
            for it in results
        ],
        "figures": [f for _, f, _ in figures],
    }
