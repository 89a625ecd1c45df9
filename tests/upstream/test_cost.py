"""harness.upstream.cost: the side-by-side training-step measurement behind the budget and frontier axes."""

from pathlib import Path

import pytest
import torch

import harness.upstream.cost as C
from harness.config import load_config
from harness.upstream.config import UpstreamConfig

BASE = Path(__file__).resolve().parents[2] / "upstream" / "configs" / "digits_base.yaml"
TINY = ["data.batch_size=8", "data.image_size=16"]


def _cfg(*overrides: str) -> UpstreamConfig:
    return load_config(UpstreamConfig, BASE, [*TINY, *overrides], distinct=False)


def test_step_seconds_positive_medians_interleaved_and_ratios_to_the_first():
    configs = {
        "hom": _cfg("model.head.covariance=none"),
        "het": _cfg("model.head.covariance=low_rank", "model.head.num_factors=2", "model.head.train_mc_samples=4"),
        "fwd": _cfg("model.head.covariance=none", "train.loss=forward"),
        "sigmoid": _cfg("model.head.covariance=none", "model.head.link=sigmoid"),
    }
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    out = C.step_seconds(configs, steps=2, warmup=1, rounds=2, num_classes=10, precision="no")
    assert list(out["configs"]) == list(configs) and out["first"] == "hom"
    for name, c in out["configs"].items():
        assert c["median_seconds"] > 0 and len(c["seconds"]) == 2 and all(len(b) == 2 for b in c["seconds"])
        assert c["ratio_to_first"] == pytest.approx(
            [a / b for a, b in zip(c["round_medians"], out["configs"]["hom"]["round_medians"])]
        )
        assert c["key"]["threads"] == 1 and c["key"]["precision"] == "no"
    assert out["configs"]["hom"]["ratio_to_first"] == [1.0, 1.0]
    assert out["sequence"] == [[r, n] for r in range(2) for n in configs]  # round r: every config in turn
    assert out["steps"] == 2 and out["rounds"] == 2 and out["cpu"]
    assert torch.get_num_threads() == threads and torch.equal(torch.get_rng_state(), rng)  # the caller's, restored


def test_every_step_of_a_round_runs_config_by_config(monkeypatch):
    """The blocks are interleaved: round r steps config a (warm-up, then timed), then b, then round r + 1."""
    calls = []
    monkeypatch.setattr(C._Setup, "step", lambda self: calls.append(self.x.shape[0]))
    configs = {"a": _cfg("data.batch_size=4"), "b": _cfg("data.batch_size=6")}
    out = C.step_seconds(configs, steps=3, warmup=2, rounds=2, num_classes=10, precision="no", threads={"b": 1})
    assert calls == ([4] * 5 + [6] * 5) * 2
    assert out["configs"]["a"]["key"]["batch_size"] == 4 and out["configs"]["b"]["key"]["batch_size"] == 6


def test_step_key_ignores_the_schedule_and_names_what_changes_the_step():
    key = C.step_key(_cfg(), 10, "no")
    assert C.step_key(_cfg("train.epochs=3", "optim.lr=0.2", "seed=4"), 10, "no") == key
    assert C.step_key(_cfg("model.head.temperature=2.0", "model.head.eval_mc_samples=7"), 10, "no") == key
    for other in (
        C.step_key(_cfg("data.batch_size=16"), 10, "no"),
        C.step_key(_cfg(), 10, "bf16"),
        C.step_key(_cfg(), 10, "no", threads=2),
        C.step_key(_cfg("model.head.link=sigmoid"), 10, "no"),
        C.step_key(_cfg("model.backbone=resnet10_32px_w16"), 10, "no"),
    ):
        assert C.key_text(other) != C.key_text(key)
    with pytest.raises(ValueError, match="precision"):
        C.step_key(_cfg(), 10, "auto")


def test_bad_measurements_are_refused():
    with pytest.raises(ValueError, match="no configs"):
        C.step_seconds({})
    with pytest.raises(ValueError, match="steps and rounds"):
        C.step_seconds({"a": _cfg()}, steps=0, num_classes=10)
    with pytest.raises(ValueError, match="number of classes"):
        C.step_seconds({"a": _cfg()})


def test_a_slow_step_is_timed_within_the_block_budget_and_a_fast_one_takes_every_step(monkeypatch):
    """An emulated step (seconds each) stops at the block's budget: warm-up steps until half the budget has passed
    (at least one), then at least C.MIN_STEPS timed ones; a fast step takes all of ``steps`` and ``warmup``."""
    clock = [0.0]
    cost = {4: 10.0, 6: 0.01}  # seconds a step, by batch size
    calls = []

    def step(self):
        calls.append(self.x.shape[0])
        clock[0] += cost[self.x.shape[0]]

    monkeypatch.setattr(C._Setup, "step", step)
    monkeypatch.setattr(C.time, "perf_counter", lambda: clock[0])
    configs = {"slow": _cfg("data.batch_size=4"), "fast": _cfg("data.batch_size=6")}
    out = C.step_seconds(configs, steps=20, warmup=3, rounds=1, num_classes=10, precision="no", block_seconds=30.0)
    # slow, 10 s a step with a 30 s budget: warm-up at 0 s and 10 s (20 s > 15 s ends it), then 3 timed steps
    assert calls == [4] * (2 + C.MIN_STEPS) + [6] * (3 + 20)
    assert [len(b) for b in out["configs"]["slow"]["seconds"]] == [C.MIN_STEPS]
    assert out["configs"]["slow"]["median_seconds"] == pytest.approx(10.0) and out["block_seconds"] == 30.0
    assert [len(b) for b in out["configs"]["fast"]["seconds"]] == [20]
