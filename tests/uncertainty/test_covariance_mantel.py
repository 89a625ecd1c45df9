"""harness.uncertainty.mantel.mantel against a brute-force enumeration of all class permutations, and why
class labels (not pairs) are permuted."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from harness.uncertainty.mantel import mantel


def _sym(rng: np.random.Generator, k: int, base: "np.ndarray | None" = None, noise: float = 1.0) -> np.ndarray:
    m = rng.normal(size=(k, k)) * noise + (0 if base is None else base)
    m = (m + m.T) / 2
    np.fill_diagonal(m, rng.normal(size=k) * 100)  # the diagonal must not matter
    return m


def _brute_force(x: np.ndarray, y: np.ndarray) -> "tuple[float, list[float]]":
    """Spearman ρ of the upper triangles, and ρ of x against y[π][:, π] for all K! permutations π."""
    k = len(x)
    iu = np.triu_indices(k, 1)
    rho = sps.spearmanr(x[iu], y[iu]).statistic
    perm = [sps.spearmanr(x[iu], y[np.ix_(p, p)][iu]).statistic for p in itertools.permutations(range(k))]
    return float(rho), perm


@pytest.mark.parametrize("k,seed", [(5, 0), (6, 1)])
def test_mantel_equals_the_brute_force_permutation_distribution(k, seed):
    rng = np.random.default_rng(seed)
    x = _sym(rng, k)
    y = _sym(rng, k, base=x, noise=1.5)  # associated, but not perfectly
    rho, perm = _brute_force(x, y)
    perm = np.array(perm)
    assert len(perm) == math.factorial(k)
    want = {
        "two-sided": np.mean(np.abs(perm) >= abs(rho) - 1e-12),
        "greater": np.mean(perm >= rho - 1e-12),
        "less": np.mean(perm <= rho + 1e-12),
    }
    for alternative, p in want.items():
        r = mantel(x, y, n_perm=9999, alternative=alternative)
        assert r["exact"] and r["n_perm"] == math.factorial(k) and r["n_pairs"] == k * (k - 1) // 2
        assert r["rho"] == pytest.approx(rho, abs=1e-12) and r["alternative"] == alternative
        assert r["p_value"] == pytest.approx(p, abs=1e-12), alternative
    assert 0.0 < want["two-sided"] < 0.5  # a non-trivial p: the comparison means something
    # symmetric in x and y (relabelling y by π is relabelling x by π⁻¹)
    assert mantel(y, x)["p_value"] == pytest.approx(want["two-sided"], abs=1e-12)


def test_mantel_random_permutations_approach_the_exact_p():
    rng = np.random.default_rng(2)
    x = _sym(rng, 6)
    y = _sym(rng, 6, base=x, noise=2.0)
    exact = mantel(x, y)
    assert exact["exact"]
    mc = mantel(x, y, n_perm=500, seed=3)  # 500 < 6! = 720: random permutations
    assert not mc["exact"] and mc["n_perm"] == 500 and mc["rho"] == exact["rho"]
    assert round(mc["p_value"] * 501) == pytest.approx(mc["p_value"] * 501, abs=1e-9)  # (1 + count) / 501
    assert abs(mc["p_value"] - exact["p_value"]) < 4 * math.sqrt(exact["p_value"] * (1 - exact["p_value"]) / 500)
    assert mantel(x, y, n_perm=500, seed=3) == mc  # same seed, same p
    k12 = _sym(rng, 12)  # 12! permutations: never enumerated
    r = mantel(k12, _sym(rng, 12, base=k12, noise=0.5), n_perm=999)
    assert not r["exact"] and r["rho"] > 0.5 and r["p_value"] == pytest.approx(1 / 1000)


def test_mantel_permutes_classes_not_pairs():
    """Additive class effects, x_ab = u_a + u_b and y_ab = v_a + v_b, with u and v independent: no association
    between the two matrices' classes, so a test at 5% should reject about 5% of the time. The Mantel test does
    (label permutations keep the dependence among pairs sharing a class); shuffling the pairs treats the
    K(K − 1)/2 entries as independent and rejects far more often."""
    rng = np.random.default_rng(4)
    k, draws, n_perm = 8, 200, 199
    iu = np.triu_indices(k, 1)
    reject_mantel = reject_pairs = 0
    for _ in range(draws):
        u, v = rng.normal(size=k), rng.normal(size=k)
        x, y = u[:, None] + u[None], v[:, None] + v[None] + 0.1 * _sym(rng, k)
        r = mantel(x, y, n_perm=n_perm, seed=int(rng.integers(1 << 30)))
        reject_mantel += r["p_value"] <= 0.05
        rx, ry = sps.rankdata(x[iu]), sps.rankdata(y[iu])
        cx, cy = rx - rx.mean(), ry - ry.mean()
        shuffled = rng.permuted(np.tile(cy, (n_perm, 1)), axis=1) @ cx / (cx @ cx)  # Spearman ρ, pairs shuffled
        reject_pairs += (1 + np.sum(np.abs(shuffled) >= abs(r["rho"]))) / (1 + n_perm) <= 0.05
    assert reject_mantel / draws < 0.1 and reject_pairs / draws > 2 * max(reject_mantel / draws, 0.05)


def test_mantel_identical_matrices_and_the_alternatives():
    rng = np.random.default_rng(5)
    x = _sym(rng, 5)
    same = mantel(x, x.copy())
    assert same["rho"] == pytest.approx(1.0) and same["p_value"] == pytest.approx(1 / 120)  # only π = id reaches 1
    assert mantel(x, x.copy(), alternative="greater")["p_value"] == pytest.approx(1 / 120)
    assert mantel(x, -x, alternative="less")["p_value"] == pytest.approx(1 / 120)
    assert mantel(x, -x, alternative="greater")["p_value"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "x,y,kw,match",
    [
        (np.zeros((4, 3)), np.zeros((4, 3)), {}, "square"),
        (np.eye(4), np.eye(5), {}, "same K"),
        (np.ones((2, 2)), np.ones((2, 2)), {}, "at least 3"),
        (np.arange(16.0).reshape(4, 4), np.arange(16.0).reshape(4, 4), {}, "symmetric"),
        (np.full((4, 4), np.nan), np.ones((4, 4)), {}, "NaN"),
        (np.ones((4, 4)), np.add.outer(np.arange(4.0), np.arange(4.0)), {}, "same value"),
        (
            np.add.outer(np.arange(4.0), np.arange(4.0)),
            np.add.outer(np.arange(4.0), np.arange(4.0)),
            {"alternative": "two_sided"},
            "alternative",
        ),
        (
            np.add.outer(np.arange(4.0), np.arange(4.0)),
            np.add.outer(np.arange(4.0), np.arange(4.0)),
            {"n_perm": 0},
            "n_perm",
        ),
    ],
)
def test_mantel_bad_input(x, y, kw, match):
    with pytest.raises(ValueError, match=match):
        mantel(x, y, **kw)
