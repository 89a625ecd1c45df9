"""The head under torch.autocast (issue 46): HET-XL's projection products run in bf16, everything else and the
output stay fp32, and the bf16 head's log p̄ is within the documented bound of the fp32 head's (docs/guide/head.md,
"Mixed precision"): |Δ log p̄| at most a quarter of the Monte Carlo standard error of log p̄ at the same S."""

import pytest
import torch
import torch.nn.functional as F

from harness.heads import HeteroscedasticHead
from harness.heads.variants import VARIANTS

NOISY = [n for n, v in VARIANTS.items() if v.form]
#: the documented bound: |Δ log p̄| (bf16 head - fp32 head, the same noise) over the MC standard error of log p̄
BOUND = 0.25


def _head(covariance, link, space="pre_logits", s=1000):
    torch.manual_seed(0)
    head = HeteroscedasticHead(
        128,
        50,
        covariance=covariance,
        num_factors=6 if VARIANTS[covariance].has_factors else None,
        noise_space=space,
        link=link,
        train_mc_samples=s,
        eval_mc_samples=s,
    )
    with torch.no_grad():
        head.loc.weight.mul_(3)  # class scores spread as a trained head's
    return head, torch.randn(16, 128)


def _log_p(link, out):
    return out if link == "softmax" else F.logsigmoid(out)


@pytest.mark.parametrize("link", ("softmax", "sigmoid"))
@pytest.mark.parametrize("covariance", NOISY)
def test_the_bf16_head_is_within_a_quarter_of_the_monte_carlo_error(covariance, link):
    head, x = _head(covariance, link)
    head.eval()
    with torch.no_grad():
        ref = head(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = head(x)
        z = head.sample_logits(x)  # the S samples both average [N, S, K]
    assert low.dtype == torch.float32
    p = torch.softmax(z, -1) if link == "softmax" else torch.sigmoid(z)
    se = p.std(1) / p.shape[1] ** 0.5 / p.mean(1)  # the MC standard error of log p̄ (delta method)
    ratio = ((_log_p(link, low) - _log_p(link, ref)).abs() / se).max().item()
    assert 0 < ratio <= BOUND  # > 0: the products did run in bf16


@pytest.mark.parametrize("s", (200, 600))  # 600: HET-XL row by row (harness.heads.rows), its M in bf16
@pytest.mark.parametrize("covariance", NOISY)
def test_bf16_gradients_follow_the_fp32_ones(covariance, s):
    head, x = _head(covariance, "softmax", s=s)
    y = torch.arange(16) % 50
    grads = []
    for bf16 in (False, True):
        head.zero_grad(set_to_none=True)
        torch.manual_seed(1)  # the same training noise
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = head(x)
        F.cross_entropy(out, y).backward()
        grads.append({n: p.grad.clone() for n, p in head.named_parameters()})
    for name, g in grads[0].items():
        err = ((grads[1][name] - g).norm() / g.norm()).item()
        assert err < 0.02, (name, err)


@pytest.mark.parametrize("covariance", NOISY)
def test_noise_on_the_logits_ignores_autocast(covariance):
    """HET's per-sample products are small (rank R): bf16 would not be faster there, so nothing changes."""
    head, x = _head(covariance, "softmax", space="logits", s=100)
    head.eval()
    with torch.no_grad():
        ref = head(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert torch.equal(head(x), ref)
