"""Deep ensembles (log-space average of member probabilities) and post-hoc temperature scaling."""

import numpy as np
import pytest

from harness.uncertainty import metrics as M
from harness.uncertainty.calibration import fit_temperature, scale
from harness.uncertainty.ensembles import average, check_compatible, summarize
from harness.uncertainty.predictions import Predictions


def _preds(seed, n=300, k=6, link="softmax", sharp=2.0, source=None):
    rng = np.random.default_rng(seed)
    targets = rng.integers(0, k, n) if link == "softmax" else (rng.random((n, k)) < 0.3).astype(np.float32)
    logits = rng.normal(size=(n, k)) * sharp
    return Predictions(logits, targets, np.arange(n), [f"c{i}" for i in range(k)], link, source or f"m{seed}")


def _members(link, m=4):
    base = _preds(0, link=link)
    rng = np.random.default_rng(1)
    return [
        Predictions(
            base.logits + rng.normal(size=base.logits.shape) * 1.5,
            base.targets,
            base.index,
            base.class_names,
            link,
            f"m{i}",
        )
        for i in range(m)
    ]


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
    members = [
        Predictions(
            base.logits + rng.normal(size=base.logits.shape) * 3,
            base.targets,
            base.index,
            base.class_names,
            link,
            f"m{i}",
        )
        for i in range(int(rng.integers(2, 6)))
    ]
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
    extra = Predictions(
        np.r_[z, rng.normal(size=(200, 6)) * 3],
        np.r_[t, np.zeros((200, 6), np.float32)],
        np.arange(600),
        list("abcdef"),
        "sigmoid",
    )
    assert fit_temperature(extra) == pytest.approx(base, rel=1e-6)
    with pytest.raises(ValueError, match="none of the 3 examples has a positive label"):
        fit_temperature(Predictions(z[:3], np.zeros((3, 6)), np.arange(3), list("abcdef"), "sigmoid"))
