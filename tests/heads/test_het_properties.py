"""Property tests of the HET head (paper Sec. 3, Eq. 4-7): limits, reductions, correlated cases, gradients."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from harness.heads import MIN_SCALE, HeteroscedasticHead
from harness.heads.variants import COVARIANCES, VARIANTS

FACTORED = tuple(n for n, v in VARIANTS.items() if v.has_factors)

#: every variant with noise, from the registry (R = 2 where it has factors), then the factored ones with their noise
#: on the pre-logits (HET-XL)
CASES = [dict(covariance=n, **({"num_factors": 2} if v.has_factors else {})) for n, v in VARIANTS.items() if v.form]
CASES += [dict(c, noise_space="pre_logits") for c in CASES if "num_factors" in c]
FACTORED_CASES = [c for c in CASES if "num_factors" in c and "noise_space" not in c]


def case_id(kw: dict) -> str:
    return "-".join(str(v) for k, v in kw.items() if k != "num_factors")


def make_head(d=6, k=4, **kw):
    torch.manual_seed(0)
    return HeteroscedasticHead(d, k, **kw).double().eval()


def zero_factor_layers(head):
    """Zero every parameter of the variant's own layers (the registry's ``layers``): V = 0, the diagonal head."""
    with torch.no_grad():
        for name in head.variant.layers:
            layer = getattr(head, name)
            for p in layer.parameters() if isinstance(layer, torch.nn.Module) else [layer]:
                p.zero_()


def inverse_softplus(y):
    return y + torch.log(-torch.expm1(-y))


def set_latent(head, mu, d, V=None):
    """Make the head output the given μ [K], d [K] and V [K, R] whatever its input."""
    with torch.no_grad():
        head.loc.weight.zero_()
        head.loc.bias.copy_(mu)
        head.diag.weight.zero_()
        head.diag.bias.copy_(inverse_softplus(d - MIN_SCALE))
        if V is not None:
            head.scale.weight.zero_()
            head.scale.bias.copy_(V.reshape(-1))


# 1 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", CASES, ids=case_id)
@pytest.mark.parametrize("shared", (False, True))
def test_shapes_and_normalisation(kw, shared):
    for link in ("softmax", "sigmoid"):
        head = make_head(link=link, share_samples_across_batch=shared, eval_mc_samples=50, **kw)
        x = torch.randn(3, 6, dtype=torch.float64)
        out = head(x)
        assert out.shape == (3, 4)
        assert head(torch.randn(2, 5, 7, 6, dtype=torch.float64)).shape == (2, 5, 7, 4)
        assert head.sample_logits(x, mc_samples=11).shape == (3, 11, 4)
        if link == "softmax":
            torch.testing.assert_close(out.exp().sum(-1), torch.ones(3, dtype=torch.float64), atol=1e-6, rtol=0)
        else:
            p = torch.sigmoid(out)
            assert ((p > 0) & (p < 1)).all()


# 2 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", FACTORED_CASES, ids=case_id)
@pytest.mark.parametrize("tau", (0.5, 1.0, 2.0))
@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
def test_zero_noise_limit(kw, tau, link):
    head = make_head(link=link, temperature=tau, eval_mc_samples=20_000, **kw)
    zero_factor_layers(head)
    with torch.no_grad():
        head.diag.weight.zero_()
        head.diag.bias.fill_(-30.0)
    x = torch.randn(5, 6, dtype=torch.float64)
    mu = head.mean_logits(x) / tau
    out = head(x)
    if link == "softmax":
        torch.testing.assert_close(out, F.log_softmax(mu, -1), atol=1e-4, rtol=0)
    else:
        torch.testing.assert_close(F.logsigmoid(out), F.logsigmoid(mu), atol=1e-4, rtol=0)


# 3 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
def test_factor_variants_reduce_to_diagonal_bit_identically(link):
    base = make_head(covariance="diagonal", link=link, eval_mc_samples=64)
    x = torch.randn(5, 6, dtype=torch.float64)
    want = base(x)
    for cov in FACTORED:
        head = make_head(covariance=cov, num_factors=3, link=link, eval_mc_samples=64)
        head.loc.load_state_dict(base.loc.state_dict())
        head.diag.load_state_dict(base.diag.state_dict())
        zero_factor_layers(head)
        assert torch.equal(head(x), want), cov


# 4, 5 ----------------------------------------------------------------------------------------------
def test_small_temperature_binary_is_probit():
    head = make_head(covariance="diagonal", link="sigmoid", temperature=0.01, eval_mc_samples=200_000)
    x = torch.randn(2, 6, dtype=torch.float64)
    p = torch.sigmoid(head(x))
    exact = torch.from_numpy(stats.norm.cdf((head.mean_logits(x) / head.diagonal_scale(x)).detach().numpy()))
    assert (p - exact).abs().max() <= 5e-3


@pytest.mark.parametrize("tau", (0.3, 1.0, 3.0))
def test_moderate_temperature_probit_approximation(tau):
    head = make_head(covariance="diagonal", link="sigmoid", temperature=tau, eval_mc_samples=100_000)
    x = torch.randn(3, 6, dtype=torch.float64)
    p = torch.sigmoid(head(x)).detach()
    m, s = (head.mean_logits(x) / tau).detach(), (head.diagonal_scale(x) / tau).detach()
    lam2 = math.pi / 8
    approx = torch.from_numpy(stats.norm.cdf((math.sqrt(lam2) * m / torch.sqrt(1 + lam2 * s**2)).numpy()))
    assert (p - approx).abs().max() <= 0.02


# 6 -------------------------------------------------------------------------------------------------
def test_small_temperature_multiclass_matches_exact_gaussian_probability():
    head = make_head(d=2, k=3, covariance="low_rank", num_factors=1, temperature=0.01, eval_mc_samples=200_000)
    mu = torch.tensor([0.3, 0.0, -0.2], dtype=torch.float64)
    d = torch.tensor([0.5, 0.7, 0.4], dtype=torch.float64)
    V = torch.tensor([[0.9], [0.8], [-0.6]], dtype=torch.float64)  # classes 0 and 1 strongly correlated
    set_latent(head, mu, d, V)
    p = head(torch.zeros(1, 2, dtype=torch.float64)).exp()[0]
    sigma = (V @ V.T + torch.diag(d**2)).numpy()
    for c in range(3):
        A = np.stack([np.eye(3)[c] - np.eye(3)[j] for j in range(3) if j != c])  # u_c - u_j > 0
        exact = stats.multivariate_normal(mean=-(A @ mu.numpy()), cov=A @ sigma @ A.T).cdf(np.zeros(2))
        assert abs(p[c].item() - exact) <= 0.01, (c, p[c].item(), exact)


# 7, 18b --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw", CASES + [dict(covariance="low_rank", num_factors=2, diag_noise="shared_scalar")], ids=case_id
)
def test_empirical_noise_covariance_equals_reconstructed_sigma(kw):
    head = make_head(**kw)
    x = torch.randn(2, 6, dtype=torch.float64)
    s = 200_000
    z = head.sample_logits(x, mc_samples=s).detach()  # τ = 1: z = μ + noise
    centred = z - z.mean(1, keepdim=True)
    emp = centred.transpose(1, 2) @ centred / (s - 1)
    sigma = head.covariance(x).detach()
    var = torch.diagonal(sigma, dim1=1, dim2=2)
    se = torch.sqrt((var.unsqueeze(2) * var.unsqueeze(1) + sigma**2) / s)
    assert ((emp - sigma).abs() <= 5 * se).all(), ((emp - sigma).abs() / se).max()
    # blocks agree with the full matrix
    rows, cols = torch.tensor([3, 0]), torch.tensor([1, 3, 2])
    torch.testing.assert_close(head.covariance(x, rows, cols), sigma[:, rows][:, :, cols])


def test_independent_diagonal_noise_is_not_rank_one():
    head = make_head(covariance="diagonal")
    x = torch.randn(1, 6, dtype=torch.float64)
    sigma = head.covariance(x)[0]
    assert torch.allclose(sigma, torch.diag(torch.diagonal(sigma)))
    z = head.sample_logits(x, mc_samples=50_000)[0].detach()
    corr = torch.corrcoef(z.T)
    assert (corr - torch.eye(4, dtype=torch.float64)).abs().max() < 0.05


# 8 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", CASES, ids=case_id)
def test_log_space_average_equals_log_of_mean(kw):
    s = 300
    head = make_head(eval_mc_samples=s, mc_chunk_size=s, **kw)
    x = torch.randn(4, 6, dtype=torch.float64) * 3
    z = head.sample_logits(x, mc_samples=s, seed=7)
    torch.testing.assert_close(head(x, seed=7), torch.log(torch.softmax(z, -1).mean(1)), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
def test_clip_eps_reproduces_reference_formula(link):
    s, eps = 200, 1e-7
    head = make_head(covariance="low_rank", num_factors=2, link=link, eval_mc_samples=s, mc_chunk_size=s, clip_eps=eps)
    with torch.no_grad():
        head.loc.bias.copy_(torch.tensor([0.0, -40.0, 25.0, 3.0]))  # some p̄ far below eps / above 1 - eps
    x = torch.randn(4, 6, dtype=torch.float64)
    z = head.sample_logits(x, seed=3)
    if link == "softmax":
        ref = torch.log(torch.softmax(z, -1).mean(1).clamp(eps, 1.0))
    else:
        p = torch.sigmoid(z).mean(1).clamp(eps, 1 - eps)
        ref = torch.log(p) - torch.log(1 - p)
    out = head(x, seed=3)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)
    assert (out == math.log(eps)).any() if link == "softmax" else (out.abs() >= math.log((1 - eps) / eps) - 1e-6).any()


# 9 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
def test_huge_temperature_gives_uniform(link):
    head = make_head(covariance="low_rank", num_factors=2, link=link, temperature=1000.0, eval_mc_samples=200)
    p = head(torch.randn(3, 6, dtype=torch.float64))
    p = p.exp() if link == "softmax" else torch.sigmoid(p)
    target = 1 / 4 if link == "softmax" else 0.5
    assert (p - target).abs().max() <= 1e-3


# 10 ------------------------------------------------------------------------------------------------
def test_learned_temperature_bounds_gradient_and_update():
    head = make_head(
        covariance="low_rank",
        num_factors=2,
        learn_temperature=True,
        temperature_bounds=(0.05, 5.0),
        train_mc_samples=50,
    ).train()
    assert head.temperature.item() == pytest.approx(2.525)
    for t in (-50.0, 0.0, 50.0):
        with torch.no_grad():
            head.temperature_logit.fill_(t)
        assert 0.05 <= head.temperature.item() <= 5.0
    with torch.no_grad():
        head.temperature_logit.zero_()
    opt = torch.optim.SGD(head.parameters(), lr=0.5)
    x, y = torch.randn(8, 6, dtype=torch.float64), torch.randint(0, 4, (8,))
    F.cross_entropy(head(x), y).backward()
    g = head.temperature_logit.grad
    assert torch.isfinite(g) and g != 0
    before = head.temperature.item()
    opt.step()
    assert head.temperature.item() != before


# 11 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", CASES, ids=case_id)
@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
def test_every_parameter_gets_a_finite_nonzero_gradient(kw, link):
    head = make_head(link=link, learn_temperature=True, train_mc_samples=20, **kw).train()
    for scale in (1.0, 1e3):
        head.zero_grad()
        x = torch.randn(8, 6, dtype=torch.float64) * scale
        out = head(x)
        loss = (
            F.cross_entropy(out, torch.arange(8) % 4)
            if link == "softmax"
            else F.binary_cross_entropy_with_logits(out, (torch.rand(8, 4) > 0.5).double())
        )
        loss.backward()
        assert torch.isfinite(loss)
        for name, p in head.named_parameters():
            assert torch.isfinite(p.grad).all(), name
            if scale == 1.0:
                assert p.grad.abs().sum() > 0, name


# 12, 13 --------------------------------------------------------------------------------------------
def test_shared_samples_give_identical_rows_and_unshared_rows_spread_like_mc_error():
    x = torch.randn(1, 6, dtype=torch.float64).expand(64, 6)
    shared = make_head(covariance="low_rank", num_factors=2, share_samples_across_batch=True, eval_mc_samples=100)
    out = shared(x)
    assert torch.equal(out, out[:1].expand_as(out))
    # eval_seed=None: fresh noise, independent per row (a seeded evaluation shares it across rows)
    unshared = make_head(covariance="low_rank", num_factors=2, eval_mc_samples=100, eval_seed=None)
    p = unshared(x).exp()
    spread = p.std(0)
    z = unshared.sample_logits(x[:1], mc_samples=20_000)[0]
    predicted = torch.softmax(z, -1).std(0) / math.sqrt(100)  # MC standard error of p̄
    assert ((spread / predicted) > 0.6).all() and ((spread / predicted) < 1.5).all()


def test_mc_error_falls_as_one_over_sqrt_samples():
    head = make_head(covariance="low_rank", num_factors=2, eval_seed=None)  # independent noise per row
    x = torch.randn(1, 6, dtype=torch.float64).expand(200, 6)  # 200 rows = 200 independent MC runs
    sd = {s: head(x, mc_samples=s).exp().std(0) for s in (100, 400)}
    ratio = (sd[100] / sd[400]).mean().item()
    assert 1.7 <= ratio <= 2.3


# 15 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cov", [n for n in COVARIANCES if VARIANTS[n].has_factors])  # the built-ins' layer layouts
def test_class_permutation_equivariance(cov):
    head = make_head(covariance=cov, num_factors=2, eval_mc_samples=40_000)
    perm = torch.tensor([2, 0, 3, 1])
    other = make_head(covariance=cov, num_factors=2, eval_mc_samples=40_000)
    with torch.no_grad():
        for name in ("loc", "diag", "scale_het", "scale_hom"):
            if hasattr(head, name):
                src, dst = getattr(head, name), getattr(other, name)
                dst.weight.copy_(src.weight[perm])
                if src.bias is not None:
                    dst.bias.copy_(src.bias[perm])
        if cov == "low_rank":
            w = head.scale.weight.view(4, 2, 6)[perm].reshape(8, 6)
            other.scale.weight.copy_(w)
            other.scale.bias.copy_(head.scale.bias.view(4, 2)[perm].reshape(8))
    x = torch.randn(3, 6, dtype=torch.float64)
    torch.testing.assert_close(other(x).exp(), head(x).exp()[:, perm], atol=0.01, rtol=0)
    torch.testing.assert_close(other.covariance(x), head.covariance(x)[:, perm][:, :, perm])


# 16 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", CASES, ids=case_id)
def test_loss_identities(kw):
    s = 500
    x = torch.randn(6, 6, dtype=torch.float64)
    soft = make_head(eval_mc_samples=s, mc_chunk_size=s, **kw)
    p = torch.softmax(soft.sample_logits(x, seed=1), -1).mean(1)
    y = torch.arange(6) % 4
    torch.testing.assert_close(
        F.cross_entropy(soft(x, seed=1), y, reduction="none"), -torch.log(p[torch.arange(6), y]), atol=1e-6, rtol=1e-6
    )
    sig = make_head(link="sigmoid", eval_mc_samples=s, mc_chunk_size=s, **kw)
    p = torch.sigmoid(sig.sample_logits(x, seed=1)).mean(1)
    t = (torch.rand(6, 4, dtype=torch.float64) > 0.5).double()
    torch.testing.assert_close(
        F.binary_cross_entropy_with_logits(sig(x, seed=1), t, reduction="none"),
        -(t * torch.log(p) + (1 - t) * torch.log1p(-p)),
        atol=1e-6,
        rtol=1e-6,
    )


# 18a -----------------------------------------------------------------------------------------------
def test_hetxl_with_identity_class_weights_equals_het():
    het = make_head(d=4, k=4, covariance="low_rank", num_factors=2, eval_mc_samples=100)
    xl = make_head(d=4, k=4, covariance="low_rank", num_factors=2, noise_space="pre_logits", eval_mc_samples=100)
    with torch.no_grad():
        for h in (het, xl):
            h.loc.weight.copy_(torch.eye(4))
            h.loc.bias.zero_()
        xl.diag.load_state_dict(het.diag.state_dict())
        xl.scale.load_state_dict(het.scale.state_dict())
    x = torch.randn(5, 4, dtype=torch.float64)
    torch.testing.assert_close(xl(x), het(x), atol=1e-10, rtol=1e-10)


# 20 ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", CASES, ids=case_id)
def test_mixed_precision_head_runs_in_float32(kw):
    """Under autocast the output is fp32; with noise on the logits nothing changes at all, and HET-XL (whose
    projection products follow autocast) stays close (its documented bound: tests/heads/test_head_autocast.py)."""
    torch.manual_seed(0)
    head = HeteroscedasticHead(6, 4, eval_mc_samples=100, **kw).eval()
    x = torch.randn(5, 6)
    with torch.no_grad():
        ref = head(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = head(x)
            out_bf16_in = head(x.bfloat16())
            out_rounded = head(x.bfloat16().float())
    assert out.dtype == torch.float32 and out_bf16_in.dtype == torch.float32
    if kw.get("noise_space") == "pre_logits":
        torch.testing.assert_close(out, ref, atol=0.05, rtol=0)
    else:
        assert torch.equal(out, ref)
    assert torch.equal(out_bf16_in, out_rounded)  # a bf16 input is read as the fp32 number it holds


@pytest.mark.parametrize(
    "kw,name",
    [
        (dict(num_factors=2.7), "num_factors"),
        (dict(train_mc_samples=1.9), "train_mc_samples"),
        (dict(eval_mc_samples=True), "eval_mc_samples"),
        (dict(mc_chunk_size=8.0), "mc_chunk_size"),
    ],
)
def test_sizes_must_be_whole_numbers_not_truncated(kw, name):
    """Audit 2026-11-27: num_factors=2.7 became 2 and train_mc_samples=1.9 became 1 without a word."""
    import numpy as np

    with pytest.raises(ValueError, match=rf"{name} must be a whole number, got "):
        HeteroscedasticHead(8, 4, covariance="low_rank", **kw)
    assert HeteroscedasticHead(8, 4, covariance="low_rank", num_factors=np.int64(2)).num_factors == 2
