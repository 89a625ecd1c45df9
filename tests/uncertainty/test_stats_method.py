"""harness.uncertainty.stats: the seeds-and-images interval (method_interval, with its coverage on simulated
data), Holm's adjustment (a hand-worked example) and the bootstrap p-value."""

import math
import time

import numpy as np
import pytest
from scipy import stats as sps

from harness.uncertainty import stats as S

# --- method_interval: the formula ------------------------------------------------------------------------------


def test_method_interval_by_hand():
    per_seed = [0.02, 0.01, 0.03]  # mean 0.02, var (ddof 1) 1e-4, seed term 1e-4 / 3
    rep = np.random.default_rng(0).normal(0.02, 0.004, 500)
    r = S.method_interval(per_seed, rep, higher_is_better=True)
    v_seed, v_img = 1e-4 / 3, rep.var(ddof=1)
    se = math.sqrt(v_seed + v_img)
    df = se ** 4 / (v_seed ** 2 / 2)
    half = sps.t.ppf(0.975, df) * se
    assert r["mean"] == pytest.approx(0.02, abs=1e-15)
    assert r["se"] == pytest.approx(se, rel=1e-12) and r["df"] == pytest.approx(df, rel=1e-12)
    assert r["se_seeds"] == pytest.approx(math.sqrt(v_seed)) and r["se_images"] == pytest.approx(math.sqrt(v_img))
    assert (r["lo"], r["hi"]) == pytest.approx((0.02 - half, 0.02 + half), rel=1e-12)
    assert r["p"] == pytest.approx(2 * sps.t.sf(0.02 / se, df), rel=1e-10)
    assert r["n_seeds"] == 3 and r["n_images_boot"] == 500 and r["method"] == S.METHOD_SEEDS_IMAGES
    assert 2 < r["df"] < math.inf  # between the seed-only t (df = n - 1) and the normal
    assert r["verdict"] == S.verdict(r["lo"], r["hi"], True, 3)


def test_method_interval_without_image_spread_is_the_one_sample_t_interval():
    per_seed = np.array([0.012, -0.004, 0.02, 0.007])
    r = S.method_interval(per_seed, np.full(100, 0.25), confidence=0.9)  # constant: no image term
    ref = sps.ttest_1samp(per_seed, 0.0)
    lo, hi = ref.confidence_interval(0.9)
    assert (r["lo"], r["hi"]) == pytest.approx((lo, hi), rel=1e-10) and r["df"] == pytest.approx(3)
    assert r["p"] == pytest.approx(ref.pvalue, rel=1e-10) and r["se_images"] == 0.0


def test_method_interval_without_seed_spread_is_the_normal_interval_of_the_image_term():
    rep = np.random.default_rng(1).normal(-0.03, 0.01, 400)
    r = S.method_interval([-0.03, -0.03, -0.03], rep, higher_is_better=False)
    sd = rep.std(ddof=1)
    assert r["df"] == math.inf and r["se"] == pytest.approx(sd, rel=1e-12)
    assert (r["lo"], r["hi"]) == pytest.approx((-0.03 - 1.959964 * sd, -0.03 + 1.959964 * sd), rel=1e-6)
    assert r["p"] == pytest.approx(2 * sps.norm.sf(0.03 / sd), rel=1e-9)
    assert r["verdict"] == "better"  # lower is better and the interval lies below 0


def test_method_interval_of_a_model_against_itself():
    r = S.method_interval([0.0, 0.0, 0.0], np.zeros((3, 50)), higher_is_better=True)
    assert r["lo"] == r["hi"] == r["se"] == 0.0 and r["p"] == 1.0
    assert r["verdict"] == "no detectable difference at n = 3"


def test_method_interval_one_seed_falls_back_to_the_image_percentile_interval():
    rep = np.random.default_rng(2).normal(0.01, 0.005, 1000)
    for form in (rep, rep[None]):  # [B] and [1, B]
        r = S.method_interval([0.0101], form, higher_is_better=True)
        lo, hi = np.percentile(rep, [2.5, 97.5])
        assert r["method"] == S.METHOD_IMAGES_ONLY and "one seed" in r["method"] and r["df"] is None
        assert (r["lo"], r["hi"]) == pytest.approx((lo, hi), rel=1e-12)
        assert r["mean"] == 0.0101 and r["p"] == S.bootstrap_p(rep)
        assert r["verdict"] == "better"


def test_method_interval_per_seed_replicates_count_only_the_shared_image_effect():
    rng = np.random.default_rng(3)
    per_seed = [0.1, 0.12, 0.08]
    shared = rng.normal(0, 0.01, 2000)
    same = S.method_interval(per_seed, np.stack([shared] * 3))  # no interaction: rows identical
    assert same["se_images"] == pytest.approx(shared.std(ddof=1), rel=1e-12)
    assert same["se"] == pytest.approx(S.method_interval(per_seed, shared)["se"], rel=1e-12)
    own = rng.normal(0, 0.01, (3, 2000))  # interaction only: the seeds' replicates independent
    indep = S.method_interval(per_seed, own)
    assert indep["se_images"] < 0.2 * S.method_interval(per_seed, own.mean(0))["se_images"]
    # the [B] form of the same replicates is wider by the interaction (counted twice there)
    both = shared + own
    assert S.method_interval(per_seed, both)["se"] < S.method_interval(per_seed, both.mean(0))["se"]


@pytest.mark.parametrize("call,match", [
    (lambda: S.method_interval([], np.zeros(10)), "empty"),
    (lambda: S.method_interval([0.1, math.nan], np.zeros(10)), "NaN"),
    (lambda: S.method_interval([0.1, 0.2], np.zeros(1)), "B >= 2"),
    (lambda: S.method_interval([0.1, 0.2], np.zeros((3, 10))), r"\[2, B\]"),
    (lambda: S.method_interval([0.1, 0.2], np.zeros((2, 2, 10))), "shape"),
    (lambda: S.method_interval([0.1, 0.2], np.array([0.0, math.inf])), "NaN/inf"),
    (lambda: S.method_interval([0.1, 0.2], np.zeros(10), confidence=1.0), "confidence"),
])
def test_method_interval_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- method_interval: coverage on simulated data --------------------------------------------------------------

MU, N_SEEDS, N_IMAGES, N_BOOT, N_SIMS = 0.1, 3, 300, 200, 1000


def _coverage(sd_seed: float, sd_image: float, sd_inter: float, seed: int) -> dict:
    """Coverage of mu by four 95% intervals over N_SIMS simulations of d_si = mu + a_s + b_i + e_si.

    Per simulation: n = 3 seeds, N = 300 images; per_seed = the seed's mean over images. The image
    replicates are simulated cheaply: normal with the covariance of the seeds' means over resamples of the
    images, the empirical covariance over images / N (what the bootstrap gives, up to (N - 1)/N), drawn
    B = 200 times per simulation, one row per seed (the [n, B] form); their mean over seeds is the [B] form.
    Returns the shares covering mu: method_interval with [n, B] ("shared") and [B] ("averaged") replicates,
    the image-only percentile interval of the seed-averaged replicates (models fixed) and the seed-only
    t-interval of per_seed (images fixed).
    """
    rng = np.random.default_rng(seed)
    d = (MU + rng.normal(0, sd_seed, (N_SIMS, N_SEEDS, 1)) + rng.normal(0, sd_image, (N_SIMS, 1, N_IMAGES))
         + rng.normal(0, sd_inter, (N_SIMS, N_SEEDS, N_IMAGES)))
    per_seed = d.mean(-1)
    c = d - per_seed[..., None]
    cov = np.einsum("kin,kjn->kij", c, c) / (N_IMAGES - 1) / N_IMAGES
    rep = per_seed[..., None] + np.linalg.cholesky(cov) @ rng.normal(size=(N_SIMS, N_SEEDS, N_BOOT))
    hits = {"shared": 0, "averaged": 0}
    for m, r in zip(per_seed, rep):
        for form, x in (("shared", r), ("averaged", r.mean(0))):
            out = S.method_interval(m, x)
            hits[form] += out["lo"] <= MU <= out["hi"]
    lo, hi = np.percentile(rep.mean(1), [2.5, 97.5], axis=-1)
    half = sps.t.ppf(0.975, N_SEEDS - 1) * per_seed.std(1, ddof=1) / math.sqrt(N_SEEDS)
    return {**{k: v / N_SIMS for k, v in hits.items()}, "image_only": float(np.mean((lo <= MU) & (MU <= hi))),
            "seed_only": float(np.mean(np.abs(per_seed.mean(1) - MU) <= half))}


def test_method_interval_covers_mu_at_the_nominal_rate_whichever_variance_dominates():
    """1000 simulations per case; the binomial standard error of a 95% coverage is 0.007, and the
    tolerance is 0.92-0.985. Measured (these seeds; seeds 10-12 in brackets): image-dominated 0.939 [0.945-0.949]
    with [n, B] replicates, 0.942 [0.951-0.954] with [B]; seed-dominated 0.948 [0.934-0.944] and 0.938
    [0.928-0.933]; interaction-dominated 0.923 [0.918-0.947] and 0.976 [0.983-0.989].

    - image variance dominates (s_a = 0, s_b = 1, s_e = 0.3; the image effect is 97% of the variance of the
      mean): the seed-only t-interval cannot see the image effect all seeds share and covers 0.47;
    - seed variance dominates (s_a = 0.1, s_b = 0.1, s_e = 0.3; 1% image effect): the image-only interval
      holds the models fixed and covers 0.29;
    - interaction dominates (s_a = 0.02, s_b = 0.2, s_e = 1, like the top-1 of two similar models): the [B]
      form counts the interaction twice and over-covers (0.976); the [n, B] form does not. Between the
      extremes Satterthwaite's t with n = 3 dips below nominal, to about 0.921 at a 10% image share (200,000
      simulations of the two variance terms; this case sits there), hence its lower bound 0.90.
    """
    t0 = time.perf_counter()
    image = _coverage(0.0, 1.0, 0.3, seed=0)
    assert 0.92 <= image["shared"] <= 0.985 and 0.92 <= image["averaged"] <= 0.985, image
    assert image["seed_only"] < 0.6, image  # undercovers: blind to the shared image effect
    seed = _coverage(0.1, 0.1, 0.3, seed=1)
    assert 0.92 <= seed["shared"] <= 0.985 and 0.92 <= seed["averaged"] <= 0.985, seed
    assert seed["image_only"] < 0.5, seed  # undercovers: blind to training randomness
    inter = _coverage(0.02, 0.2, 1.0, seed=2)
    assert 0.90 <= inter["shared"] <= 0.985, inter
    assert inter["averaged"] >= inter["shared"] and inter["averaged"] >= 0.95, inter  # conservative form
    assert time.perf_counter() - t0 < 20.0


# --- holm --------------------------------------------------------------------------------------------------------


def test_holm_hand_worked_example():
    """m = 4, p = (0.01, 0.04, 0.03, 0.005). Sorted: 0.005, 0.01, 0.03, 0.04, times (m - i + 1) = 4, 3, 2, 1:
    0.020, 0.030, 0.060, 0.040; running maximum: 0.020, 0.030, 0.060, 0.060. Back in input order:
    (0.030, 0.060, 0.060, 0.020). At alpha = 0.05 Holm rejects 0.005 (<= 0.05/4) and 0.01 (<= 0.05/3), then
    stops at 0.03 (> 0.05/2), so 0.04 is kept although 0.04 <= 0.05/1: the step-down stops at the first
    failure, which the running maximum encodes."""
    r = S.holm([0.01, 0.04, 0.03, 0.005])
    assert r["adjusted"] == pytest.approx([0.03, 0.06, 0.06, 0.02], abs=1e-15)
    assert r["reject"] == [True, False, False, True] and r["n_rejected"] == 2 and r["m"] == 4 and r["alpha"] == 0.05
    # at alpha = 0.1 all four fall: 0.06 <= 0.1
    assert S.holm([0.01, 0.04, 0.03, 0.005], alpha=0.1)["reject"] == [True] * 4


def test_holm_caps_at_one_keeps_ties_and_a_single_p():
    # (0.5, 0.6): 2 * 0.5 = 1.0, max(1.0, 1 * 0.6) = 1.0
    assert S.holm([0.6, 0.5])["adjusted"] == [1.0, 1.0]
    # (0.3, 0.4, 0.02): sorted 0.02 * 3 = 0.06, 0.3 * 2 = 0.6, 0.4 * 1 -> running max 0.6; capped values stay <= 1
    assert S.holm([0.3, 0.4, 0.02])["adjusted"] == pytest.approx([0.6, 0.6, 0.06], abs=1e-15)
    assert S.holm([0.01, 0.01])["adjusted"] == [0.02, 0.02]
    assert S.holm([0.03])["adjusted"] == [0.03] and S.holm([0.03])["reject"] == [True]
    empty = S.holm([])
    assert empty["adjusted"] == [] and empty["m"] == 0 and empty["n_rejected"] == 0


def test_holm_properties_on_random_families():
    rng = np.random.default_rng(4)
    for m in (2, 7, 36):
        p = rng.uniform(0, 0.2, m) ** 2
        r = S.holm(p)
        adj = np.array(r["adjusted"])
        order = np.argsort(p)
        assert np.all(adj >= p) and np.all(adj <= 1) and np.all(np.diff(adj[order]) >= 0)
        assert adj.min() == pytest.approx(m * p.min())
        # rejections are exactly Holm's sequential rule
        rule, k = np.zeros(m, bool), 0
        while k < m and p[order[k]] <= 0.05 / (m - k):
            rule[order[k]], k = True, k + 1
        assert r["reject"] == rule.tolist()


@pytest.mark.parametrize("p,alpha,match", [
    ([0.1, None], 0.05, r"\[0, 1\]"),
    ([0.1, 1.2], 0.05, r"\[0, 1\]"),
    ([[0.1, 0.2]], 0.05, "1-D"),
    ([0.1], 0.0, "alpha"),
    ([0.1], 1.5, "alpha"),
])
def test_holm_bad_input(p, alpha, match):
    with pytest.raises(ValueError, match=match):
        S.holm(p, alpha)


# --- bootstrap_p and bootstrap_replicates -----------------------------------------------------------------------


def test_bootstrap_p_by_hand_and_in_paired_bootstrap():
    assert S.bootstrap_p(np.full(99, 0.3)) == pytest.approx(2 / 100)  # all on one side: the smallest p
    assert S.bootstrap_p(np.zeros(10)) == 1.0  # a model against itself
    d = np.array([-0.2, -0.1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7])  # 2 of 9 <= 0
    assert S.bootstrap_p(d) == pytest.approx(2 * 3 / 10)
    assert S.bootstrap_p(-d) == S.bootstrap_p(d)
    rng = np.random.default_rng(5)
    x = rng.normal(size=2000)
    shifted = S.paired_bootstrap(np.mean, (x + 0.2,), (x + rng.normal(0, 0.5, 2000),), n_boot=500)
    assert shifted["lo"] > 0 and shifted["p"] == pytest.approx(2 / 501)
    null = S.paired_bootstrap(np.mean, (x,), (x + rng.normal(0, 0.5, 2000),), n_boot=500)
    assert null["lo"] < 0 < null["hi"] and null["p"] > 0.05  # the interval holds 0, and p says the same


def test_bootstrap_replicates_are_the_resamples_of_paired_bootstrap():
    rng = np.random.default_rng(6)
    a, b = rng.normal(0.1, 1, 400), rng.normal(0, 1, 400)
    rep = S.bootstrap_replicates(np.mean, [(a,), (b,)], n_boot=300, seed=7)
    ref = S.paired_bootstrap(np.mean, (a,), (b,), n_boot=300, seed=7)
    d = rep[0] - rep[1]
    assert rep.shape == (2, 300) and d.std(ddof=1) == pytest.approx(ref["std"], rel=1e-12)
    assert tuple(np.percentile(d, [2.5, 97.5])) == pytest.approx((ref["lo"], ref["hi"]), rel=1e-12)
    with pytest.raises(ValueError, match="same examples"):
        S.bootstrap_replicates(np.mean, [(a,), (b[:10],)])
    with pytest.raises(ValueError, match="groups is empty"):
        S.bootstrap_replicates(np.mean, [])
