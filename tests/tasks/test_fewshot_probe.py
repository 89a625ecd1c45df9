"""harness.tasks.fewshot: the closed-form ridge solver, the big_vision probe, the draws and the choice of λ."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from harness.tasks.fewshot import (
    BIAS_FEATURE,
    L2_GRID,
    STD_EPS,
    draw_shots,
    extract_features,
    fewshot_scores,
    fit_probes,
    ridge_solve,
)


@pytest.mark.parametrize("n,d", [(40, 6), (6, 40)], ids=["primal N>=D", "dual N<D"])
def test_ridge_solve_matches_least_squares_on_the_augmented_system(n, d):
    """W(λ) solves min ||XW - Y||² + λ||W||², i.e. the least-squares problem [X; √λ I] W = [Y; 0]."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(n, d)), rng.normal(size=(n, 3))
    lams = [2.0**-6, 0.7, 2.0**5]
    ws = ridge_solve(x, y, lams)
    assert ws.shape == (3, d, 3)
    for lam, w in zip(lams, ws):
        ref = np.linalg.lstsq(np.vstack([x, np.sqrt(lam) * np.eye(d)]), np.vstack([y, np.zeros((d, 3))]), rcond=None)[0]
        np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-8)
        sk = Ridge(alpha=lam, fit_intercept=False, solver="svd").fit(x, y).coef_.T
        np.testing.assert_allclose(w, sk, rtol=1e-5, atol=1e-8)
    # a single λ and torch input give the same solution
    np.testing.assert_allclose(ridge_solve(torch.as_tensor(x), y, 0.7)[0], ws[1], rtol=1e-10)


def test_the_probe_is_big_vision_s_standardised_regression_with_a_bias_feature_folded_into_weight_and_bias():
    rng = np.random.default_rng(1)
    x, labels = rng.normal(3.0, 2.0, size=(12, 5)), np.arange(12) % 4
    (probe,) = fit_probes(x, labels, 4, 0.5)
    mean, std = x.mean(0), x.std(0) + STD_EPS
    z = np.hstack([(x - mean) / std, np.full((12, 1), BIAS_FEATURE)])
    w = ridge_solve(z, 2 * np.eye(4)[labels] - 1, 0.5)[0]
    new = rng.normal(size=(7, 5))
    expected = np.hstack([(new - mean) / std, np.full((7, 1), BIAS_FEATURE)]) @ w
    np.testing.assert_allclose(probe.scores(new), expected, rtol=1e-9, atol=1e-9)
    assert probe.lam == 0.5 and probe.weight.shape == (5, 4) and probe.bias.shape == (4,)


def test_draws_are_seeded_disjoint_nested_and_exactly_k_per_class():
    labels = np.repeat(np.arange(3), [20, 30, 16])
    draws = draw_shots(labels, 3, [1, 5], seed=3, heldout=10)
    for s, (shot, held) in draws.items():
        assert np.bincount(labels[shot], minlength=3).tolist() == [s] * 3
        assert np.bincount(labels[held], minlength=3).tolist() == [10] * 3
        assert not set(shot) & set(held)
    assert set(draws[1][0]) <= set(draws[5][0])  # nested, as big_vision draws them
    again, other = draw_shots(labels, 3, [1, 5], seed=3), draw_shots(labels, 3, [1, 5], seed=4)
    assert all(np.array_equal(draws[s][0], again[s][0]) for s in draws)
    assert not np.array_equal(draws[5][0], other[5][0])
    # a class with fewer examples left than `heldout` gives what it has
    assert np.bincount(labels[draw_shots(labels, 3, [10], heldout=10)[10][1]]).tolist() == [10, 10, 6]


def _clusters(rng, centres, n_per_class, spread):
    y = np.repeat(np.arange(len(centres)), n_per_class)
    return centres[y] + spread * rng.normal(size=(len(y), centres.shape[1])), y


def test_separable_task_is_solved_and_random_labels_stay_at_chance():
    rng = np.random.default_rng(0)
    k = 5
    centres = 4 * rng.normal(size=(k, 32))
    pool_x, pool_y = _clusters(rng, centres, 40, 0.5)
    test_x, test_y = _clusters(rng, centres, 400, 0.5)
    draws = draw_shots(pool_y, k, [1, 5, 10], seed=0)
    scores = fewshot_scores(pool_x, pool_y, draws, test_x, test_y, k)
    assert all(v["prec@1"] > 0.97 for v in scores.values()), scores
    assert scores[5]["num_train"] == 25 and scores[5]["num_heldout"] == 50 and scores[5]["num_test"] == 2000
    assert all(v["lam"] in L2_GRID for v in scores.values())
    # random labels: nothing to learn, the test accuracy stays near 1/K (SE of a 2000-example mean ~ 0.009)
    noise_x, noise_y = rng.normal(size=(200, 32)), rng.integers(0, k, 200)
    t_x, t_y = rng.normal(size=(2000, 32)), rng.integers(0, k, 2000)
    chance = fewshot_scores(noise_x, noise_y, draw_shots(noise_y, k, [5, 10]), t_x, t_y, k)
    assert all(abs(v["prec@1"] - 1 / k) < 0.05 for v in chance.values()), chance


def test_lambda_is_never_chosen_on_test():
    """Permuting (or replacing) the test labels changes the accuracy, never the λ chosen."""
    rng = np.random.default_rng(2)
    k = 4
    centres = 4 * rng.normal(size=(k, 16))
    pool_x, pool_y = _clusters(rng, centres, 30, 3.0)  # overlapping clusters: λ matters
    test_x, test_y = _clusters(rng, centres, 100, 3.0)
    draws = draw_shots(pool_y, k, [1, 5, 10], seed=0)
    a = fewshot_scores(pool_x, pool_y, draws, test_x, test_y, k)
    b = fewshot_scores(pool_x, pool_y, draws, test_x, rng.permutation(test_y), k)
    c = fewshot_scores(pool_x, pool_y, draws, rng.normal(size=test_x.shape), test_y, k)
    assert [v["lam"] for v in a.values()] == [v["lam"] for v in b.values()] == [v["lam"] for v in c.values()]
    assert [v["prec@1"] for v in a.values()] != [v["prec@1"] for v in b.values()]
    # and it is the λ with the best held-out accuracy
    for s, (shot, held) in draws.items():
        probes = fit_probes(pool_x[shot], pool_y[shot], k, L2_GRID)
        held_acc = {p.lam: (p.predict(pool_x[held]) == pool_y[held]).mean() for p in probes}
        assert held_acc[a[s]["lam"]] == max(held_acc.values()) == a[s]["heldout_prec@1"]


def test_extract_features_uses_the_frozen_pre_logits_and_restores_the_mode():
    from harness.models import build_model

    torch.manual_seed(0)
    model = build_model({"backbone": "test_resnet", "num_classes": 3, "head": {"covariance": "none"}}).train()
    x = torch.randn(6, 3, 16, 16)
    loader = [(x[:4], torch.tensor([0, 1, 2, 0]), torch.arange(4)), (x[4:], torch.tensor([1, 2]), torch.arange(4, 6))]
    feats, labels, index = extract_features(model, loader)
    assert model.training and feats.dtype == np.float32 and feats.shape == (6, model.head.in_features)
    with torch.no_grad():
        np.testing.assert_allclose(feats, model.eval().pre_logits(x).numpy(), rtol=1e-5, atol=1e-6)
    assert labels.tolist() == [0, 1, 2, 0, 1, 2] and index.tolist() == list(range(6))


def test_bad_input_is_named():
    x, y = np.zeros((4, 3)), np.zeros((4, 2))
    with pytest.raises(ValueError, match="λ must be a finite number > 0"):
        ridge_solve(x, y, 0.0)
    with pytest.raises(ValueError, match="4 rows and targets 3"):
        ridge_solve(x, y[:3], 1.0)
    with pytest.raises(ValueError, match="NaN or infinite"):
        ridge_solve(np.full((4, 3), np.nan), y, 1.0)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        fit_probes(x, [0, 1, 2, 3], 3, 1.0)
    with pytest.raises(ValueError, match="integer class indices"):
        fit_probes(x, [0.0, 1.0, 2.0, 0.0], 3, 1.0)
    with pytest.raises(ValueError, match="shots must be whole numbers >= 1"):
        draw_shots([0, 1, 0, 1], 2, [0])
    with pytest.raises(
        ValueError,
        match="class 1 has 3 examples in pool X: 5 shots need at least 6 per class .*ask for at most 2 shots",
    ):
        draw_shots([0] * 9 + [1] * 3, 2, [1, 5], where="pool X")
    with pytest.raises(ValueError, match="class 1 has 1 example in .* needs at least 2 examples of every class"):
        draw_shots([0, 0, 0, 1], 2, [1])
    with pytest.raises(TypeError, match="pre_logits"):
        extract_features(torch.nn.Linear(2, 2), [])
