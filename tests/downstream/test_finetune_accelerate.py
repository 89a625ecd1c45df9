"""Fine-tuning on accelerate computes what the plain PyTorch loop it replaced computed (fp32, CPU), and its mixed
precision settings."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.downstream.finetune import FinetuneConfig, finetune, head_options, predict, transfer_model
from harness.downstream.schedules import lr_schedule, mixup_alpha, resolved_steps
from harness.models import build_model, save_model
from harness.tasks.demo import DEMO_TASKS, demo_split
from harness.tasks.views import bit_resolution, task_views

#: the largest difference in test accuracy allowed between the two loops: one example of the 500 test images (they
#: agree exactly when every floating-point operation runs in the same order, which is what is measured here)
ACCURACY_TOLERANCE = 1 / 500


def _plain_finetune(upstream, train, test, cfg, flip=True, crop=True):
    """The fine-tuning loop as it was before accelerate (downstream/finetune.py at 1abafc2): SGD, loss / accum,
    loss.backward(), torch's clip, a step every accum micro-batches, one mixup lambda per step."""
    steps = resolved_steps(cfg, len(train))
    torch.manual_seed(cfg.seed)
    head = head_options(
        cfg.head, train.num_classes, cfg.temperature, cfg.num_factors, cfg.train_mc_samples, cfg.eval_mc_samples
    )
    model = transfer_model(upstream, train.num_classes, head).to(cfg.device)
    resize, size = cfg.resolution or bit_resolution(train[0][0].size)
    micro = min(cfg.micro_batch, cfg.batch_size)
    accum = max(1, math.ceil(cfg.batch_size / micro))
    loader, ds, sampler = task_views(train, True, flip, crop, resize, size, micro, cfg.seed)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.effective_lr, momentum=0.9, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(steps, cfg.schedule, len(train)))
    alpha = mixup_alpha(len(train), cfg.mixup_alpha)
    mix = torch.distributions.Beta(alpha, alpha) if alpha > 0 else None
    model.train()
    step, micro_done, epoch = 0, 0, 0
    while step < steps:
        sampler.use_epoch(epoch)
        ds.use_epoch(epoch)
        for x, y, _ in loader:
            if mix is None:
                loss = F.cross_entropy(model(x), y) / accum
            else:
                if micro_done % accum == 0:
                    lam = float(mix.sample())
                perm = torch.randperm(x.shape[0])
                logits = model(lam * x + (1 - lam) * x[perm])
                loss = (lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y[perm])) / accum
            loss.backward()
            micro_done += 1
            if micro_done % accum:
                continue
            if cfg.clip_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad_norm)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            if step >= steps:
                break
        epoch += 1
    preds = predict(model, test, task_views(test, False, flip, crop, resize, size, cfg.eval_batch_size, cfg.seed)[0])
    return float((preds.logits.argmax(1) == preds.targets).mean()), preds


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    model = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="low_rank", num_factors=3)))
    return str(save_model(model, tmp_path_factory.mktemp("up") / "model.pt"))


@pytest.mark.parametrize(
    "task, cfg",
    [
        # the demo preset's shape (micro-batch = batch, no mixup), a few steps
        ("demo_digit", FinetuneConfig(lr=0.05, steps=6, batch_size=32, micro_batch=32, resolution=(16, 16))),
        # gradient accumulation over 3 micro-batches (the last one short), mixup, clipping, the cosine schedule
        (
            "demo_rotation",
            FinetuneConfig(
                lr=0.02,
                steps=4,
                batch_size=30,
                micro_batch=10,
                resolution=(16, 16),
                mixup_alpha=0.2,
                clip_grad_norm=0.5,
                schedule="cosine",
                seed=3,
            ),
        ),
        # a noisy (HET) transfer head: its training noise drawn from the same generator state
        (
            "demo_count",
            FinetuneConfig(
                lr=0.05,
                steps=3,
                batch_size=16,
                micro_batch=8,
                resolution=(16, 16),
                head="het",
                train_mc_samples=4,
                eval_mc_samples=8,
            ),
        ),
    ],
)
def test_accelerate_loop_gives_the_plain_loops_accuracy_on_demo_tasks(upstream, task, cfg):
    t = DEMO_TASKS[task]
    train, test = demo_split(t, "val200"), demo_split(t, "test")
    acc_plain, plain = _plain_finetune(upstream, train, test, cfg, t.flip, t.crop)
    acc, preds = finetune(upstream, train, test, cfg, t.flip, t.crop)
    assert abs(acc - acc_plain) <= ACCURACY_TOLERANCE, (acc, acc_plain)
    scale = np.abs(plain.logits).max()
    assert scale > 1e-3  # trained away from the zero-initialised head
    np.testing.assert_allclose(preds.logits, plain.logits, rtol=0, atol=1e-5 * scale)


def test_mixed_precision_settings_are_checked_and_fp16_needs_a_gpu(upstream):
    t = DEMO_TASKS["demo_digit"]
    train, test = demo_split(t, "val200"), demo_split(t, "test")
    with pytest.raises(ValueError, match="fp16 .*does not run on a CPU"):
        finetune(upstream, train, test, FinetuneConfig(steps=1, resolution=(16, 16), mixed_precision="fp16"))
    with pytest.raises(ValueError, match="unknown mixed precision 'fp8'"):
        finetune(upstream, train, test, FinetuneConfig(steps=1, resolution=(16, 16), mixed_precision="fp8"))
