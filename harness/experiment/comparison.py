"""The comparisons of a study's methods in the report: per-method intervals over seeds (with the test-sampling
error), the paired differences against hom at the seed level (paired t over seeds, test images fixed) and at the
image level (bootstrap over images and McNemar's test, models fixed), and ensemble against ensemble; verdicts from
the 95% intervals only (:mod:`harness.uncertainty.compare`), unadjusted (the summary's Holm-adjusted verdicts are
:mod:`harness.experiment.verdicts`), sentences computed from the numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from harness.experiment.plan import _metrics
from harness.uncertainty import metrics as M


def paired_differences(runs: "dict[str, list[Path]]", keys: "tuple[str, ...]", reference: str = "hom") -> "list[dict]":
    """Seed level: per method and metric, the per-seed differences against ``reference`` (same seed
    index) with their mean, 95% t-interval, paired t-test and verdict
    (:func:`harness.uncertainty.compare.seed_level`).

    Returns:
        One dict per (method, metric): ``diffs``, ``mean``, ``std``, ``lo``, ``hi``, ``n``,
        ``p`` (paired t-test; None with < 2 seeds), ``verdict``.
    """
    from harness.uncertainty.compare import seed_level

    ref = {k: [_metrics(d)["metrics"][k] for d in runs[reference]] for k in keys}
    out = []
    for method, dirs in runs.items():
        if method == reference:
            continue
        mine = {k: [_metrics(d)["metrics"][k] for d in dirs] for k in keys}
        for k, r in seed_level(mine, ref).items():
            out.append({"method": method, "metric": k, **r})
    return out


def _num(v: float, k: str, pct: "set[str]", sign: bool = False) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    return f"{100 * v:{'+' if sign else ''}.2f}" if k in pct else f"{v:{'+' if sign else ''}.4f}"


def _ci(r: dict, k: str, pct: "set[str]", sign: bool = True) -> str:
    return (
        f"{_num(r['mean' if 'mean' in r else 'diff'], k, pct, sign)} [{_num(r['lo'], k, pct, sign)}, "
        f"{_num(r['hi'], k, pct, sign)}]"
    )


def _diff_table(rows: "list[dict]", pct: "set[str]") -> "list[list[str]]":
    return [
        [
            r["method"],
            r["metric"],
            ", ".join(_num(v, r["metric"], pct, True) for v in r["diffs"]),
            _ci(r, r["metric"], pct),
            "n/a" if r["p"] is None else f"{r['p']:.3f}",
            r["verdict"],
        ]
        for r in rows
    ]


_DIFF_HEADER = ["method", "metric", "per seed", "mean [95% t-interval]", "paired t-test p", "verdict"]


def comparison_section(runs: "dict[str, list[Path]]", ensembles: "list[Path]", label: str = "") -> dict:
    """Every method against hom, seed level and image level, the per-method intervals that separate
    seed variance from test-sampling variance, and ensemble against ensemble; verdicts from the 95%
    intervals only (:mod:`harness.uncertainty.compare`), sentences computed from the numbers.
    ``label`` prefixes every title and sentence (a condition other than the main study's)."""
    out = _comparison(runs, ensembles)
    if label:
        out["tables"] = [(f"{label}: {t}", h, r) for t, h, r in out["tables"]]
        out["text"] = [f"{label}: {t}" for t in out["text"] if not t.startswith(_GENERIC)]
    return out


_HOW_TO_READ = (
    "How to read the comparisons: the summary's verdicts come from one interval over seeds and images "
    "together (training randomness and the test sample), Holm-adjusted within their family. Below, the "
    "seed-level intervals (seed i of a method against seed i of hom, test images fixed; with n seeds the "
    "t-interval has n − 1 degrees of freedom) and the image-level intervals (images resampled, models "
    "fixed: they describe these trained models, not the method) show the two parts separately; their "
    "better/worse words are unadjusted."
)


_PAPER = "The paper (ImageNet, Table 1) finds het and diag better than hom on top-1 and NLL."


_GENERIC = (_HOW_TO_READ[:20], _PAPER[:20])


def _comparison(runs: "dict[str, list[Path]]", ensembles: "list[Path]") -> dict:
    """The comparisons of one study (:func:`comparison_section` without its label): the per-method intervals;
    with hom and another method, the paired differences against hom at the seed and the image level with their
    sentences, ensemble against ensemble, and each ensemble against its members."""
    from harness.uncertainty.predictions import Predictions

    out: dict = {"tables": [], "text": [], "json": {}}
    acc_key = "top1" if "top1" in _metrics(next(iter(runs.values()))[0])["metrics"] else "prec@1"
    nll_key = "nll" if acc_key == "top1" else "sigmoid_nll"
    keys = (acc_key, nll_key, "ece")
    pct = {k for k in keys if M.METRICS[k].percent}
    single = acc_key == "top1"
    preds = {m: [Predictions.load(d) for d in dirs] for m, dirs in runs.items()} if single else {}
    table, summary = _method_intervals(runs, preds, keys, pct, single)
    out["tables"].append(table)
    out["json"]["method_intervals"] = summary
    if "hom" not in runs or len(runs) < 2:
        return out
    out["text"].append(_HOW_TO_READ)
    seed_rows = paired_differences(runs, keys)
    out["tables"].append(
        (
            "Paired differences against hom, seed level (method − hom, seed i against seed i; 95% "
            f"t-interval over seeds; {acc_key} in points)",
            _DIFF_HEADER,
            _diff_table(seed_rows, pct),
        )
    )
    out["json"]["paired_differences"] = seed_rows
    image: "dict[str, dict]" = {}
    if single:
        table, image = _image_level(runs, preds, pct, acc_key)
        out["tables"].append(table)
        out["json"]["image_level_differences"] = image
    out["text"] += _method_sentences(runs, seed_rows, image, keys, pct)
    out["text"].append(_PAPER)
    ens = {json.loads((e / "ensemble.json").read_text())["method"]: e for e in ensembles}
    if single and "hom" in ens and len(ens) > 1:
        table, ens_json, text = _ensemble_differences(ens, keys, pct, acc_key)
        out["text"] += text
        out["tables"].append(table)
        out["json"]["ensemble_differences"] = ens_json
    out["text"] += _ensemble_sentences(ensembles, acc_key)
    return out


def _method_intervals(
    runs: "dict[str, list[Path]]", preds: "dict[str, list]", keys: "tuple[str, ...]", pct: "set[str]", single: bool
) -> "tuple[tuple, dict]":
    """Per method (single models): the mean over seeds of each metric with its 95% t-interval, the seed std and,
    for single-label runs, the test-sampling standard error (bootstrap over images, models fixed); returns the
    table and its JSON (``method_intervals``)."""
    from harness.uncertainty.compare import seed_summary, test_sampling_se

    acc_key = keys[0]
    rows, summary = [], {}
    for m, dirs in runs.items():
        s = seed_summary({k: [_metrics(d)["metrics"][k] for d in dirs] for k in keys})
        se = test_sampling_se(preds[m]) if single else {}
        summary[m] = {"seeds": s, "test_sampling_se": se}
        rows.append(
            [m, str(len(dirs))]
            + [_ci(s[k], k, pct, False) for k in keys]
            + [" / ".join(_num(s[k]["std"], k, pct) for k in keys)]
            + ([" / ".join(_num(se[k], k, pct) for k in keys)] if single else [])
        )
    table = (
        f"Per method (single models): mean over seeds with its 95% t-interval; seed std (training "
        "randomness) and test-sampling standard error (bootstrap over evaluation images, models "
        f"fixed); {acc_key} in points",
        ["method", "seeds", *(f"{k} mean [95% CI]" for k in keys), "seed std (" + " / ".join(keys) + ")"]
        + (["test-sampling SE (" + " / ".join(keys) + ")"] if single else []),
        rows,
    )
    return table, summary


def _image_level(
    runs: "dict[str, list[Path]]", preds: "dict[str, list]", pct: "set[str]", acc_key: str
) -> "tuple[tuple, dict[str, dict]]":
    """Each method against hom with the trained models fixed: the difference of the seed-averaged metrics with its
    95% paired bootstrap interval over the evaluation images, and McNemar's exact test per seed pair; returns the
    table and its JSON (``image_level_differences``)."""
    from harness.uncertainty.compare import image_level

    image: "dict[str, dict]" = {}
    img_rows = []
    for m in [m for m in runs if m != "hom"]:
        image[m] = image_level(preds[m], preds["hom"])
        for k, r in image[m].items():
            mc = "; ".join(f"{x['n10']}/{x['n01']} p={x['p']:.3g}" for x in r.get("mcnemar", []))
            img_rows.append([m, k, _ci(r, k, pct), mc, r["verdict"]])
    table = (
        "Paired differences against hom, image level (difference of the seed-averaged metric, "
        "models fixed; 95% paired bootstrap interval over evaluation images, 1,000 resamples; "
        "McNemar's exact test per seed pair: images only the method gets right / only hom "
        f"gets right; {acc_key} in points)",
        ["method", "metric", "difference [95% CI]", "McNemar per seed", "verdict"],
        img_rows,
    )
    return table, image


def _method_sentences(
    runs: "dict[str, list[Path]]",
    seed_rows: "list[dict]",
    image: "dict[str, dict]",
    keys: "tuple[str, ...]",
    pct: "set[str]",
) -> "list[str]":
    """One sentence per method against hom: its seed-level intervals and verdicts, and the image-level ones (for
    these trained models) where ``image`` has them."""
    acc_key = keys[0]
    out = []
    for method in [m for m in runs if m != "hom"]:
        r = {x["metric"]: x for x in seed_rows if x["method"] == method}
        parts = [f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}" for k in keys]
        text = (
            f"{method} vs hom over {r[acc_key]['n']} paired seeds, test images fixed (95% t-intervals, "
            "unadjusted): " + "; ".join(parts) + "."
        )
        if method in image:
            text += (
                " For these trained models (images resampled, 95% bootstrap, unadjusted): "
                + "; ".join(f"{k} {_ci(image[method][k], k, pct)} → {image[method][k]['verdict']}" for k in keys)
                + "."
            )
        out.append(text)
    return out


def _ensemble_differences(
    ens: "dict[str, Path]", keys: "tuple[str, ...]", pct: "set[str]", acc_key: str
) -> "tuple[tuple, dict, list[str]]":
    """Each method's ensemble against hom's (``ens``: method -> ensemble folder), images resampled with the members
    fixed, with McNemar's exact test; returns the table, its JSON (``ensemble_differences``) and one sentence per
    ensemble."""
    from harness.uncertainty.compare import image_level
    from harness.uncertainty.predictions import Predictions

    ens_rows, ens_json, text = [], {}, []
    for m, e in ens.items():
        if m == "hom":
            continue
        r = image_level([Predictions.load(e)], [Predictions.load(ens["hom"])])
        ens_json[m] = r
        for k, x in r.items():
            mc = "; ".join(f"{y['n10']}/{y['n01']} p={y['p']:.3g}" for y in x.get("mcnemar", []))
            ens_rows.append([f"{e.name} − {ens['hom'].name}", k, _ci(x, k, pct), mc, x["verdict"]])
        text.append(
            f"Ensemble {e.name} vs {ens['hom'].name}, for these trained models (images resampled, "
            "95% bootstrap, unadjusted): "
            + "; ".join(f"{k} {_ci(r[k], k, pct)} → {r[k]['verdict']}" for k in keys)
            + "."
        )
    table = (
        "Ensemble against ensemble, image level (95% paired bootstrap over evaluation images; "
        f"McNemar's exact test; {acc_key} in points)",
        ["ensembles", "metric", "difference [95% CI]", "McNemar", "verdict"],
        ens_rows,
    )
    return table, ens_json, text


def _ensemble_sentences(ensembles: "list[Path]", acc_key: str) -> "list[str]":
    """Each ensemble against its members: its accuracy against their mean and its NLL against the Gibbs
    cross-entropy (one ensemble, so no interval)."""
    out = []
    for e in ensembles:
        spec = json.loads((e / "ensemble.json").read_text())["summary"]
        en, mean = spec["ensemble"], spec["member_mean"]
        out.append(
            f"{e.name}: ensemble {acc_key} {100 * en[acc_key]:.2f}% vs members' mean "
            f"{100 * mean[acc_key]:.2f}%, NLL {spec['ensemble_nll']:.4f} vs Gibbs cross-entropy "
            f"{spec['gibbs_ce']:.4f} (the ensemble NLL can never exceed it; one ensemble, so no interval)."
        )
    return out
