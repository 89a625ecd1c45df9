"""Ensembles, temperature scaling, covariance analysis and reports."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from harness.uncertainty import metrics as M
from harness.cli import main
from harness.config import load_config
from harness.uncertainty.covariance import CovarianceAccumulator, confusion_ranks, top_pairs
from harness.uncertainty.calibration import fit_temperature, scale
from harness.uncertainty.ensembles import average, check_compatible, summarize
from harness.uncertainty.predictions import Predictions
from harness.heads import HeteroscedasticHead
from upstream.config import UpstreamConfig
from upstream.train import run

CONFIGS = Path(__file__).resolve().parents[1] / "upstream" / "configs"


def _preds(seed, n=300, k=6, link="softmax", sharp=2.0, source=None):
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, k, n) if link == "softmax" else (rng.random((n, k)) < 0.3).astype(np.float32)
    logits = rng.normal(size=(n, k)) * sharp
    return Predictions(logits, targets, np.arange(n), [f"c{i}" for i in range(k)], link,
                       source or f"m{seed}")


def _members(link, m=4):
    base = _preds(0, link=link)
    rng = np.random.default_rng(1)
    return [Predictions(base.logits + rng.normal(size=base.logits.shape) * 1.5, base.targets, base.index,
                        base.class_names, link, f"m{i}") for i in range(m)]


@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
def test_ensemble_of_identical_members_equals_the_member(link):
    one = _preds(0, link=link)
    ens = average([one, one, one])
    np.testing.assert_allclose(ens.log_probs(), one.log_probs(), atol=1e-10)
    for k, v in one.metrics().items():
        assert ens.metrics()[k] == pytest.approx(v, abs=1e-10), k
    s = summarize([one, one])
    assert s["ensemble_gain"] == pytest.approx(0.0, abs=1e-10) and s["disagreement"] == 0.0
    assert s["mean_kl_to_ensemble"] == pytest.approx(0.0, abs=1e-10)


@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
@pytest.mark.parametrize("seed", range(5))
def test_ensemble_nll_never_exceeds_mean_member_nll(link, seed):
    rng = np.random.default_rng(seed)
    base = _preds(seed, link=link)
    members = [Predictions(base.logits + rng.normal(size=base.logits.shape) * 3, base.targets, base.index,
                           base.class_names, link, f"m{i}") for i in range(int(rng.integers(2, 6)))]
    s = summarize(members)
    assert s["ensemble_nll"] <= s["gibbs_ce"] + 1e-12
    assert s["gibbs_ce"] == pytest.approx(np.mean([m.nll() for m in members]))
    assert s["mean_kl_to_ensemble"] >= 0 and 0 <= s["disagreement"] <= 1


def test_softmax_ensemble_is_the_mean_probability():
    members = _members("softmax", 3)
    want = np.mean([np.exp(M.log_softmax(m.logits)) for m in members], axis=0)
    np.testing.assert_allclose(np.exp(average(members).logits), want, atol=1e-12)
    # mean KL to the ensemble = mean member entropy gap (mutual information)
    ent = lambda lp: -(np.exp(lp) * lp).sum(1).mean()  # noqa: E731
    mi = ent(np.log(want)) - np.mean([ent(M.log_softmax(m.logits)) for m in members])
    assert summarize(members)["mean_kl_to_ensemble"] == pytest.approx(mi, abs=1e-10)


def test_mismatched_members_are_refused():
    a = _preds(0)
    with pytest.raises(ValueError, match="different label space"):
        check_compatible([a, _preds(0, k=7)])
    with pytest.raises(ValueError, match="link"):
        check_compatible([a, Predictions(a.logits, a.targets, a.index, a.class_names, "sigmoid", "s")])
    with pytest.raises(ValueError, match="different evaluation data"):
        check_compatible([a, _preds(0, n=200)])


def test_temperature_scaling_recovers_an_overconfident_scale():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4000, 5)) * 2
    probs = np.exp(M.log_softmax(logits))
    targets = np.array([rng.choice(5, p=p) for p in probs])  # calibrated at T = 1
    over = Predictions(logits * 3, targets, np.arange(4000), list("abcde"), "softmax")
    t = fit_temperature(over)
    assert t == pytest.approx(3.0, rel=0.1)
    assert scale(over, t).nll() < over.nll() and scale(over, t).metrics()["ece"] < over.metrics()["ece"]


def test_temperature_fitting_follows_the_multilabel_row_rule():
    """Examples without a positive label are dropped from temperature fitting, as from every
    multi-label metric: appending some does not move T."""
    rng = np.random.default_rng(0)
    t = (rng.random((400, 6)) < 0.3).astype(np.float32)
    t[t.sum(1) == 0, 0] = 1
    z = (rng.normal(size=(400, 6)) + 2 * t - 1) * 3
    base = fit_temperature(Predictions(z, t, np.arange(400), list("abcdef"), "sigmoid"))
    extra = Predictions(np.r_[z, rng.normal(size=(200, 6)) * 3], np.r_[t, np.zeros((200, 6), np.float32)],
                        np.arange(600), list("abcdef"), "sigmoid")
    assert fit_temperature(extra) == pytest.approx(base, rel=1e-6)
    with pytest.raises(ValueError, match="none of the 3 examples has a positive label"):
        fit_temperature(Predictions(z[:3], np.zeros((3, 6)), np.arange(3), list("abcdef"), "sigmoid"))


@pytest.mark.parametrize("kw", [dict(covariance="low_rank", num_factors=2), dict(covariance="diagonal"),
                                dict(covariance="parameter_efficient", num_factors=2),
                                dict(covariance="low_rank", num_factors=2, noise_space="pre_logits"),
                                dict(covariance="low_rank", num_factors=2, diag_noise="shared_scalar")])
def test_average_covariance_equals_the_dense_mean(kw):
    torch.manual_seed(0)
    head = HeteroscedasticHead(5, 7, **kw)
    acc = CovarianceAccumulator(head, block=3)
    xs = [torch.randn(4, 5), torch.randn(3, 5)]
    for x in xs:
        acc.update(x)
    dense = torch.cat([head.covariance(x).detach() for x in xs]).double().mean(0).numpy()
    np.testing.assert_allclose(acc.mean(), dense, rtol=1e-5, atol=1e-6)


def test_top_pairs_match_brute_force():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(30, 30))
    sigma = a @ a.T
    got = top_pairs(sigma, [str(i) for i in range(30)], k=5, block=7)
    iu = np.triu_indices(30, 1)
    order = np.argsort(-np.abs(sigma[iu]))[:5]
    assert [(p["class_a"], p["class_b"]) for p in got] == [(str(iu[0][o]), str(iu[1][o])) for o in order]


def test_confusion_rank_of_the_most_covarying_class_is_one():
    head = HeteroscedasticHead(2, 4, covariance="low_rank", num_factors=1)
    with torch.no_grad():
        head.scale.weight.zero_()
        head.scale.bias.copy_(torch.tensor([1.0, 0.9, 0.0, 0.1]))  # class 0 covaries most with class 1
    feats = torch.zeros(2, 2)
    het = np.array([[5.0, 0, 0, 0], [5.0, 0, 0, 0]])
    hom = np.array([[0, 5.0, 0, 0], [0, 0, 5.0, 0]])  # wrong: class 1 (rank 1), class 2 (rank 3)
    ranks = confusion_ranks(head, [(feats, np.array([0, 0]), np.array([0, 1]))], het, hom, np.array([0, 1]))
    assert ranks.tolist() == [1, 3]


# ------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def digits_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    dirs = {}
    for method in ("hom", "het"):
        for seed in (0, 1):
            cfg = load_config(UpstreamConfig, CONFIGS / f"digits_{method}.yaml", [
                "train.epochs=2", "model.head.train_mc_samples=8", "model.head.eval_mc_samples=16",
                f"seed={seed}", f"output_dir={root / f'{method}_s{seed}'}"])
            dirs[(method, seed)] = run(cfg, progress=False)
    return root, dirs


def test_ensemble_and_report_commands(digits_runs, tmp_path):
    root, dirs = digits_runs
    runner = CliRunner()
    for method in ("hom", "het"):
        res = runner.invoke(main, ["ensemble", "--members", str(dirs[(method, 0)]), str(dirs[(method, 1)]),
                                   "--out", str(root / f"{method}_ens")])
        assert res.exit_code == 0, res.output
        assert "Gibbs CE" in res.output
    spec = json.loads((root / "het_ens" / "ensemble.json").read_text())
    assert spec["method"] == "het" and spec["summary"]["size"] == 2
    assert (root / "het_ens" / "heldout_predictions.npz").is_file()
    # re-predicting from the checkpoints gives the saved predictions
    res = runner.invoke(main, ["ensemble", "--members", str(dirs[("het", 0)]), str(dirs[("het", 1)]),
                               "--from-checkpoints", "--out", str(tmp_path / "ckpt_ens")])
    assert res.exit_code == 0, res.output
    np.testing.assert_allclose(Predictions.load(tmp_path / "ckpt_ens").logits,
                               Predictions.load(root / "het_ens").logits, atol=1e-4)

    res = runner.invoke(main, ["report", *(str(d) for d in dirs.values()), str(root / "hom_ens"),
                               str(root / "het_ens"), "--name", "digits_test", "--out-root", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "digits_test"
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "harness.report/1" and len(report["entries"]) == 6
    assert {e["kind"] for e in report["entries"]} == {"single", "ensemble"}
    assert all("temperature_scaling" in e for e in report["entries"])
    cov = report["covariance"]
    assert len(cov["top_pairs"]) == 10 and cov["num_examples"] == 359 and cov["hom_run"]
    assert cov["num_het_right_hom_wrong"] == len(cov["ranks"])
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "Table 7" in md and "Gibbs CE" in md and "![ranks](covariance_ranks.png)" in md
    assert cov["tempered"] is False and cov["temperature"] > 0
    assert "Σ is not tempered" in md and "| correlation Σ̄\\_ab / sqrt(Σ̄\\_aa Σ̄\\_bb) |" in md
    assert "that example's own covariance Σ(x)" in md
    assert page.count("data:image/png;base64,") == len(report["figures"]["reliability"]) + 1
    assert "Written by" in page and "torch" in page


def test_report_refuses_runs_on_different_data(digits_runs, tmp_path):
    root, dirs = digits_runs
    other = tmp_path / "other"
    shutil.copytree(dirs[("hom", 0)], other)
    p = Predictions.load(other)
    Predictions(p.logits[:100], p.targets[:100], p.index[:100], p.class_names, p.link).save(other / "predictions.npz")
    res = CliRunner().invoke(main, ["report", str(dirs[("hom", 0)]), str(other), "--out-root", str(tmp_path)])
    assert res.exit_code != 0 and "other data" in res.output
    res = CliRunner().invoke(main, ["ensemble", "--members", str(dirs[("hom", 0)]), str(other), "--out",
                                    str(tmp_path / "e")])
    assert res.exit_code != 0 and "different evaluation data" in res.output


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed")
def test_report_html_renders_in_headless_chromium(digits_runs, tmp_path):
    root, dirs = digits_runs
    res = CliRunner().invoke(main, ["report", str(dirs[("hom", 0)]), str(dirs[("het", 0)]), "--name", "r",
                                    "--out-root", str(tmp_path), "--screenshot"])
    assert res.exit_code == 0, res.output
    from PIL import Image

    img = np.asarray(Image.open(tmp_path / "r" / "report.png").convert("L"))
    assert img.shape[0] > 1000 and img.std() > 10  # not a blank page: tables and figures drawn
