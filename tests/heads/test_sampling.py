"""The chunked Monte Carlo core: exact gradients, chunking invariance, memory independent of S."""

import itertools
import math
import threading

import pytest
import torch
import torch.nn.functional as F

from harness.heads.sampling import NoiseLayout, chunk_logits, monte_carlo_log_average, seeded_noise
from harness.heads.variants import FORMS

KINDS = FORMS  # every noise form the sampler draws (a variant is one of them: the registry's `form`)


def _inputs(kind, n=3, k=4, d=5, r=2, pre_logits=False, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = d if pre_logits else k
    t = dict(
        mu=torch.randn(n, k, generator=g, dtype=dtype),
        scale=torch.rand(n, w, generator=g, dtype=dtype) + 0.1,
        factors=None,
        hom_factors=None,
        projection=torch.randn(k, w, generator=g, dtype=dtype) if pre_logits else None,
        temperature=torch.tensor(0.7, dtype=dtype),
    )
    if kind == "low_rank":
        t["factors"] = torch.randn(n, w, r, generator=g, dtype=dtype)
    elif kind == "parameter_efficient":
        t["factors"] = torch.randn(n, w, generator=g, dtype=dtype)
        t["hom_factors"] = torch.randn(w, r, generator=g, dtype=dtype)
    for v in t.values():
        if v is not None:
            v.requires_grad_(True)
    return t, w


@pytest.mark.parametrize(
    "kind,link,pre_logits,shared,scalar",
    list(itertools.product(KINDS, ("softmax", "sigmoid"), (False, True), (False, True), (False, True))),
)
def test_gradcheck_all_variants(kind, link, pre_logits, shared, scalar):
    """Analytic backward (with noise regeneration) equals finite differences, for every input."""
    t, w = _inputs(kind, pre_logits=pre_logits)
    noise = seeded_noise(
        3,
        3,
        w,
        0 if kind == "diagonal" else 2,
        shared=shared,
        diag_scalar=scalar,
        device=torch.device("cpu"),
        dtype=torch.float64,
    )
    layout = NoiseLayout(kind, link, 7, 3)
    names = list(t)

    def f(*args):
        return monte_carlo_log_average(layout, noise, **dict(zip(names, args)))

    assert torch.autograd.gradcheck(f, tuple(t.values()))


def _full_noise(n, s, w, r, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, s, r, generator=g), torch.randn(n, s, w, generator=g)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
@pytest.mark.parametrize("pre_logits", (False, True))
def test_chunked_equals_unchunked(kind, link, pre_logits):
    """Chunking: same noise, chunk 7 vs one pass: values 1e-6, gradients 1e-5."""
    n, k, d, r, s = 4, 6, 5, 3, 50
    t, w = _inputs(kind, n, k, d, r, pre_logits=pre_logits, dtype=torch.float32)
    eps_r, eps_w = _full_noise(n, s, w, r)

    def noise(start, length):
        return (eps_r[:, start : start + length] if kind != "diagonal" else None), eps_w[:, start : start + length]

    def run(chunk):
        out = monte_carlo_log_average(NoiseLayout(kind, link, s, chunk), noise, **t)
        out = out if link == "softmax" else out[0] - out[1]
        grads = torch.autograd.grad(
            (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), [v for v in t.values() if v is not None]
        )
        return out.detach(), grads

    # one pass = the direct formula on the materialised [N, S, K] samples
    z = chunk_logits(kind, *noise(0, s), **t)
    if link == "softmax":
        direct = torch.log(torch.softmax(z, -1).mean(1))
    else:
        p = torch.sigmoid(z).mean(1)
        direct = torch.log(p) - torch.log1p(-p)
    direct_grads = torch.autograd.grad(
        (direct * torch.linspace(-1, 1, direct.numel()).view_as(direct)).sum(), [v for v in t.values() if v is not None]
    )
    for chunk in (7, s):
        out, grads = run(chunk)
        torch.testing.assert_close(out, direct.detach(), atol=1e-6, rtol=1e-6)
        for a, b in zip(grads, direct_grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_saved_memory_does_not_grow_with_samples():
    """Autograd keeps only the inputs and [N, K] outputs: the same bytes for S = 10 and S = 1000."""

    def saved_bytes(s):
        total = []

        def pack(x):
            total.append(x.numel() * x.element_size())
            return x

        t, w = _inputs("low_rank", n=8, k=20, d=5, r=3, dtype=torch.float32)
        noise = seeded_noise(
            0, 8, w, 3, shared=False, diag_scalar=False, device=torch.device("cpu"), dtype=torch.float32
        )
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
            monte_carlo_log_average(NoiseLayout("low_rank", "softmax", s, 4), noise, **t)
        return sum(total)

    assert saved_bytes(1000) == saved_bytes(10) < 8 * 20 * 10 * 4 * 3


def test_noise_is_regenerated_identically():
    noise = seeded_noise(5, 2, 3, 2, shared=False, diag_scalar=False, device=torch.device("cpu"), dtype=torch.float32)
    a, b = noise(10, 4), noise(10, 4)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = noise(14, 4)
    assert not torch.equal(a[1], c[1])


def test_shared_noise_does_not_depend_on_the_row_count():
    """The eval noise bank of the head relies on this: shared noise is a function of (seed, chunk)."""

    def draw(rows):
        return seeded_noise(
            5, rows, 7, 2, shared=True, diag_scalar=False, device=torch.device("cpu"), dtype=torch.float32
        )(30, 20)

    a, b = draw(1), draw(500)
    assert a[1].shape == (1, 20, 7) and torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
@pytest.mark.parametrize("kind", KINDS)
def test_rows_beyond_the_linear_range_are_exact_in_float32(kind, link):
    """The eager kernels sum probabilities in linear space; a float32 row whose log p̄ lies far below
    float32's range (row 0: logits spread over ~1000 nats, so its linear sums underflow to 0) is redone in
    log space. Values and gradients of every row equal the float64 log-space formula on the same noise."""
    n, k, d, r, s = 3, 6, 5, 2, 40
    t, w = _inputs(kind, n, k, d, r, dtype=torch.float32)
    with torch.no_grad():
        t["mu"][0] *= 300.0
    eps_r, eps_w = _full_noise(n, s, w, r)

    def noise(start, length):
        return (eps_r[:, start : start + length] if kind != "diagonal" else None), eps_w[:, start : start + length]

    def weighted(out):
        out = out if link == "softmax" else torch.cat(out, -1)
        return out, (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum()

    out, loss = weighted(monte_carlo_log_average(NoiseLayout(kind, link, s, 7), noise, **t))
    leaves = [v for v in t.values() if v is not None]
    grads = torch.autograd.grad(loss, leaves)
    t64 = {name: None if v is None else v.detach().double().requires_grad_() for name, v in t.items()}
    z = chunk_logits(kind, *(None if e is None else e.double() for e in noise(0, s)), **t64)
    parts = [torch.log_softmax(z, -1)] if link == "softmax" else [F.logsigmoid(z), F.logsigmoid(-z)]
    direct = [torch.logsumexp(p, 1) - math.log(s) for p in parts]
    want, want_loss = weighted(direct[0] if link == "softmax" else tuple(direct))
    want_grads = torch.autograd.grad(want_loss, [v for v in t64.values() if v is not None])
    assert out[0].min() < -300  # beyond exp's float32 range: the linear sums alone would give -inf
    torch.testing.assert_close(out.double(), want.detach(), rtol=1e-5, atol=1e-4)
    for a, b in zip(grads, want_grads):
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
def test_chunks_split_over_threads_are_deterministic_and_match_one_thread(link):
    """Eager chunks run round robin on single-threaded pool threads (one per torch thread): repeated calls
    give bit-identical values and gradients, equal to one thread's loop up to the order of the sums."""
    threads = torch.get_num_threads()
    t, w = _inputs("low_rank", 4, 6, 5, 3, dtype=torch.float32)
    noise = seeded_noise(9, 4, w, 3, shared=False, diag_scalar=False, device=torch.device("cpu"), dtype=torch.float32)
    leaves = [v for v in t.values() if v is not None]

    def run():
        out = monte_carlo_log_average(NoiseLayout("low_rank", link, 50, 7), noise, **t)
        out = out if link == "softmax" else out[0] - out[1]
        return (
            out.detach(),
            *torch.autograd.grad((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum(), leaves),
        )

    try:
        torch.set_num_threads(2)
        split, again = run(), run()
        later = []  # a thread started after the split calls gets the caller's count, not the pool threads' 1
        thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
        thread.start()
        thread.join()
        assert later == [2] and torch.get_num_threads() == 2
        torch.set_num_threads(1)
        single = run()
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(split, again))
    for a, b in zip(split, single):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
