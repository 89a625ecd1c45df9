"""The report's figures: one matplotlib set-up (headless, Agg backend), one PNG encoder, and every figure drawn."""

from __future__ import annotations

import io
from typing import Any, Sequence

import numpy as np

from harness.shift.results import CLEAN
from harness.shift.results import METRICS as SHIFT_METRICS
from harness.uncertainty import metrics as M
from harness.uncertainty.multilabel import multilabel_top_label
from harness.uncertainty.predictions import Predictions

ACCURACY_LABEL = "accuracy"
OVER_LABEL = "gap: over-confident (confidence above accuracy)"
UNDER_LABEL = "gap: under-confident (accuracy above confidence)"


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig: Any) -> bytes:
    """The PNG bytes of a matplotlib figure (110 dpi); the figure is closed."""
    plt = pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def top_label(preds: Predictions) -> "tuple[np.ndarray, np.ndarray]":
    """The top-label confidence ``[N]`` and correctness ``[N]`` (bool) the reliability diagrams and ECE use;
    multi-label predictions under the multi-label row rule of :mod:`harness.uncertainty.multilabel`."""
    if preds.multilabel:
        return multilabel_top_label(preds.logits, preds.targets)
    return M.top_label(preds.log_probs(), preds.targets)


def reliability_figure(preds: Predictions, title: str):
    """Reliability diagram of ``preds`` (:func:`confidence_reliability_figure` of :func:`top_label`)."""
    return confidence_reliability_figure(*top_label(preds), title)


def confidence_reliability_figure(conf: np.ndarray, correct: np.ndarray, title: str):
    """Reliability diagram over a confidence histogram of top-label confidences ``conf`` ``[N]`` in [0, 1] and
    their correctness ``correct`` ``[N]`` (bool), as a matplotlib ``Figure``.

    Top panel, per non-empty equal-width bin (15, :func:`harness.uncertainty.metrics.reliability_bins`): a
    filled bar up to the bin's accuracy, and an unfilled hatched bar from the accuracy to the bin's
    mean confidence (its signed gap, height confidence - accuracy): above the accuracy bar when the
    bin is over-confident, inside it when under-confident, so either direction reads correctly and
    the accuracy bar is never covered. The dashed diagonal is perfect calibration. Bottom panel:
    share of examples per bin. The legend sits below both panels, outside the axes.
    """

    plt = pyplot()

    bins = M.reliability_bins(conf, correct)
    centers = (bins["edges"][:-1] + bins["edges"][1:]) / 2
    width = (bins["edges"][1] - bins["edges"][0]) * 0.9
    filled = bins["count"] > 0
    x, acc, cf = centers[filled], bins["accuracy"][filled], bins["confidence"][filled]
    fig, (ax, hx) = plt.subplots(2, 1, figsize=(4.2, 6.0), gridspec_kw={"height_ratios": [3, 1.2]}, sharex=True)
    ax.bar(x, acc, width=width, color="#4c72b0", label=ACCURACY_LABEL)
    for sel, color, hatch, label in (
        (cf > acc, "#c44e52", "///", OVER_LABEL),
        (cf < acc, "#2ca02c", "\\\\\\", UNDER_LABEL),
    ):
        if sel.any():
            ax.bar(
                x[sel],
                (cf - acc)[sel],
                bottom=acc[sel],
                width=width,
                fill=False,
                edgecolor=color,
                hatch=hatch,
                linewidth=1.2,
                label=label,
            )
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


def severity_figure(groups: "list[dict]", severities: "list[int]", corruptions: "list[str]"):
    """Ovadia et al. Fig. 2 layout: top-1, NLL and ECE against severity (0 = clean), one box per
    group at each severity spanning the corruptions (single models: per-corruption means over seeds)."""
    plt = pyplot()

    colors = plt.get_cmap("tab10").colors
    width_in = max(6.0, 2.0 + 0.3 * len(groups) * (len(severities) + 1))
    fig, axes = plt.subplots(3, 1, figsize=(width_in, 9.5), sharex=True)
    width = 0.8 / len(groups)
    for ax, key in zip(axes, SHIFT_METRICS):
        label, pct = M.METRICS[key].label, M.METRICS[key].percent
        for gi, g in enumerate(groups):
            data, pos = [], []
            for si, s in enumerate([0] + severities):
                names = [CLEAN] if s == 0 else [f"{c}-{s}" for c in corruptions]
                vals = [float(np.mean([m["results"]["sets"][n][key] for m in g["members"]])) for n in names]
                data.append([100 * v if pct else v for v in vals])
                pos.append(si + (gi - (len(groups) - 1) / 2) * width)
            ax.boxplot(
                data,
                positions=pos,
                widths=width * 0.85,
                patch_artist=True,
                showfliers=True,
                boxprops={"facecolor": colors[gi % 10], "alpha": 0.75},
                medianprops={"color": "k"},
                flierprops={"markersize": 3},
            )
        ax.set_ylabel(label + (" (%)" if pct else ""))
        ax.grid(axis="y", alpha=0.3)
    axes[-1].set_xticks(range(len(severities) + 1))
    axes[-1].set_xticklabels(["clean"] + [str(s) for s in severities])
    axes[-1].set_xlabel("corruption severity (boxes span the corruptions)")
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=colors[i % 10], alpha=0.75) for i in range(len(groups))]
    fig.legend(
        handles, [g["name"] for g in groups], loc="lower center", ncol=min(4, len(groups)), fontsize=8, frameon=False
    )
    fig.tight_layout(rect=(0, 0.03 + 0.025 * ((len(groups) + 3) // 4), 1, 1))
    return fig


def risk_coverage_figure(groups: "list[dict]"):
    """Risk (error rate among the accepted) against coverage, accepting by maximum probability, on the
    clean subset and on all corrupted sets pooled; single models' curves averaged over seeds."""
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
