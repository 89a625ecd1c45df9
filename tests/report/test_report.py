"""Report figures and labels: reliability diagrams read back from matplotlib, covariance and
Figure 2 wording, Markdown escaping, report names."""

import json
import re

import numpy as np
import pytest

from harness.report import build as B
from harness.report import covariance_text as CT
from harness.report import figures as F
from harness.report import render as RR
from harness.uncertainty.predictions import Predictions

from bad_inputs_uncertainty import make_run


def _calibration_case() -> Predictions:
    """Bin 13 (confidence 0.9) is over-confident, accuracy 0.5; bin 8 (confidence 0.55) is
    under-confident, accuracy 1.0."""
    n = 200
    probs = np.r_[np.tile([0.9, 0.1], (n, 1)), np.tile([0.55, 0.45], (n, 1))]
    labels = np.r_[np.zeros(n // 2, int), np.ones(n // 2, int), np.zeros(n, int)]
    return Predictions(np.log(probs), labels, np.arange(2 * n), ["a", "b"], "softmax", "synthetic")


def _bars(ax, label):
    """(x centre, bottom, top) of each bar of the container labelled ``label``."""
    (container,) = [c for c in ax.containers if c.get_label() == label]
    return [(p.get_x() + p.get_width() / 2, p.get_y(), p.get_y() + p.get_height(), p) for p in container]


def test_reliability_diagram_reads_correctly_for_over_and_under_confidence():
    import matplotlib.pyplot as plt

    fig = F.reliability_figure(_calibration_case(), "synthetic")
    try:
        ax = fig.axes[0]
        acc = sorted(_bars(ax, F.ACCURACY_LABEL), key=lambda b: b[0])
        assert [(round(x, 4), bottom, round(top, 6)) for x, bottom, top, _ in acc] == [
            (round(8.5 / 15, 4), 0.0, 1.0),
            (round(13.5 / 15, 4), 0.0, 0.5),
        ]  # accuracy bars untouched
        ((x_over, lo, hi, over),) = _bars(ax, F.OVER_LABEL)
        assert x_over == pytest.approx(13.5 / 15) and lo == pytest.approx(0.5) and hi == pytest.approx(0.9)
        ((x_under, lo, hi, under),) = _bars(ax, F.UNDER_LABEL)
        assert x_under == pytest.approx(8.5 / 15) and lo == pytest.approx(1.0) and hi == pytest.approx(0.55)
        assert not over.get_fill() and not under.get_fill()  # outlines: the accuracy bar stays visible
        fig.canvas.draw()
        legend = fig.legends[0].get_window_extent()
        assert not any(legend.overlaps(a.get_window_extent()) for a in fig.axes)  # legend outside the axes
        texts = [t.get_text() for t in fig.legends[0].get_texts()]
        assert F.OVER_LABEL in texts and F.UNDER_LABEL in texts
    finally:
        plt.close(fig)


def test_multilabel_reliability_diagram_follows_the_row_rule():
    import matplotlib.pyplot as plt

    rng = np.random.default_rng(0)
    t = (rng.random((60, 4)) < 0.4).astype(float)
    t[t.sum(1) == 0, 0] = 1
    z = rng.normal(size=(60, 4)) + 2 * t
    extra = Predictions(
        np.r_[z, rng.normal(size=(20, 4))], np.r_[t, np.zeros((20, 4))], np.arange(80), list("abcd"), "sigmoid"
    )
    counts = []
    for p in (Predictions(z, t, np.arange(60), list("abcd"), "sigmoid"), extra):
        fig = F.reliability_figure(p, "x")
        counts.append([b.get_height() for b in fig.axes[1].patches])
        plt.close(fig)
    assert counts[0] == counts[1]  # rows without a positive label are not in the histogram


def test_markdown_cells_are_escaped_and_names_checked(tmp_path):
    names = ["a|b", "<script>", "x_y*z", "back\\slash", "plain"]
    runs = [make_run(tmp_path / f"r{s}", s, class_names=names) for s in (0, 1)]
    extra = {"tables": [("Classes", ["name", "note"], [[n, "ok"] for n in names])]}
    out = B.build(runs, "escaped", tmp_path / "results", covariance=False, extra=extra)
    md = (out / "report.md").read_text()
    table = md[md.index("## Classes") :].split("\n\n")[1].splitlines()
    for line in table:  # every row has exactly 2 cells: unescaped pipes only at the borders
        assert len(re.split(r"(?<!\\)\|", line)) == 4, line
    assert "a\\|b" in md and "&lt;script&gt;" in md and "<script>" not in md and "x\\_y\\*z" in md
    assert "back\\\\slash" in md
    page = (out / "report.html").read_text()
    assert "&lt;script&gt;" in page and "<td>a|b</td>" in page
    # navigable: the contents, then the first figure, before the long tables; each link reaches a heading
    assert page.index("<nav>") < page.index("<figure") < page.index("<table", page.index("<nav>"))
    for target in re.findall(r"<a href='#([^']+)'>", page):
        assert f"id='{target}'" in page, target
    assert "**Contents**: " in md and "<details><summary>" in page

    for bad in ("a/b", "..", "", "a\\b"):
        with pytest.raises(ValueError, match="must be a plain name"):
            B.build(runs, bad, tmp_path / "other", covariance=False)
    assert not (tmp_path / "other").exists()


def test_md_cell_keeps_text_literal():
    assert RR.md_cell("a|b<c>&d") == "a\\|b&lt;c&gt;&amp;d"
    assert RR.md_cell("two\nlines") == "two lines"
    assert RR.md_cell("99.10%") == "99.10%"


def _cov(tempered):
    return {
        "num_examples": 359,
        "het_run": "runs/het",
        "hom_run": "runs/hom",
        "tempered": tempered,
        "temperature": 1.5,
        "num_classes": 10,
        "num_het_right_hom_wrong": 12,
        "ranks": [1, 2],
        "share_rank_1": 0.5,
        "uniform_share_rank_1": 1 / 9,
        "mean_rank": 1.5,
        "uniform_mean_rank": 5.0,
        "top_pairs": [{"class_a": "3", "class_b": "8", "covariance": -0.2, "correlation": -0.4}],
    }


@pytest.mark.parametrize("tempered", [False, True])
def test_covariance_table_says_what_sigma_and_the_correlation_are(tempered):
    report = {"entries": [], "multilabel": False, "covariance": _cov(tempered)}
    title, header, _ = RR._tables(report, [], RR.main_columns(False))[-1]
    assert header[3] == "correlation Σ̄_ab / sqrt(Σ̄_aa Σ̄_bb)"
    assert ("Σ is tempered: divided by τ² (τ = 1.5)" in title) == tempered
    assert ("Σ is not tempered" in title) == (not tempered)
    text = CT._cov_text(report["covariance"])
    assert "that example's own covariance Σ(x)" in text and "not the average Σ̄" in text


def test_multilabel_report_states_the_row_rule_and_skipped_classes(tmp_path):
    from harness.io import atomic_write_text

    rng = np.random.default_rng(0)
    t = (rng.random((50, 4)) < 0.4).astype(np.float32)
    t[:, 3] = 0  # a class without a positive label
    for s in (0, 1):
        run = tmp_path / f"m{s}"
        Predictions(rng.normal(size=(50, 4)) + 2 * t, t, np.arange(50), list("abcd"), "sigmoid").save(
            run / "predictions.npz"
        )
        atomic_write_text(run / "config.yaml", f"seed: {s}\nmodel:\n  head:\n    covariance: none\n    link: sigmoid\n")
    out = B.build([tmp_path / "m0", tmp_path / "m1"], "ml", tmp_path / "results", covariance=False)
    assert json.loads((out / "report.json").read_text())["macro_map_skipped_classes"] == 1
    assert "macro mAP leaves out 1 of the 4 classes (those without a positive label" in (out / "report.md").read_text()
