"""The experiment's verdicts: its declared primary endpoint and the family of secondary comparisons with Holm's
adjustment (the summary table that opens the report, with its findings, is :mod:`harness.experiment.summary_table`).

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
    """Rows from seed-level paired differences (:func:`harness.experiment.comparison.paired_differences`), for
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


def oracle_methods(exp: Experiment) -> "list[str]":
    """Methods given the true noise (``train.loss=forward`` uses the known transition matrix T): controls that
    know what the others must learn, reported as oracles."""
    return [
        m
        for m, h in exp.methods.items()
        if any(str(o).replace(" ", "") == "train.loss=forward" for o in (h.get("overrides") or []))
    ]


def validate_primary(exp: Experiment) -> None:
    """The declared primary endpoint is one the comparisons compute, checked before any work.

    Raises:
        ValueError: an unknown metric, naming the choices (the split has its rule on the field).
    """
    from harness.uncertainty.compare import IMAGE_KEYS

    if exp.primary.metric not in IMAGE_KEYS:
        raise ValueError(
            f"primary.metric={exp.primary.metric!r}: the primary endpoint is compared over seeds and "
            f"images, which needs a per-image metric: use one of {', '.join(IMAGE_KEYS)}"
        )
