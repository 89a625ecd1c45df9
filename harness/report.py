"""``harness report``: Markdown, self-contained HTML and JSON reports of runs and ensembles.

A report covers any mix of run folders (``harness upstream``) and ensemble folders
(``harness ensemble``): a table in the layout of the paper's Table 7 (method, top-1, NLL, ECE; single
models and ensembles), ensemble diagnostics, temperature scaling before/after where held-out
predictions exist, reliability diagrams with confidence histograms, and, when a het model is
present, the covariance analysis (paper Table 4 and Figure 2). Everything is written to
``<out_root>/<name>/report.{md,html,json}`` plus the PNG figures.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from harness import metrics as M
from harness.ensembles import fit_temperature, scale
from harness.figures import png
from harness.io import atomic_write_bytes, atomic_write_text, json_dumps
from harness.provenance import markdown_header, provenance
from harness.runs import Predictions, load_heldout, run_config, run_head, run_method, run_summary
from harness.uncertainty.labels import clean_heldout, heldout_description, label_calibration, per_class_accuracy

SCHEMA = "harness.report/1"
ACCURACY_LABEL = "accuracy"
OVER_LABEL = "gap: over-confident (confidence above accuracy)"
UNDER_LABEL = "gap: under-confident (accuracy above confidence)"


@dataclass
class Entry:
    """One row of the report: a single run or an ensemble."""

    label: str
    method: str
    kind: str  # "single" | "ensemble"
    preds: Predictions
    command: str = ""
    heldout: Optional[Predictions] = None
    members: "list[str]" = field(default_factory=list)
    summary: Optional[dict] = None
    data: str = ""
    head: dict = field(default_factory=dict)
    run_dir: Optional[Path] = None


def _run_entry(run_dir: Path) -> Entry:
    cfg = run_config(run_dir)
    head = run_head(run_dir)
    meta = run_summary(run_dir)
    method = run_method(run_dir)
    return Entry(f"{method} seed {cfg.get('seed', '?')}", method, "single",
                 command=meta.get("command", ""), preds=Predictions.load(run_dir), heldout=load_heldout(run_dir),
                 data=meta.get("eval_data", ""), head=head, run_dir=run_dir)


def load_entry(path: "str | Path") -> Entry:
    """A run folder or an ensemble folder (``ensemble.json`` listing its members).

    Raises:
        FileNotFoundError: neither kind of folder.
    """
    path = Path(path)
    if (path / "ensemble.json").is_file():
        spec = json.loads((path / "ensemble.json").read_text())
        first = Path(spec["members"][0])
        head = run_head(first)
        return Entry(f"{spec['method']} ensemble of {len(spec['members'])}", spec["method"], "ensemble",
                     command=spec.get("command", ""), preds=Predictions.load(path), heldout=load_heldout(path),
                     members=spec["members"], summary=spec["summary"], data=spec["data"], head=head, run_dir=first)
    if (path / "config.yaml").is_file() and (path / "predictions.npz").is_file():
        return _run_entry(path)
    raise FileNotFoundError(f"{str(path)!r} is neither a finished run folder (config.yaml + predictions.npz) nor an "
                            "ensemble folder (ensemble.json); run harness upstream / harness ensemble first")


# ------------------------------------------------------------------------------------------ figures
def reliability_figure(preds: Predictions, title: str):
    """Reliability diagram over a confidence histogram, as a matplotlib ``Figure``.

    Top panel, per non-empty equal-width bin (15, :func:`harness.metrics.reliability_bins`): a
    filled bar up to the bin's accuracy, and an unfilled hatched bar from the accuracy to the bin's
    mean confidence (its signed gap, height confidence - accuracy): above the accuracy bar when the
    bin is over-confident, inside it when under-confident, so either direction reads correctly and
    the accuracy bar is never covered. The dashed diagonal is perfect calibration. Bottom panel:
    share of examples per bin. The legend sits below both panels, outside the axes. Multi-label
    predictions use top-label forecasts under the multi-label row rule of :mod:`harness.metrics`.
    """
    from harness.figures import pyplot

    plt = pyplot()

    if preds.multilabel:
        conf, correct = M.multilabel_top_label(preds.logits, preds.targets)
    else:
        conf, correct = M.top_label(preds.log_probs(), preds.targets)
    bins = M.reliability_bins(conf, correct)
    centers = (bins["edges"][:-1] + bins["edges"][1:]) / 2
    width = (bins["edges"][1] - bins["edges"][0]) * 0.9
    filled = bins["count"] > 0
    x, acc, cf = centers[filled], bins["accuracy"][filled], bins["confidence"][filled]
    fig, (ax, hx) = plt.subplots(2, 1, figsize=(4.2, 6.0), gridspec_kw={"height_ratios": [3, 1.2]}, sharex=True)
    ax.bar(x, acc, width=width, color="#4c72b0", label=ACCURACY_LABEL)
    for sel, color, hatch, label in ((cf > acc, "#c44e52", "///", OVER_LABEL),
                                     (cf < acc, "#2ca02c", "\\\\\\", UNDER_LABEL)):
        if sel.any():
            ax.bar(x[sel], (cf - acc)[sel], bottom=acc[sel], width=width, fill=False, edgecolor=color, hatch=hatch,
                   linewidth=1.2, label=label)
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration (confidence = accuracy)")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_title(f"{title}\nECE {M.calibration_error(conf, correct):.4f}", fontsize=9)
    hx.bar(centers, bins["count"] / bins["count"].sum(), width=width, color="#8c8c8c")
    hx.set_xlabel("confidence (top label)")
    hx.set_ylabel("share")
    hx.set_xlim(0, 1)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.01 + 0.03 * len(labels), 1, 1))
    return fig


def reliability_png(preds: Predictions, title: str) -> bytes:
    """:func:`reliability_figure` as PNG bytes."""
    return png(reliability_figure(preds, title))


def ranks_png(ranks: Sequence[int], num_classes: int, title: str) -> bytes:
    """Histogram of the Figure 2 ranks, with the uniform expectation."""
    from harness.figures import pyplot

    plt = pyplot()

    others = num_classes - 1
    fig, ax = plt.subplots(figsize=(5, 3.2))
    edges = np.arange(1, min(others, 50) + 2) - 0.5
    ax.hist(np.minimum(ranks, edges[-1] - 0.5), bins=edges, color="#4c72b0")
    ax.axhline(len(ranks) / others, color="k", ls="--", lw=1, label="uniform")
    ax.set_xlabel("rank of the hom prediction by |covariance| with the true class")
    ax.set_ylabel("examples")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png(fig)


# ------------------------------------------------------------------------------------------ content
def _fmt(v, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "-"
    return f"{100 * v:.2f}%" if pct else f"{v:.4f}"


def _main_columns(multilabel: bool) -> "list[tuple[str, str, bool]]":
    """(label, metric, shown in %) of the main table's columns (:data:`harness.metrics.METRICS`)."""
    keys = ("prec@1", "sigmoid_nll", "ece", "micro_ap") if multilabel else ("top1", "nll", "ece", "brier")
    return [(M.METRICS[k].label, k, M.METRICS[k].percent) for k in keys]


def _covariance_section(entries: "list[Entry]", top: int) -> Optional[dict]:
    """Table 4 / Figure 2 for the first entry with a low-rank or PE covariance (first member of such an
    ensemble), against the first hom entry evaluated on the same data."""
    from harness.covariance import analyse, transition_test
    from harness.models import load_model
    from harness.runs import data_config, eval_batches, noise_transition

    # a model with off-diagonal covariance (a diagonal one has nothing to rank classes by)
    het = next((e for e in entries if e.head.get("covariance", "low_rank") in ("low_rank", "parameter_efficient")
                and e.run_dir), None)
    if het is None or not (het.run_dir / "model.pt").is_file():
        return None
    hom = next((e for e in entries if e.head.get("covariance") == "none" and e.kind == "single"
                and np.array_equal(e.preds.index, het.preds.index)), None)
    model = load_model(het.run_dir / "model.pt")
    het_preds = Predictions.load(het.run_dir)
    data = data_config(het.run_dir)
    result = analyse(model.head, eval_batches(model, data), het_preds.class_names, top,
                     het_preds.logits if hom else None, hom.preds.logits if hom else None,
                     het_preds.index if hom else None)
    result.update(het_run=str(het.run_dir), hom_run=str(hom.run_dir) if hom else None)
    if result["ranks"]:
        r, mu = np.asarray(result["ranks"]), np.asarray(result["mean_logit_ranks"])
        others = result["num_classes"] - 1
        result["share_rank_1"] = float((r == 1).mean())
        result["uniform_share_rank_1"] = 1.0 / others
        result["mean_rank"] = float(r.mean())
        result["uniform_mean_rank"] = (others + 1) / 2
        result["mean_logit_share_rank_1"] = float((mu == 1).mean())
        result["mean_logit_mean_rank"] = float(mu.mean())
    transition = noise_transition(het.run_dir)
    result["transition_test"] = None
    if transition is not None and result.get("pair_noise"):
        result["transition_test"] = transition_test(transition, result["pair_noise"])
    return result


def check_name(name: str) -> str:
    """A report name is one plain folder name under ``out_root``.

    Raises:
        ValueError: empty, ``.``/``..``, or holding ``/`` or ``\\``.
    """
    if not name or name in (".", "..") or "/" in name or "\\" in name:
        raise ValueError(f"report name {name!r} must be a plain folder name (no '/' or backslash, not '.' or "
                         "'..'): the report goes to <out-root>/<name>/; choose the parent folder with --out-root "
                         "(out_root)")
    return name


def build(paths: Sequence["str | Path"], name: str, out_root: "str | Path" = "results", covariance: bool = True,
          top_pairs: int = 10, extra: Optional[dict] = None, shift: bool = True) -> Path:
    """Write ``<out_root>/<name>/report.{md,html,json}`` and figures for the given run/ensemble folders.

    ``extra`` adds sections: ``{"tables": [(title, header, rows)], "text": [str], "json": {...}}``
    (the experiment runner puts the downstream table there). With ``shift``, entries that hold shift
    predictions (``harness shift``) get the distribution-shift section of :mod:`harness.shift_report`
    (its figures, tables and text; ``report.json`` key ``shift``).

    Raises:
        FileNotFoundError: a path is neither a run nor an ensemble folder.
        ValueError: a report name that is not a plain folder name (:func:`check_name`); entries
            with different label spaces or evaluation data.
    """
    check_name(name)
    entries = [load_entry(p) for p in paths]
    ref = entries[0].preds
    for e in entries[1:]:
        if e.preds.class_names != ref.class_names or not np.array_equal(e.preds.index, ref.index):
            raise ValueError(f"{e.label} ({e.preds.source}) was evaluated on other data or classes than "
                             f"{entries[0].label}; report runs of one experiment together")
    out = Path(out_root) / name
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance()
    multilabel = ref.multilabel
    skipped = M.macro_map(ref.logits, ref.targets, return_skipped=True)[1] if multilabel else None
    cols = _main_columns(multilabel)
    rows, json_entries, figures = [], [], []
    for e in entries:
        m = e.preds.metrics()
        item = {"label": e.label, "method": e.method, "kind": e.kind, "source": e.preds.source, "metrics": m,
                "members": e.members, "command": e.command}
        if e.heldout is not None:
            cal = (label_calibration(e.preds, e.heldout, clean_heldout(e.heldout, e.run_dir))
                   if not multilabel and e.run_dir is not None else None)
            t = cal["fit_noisy"]["temperature"] if cal else fit_temperature(e.heldout)  # the same fit, done once
            item["temperature_scaling"] = {"temperature": t, "after": scale(e.preds, t).metrics(),
                                           "fitted_on": "held-out split"}
            if cal:
                item["calibration"] = cal
                item["temperature_scaling"]["fitted_on"] = (
                    "held-out split, noisy labels" if cal["noisy_labels_differ"] else "held-out split")
        if not multilabel:
            item["per_class_top1"] = {"test": per_class_accuracy(e.preds).tolist(),
                                      "heldout": per_class_accuracy(e.heldout).tolist() if e.heldout is not None
                                      else None}
        if e.summary is not None:
            item["ensemble"] = {k: v for k, v in e.summary.items() if k not in ("members",)}
            item["ensemble"]["member_metrics"] = e.summary["members"]
        json_entries.append(item)
        cells = [e.label, e.kind] + [_fmt(m.get(k), pct) for _, k, pct in cols]
        if e.summary is not None:
            std = e.summary["member_std"]
            mean = e.summary["member_mean"]
            cells.append("members: " + ", ".join(f"{lbl} {_fmt(mean[k], pct)} ± {_fmt(std[k], pct)}"
                                                 for lbl, k, pct in cols[:3]))
        else:
            cells.append("")
        rows.append(cells)
        fname = f"reliability_{len(figures)}.png"
        image = reliability_png(e.preds, e.label)
        atomic_write_bytes(out / fname, image)
        figures.append((e.label, fname, image))

    cov = _covariance_section(entries, top_pairs) if covariance else None
    cov_png = None
    if cov and cov.get("ranks"):
        cov_png = ranks_png(cov["ranks"], cov["num_classes"], "Figure 2: het right, hom wrong")
        atomic_write_bytes(out / "covariance_ranks.png", cov_png)

    shift_part = None
    if shift:
        from harness.shift_report import section

        shift_part = section([(e.label, e.method, e.kind, e.preds.source) for e in entries])
        for _, fname, image in (shift_part or {}).get("figures", []):
            atomic_write_bytes(out / fname, image)

    extra = extra or {}
    for _, fname, image in extra.get("figures", []):
        atomic_write_bytes(out / fname, image)
    heldout_data = heldout_description(entries[0].run_dir) if entries[0].run_dir and entries[0].heldout else None
    notes = list(extra.get("text", [])) + _calibration_note(json_entries)
    report = {"schema": SCHEMA, "name": name, "provenance": prov, "data": entries[0].data,
              "heldout_data": heldout_data, **extra.get("json", {}),
              "extra_tables": [list(t) for t in extra.get("tables", [])], "notes": notes,
              "num_examples": int(len(ref.index)), "num_classes": len(ref.class_names), "multilabel": multilabel,
              "class_names": list(ref.class_names),
              "macro_map_skipped_classes": skipped,
              "entries": json_entries, "covariance": cov, "shift": shift_part["json"] if shift_part else None,
              "figures": {"reliability": [f for _, f, _ in figures],
                          "covariance_ranks": "covariance_ranks.png" if cov_png else None,
                          "shift": [f for _, f, _ in shift_part["figures"]] if shift_part else [],
                          **({"extra": [f for _, f, _ in extra["figures"]]} if extra.get("figures") else {})}}
    atomic_write_text(out / "report.json", json_dumps(report, indent=1))
    more = list(extra.get("figures", []))
    atomic_write_text(out / "report.md", _markdown(report, rows, cols, figures, cov_png is not None, shift_part, more))
    atomic_write_text(out / "report.html", _html(report, rows, cols, figures, cov_png, shift_part, more))
    return out


def _tables(report: dict, rows, cols) -> "list[tuple[str, list[str], list[list[str]]]]":
    """(title, header, rows) of every table, shared by the Markdown and HTML writers."""
    tables = [("Results (layout of the paper's Table 7)" + (f" on the evaluation split: {report['data']}" if report.get("data") else ""),
               ["method", "kind"] + [c for c, _, _ in cols] + ["ensemble members (mean ± std)"], rows)]
    ens = [e for e in report["entries"] if "ensemble" in e]
    if ens:
        tables.append(("Ensembles", ["ensemble", "size", "Gibbs CE", "ensemble NLL", "gain", "disagreement",
                                     "disagreement / error", "mean KL to ensemble"],
                       [[e["label"], str(e["ensemble"]["size"]), _fmt(e["ensemble"]["gibbs_ce"]),
                         _fmt(e["ensemble"]["ensemble_nll"]), _fmt(e["ensemble"]["ensemble_gain"]),
                         _fmt(e["ensemble"]["disagreement"]), _fmt(e["ensemble"]["disagreement_over_error"]),
                         _fmt(e["ensemble"]["mean_kl_to_ensemble"])] for e in ens]))
    cal = [e for e in report["entries"] if "calibration" in e]
    ts = [e for e in report["entries"] if "temperature_scaling" in e and "calibration" not in e]
    if cal:
        tables += _calibration_tables(report, cal)
    if any(e.get("per_class_top1") for e in report["entries"]):
        tables.append(_per_class_table(report))
    if ts:
        nll_key = "sigmoid_nll" if report["multilabel"] else "nll"
        tables.append(("Post-hoc temperature scaling (fitted on the held-out split)",
                       ["method", "T", "NLL before", "NLL after", "ECE before", "ECE after"],
                       [[e["label"], f"{e['temperature_scaling']['temperature']:.3f}", _fmt(e["metrics"][nll_key]),
                         _fmt(e["temperature_scaling"]["after"][nll_key]), _fmt(e["metrics"]["ece"]),
                         _fmt(e["temperature_scaling"]["after"]["ece"])] for e in ts]))
    tables += [tuple(t) for t in report.get("extra_tables", [])]
    cov = report["covariance"]
    if cov:
        tables.append((f"Covariance analysis (paper Table 4): top class pairs by |Σ̄_ab|, the average covariance "
                       f"Σ̄ = (1/N) Σ_x Σ(x) over N = {cov['num_examples']} examples, model {cov['het_run']}; "
                       + _tempered_text(cov),
                       ["class a", "class b", "covariance Σ̄_ab", "correlation Σ̄_ab / sqrt(Σ̄_aa Σ̄_bb)"],
                       [[p["class_a"], p["class_b"], f"{p['covariance']:.4f}", f"{p['correlation']:.3f}"]
                        for p in cov["top_pairs"]]))
    return tables


def _calibration_note(entries: "list[dict]") -> "list[str]":
    """Why temperature scaling fit on noisy held-out labels and on clean ones disagree, from the
    numbers (single models; nothing when the held-out labels are clean)."""
    cal = [e["calibration"] for e in entries if e.get("calibration") and e["kind"] == "single"
           and e["calibration"]["noisy_labels_differ"] and e["calibration"]["fit_clean"]]
    if not cal:
        return []
    t_noisy = float(np.mean([c["fit_noisy"]["temperature"] for c in cal]))
    t_clean = float(np.mean([c["fit_clean"]["temperature"] for c in cal]))
    d_noisy = float(np.mean([c["fit_noisy"]["test_clean"]["nll"] - c["test_clean"]["nll"] for c in cal]))
    d_clean = float(np.mean([c["fit_clean"]["test_clean"]["nll"] - c["test_clean"]["nll"] for c in cal]))
    share = float(np.mean([c["noisy_labels_differ"] for c in cal]))
    return [f"Calibration against the right labels: these models estimate p(noisy label | x). Fit on the noisy "
            f"held-out labels ({100 * share:.1f}% differ from clean), temperature scaling gives T = {t_noisy:.3f} on "
            f"average over the {len(cal)} single models, and fit on the same images' clean labels (the oracle) "
            f"T = {t_clean:.3f}: a temperature that is right for the noisy labels is "
            f"{'flatter' if t_noisy > t_clean else 'sharper'} than the one that is right for clean labels, so on "
            f"the clean evaluation labels it changes NLL by {d_noisy:+.4f} on average where the oracle changes it "
            f"by {d_clean:+.4f}."]


def _heldout_labels(report: dict, cal: "list[dict]") -> str:
    differ = [e["calibration"]["noisy_labels_differ"] for e in cal]
    what = report.get("heldout_data") or "held-out split"
    if differ[0] is None:
        return f"{what}, labels as trained on"
    return (f"{what}, noisy labels ({100 * differ[0]:.1f}% differ from clean)" if differ[0] > 0
            else f"{what}, clean labels (the label noise touched only the training split)")


def _calibration_tables(report: dict, cal: "list[dict]") -> "list[tuple[str, list[str], list[list[str]]]]":
    """Metrics on both label sets, and temperature scaling fit on noisy vs clean held-out labels."""
    held = _heldout_labels(report, cal)
    rows = [[e["label"]] + [_fmt(e["calibration"]["heldout_noisy"][k], k == "top1") for k in ("top1", "nll", "ece", "brier")]
            + [_fmt(e["calibration"]["test_clean"][k], k == "top1") for k in ("top1", "nll", "ece", "brier")]
            for e in cal]
    both = (f"Calibration against both label sets: held-out = {held}; eval = {report['data']}",
            ["entry", "held-out top-1", "held-out NLL", "held-out ECE", "held-out Brier", "eval top-1", "eval NLL",
             "eval ECE", "eval Brier"], rows)
    ts_rows = []
    for e in cal:
        c = e["calibration"]
        fn, fc = c["fit_noisy"], c["fit_clean"]
        ts_rows.append([e["label"], f"{fn['temperature']:.3f}", _fmt(c["test_clean"]["nll"]),
                        _fmt(fn["test_clean"]["nll"]), _fmt(c["test_clean"]["ece"]),
                        _fmt(fn["test_clean"]["ece"]), _fmt(c["heldout_noisy"]["nll"]),
                        _fmt(fn["heldout_noisy"]["nll"]),
                        f"{fc['temperature']:.3f}" if fc else "n/a", _fmt(fc["test_clean"]["nll"]) if fc else "n/a",
                        _fmt(fc["test_clean"]["ece"]) if fc else "n/a"])
    ts = (f"Post-hoc temperature scaling fit on the held-out labels ({held}; what a user has) and, as an oracle, on "
          "the same held-out images' clean labels; applied to the evaluation split and to the held-out split",
          ["entry", "T (held-out labels)", "eval NLL before", "eval NLL after", "eval ECE before", "eval ECE after",
           "held-out NLL before", "held-out NLL after", "T (oracle: clean held-out labels)", "eval NLL after oracle",
           "eval ECE after oracle"], ts_rows)
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
    rows = [[names[c]] + [_fmt(col[c], True) for col in cols] for c in range(len(names))]
    return (f"Top-1 per class (single models, mean over seeds; %): eval = {report['data']}; held-out = "
            f"{report.get('heldout_data') or 'held-out split'} with its labels as trained on", header, rows)


def _tempered_text(cov: dict) -> str:
    """Whether Σ̄ is divided by τ² (tempered) or is the latent noise covariance of the logits."""
    tau = cov.get("temperature")
    tau_text = f"τ = {tau:.3g}" if tau is not None else "τ"
    if cov.get("tempered"):
        return f"Σ is tempered: divided by τ² ({tau_text}), the covariance of the logits the softmax sees."
    return (f"Σ is not tempered: the latent noise covariance of the logits before the division by the temperature "
            f"({tau_text}; the softmax sees Σ/τ²). Correlations do not depend on τ.")


def _transition_text(cov: Optional[dict], names: "list[str]") -> str:
    """Whether the model's pairwise noise follows the label-noise transition (Spearman ρ, permutation p)."""
    test = (cov or {}).get("transition_test")
    if not test or "abs_correlation" not in test:
        return ""
    claim, var, corr = test["abs_correlation"], test["var_diff"], test["correlation"]
    top = sorted(test["pairs"], key=lambda p: -p["transition"])[:4]
    by_abs = sorted(test["pairs"], key=lambda p: -p["abs_correlation"])
    rank = {(p["a"], p["b"]): i + 1 for i, p in enumerate(by_abs)}
    holds = claim["p_value"] < 0.05 and claim["rho"] > 0
    return (f"Does Σ capture the label noise? Over the {test['n_pairs']} class pairs, Spearman ρ between the transition "
            "mass T_ab + T_ba (T[c, j] = P(noisy label j | clean class c), measured on the training images) and the "
            "het model's mean |correlation| of u_a and u_b over evaluation images of classes a and b (the paper's "
            f"Table 4 ranks pairs by |covariance|) is ρ = {claim['rho']:.3f} (one-sided permutation p = "
            f"{claim['p_value']:.4f}, {test['n_resamples']} resamples). How the ties are made: signed correlation ρ = "
            f"{corr['rho']:.3f} (p = {corr['p_value']:.4f}); Var(u_a − u_b), how easily noise swaps the two classes' "
            f"order, ρ = {var['rho']:.3f} (p = {var['p_value']:.4f}). The pairs with the most transition mass: "
            + ", ".join(f"{names[p['a']]}/{names[p['b']]} ({100 * p['transition']:.1f}%, |correlation| rank "
                        f"{rank[(p['a'], p['b'])]} of {test['n_pairs']})" for p in top)
            + (". On these numbers the claim holds: class pairs whose labels are swapped more often get stronger noise "
               "ties." if holds else ". On these numbers the claim is not supported at the 5% level."))


def _pairs_text(cov: Optional[dict], confusable: "list[list[str]]", names: "Optional[list[str]]" = None) -> str:
    """Which of the top covariance pairs are pairs people are known to confuse, and the transition test."""
    trans = _transition_text(cov, names or [])
    if not cov or not confusable:
        return trans
    known = {frozenset(p) for p in confusable}
    top = [(p["class_a"], p["class_b"]) for p in cov["top_pairs"][:5]]
    hits = [f"{a}/{b}" for a, b in top if frozenset((a, b)) in known]
    return (f"Of the top 5 covariance pairs ({', '.join(f'{a}/{b}' for a, b in top)}), {len(hits)} "
            f"{'is' if len(hits) == 1 else 'are'} among the pairs people are known to confuse "
            f"({', '.join('/'.join(p) for p in confusable)})" + (f": {', '.join(hits)}." if hits else ".")
            + (" " + trans if trans else ""))


def _cov_text(cov: Optional[dict]) -> str:
    if not cov or not cov.get("ranks"):
        return ""
    return (f"Figure 2: over the {cov['num_het_right_hom_wrong']} examples the het model ({cov['het_run']}) gets "
            f"right and the hom model ({cov['hom_run']}) wrong, the classes j other than the true class c are ranked "
            "by |Σ_cj(x)| of that example's own covariance Σ(x) (per example, not the average Σ̄ of the table; "
            "ranks do not depend on τ). The hom prediction is the class with the largest "
            f"|covariance| with the true class in {100 * cov['share_rank_1']:.1f}% of cases (uniform: "
            f"{100 * cov['uniform_share_rank_1']:.1f}%); mean rank {cov['mean_rank']:.2f} of "
            f"{cov['num_classes'] - 1} (uniform: {cov['uniform_mean_rank']:.2f})." + _mean_rank_text(cov))


def _mean_rank_text(cov: dict) -> str:
    """The Figure 2 baseline: the same ranks from the mean logits μ(x) alone."""
    if "mean_logit_share_rank_1" not in cov:
        return ""
    return (" Baseline without the covariance: ranked by the het model's mean logits μ_j(x) instead, the hom "
            f"prediction is first in {100 * cov['mean_logit_share_rank_1']:.1f}% of cases (mean rank "
            f"{cov['mean_logit_mean_rank']:.2f}); " + (
                "the covariance ranks it first more often than μ alone." if cov["share_rank_1"] >
                cov["mean_logit_share_rank_1"] else "the covariance does not rank it first more often than μ alone."))


_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\|*_`[]"})


def md_cell(text: object) -> str:
    """A Markdown table cell (or one line of text) showing ``text`` literally: ``&``, ``<`` and ``>``
    as HTML entities, ``\\ | * _ ` [ ]`` backslash-escaped (GitHub-flavoured Markdown), line breaks as
    spaces."""
    return html.escape(" ".join(str(text).splitlines()), quote=False).translate(_MD_SPECIAL)


def _label_rule_text(report: dict) -> str:
    if not report.get("multilabel"):
        return ""
    return (" Multi-label metrics, temperature fitting and reliability diagrams drop examples without a positive "
            f"label; macro mAP leaves out {report.get('macro_map_skipped_classes')} of the {report.get('num_classes')} "
            "classes (those without a positive label in the evaluation data).")


def _md_table(title: str, header, body, level: str = "##") -> "list[str]":
    """A titled Markdown table, as lines."""
    return ([f"{level} {md_cell(title)}", "", "| " + " | ".join(map(md_cell, header)) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(map(md_cell, r)) + " |" for r in body] + [""])


def _html_table(title: str, header, body, tag: str = "h2") -> str:
    """A titled HTML table."""
    return (f"<{tag}>{html.escape(title)}</{tag}><table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header)
            + "</tr>" + "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in body)
            + "</table>")


def _markdown(report: dict, rows, cols, figures, has_ranks: bool, shift: Optional[dict] = None,
              more: Sequence = ()) -> str:
    lines = [markdown_header(f"Report: {report['name']}", report["provenance"]),
             f"Evaluation data: {report['data']} ({report['num_examples']} examples, {report['num_classes']} classes).",
             "ECE: 15 equal-width bins on the top-label confidence. NLL of the MC-averaged probability for het "
             "models; ensembles average member probabilities." + _label_rule_text(report), ""]
    lines += [n + "\n" for n in report.get("notes", [])]
    for title, header, body in _tables(report, rows, cols):
        lines += _md_table(title, header, body)
    lines += [f"![{md_cell(caption)}]({f})\n" for caption, f, _ in more]
    pairs = _pairs_text(report["covariance"], report.get("confusable_pairs", []), report.get("class_names"))
    if pairs:
        lines += [md_cell(pairs), ""]
    if has_ranks:
        lines += ["## Covariance ranks (paper Figure 2)", "", md_cell(_cov_text(report["covariance"])), "",
                  "![ranks](covariance_ranks.png)", ""]
    if shift:
        lines += [f"## {md_cell(shift['title'])}", ""] + [md_cell(t) + "\n" for t in shift["text"]]
        for title, header, body in shift["tables"]:
            lines += _md_table(title, header, body, "###")
        lines += [f"![{md_cell(caption)}]({f})\n" for caption, f, _ in shift["figures"]]
    lines += ["## Reliability diagrams", ""] + [f"![{label}]({f})" for label, f, _ in figures] + [""]
    lines += ["## How each entry was made", ""] + [f"- {e['label']} ({e['source']}): `{e['command'] or 'unknown'}`"
                                                   for e in report["entries"]] + [""]
    return "\n".join(lines)


def _html(report: dict, rows, cols, figures, cov_png: Optional[bytes], shift: Optional[dict] = None,
          more: Sequence = ()) -> str:
    def img(data: bytes, alt: str) -> str:
        return (f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,'
                f'{base64.b64encode(data).decode()}"><figcaption>{html.escape(alt)}</figcaption></figure>')

    prov = report["provenance"]
    m = prov["machine"]
    parts = [f"<h1>Report: {html.escape(report['name'])}</h1>",
             f"<p>Written by <code>{html.escape(prov['command'])}</code> on {html.escape(prov['date'])}.<br>"
             f"Machine: {html.escape(str(m.get('cpu')))}, {m.get('cores')} cores"
             f"{', GPU ' + html.escape(m['gpu']) if 'gpu' in m else ''}.<br>Versions: "
             f"{html.escape(', '.join(f'{k} {v}' for k, v in prov['versions'].items()))}.</p>",
             f"<p>Evaluation data: {html.escape(report['data'])} ({report['num_examples']} examples, "
             f"{report['num_classes']} classes). ECE: 15 equal-width bins on the top-label confidence."
             f"{html.escape(_label_rule_text(report))}</p>"]
    parts += [f"<p>{html.escape(n)}</p>" for n in report.get("notes", [])]
    parts += [_html_table(title, header, body) for title, header, body in _tables(report, rows, cols)]
    parts += [img(data, caption) for caption, _, data in more]
    pairs = _pairs_text(report["covariance"], report.get("confusable_pairs", []), report.get("class_names"))
    if pairs:
        parts.append(f"<p>{html.escape(pairs)}</p>")
    if cov_png is not None:
        parts.append(f"<h2>Covariance ranks (paper Figure 2)</h2><p>{html.escape(_cov_text(report['covariance']))}</p>"
                     + img(cov_png, "Figure 2 ranks"))
    if shift:
        parts.append(f"<h2>{html.escape(shift['title'])}</h2>"
                     + "".join(f"<p>{html.escape(t)}</p>" for t in shift["text"]))
        parts += [_html_table(title, header, body, "h3") for title, header, body in shift["tables"]]
        parts += [img(data, caption) for caption, _, data in shift["figures"]]
    parts.append("<h2>Reliability diagrams</h2><div class='grid'>" + "".join(img(p, label) for label, _, p in figures)
                 + "</div>")
    parts.append("<h2>How each entry was made</h2><ul>" + "".join(
        f"<li>{html.escape(e['label'])} ({html.escape(e['source'])}): <code>{html.escape(e['command'] or 'unknown')}"
        "</code></li>" for e in report["entries"]) + "</ul>")
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:4px 8px;"
             "font-size:14px}th{background:#eee}.grid{display:flex;flex-wrap:wrap;gap:12px}"
             "figure{margin:0}figcaption{font-size:12px;text-align:center}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(report['name'])}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def screenshot(html_path: "str | Path", png_path: "str | Path", width: int = 1200, height: int = 2400) -> Path:
    """Render ``html_path`` in headless Chromium and save a PNG screenshot (a check that the page
    opens and draws its figures).

    Raises:
        FileNotFoundError: no Chromium on PATH (``apt-get install chromium``).
        RuntimeError: the browser failed or wrote no image.
    """
    import shutil
    import subprocess
    import tempfile

    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        raise FileNotFoundError("no Chromium found for the screenshot; install it (apt-get install chromium)")
    png_path = Path(png_path).resolve()
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                               "--no-first-run", "--disable-background-networking", "--disable-component-update",
                               "--disable-sync", f"--user-data-dir={profile}", "--hide-scrollbars",
                               f"--screenshot={png_path}", f"--window-size={width},{height}",
                               Path(html_path).resolve().as_uri()], capture_output=True, text=True, timeout=180)
    if not png_path.is_file() or png_path.stat().st_size == 0:
        raise RuntimeError(f"Chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-1000:]}")
    return png_path
