"""Bad inputs found by the ninth reliability audit in scoring: copies told apart only when bit-identical, a model's
classes never checked against the data it is scored on, ``Predictions`` with out-of-range labels, NaN logits or
repeated class names, a τ of 1e-310, a fitted τ at its bound without a word, and text given as scores
(``audit9 <case id>``)."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import click
import numpy as np
from bad_inputs_audit6_runs import _checkpoint_runs
from bad_inputs_audit8_folders import _report

from bad_inputs import bad_input, handled
from bad_inputs_safety import _cli, _model_pt
from bad_inputs_uncertainty import make_run

CIFAR = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _P(**k):
    """The audit's ``P(**k)``: 40 random rows of 4 classes, softmax."""
    from harness.uncertainty.calibration import Predictions

    rng = np.random.default_rng(0)
    return Predictions(
        k.get("lg", rng.normal(size=(40, 4))),
        k.get("y", rng.integers(0, 4, 40)),
        k.get("idx", np.arange(40)),
        k.get("cn", ["0", "1", "2", "3"]),
        k.get("link", "softmax"),
    )


def _shifted_copy(tmp: Path) -> "tuple[Path, Path]":
    """Run ``a`` and ``cp2``, a copy whose logits are all + 1e-6 (the same softmax, other bytes)."""
    from harness.uncertainty.predictions import Predictions

    a = make_run(tmp / "a", heldout=True)
    shutil.copytree(a, tmp / "cp2")
    for name in ("predictions.npz", "heldout_predictions.npz"):
        p = Predictions.load(tmp / "cp2" / name)
        Predictions(p.logits + 1e-6, p.targets, p.index, p.class_names, p.link).save(tmp / "cp2" / name)
    assert (a / "predictions.npz").read_bytes() != (tmp / "cp2" / "predictions.npz").read_bytes()
    return a, tmp / "cp2"


# ------------------------------------------------------------------------------------------------ copies
SAME = r"have identical predictions: the same model twice .* differs by at most 1e-05, here by "


@bad_input(
    "report",
    "harness report RUN COPY where COPY has every logit + 1e-6 (audit9 R02: listed as a second seed)",
    click.ClickException,
    r"folders '.*/a' and '.*/cp2' " + SAME,
)
def _report_shifted_copy(tmp):
    _report(tmp, *_shifted_copy(tmp))


@bad_input(
    "ensembles",
    "harness ensemble -m RUN -m COPY where COPY has every logit + 1e-6 (audit9 R04: disagreement 0, KL 0, rc 0)",
    click.ClickException,
    r"members '.*/a' and '.*/cp2' " + SAME,
)
def _ensemble_shifted_copy(tmp):
    a, cp2 = _shifted_copy(tmp)
    try:
        _cli("ensemble", "-m", str(a), "-m", str(cp2), "--out", str(tmp / "ens"))
    finally:
        assert not (tmp / "ens" / "ensemble.json").exists(), "an ensemble was written"


# ------------------------------------------------------------------------------------------------ classes vs data
OTHER_CLASSES = (
    r"was trained on the classes \[airplane, automobile, bird, cat, deer, dog, \.\.\.\] \(10\) but the data "
    r"\(scikit-learn digits.*\) has the classes \[0, 1, 2, 3, 4, 5, \.\.\.\] \(10\): .*; give the data the model was "
    r"trained on"
)


@bad_input(
    "import",
    "harness import --model RUN/model.pt of a model trained on CIFAR-10 classes --data a digits config (audit9 I02: "
    "scored with the other data's class names, rc 0)",
    click.ClickException,
    r"run/model\.pt " + OTHER_CLASSES,
)
def _import_other_classes(tmp):
    from unittest import mock

    (tmp / "run").mkdir()
    (tmp / "run" / "run.json").write_text(json.dumps({"class_names": CIFAR}))
    (tmp / "data.yaml").write_text("data:\n  source: digits\n  limit_eval: 20\n")
    model = _model_pt(tmp / "run" / "model.pt")
    with mock.patch("harness.runs.predict_model", side_effect=AssertionError("predicted before the check")):
        _cli("import", "--model", str(model), "--data", str(tmp / "data.yaml"), "--out", str(tmp / "imp"))


@bad_input(
    "ensembles",
    "harness ensemble --from-checkpoints --eval-data DATA where the members were trained on other classes (audit9 "
    "I03: scored on 10,000 images of another data set, rc 0)",
    click.ClickException,
    r"a/model\.pt " + OTHER_CLASSES,
)
def _ensemble_other_classes(tmp):
    members = _checkpoint_runs(tmp)
    for name in "ab":
        (tmp / name / "run.json").write_text(json.dumps({"class_names": CIFAR}))
    (tmp / "data.yaml").write_text("data:\n  source: digits\n  limit_eval: 20\n")
    try:
        _cli("ensemble", *members, "--from-checkpoints", "--eval-data", str(tmp / "data.yaml"), "--out", str(tmp / "e"))
    finally:
        assert not (tmp / "e" / "ensemble.json").exists(), "an ensemble was written"


# ------------------------------------------------------------------------------------------------ Predictions
@bad_input(
    "uncertainty",
    "Predictions with labels 7 for 4 classes (audit9 P02: constructed and saved; fit_temperature: IndexError)",
    ValueError,
    r"Predictions targets: labels must lie in \[0, 4\), got range \[7, 7\]",
)
def _predictions_labels_out_of_range(tmp):
    _P(y=np.full(40, 7))


@bad_input(
    "uncertainty",
    "Predictions with all-NaN logits (audit9 P03: constructed and saved; fit_temperature returned 0.196)",
    ValueError,
    r"logits hold NaN or \+inf in 40 of 40 rows \(first: row 0\)",
)
def _predictions_nan(tmp):
    _P(lg=np.full((40, 4), np.nan))


@bad_input(
    "uncertainty",
    "Predictions with a repeated class name (audit9 P04: accepted)",
    ValueError,
    r"class_names\[1\] = 'a' repeats class_names\[0\]: each class needs its own name",
)
def _predictions_repeated_name(tmp):
    _P(cn=["a", "a", "b", "c"])


@bad_input(
    "uncertainty",
    "Predictions with empty class names (audit9 P04: accepted)",
    ValueError,
    r"class_names\[0\] is empty \(''\): give each class a name",
)
def _predictions_empty_name(tmp):
    _P(cn=["", "", "", ""])


# ------------------------------------------------------------------------------------------------ calibration
@bad_input(
    "uncertainty",
    "calibration.scale(P, 1e-310) (audit9 P05: passed the τ rule, inf logits)",
    ValueError,
    r"temperature must be a finite number at least 0\.001 and at most 1000, got temperature=1e-310",
)
def _scale_tiny_temperature(tmp):
    from harness.uncertainty.calibration import scale

    scale(_P(), 1e-310)


@handled(
    "uncertainty",
    "fit_temperature on held-out labels all of one class (audit9 P07: returned the bound 999.999 without a word)",
    r"warned: fit_temperature: the fitted temperature is at the upper bound 1000 .* a degenerate fit",
)
def _fit_at_bound(tmp):
    from harness.uncertainty.calibration import fit_temperature

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = fit_temperature(_P(y=np.zeros(40, dtype=int)))
    assert 999 < t <= 1000, t
    said = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert said, "no warning for a fit at the bound"
    with warnings.catch_warnings(record=True) as caught:  # a fit inside the bounds says nothing
        warnings.simplefilter("always")
        fit_temperature(_P())
    assert not [w for w in caught if "bound" in str(w.message)], "warned for a fit inside the bounds"
    return f"warned: {said[0]}"


@bad_input(
    "uncertainty",
    "ood.uncertainty_scores(lp, ['bogus']) (audit9 O04: numpy's 'could not convert string to float')",
    ValueError,
    r"mean_entropy must be numbers \(an array or tensor of floats\), got values of dtype <U5 \(first: 'bogus'",
)
def _scores_text(tmp):
    from harness.uncertainty import metrics as M
    from harness.uncertainty import ood as O

    lp = M.log_softmax(np.random.default_rng(0).normal(size=(20, 4)) * 4)
    O.uncertainty_scores(lp, ["bogus"])
