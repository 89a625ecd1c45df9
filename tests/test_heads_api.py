"""Constructor validation, evaluation determinism, reference-compatible names, parameter counts."""

import itertools

import pytest
import torch
import torch.nn.functional as F

from harness.heads import HeteroscedasticHead, MCSigmoidDenseFA, MCSoftmaxDenseFA, count_head_parameters


@pytest.mark.parametrize("kwargs,needle", [
    (dict(covariance="full"), "unknown covariance 'full': use one of"),
    (dict(link="probit"), "unknown link 'probit'"),
    (dict(noise_space="latent"), "unknown noise_space"),
    (dict(covariance="low_rank", num_factors=11), "num_factors must be an integer in [1, 10]"),
    (dict(covariance="parameter_efficient", num_factors=0), "num_factors must be an integer in [1, 10]"),
    (dict(covariance="low_rank", num_factors=9, noise_space="pre_logits"), "[1, 8] = [1, D (in_features)]"),
    (dict(temperature=0.0), "temperature must be a finite float > 0"),
    (dict(temperature=-1.0), "temperature must be a finite float > 0"),
    (dict(learn_temperature=True, temperature_bounds=(2.0, 1.0)), "0 < lower < upper"),
    (dict(train_mc_samples=0), "train_mc_samples must be >= 1"),
    (dict(eval_mc_samples=-3), "eval_mc_samples must be >= 1"),
    (dict(mc_chunk_size=0), "mc_chunk_size must be >= 1"),
    (dict(clip_eps=0.7), "clip_eps must be in (0, 0.5)"),
    (dict(diag_noise="rank1"), "unknown diag_noise"),
])
def test_bad_options_raise_value_error_naming_the_fix(kwargs, needle):
    kwargs = {"covariance": "diagonal", **kwargs}
    with pytest.raises(ValueError) as e:
        HeteroscedasticHead(8, 10, **kwargs)
    assert needle in str(e.value)


def test_input_width_mismatch_names_the_fix():
    head = HeteroscedasticHead(8, 10, covariance="low_rank", num_factors=2)
    with pytest.raises(ValueError, match=r"width D=8 .* in_features=7"):
        head(torch.randn(2, 7))
    with pytest.raises(ValueError, match="mc_samples must be >= 1"):
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
    h = MCSoftmaxDenseFA(num_classes=10, num_factors=3, temperature=1.5, parameter_efficient=True,
                         train_mc_samples=7, test_mc_samples=9, share_samples_across_batch=True,
                         tune_temperature=True, temperature_lower_bound=0.05, temperature_upper_bound=5.0,
                         in_features=16)
    assert (h.covariance_type, h.link, h.num_factors, h.train_mc_samples, h.eval_mc_samples) == (
        "parameter_efficient", "softmax", 3, 7, 9)
    assert h.share_samples_across_batch and h.learn_temperature and h.temperature_bounds == (0.05, 5.0)
    assert MCSoftmaxDenseFA(10, 0, in_features=16).covariance_type == "diagonal"
    assert MCSoftmaxDenseFA(10, 4, in_features=16, latent_dim=16).noise_space == "pre_logits"
    assert MCSoftmaxDenseFA(10, 4, in_features=16).fixed_temperature.item() == 1.0
    s = MCSigmoidDenseFA(num_outputs=20, in_features=16)
    assert (s.link, s.covariance_type) == ("sigmoid", "diagonal")
    assert MCSigmoidDenseFA(20, 5, in_features=16, eps=1e-7).clip_eps == 1e-7
    with pytest.raises(ValueError, match="latent_dim must equal in_features"):
        MCSoftmaxDenseFA(10, 3, in_features=16, latent_dim=8)


@pytest.mark.parametrize("cov,space,learn,bias", list(itertools.product(
    ("none", "diagonal", "low_rank", "parameter_efficient"), ("logits", "pre_logits"), (False, True), (False, True))))
def test_parameter_count_formulas(cov, space, learn, bias):
    d, k, r = 12, 7, 3
    head = HeteroscedasticHead(d, k, covariance=cov, num_factors=r, noise_space=space, learn_temperature=learn,
                               pe_noise_bias=bias)
    n = sum(p.numel() for p in head.parameters())
    assert n == count_head_parameters(d, k, cov, r, space, learn, bias)
    w = d if space == "pre_logits" else k
    extra = {"none": 0, "diagonal": (d + 1) * w, "low_rank": (d + 1) * w * (r + 1),
             "parameter_efficient": 2 * (d + 1) * w + (r + (1 if bias else 0)) * w}[cov]
    assert n - (d + 1) * k - int(learn) == extra


def test_published_parameter_figures():
    """het-head.md Sec. 8.2: ResNet-152 R=15 extra, ImageNet-21k PE/FA extras, HET/HET-XL = K/D."""
    det = count_head_parameters(2048, 1000, "none")
    assert count_head_parameters(2048, 1000, "low_rank", 15) - det == 32_784_000
    det21k = count_head_parameters(2048, 21843, "none")
    assert count_head_parameters(2048, 21843, "parameter_efficient", 50) - det21k == 90_626_607
    assert count_head_parameters(2048, 21843, "low_rank", 50) - det21k == 2_282_571_657
    for cov in ("low_rank", "parameter_efficient"):
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
