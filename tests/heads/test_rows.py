"""HET-XL's row-by-row driver (harness.heads.rows): the same values and gradients as the chunk-by-chunk driver on the
same noise, exact gradients, the log-space fallback, and when the planner chooses it."""

import itertools

import pytest
import torch
from test_sampling import _inputs as sampling_inputs

from harness.heads import HeteroscedasticHead, rows
from harness.heads.planning import plan_noise
from harness.heads.sampling import NoiseLayout, chunk_logits, monte_carlo_log_average, seeded_noise

KINDS = ("diagonal", "low_rank", "parameter_efficient")


def _inputs(kind, n=4, k=6, d=5, r=3, dtype=torch.float64, seed=0):
    """test_sampling's inputs with noise on the pre-logits (HET-XL, W = D): the row driver's case."""
    return sampling_inputs(kind, n, k, d, r, pre_logits=True, dtype=dtype, seed=seed)[0]


@pytest.mark.parametrize("kind,link", list(itertools.product(KINDS, ("softmax", "sigmoid"))))
def test_gradcheck_row_by_row(kind, link):
    """The backward pass read off M = Σ_s ε_s ⊗ g_s and A = Σ_s ε_R,s ⊗ g_s equals finite differences."""
    t = _inputs(kind)
    noise = seeded_noise(
        3, 4, 5, 0 if kind == "diagonal" else 3, shared=False, diag_scalar=False,
        device=torch.device("cpu"), dtype=torch.float64, by_row=True,
    )  # fmt: skip
    layout, names = NoiseLayout(kind, link, 11, 4), list(t)

    def f(*args):
        return monte_carlo_log_average(layout, noise, **dict(zip(names, args)))

    assert torch.autograd.gradcheck(f, tuple(t.values()))


def _weighted(out, link):
    out = out if link == "softmax" else torch.cat(out, -1)
    return out, (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum()


@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("kind,link", list(itertools.product(KINDS, ("softmax", "sigmoid"))))
def test_rows_equal_chunks_on_the_same_noise(kind, link, threads, monkeypatch):
    """One noise tensor read by row and by chunk: values and every gradient agree (float32), with M formed in
    column blocks of 2 classes and row 0 beyond the linear-space range (its logits spread over ~1000 nats), so
    the log-space fallback runs for it in both drivers."""
    n, k, d, r, s, chunk = 5, 7, 6, 3, 23, 8
    t = _inputs(kind, n, k, d, r, dtype=torch.float32, seed=1)
    with torch.no_grad():
        t["mu"][0] *= 300.0
    g = torch.Generator().manual_seed(2)
    eps_r, eps_w = torch.randn(n, s, r, generator=g), torch.randn(n, s, d, generator=g)
    eps_r = None if kind == "diagonal" else eps_r

    def by_chunk(start, length):
        return (None if eps_r is None else eps_r[:, start : start + length]), eps_w[:, start : start + length]

    def by_row(start, length):
        return by_chunk(start, length)

    by_row.row = lambda b, start, length, ws=None: tuple(
        None if e is None else e[b : b + 1] for e in by_chunk(start, length)
    )
    monkeypatch.setattr(rows, "_BLOCK_ELEMENTS", 2 * d)  # M in blocks of 2 columns
    leaves = [v for v in t.values() if v is not None]
    results = []
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        for noise in (by_chunk, by_row):
            out, loss = _weighted(monte_carlo_log_average(NoiseLayout(kind, link, s, chunk), noise, **t), link)
            results.append((out.detach(), *torch.autograd.grad(loss, leaves)))
    finally:
        torch.set_num_threads(old)
    assert results[0][0][0].min() < -300  # row 0 left the linear range
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_rows_are_independent_draws_and_reproducible():
    noise = seeded_noise(
        5, 3, 4, 2, shared=False, diag_scalar=False, device=torch.device("cpu"), dtype=torch.float32, by_row=True
    )
    a, b = noise.row(1, 0, 6), noise.row(1, 0, 6)
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0]) and a[1].shape == (1, 6, 4)
    assert not torch.equal(noise.row(0, 0, 6)[1], a[1]) and not torch.equal(noise.row(1, 6, 6)[1], a[1])
    stacked = noise(0, 6)  # every row's, as sample_logits reads them
    assert stacked[1].shape == (3, 6, 4) and torch.equal(stacked[1][1:2], a[1])
    with pytest.raises(ValueError, match="cannot be shared"):
        seeded_noise(5, 3, 4, 2, shared=True, diag_scalar=False, device="cpu", dtype=torch.float32, by_row=True)


def _plan(s, n=8, **options):
    head = HeteroscedasticHead(64, 10, num_factors=2, train_mc_samples=s, **options)
    head.train()
    noise, chunk, _, _ = plan_noise(head, torch.randn(n, 64), s, seed=0)
    return hasattr(noise, "row"), chunk


def test_the_planner_goes_row_by_row_for_long_hetxl_chunks_only():
    s = rows.MIN_SAMPLES
    assert _plan(s, noise_space="pre_logits") == (True, s)
    assert _plan(s - 1, noise_space="pre_logits")[0] is False  # too few samples for M to pay
    assert _plan(s, noise_space="pre_logits", n=1)[0] is False  # one row: the chunks split over threads instead
    assert _plan(s)[0] is False  # HET: no projection products to save
    assert _plan(s, noise_space="pre_logits", share_samples_across_batch=True)[0] is False
    assert _plan(s, noise_space="pre_logits", diag_noise="shared_scalar")[0] is False
    assert _plan(s, noise_space="pre_logits", mc_chunk_size=16)[0] is False


def test_sample_logits_are_the_samples_the_row_driver_averages():
    """In training with fresh noise the head averages exactly the samples sample_logits gives for the same seed."""
    s = rows.MIN_SAMPLES
    head = HeteroscedasticHead(32, 6, num_factors=2, noise_space="pre_logits", train_mc_samples=s)
    head.train()
    x = torch.randn(3, 32)
    with torch.no_grad():
        z = head.sample_logits(x, seed=4)
        direct = torch.log(torch.softmax(z, -1).mean(1))
        torch.testing.assert_close(head(x, seed=4), direct, rtol=1e-5, atol=1e-5)
    assert hasattr(plan_noise(head, x, s, 4)[0], "row")


def test_chunk_logits_of_rows_match_the_stacked_draw():
    """noise(start, length) of a by-row noise is every row's draw stacked: chunk_logits over it is per row."""
    t = _inputs("low_rank", dtype=torch.float32)
    noise = seeded_noise(
        1, 4, 5, 3, shared=False, diag_scalar=False, device=torch.device("cpu"), dtype=torch.float32, by_row=True
    )
    z = chunk_logits("low_rank", *noise(0, 9), **t)
    one = {k: (v[2:3] if k in ("mu", "scale", "factors") else v) for k, v in t.items()}
    torch.testing.assert_close(z[2:3], chunk_logits("low_rank", *noise.row(2, 0, 9), **one))


def test_on_an_accelerator_chunks_are_larger_and_hetxl_is_not_computed_row_by_row():
    """The planner reads the device type only: "meta" stands for a GPU here. There chunks are ACCELERATOR_CHUNK_SCALE
    times the CPU's (fresh noise and the evaluation bank) and HET-XL goes chunk by chunk (measured on an H200:
    results/bench/device-chunks.md)."""
    from harness.heads.options import BANK_ROWS
    from harness.heads.planning import (
        ACCELERATOR_CHUNK_SCALE,
        AUTO_CHUNK_ELEMENTS,
        FRESH_CHUNK_ELEMENTS,
        chunk_elements,
    )

    head = HeteroscedasticHead(64, 1000, num_factors=2, noise_space="pre_logits", train_mc_samples=10_000)
    plans = {}
    for mode in ("train", "eval"):
        getattr(head, mode)()
        for dev in ("cpu", "meta"):
            x = torch.zeros(16, 64, device=dev)
            noise, chunk, row_block, _ = plan_noise(head, x, 10_000, seed=0 if mode == "train" else None)
            plans[mode, dev] = (hasattr(noise, "row"), chunk, row_block)
    assert plans["train", "cpu"][0] is True and plans["train", "meta"][0] is False
    assert plans["train", "meta"][1] == FRESH_CHUNK_ELEMENTS * ACCELERATOR_CHUNK_SCALE // (16 * 1000)
    assert plans["eval", "meta"][1] == AUTO_CHUNK_ELEMENTS * ACCELERATOR_CHUNK_SCALE // (BANK_ROWS * 1000)
    assert plans["eval", "cpu"][1] == AUTO_CHUNK_ELEMENTS // (BANK_ROWS * 1000)
    assert abs(plans["eval", "meta"][2] - plans["eval", "cpu"][2]) <= 1  # the bank's row blocks: as many rows
    assert chunk_elements(FRESH_CHUNK_ELEMENTS, torch.device("cpu")) == FRESH_CHUNK_ELEMENTS
