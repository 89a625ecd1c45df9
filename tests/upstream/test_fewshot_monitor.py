"""The few-shot monitor of upstream training (train.fewshot_every / fewshot_tasks / fewshot_shots)."""

import json
from pathlib import Path

import pytest

from harness.config import load_config
from harness.upstream.config import UpstreamConfig, validate
from harness.upstream.train import run

CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"
TINY = [
    "train.epochs=2",
    "model.head.train_mc_samples=8",
    "model.head.eval_mc_samples=8",
    "train.log_every=1",
    "train.checkpoint_every=2",
    "data.limit_train=256",
    "data.limit_eval=64",
    "data.heldout_split=null",
]
MONITOR = ["train.fewshot_every=1", "train.fewshot_tasks=[demo_digit]", "train.fewshot_shots=[1,5]"]


def _cfg(folder: Path, *extra: str) -> UpstreamConfig:
    return load_config(
        UpstreamConfig, CONFIGS / "digits_het.yaml", [*TINY, f"output_dir={folder}", *extra], distinct=False
    )


def _scalars(run_dir: Path) -> "dict[str, list]":
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = {}
    for events in run_dir.rglob("events.out.tfevents*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def test_the_monitor_logs_every_epoch_survives_a_kill_and_leaves_training_unchanged(tmp_path):
    plain = run(_cfg(tmp_path / "plain"), progress=False)
    cfg = _cfg(tmp_path / "monitored", *MONITOR)
    run(cfg, progress=False, stop_after_steps=6)  # interrupted mid-epoch 2 (4 steps an epoch), after epoch 1's
    lines = (Path(cfg.output_dir) / "fewshot.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 1]
    monitored = run(cfg, progress=False)
    records = [json.loads(line) for line in (monitored / "fewshot.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["task"], r["shots"]) for r in records] == [
        (1, "demo_digit", 1),
        (1, "demo_digit", 5),
        (2, "demo_digit", 1),
        (2, "demo_digit", 5),
    ]
    for r in records:
        assert 0.0 <= r["prec@1"] <= 1.0 and r["num_train"] == 10 * r["shots"] and r["num_test"] == 500
        assert r["num_heldout"] == 100 and r["resolution"] == 32 and r["lam"] > 0
    assert records[3]["prec@1"] > 0.3  # chance is 0.1
    scalars = _scalars(monitored)
    assert {s for s, _ in scalars["fewshot/demo_digit/5shot"]} == {records[1]["step"], records[3]["step"]}
    assert sorted(v for _, v in scalars["fewshot/demo_digit/1shot"]) == pytest.approx(
        sorted(r["prec@1"] for r in records if r["shots"] == 1)
    )
    # the monitor neither draws from the training RNG nor changes the model: training is that of the plain run
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (plain, monitored))
    assert a["metrics"] == b["metrics"] and a["history"] == b["history"]
    assert not (plain / "fewshot.jsonl").exists()


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["train.fewshot_every=-1", "train.fewshot_tasks=[demo_digit]"], "train.fewshot_every must be a whole number"),
        (["train.fewshot_every=2"], r"train.fewshot_every=2 needs train.fewshot_tasks"),
        (
            ["train.fewshot_tasks=[demo_digit]"],
            r"train.fewshot_tasks=\[demo_digit\] is set but train.fewshot_every is 0",
        ),
        (["train.fewshot_every=1", "train.fewshot_tasks=[demo_nope]"], "train.fewshot_tasks: unknown"),
        (
            ["train.fewshot_every=1", "train.fewshot_tasks=[demo_digit]", "train.fewshot_shots=[0,5]"],
            r"train.fewshot_shots must be a whole number >= 1, got \[0, 5\]",
        ),
    ],
)
def test_bad_monitor_settings_are_refused_by_validate(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        validate(_cfg(tmp_path / "run", *overrides))


def test_bad_monitor_data_stops_the_run_before_training(tmp_path):
    missing = _cfg(tmp_path / "a", "train.fewshot_every=1", f'train.fewshot_tasks=["birds={tmp_path / "none"}:3"]')
    with pytest.raises(FileNotFoundError, match="train.fewshot_tasks: .*does not exist"):
        run(missing, progress=False)
    too_many = _cfg(tmp_path / "b", *MONITOR[:2], "train.fewshot_shots=[1,500]")
    with pytest.raises(ValueError, match=r"500 shots need at least 501 .*\(train.fewshot_shots\)"):
        run(too_many, progress=False)
    for folder in ("a", "b"):
        assert not (tmp_path / folder / "checkpoints" / "last.pt").exists()
