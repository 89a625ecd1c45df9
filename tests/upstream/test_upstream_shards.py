"""Upstream training from WebDataset shards (data.source=shards): the stream per process, steps per epoch from the
index, evaluation of every example once, and an exact mid-epoch resume."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.config import load_config
from harness.data.config import DataConfig
from harness.data.pack import pack
from harness.data.sources import build_split
from harness.upstream.config import UpstreamConfig, validate
from harness.upstream.train import run

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "upstream" / "configs" / "digits_het.yaml"
QUICK = [
    "model.head.train_mc_samples=8",
    "model.head.eval_mc_samples=8",
    "train.log_every=5",
    "data.label_noise.kind=none",
]


@pytest.fixture(scope="module")
def digits_shards(tmp_path_factory) -> Path:
    """Digits train (1,078) and test (359) packed in shards of 100 (11 and 4 shards), val (360) in shards of 90."""
    out = tmp_path_factory.mktemp("digits_shards")
    for split, size in (("train", 100), ("test", 100), ("val", 90)):
        pack(build_split(DataConfig(source="digits"), split), out / split, size, prefix=split, progress=False)
    return out


def config(shards: Path, out: Path, *extra: str) -> UpstreamConfig:
    return load_config(
        UpstreamConfig,
        CONFIG,
        [*QUICK, "data.source=shards", f"data.path={shards}", f"output_dir={out}", *extra],
        distinct=False,
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_interrupted_shard_run_resumes_to_identical_final_metrics(digits_shards, tmp_path, workers):
    """A step schedule over shards, steps per epoch from the index: 1,078 // 128 = 8 batches in one process; with two
    loader workers 4 + 3 (578 and 500 examples), unequal, so the resume must follow the loader's turns between
    workers exactly. Stopped mid-epoch 2 between evaluations and resumed, the run's history and final metrics
    equal those of the run that was not stopped."""
    per_epoch = {0: 8, 2: 7}[workers]
    extra = [
        "train.steps=11",
        "train.eval_every_steps=4",
        "train.checkpoint_every=3",
        "optim.warmup_steps=3",
        "optim.warmup_epochs=0",
        f"data.num_workers={workers}",
        "data.shuffle_buffer=50",
        "data.batch_size=128",
        "data.image_size=16",
        "data.eval_resize=16",
    ]
    a = run(config(digits_shards, tmp_path / "a", *extra), progress=False)
    ma = json.loads((a / "metrics.json").read_text())
    assert ma["steps"] == 11 and [h["step"] for h in ma["history"]] == {0: [4, 8, 11], 2: [4, 7, 8, 11]}[workers]
    assert ma["history"][1]["epoch"] == 1 and "packed as 11 shard(s)" in ma["train_data"]
    pred = np.load(a / "predictions.npz")
    assert pred["index"].tolist() == list(range(359))  # every test example once, in the source's order
    assert np.array_equal(pred["targets"], build_split(DataConfig(source="digits"), "test").labels)
    assert np.load(a / "heldout_predictions.npz")["index"].tolist() == list(range(360))
    b_cfg = config(digits_shards, tmp_path / "b", *extra)
    run(b_cfg, progress=False, stop_after_steps=10)
    state = torch.load(tmp_path / "b" / "checkpoints" / "last.pt", weights_only=True)
    assert (state["epoch"], state["batch_in_epoch"]) == (1, 10 - per_epoch)  # 2 workers: 1 whole round + 1 batch
    assert state["stream"] == {"world_size": 1, "num_workers": workers}
    mb = json.loads((run(b_cfg, progress=False) / "metrics.json").read_text())
    assert ma["metrics"] == mb["metrics"] and ma["history"] == mb["history"]


def test_resume_with_another_layout_is_refused(digits_shards, tmp_path):
    cfg = config(digits_shards, tmp_path / "r", "train.epochs=1", "train.checkpoint_every=2")
    run(cfg, progress=False, stop_after_steps=2)
    # another worker count: a reading setting a resume may change (audit19 A19-10), but not a shard stream's order
    with pytest.raises(ValueError, match=r"with 1 process\(es\) x 0 loader worker\(s\) and this run has 1 x 1"):
        run(
            config(digits_shards, tmp_path / "r", "train.epochs=1", "train.checkpoint_every=2", "data.num_workers=1"),
            progress=False,
        )
    path = tmp_path / "r" / "checkpoints" / "last.pt"
    state = torch.load(path, weights_only=True)
    torch.save({**state, "stream": {"world_size": 2, "num_workers": 0}}, path)  # as if written by 2 processes
    with pytest.raises(ValueError, match=r"2 process\(es\) x 0 loader worker\(s\).*--num_processes 2"):
        run(cfg, progress=False)


def test_validation_of_shard_settings(digits_shards, tmp_path):
    validate(config(digits_shards, tmp_path))
    for extra, message in (
        (["data.loader=array"], "data.loader=auto"),
        (["data.limit_train=10"], "do not apply"),
        (["data.label_noise.kind=symmetric", "data.label_noise.rate=0.1"], "label_noise"),
        (["data.path=null"], "needs data.path"),
        (["data.source=shard"], "shards"),
    ):
        with pytest.raises(ValueError, match=message):
            validate(config(digits_shards, tmp_path, *extra))
    with pytest.raises(FileNotFoundError, match="no index.json"):  # a split that was not packed: before training
        run(config(digits_shards, tmp_path / "x", "data.heldout_split=train45k"), progress=False)


TWO_PROCESSES = """
import sys
from functools import partial
from accelerate import debug_launcher
from harness.config import load_config
from harness.upstream.config import UpstreamConfig
from harness.upstream.train import run

def main(shards, out_dir):
    cfg = load_config(UpstreamConfig, "upstream/configs/digits_het.yaml",
                      ["train.epochs=1", "model.head.train_mc_samples=8", "model.head.eval_mc_samples=8",
                       "data.label_noise.kind=none", "data.source=shards", f"data.path={shards}",
                       f"output_dir={out_dir}"])
    run(cfg, progress=False)

debug_launcher(partial(main, sys.argv[1], sys.argv[2]), num_processes=2)
"""


def test_two_processes_read_their_own_shards_and_evaluate_every_example_once(
    digits_shards, tmp_path, debug_launcher_port
):
    """2 CPU processes (gloo DDP) on shards: as many batches on each (the schedule's steps from the index), the
    test split's 4 shards unevenly split (ranks hold 200 and 159 examples) and every example evaluated once."""
    subprocess.run(
        [sys.executable, "-c", TWO_PROCESSES, str(digits_shards), str(tmp_path / "ddp")],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    summary = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert summary["steps"] == 7  # rank 0: shards 0, 2, ..., 10 (578 examples, 9 batches of 64); rank 1: 500 (7)
    pred = np.load(tmp_path / "ddp" / "predictions.npz")
    assert pred["index"].tolist() == list(range(359))
