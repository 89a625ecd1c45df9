"""Constructor validation, evaluation determinism, reference-compatible names, parameter counts."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from harness.heads import HeteroscedasticHead, MCSigmoidDenseFA, MCSoftmaxDenseFA, count_head_parameters
from harness.heads.variants import VARIANTS

FACTORED = tuple(n for n, v in VARIANTS.items() if v.has_factors)


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        (dict(covariance="full"), "unknown covariance 'full': use one of"),
        (dict(link="probit"), "unknown link 'probit'"),
        (dict(noise_space="latent"), "unknown noise_space"),
        (dict(covariance="low_rank", num_factors=11), "num_factors must be an integer in [1, 10]"),
        (dict(covariance="parameter_efficient", num_factors=0), "num_factors must be an integer in [1, 10]"),
        (dict(covariance="low_rank", num_factors=9, noise_space="pre_logits"), "[1, 8] = [1, D (in_features)]"),
        (dict(temperature=0.0), "temperature must be a finite number at least 0.001"),
        (dict(temperature=-1.0), "temperature must be a finite number at least 0.001"),
        (
            dict(learn_temperature=True, temperature_bounds=(2.0, 1.0)),
            "lower < upper, each a finite number at least 0.001",
        ),
        (dict(train_mc_samples=0), "train_mc_samples must be a whole number in [1, 1,000,000]"),
        (dict(eval_mc_samples=-3), "eval_mc_samples must be a whole number in [1,"),
        (dict(mc_chunk_size=0), "mc_chunk_size must be >= 1"),
        (dict(clip_eps=0.7), "clip_eps must be in (0, 0.5)"),
        (dict(diag_noise="rank1"), "unknown diag_noise"),
    ],
)
def test_bad_options_raise_value_error_naming_the_fix(kwargs, needle):
    kwargs = {"covariance": "diagonal", **kwargs}
    with pytest.raises(ValueError) as e:
        HeteroscedasticHead(8, 10, **kwargs)
    assert needle in str(e.value)


def test_input_width_mismatch_names_the_fix():
    head = HeteroscedasticHead(8, 10, covariance="low_rank", num_factors=2)
    with pytest.raises(ValueError, match=r"width D=8 .* in_features=7"):
        head(torch.randn(2, 7))
    with pytest.raises(ValueError, match=r"mc_samples must be a whole number in \[1, 1,000,000\]"):
        head(torch.randn(2, 8), mc_samples=0)


def test_default_rank_is_the_papers_capped_at_the_noise_width():
    assert HeteroscedasticHead(8, 1000).num_factors == 15
    assert HeteroscedasticHead(8, 10, covariance="parameter_efficient").num_factors == 10


def test_homoscedastic_head_is_exactly_a_linear_layer():
    head = HeteroscedasticHead(8, 10, covariance="none")
    x = torch.randn(4, 8)
    assert torch.equal(head(x), F.linear(x, head.loc.weight, head.loc.bias))
    with pytest.raises(ValueError):
        head.covariance(x)


def test_evaluation_is_deterministic_and_training_is_random_but_seedable():
    head = HeteroscedasticHead(8, 10, covariance="low_rank", num_factors=3, train_mc_samples=20, eval_mc_samples=20)
    x = torch.randn(4, 8)
    head.eval()
    assert torch.equal(head(x), head(x))
    head.eval_seed = None
    assert not torch.equal(head(x), head(x))
    head.train()
    assert not torch.equal(head(x), head(x))
    torch.manual_seed(3)
    a = head(x)
    torch.manual_seed(3)
    assert torch.equal(a, head(x))


def test_large_covariance_is_refused_unless_asked_for_in_blocks():
    head = HeteroscedasticHead(8, 3000, covariance="parameter_efficient", num_factors=4)
    x = torch.randn(20, 8)
    with pytest.raises(ValueError, match="rows=/cols="):
        head.covariance(x)
    block = head.covariance(x, rows=torch.arange(10), cols=torch.arange(5, 25))
    assert block.shape == (20, 10, 20)
    assert head.covariance(x, max_elements=2**28).shape == (20, 3000, 3000)


def test_reference_constructors_map_to_the_same_model():
    h = MCSoftmaxDenseFA(
        num_classes=10,
        num_factors=3,
        temperature=1.5,
        parameter_efficient=True,
        train_mc_samples=7,
        test_mc_samples=9,
        share_samples_across_batch=True,
        tune_temperature=True,
        temperature_lower_bound=0.05,
        temperature_upper_bound=5.0,
        in_features=16,
    )
    assert (h.covariance_type, h.link, h.num_factors, h.train_mc_samples, h.eval_mc_samples) == (
        "parameter_efficient",
        "softmax",
        3,
        7,
        9,
    )
    assert h.share_samples_across_batch and h.learn_temperature and h.temperature_bounds == (0.05, 5.0)
    assert MCSoftmaxDenseFA(10, 0, in_features=16).covariance_type == "diagonal"
    assert MCSoftmaxDenseFA(10, 4, in_features=16, latent_dim=16).noise_space == "pre_logits"
    assert MCSoftmaxDenseFA(10, 4, in_features=16).fixed_temperature.item() == 1.0
    s = MCSigmoidDenseFA(num_outputs=20, in_features=16)
    assert (s.link, s.covariance_type) == ("sigmoid", "diagonal")
    assert MCSigmoidDenseFA(20, 5, in_features=16, eps=1e-7).clip_eps == 1e-7
    with pytest.raises(ValueError, match="latent_dim must equal in_features"):
        MCSoftmaxDenseFA(10, 3, in_features=16, latent_dim=8)


@pytest.mark.parametrize(
    "cov,space,learn,bias",
    [  # a head refuses the options it does not use: a noise space without noise, pe_noise_bias off PE
        (cov, space, learn, bias)
        for cov, space, learn, bias in itertools.product(
            VARIANTS, ("logits", "pre_logits"), (False, True), (False, True)
        )
        if (VARIANTS[cov].input_dependent or space == "logits")
        and (bias or VARIANTS[cov].form == "parameter_efficient")
    ],
)
def test_parameter_count_formulas(cov, space, learn, bias):
    d, k, r = 12, 7, 3
    factors = r if VARIANTS[cov].has_factors else None  # a head without factors refuses num_factors
    head = HeteroscedasticHead(
        d, k, covariance=cov, num_factors=factors, noise_space=space, learn_temperature=learn, pe_noise_bias=bias
    )
    n = sum(p.numel() for p in head.parameters())
    assert n == count_head_parameters(d, k, cov, r, space, learn, bias)
    w = d if space == "pre_logits" else k
    extra = {  # the built-ins' formulas, written out independently of the registry's ``count``
        "none": 0,
        "diagonal": (d + 1) * w,
        "low_rank": (d + 1) * w * (r + 1),
        "parameter_efficient": 2 * (d + 1) * w + (r + (1 if bias else 0)) * w,
    }.get(cov)
    assert extra is None or n - (d + 1) * k - int(learn) == extra


def test_published_parameter_figures():
    """Parameter counts: ResNet-152 R=15 extra, ImageNet-21k PE/FA extras, HET/HET-XL = K/D."""
    det = count_head_parameters(2048, 1000, "none")
    assert count_head_parameters(2048, 1000, "low_rank", 15) - det == 32_784_000
    det21k = count_head_parameters(2048, 21843, "none")
    assert count_head_parameters(2048, 21843, "parameter_efficient", 50) - det21k == 90_626_607
    assert count_head_parameters(2048, 21843, "low_rank", 50) - det21k == 2_282_571_657
    for cov in FACTORED:
        het = count_head_parameters(2048, 29593, cov, 50) - count_head_parameters(2048, 29593, "none")
        xl = count_head_parameters(2048, 29593, cov, 50, "pre_logits") - count_head_parameters(2048, 29593, "none")
        assert het / xl == pytest.approx(29593 / 2048, rel=1e-12)


def test_init_schemes():
    for init in ("keras", "flax"):
        head = HeteroscedasticHead(64, 10, covariance="low_rank", num_factors=2, init=init)
        assert all((m.bias == 0).all() for m in (head.loc, head.diag, head.scale))
    flax = HeteroscedasticHead(4096, 10, covariance="low_rank", num_factors=2, init="flax", cov_init_scale=0.01)
    assert flax.scale.weight.std().item() == pytest.approx((0.01 / 4096) ** 0.5, rel=0.1)
    assert flax.loc.weight.std().item() == pytest.approx((1 / 4096) ** 0.5, rel=0.1)
    with pytest.raises(ValueError, match="cov_init_scale"):
        HeteroscedasticHead(8, 10, covariance="diagonal", cov_init_scale=0.1)
    torch_init = HeteroscedasticHead(8, 10, covariance="diagonal", init="torch")
    assert (torch_init.loc.bias != 0).any()


def test_latent_parameters_expose_the_distribution():
    x = torch.randn(3, 8)
    pe = HeteroscedasticHead(8, 10, covariance="parameter_efficient", num_factors=2)
    lat = pe.latent_parameters(x)
    assert lat["mu"].shape == (3, 10) and lat["d"].shape == (3, 10) and lat["v"].shape == (3, 10)
    assert lat["V"].shape == (10, 2) and lat["b_V"].shape == (10,) and lat["tau"].item() == 1.0
    torch.testing.assert_close(pe.factor_loadings(x), lat["v"].unsqueeze(-1) * lat["V"])
    low = HeteroscedasticHead(8, 10, covariance="low_rank", num_factors=2)
    lat = low.latent_parameters(x)
    sigma = lat["V"] @ lat["V"].transpose(1, 2) + torch.diag_embed(lat["d"] ** 2)
    torch.testing.assert_close(low.covariance(x), sigma)
    assert set(HeteroscedasticHead(8, 10, covariance="none").latent_parameters(x)) == {"mu", "tau"}


# evaluation independent of batching -----------------------------------------------------------------
BATCH_VARIANTS = [
    dict(covariance="diagonal"),
    dict(covariance="diagonal", diag_noise="shared_scalar"),
    dict(covariance="low_rank", num_factors=3),
    dict(covariance="parameter_efficient", num_factors=3),
    dict(covariance="low_rank", num_factors=3, noise_space="pre_logits"),
    dict(covariance="parameter_efficient", num_factors=3, noise_space="pre_logits"),
]


@pytest.mark.parametrize("kw", BATCH_VARIANTS)
@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
@pytest.mark.parametrize("chunk", (None, 301))
def test_seeded_evaluation_does_not_depend_on_batch_size_or_position(kw, link, chunk):
    """An example's eval output is the same in batches of 1, 7 and 500 and at any position.

    fp32, tolerance 1e-5 (abs and rel): what is left is float rounding of the dense layers on
    different batch shapes (observed <= 5e-7). S = 2000 spans two automatic chunks (and seven of
    301), and 500 rows are processed in several row blocks, so both chunk boundaries and row
    blocking are exercised. Gradients w.r.t. the input agree too.
    """
    torch.manual_seed(0)
    head = HeteroscedasticHead(12, 10, link=link, eval_mc_samples=2000, mc_chunk_size=chunk, **kw).eval()
    x = torch.randn(500, 12, requires_grad=True)
    full = head(x)
    (grad_full,) = torch.autograd.grad((full * torch.linspace(-1, 1, 10)).sum(), x)
    tol = dict(atol=1e-5, rtol=1e-5)
    for i in (0, 123, 499):
        torch.testing.assert_close(head(x[i : i + 1]), full[i : i + 1], **tol)
    for j in (0, 250, 493):
        xs = x[j : j + 7].detach().requires_grad_(True)
        out = head(xs)
        torch.testing.assert_close(out, full[j : j + 7], **tol)
        (g,) = torch.autograd.grad((out * torch.linspace(-1, 1, 10)).sum(), xs)
        torch.testing.assert_close(g, grad_full[j : j + 7], **tol)
    perm = torch.randperm(500)
    torch.testing.assert_close(head(x[perm]), full[perm], **tol)
    if link == "sigmoid":
        return
    # analysis helpers (link-independent): the same samples and covariance whatever the batch
    z7 = head.sample_logits(x[250:257], mc_samples=2000)
    torch.testing.assert_close(head.sample_logits(x[253:254], mc_samples=2000), z7[3:4], **tol)
    torch.testing.assert_close(head.sample_logits(x, mc_samples=2000)[250:257], z7, **tol)
    want = torch.log(torch.softmax(z7, -1).mean(1))
    torch.testing.assert_close(full[250:257], want, atol=1e-4, rtol=1e-4)  # forward averages these samples
    cov = head.covariance(x)
    torch.testing.assert_close(head.covariance(x[123:124]), cov[123:124], **tol)
    torch.testing.assert_close(head.covariance(x[250:257]), cov[250:257], **tol)


def test_eval_seed_fixes_the_bank_and_none_gives_fresh_noise():
    head = HeteroscedasticHead(8, 10, covariance="low_rank", num_factors=3, eval_mc_samples=50).eval()
    x = torch.randn(5, 8)
    a = head(x)
    assert torch.equal(a, head(x)) and torch.equal(head.sample_logits(x), head.sample_logits(x))
    assert torch.equal(head(x, seed=0), a) and not torch.equal(head(x, seed=1), a)
    torch.testing.assert_close(head(x[2:3], seed=1), head(x, seed=1)[2:3], atol=1e-5, rtol=1e-5)  # a bank too
    head.eval_seed = 4
    assert not torch.equal(head(x), a)
    head.eval_seed = None
    b, c = head(x), head(x)
    assert not torch.equal(b, c) and not torch.equal(b, a)
    assert not torch.equal(head.sample_logits(x), head.sample_logits(x))


def test_training_noise_stays_independent_per_row():
    """Training keeps the paper's estimator: identical rows get different noise (unless shared)."""
    x = torch.randn(1, 8).expand(6, 8)
    head = HeteroscedasticHead(8, 10, covariance="low_rank", num_factors=3, train_mc_samples=50).train()
    out = head(x)
    assert all(not torch.equal(out[0], out[i]) for i in range(1, 6))
    out = head(x, seed=3)
    assert all(not torch.equal(out[0], out[i]) for i in range(1, 6))
    head.share_samples_across_batch = True
    out = head(x)
    torch.testing.assert_close(out, out[:1].expand_as(out), atol=1e-6, rtol=0)  # fp32 rounding only


def test_seeded_evaluation_keeps_autograd_memory_flat_in_samples():
    """Row blocks of the eval bank store only inputs and [N, K] outputs, whatever S."""
    head = HeteroscedasticHead(8, 100, covariance="low_rank", num_factors=3).eval()
    x = torch.randn(200, 8)  # 4 row blocks of 64 rows, chunks of 163 samples, for S >= 163

    def saved_bytes(s):
        total = []

        def pack(t):
            total.append(t.numel() * t.element_size())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            head(x, mc_samples=s)
        return sum(total)

    assert saved_bytes(1000) == saved_bytes(200) < 200 * 100 * 10 * 4
