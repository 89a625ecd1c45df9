"""Bad inputs of the uncertainty tools: metrics, ensembles, reports.

Run folders are built by hand (:func:`make_run`: config.yaml, predictions.npz, metrics.json), so no
case trains anything.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Optional

import click
import numpy as np

from bad_inputs import ROOT, bad_input  # noqa: F401

CLASSES = [f"c{i}" for i in range(5)]


def make_run(
    folder: "str | Path",
    seed: int = 0,
    n: int = 40,
    class_names: "Optional[list[str]]" = None,
    covariance: str = "none",
    heldout: bool = False,
    labels_seed: int = 0,
) -> Path:
    """A finished run folder by hand: random softmax logits for ``n`` examples, fixed labels."""
    from harness.io import atomic_write_text
    from harness.uncertainty.predictions import Predictions

    folder = Path(folder)
    names = list(class_names or CLASSES)
    rng = np.random.default_rng(seed)
    labels = np.random.default_rng(labels_seed).integers(0, len(names), n)
    Predictions(rng.normal(size=(n, len(names))) * 2, labels, np.arange(n), names, "softmax", str(folder)).save(
        folder / "predictions.npz"
    )
    if heldout:
        Predictions(rng.normal(size=(n, len(names))), labels, np.arange(n), names, "softmax", str(folder)).save(
            folder / "heldout_predictions.npz"
        )
    atomic_write_text(folder / "config.yaml", f"seed: {seed}\nmodel:\n  head:\n    covariance: {covariance}\n")
    atomic_write_text(folder / "metrics.json", json.dumps({"command": "by hand", "eval_data": "synthetic"}))
    return folder


def _cli(*args: str) -> None:
    """Run ``harness ARGS`` as a user does; a refusal raises its ClickException."""
    from harness.cli import main

    main(list(args), standalone_mode=False)


def _lp(n: int = 8, k: int = 3) -> "tuple[np.ndarray, np.ndarray]":
    from harness.uncertainty import metrics as M

    rng = np.random.default_rng(0)
    return M.log_softmax(rng.normal(size=(n, k))), rng.integers(0, k, n)


# ------------------------------------------------------------------------------------------ metrics
@bad_input(
    "uncertainty",
    "log-probabilities whose rows do not sum to 1 (metrics.nll)",
    match=r"must be normalised log-probabilities.*rows do not.*sum to less than 1: are classes missing",
)
def _unnormalised(tmp_path):
    from harness.uncertainty import metrics as M

    lp, y = _lp()
    M.nll(lp + np.log(0.9), y)


@bad_input(
    "uncertainty",
    "raw logits passed as log-probabilities (metrics.ece)",
    match=r"look like raw logits: pass harness\.uncertainty\.metrics\.log_softmax\(logits\)",
)
def _raw_logits(tmp_path):
    from harness.uncertainty import metrics as M

    M.ece(np.random.default_rng(0).normal(size=(8, 3)) * 3, np.zeros(8, dtype=int))


@bad_input(
    "uncertainty",
    "fewer labels than prediction rows (metrics.accuracy)",
    match=r"7 labels for 8 rows of predictions: give exactly one label per example",
)
def _label_count(tmp_path):
    from harness.uncertainty import metrics as M

    lp, y = _lp()
    M.accuracy(lp, y[:-1])


@bad_input(
    "uncertainty", "float labels (metrics.nll)", match=r"integer class indices, got dtype float64.*astype\(int\)"
)
def _float_labels(tmp_path):
    from harness.uncertainty import metrics as M

    lp, y = _lp()
    M.nll(lp, y.astype(float))


@bad_input("uncertainty", "labels outside [0, K) (metrics.brier)", match=r"labels must lie in \[0, 3\)")
def _label_range(tmp_path):
    from harness.uncertainty import metrics as M

    lp, y = _lp()
    M.brier(lp, np.r_[y[:-1], 3])


@bad_input(
    "uncertainty",
    "confidence above 1 (metrics.calibration_error)",
    match=r"confidence must be probabilities in \[0, 1\].*not a logit",
)
def _confidence_range(tmp_path):
    from harness.uncertainty import metrics as M

    M.calibration_error(np.array([0.2, 0.9, 1.5]), np.array([0, 1, 1]))


@bad_input("uncertainty", "correctness flags other than 0/1 (metrics.reliability_bins)", match=r"correct must be 0/1")
def _correct_values(tmp_path):
    from harness.uncertainty import metrics as M

    M.reliability_bins(np.array([0.2, 0.9]), np.array([0, 2]))


@bad_input(
    "uncertainty",
    "NaN in the predictions (metrics.classification_metrics)",
    match=r"NaN in 1 of 8 rows \(first: row 2\); NaN predictions are not scored",
)
def _nan(tmp_path):
    from harness.uncertainty import metrics as M

    lp, y = _lp()
    lp[2, 1] = np.nan
    M.classification_metrics(lp, y)


@bad_input("uncertainty", "no examples, N = 0 (metrics.top_label)", match=r"no examples \(N = 0\)")
def _empty(tmp_path):
    from harness.uncertainty import metrics as M

    M.top_label(np.zeros((0, 3)), np.zeros(0, dtype=int))


@bad_input(
    "uncertainty",
    "soft multi-label targets (metrics.multilabel_metrics)",
    match=r"multi-label targets must be multi-hot 0/1 values, got 0\.7 at \[0, 1\]",
)
def _soft_targets(tmp_path):
    from harness.uncertainty.multilabel import multilabel_metrics

    multilabel_metrics(np.zeros((2, 3)), np.array([[1.0, 0.7, 0.0], [0.0, 1.0, 0.0]]))


@bad_input(
    "uncertainty",
    "multi-label targets without any positive label (metrics.micro_ap)",
    match=r"none of the 2 examples has a positive label",
)
def _no_positives(tmp_path):
    from harness.uncertainty.multilabel import micro_ap

    micro_ap(np.zeros((2, 3)), np.zeros((2, 3)))


# ------------------------------------------------------------------------------------------ ensembles
@bad_input(
    "uncertainty",
    "the same member twice (harness ensemble)",
    click.ClickException,
    match=r"member '/.*/a' is given twice \(also as 'a'\).*remove the repeat",
)
def _same_member(tmp_path):
    make_run("a", 0), make_run("b", 1)
    _cli("ensemble", "--members", "a", "b", str(Path("a").resolve()), "--out", "ens")


@bad_input(
    "uncertainty",
    "a copied run folder as a second member (harness ensemble)",
    click.ClickException,
    match=r"have identical predictions: the same model twice",
)
def _copied_member(tmp_path):
    make_run("a", 0)
    shutil.copytree("a", "a_copy")
    _cli("ensemble", "--members", "a", "a_copy", "--out", "ens")


@bad_input(
    "uncertainty",
    "members with different class names (harness ensemble)",
    click.ClickException,
    match=r"class 3 is 'truck' vs 'c3' \(5 vs 5 classes; different label space\)",
)
def _other_classes(tmp_path):
    make_run("a", 0), make_run("b", 1, class_names=["c0", "c1", "c2", "truck", "c4"])
    _cli("ensemble", "--members", "a", "b", "--out", "ens")


@bad_input(
    "uncertainty",
    "members evaluated on other examples (harness ensemble)",
    click.ClickException,
    match=r"at position 30 the example index is none vs 30 \(30 vs 40 evaluation examples; different evaluation",
)
def _other_examples(tmp_path):
    make_run("a", 0), make_run("b", 1, n=30)
    _cli("ensemble", "--members", "a", "b", "--out", "ens")


@bad_input(
    "uncertainty",
    "members whose held-out predictions differ (harness ensemble)",
    click.ClickException,
    match=r"\(held-out\)\) does not match member 1 of 2 .*different evaluation data or labels",
)
def _other_heldout(tmp_path):
    make_run("a", 0, heldout=True), make_run("b", 1, heldout=True)
    from harness.uncertainty.predictions import Predictions

    h = Predictions.load(Path("b") / "heldout_predictions.npz")
    h.targets = (h.targets + 1) % len(CLASSES)
    h.save(Path("b") / "heldout_predictions.npz")
    _cli("ensemble", "--members", "a", "b", "--out", "ens")


@bad_input(
    "uncertainty",
    "--out pointing at a member folder (harness ensemble)",
    click.ClickException,
    match=r"is one of the members: writing there would replace",
)
def _out_is_member(tmp_path):
    make_run("a", 0), make_run("b", 1)
    _cli("ensemble", "--members", "a", "b", "--out", "b")


@bad_input(
    "uncertainty",
    "a folder that is not a run as a member (harness ensemble)",
    click.ClickException,
    match=r"'notrun' is not a run folder \(no config\.yaml\)",
)
def _not_a_run(tmp_path):
    make_run("a", 0)
    Path("notrun").mkdir()
    _cli("ensemble", "--members", "a", "notrun", "--out", "ens")


# ------------------------------------------------------------------------------------------ reports
@bad_input(
    "uncertainty",
    "a report name with '/' (harness report --name)",
    click.ClickException,
    match=r"report name 'digits/v2' must be a plain name .*no '\.\.'",
)
def _report_slash(tmp_path):
    make_run("a", 0)
    _cli("report", "a", "--name", "digits/v2", "--out-root", "results", "--no-covariance")


@bad_input(
    "uncertainty",
    "a report name '..' (harness report --name)",
    click.ClickException,
    match=r"report name '\.\.' must be a plain name",
)
def _report_dotdot(tmp_path):
    make_run("a", 0)
    _cli("report", "a", "--name", "..", "--out-root", "results", "--no-covariance")
