"""Transfer rule and BiT-HyperRule fine-tuning of one task."""

import numpy as np
import pytest
import torch

from harness.downstream.finetune import FinetuneConfig, finetune, transfer_model
from harness.downstream.schedules import bit_hyperrule_supports, lr_schedule, mixup_alpha, resolved_steps
from harness.models import build_model, save_model
from harness.tasks.demo import DEMO_TASKS, demo_split
from harness.tasks.views import bit_resolution


def test_staircase_ta_cosine_schedules_and_resolution_rule():
    f = lr_schedule(500)  # the VTAB sweep's staircase
    assert [round(f(s), 6) for s in (0, 99, 100, 199, 200, 300, 400, 499)] == [
        0.01,
        1.0,
        1.0,
        1.0,
        0.1,
        0.01,
        0.001,
        0.001,
    ]
    assert bit_resolution((32, 32)) == (160, 128) and bit_resolution((96, 96)) == (512, 480)
    ta = lr_schedule(1000, "ta")
    assert [round(ta(s), 6) for s in (0, 79, 80, 299, 300, 600, 900)] == [0.0125, 1.0, 1.0, 1.0, 0.1, 0.01, 0.001]
    cos = lr_schedule(100, "cosine")
    assert cos(4) == 1.0 and cos(52) == pytest.approx(0.5, abs=0.02) and cos(99) < 0.01
    assert mixup_alpha(1000) == 0.0 and mixup_alpha(20_000) == 0.1 and mixup_alpha(10, 0.2) == 0.2
    with pytest.raises(ValueError, match="unknown fine-tuning schedule"):
        lr_schedule(10, "poly")


# Learning rates of big_transfer's bit_hyperrule.get_lr(step, dataset_size) (base lr 0.003), worked out by
# hand from its schedule: warm-up base * step / warm-up, then /10 after each decay step, stop at the total.
BIT_HYPERRULE_LR = {
    1_000: (
        500,
        {0: 0.0, 50: 0.0015, 100: 0.003, 200: 0.003, 201: 3e-4, 300: 3e-4, 301: 3e-5, 400: 3e-5, 401: 3e-6, 499: 3e-6},
    ),
    19_999: (500, {99: 0.00297, 401: 3e-6}),
    20_000: (
        10_000,
        {0: 0.0, 250: 0.0015, 500: 0.003, 3000: 0.003, 3001: 3e-4, 6001: 3e-5, 9000: 3e-5, 9001: 3e-6, 9999: 3e-6},
    ),
    499_999: (10_000, {499: 0.002994, 9001: 3e-6}),
    500_000: (
        20_000,
        {0: 0.0, 500: 0.003, 6000: 0.003, 6001: 3e-4, 12001: 3e-5, 18000: 3e-5, 18001: 3e-6, 19999: 3e-6},
    ),
}


@pytest.mark.parametrize("num_train", list(BIT_HYPERRULE_LR))
def test_bit_hyperrule_schedule_is_big_transfers(num_train):
    total, lrs = BIT_HYPERRULE_LR[num_train]
    assert bit_hyperrule_supports(num_train)[-1] == total
    assert resolved_steps(FinetuneConfig(steps=None, schedule="bit_hyperrule"), num_train) == total
    factor = lr_schedule(total, "bit_hyperrule", num_train)
    for step, lr in lrs.items():
        assert 0.003 * factor(step) == pytest.approx(lr, rel=1e-9, abs=1e-15), step
    assert mixup_alpha(num_train) == (0.0 if num_train < 20_000 else 0.1)


def test_bit_hyperrule_refuses_other_step_counts():
    assert resolved_steps(FinetuneConfig(steps=500, schedule="bit_hyperrule"), 1000) == 500
    with pytest.raises(ValueError, match="trains 500 steps on 1000 examples, not 2500"):
        resolved_steps(FinetuneConfig(steps=2500, schedule="bit_hyperrule"), 1000)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        resolved_steps(FinetuneConfig(steps=None), 1000)


def test_mixup_draws_one_lambda_per_optimiser_step(tmp_path, monkeypatch):
    up = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    path = save_model(up, tmp_path / "up.pt")
    draws = []
    sample = torch.distributions.Beta.sample

    def counted(self, *args, **kwargs):
        draws.append(1)
        return sample(self, *args, **kwargs)

    monkeypatch.setattr(torch.distributions.Beta, "sample", counted)
    task = DEMO_TASKS["demo_digit"]
    cfg = FinetuneConfig(lr=0.01, steps=3, batch_size=16, micro_batch=4, resolution=(16, 16), mixup_alpha=0.2)
    finetune(str(path), demo_split(task, "val200"), demo_split(task, "test"), cfg)
    assert len(draws) == 3  # 3 steps of 4 micro-batches each: one lambda per step, not per micro-batch


def test_transfer_drops_the_whole_het_head(tmp_path):
    up = build_model(
        dict(
            backbone="test_resnet",
            num_classes=10,
            head=dict(covariance="low_rank", num_factors=3, learn_temperature=True),
        )
    )
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
    cfg = FinetuneConfig(
        lr=0.05, steps=5, batch_size=32, micro_batch=32, resolution=(32, 32), mixup_alpha=0.2, schedule="cosine"
    )
    acc, _ = finetune(str(path), demo_split(task, "val200"), demo_split(task, "test"), cfg)
    assert 0.0 <= acc <= 1.0


def test_demo_views_match_the_pil_path_and_channels_last_fine_tunes_alike(tmp_path, monkeypatch):
    """Demo images are augmented a whole batch at a time: the same views as the per-image PIL path (up
    to its uint8 rounding); NHWC activations train the same model up to float rounding."""
    from harness.data.dataset import ImageDataset
    from harness.tasks.views import task_views

    task = DEMO_TASKS["demo_position"]  # 24 px images, upsampled to 32
    train, test = demo_split(task, "val200"), demo_split(task, "test")
    for resize, size in ((32, 32), (40, 32)):  # no crop: resized to the crop size by both paths
        batched = [next(iter(task_views(train, True, False, False, resize, size, 16, seed=3)[0])) for _ in range(2)]
        with monkeypatch.context() as m:
            m.setattr(ImageDataset, "pixels", lambda self, cache_dir=None: None)
            pil = next(iter(task_views(train, True, False, False, resize, size, 16, seed=3)[0]))
        assert torch.equal(batched[0][2], pil[2]) and torch.equal(batched[0][0], batched[1][0])  # same, seeded
        assert (batched[0][0] - pil[0]).abs().max() < 0.01 and batched[0][0].shape == (16, 3, size, size)

    up = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    path = save_model(up, tmp_path / "up.pt")
    cfg = FinetuneConfig(lr=0.02, steps=3, batch_size=32, micro_batch=32, resolution=(32, 32), schedule="cosine")
    _, base = finetune(str(path), train, test, cfg, flip=False, crop=False)
    _, nhwc = finetune(
        str(path), train, test, FinetuneConfig(**{**cfg.__dict__, "channels_last": True}), flip=False, crop=False
    )
    scale = abs(base.logits).max()
    assert scale > 0.01  # trained away from the zero-initialised head
    np.testing.assert_allclose(nhwc.logits, base.logits, atol=0.01 * scale)  # measured: 5e-5 to 3e-4 of the scale


def test_a_fine_tune_says_its_steps_rate_and_time_left(tmp_path, monkeypatch):
    """A person is watching: inside a fine-tune, a line with the steps done, the rate and the time left (every 15 s
    in use; every tick here)."""
    import harness.downstream.finetune as FT
    from harness.progress import Countdown

    monkeypatch.setattr(FT, "Countdown", lambda progress, total: Countdown(progress, total, every=0.0))
    up = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    path = save_model(up, tmp_path / "up.pt")
    task = DEMO_TASKS["demo_digit"]
    cfg = FinetuneConfig(lr=0.05, steps=4, batch_size=16, micro_batch=16, resolution=(16, 16))
    lines: "list[str]" = []
    finetune(str(path), demo_split(task, "val200"), demo_split(task, "test"), cfg, progress=lines.append)
    assert [line.split(",")[0] for line in lines] == ["1/4 steps", "2/4 steps", "3/4 steps"]
    assert all("/s, about " in line and line.endswith(" left") for line in lines)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(micro_batch=0), r"micro_batch must be a whole number >= 1 \(--micro-batch\), got 0"),
        (dict(lr=float("nan")), r"lr must be > 0, got nan"),
        (dict(steps=2.5), r"steps must be a whole number >= 1 \(None: the BiT-HyperRule's\), got 2\.5"),
        (dict(eval_batch_size=0), r"eval_batch_size must be a whole number >= 1, got 0"),
        (dict(mixup_alpha=-0.1), r"mixup_alpha must be >= 0 \(None: the BiT rule; 0: off\), got -0\.1"),
        (dict(temperature=0), r"temperature must be in \[0\.001, 1000\], got 0"),
        (dict(clip_grad_norm=float("inf")), r"clip_grad_norm must be > 0 \(None: no clipping\), got inf"),
    ],
)
def test_a_finetune_config_is_checked_by_the_rules_beside_its_fields(kwargs, message):
    """A fine-tune built from Python is refused before any work, by the rules its fields declare (harness.rules),
    in the one message format; a sweep's settings share the fields and the rules."""
    from harness.downstream.config import SweepSettings

    with pytest.raises(ValueError, match=message):
        FinetuneConfig(**kwargs)
    with pytest.raises(ValueError, match=r"batch_size must be a whole number >= 1 \(--batch-size\), got inf"):
        SweepSettings(batch_size=float("inf"))
    with pytest.raises(ValueError, match=r"seeds must be a whole number >= 1 \(--seeds\), got 0"):
        SweepSettings(seeds=0)
