"""harness.uncertainty.stats against scipy and against properties that a wrong implementation breaks."""

import math
import time

import numpy as np
import pytest
from scipy import stats as sps

from harness.uncertainty import stats as S


def _mean(x):
    return float(np.mean(x))


def _ece(conf, correct, bins=15):
    """Top-label ECE with equal-width bins (a stand-in with the cost profile of the real metric)."""
    b = np.minimum((conf * bins).astype(np.int64), bins - 1)
    gap = np.bincount(b, weights=conf, minlength=bins) - np.bincount(b, weights=correct, minlength=bins)
    return float(np.abs(gap).sum() / len(conf))


# --- t_interval --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,confidence,seed", [(2, 0.95, 0), (3, 0.9, 1), (5, 0.95, 2), (30, 0.99, 3), (7, 0.5, 4)])
def test_t_interval_matches_scipy(n, confidence, seed):
    x = np.random.default_rng(seed).normal(2.0, 3.0, n)
    r = S.t_interval(x, confidence)
    lo, hi = sps.t.interval(confidence, n - 1, loc=np.mean(x), scale=sps.sem(x))
    assert abs(r["lo"] - lo) < 1e-12 and abs(r["hi"] - hi) < 1e-12
    assert abs(r["mean"] - np.mean(x)) < 1e-12 and abs(r["std"] - np.std(x, ddof=1)) < 1e-12
    assert r["n"] == n and abs(r["half_width"] - (hi - lo) / 2) < 1e-12


def test_t_interval_n1_is_nan_and_constant_values_collapse():
    r = S.t_interval([0.7])
    assert r["mean"] == 0.7 and r["n"] == 1
    assert all(math.isnan(r[k]) for k in ("lo", "hi", "half_width", "std"))
    c = S.t_interval([0.25, 0.25, 0.25])
    assert c["lo"] == c["hi"] == 0.25 and c["half_width"] == 0.0


# --- paired_difference -------------------------------------------------------------------------------------------


def test_paired_difference_matches_ttest_rel_and_t_interval():
    rng = np.random.default_rng(5)
    a, b = rng.normal(0.8, 0.02, 6), rng.normal(0.79, 0.02, 6)
    r = S.paired_difference(a, b, confidence=0.9)
    assert abs(r["p"] - sps.ttest_rel(a, b).pvalue) < 1e-12
    ref = S.t_interval(a - b, 0.9)
    for k in ("mean", "lo", "hi", "std", "n"):
        assert r[k] == ref[k]
    assert isinstance(r["diffs"], list) and np.allclose(r["diffs"], a - b, rtol=0, atol=0)


def test_paired_difference_detects_consistent_shift_but_not_noise():
    rng = np.random.default_rng(11)
    seed_effect = rng.normal(0.0, 1.0, 8)  # large between-seed spread shared by both methods
    shifted = S.paired_difference(seed_effect + 0.5 + rng.normal(0, 0.05, 8), seed_effect)
    assert shifted["lo"] > 0 and shifted["p"] < 1e-6
    noise = S.paired_difference(rng.normal(0, 1, 8), rng.normal(0, 1, 8))
    assert noise["lo"] < 0 < noise["hi"] and noise["p"] > 0.05


def test_paired_difference_p_none_cases():
    assert S.paired_difference([1.0], [0.5])["p"] is None
    r = S.paired_difference([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])
    assert r["p"] is None and r["lo"] == r["hi"] == 0.5


# --- mcnemar_exact -----------------------------------------------------------------------------------------------


def test_mcnemar_counts_and_exact_p_by_hand():
    # 8 examples only a gets right, 1 only b gets right, 3 both, 2 neither
    a = np.array([True] * 8 + [False] + [True] * 3 + [False] * 2)
    b = np.array([False] * 8 + [True] + [True] * 3 + [False] * 2)
    r = S.mcnemar_exact(a, b)
    assert (r["n10"], r["n01"], r["n"]) == (8, 1, 14)
    assert abs(r["acc_diff"] - (11 - 4) / 14) < 1e-15
    by_hand = 2 * (math.comb(9, 0) + math.comb(9, 1)) / 2**9  # two-sided exact, p = 0.5 is symmetric
    assert abs(r["p"] - by_hand) < 1e-12 and abs(r["p"] - sps.binomtest(8, 9, 0.5).pvalue) < 1e-12


def test_mcnemar_random_symmetric_and_identical():
    rng = np.random.default_rng(3)
    a, b = rng.uniform(size=400) < 0.8, rng.uniform(size=400) < 0.7
    r, s = S.mcnemar_exact(a, b), S.mcnemar_exact(b, a)
    assert r["n01"] == int(np.sum(~a & b)) and r["n10"] == int(np.sum(a & ~b))
    assert abs(r["p"] - sps.binomtest(r["n10"], r["n01"] + r["n10"], 0.5).pvalue) < 1e-12
    assert (s["n01"], s["n10"]) == (r["n10"], r["n01"]) and s["p"] == r["p"] and s["acc_diff"] == -r["acc_diff"]
    same = S.mcnemar_exact(a, a.copy())
    assert same["p"] == 1.0 and same["n01"] == same["n10"] == 0 and same["acc_diff"] == 0.0


# --- paired_bootstrap / bootstrap_std ----------------------------------------------------------------------------


def test_bootstrap_constant_shift_collapses():
    b = np.random.default_rng(0).normal(size=500)
    r = S.paired_bootstrap(_mean, (b + 0.3,), (b,), n_boot=200)
    assert abs(r["diff"] - 0.3) < 1e-12 and abs(r["lo"] - 0.3) < 1e-12 and abs(r["hi"] - 0.3) < 1e-12
    assert r["std"] < 1e-12 and r["share_positive"] == 1.0 and r["n_boot"] == 200 and r["n"] == 500


def test_bootstrap_is_paired():
    """A shared per-example component (std 1) cancels only if a and b are resampled with the same indices."""
    rng = np.random.default_rng(1)
    n = 2000
    x = rng.normal(0, 1, n)
    null = S.paired_bootstrap(_mean, (x + rng.normal(0, 0.1, n),), (x,), n_boot=500)
    assert null["lo"] < 0 < null["hi"] and null["hi"] - null["lo"] < 0.02  # unpaired width would be ~0.12
    shift = S.paired_bootstrap(_mean, (x + 0.02 + rng.normal(0, 0.1, n),), (x,), n_boot=500)
    assert shift["lo"] > 0 and shift["share_positive"] == 1.0 and shift["lo"] < shift["diff"] < shift["hi"]
    worse = S.paired_bootstrap(_mean, (x,), (x + 0.02 + rng.normal(0, 0.1, n),), n_boot=500)
    assert worse["hi"] < 0 and worse["share_positive"] == 0.0


def test_bootstrap_iid_noise_covers_zero():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(2, 5000))
    r = S.paired_bootstrap(_mean, (a,), (b,), n_boot=500, confidence=0.95)
    assert r["lo"] < 0 < r["hi"]
    se = math.sqrt(2 / 5000)
    assert 0.85 * se < r["std"] < 1.15 * se and abs((r["hi"] - r["lo"]) / (2 * 1.96 * se) - 1) < 0.15


def test_bootstrap_matches_independent_resampling():
    """Small N, n_boot in one chunk: replicate r uses row r of default_rng(seed).integers(0, N, (n_boot, N))."""
    rng = np.random.default_rng(12)
    a, b = rng.normal(0.1, 1, 200), rng.normal(0, 1, 200)
    r = S.paired_bootstrap(_mean, (a,), (b,), n_boot=300, confidence=0.9, seed=3)
    idx = np.random.default_rng(3).integers(0, 200, size=(300, 200))
    d = a[idx].mean(axis=1) - b[idx].mean(axis=1)
    lo, hi = np.percentile(d, [5, 95])
    assert abs(r["lo"] - lo) < 1e-12 and abs(r["hi"] - hi) < 1e-12 and abs(r["std"] - d.std(ddof=1)) < 1e-12
    assert r["share_positive"] == np.mean(d > 0) and abs(r["diff"] - (a.mean() - b.mean())) < 1e-12


def test_bootstrap_percentiles_of_mean_are_near_normal():
    rng = np.random.default_rng(13)
    a, b = rng.normal(0.05, 1, 3000), rng.normal(0, 1, 3000)
    r = S.paired_bootstrap(_mean, (a,), (b,), n_boot=2000)
    assert abs((r["hi"] - r["diff"]) / r["std"] - 1.96) < 0.2 and abs((r["diff"] - r["lo"]) / r["std"] - 1.96) < 0.2


def test_bootstrap_std_of_mean_matches_analytic():
    x = np.random.default_rng(4).exponential(2.0, 4000)
    analytic = np.std(x) / math.sqrt(len(x))
    assert abs(S.bootstrap_std(_mean, (x,), n_boot=1000) / analytic - 1) < 0.1


def test_bootstrap_std_shares_resamples_with_paired_bootstrap():
    x = np.random.default_rng(6).normal(size=300)
    r = S.paired_bootstrap(_mean, (x,), (np.zeros(300),), n_boot=300, seed=9)
    assert abs(S.bootstrap_std(_mean, (x,), n_boot=300, seed=9) - r["std"]) < 1e-15


def test_bootstrap_seeds():
    rng = np.random.default_rng(7)
    conf = rng.uniform(0.5, 1, 1000)
    a, b = (conf, (rng.uniform(size=1000) < conf).astype(float)), (conf, (rng.uniform(size=1000) < 0.9 * conf) * 1.0)
    r1, r2 = S.paired_bootstrap(_ece, a, b, n_boot=300, seed=1), S.paired_bootstrap(_ece, a, b, n_boot=300, seed=1)
    r3 = S.paired_bootstrap(_ece, a, b, n_boot=300, seed=2)
    assert r1 == r2
    assert r3["diff"] == r1["diff"] and (r3["lo"], r3["hi"], r3["std"]) != (r1["lo"], r1["hi"], r1["std"])
    assert S.bootstrap_std(_ece, a, n_boot=300, seed=1) != S.bootstrap_std(_ece, a, n_boot=300, seed=2)


def test_bootstrap_chunking_and_speed():
    """N = 10k, n_boot = 1k with an ECE stat spans several index chunks and stays within seconds."""
    rng = np.random.default_rng(8)
    n = 10_000
    conf = rng.uniform(0.5, 1, n)
    a, b = (conf, (rng.uniform(size=n) < conf) * 1.0), (conf, (rng.uniform(size=n) < conf) * 1.0)
    assert S._CHUNK_ELEMENTS // n < 1000  # more than one chunk
    t = time.perf_counter()
    r = S.paired_bootstrap(_ece, a, b, n_boot=1000)
    assert time.perf_counter() - t < 5.0
    assert r["n_boot"] == 1000 and r["lo"] <= r["hi"] and 0.0 <= r["share_positive"] <= 1.0


# --- verdict -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lo,hi,higher,n,expected",
    [
        (0.01, 0.03, True, None, "better"),
        (-0.03, -0.01, True, None, "worse"),
        (0.01, 0.03, False, 5, "worse"),  # NLL / ECE up: worse
        (-0.03, -0.01, False, 5, "better"),
        (-0.01, 0.03, True, None, "no detectable difference"),
        (-0.01, 0.03, False, 10, "no detectable difference at n = 10"),
        (0.0, 0.03, True, 3, "no detectable difference at n = 3"),  # touching 0 is not excluding it
        (-0.03, 0.0, False, None, "no detectable difference"),
        (math.nan, math.nan, True, 1, "no detectable difference at n = 1"),
        (math.nan, 0.5, False, None, "no detectable difference"),
    ],
)
def test_verdict(lo, hi, higher, n, expected):
    assert S.verdict(lo, hi, higher, n=n) == expected


def test_verdict_ignores_mean_sign():
    r = S.paired_difference([0.81, 0.80, 0.83], [0.80, 0.81, 0.80])  # mean > 0, interval spans 0
    assert r["mean"] > 0 and S.verdict(r["lo"], r["hi"], True, n=r["n"]) == "no detectable difference at n = 3"
    assert S.verdict(r["lo"], r["hi"], True, n=r["n"]) == S.verdict(r["lo"], r["hi"], False, n=r["n"])


# --- bad input ---------------------------------------------------------------------------------------------------

_B = np.array([True, False, True])
_X = np.array([0.1, 0.2, 0.3])


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda: S.t_interval([]), "empty"),
        (lambda: S.t_interval([0.1, math.nan]), "NaN"),
        (lambda: S.t_interval([[0.1, 0.2]]), "1-D"),
        (lambda: S.t_interval([0.1, 0.2], confidence=0.0), "confidence"),
        (lambda: S.t_interval([0.1, 0.2], confidence=1.0), "confidence"),
        (lambda: S.t_interval([0.1, 0.2], confidence=95), "confidence"),
        (lambda: S.t_interval([0.1, 0.2], confidence=math.nan), "confidence"),
        (lambda: S.paired_difference([], []), "empty"),
        (lambda: S.paired_difference([0.1, 0.2], [0.1]), "same order"),
        (lambda: S.paired_difference([0.1, 0.2], [0.1, math.nan]), "NaN"),
        (lambda: S.paired_difference([0.1, 0.2], [0.1, 0.3], confidence=-0.5), "confidence"),
        (lambda: S.mcnemar_exact([], []), "empty"),
        (lambda: S.mcnemar_exact(_B, _B[:2]), "same examples"),
        (lambda: S.mcnemar_exact(np.array([1, 0, 1]), _B), "boolean"),
        (lambda: S.mcnemar_exact(_B, np.array([1.0, 0.0, 1.0])), "boolean"),
        (lambda: S.mcnemar_exact(_B, np.array([1.0, math.nan, 1.0])), "NaN"),
        (lambda: S.paired_bootstrap(_mean, (np.array([]),), (np.array([]),)), "no examples"),
        (lambda: S.paired_bootstrap(_mean, (), (_X,)), "empty tuple"),
        (lambda: S.paired_bootstrap(_mean, (_X,), (_X[:2],)), "same examples"),
        (lambda: S.paired_bootstrap(_ece, (_X, _X[:2]), (_X, _X)), "lengths"),
        (lambda: S.paired_bootstrap(_mean, (np.array([0.1, math.nan]),), (_X[:2],)), "NaN"),
        (lambda: S.paired_bootstrap(_mean, (_X,), (_X,), confidence=1.5), "confidence"),
        (lambda: S.paired_bootstrap(_mean, (_X,), (_X,), n_boot=1), "n_boot"),
        (lambda: S.paired_bootstrap(lambda x: math.nan, (_X,), (_X,)), "finite"),
        (lambda: S.bootstrap_std(_mean, (np.array([]),)), "no examples"),
        (lambda: S.bootstrap_std(_ece, (_X, _X[:1])), "lengths"),
        (lambda: S.bootstrap_std(_mean, (np.array([math.nan, 1.0]),)), "NaN"),
        (lambda: S.verdict(0.2, 0.1, True), "in order"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()
