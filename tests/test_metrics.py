"""Metrics against independent implementations (scikit-learn, netcal) on random and adversarial inputs."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, brier_score_loss, log_loss

from harness import metrics as M


def _random_case(n, k, seed, sharp=1.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, k)) * sharp
    return M.log_softmax(logits), rng.integers(0, k, n)


def _adversarial_cases():
    """(log_probs, labels) with ties, exact 0/1 probabilities, one class present, two classes."""
    ties = np.log(np.full((6, 4), 0.25))
    with np.errstate(divide="ignore"):
        exact = np.log(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]))
    one_class = _random_case(50, 5, 1)[0]
    two = _random_case(80, 2, 2, sharp=3.0)[0]
    return [(ties, np.array([0, 1, 2, 3, 0, 1])), (exact, np.array([0, 1, 0, 0])),
            (one_class, np.zeros(50, dtype=int)), (two, np.random.default_rng(3).integers(0, 2, 80))]


CASES = [_random_case(500, 10, s, sharp) for s, sharp in ((0, 1.0), (1, 4.0))] + _adversarial_cases()


def _netcal_ece(log_probs, labels, bins=15):
    """netcal's ECE in its binary top-label mode (protocol.md Sec. 6): X = confidence, y = correct."""
    from netcal.metrics import ECE

    conf, correct = M.top_label(log_probs, labels)
    return ECE(bins=bins).measure(conf, correct.astype(int))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_independent_implementations(case):
    lp, y = CASES[case]
    k = lp.shape[1]
    with np.errstate(divide="ignore"):
        finite = np.isfinite(lp[np.arange(len(y)), y]).all()
    if finite:
        assert M.nll(lp, y) == pytest.approx(log_loss(y, np.exp(lp), labels=list(range(k))), abs=1e-6)
    if k == 2:
        assert M.brier(lp, y) == pytest.approx(2 * brier_score_loss(y, np.exp(lp[:, 1])), abs=1e-6)
    onehot = np.eye(k)[y]
    assert M.brier(lp, y) == pytest.approx(((np.exp(lp) - onehot) ** 2).sum(1).mean(), abs=1e-12)
    assert M.ece(lp, y) == pytest.approx(_netcal_ece(lp, y), abs=1e-6)


def test_ece_definition_on_a_hand_computed_case():
    # confidences 0.9 (right), 0.9 (wrong), 0.5 (right), 1.0 (right) -> bins 13, 13, 7, 14
    p = np.array([[0.9, 0.1], [0.9, 0.1], [0.5, 0.5], [1.0, 0.0]])
    y = np.array([0, 1, 0, 0])
    with np.errstate(divide="ignore"):
        lp = np.log(p)
    want = (2 / 4) * abs(0.5 - 0.9) + (1 / 4) * abs(1 - 0.5) + (1 / 4) * abs(1 - 1.0)
    assert M.ece(lp, y) == pytest.approx(want)
    assert M.mce(lp, y) == pytest.approx(0.5)
    bins = M.reliability_bins(*M.top_label(lp, y))
    assert bins["count"].sum() == 4 and bins["count"][13] == 2 and bins["count"][14] == 1


def test_adaptive_ece_matches_netcal_equal_mass_bins():
    from netcal.metrics import ECE

    lp, y = _random_case(600, 8, 5, sharp=2.0)
    conf, correct = M.top_label(lp, y)
    ref = ECE(bins=15, equal_intervals=False).measure(conf, correct.astype(int))
    assert M.adaptive_ece(lp, y) == pytest.approx(ref, abs=0.01)  # netcal's mass bins split ties differently


def test_topk_accuracy_and_label_checks():
    lp = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]]))
    assert M.accuracy(lp, [1, 0], 1) == 0.0 and M.accuracy(lp, [1, 0], 2) == 0.5 and M.accuracy(lp, [1, 0], 5) == 1.0
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        M.nll(lp, [0, 3])


@pytest.mark.parametrize("seed", range(3))
def test_multilabel_metrics_against_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    t = (rng.random((200, 12)) < 0.2).astype(float)
    t[:, 5] = 0  # a class with no positives
    z = rng.normal(size=(200, 12)) + 2 * t
    z[:, 3] = np.round(z[:, 3])  # ties
    assert M.micro_ap(z, t) == pytest.approx(average_precision_score(t, z, average="micro"), abs=1e-6)
    keep = t.sum(0) > 0
    assert M.macro_map(z, t) == pytest.approx(average_precision_score(t[:, keep], z[:, keep], average="macro"),
                                              abs=1e-6)
    rows = t.sum(1) > 0
    p = 1 / (1 + np.exp(-z))
    want = -(t * np.log(p) + (1 - t) * np.log(1 - p)).sum(1)[rows].mean()
    assert M.sigmoid_nll(z, t) == pytest.approx(want, abs=1e-6)
    assert M.prec_at_1(z, t) == pytest.approx(t[rows][np.arange(rows.sum()), z[rows].argmax(1)].mean())
    conf = p[rows].max(1)
    correct = t[rows][np.arange(rows.sum()), z[rows].argmax(1)]
    from netcal.metrics import ECE

    assert M.multilabel_top_label_ece(z, t) == pytest.approx(ECE(bins=15).measure(conf, correct.astype(int)),
                                                             abs=1e-6)
