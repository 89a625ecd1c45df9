"""OOD-detection and selective-prediction metrics checked against scikit-learn and brute-force definitions."""

import itertools

import numpy as np
import pytest

from harness.uncertainty import ood as O


def _auroc_pairs(a, b):
    """P(OOD score > ID score) + P(tie) / 2 over all pairs."""
    return float(((b[None, :] > a[:, None]) + 0.5 * (b[None, :] == a[:, None])).mean())


def _average_precision(scores, positive):
    """Σ over distinct thresholds t (descending) of (recall_t - recall_prev) * precision_t, with
    everything scoring >= t predicted positive."""
    ap, prev = 0.0, 0.0
    for t in np.unique(scores)[::-1]:
        pred = scores >= t
        recall = (pred & positive).sum() / positive.sum()
        ap += (recall - prev) * (pred & positive).sum() / pred.sum()
        prev = recall
    return ap


def _fpr95(a, b):
    """Keep examples with uncertainty <= t for every t; at the first t keeping >= 95% of ID, the
    share of OOD kept."""
    for t in np.unique(np.r_[a, b]):
        if (a <= t).mean() >= 0.95:
            return float((b <= t).mean())


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_ood_metrics_match_scikit_learn_and_their_definitions(ties, seed):
    from sklearn.metrics import average_precision_score, roc_auc_score

    rng = np.random.default_rng(seed)
    a, b = rng.normal(0, 1, 300), rng.normal(0.8, 1.3, 170)
    if ties:
        a, b = np.round(a * 2) / 2, np.round(b * 2) / 2  # many tied scores, across the two sets too
    got = O.ood_metrics(a, b)
    is_out = np.r_[np.zeros(len(a)), np.ones(len(b))].astype(bool)
    s = np.r_[a, b]
    assert got["auroc"] == pytest.approx(roc_auc_score(is_out, s), abs=1e-9)
    assert got["auroc"] == pytest.approx(_auroc_pairs(a, b), abs=1e-9)
    assert got["aupr_out"] == pytest.approx(average_precision_score(is_out, s), abs=1e-9)
    assert got["aupr_out"] == pytest.approx(_average_precision(s, is_out), abs=1e-9)
    assert got["aupr_in"] == pytest.approx(average_precision_score(~is_out, -s), abs=1e-9)
    assert got["aupr_in"] == pytest.approx(_average_precision(-s, ~is_out), abs=1e-9)
    assert got["fpr95"] == pytest.approx(_fpr95(a, b), abs=1e-9)
    perfect = O.ood_metrics(a, a.max() + 1 + b - b.min())
    assert perfect == pytest.approx({"auroc": 1.0, "aupr_in": 1.0, "aupr_out": 1.0, "fpr95": 0.0}, abs=1e-12)


def _aurc_all_orders(conf, correct):
    """Mean over every order of acceptance consistent with decreasing confidence (all tie-breaks) of
    the mean over k of the error rate among the first k."""
    n, total, count = len(conf), 0.0, 0
    for perm in itertools.permutations(range(n)):
        perm = list(perm)
        if np.all(np.diff(conf[perm]) <= 0):
            total += np.mean(np.cumsum(1 - correct[perm]) / np.arange(1, n + 1))
            count += 1
    return total / count


def test_aurc_matches_a_brute_force_computation():
    rng = np.random.default_rng(0)
    for _ in range(5):  # ties: all tie-breaks enumerated
        conf, correct = rng.integers(0, 3, 7).astype(float), rng.integers(0, 2, 7)
        assert O.aurc(conf, correct) == pytest.approx(_aurc_all_orders(conf, correct), abs=1e-12)
    conf, correct = rng.random(400), rng.random(400) < 0.7  # no ties: one order
    order = np.argsort(-conf)
    brute = np.mean([(1 - correct[order[:k]]).mean() for k in range(1, 401)])
    assert O.aurc(conf, correct) == pytest.approx(brute, abs=1e-12)
    cov, risk = O.risk_coverage(conf, correct)
    assert cov[-1] == 1.0 and risk[-1] == pytest.approx(1 - correct.mean())
    ideal = np.where(correct, 1.0, 0.0) + 0.1 * conf  # every right answer more confident than any wrong one
    assert O.aurc(ideal, correct) < O.aurc(conf, correct) and O.risk_coverage(ideal, correct)[1][0] == 0


def test_mutual_information_is_nonnegative_and_zero_for_identical_members():
    rng = np.random.default_rng(0)
    members = np.stack([np.log(rng.dirichlet(np.ones(6) * 0.5, 200)) for _ in range(4)])
    mean_lp = np.log(np.exp(members).mean(0))
    mi = O.mutual_information(mean_lp, O.expected_entropy(members))
    assert mi.shape == (200,) and (mi >= 0).all() and mi.mean() > 0.05
    kl = np.mean([(np.exp(m) * (m - mean_lp)).sum(1) for m in members], axis=0)  # MI = mean KL to the mean
    np.testing.assert_allclose(mi, kl, atol=1e-12)
    same = np.stack([members[0]] * 3)
    np.testing.assert_allclose(O.mutual_information(members[0], O.expected_entropy(same)), 0.0, atol=1e-12)
    scores = O.uncertainty_scores(mean_lp, O.expected_entropy(members))
    assert set(scores) == set(O.SCORES) and (scores["one_minus_max_prob"] >= 0).all()


def test_fpr_at_tpr_level_domain():  # audit7 C17: level in (0, 1]; 1.0 keeps every in-distribution example
    from harness.uncertainty.ood import fpr_at_tpr

    assert fpr_at_tpr(np.arange(5.0), np.arange(5.0) + 10, level=1.0) == 0.0
    for level in (0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"level must be a true-positive rate in \(0, 1\]"):
            fpr_at_tpr(np.arange(5.0), np.arange(5.0), level=level)
