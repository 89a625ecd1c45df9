"""harness.uncertainty.covariance: per-pair noise (PairNoise), its test against the label-noise transition
(transition_test) and the mean-logit baseline of Figure 2 (confusion_ranks by="mean")."""

import numpy as np
import pytest
import torch
from scipy import stats as sps

from harness.heads import HeteroscedasticHead
from harness.uncertainty.covariance import PairNoise, confusion_ranks, transition_test
from harness.uncertainty.mantel import mantel

K, D = 4, 6


def _head(seed: int = 0) -> HeteroscedasticHead:
    torch.manual_seed(seed)
    return HeteroscedasticHead(D, K, covariance="low_rank", num_factors=2).double().eval()


def _sigma_dense(head: HeteroscedasticHead, x: torch.Tensor) -> np.ndarray:
    """Σ(x) = V Vᵀ + diag(d²) per example ``[N, K, K]``, from the head's latent parameters."""
    p = head.latent_parameters(x)
    v, d = p["V"].detach().numpy(), p["d"].detach().numpy()
    return np.einsum("nkr,njr->nkj", v, v) + np.stack([np.diag(row**2) for row in d])


def test_pair_noise_equals_a_direct_per_example_computation():
    head = _head()
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.normal(size=(60, D)))
    y = rng.integers(0, K, 60)
    y[:4] = np.arange(K)  # every class present
    pn = PairNoise(K)
    pn.update(head, x[:25], y[:25])  # two batches: sums carry over
    pn.update(head, x[25:], y[25:])
    sigma = _sigma_dense(head, x)
    # the head's own dense covariance agrees with V Vᵀ + diag(d²)
    assert np.allclose(head.covariance(x).detach().numpy(), sigma, atol=1e-12)
    got = {(a, b): (v, c, ac) for a, b, v, c, ac in pn.pairs()}
    assert sorted(got) == [(a, b) for a in range(K) for b in range(a + 1, K)]
    for (a, b), (var, corr, abs_corr) in got.items():
        sel = (y == a) | (y == b)
        s = sigma[sel]
        want_var = np.mean(s[:, a, a] + s[:, b, b] - 2 * s[:, a, b])
        want_corr = np.mean(s[:, a, b] / np.sqrt(s[:, a, a] * s[:, b, b]))
        want_abs = np.mean(np.abs(s[:, a, b]) / np.sqrt(s[:, a, a] * s[:, b, b]))
        assert var == pytest.approx(want_var, rel=1e-10) and corr == pytest.approx(want_corr, rel=1e-10)
        assert abs_corr == pytest.approx(want_abs, rel=1e-10)
        assert var > 0 and -1 <= corr <= 1 and abs(corr) <= abs_corr <= 1


def test_pair_noise_var_matches_sampled_logit_differences():
    head = _head(1)
    x = torch.as_tensor(np.random.default_rng(1).normal(size=(1, D)))
    pn = PairNoise(K)
    pn.update(head, x, np.array([2]))
    p = head.latent_parameters(x)
    v, d = p["V"][0].detach().numpy(), p["d"][0].detach().numpy()
    rng = np.random.default_rng(2)
    eps_r, eps_k = rng.normal(size=(200_000, v.shape[1])), rng.normal(size=(200_000, K))
    u = eps_r @ v.T + eps_k * d  # noise samples of u(x) - μ(x)
    for a, b, var, *_ in pn.pairs():
        assert var == pytest.approx(np.var(u[:, a] - u[:, b]), rel=0.03)


def test_pair_noise_leaves_out_pairs_without_examples():
    head = _head()
    x = torch.as_tensor(np.random.default_rng(3).normal(size=(10, D)))
    y = np.array([0, 1] * 5)
    pn = PairNoise(K)
    pn.update(head, x, y)
    pairs = {(a, b): v for a, b, v, *_ in pn.pairs()}
    assert (2, 3) not in pairs and len(pairs) == 5
    sigma = _sigma_dense(head, x)
    s = sigma[y == 0]  # pair (0, 2): only the examples labelled 0
    assert pairs[(0, 2)] == pytest.approx(np.mean(s[:, 0, 0] + s[:, 2, 2] - 2 * s[:, 0, 2]), rel=1e-10)


def _planted(sign: float, seed: int = 0):
    """45 pairs of 10 classes; Var(u_a − u_b) a monotone function (increasing for sign > 0, decreasing
    for sign < 0) of T_ab + T_ba plus a little noise; the correlations random."""
    k = 10
    rng = np.random.default_rng(seed)
    t = rng.random((k, k)) ** 3
    t = t / t.sum(1, keepdims=True)
    pairs, mass = [], []
    for a in range(k):
        for b in range(a + 1, k):
            m = t[a, b] + t[b, a]
            mass.append(m)
            c = float(rng.uniform(-1, 1))
            pairs.append((a, b, float(np.exp(sign * 3 * m) + rng.normal(0, 0.01)), c, abs(c)))
    return t, pairs, np.array(mass)


def _matrix(pairs, values, k: int = 10) -> np.ndarray:
    m = np.zeros((k, k))
    for (a, b, *_), v in zip(pairs, values):
        m[a, b] = m[b, a] = v
    return m


def test_transition_test_rho_is_spearman_and_the_p_value_is_the_two_sided_mantel():
    t, pairs, mass = _planted(+1)
    assert len(pairs) == 45
    out = transition_test(t, pairs, n_resamples=1999)
    assert out["n_pairs"] == 45 and out["n_classes"] == 10 and out["n_resamples"] == 1999
    assert out["primary"] == "correlation" and out["secondary"] == ["var_diff", "abs_correlation"]
    assert out["alternative"] == "two-sided" and out["exact"] is False  # 10! > 1999: random permutations
    assert [p["transition"] for p in out["pairs"]] == pytest.approx(mass.tolist(), abs=1e-15)
    var = np.array([p[2] for p in pairs])
    corr = np.array([p[3] for p in pairs])
    assert out["var_diff"]["rho"] == pytest.approx(sps.spearmanr(mass, var).statistic, abs=1e-12)
    assert out["correlation"]["rho"] == pytest.approx(sps.spearmanr(mass, corr).statistic, abs=1e-12)
    assert out["abs_correlation"]["rho"] == pytest.approx(sps.spearmanr(mass, np.abs(corr)).statistic, abs=1e-12)
    # each p is the Mantel test of the K x K matrices built from the pairs (class labels permuted)
    mass_m = _matrix(pairs, mass)
    for key, values in (("var_diff", var), ("correlation", corr), ("abs_correlation", np.abs(corr))):
        want = mantel(mass_m, _matrix(pairs, values), n_perm=1999, seed=0)
        assert out[key] == {"rho": pytest.approx(want["rho"], abs=1e-12), "p_value": want["p_value"]}, key
    assert out["var_diff"]["rho"] > 0.8 and out["var_diff"]["p_value"] < 0.01
    # the opposite sign is just as significant: the test is two-sided
    inv_t, inv_pairs, inv_mass = _planted(-1)
    inv = transition_test(inv_t, inv_pairs, n_resamples=1999)
    inv_var = np.array([p[2] for p in inv_pairs])
    assert inv["var_diff"]["rho"] == pytest.approx(sps.spearmanr(inv_mass, inv_var).statistic, abs=1e-12)
    assert inv["var_diff"]["rho"] < -0.8 and inv["var_diff"]["p_value"] < 0.01
    # same seed, same p-value
    assert transition_test(t, pairs, n_resamples=1999)["var_diff"] == out["var_diff"]


def test_transition_test_leaves_out_classes_without_examples_and_is_exact_for_few_classes():
    t, pairs, _ = _planted(+1)
    # classes 8 and 9 had no evaluation examples: their pair (8, 9) is missing, the others stay in `pairs`
    partial = [p for p in pairs if (p[0], p[1]) != (8, 9)]
    out = transition_test(t, partial, n_resamples=99)
    assert out["n_classes"] == 8 and out["n_pairs"] == 28 and len(out["pairs"]) == 44
    inner = [p for p in pairs if p[1] < 8]
    sub = t[:8, :8]
    want = transition_test(sub, inner, n_resamples=99)
    assert out["var_diff"] == want["var_diff"] and out["correlation"] == want["correlation"]
    small = transition_test(t[:5, :5], [p for p in pairs if p[1] < 5], n_resamples=9999)
    assert small["exact"] is True and small["n_pairs"] == 10
    with pytest.raises(ValueError, match="outside"):
        transition_test(t[:5, :5], pairs)
    with pytest.raises(ValueError, match="at least 3"):
        transition_test(t, [p for p in pairs if p[:2] == (0, 1)])


def test_transition_test_uses_the_symmetrised_mass_t_ab_plus_t_ba():
    t = np.array([[0.7, 0.3, 0.0], [0.0, 0.9, 0.1], [0.5, 0.0, 0.5]])
    pairs = [(0, 1, 1.0, 0.0, 0.0), (0, 2, 2.0, -0.1, 0.1), (1, 2, 3.0, 0.2, 0.2)]
    out = transition_test(t, pairs, n_resamples=99)
    assert [p["transition"] for p in out["pairs"]] == pytest.approx([0.3, 0.5, 0.1])
    assert [(p["a"], p["b"], p["var_diff"], p["correlation"], p["abs_correlation"]) for p in out["pairs"]] == pairs


# --- confusion_ranks(by="mean") ----------------------------------------------------------------------------------


def test_confusion_ranks_by_mean_rank_by_the_mean_logits():
    head = _head(2)
    rng = np.random.default_rng(4)
    x = torch.as_tensor(rng.normal(size=(3, D)))
    w, bias = head.loc.weight.detach().numpy(), head.loc.bias.detach().numpy()
    mu = x.numpy() @ w.T + bias  # μ(x) computed directly
    c = 0
    others = [j for j in range(K) if j != c]
    top = max(others, key=lambda j: mu[0, j])  # example 0: hom predicts the largest μ among j != c
    low = min(others, key=lambda j: mu[1, j])  # example 1: hom predicts the smallest
    het = np.zeros((3, K))
    het[:, c] = 10.0  # het right on every example
    hom = np.zeros((3, K))
    hom[0, top], hom[1, low], hom[2, c] = 10.0, 10.0, 10.0  # example 2: hom right, left out
    index = np.array([7, 3, 5])  # rows ordered by index; batches in another order
    targets = np.array([c, c, c])
    batches = [(x[1:], targets[1:], index[1:]), (x[:1], targets[:1], index[:1])]
    ranks = confusion_ranks(head, batches, het, hom, index, by="mean")
    assert ranks.tolist() == [K - 1, 1]  # batch order: example 1 (smallest μ: last), then example 0
    # het wrong: left out
    het_wrong = het.copy()
    het_wrong[0] = 0.0
    het_wrong[0, top] = 10.0
    assert confusion_ranks(head, batches, het_wrong, hom, index, by="mean").tolist() == [K - 1]


def test_confusion_ranks_by_mean_differs_from_by_covariance_where_they_disagree():
    head = _head(3)
    rng = np.random.default_rng(5)
    x = torch.as_tensor(rng.normal(size=(40, D)))
    c = 1
    sigma = _sigma_dense(head, x)
    mu = (head.mean_logits(x)).detach().numpy()
    het = np.zeros((40, K))
    het[:, c] = 1.0
    hom = np.zeros((40, K))
    wrong = np.array([[j for j in range(K) if j != c][i % (K - 1)] for i in range(40)])
    hom[np.arange(40), wrong] = 1.0
    index = np.arange(40)
    batches = [(x, np.full(40, c), index)]
    by_mean = confusion_ranks(head, batches, het, hom, index, by="mean")
    by_cov = confusion_ranks(head, batches, het, hom, index)
    want_mean, want_cov = [], []
    for i in range(40):
        m, s = mu[i].copy(), np.abs(sigma[i, c]).copy()
        m[c] = s[c] = -np.inf
        want_mean.append(1 + int((m > m[wrong[i]]).sum()))
        want_cov.append(1 + int((s > s[wrong[i]]).sum()))
    assert by_mean.tolist() == want_mean and by_cov.tolist() == want_cov
    assert want_mean != want_cov
