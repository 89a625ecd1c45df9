"""The counter-based noise drawn inside torch.compile: standard normal, independent, a pure function of its indices."""

import numpy as np
import pytest
import torch
from scipy import stats

from harness.heads.noise import CounterNoise, counter_key, counter_normals


def _draw(key=7, samples=2000, rows=3, cols=50, start=0):
    return counter_normals(
        torch.tensor(key), torch.arange(start, start + samples), rows, torch.arange(cols), torch.float64
    )


def test_counter_normals_are_standard_normal():
    """Moments and a Kolmogorov-Smirnov test on 300k draws (p > 1e-3), and the tails reach 4.5 σ."""
    eps = _draw().flatten().numpy()
    assert abs(eps.mean()) < 0.01 and abs(eps.std() - 1) < 0.01
    assert abs(stats.skew(eps)) < 0.02 and abs(stats.kurtosis(eps)) < 0.05
    assert stats.kstest(eps, "norm").pvalue > 1e-3
    assert np.abs(eps).max() > 4.5


def test_counter_normals_are_uncorrelated_across_every_index():
    """Neighbouring samples, rows, columns and keys: |correlation| within 5 standard errors of 0."""
    eps = _draw(samples=4000)
    other_key = _draw(key=8, samples=4000)
    pairs = [(eps[:, 1:], eps[:, :-1]), (eps[1:], eps[:-1]), (eps[..., 1:], eps[..., :-1]), (eps, other_key)]
    for a, b in pairs:
        a, b = a.flatten(), b.flatten()
        r = torch.corrcoef(torch.stack([a, b]))[0, 1].item()
        assert abs(r) < 5 / np.sqrt(a.numel()), r


def test_counter_noise_depends_on_its_indices_only():
    """A sample's noise is the same whatever the chunk it is drawn in, and shared noise ignores the row count."""
    whole = _draw(samples=30)
    torch.testing.assert_close(_draw(samples=10, start=20), whole[:, 20:], rtol=0, atol=0)
    noise = CounterNoise(shared=True, width=6, num_factors=2, diag_scalar=False)
    a = noise.draw(torch.tensor(5), torch.arange(4), 1, torch.float32)
    b = noise.draw(torch.tensor(5), torch.arange(4), 500, torch.float32)
    assert a[1].shape == (1, 4, 6) and a[0].shape == (1, 4, 2)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    per_row = CounterNoise(shared=False, width=6, num_factors=0, diag_scalar=True).draw(
        torch.tensor(5), torch.arange(4), 3, torch.float32
    )
    assert per_row[0] is None and per_row[1].shape == (3, 4, 1) and not torch.equal(per_row[1][0], per_row[1][1])


@pytest.mark.parametrize("seed", [0, 1, 2**40 + 1, 2**62])
def test_counter_key_is_a_32_bit_key_that_separates_seeds(seed):
    key = counter_key(seed)
    assert 0 <= key < 2**32 and key != counter_key(seed + 1)


def test_the_eager_evaluation_bank_is_the_counter_noise_kept_or_drawn_per_call(monkeypatch):
    """Issue 43: the eager bank (kept, or drawn chunk by chunk when over the cache's size) holds exactly the
    counter-based noise of the eval seed, so a seeded evaluation is the same whether its bank was kept or not."""
    from harness.heads import HeteroscedasticHead
    from harness.heads import noise as noise_module

    torch.manual_seed(0)
    head = HeteroscedasticHead(6, 5, covariance="low_rank", num_factors=2, eval_mc_samples=30).eval()
    x = torch.randn(4, 6)
    noise_module.clear_bank_cache()
    with torch.no_grad():
        kept = head(x)
        assert torch.equal(head(x), kept)
        monkeypatch.setattr(noise_module, "BANK_CACHE_BYTES", 16)  # over the cache's size: drawn per chunk
        noise_module.clear_bank_cache()
        assert torch.equal(head(x), kept)
    bank = noise_module.counter_bank(
        0, 5, 2, diag_scalar=False, num_samples=30, device=torch.device("cpu"), dtype=torch.float32
    )
    want = CounterNoise(True, 5, 2, False).draw(torch.tensor(counter_key(0)), torch.arange(10, 17), 1, torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(bank(10, 7), want))
