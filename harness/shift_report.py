"""The distribution-shift section of a report, from saved shift predictions (:mod:`harness.shift`).

For every report entry (run or ensemble folder) with ``shift/shift.json``, computed from the saved
sets only (nothing is re-predicted):

- accuracy, NLL and ECE (:mod:`harness.metrics`) on the clean subset and on every corrupted set;
  a figure in the layout of Ovadia et al. (NeurIPS 2019, *Can You Trust Your Model's Uncertainty?*,
  Fig. 2): one box per method (single models: each corruption's value averaged over seeds) and per
  ensemble at each severity, the box spanning the corruptions; and the ImageNet-C-style summary
  table (Hendrycks & Dietterich 2019): the metrics averaged over all corrupted sets;
- selective prediction by the maximum probability: risk-coverage curves on the clean subset and
  on all corrupted sets pooled, and AURC per severity (:mod:`harness.ood`);
- OOD detection of every OOD set against the clean subset: AUROC, AUPR-in, AUPR-out and FPR at 95%
  TPR for the maximum probability, the predictive entropy and, for models with components (het
  heads' MC samples, ensemble members), the mutual information.

:func:`section` returns ``{"title", "text", "tables", "figures", "json"}`` for the report writer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from harness import metrics as M
from harness import ood as O
from harness.figures import png
from harness.shift import CLEAN, OOD_PREFIX, load_sets

METRICS = (("top1", "top-1", True), ("nll", "NLL", False), ("ece", "ECE", False))
SCORE_NAMES = {"one_minus_max_prob": "1 − max probability", "entropy": "entropy", "mutual_information": "mutual information"}


def _severity(name: str) -> Optional[int]:
    """Severity of a corrupted set's name (``frost-3`` -> 3); None for clean and OOD sets."""
    if name == CLEAN or name.startswith(OOD_PREFIX):
        return None
    return int(name.rsplit("-", 1)[1])


def entry_results(folder: "str | Path") -> Optional[dict]:
    """Metrics of one run or ensemble folder's saved shift sets; None if it has none.

    Returns:
        ``sets`` {set: {top1, nll, ece, aurc}} (clean and corrupted), ``ood`` {OOD set: {score:
        {auroc, aupr_in, aupr_out, fpr95}}}, ``mean_corrupted`` {top1, nll, ece, aurc},
        ``by_severity`` {severity: {top1, nll, ece, aurc}}, ``curves`` (the risk-coverage arrays of
        the clean subset; :func:`section` adds the pooled corrupted sets common to all entries),
        ``selective`` {set: (confidence [N], correct [N])}, ``index`` of the clean subset, the spec
        of the folder's ``shift.json``.
    """
    loaded = load_sets(folder)
    if loaded is None or CLEAN not in loaded[1]:
        return None
    spec, sets = loaded
    res: dict = {"sets": {}, "ood": {}, "spec": spec, "selective": {}}
    for name, (preds, _) in sets.items():
        if name.startswith(OOD_PREFIX):
            continue
        lp = preds.log_probs()
        m = M.classification_metrics(lp, preds.targets)
        conf, correct = M.top_label(lp, preds.targets)
        res["sets"][name] = {"top1": m["top1"], "nll": m["nll"], "ece": m["ece"], "aurc": O.aurc(conf, correct)}
        res["selective"][name] = (conf, correct)
        if name == CLEAN:
            res["curves"] = {"clean": O.risk_coverage(conf, correct)}
            res["index"] = preds.index
    corrupted = {n: v for n, v in res["sets"].items() if n != CLEAN}
    keys = ("top1", "nll", "ece", "aurc")
    res["mean_corrupted"] = {k: float(np.mean([v[k] for v in corrupted.values()])) for k in keys} if corrupted else {}
    res["by_severity"] = {}
    for s in sorted({_severity(n) for n in corrupted}):
        vals = [v for n, v in corrupted.items() if _severity(n) == s]
        res["by_severity"][s] = {k: float(np.mean([v[k] for v in vals])) for k in keys}
    clean_preds, clean_ent = sets[CLEAN]
    score_in = O.uncertainty_scores(clean_preds.log_probs(), clean_ent)
    for name, (preds, ent) in sets.items():
        if name.startswith(OOD_PREFIX):
            score_out = O.uncertainty_scores(preds.log_probs(), ent)
            res["ood"][name[len(OOD_PREFIX):]] = {k: O.ood_metrics(score_in[k], score_out[k]) for k in score_in
                                                  if k in score_out}
    return res


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


def severity_figure(groups: "list[dict]", severities: "list[int]", corruptions: "list[str]"):
    """Ovadia et al. Fig. 2 layout: top-1, NLL and ECE against severity (0 = clean), one box per
    group at each severity spanning the corruptions (single models: per-corruption means over seeds)."""
    from harness.figures import pyplot

    plt = pyplot()

    colors = plt.get_cmap("tab10").colors
    width_in = max(6.0, 2.0 + 0.3 * len(groups) * (len(severities) + 1))
    fig, axes = plt.subplots(3, 1, figsize=(width_in, 9.5), sharex=True)
    width = 0.8 / len(groups)
    for ax, (key, label, pct) in zip(axes, METRICS):
        for gi, g in enumerate(groups):
            data, pos = [], []
            for si, s in enumerate([0] + severities):
                names = [CLEAN] if s == 0 else [f"{c}-{s}" for c in corruptions]
                vals = [float(np.mean([m["results"]["sets"][n][key] for m in g["members"]])) for n in names]
                data.append([100 * v if pct else v for v in vals])
                pos.append(si + (gi - (len(groups) - 1) / 2) * width)
            ax.boxplot(data, positions=pos, widths=width * 0.85, patch_artist=True, showfliers=True,
                       boxprops={"facecolor": colors[gi % 10], "alpha": 0.75}, medianprops={"color": "k"},
                       flierprops={"markersize": 3})
        ax.set_ylabel(label + (" (%)" if pct else ""))
        ax.grid(axis="y", alpha=0.3)
    axes[-1].set_xticks(range(len(severities) + 1))
    axes[-1].set_xticklabels(["clean"] + [str(s) for s in severities])
    axes[-1].set_xlabel("corruption severity (boxes span the corruptions)")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=colors[i % 10], alpha=0.75) for i in range(len(groups))]
    fig.legend(handles, [g["name"] for g in groups], loc="lower center", ncol=min(4, len(groups)), fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.03 + 0.025 * ((len(groups) + 3) // 4), 1, 1))
    return fig


def risk_coverage_figure(groups: "list[dict]"):
    """Risk (error rate among the accepted) against coverage, accepting by maximum probability, on the
    clean subset and on all corrupted sets pooled; single models' curves averaged over seeds."""
    from harness.figures import pyplot

    plt = pyplot()

    colors = plt.get_cmap("tab10").colors
    pooled = all("corrupted" in m["results"]["curves"] for g in groups for m in g["members"])
    panels = ["clean"] + (["corrupted"] if pooled else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        for gi, g in enumerate(groups):
            curves = [m["results"]["curves"][panel] for m in g["members"]]
            cov, risk = curves[0][0], np.mean([c[1] for c in curves], axis=0)
            aurc = float(risk.mean())
            ax.plot(cov, 100 * risk, color=colors[gi % 10], lw=1.4, label=f"{g['name']} (AURC {aurc:.4f})")
        ax.set_xlabel("coverage (share of examples accepted, most confident first)")
        ax.set_ylabel("risk: error rate among accepted (%)")
        ax.set_title("clean subset" if panel == "clean" else "all corrupted sets pooled", fontsize=9)
        ax.set_xlim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _mean(group: dict, key: str, names: "list[str]") -> "list[float]":
    """Per member of a group: the mean of ``key`` over the sets ``names``."""
    return [float(np.mean([m["results"]["sets"][n][key] for n in names])) for m in group["members"]]


def _summary_table(groups: "list[dict]", pairs: "list[tuple[str, int]]") -> "list[list[str]]":
    corrupted = [f"{c}-{s}" for c, s in pairs]
    return [[g["name"]] + [_cell(_mean(g, key, names), pct) for key, _, pct in METRICS
                           for names in ([CLEAN], corrupted)] for g in groups]


def _findings(groups: "list[dict]", corruptions: "list[str]", worst: int) -> "list[str]":
    """One sentence per group: clean against the worst severity (means over corruptions and seeds)."""
    out = []
    for g in groups:
        at = {k: float(np.mean(_mean(g, k, [f"{c}-{worst}" for c in corruptions]))) for k in ("top1", "nll", "ece")}
        clean = {k: float(np.mean(_mean(g, k, [CLEAN]))) for k in ("top1", "nll", "ece")}
        out.append(f"{g['name']}: top-1 {100 * clean['top1']:.2f}% clean, {100 * at['top1']:.2f}% at severity {worst} "
                   f"(mean over corruptions); NLL {clean['nll']:.4f} → {at['nll']:.4f}; ECE {clean['ece']:.4f} → "
                   f"{at['ece']:.4f}.")
    return out


def _ood_table(groups: "list[dict]", ood_names: "list[str]") -> "list[list[str]]":
    rows = []
    for g in groups:
        for name in ood_names:
            for score in O.SCORES:
                vals = [m["results"]["ood"][name].get(score) for m in g["members"]]
                if all(v is not None for v in vals):
                    rows.append([g["name"], name, SCORE_NAMES[score]] + [_cell([v[k] for v in vals], True)
                                                                         for k in ("auroc", "aupr_in", "aupr_out",
                                                                                   "fpr95")])
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
    from harness.corruptions import describe

    results, missing = [], []
    for label, method, kind, folder in items:
        r = entry_results(folder)
        if r is None:
            missing.append(label)
        else:
            results.append({"label": label, "method": method, "kind": kind, "folder": str(folder), "results": r})
    if not results:
        return None
    ref = results[0]["results"]
    for it in results[1:]:
        if not np.array_equal(it["results"]["index"], ref["index"]):
            raise ValueError(f"{it['label']} ({it['folder']}) was evaluated under shift on other examples than "
                             f"{results[0]['label']}: run harness shift on all of them with the same settings")
    names = [n for n in ref["sets"] if all(n in it["results"]["sets"] for it in results)]
    severities = sorted({_severity(n) for n in names if n != CLEAN})
    corruptions = [c for c in dict.fromkeys(n.rsplit("-", 1)[0] for n in names if n != CLEAN)
                   if all(f"{c}-{s}" in names for s in severities)]
    if not corruptions:  # no corruption was evaluated at every severity by every entry
        severities = []
    pairs = [(c, s) for c in corruptions for s in severities]
    for it in results:  # pooled risk-coverage over the sets every entry has, as in the tables
        r = it["results"]
        if pairs:
            sel = [r["selective"][f"{c}-{s}"] for c, s in pairs]
            r["curves"]["corrupted"] = O.risk_coverage(np.concatenate([c for c, _ in sel]),
                                                       np.concatenate([k for _, k in sel]))
    ood_names = [n for n in ref["ood"] if all(n in it["results"]["ood"] for it in results)]
    spec, settings = ref["spec"], ref["spec"].get("settings", {})
    groups = _groups(results)
    subset = "all of them" if not settings.get("examples") else f"a fixed random subset, seed {settings.get('seed')}"
    what = (f"Distribution shift, from the shift predictions saved in each folder (shift/): {spec['examples']} "
            f"images of the evaluation split ({spec['eval_data']}; {subset}), the same images in every set; "
            + (describe(pairs) if pairs else "no corrupted sets")
            + (f"; OOD sets: {', '.join(ood_names)} (as many images as the clean subset)" if ood_names else "")
            + ". Single models: mean ± std over seeds."
            + (f" Not evaluated under shift (no shift predictions): {', '.join(missing)}." if missing else ""))
    text, tables, figures = [what], [], []
    if pairs:
        tables.append((f"Corrupted sets: clean subset and mean over all {len(pairs)} corrupted sets "
                       f"({len(corruptions)} corruptions x {len(severities)} severities; the ImageNet-C-style summary)",
                       ["method", "top-1 clean", "top-1 corrupted", "NLL clean", "NLL corrupted", "ECE clean",
                        "ECE corrupted"], _summary_table(groups, pairs)))
        figures.append(("Top-1, NLL and ECE against corruption severity; each box spans the corruptions (layout of "
                        "Ovadia et al. 2019, Fig. 2)", "shift_severity.png",
                        png(severity_figure(groups, severities, corruptions))))
        text += _findings(groups, corruptions, severities[-1])
    tables.append(("Selective prediction by maximum probability: AURC, the area under the risk-coverage curve (lower "
                   "is better; per severity: mean over corruptions)", ["method", "clean"]
                   + [f"severity {s}" for s in severities],
                   [[g["name"]] + [_cell(_mean(g, "aurc", sets), False)
                                   for sets in [[CLEAN]] + [[f"{c}-{s}" for c in corruptions] for s in severities]]
                    for g in groups]))
    figures.append(("Risk-coverage curves, accepting the most confident first (single models: mean curve over seeds)",
                    "shift_risk_coverage.png", png(risk_coverage_figure(groups))))
    if ood_names:
        tables.append(("Out-of-distribution detection against the clean subset (AUROC, AUPR: higher is better; FPR at "
                       "95% TPR: lower is better; mutual information for models with MC samples or members)",
                       ["method", "OOD set", "score", "AUROC", "AUPR-in", "AUPR-out", "FPR at 95% TPR"],
                       _ood_table(groups, ood_names)))
    out_json = {"settings": settings, "examples": spec["examples"], "eval_data": spec["eval_data"],
                "corruptions": corruptions, "severities": severities, "ood_sets": ood_names,
                "package": spec.get("key", {}).get("package"), "description": what, "not_evaluated": missing,
                "entries": [{"label": it["label"], "method": it["method"], "kind": it["kind"], "folder": it["folder"],
                             "sets": it["results"]["sets"], "mean_corrupted": it["results"]["mean_corrupted"],
                             "by_severity": {str(k): v for k, v in it["results"]["by_severity"].items()},
                             "ood": it["results"]["ood"]} for it in results],
                "figures": [f for _, f, _ in figures]}
    return {"title": "Distribution shift: corruptions, out-of-distribution detection, selective prediction",
            "text": text, "tables": tables, "figures": figures, "json": out_json}
