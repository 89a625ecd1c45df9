"""VTAB-1k sweeps: selection, final runs, the table, resumption after a kill, submitit, bad input."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from downstream.sweep import SweepSettings, read_records, sweep
from harness.cli import main
from harness.models import build_model, save_model

ROOT = Path(__file__).resolve().parents[1]
TINY = SweepSettings(lrs=[0.01, 0.05], steps=[10, 20], seeds=2, batch_size=32, micro_batch=32, resolution=[32, 32])
CLI_TINY = ["--lrs", "0.01,0.05", "--steps", "10,20", "--seeds", "2", "--batch-size", "32", "--micro-batch", "32",
            "--resolution", "32,32"]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    model = build_model(dict(backbone="test_resnet", num_classes=10,
                             head=dict(covariance="low_rank", num_factors=3)))
    return str(save_model(model, tmp_path_factory.mktemp("up") / "model.pt"))


def test_demo_sweep_selects_retrains_and_writes_the_table(upstream, tmp_path):
    result = sweep(upstream, ["demo_rotation", "demo_position"], tmp_path, TINY, progress=lambda s: None)
    records = read_records(tmp_path / "runs.jsonl")
    assert len(records) == 2 * 4 + 2 * 2  # 2 tasks x (4 selection + 2 final) runs
    for task in ("demo_rotation", "demo_position"):
        sel = [r for r in records.values() if r["task"] == task and r["phase"] == "select"]
        best = max(sel, key=lambda r: (r["accuracy"], -r["lr"], -r["steps"]))
        assert (result["tasks"][task]["lr"], result["tasks"][task]["steps"]) == (best["lr"], best["steps"])
        assert (tmp_path / "predictions" / f"{task}_seed1.npz").is_file()
        assert all(r["split"] == "val200" for r in sel)
    assert result["groups"]["demo"]["tasks"] == 2 and result["vtab1k_score"] is None
    md = (tmp_path / "vtab.md").read_text()
    assert "Not a VTAB-1k score" in md and "Written by" in md
    assert json.loads((tmp_path / "vtab.json").read_text())["tasks"].keys() == result["tasks"].keys()
    # a rerun does nothing new and gives the same table
    again = sweep(upstream, ["demo_rotation", "demo_position"], tmp_path, TINY, progress=pytest.fail)
    assert again == result


def test_killed_sweep_reruns_only_the_remaining_runs(upstream, tmp_path):
    args = [sys.executable, "-m", "harness.cli", "downstream", "--upstream", upstream, "--tasks", "demo_digit",
            *CLI_TINY, "--out", str(tmp_path / "killed")]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = tmp_path / "killed" / "runs.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not store.is_file() or len(store.read_text().splitlines()) < 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = read_records(store)
    assert 2 <= len(done_before) < 6
    with open(store, "a") as f:
        f.write('{"key": "torn')  # a line cut by the kill
    res = CliRunner().invoke(main, ["downstream", "--upstream", upstream, "--tasks", "demo_digit", *CLI_TINY,
                                    "--out", str(tmp_path / "killed")])
    assert res.exit_code == 0, res.output
    assert res.output.count("accuracy") == 6 - len(done_before)  # only the remaining runs
    full = sweep(upstream, ["demo_digit"], tmp_path / "full", TINY, progress=lambda s: None)
    killed = json.loads((tmp_path / "killed" / "vtab.json").read_text())
    assert killed["tasks"] == full["tasks"]


def test_submitit_local_executor_runs_real_processes(upstream, tmp_path):
    pytest.importorskip("submitit")
    settings = SweepSettings(lrs=[0.05], steps=[10], seeds=1, batch_size=32, micro_batch=32, resolution=[32, 32])
    result = sweep(upstream, ["demo_count"], tmp_path, settings, executor="submitit-local")
    assert set(result["tasks"]) == {"demo_count"}
    assert list((tmp_path / "jobs").glob("*_result.pkl"))  # submitit's own job outputs


def test_bad_input(upstream, tmp_path):
    with pytest.raises(ValueError, match="unknown VTAB-1k task 'cifar1000'"):
        sweep(upstream, ["cifar1000"], tmp_path, TINY)
    with pytest.raises(FileNotFoundError, match="no upstream checkpoint"):
        sweep(str(tmp_path / "nope.pt"), ["demo_digit"], tmp_path, TINY)
    with pytest.raises(ValueError, match="unknown executor"):
        sweep(upstream, ["demo_digit"], tmp_path, TINY, executor="ray")
    with pytest.raises(ValueError, match="folder format needs --data-dir"):
        sweep(upstream, ["dtd"], tmp_path / "f", SweepSettings(data_format="folder"))
    with pytest.raises(FileNotFoundError, match="not prepared under data_dir"):
        sweep(upstream, ["dtd"], tmp_path / "t", SweepSettings(data_dir=str(tmp_path / "no_tfds")))
    sweep(upstream, ["demo_digit"], tmp_path / "x", SweepSettings(lrs=[0.05], steps=[5], seeds=1, batch_size=32,
                                                                micro_batch=32, resolution=[32, 32]))
    with pytest.raises(ValueError, match="another upstream checkpoint or settings"):
        sweep(upstream, ["demo_digit"], tmp_path / "x", TINY)
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read as a harness model checkpoint"):
        sweep(str(tmp_path / "bad.pt"), ["demo_digit"], tmp_path / "y", TINY)
    import torch

    payload = torch.load(upstream, weights_only=True)
    payload["config"]["backbone"] = "resnet_from_the_future"
    torch.save(payload, tmp_path / "future.pt")
    with pytest.raises(ValueError, match="unknown backbone 'resnet_from_the_future'"):
        sweep(str(tmp_path / "future.pt"), ["demo_digit"], tmp_path / "z", TINY)


def test_custom_task_from_a_folder_and_one_line(upstream, tmp_path):
    import numpy as np
    from PIL import Image

    folder = tmp_path / "birds"
    (folder / "img").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(folder / "img" / f"{i}.png")
    for split, n in (("train800", 40), ("val200", 10), ("train800val200", 50), ("test", 12)):
        (folder / f"{split}.txt").write_text("".join(f"img/{i % 3}.png {i % 5}\n" for i in range(n)))
    res = CliRunner().invoke(main, ["downstream", "--upstream", upstream, "--tasks", f"birds={folder}:5",
                                    "--lrs", "0.05", "--steps", "3", "--batch-size", "16", "--micro-batch", "8",
                                    "--resolution", "32,32", "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "out" / "vtab.json").read_text())
    assert table["tasks"]["birds"]["group"] == "custom" and table["groups"]["custom"]["tasks"] == 1
    with pytest.raises(ValueError, match="NAME=FOLDER:NUM_CLASSES"):
        sweep(upstream, ["birds=/x"], tmp_path / "bad", TINY)


def test_learning_rate_scales_with_the_batch():
    from downstream.finetune import FinetuneConfig

    assert FinetuneConfig(lr=0.003, batch_size=128, lr_batch=512).effective_lr == pytest.approx(0.00075)
    assert FinetuneConfig(lr=0.003, batch_size=128).effective_lr == 0.003
