"""Metrics against independent implementations (scikit-learn, netcal) on random and adversarial inputs."""

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, brier_score_loss, log_loss

from harness.uncertainty import metrics as M
from harness.uncertainty import multilabel as ML


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
    return [
        (ties, np.array([0, 1, 2, 3, 0, 1])),
        (exact, np.array([0, 1, 0, 0])),
        (one_class, np.zeros(50, dtype=int)),
        (two, np.random.default_rng(3).integers(0, 2, 80)),
    ]


CASES = [_random_case(500, 10, s, sharp) for s, sharp in ((0, 1.0), (1, 4.0))] + _adversarial_cases()


def _netcal_ece(log_probs, labels, bins=15):
    """netcal's ECE in its binary top-label mode (robustness_metrics' ECE): X = confidence, y = correct."""
    ECE = pytest.importorskip("netcal.metrics").ECE

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


def test_adaptive_ece_matches_netcal_equal_mass_bins_on_distinct_confidences():
    ECE = pytest.importorskip("netcal.metrics").ECE

    lp, y = _random_case(600, 8, 5, sharp=2.0)
    conf, correct = M.top_label(lp, y)
    ref = ECE(bins=15, equal_intervals=False).measure(conf, correct.astype(int))
    assert M.adaptive_ece(lp, y) == pytest.approx(ref, abs=1e-9)


def test_adaptive_ece_differs_from_netcal_on_tied_confidences_as_documented():
    """Tied confidences: our groups split ties to stay equal-sized; netcal's quantile edges keep each
    tie in one bin. The docstring must say so rather than claim equality."""
    ECE = pytest.importorskip("netcal.metrics").ECE

    rng = np.random.default_rng(1)
    conf = np.round(rng.uniform(0.5, 1.0, 600), 2)
    correct = (rng.random(600) < conf).astype(int)
    with np.errstate(divide="ignore"):
        lp = np.log(np.stack([conf, 1 - conf], 1))
    y = 1 - correct  # class 0 is the top label
    ours, ref = M.adaptive_ece(lp, y), ECE(bins=15, equal_intervals=False).measure(conf, correct)
    assert abs(ours - ref) > 0.01
    assert np.ptp(M.reliability_bins(conf, correct, adaptive=True)["count"]) <= 1  # equal mass
    doc = " ".join(M.adaptive_ece.__doc__.split())
    assert "Not identical to netcal" in doc and "ties" in doc


def test_topk_accuracy_and_label_checks():
    lp = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]]))
    assert M.accuracy(lp, [1, 0], 1) == 0.0 and M.accuracy(lp, [1, 0], 2) == 0.5 and M.accuracy(lp, [1, 0], 3) == 1.0
    with pytest.raises(ValueError, match=r"k must be a whole number in \[1, K\] \(K = 3 classes\), got k=5"):
        M.accuracy(lp, [1, 0], 5)  # audit7 C06: was a meaningless 1.0
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        M.nll(lp, [0, 3])


@pytest.mark.parametrize("seed", range(3))
def test_multilabel_metrics_against_scikit_learn(seed):
    """On the examples with a positive label (the multi-label row rule), every metric equals the
    independent implementation; macro mAP reports the class it left out."""
    rng = np.random.default_rng(seed)
    t = (rng.random((200, 12)) < 0.2).astype(float)
    t[:, 5] = 0  # a class with no positives
    z = rng.normal(size=(200, 12)) + 2 * t
    z[:, 3] = np.round(z[:, 3])  # ties
    rows = t.sum(1) > 0
    assert not rows.all()  # some examples without a positive label
    assert ML.micro_ap(z, t) == pytest.approx(average_precision_score(t[rows], z[rows], average="micro"), abs=1e-6)
    keep = t.sum(0) > 0
    want = average_precision_score(t[rows][:, keep], z[rows][:, keep], average="macro")
    assert ML.macro_map(z, t) == pytest.approx(want, abs=1e-6)
    value, skipped = ML.macro_map(z, t, return_skipped=True)
    assert value == pytest.approx(want, abs=1e-6) and skipped == 1
    p = 1 / (1 + np.exp(-z))
    want = -(t * np.log(p) + (1 - t) * np.log(1 - p)).sum(1)[rows].mean()
    assert ML.sigmoid_nll(z, t) == pytest.approx(want, abs=1e-6)
    assert ML.prec_at_1(z, t) == pytest.approx(t[rows][np.arange(rows.sum()), z[rows].argmax(1)].mean())
    conf = p[rows].max(1)
    correct = t[rows][np.arange(rows.sum()), z[rows].argmax(1)]
    ECE = pytest.importorskip("netcal.metrics").ECE

    assert ML.multilabel_top_label_ece(z, t) == pytest.approx(ECE(bins=15).measure(conf, correct.astype(int)), abs=1e-6)


def test_multilabel_rule_examples_without_positives_change_no_metric():
    """One rule: appending examples with no positive label changes no multi-label metric."""
    rng = np.random.default_rng(4)
    t = (rng.random((150, 9)) < 0.25).astype(float)
    t[t.sum(1) == 0, 0] = 1  # every example labelled
    z = rng.normal(size=(150, 9)) + 2 * t
    z_extra, t_extra = np.r_[z, rng.normal(size=(40, 9)) * 3], np.r_[t, np.zeros((40, 9))]
    base = ML.multilabel_metrics(z, t)
    assert ML.multilabel_metrics(z_extra, t_extra) == pytest.approx(base, abs=1e-12)
    for name, fn in (
        ("prec@1", ML.prec_at_1),
        ("sigmoid_nll", ML.sigmoid_nll),
        ("micro_ap", ML.micro_ap),
        ("macro_map", ML.macro_map),
        ("ece", ML.multilabel_top_label_ece),
    ):
        assert fn(z_extra, t_extra) == pytest.approx(base[name], abs=1e-12), name
    conf, correct = ML.multilabel_top_label(z_extra, t_extra)
    assert len(conf) == len(correct) == 150


# ---------------------------------------------------------------------------------- input checks
LP = M.log_softmax(np.random.default_rng(0).normal(size=(20, 4)))
Y = np.random.default_rng(1).integers(0, 4, 20)
Z = np.random.default_rng(2).normal(size=(20, 4))
T = np.eye(4)[Y]
CONF, CORR = M.top_label(LP, Y)
SINGLE = [
    M.accuracy,
    M.nll,
    M.brier,
    M.top_label,
    M.ece,
    M.mce,
    M.adaptive_ece,
    M.classification_metrics,
    M.classwise_ece,
    M.rms_calibration_error,
]
MULTI = [
    ML.prec_at_1,
    ML.sigmoid_nll,
    ML.micro_ap,
    ML.macro_map,
    ML.multilabel_top_label,
    ML.multilabel_top_label_ece,
    ML.multilabel_metrics,
    ML.labelled_examples,
]
FORECASTS = [M.calibration_error, M.reliability_bins]


def _with(a, i, v):
    a = np.array(a, dtype=float)
    a.flat[i] = v
    return a


BAD_SINGLE = {
    "not normalised": ((LP - 0.05, Y), r"normalised log-probabilities.*row 0.*sum to less than 1"),
    "raw logits": ((Z, Y), r"look like raw logits: pass harness.uncertainty.metrics.log_softmax"),
    "probabilities": ((np.exp(LP), Y), r"raw logits|normalised"),
    "one row off": ((_with(LP, 9, 0.5), Y), r"1 of 20 rows do not \(first: row 2, Σ_k p_k = 2\.529\)"),
    "too few labels": ((LP, Y[:-1]), r"19 labels for 20 rows"),
    "too many labels": ((LP, np.r_[Y, 0]), r"21 labels for 20 rows"),
    "float labels": ((LP, Y.astype(float)), r"integer class indices, got dtype float64.*astype\(int\)"),
    "bool labels": ((LP[:, :2] - np.logaddexp.reduce(LP[:, :2], 1, keepdims=True), Y > 1), r"dtype bool"),
    "label out of range": ((LP, np.r_[Y[:-1], 4]), r"labels must lie in \[0, 4\)"),
    "NaN": ((_with(LP, 13, np.nan), Y), r"NaN in 1 of 20 rows \(first: row 3\)"),
    "N = 0": ((np.zeros((0, 4)), np.zeros(0, int)), r"no examples \(N = 0\)"),
    "1-D scores": ((LP[0], Y[:1]), r"\[N, K\]"),
    "multi-hot labels": ((LP, T), r"1-D array of class indices"),
}
BAD_MULTI = {
    "soft targets": ((Z, _with(T, 5, 0.5)), r"multi-hot 0/1 values, got 0.5 at \[1, 1\]"),
    "class indices": ((Z, Y), r"same \[N, K\] shape"),
    "NaN logits": ((_with(Z, 7, np.nan), T), r"NaN in 1 of 20 rows \(first: row 1\)"),
    "NaN targets": ((Z, _with(T, 7, np.nan)), r"multi-hot 0/1"),
    "N = 0": ((np.zeros((0, 4)), np.zeros((0, 4))), r"no examples \(N = 0\)"),
    "no positive label": ((Z, np.zeros_like(T)), r"none of the 20 examples has a positive label"),
}
BAD_FORECASTS = {
    "confidence above 1": ((_with(CONF, 3, 1.2), CORR), r"\[0, 1\].*first: \[3\] = 1.2"),
    "negative confidence": ((_with(CONF, 0, -0.1), CORR), r"\[0, 1\]"),
    "NaN confidence": ((_with(CONF, 0, np.nan), CORR), r"\[0, 1\].*nan"),
    "correct not 0/1": ((CONF, _with(CORR, 2, 0.5)), r"correct must be 0/1"),
    "lengths differ": ((CONF, CORR[:-1]), r"both be \[N\]"),
    "N = 0": ((np.zeros(0), np.zeros(0)), r"no examples \(N = 0\)"),
}


@pytest.mark.parametrize("fn", SINGLE, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", BAD_SINGLE, ids=str)
def test_single_label_metrics_refuse_bad_inputs(fn, case):
    args, match = BAD_SINGLE[case]
    with pytest.raises(ValueError, match=match):
        fn(*args)


@pytest.mark.parametrize("fn", MULTI, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", BAD_MULTI, ids=str)
def test_multilabel_metrics_refuse_bad_inputs(fn, case):
    args, match = BAD_MULTI[case]
    with pytest.raises(ValueError, match=match):
        fn(*args)


@pytest.mark.parametrize("fn", FORECASTS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", BAD_FORECASTS, ids=str)
def test_forecast_metrics_refuse_bad_inputs(fn, case):
    args, match = BAD_FORECASTS[case]
    with pytest.raises(ValueError, match=match):
        fn(*args)


def test_valid_edge_inputs_are_still_scored():
    import torch

    # float32 round-off in the normalisation, exact zero probabilities, torch tensors, small int dtypes
    assert M.nll(LP.astype(np.float32), Y) == pytest.approx(M.nll(LP, Y), abs=1e-6)
    with np.errstate(divide="ignore"):
        exact = np.log(np.array([[1.0, 0.0], [0.3, 0.7]]))
    assert M.nll(exact, np.array([0, 1], dtype=np.uint8)) == pytest.approx(-np.log(0.7) / 2)
    assert M.nll(exact, np.array([1, 1])) == np.inf  # a zero probability on the label
    assert M.classification_metrics(torch.tensor(LP), torch.tensor(Y)) == pytest.approx(M.classification_metrics(LP, Y))
    assert M.calibration_error(CONF, CORR.astype(bool)) == pytest.approx(M.ece(LP, Y))
    z = Z.copy()
    z[0, Y[0]], z[1, (Y[1] + 1) % 4] = np.inf, -np.inf  # certain forecasts
    assert np.isfinite(list(ML.multilabel_metrics(z, T).values())).all()
    assert ML.multilabel_metrics(Z, T.astype(bool)) == pytest.approx(ML.multilabel_metrics(Z, T))


# ------------------------------------------------------------------ classwise ECE and RMS calibration error
def _random_probs(n, k, seed, sharp):
    lp, y = _random_case(n, k, seed, sharp)
    return lp, y


@pytest.mark.parametrize("seed,k,sharp,bins", [(0, 10, 1.0, 15), (1, 10, 4.0, 15), (2, 3, 2.0, 10), (3, 2, 0.5, 5)])
def test_rms_calibration_error_equals_torchmetrics_l2(seed, k, sharp, bins):
    """RMS-CE against torchmetrics' MulticlassCalibrationError(norm='l2') (equal-width bins), and ECE against its l1."""
    import torch

    MulticlassCalibrationError = pytest.importorskip("torchmetrics.classification").MulticlassCalibrationError

    lp, y = _random_probs(600, k, seed, sharp)
    probs, target = torch.from_numpy(np.exp(lp)), torch.from_numpy(y)
    for norm, ours in (("l2", M.rms_calibration_error(lp, y, bins)), ("l1", M.ece(lp, y, bins))):
        theirs = MulticlassCalibrationError(num_classes=k, n_bins=bins, norm=norm)(probs, target)
        assert ours == pytest.approx(float(theirs), abs=1e-6), norm  # torchmetrics computes in float32


@pytest.mark.parametrize("seed,k,sharp", [(0, 10, 1.0), (1, 5, 4.0), (2, 2, 2.0)])
def test_classwise_ece_is_the_mean_binary_ece_of_torchmetrics_over_classes(seed, k, sharp):
    """Kull et al.'s definition: the ECE of p_j as a forecast of y == j, averaged over classes; each class's term is
    torchmetrics' BinaryCalibrationError(norm='l1') on (p_j, y == j)."""
    import torch

    BinaryCalibrationError = pytest.importorskip("torchmetrics.classification").BinaryCalibrationError

    lp, y = _random_probs(500, k, seed, sharp)
    probs = torch.from_numpy(np.exp(lp))
    per_class = [
        float(BinaryCalibrationError(n_bins=15, norm="l1")(probs[:, j], torch.from_numpy((y == j).astype(int))))
        for j in range(k)
    ]
    assert M.classwise_ece(lp, y) == pytest.approx(np.mean(per_class), abs=1e-6)


def test_calibration_errors_on_hand_computed_cases():
    # two bins filled (B = 2): conf 0.8 (acc 1/2) on 2 examples and 0.3 (acc 0) on 1... in top-label form
    lp = np.log(np.array([[0.8, 0.2], [0.8, 0.2], [0.3, 0.7]]))
    y = np.array([0, 1, 0])
    # top label: conf 0.8, 0.8, 0.7; correct 1, 0, 0 -> one bin [0.5, 1): acc 1/3, conf 0.7667
    gap = abs(1 / 3 - (0.8 + 0.8 + 0.7) / 3)
    assert M.rms_calibration_error(lp, y, num_bins=2) == pytest.approx(gap)  # one filled bin: RMS = ECE
    assert M.ece(lp, y, num_bins=2) == pytest.approx(gap)
    # classwise, B = 2: class 0 forecasts 0.8, 0.8 (bin 1; freq 1/2) and 0.3 (bin 0; freq 1):
    #   (2/3)|0.5 - 0.8| + (1/3)|1 - 0.3| = 0.2 + 0.2333; class 1 forecasts 0.2, 0.2 (bin 0, freq 1/2) and 0.7
    #   (bin 1, freq 0): (2/3)|0.5 - 0.2| + (1/3)|0 - 0.7| = 0.2 + 0.2333
    assert M.classwise_ece(lp, y, num_bins=2) == pytest.approx((2 / 3) * 0.3 + (1 / 3) * 0.7)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_rms_is_at_least_ece_and_classwise_ece_is_bounded(case):
    lp, y = CASES[case]
    rms, top, cw = M.rms_calibration_error(lp, y), M.ece(lp, y), M.classwise_ece(lp, y)
    assert top - 1e-12 <= rms <= 1 and 0 <= cw <= 1


def test_calibrated_forecasts_have_small_errors_and_overconfident_ones_large():
    """Labels drawn from the forecasts themselves are calibrated (errors near 0); the same labels scored against
    sharpened forecasts are not."""
    rng = np.random.default_rng(0)
    lp = M.log_softmax(rng.normal(size=(20000, 4)))
    y = np.array([rng.choice(4, p=p) for p in np.exp(lp)])
    assert M.classwise_ece(lp, y) < 0.01 and M.rms_calibration_error(lp, y) < 0.02
    sharp = M.log_softmax(lp * 4)
    assert M.classwise_ece(sharp, y) > 0.05 and M.rms_calibration_error(sharp, y) > 0.1


def test_the_new_metrics_are_registered_without_changing_the_suites():
    lp, y = CASES[0]
    assert "classwise_ece" not in M.classification_metrics(lp, y) and "rms_ce" not in M.classification_metrics(lp, y)
    assert not M.METRICS["classwise_ece"].higher_is_better and not M.METRICS["rms_ce"].higher_is_better


def test_num_bins_bound_is_inclusive():  # audit7 C04: one bound, MAX_BINS, for every calibration error
    from harness.uncertainty.checks import MAX_BINS

    lp = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]]))
    assert 0.0 <= M.ece(lp, [0, 2], num_bins=MAX_BINS) <= 1.0
    for fn in (M.ece, M.mce, M.adaptive_ece, M.rms_calibration_error, M.classwise_ece):
        with pytest.raises(ValueError, match=rf"num_bins must be a whole number in \[1, {MAX_BINS}\]"):
            fn(lp, [0, 2], num_bins=MAX_BINS + 1)


def test_log_softmax_refuses_plus_inf_and_keeps_nan_propagation():
    """audit8 M26: +inf logits (softmax undefined) and rows of only -inf are refused; NaN propagates as documented."""
    with pytest.raises(ValueError, match=r"logits hold \+inf"):
        M.log_softmax([[np.inf, 1.0]])
    with pytest.raises(ValueError, match="a row of only -inf"):
        M.log_softmax([[-np.inf, -np.inf], [0.0, 1.0]])
    np.testing.assert_array_equal(M.log_softmax([[-np.inf, 1.0]]), [[-np.inf, 0.0]])
    assert np.isnan(M.log_softmax([[np.nan, 1.0]])).all()


def test_half_precision_tensors_are_scored_within_their_rounding():
    """audit8 M11: bf16 / float16 log-probability tensors are widened (through float32), with the row tolerance of
    their rounding; the result is the float64 one up to that rounding."""
    import torch

    rng = np.random.default_rng(0)
    lp, y = M.log_softmax(rng.normal(size=(50, 10))), rng.integers(0, 10, 50)
    for dtype in (torch.bfloat16, torch.float16):
        assert abs(M.nll(torch.tensor(lp).to(dtype), torch.tensor(y)) - M.nll(lp, y)) < 0.05
