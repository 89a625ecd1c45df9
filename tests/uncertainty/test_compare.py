"""harness.uncertainty.compare on synthetic predictions: identities, sign conventions, scipy references."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.uncertainty import compare as C
from harness.uncertainty import method as MI
from harness.uncertainty import metrics as M
from harness.uncertainty import stats as S
from harness.uncertainty.predictions import Predictions

N, K = 2000, 5


def _labels(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, K, N)


def _preds(y: np.ndarray, strength: float, seed: int, index=None) -> Predictions:
    """Gaussian logits plus ``strength`` on the true label: larger strength, more mass on the truth."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 1.0, (len(y), K))
    z[np.arange(len(y)), y] += strength
    idx = np.arange(len(y)) if index is None else np.asarray(index)
    return Predictions(z, y.copy(), idx, [f"c{k}" for k in range(K)], "softmax", f"synthetic s={strength} seed={seed}")


def _acc(p: Predictions) -> float:
    return float((p.logits.argmax(1) == p.targets).mean())


def _nll(p: Predictions) -> float:
    lp = p.logits - np.log(np.exp(p.logits).sum(1, keepdims=True))
    return float(-lp[np.arange(len(p.targets)), p.targets].mean())


@pytest.fixture(scope="module")
def models():
    y = _labels()
    weak = [_preds(y, 1.0, seed) for seed in (1, 2)]
    strong = [_preds(y, 2.0, seed) for seed in (11, 12)]
    return y, weak, strong


# --- image_level -------------------------------------------------------------------------------------------------


def test_image_level_of_a_model_against_itself_is_exactly_zero(models):
    _, weak, _ = models
    r = C.image_level(weak, weak, n_boot=200)
    assert set(r) == set(C.IMAGE_KEYS)
    for key, x in r.items():
        assert x["diff"] == 0.0 and x["lo"] == 0.0 and x["hi"] == 0.0, key
        assert x["verdict"] == "no detectable difference", key
        assert x["p"] == 1.0 and x["std"] == 0.0
    mc = r["top1"]["mcnemar"]
    assert len(mc) == 2
    for x in mc:
        assert x["n01"] == 0 and x["n10"] == 0 and x["p"] == 1.0 and x["acc_diff"] == 0.0
    assert "mcnemar" not in r["nll"] and "mcnemar" not in r["ece"]


def test_more_mass_on_the_truth_is_better_on_top1_and_nll_with_signs_from_higher_is_better(models):
    y, weak, strong = models
    assert C.HIGHER_IS_BETTER["top1"] is True and C.HIGHER_IS_BETTER["nll"] is False
    r = C.image_level(strong, weak, n_boot=300)
    # top1: higher is better, the difference is positive and its interval lies above 0
    assert r["top1"]["diff"] > 0 and r["top1"]["lo"] > 0 and r["top1"]["verdict"] == "better"
    # nll: lower is better, the difference is negative, its interval lies below 0, and that is "better"
    assert r["nll"]["diff"] < 0 and r["nll"]["hi"] < 0 and r["nll"]["verdict"] == "better"
    assert r["top1"]["lo"] <= r["top1"]["diff"] <= r["top1"]["hi"]
    assert r["nll"]["lo"] <= r["nll"]["diff"] <= r["nll"]["hi"]
    # the other way round: the same intervals mirrored, and both verdicts "worse"
    back = C.image_level(weak, strong, n_boot=300)
    assert back["top1"]["verdict"] == "worse" and back["nll"]["verdict"] == "worse"
    assert back["top1"]["diff"] == pytest.approx(-r["top1"]["diff"], abs=1e-12)
    assert back["top1"]["lo"] == pytest.approx(-r["top1"]["hi"], abs=1e-12)
    assert back["nll"]["hi"] == pytest.approx(-r["nll"]["lo"], abs=1e-12)


def test_image_level_differences_equal_seed_averaged_metrics_computed_directly(models):
    y, weak, strong = models
    r = C.image_level(strong, weak, n_boot=100)
    direct_top1 = np.mean([_acc(p) for p in strong]) - np.mean([_acc(p) for p in weak])
    direct_nll = np.mean([_nll(p) for p in strong]) - np.mean([_nll(p) for p in weak])
    assert r["top1"]["diff"] == pytest.approx(direct_top1, abs=1e-12)
    assert r["nll"]["diff"] == pytest.approx(direct_nll, abs=1e-9)
    direct_ece = np.mean([M.ece(p.log_probs(), p.targets) for p in strong]) - np.mean(
        [M.ece(p.log_probs(), p.targets) for p in weak]
    )
    assert r["ece"]["diff"] == pytest.approx(direct_ece, abs=1e-12)
    # McNemar pairs seed i with seed i, counting the discordant images directly
    for x, a, b in zip(r["top1"]["mcnemar"], strong, weak):
        ca, cb = a.logits.argmax(1) == y, b.logits.argmax(1) == y
        assert x["n10"] == int(np.sum(ca & ~cb)) and x["n01"] == int(np.sum(~ca & cb))
        assert x["p"] == pytest.approx(sps.binomtest(x["n10"], x["n10"] + x["n01"], 0.5).pvalue)
        assert x["p"] < 1e-6


def test_image_level_uses_the_first_min_len_seeds_paired_by_position(models):
    y, weak, strong = models
    third = _preds(y, 5.0, 99)  # a very strong extra seed: it would change the average if it were used
    r3 = C.image_level([*strong, third], weak, keys=("top1",), n_boot=50)
    r2 = C.image_level(strong, weak, keys=("top1",), n_boot=50)
    assert r3["top1"]["diff"] == r2["top1"]["diff"] and len(r3["top1"]["mcnemar"]) == 2


def test_image_level_refuses_predictions_on_other_examples_or_labels(models):
    y, weak, _ = models
    shifted = [_preds(y, 1.0, 5, index=np.arange(N) + 1)]
    with pytest.raises(ValueError, match="other examples or labels"):
        C.image_level(weak[:1], shifted)
    relabelled = [_preds((y + 1) % K, 1.0, 5)]
    with pytest.raises(ValueError, match="other examples or labels"):
        C.image_level(weak[:1], relabelled)
    # a mismatch among a's own seeds is caught too
    with pytest.raises(ValueError):
        C.image_level([weak[0], shifted[0]], weak)


# --- seed_level and seed_summary ---------------------------------------------------------------------------------


A = {"top1": [0.80, 0.82, 0.81, 0.83], "nll": [0.60, 0.58, 0.59, 0.57]}
B = {"top1": [0.78, 0.81, 0.79, 0.80], "nll": [0.66, 0.63, 0.65, 0.64]}


def test_seed_level_equals_ttest_rel_and_the_t_interval_of_the_differences():
    r = C.seed_level(A, B)
    for key in ("top1", "nll"):
        a, b = np.array(A[key]), np.array(B[key])
        d = a - b
        lo, hi = sps.t.interval(0.95, len(d) - 1, loc=d.mean(), scale=sps.sem(d))
        assert r[key]["mean"] == pytest.approx(d.mean(), abs=1e-12)
        assert r[key]["lo"] == pytest.approx(lo, abs=1e-12) and r[key]["hi"] == pytest.approx(hi, abs=1e-12)
        assert r[key]["p"] == pytest.approx(sps.ttest_rel(a, b).pvalue, rel=1e-10)
        assert r[key]["n"] == 4 and r[key]["diffs"] == pytest.approx(d.tolist(), abs=1e-12)
    assert r["top1"]["lo"] > 0 and r["top1"]["verdict"] == "better"  # higher top-1
    assert r["nll"]["hi"] < 0 and r["nll"]["verdict"] == "better"  # lower NLL
    back = C.seed_level(B, A)
    assert back["top1"]["verdict"] == "worse" and back["nll"]["verdict"] == "worse"


def test_seed_level_no_difference_names_n_and_pairs_the_first_seeds():
    r = C.seed_level({"top1": [0.80, 0.70, 0.90]}, {"top1": [0.81, 0.69, 0.88]})
    assert r["top1"]["lo"] < 0 < r["top1"]["hi"]
    assert r["top1"]["verdict"] == "no detectable difference at n = 3"
    # unequal lengths: the first min(len) seeds, paired by position
    r = C.seed_level({"ece": [0.05, 0.04, 0.06, 0.5]}, {"ece": [0.07, 0.05, 0.08]})
    assert r["ece"]["n"] == 3 and r["ece"]["diffs"] == pytest.approx([-0.02, -0.01, -0.02], abs=1e-12)
    assert r["ece"]["verdict"] == "better"  # lower ECE is better
    one = C.seed_level({"top1": [0.9]}, {"top1": [0.8]})  # a single seed: no interval, no verdict either way
    assert math.isnan(one["top1"]["lo"]) and one["top1"]["p"] is None
    assert one["top1"]["verdict"] == "no detectable difference at n = 1"


def test_seed_summary_is_the_t_interval_of_each_metric():
    s = C.seed_summary(A)
    for key, v in A.items():
        v = np.array(v)
        lo, hi = sps.t.interval(0.95, len(v) - 1, loc=v.mean(), scale=sps.sem(v))
        assert s[key]["mean"] == pytest.approx(v.mean()) and s[key]["std"] == pytest.approx(v.std(ddof=1))
        assert s[key]["lo"] == pytest.approx(lo) and s[key]["hi"] == pytest.approx(hi)


# --- test_sampling_se --------------------------------------------------------------------------------------------


def test_test_sampling_se_matches_the_binomial_standard_error(models):
    y, weak, strong = models
    for p in (weak[0], strong[0]):
        acc = _acc(p)
        se = C.test_sampling_se([p], keys=("top1",), n_boot=500)["top1"]
        assert se == pytest.approx(math.sqrt(acc * (1 - acc) / N), rel=0.15)
    # NLL: the standard error of a mean of per-image losses
    lp = M.log_softmax(weak[0].logits)
    per = -lp[np.arange(N), y]
    se = C.test_sampling_se([weak[0]], keys=("nll",), n_boot=500)["nll"]
    assert se == pytest.approx(per.std(ddof=1) / math.sqrt(N), rel=0.15)
    # several models: the mean of their own standard errors
    both = C.test_sampling_se([weak[0], strong[0]], keys=("top1",), n_boot=300)["top1"]
    each = [C.test_sampling_se([p], keys=("top1",), n_boot=300)["top1"] for p in (weak[0], strong[0])]
    assert both == pytest.approx(np.mean(each), rel=1e-12)
    # a model that is always right has no test-sampling spread in top-1
    sure = _preds(y, 50.0, 3)
    assert C.test_sampling_se([sure], keys=("top1",), n_boot=50)["top1"] == 0.0


# --- method_level ------------------------------------------------------------------------------------------------


def test_method_level_of_a_model_against_itself_is_zero_with_p_one(models):
    _, weak, _ = models
    r = C.method_level(weak, weak, n_boot=100)
    for key, x in r.items():
        assert x["mean"] == x["lo"] == x["hi"] == 0.0 and x["p"] == 1.0, key
        assert x["verdict"] == "no detectable difference at n = 2" and x["per_seed"] == [0.0, 0.0]


def test_method_level_mean_is_the_image_level_difference_and_contains_it(models):
    y, weak, strong = models
    r = C.method_level(strong, weak, n_boot=200, seed=3)
    img = C.image_level(strong, weak, n_boot=200, seed=3)
    for key in C.IMAGE_KEYS:
        assert r[key]["mean"] == pytest.approx(img[key]["diff"], abs=1e-12), key
        assert r[key]["n_seeds"] == 2 and r[key]["n_images"] == N
        assert r[key]["method"] == MI.METHOD_SEEDS_IMAGES
        # image_level is method_level's models-fixed interval (one definition), and the method interval holds it
        fixed = r[key]["models_fixed"]
        for k, v in (("diff", "diff"), ("lo", "lo"), ("hi", "hi"), ("se", "std"), ("p", "p")):
            assert fixed[k] == pytest.approx(img[key][v], rel=1e-9, abs=1e-14), (key, k)
        assert r[key]["lo"] <= fixed["lo"] and fixed["hi"] <= r[key]["hi"], key
    assert r["top1"]["per_seed"] == pytest.approx([_acc(a) - _acc(b) for a, b in zip(strong, weak)], abs=1e-15)
    assert r["nll"]["per_seed"] == pytest.approx([_nll(a) - _nll(b) for a, b in zip(strong, weak)], abs=1e-9)
    assert r["top1"]["verdict"] == "better" and r["nll"]["verdict"] == "better"
    # top-1 and NLL: the exact two-way ANOVA of the per-image differences; the models-fixed interval is the paired
    # t over images of the seed-averaged differences
    d = np.stack([C.parts(a)[2] - C.parts(b)[2] for a, b in zip(strong, weak)])
    ref = sps.ttest_1samp(d.mean(0), 0.0)
    assert (img["nll"]["lo"], img["nll"]["hi"]) == pytest.approx(tuple(ref.confidence_interval(0.95)), rel=1e-9)
    assert r["nll"]["se"] == pytest.approx(MI.anova_interval(d)["se"], rel=1e-12)
    # ECE: the two-level bootstrap, its Monte-Carlo error below a tenth of the half-width
    assert r["ece"]["mc_error"] < 0.1 * (r["ece"]["hi"] - r["ece"]["mean"]) and r["ece"]["n_images_boot"] >= 200


def test_method_level_widens_when_the_seeds_disagree(models):
    """Two method seeds of very different quality: the models-fixed interval is narrow and says "better";
    the method interval sees the seed spread (and df = 1 from two seeds) and does not."""
    y, weak, _ = models
    uneven = [_preds(y, 1.05, 21), _preds(y, 1.6, 22)]
    img = C.image_level(uneven, weak, keys=("top1",), n_boot=200)["top1"]
    met = C.method_level(uneven, weak, keys=("top1",), n_boot=200)["top1"]
    assert img["verdict"] == "better" and met["hi"] - met["lo"] > 3 * (img["hi"] - img["lo"])
    assert met["verdict"] == "no detectable difference at n = 2" and met["p"] > 0.05 > img["p"]


def test_method_level_with_one_seed_is_the_image_level_interval(models):
    _, weak, strong = models
    r = C.method_level(strong[:1], weak, n_boot=200)  # min(1, 2) = 1 seed pair
    img = C.image_level(strong[:1], weak[:1], n_boot=200)
    for key in C.IMAGE_KEYS:
        assert r[key]["method"] == MI.METHOD_IMAGES_ONLY
        assert (r[key]["lo"], r[key]["hi"], r[key]["p"]) == pytest.approx(
            (img[key]["lo"], img[key]["hi"], img[key]["p"]), rel=1e-12
        )
        assert r[key]["verdict"].startswith(img[key]["verdict"])


def test_method_level_refuses_unknown_metrics_and_other_examples(models):
    y, weak, _ = models
    with pytest.raises(ValueError, match="unknown metric"):
        C.method_level(weak, weak, keys=("top5",))
    with pytest.raises(ValueError, match="other examples or labels"):
        C.method_level(weak[:1], [_preds(y, 1.0, 5, index=np.arange(N) + 1)])
    with pytest.raises(ValueError, match="at least one model"):
        C.method_level([], weak)


def test_image_level_p_has_no_floor_so_holm_can_pass_a_clear_ensemble_row(models):
    """A difference many standard errors from 0 (here two ensembles of very different strength) gets a p far below
    2/(B + 1): Holm's first step over 33 comparisons (0.05/33 = 0.0015) passes it."""
    _, weak, strong = models
    r = C.image_level(strong[:1], weak[:1], keys=("top1", "nll", "ece"), n_boot=200)
    for key in ("top1", "nll", "ece"):
        z = abs(r[key]["diff"]) / r[key]["std"]
        assert z > 9 and r[key]["p"] < 1e-15, (key, z)
        assert S.holm([r[key]["p"]] + [0.5] * 32)["reject"][0], key
    assert C.image_level(weak, weak, keys=("ece",), n_boot=50)["ece"]["p"] == 1.0


@pytest.mark.parametrize("key", C.IMAGE_KEYS)
def test_the_bootstrap_of_a_metric_is_the_same_at_once_and_one_resample_at_a_time(key):
    """Two ways to compute one number: metric_stat's ``resampled`` (every resample of a chunk at once, the report's
    path) gives the replicates of the one-resample-at-a-time statistic, on the same index draws."""
    rng = np.random.default_rng(3)
    groups = []
    for _ in range(2):  # two models, paired image by image
        conf = np.concatenate([rng.uniform(0.1, 1.0, 300), [1.0, 0.0]])  # the bins' edges included
        groups.append((conf, rng.uniform(size=302) < conf, rng.exponential(size=302)))
    at_once = C.metric_stat(key, 2)
    one_at_a_time = lambda *arrays: at_once(*arrays)  # noqa: E731 -- the same statistic without .resampled
    both = [[x for g in groups for x in g], [x for g in groups[::-1] for x in g]]  # two groups of 2 seeds each
    fast = S.bootstrap_replicates(at_once, both, n_boot=300, seed=5)
    slow = S.bootstrap_replicates(one_at_a_time, both, n_boot=300, seed=5)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-15)
    assert np.ptp(fast) > 0  # the resamples differ


def test_resampled_calibration_error_is_calibration_error_of_each_resample():
    rng = np.random.default_rng(0)
    conf = rng.uniform(0, 1, 500)
    correct = (rng.uniform(size=500) < conf).astype(np.float64)
    index = rng.integers(0, 500, size=(40, 500))
    want = [M.calibration_error(conf[i], correct[i]) for i in index]
    np.testing.assert_allclose(M.resampled_calibration_error(conf, correct, index), want, rtol=1e-12, atol=1e-15)
