"""Transfer rule and BiT-HyperRule fine-tuning of one task."""

import pytest
import torch

from downstream.demo import DEMO_TASKS, demo_split
from downstream.finetune import (FinetuneConfig, bit_resolution, bit_schedule, finetune, mixup_alpha,
                                 transfer_model)
from harness.models import build_model, save_model


def test_bit_schedule_and_resolution_rule():
    f = bit_schedule(500)
    assert [round(f(s), 6) for s in (0, 99, 100, 199, 200, 300, 400, 499)] == [0.01, 1.0, 1.0, 1.0, 0.1, 0.01,
                                                                                0.001, 0.001]
    assert bit_resolution((32, 32)) == (160, 128) and bit_resolution((96, 96)) == (512, 480)
    ta = bit_schedule(1000, "ta")
    assert [round(ta(s), 6) for s in (0, 79, 80, 299, 300, 600, 900)] == [0.0125, 1.0, 1.0, 1.0, 0.1, 0.01, 0.001]
    cos = bit_schedule(100, "cosine")
    assert cos(4) == 1.0 and cos(52) == pytest.approx(0.5, abs=0.02) and cos(99) < 0.01
    assert mixup_alpha(1000) == 0.0 and mixup_alpha(20_000) == 0.1 and mixup_alpha(10, 0.2) == 0.2
    with pytest.raises(ValueError, match="unknown fine-tuning schedule"):
        bit_schedule(10, "poly")


def test_transfer_drops_the_whole_het_head(tmp_path):
    up = build_model(dict(backbone="test_resnet", num_classes=10,
                          head=dict(covariance="low_rank", num_factors=3, learn_temperature=True)))
    path = save_model(up, tmp_path / "up.pt")
    model = transfer_model(str(path), 4)
    assert model.head.covariance_type == "none" and not hasattr(model.head, "scale")
    assert not any("temperature" in n for n, _ in model.named_parameters())
    for (n, a), b in zip(model.backbone.state_dict().items(), up.backbone.state_dict().values()):
        assert torch.equal(a, b), n
    assert torch.equal(model.eval()(torch.randn(2, 3, 32, 32)), torch.zeros(2, 4))


def test_finetune_a_demo_task_beats_chance(tmp_path):
    up = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="diagonal")))
    path = save_model(up, tmp_path / "up.pt")
    task = DEMO_TASKS["demo_digit"]
    cfg = FinetuneConfig(lr=0.05, steps=60, batch_size=64, micro_batch=32, resolution=(32, 32))
    acc, preds = finetune(str(path), demo_split(task, "train800"), demo_split(task, "test"), cfg, task.flip, task.crop)
    assert preds.logits.shape == (500, 10) and acc == pytest.approx((preds.logits.argmax(1) == preds.targets).mean())
    assert acc > 0.3  # chance is 0.1
    with pytest.raises(ValueError, match="lr must be > 0"):
        finetune(str(path), demo_split(task, "val200"), demo_split(task, "test"), FinetuneConfig(lr=0.0))


def test_forced_mixup_trains(tmp_path):
    up = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    path = save_model(up, tmp_path / "up.pt")
    task = DEMO_TASKS["demo_rotation"]
    cfg = FinetuneConfig(lr=0.05, steps=5, batch_size=32, micro_batch=32, resolution=(32, 32), mixup_alpha=0.2,
                         schedule="cosine")
    acc, _ = finetune(str(path), demo_split(task, "val200"), demo_split(task, "test"), cfg)
    assert 0.0 <= acc <= 1.0
