"""Noisy-label baselines of the upstream stage: label smoothing and forward loss correction
(``train.loss``), and short digits runs that record their loss and label noise."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.config import load_config
from harness.data.noise import transition_matrix
from harness.heads import HeteroscedasticHead
from harness.upstream.config import UpstreamConfig, validate
from harness.upstream.train import forward_corrected_nll, run, training_loss

CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"
SHORT = [
    "train.epochs=1",
    "data.limit_train=128",
    "data.limit_eval=64",
    "data.heldout_split=null",
    "model.head.train_mc_samples=8",
    "model.head.eval_mc_samples=8",
]


def _log(t) -> torch.Tensor:
    return torch.log(torch.as_tensor(np.asarray(t), dtype=torch.float64))


def test_nll_is_unchanged_and_label_smoothing_is_torchs():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0], [-1.0, 3.0, 0.0], [0.0, 0.0, 4.0]])
    y = torch.tensor([0, 2, 1, 0])
    assert torch.equal(training_loss(logits, y, False), F.cross_entropy(logits, y))
    ls = training_loss(logits, y, False, "label_smoothing", 0.1)
    torch.testing.assert_close(ls, F.cross_entropy(logits, y, label_smoothing=0.1))
    log_p = F.log_softmax(logits, -1)  # (1 - ε)·(-log p_y) + ε·mean_k(-log p_k)
    by_hand = (0.9 * -log_p[torch.arange(4), y] + 0.1 * -log_p.mean(-1)).mean()
    torch.testing.assert_close(ls, by_hand)


def test_forward_with_identity_is_nll():
    torch.manual_seed(0)
    logits, y = torch.randn(16, 5) * 3, torch.randint(0, 5, (16,))
    loss = training_loss(logits, y, False, "forward", log_transition=torch.log(torch.eye(5)))
    torch.testing.assert_close(loss, F.cross_entropy(logits, y))


@pytest.mark.parametrize("which", ["pair_flip", "dense", "zero_column"])
def test_forward_equals_direct_float64_and_has_finite_gradients(which):
    rng = np.random.default_rng(0)
    k = 5
    if which == "pair_flip":  # zeros off the diagonal and its neighbour
        t = transition_matrix("pair_flip", k, 0.3)
    elif which == "dense":
        t = rng.dirichlet(np.ones(k), size=k) + 2 * np.eye(k)
        t /= t.sum(1, keepdims=True)
    else:  # noisy class 4 never occurs; no target falls in it
        t = transition_matrix("pair_flip", k, 0.4)
        t[3] = [0.0, 0.0, 0.0, 1.0, 0.0]
    z = torch.tensor(rng.normal(0, 3, (12, k)), requires_grad=True)
    y = torch.tensor(rng.integers(0, 4, 12))
    loss = forward_corrected_nll(z, y, _log(t))
    zd = z.detach().clone().requires_grad_(True)
    direct = -torch.log((torch.softmax(zd, -1) @ torch.as_tensor(t))[torch.arange(12), y]).mean()
    torch.testing.assert_close(loss, direct, rtol=1e-12, atol=1e-12)
    loss.backward()
    direct.backward()
    assert torch.isfinite(z.grad).all()
    torch.testing.assert_close(z.grad, zd.grad, rtol=1e-10, atol=1e-12)
    # far-apart float32 logits (p_c underflows to 0 in the direct product): still finite
    big = (z.detach() * 100).float().requires_grad_(True)
    out = forward_corrected_nll(big, y, _log(t).float())
    out.backward()
    assert torch.isfinite(out) and torch.isfinite(big.grad).all()


def test_forward_uses_the_het_heads_log_mean_probability():
    torch.manual_seed(0)
    head = HeteroscedasticHead(16, 6, covariance="low_rank", num_factors=3, train_mc_samples=32).train()
    x, y = torch.randn(10, 16), torch.randint(0, 6, (10,))
    out = head(x)  # log p̄ [10, 6]
    torch.testing.assert_close(out.exp().sum(-1), torch.ones(10))
    t = torch.as_tensor(transition_matrix("pair_flip", 6, 0.3), dtype=torch.float32)
    loss = training_loss(out, y, False, "forward", log_transition=torch.log(t))
    torch.testing.assert_close(loss, -torch.log((out.exp() @ t)[torch.arange(10), y]).mean())
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in head.parameters() if p.grad is not None)
    assert head.loc.weight.grad.abs().sum() > 0


def _cfg(tmp_path, *overrides, name="digits_hom.yaml"):
    short = [o for o in SHORT if "_hom" not in name or not o.startswith("model.head.")]  # hom: no sample counts
    return load_config(
        UpstreamConfig, CONFIGS / name, [*short, f"output_dir={tmp_path / 'run'}", *overrides], distinct=False
    )


def test_validate_refuses_bad_loss_settings(tmp_path):
    with pytest.raises(ValueError, match=r"train.loss=forward .*set data.label_noise"):
        validate(_cfg(tmp_path, "train.loss=forward", "data.label_noise.kind=none"))
    for eps in ("0.0", "1.0", "-0.1"):
        with pytest.raises(ValueError, match=r"train.label_smoothing must be in \(0, 1\)"):
            validate(_cfg(tmp_path, "train.loss=label_smoothing", f"train.label_smoothing={eps}"))
    with pytest.raises(ValueError, match="unknown train.loss 'focal'"):
        validate(_cfg(tmp_path, "train.loss=focal"))
    for loss in ("forward", "label_smoothing"):
        with pytest.raises(ValueError, match="sigmoid .* take train.loss=nll"):
            validate(_cfg(tmp_path, f"train.loss={loss}", "model.head.link=sigmoid", "train.best_metric=sigmoid_nll"))
    with pytest.raises(ValueError, match="input_dependent .* source 'image_folder'"):
        validate(_cfg(tmp_path, "data.label_noise.kind=input_dependent", "data.source=image_folder"))
    with pytest.raises(ValueError, match="unknown data.label_noise.kind"):
        validate(_cfg(tmp_path, "data.label_noise.kind=pairflip"))
    validate(_cfg(tmp_path, "train.loss=forward"))  # pair-flip noise: accepted
    validate(_cfg(tmp_path, "train.loss=forward", "data.label_noise.kind=input_dependent"))


@pytest.mark.parametrize(
    "loss,noise", [("label_smoothing", "pair_flip"), ("forward", "pair_flip"), ("forward", "input_dependent")]
)
def test_short_digits_run_records_its_loss(tmp_path, loss, noise):
    run_dir = run(_cfg(tmp_path, f"train.loss={loss}", f"data.label_noise.kind={noise}"), progress=False)
    summary, meta = (json.loads((run_dir / f).read_text()) for f in ("metrics.json", "run.json"))
    assert summary["loss"] == meta["loss"] and summary["loss"]["name"] == loss
    assert meta["config"]["train"]["loss"] == loss and np.isfinite(summary["metrics"]["nll"])
    assert summary["label_noise"]["kind"] == noise
    if loss == "label_smoothing":
        assert summary["loss"]["label_smoothing"] == 0.1
    elif noise == "pair_flip":
        assert summary["loss"]["transition"] == "nominal"
        np.testing.assert_allclose(summary["loss"]["matrix"], transition_matrix("pair_flip", 10, 0.3))
    else:
        assert summary["loss"]["transition"] == "empirical" and "flip_prob" in summary["label_noise"]
        np.testing.assert_allclose(summary["loss"]["matrix"], summary["label_noise"]["transition"], atol=1e-4)
