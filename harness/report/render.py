"""Rendering a report: its tables, sentences and Markdown (the HTML page is :mod:`harness.report.page`, the
headless-browser screenshot :mod:`harness.report.browser`, the covariance analysis's sentences
:mod:`harness.report.covariance_text`). Numbers arrive computed (:mod:`harness.report.build`)."""

from __future__ import annotations

import html
import re
from typing import Optional, Sequence

import numpy as np

from harness.provenance import markdown_header
from harness.report.covariance_text import _cov_text, _pairs_text, _tempered_text
from harness.uncertainty import metrics as M


def fmt(v, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    return f"{100 * v:.2f}%" if pct else f"{v:.4f}"


def main_columns(multilabel: bool) -> "list[tuple[str, str, bool]]":
    """(label, metric, shown in %) of the main table's columns (:data:`harness.uncertainty.metrics.METRICS`)."""
    keys = ("prec@1", "sigmoid_nll", "ece", "micro_ap") if multilabel else ("top1", "nll", "ece", "brier")
    return [(M.METRICS[k].label, k, M.METRICS[k].percent) for k in keys]


def _tables(report: dict, rows, cols) -> "list[tuple[str, list[str], list[list[str]]]]":
    """(title, header, rows) of every table, shared by the Markdown and HTML writers."""
    tables = [
        (
            "Results (layout of the paper's Table 7)"
            + (f" on the evaluation split: {report['data']}" if report.get("data") else ""),
            ["method", "kind"] + [c for c, _, _ in cols] + ["ensemble members (mean ± std)"],
            rows,
        )
    ]
    ens = [e for e in report["entries"] if "ensemble" in e]
    if ens:
        tables.append(
            (
                "Ensembles",
                [
                    "ensemble",
                    "size",
                    "Gibbs CE",
                    "ensemble NLL",
                    "gain",
                    "disagreement",
                    "disagreement / error",
                    "mean KL to ensemble",
                ],
                [
                    [
                        e["label"],
                        str(e["ensemble"]["size"]),
                        fmt(e["ensemble"]["gibbs_ce"]),
                        fmt(e["ensemble"]["ensemble_nll"]),
                        fmt(e["ensemble"]["ensemble_gain"]),
                        fmt(e["ensemble"]["disagreement"]),
                        fmt(e["ensemble"]["disagreement_over_error"]),
                        fmt(e["ensemble"]["mean_kl_to_ensemble"]),
                    ]
                    for e in ens
                ],
            )
        )
    cal = [e for e in report["entries"] if "calibration" in e]
    ts = [e for e in report["entries"] if "temperature_scaling" in e and "calibration" not in e]
    if cal:
        tables += _calibration_tables(report, cal)
    if any(e.get("per_class_top1") for e in report["entries"]):
        tables.append(_per_class_table(report))
    if ts:
        nll_key = "sigmoid_nll" if report["multilabel"] else "nll"
        tables.append(
            (
                "Post-hoc temperature scaling (fitted on the held-out split)",
                ["method", "T", "NLL before", "NLL after", "ECE before", "ECE after"],
                [
                    [
                        e["label"],
                        f"{e['temperature_scaling']['temperature']:.3f}",
                        fmt(e["metrics"][nll_key]),
                        fmt(e["temperature_scaling"]["after"][nll_key]),
                        fmt(e["metrics"]["ece"]),
                        fmt(e["temperature_scaling"]["after"]["ece"]),
                    ]
                    for e in ts
                ],
            )
        )
    tables += [tuple(t) for t in report.get("extra_tables", [])]
    cov = report["covariance"]
    if cov:
        tables.append(
            (
                f"Covariance analysis (paper Table 4): top class pairs by |Σ̄_ab|, the average covariance "
                f"Σ̄ = (1/N) Σ_x Σ(x) over N = {cov['num_examples']} examples, model {cov['het_run']}; "
                + _tempered_text(cov),
                ["class a", "class b", "covariance Σ̄_ab", "correlation Σ̄_ab / sqrt(Σ̄_aa Σ̄_bb)"],
                [
                    [p["class_a"], p["class_b"], f"{p['covariance']:.4f}", f"{p['correlation']:.3f}"]
                    for p in cov["top_pairs"]
                ],
            )
        )
    return tables


def calibration_note(entries: "list[dict]") -> "list[str]":
    """Why temperature scaling fit on noisy held-out labels and on clean ones disagree, from the
    numbers (single models; nothing when the held-out labels are clean)."""
    cal = [
        e["calibration"]
        for e in entries
        if e.get("calibration")
        and e["kind"] == "single"
        and e["calibration"]["noisy_labels_differ"]
        and e["calibration"]["fit_clean"]
    ]
    if not cal:
        return []
    t_noisy = float(np.mean([c["fit_noisy"]["temperature"] for c in cal]))
    t_clean = float(np.mean([c["fit_clean"]["temperature"] for c in cal]))
    d_noisy = float(np.mean([c["fit_noisy"]["test_clean"]["nll"] - c["test_clean"]["nll"] for c in cal]))
    d_clean = float(np.mean([c["fit_clean"]["test_clean"]["nll"] - c["test_clean"]["nll"] for c in cal]))
    share = float(np.mean([c["noisy_labels_differ"] for c in cal]))
    return [
        f"Calibration against the right labels: these models estimate p(noisy label | x). Fit on the noisy "
        f"held-out labels ({100 * share:.1f}% differ from clean), temperature scaling gives T = {t_noisy:.3f} on "
        f"average over the {len(cal)} single models, and fit on the same images' clean labels (the oracle) "
        f"T = {t_clean:.3f}: a temperature that is right for the noisy labels is "
        f"{'flatter' if t_noisy > t_clean else 'sharper'} than the one that is right for clean labels, so on "
        f"the clean evaluation labels it changes NLL by {d_noisy:+.4f} on average where the oracle changes it "
        f"by {d_clean:+.4f}."
    ]


def _heldout_labels(report: dict, cal: "list[dict]") -> str:
    differ = [e["calibration"]["noisy_labels_differ"] for e in cal]
    what = report.get("heldout_data") or "held-out split"
    if differ[0] is None:  # harness.runs.clean_heldout: a pack of noisy labels, which records no clean ones
        return (
            f"{what}, labels as trained on; their clean labels are not known (a run trained on shards whose pack "
            "holds noisy labels and does not record the clean ones), so the rows on clean held-out labels are left out"
        )
    return (
        f"{what}, noisy labels ({100 * differ[0]:.1f}% differ from clean)"
        if differ[0] > 0
        else f"{what}, clean labels (the label noise touched only the training split)"
    )


def _calibration_tables(report: dict, cal: "list[dict]") -> "list[tuple[str, list[str], list[list[str]]]]":
    """Metrics on both label sets, and temperature scaling fit on noisy vs clean held-out labels."""
    held = _heldout_labels(report, cal)
    rows = [
        [e["label"]]
        + [fmt(e["calibration"]["heldout_noisy"][k], k == "top1") for k in ("top1", "nll", "ece", "brier")]
        + [fmt(e["calibration"]["test_clean"][k], k == "top1") for k in ("top1", "nll", "ece", "brier")]
        for e in cal
    ]
    both = (
        f"Calibration against both label sets: held-out = {held}; eval = {report['data']}",
        [
            "entry",
            "held-out top-1",
            "held-out NLL",
            "held-out ECE",
            "held-out Brier",
            "eval top-1",
            "eval NLL",
            "eval ECE",
            "eval Brier",
        ],
        rows,
    )
    oracle = any(e["calibration"]["fit_clean"] for e in cal)  # the oracle's columns only where an entry has them
    ts_rows = []
    for e in cal:
        c = e["calibration"]
        fn, fc = c["fit_noisy"], c["fit_clean"]
        ts_rows.append(
            [
                e["label"],
                f"{fn['temperature']:.3f}",
                fmt(c["test_clean"]["nll"]),
                fmt(fn["test_clean"]["nll"]),
                fmt(c["test_clean"]["ece"]),
                fmt(fn["test_clean"]["ece"]),
                fmt(c["heldout_noisy"]["nll"]),
                fmt(fn["heldout_noisy"]["nll"]),
            ]
            + (
                [f"{fc['temperature']:.3f}", fmt(fc["test_clean"]["nll"]), fmt(fc["test_clean"]["ece"])]
                if fc
                else ["n/a"] * 3
            )[: 3 * oracle]
        )
    ts = (
        f"Post-hoc temperature scaling fit on the held-out labels ({held}; what a user has)"
        + (", and, as an oracle, on the same held-out images' clean labels" if oracle else "")
        + "; applied to the evaluation split and to the held-out split",
        [
            "entry",
            "T (held-out labels)",
            "eval NLL before",
            "eval NLL after",
            "eval ECE before",
            "eval ECE after",
            "held-out NLL before",
            "held-out NLL after",
        ]
        + ["T (oracle: clean held-out labels)", "eval NLL after oracle", "eval ECE after oracle"][: 3 * oracle],
        ts_rows,
    )
    return [both, ts]


def _per_class_table(report: dict) -> "tuple[str, list[str], list[list[str]]]":
    """Top-1 per class, per method (single models: mean over seeds), on both label sets."""
    by: "dict[str, list[dict]]" = {}
    for e in report["entries"]:
        if e.get("per_class_top1") and e["kind"] == "single":
            by.setdefault(e["method"], []).append(e["per_class_top1"])
    names = report.get("class_names") or [str(i) for i in range(report["num_classes"])]
    header, cols = ["class"], []
    for m, items in by.items():
        cols.append(np.nanmean([i["test"] for i in items], axis=0))
        header.append(f"{m} eval")
        if all(i["heldout"] is not None for i in items):
            cols.append(np.nanmean([i["heldout"] for i in items], axis=0))
            header.append(f"{m} held-out")
    rows = [[names[c]] + [fmt(col[c], True) for col in cols] for c in range(len(names))]
    return (
        f"Top-1 per class (single models, mean over seeds; %): eval = {report['data']}; held-out = "
        f"{report.get('heldout_data') or 'held-out split'} with its labels as trained on",
        header,
        rows,
    )


_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\|*_`[]"})


def md_cell(text: object) -> str:
    """A Markdown table cell (or one line of text) showing ``text`` literally: ``&``, ``<`` and ``>``
    as HTML entities, ``\\ | * _ ` [ ]`` backslash-escaped (GitHub-flavoured Markdown), line breaks as
    spaces."""
    return html.escape(" ".join(str(text).splitlines()), quote=False).translate(_MD_SPECIAL)


def _label_rule_text(report: dict) -> str:
    if not report.get("multilabel"):
        return ""
    return (
        " Multi-label metrics, temperature fitting and reliability diagrams drop examples without a positive "
        f"label; macro mAP leaves out {report.get('macro_map_skipped_classes')} of the {report.get('num_classes')} "
        "classes (those without a positive label in the evaluation data)."
    )


#: the longest section heading (characters); a longer title becomes a short heading and, below it, the whole title
MAX_HEADING = 72


def heading(title: str) -> "tuple[str, Optional[str]]":
    """``(short heading, caption or None)`` of a section title: a title up to :data:`MAX_HEADING` characters is its
    own heading; a longer one loses its bracketed asides (``Condition e30 (30 epochs): Paired differences, seed level
    (method − hom ...)`` becomes ``Condition e30: Paired differences, seed level``, so that the sections of one
    condition keep distinct headings), and if still too long is cut at its last ``:``, ``;``, ``,`` or dash that
    leaves 12 to :data:`MAX_HEADING` characters (else at the last word that fits, with an ellipsis); the whole title is
    the caption below the heading."""
    if len(title) <= MAX_HEADING:
        return title, None
    plain, before = title, None
    while plain != before:  # innermost brackets first, until none is left
        before, plain = plain, re.sub(r"\s*\([^()]*\)", "", plain)
    plain = " ".join(plain.split())
    if 12 <= len(plain) <= MAX_HEADING:
        return plain, title
    cuts = [m.start() for m in re.finditer(r": |; |, | − | - ", plain) if 12 <= m.start() <= MAX_HEADING]
    if cuts:
        return plain[: max(cuts)], title
    return plain[: MAX_HEADING - 1].rsplit(" ", 1)[0] + "…", title


def anchor(text: str) -> str:
    """The anchor of a heading as GitHub and this page's HTML write it: lower case, spaces to hyphens, other
    punctuation dropped."""
    keep = "".join(c for c in text.lower() if c.isalnum() or c in " -_")
    return "-".join(keep.split())


def contents(titles: "Sequence[str]") -> "list[str]":
    """A Markdown table of contents: one link per section heading (:func:`heading` of each title)."""
    return [
        "**Contents**: " + " · ".join(f"[{md_cell(h)}](#{anchor(h)})" for h in map(lambda t: heading(t)[0], titles))
    ]


def md_table(title: str, header, body, level: str = "##") -> "list[str]":
    """A titled Markdown table, as lines: a short heading (:func:`heading`), the whole title in italics below it
    when it was cut, then the table."""
    short, caption = heading(title)
    return (
        [f"{level} {md_cell(short)}", ""]
        + ([f"*{md_cell(caption)}*", ""] if caption else [])
        + ["| " + " | ".join(map(md_cell, header)) + " |", "|" + "---|" * len(header)]
        + ["| " + " | ".join(map(md_cell, r)) + " |" for r in body]
        + [""]
    )


def bottom_line(report: dict) -> Optional[str]:
    """One sentence above everything: the primary endpoint's verdicts (each method against the reference, with
    "fragile" where the verdict's df = n − 1 test or its replication disagrees); None without a primary endpoint."""
    rows = report.get("primary_endpoint", {}).get("comparisons") or []
    if not rows:
        return None
    first = rows[0]
    what = f"{first['metric']}, {first['split']}"
    said = [
        f"{r['comparison']} {r['verdict']}"
        + (" (fragile)" if r.get("fragile") or r.get("replication") == "fragile" else "")
        for r in rows
    ]
    return f"Bottom line (primary endpoint, {what}): " + "; ".join(said) + "."


def _section_titles(report: dict, rows, cols, has_ranks: bool, shift: Optional[dict]) -> "list[str]":
    titles = [t for t, _, _ in _tables(report, rows, cols)]
    titles += ["Covariance ranks (paper Figure 2)"] if has_ranks else []
    titles += [shift["title"]] if shift else []
    return titles + ["Reliability diagrams", "How each entry was made"]


def markdown(
    report: dict, rows, cols, figures, has_ranks: bool, shift: Optional[dict] = None, more: Sequence = ()
) -> str:
    lines = [markdown_header(f"Report: {report['name']}", report["provenance"])]
    line = bottom_line(report)
    if line:
        lines += [f"**{md_cell(line)}**", ""]
    summary = report.get("summary")
    if summary:  # the verdicts first: one table, then the sentences derived from its rows
        lines += md_table(summary["title"], summary["header"], summary["rows"])
        lines += [md_cell(t) + "\n" for t in summary["findings"]]
    lines += contents(_section_titles(report, rows, cols, has_ranks, shift)) + [""]
    lines += [
        f"Evaluation data: {report['data']} ({report['num_examples']} examples, {report['num_classes']} classes).",
        "ECE: 15 equal-width bins on the top-label confidence. NLL of the MC-averaged probability for het "
        "models; ensembles average member probabilities." + _label_rule_text(report),
        "",
    ]
    lines += [n + "\n" for n in report.get("notes", [])]
    for title, header, body in _tables(report, rows, cols):
        lines += md_table(title, header, body)
    lines += [f"![{md_cell(caption)}]({f})\n" for caption, f, _ in more]
    pairs = _pairs_text(report["covariance"], report.get("confusable_pairs", []), report.get("class_names"))
    if pairs:
        lines += [md_cell(pairs), ""]
    if has_ranks:
        lines += [
            "## Covariance ranks (paper Figure 2)",
            "",
            md_cell(_cov_text(report["covariance"])),
            "",
            "![ranks](covariance_ranks.png)",
            "",
        ]
    if shift:
        lines += [f"## {md_cell(heading(shift['title'])[0])}", "", f"*{md_cell(shift['title'])}*", ""] + [
            md_cell(t) + "\n" for t in shift["text"]
        ]
        for title, header, body in shift["tables"]:
            lines += md_table(title, header, body, "###")
        lines += [f"![{md_cell(caption)}]({f})\n" for caption, f, _ in shift["figures"]]
    lines += ["## Reliability diagrams", ""] + [f"![{label}]({f})" for label, f, _ in figures] + [""]
    lines += (
        ["## How each entry was made", ""]
        + [f"- {e['label']} ({e['source']}): `{e['command'] or 'unknown'}`" for e in report["entries"]]
        + [""]
    )
    return "\n".join(lines)
