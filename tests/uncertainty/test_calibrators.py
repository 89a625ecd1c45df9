"""Post-hoc calibrators (harness.uncertainty.calibrators): each gives normalised, finite predictions that improve NLL on
a miscalibrated synthetic set; the one-vs-rest rule is netcal's own multiclass output before the clip; Dirichlet
calibration's gradient and optimum; bad input; and harness report --calibrators with the comparison intervals."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness.uncertainty import calibrators as C
from harness.uncertainty import metrics as M
from harness.uncertainty.calibration import fit_temperature, scale
from harness.uncertainty.predictions import Predictions

pytest.importorskip("netcal")

NAMES = ("temperature", "vector", "dirichlet", "histogram", "isotonic", "bbq", "beta")


def synthetic(n: int, seed: int, k: int = 4, sharpen: float = 3.0, bias: float = 1.0) -> Predictions:
    """Labels drawn from softmax(z) with z ~ N(0, 1.5²); the model's logits are ``sharpen`` z plus a class bias
    ``bias`` on class 0: over-confident and skewed, so each calibrator has something to fix."""
    rng = np.random.default_rng(seed)
    z = 1.5 * rng.normal(size=(n, k))
    p = np.exp(M.log_softmax(z))
    y = (p.cumsum(1) < rng.random((n, 1))).sum(1)
    logits = sharpen * z
    logits[:, 0] += bias
    return Predictions(logits, y, np.arange(n), [f"c{i}" for i in range(k)], "softmax", f"synthetic {seed}")


@pytest.fixture(scope="module")
def fitted():
    fit_on, evaluate_on = synthetic(2000, 0), synthetic(2000, 1)
    return fit_on, evaluate_on, C.calibrate(NAMES, fit_on, evaluate_on)


@pytest.mark.parametrize("name", NAMES)
def test_each_calibrator_gives_normalised_finite_predictions_that_improve_nll(fitted, name):
    fit_on, evaluate_on, out = fitted
    q = out[name]
    p = np.exp(q.log_probs())
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(np.exp(q.logits).sum(1), 1.0, atol=1e-12)  # the logits are log q themselves
    assert np.isfinite(q.logits).all() and np.isfinite(q.nll())
    assert q.nll() < evaluate_on.nll() - 0.05, (name, q.nll(), evaluate_on.nll())
    assert q.metrics()["ece"] < evaluate_on.metrics()["ece"]
    assert np.array_equal(q.targets, evaluate_on.targets) and np.array_equal(q.index, evaluate_on.index)
    assert q.link == "softmax" and q.source.startswith("synthetic 1 (")
    if C.CALIBRATORS[name].rule == "one-vs-rest":
        assert p.min() >= C.EPS / p.shape[1] * (1 - 1e-12)  # the floor of the stated rule


def test_temperature_is_fit_temperature_and_keeps_top1(fitted):
    fit_on, evaluate_on, out = fitted
    ours = out["temperature"]
    np.testing.assert_allclose(ours.log_probs(), scale(evaluate_on, fit_temperature(fit_on)).log_probs(), atol=1e-12)
    assert np.array_equal(ours.logits.argmax(1), evaluate_on.logits.argmax(1))
    assert not C.CALIBRATORS["temperature"].can_change_top1
    assert all(C.CALIBRATORS[n].can_change_top1 for n in NAMES if n != "temperature")


def test_vector_scaling_nests_temperature_scaling(fitted):
    """Vector scaling (netcal's multiclass LogisticCalibration) contains T (w = 1/T, b = 0): fitted by maximum
    likelihood, its NLL on the split it was fitted on is at most temperature scaling's; it fixes the class bias."""
    fit_on, _, _ = fitted
    vec = C.fit_vector_scaling(fit_on)(fit_on)
    temp = C.fit_temperature_map(fit_on)(fit_on)
    assert vec.nll() <= temp.nll() + 1e-4
    assert abs(np.exp(vec.log_probs())[:, 0].mean() - np.mean(fit_on.targets == 0)) < 0.01


@pytest.mark.parametrize(
    "name, cls", [("histogram", "HistogramBinning"), ("isotonic", "IsotonicRegression"), ("bbq", "BBQ")]
)
def test_one_vs_rest_is_netcals_own_multiclass_output(name, cls):
    """Before the clip at EPS, the per-class scores divided by their sum are exactly what netcal's multiclass
    transform returns (it fits the same one-vs-all models and normalises); the clip changes only rows holding a
    score below EPS."""
    import netcal.binning

    fit_on, evaluate_on = synthetic(1500, 2), synthetic(1500, 3)
    klass = getattr(netcal.binning, cls)
    scores = C.one_vs_rest(klass, fit_on)(np.exp(evaluate_on.log_probs()))
    theirs = klass().fit(np.exp(fit_on.log_probs()), fit_on.targets).transform(np.exp(evaluate_on.log_probs()))
    total = scores.sum(1, keepdims=True)
    np.testing.assert_allclose(scores / total, theirs, rtol=0, atol=1e-12)
    ours = np.exp(C.CALIBRATORS[name].fit(fit_on)(evaluate_on).logits)
    clean = (scores >= C.EPS).all(1)
    assert clean.any()
    np.testing.assert_allclose(ours[clean], theirs[clean], rtol=0, atol=1e-12)


def test_a_class_missing_from_the_heldout_split_gets_the_floor():
    """A class the held-out split never shows gets the score 0 (netcal leaves its column 0 too), so its probability is
    the floor EPS over the row's sum: finite NLL, rows summing to 1."""
    import netcal.binning

    fit_on, evaluate_on = synthetic(800, 4), synthetic(200, 5)
    keep = fit_on.targets != 3
    fit_on = Predictions(fit_on.logits[keep], fit_on.targets[keep], fit_on.index[keep], fit_on.class_names, "softmax")
    scores = C.one_vs_rest(netcal.binning.IsotonicRegression, fit_on)(np.exp(evaluate_on.log_probs()))
    assert (scores[:, 3] == 0).all()
    q = C.CALIBRATORS["isotonic"].fit(fit_on)(evaluate_on)
    p = np.exp(q.log_probs())
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(p[:, 3], C.EPS / np.maximum(scores, C.EPS).sum(1), rtol=1e-12)
    assert np.isfinite(q.nll()) and (evaluate_on.targets == 3).any()


def test_dirichlet_gradient_hessian_and_fixed_regularisation():
    """The exact gradient and Hessian-vector product of the ODIR objective against finite differences; a huge λ
    leaves W diagonal and b at 0 (ODIR, Kull et al. 2019); with λ chosen by cross-validation, the chosen value is
    in the grid and the map's NLL on its own split is at most the identity's."""
    from scipy.optimize import check_grad

    p = synthetic(300, 6, k=3)
    x, y = p.log_probs(), p.targets
    rng = np.random.default_rng(0)
    theta = rng.normal(size=12)
    f = lambda t: C._dirichlet_loss(t, x, y, 0.3)[0]  # noqa: E731
    g = lambda t: C._dirichlet_loss(t, x, y, 0.3)[1]  # noqa: E731
    assert check_grad(f, g, theta, epsilon=1e-6) < 1e-5
    v = rng.normal(size=12)
    numeric = (g(theta + 1e-6 * v) - g(theta - 1e-6 * v)) / 2e-6
    np.testing.assert_allclose(C._dirichlet_hessp(theta, v, x, y, 0.3), numeric, atol=1e-6)
    w, b = C._unpack(C._dirichlet_fit(x, y, 1e9), 3)
    assert np.abs(w - np.diag(np.diag(w))).max() < 1e-6 and np.abs(b).max() < 1e-6
    assert C.fit_dirichlet(p)(p).nll() <= p.nll() + 1e-9
    assert C.fit_dirichlet(p, reg=0.0)(p).nll() <= C.fit_dirichlet(p, reg=1.0)(p).nll() + 1e-9


def test_bad_input_names_the_fix(monkeypatch):
    p = synthetic(50, 7)
    with pytest.raises(ValueError, match="unknown calibrator.*'platt'.*temperature, vector, dirichlet"):
        C.check_names("histogram,platt")
    with pytest.raises(ValueError, match="named twice"):
        C.check_names(["bbq", "bbq"])
    assert C.check_names(" histogram , Isotonic ,") == ["histogram", "isotonic"]
    multi = Predictions(p.logits, (p.logits > 0).astype(float), p.index, p.class_names, "sigmoid", "ml")
    with pytest.raises(ValueError, match="multi-label.*single-label"):
        C.calibrate(["histogram"], multi, multi)
    other = synthetic(50, 8, k=3)
    with pytest.raises(ValueError, match="have 3 classes.*fitted on 4"):
        C.CALIBRATORS["dirichlet"].fit(p)(other)
    with pytest.raises(ValueError, match="reg must be >= 0"):
        C.fit_dirichlet(p, reg=-1.0)
    import harness.extras

    monkeypatch.setattr(harness.extras, "available", lambda module: False)
    with pytest.raises(ValueError, match=r'pip install "het-harness\[calibrate\]"'):
        C.check_names("beta")
    assert C.check_names("temperature,dirichlet") == ["temperature", "dirichlet"]  # no netcal needed


def _run_folder(folder: Path, seed: int) -> Path:
    """A finished run folder by hand (tests/bad_inputs_uncertainty.make_run's layout) with synthetic, miscalibrated
    predictions on the evaluation and held-out splits: every seed on the same examples and labels, with its own
    logit noise."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for name, data_seed in (("predictions.npz", 100), ("heldout_predictions.npz", 200)):
        p = synthetic(400, data_seed, k=3)
        noisy = p.logits + rng.normal(size=p.logits.shape)
        Predictions(noisy, p.targets, p.index, p.class_names, "softmax", str(folder)).save(folder / name)
    (folder / "config.yaml").write_text(f"seed: {seed}\nmodel:\n  head:\n    covariance: none\n")
    (folder / "metrics.json").write_text(json.dumps({"command": "by hand", "eval_data": "synthetic"}))
    return folder


def test_report_with_calibrators_writes_rows_with_intervals(tmp_path):
    from harness.cli import main

    runs = [_run_folder(tmp_path / f"hom_s{seed}", seed) for seed in (0, 1)]
    runner = CliRunner()
    res = runner.invoke(main, ["ensemble", "--members", *map(str, runs), "--out", str(tmp_path / "hom_ens")])
    assert res.exit_code == 0, res.output
    names = "histogram,isotonic,bbq,beta,vector,dirichlet"
    folders = ["report", *map(str, runs), str(tmp_path / "hom_ens"), "--out-root", str(tmp_path)]
    res = runner.invoke(main, [*folders, "--name", "cal", "--no-covariance", "--no-shift", "--calibrators", names])
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "cal" / "report.json").read_text())
    spec = report["calibrators"]
    assert spec["names"] == names.split(",") and spec["eps"] == C.EPS and spec["skipped"] == []
    rows = spec["rows"]
    labels = [e["label"] for e in report["entries"]]
    assert [(r["entry"], r["calibrator"]) for r in rows] == [
        (e, n) for e in labels + ["hom (2 seeds)"] for n in spec["names"]
    ]
    for r in rows:
        for key in ("nll", "ece"):
            d = r["difference"][key]
            assert d["lo"] <= d["mean"] <= d["hi"] and 0 <= d["p"] <= 1
            assert d["method"].startswith("seeds+images" if r["kind"] == "method" else "images only")
            assert d["mean"] == pytest.approx(r["after"][key] - r["before"][key], abs=1e-9)
        assert (
            r["difference"]["ece"]["verdict"] in ("better", "worse")
            or "no detectable difference at n = " in (r["difference"]["ece"]["verdict"])
        )
        if r["calibrator"] in ("vector", "dirichlet", "beta"):  # the synthetic models are badly calibrated
            assert r["difference"]["nll"]["verdict"] == "better", r
    md = (tmp_path / "cal" / "report.md").read_text()
    assert "Post-hoc calibrators fitted on the held-out split" in md and "one-vs-rest per class" in md
    assert "| hom (2 seeds) | dirichlet |" in md
    # a bad name is refused before anything is written
    res = runner.invoke(main, [*folders, "--name", "bad", "--calibrators", "platt"])
    assert res.exit_code != 0 and "unknown calibrator" in res.output and not (tmp_path / "bad").exists()
