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
from typing import Optional

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


def method_rows(
    study: str, runs: "dict[str, list[Path]]", keys: "tuple[str, ...]", split: str, reference: str = "hom"
) -> "list[dict]":
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
            rows.append(_row(study, f"{method} − {reference}", method, key, split, n, r))
    return rows


def _row(study: str, comparison: str, method: str, key: str, split: str, n: int, r: dict) -> dict:
    """A verdict row from :func:`harness.uncertainty.compare.method_level`'s interval ``r``: the method
    interval with its robustness (the same test at df = n − 1) and the models-fixed interval it contains."""
    f = r["models_fixed"]
    return {
        "study": study,
        "comparison": comparison,
        "method": method,
        "metric": key,
        "split": split,
        "scope": SCOPE_METHOD if n > 1 else SCOPE_MODELS,
        "n_seeds": n,
        "mean": r["mean"],
        "lo": r["lo"],
        "hi": r["hi"],
        "p": r.get("p"),
        "df": r.get("df"),
        "p_df_n1": r.get("p_df_n1"),
        "verdict_raw_df_n1": r.get("verdict_df_n1"),
        "seed_floored": r.get("seed_floored"),
        "mc_error": r.get("mc_error"),
        "n_images_boot": r.get("n_images_boot"),
        "interval": r.get("method", ""),
        "verdict_raw": r["verdict"],
        "models_fixed": {"lo": f["lo"], "hi": f["hi"], "p": f["p"]},
        "contains_models_fixed": bool(r["lo"] <= f["lo"] + 1e-12 and f["hi"] <= r["hi"] + 1e-12),
    }


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
            rows.append(
                {
                    "study": "ensembles",
                    "comparison": f"{e.name} − {ensembles[reference].name}",
                    "method": method,
                    "metric": key,
                    "split": "eval",
                    "scope": SCOPE_MODELS,
                    "n_seeds": 1,
                    "mean": x["diff"],
                    "lo": x["lo"],
                    "hi": x["hi"],
                    "p": x["p"],
                    "interval": x["interval"],
                    "verdict_raw": x["verdict"],
                }
            )
    return rows


def seed_rows(study: str, diffs: "list[dict]", reference: str = "hom") -> "list[dict]":
    """Rows from seed-level paired differences (:func:`harness.experiment.sections.paired_differences`), for
    metrics without per-image parts (the multi-label study): the test images are held fixed."""
    return [
        {
            "study": study,
            "comparison": f"{d['method']} − {reference}",
            "method": d["method"],
            "metric": d["metric"],
            "split": "eval",
            "scope": SCOPE_SEEDS,
            "n_seeds": d["n"],
            "mean": d["mean"],
            "lo": d["lo"],
            "hi": d["hi"],
            "p": d["p"],
            "interval": "paired t over seeds",
            "verdict_raw": d["verdict"],
        }
        for d in diffs
    ]


def adjust(rows: "list[dict]", family: str = "method") -> "list[dict]":
    """Holm's step-down adjustment over ``rows`` (one family named ``family``;
    :func:`harness.uncertainty.stats.holm`): each row gains ``p_holm`` and ``verdict``, better/worse only when its
    raw interval excludes 0 and ``p_holm`` < 0.05 (rows without a p-value keep "no detectable difference").
    Robustness: where rows carry ``p_df_n1`` (the same test at df = n − 1), Holm is applied to those too, and a
    row whose verdict differs between the two is ``fragile``."""
    from harness.uncertainty.stats import holm

    def holm_of(key: str) -> "dict[int, float]":
        tested = [i for i, r in enumerate(rows) if r.get(key) is not None and np.isfinite(r[key])]
        return dict(zip(tested, holm([rows[i][key] for i in tested], alpha=ALPHA)["adjusted"])) if tested else {}

    main, robust = holm_of("p"), holm_of("p_df_n1")
    for i, r in enumerate(rows):
        r["p_holm"] = main.get(i)
        r["verdict"] = _adjusted_verdict(r["verdict_raw"], r["p_holm"])
        if i in robust:
            r["p_holm_df_n1"] = robust[i]
            r["verdict_df_n1"] = _adjusted_verdict(r.get("verdict_raw_df_n1") or r["verdict_raw"], robust[i])
            r["fragile"] = _strong(r["verdict"]) != _strong(r["verdict_df_n1"])
        else:
            r.setdefault("fragile", False)
        r["family"], r["family_size"] = family, len(rows)
    return rows


def _strong(v: str) -> str:
    return v if v in ("better", "worse") else "none"


def _adjusted_verdict(raw: str, p_holm: Optional[float]) -> str:
    keeps = raw in ("better", "worse") and p_holm is not None and p_holm < ALPHA
    return raw if keeps else ("no detectable difference after Holm" if raw in ("better", "worse") else raw)


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


def oracle_methods(exp: Experiment) -> "list[str]":
    """Methods given the true noise (``train.loss=forward`` uses the known transition matrix T): controls that
    know what the others must learn, reported as oracles."""
    return [
        m
        for m, h in exp.methods.items()
        if any(str(o).replace(" ", "") == "train.loss=forward" for o in (h.get("overrides") or []))
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
                out.append(
                    f"The oracle control {o} (given the true transition matrix T, which the other methods "
                    f"must learn) is ahead of every method on {metric} ({split_name(split)}): "
                    f"{o} − hom {_num(mine['mean'], metric)} against at most "
                    f"{_num(max(r['mean'] for r in others) if hib else min(r['mean'] for r in others), metric)}"
                    " for the others."
                )
        noisy = [
            r for r in primary + secondary if r["method"] == o and r["split"] == "heldout" and r["verdict"] == "worse"
        ]
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


def validate_primary(exp: Experiment) -> None:
    """The declared primary endpoint is one the comparisons compute, checked before any work.

    Raises:
        ValueError: an unknown metric or split, naming the choices.
    """
    from harness.uncertainty.compare import IMAGE_KEYS

    if exp.primary.metric not in IMAGE_KEYS:
        raise ValueError(
            f"primary.metric={exp.primary.metric!r}: the primary endpoint is compared over seeds and "
            f"images, which needs a per-image metric: use one of {', '.join(IMAGE_KEYS)}"
        )
    if exp.primary.split not in ("heldout", "eval"):
        raise ValueError(
            f"primary.split={exp.primary.split!r}: use heldout (the held-out split, noisy labels) or "
            "eval (the evaluation split)"
        )
