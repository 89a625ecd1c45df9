"""A sweep split over the processes of accelerate's launcher, its progress lines, and its trackers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.downstream.config import SweepSettings
from harness.downstream.sweep import read_records, sweep
from harness.models import build_model, save_model

ROOT = Path(__file__).resolve().parents[2]
TINY = SweepSettings(lrs=[0.01, 0.05], steps=[4, 8], seeds=2, batch_size=32, micro_batch=32, resolution=[16, 16])

TWO_PROCESSES = """
import sys
from functools import partial
from accelerate import debug_launcher

def main(upstream, out):
    import torch
    from harness.downstream.config import SweepSettings
    from harness.downstream.sweep import sweep

    torch.set_num_threads(1)
    settings = SweepSettings(lrs=[0.01, 0.05], steps=[4, 8], seeds=2, batch_size=32, micro_batch=32,
                             resolution=[16, 16])
    sweep(upstream, ["demo_rotation", "demo_position"], out, settings, progress=lambda s: print(s, flush=True))

debug_launcher(partial(main, sys.argv[1], sys.argv[2]), num_processes=2)
"""


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    model = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    return str(save_model(model, tmp_path_factory.mktemp("up") / "model.pt"))


def test_two_processes_split_the_runs_and_write_the_single_process_table(upstream, tmp_path, debug_launcher_port):
    """accelerate's debug_launcher starts 2 CPU processes (gloo), as `accelerate launch --cpu --num_processes 2`
    would; run from a fresh interpreter (forking a process whose OpenMP threads ran can hang)."""
    out = subprocess.run(
        [sys.executable, "-c", TWO_PROCESSES, upstream, str(tmp_path / "two")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    records = read_records(tmp_path / "two" / "runs.jsonl")
    lines = (tmp_path / "two" / "runs.jsonl").read_text().splitlines()
    assert len(records) == len(lines) == 2 * (4 + 2)  # every run once: 4 selection + 2 final seeds per task
    # each phase split in two: 8 selection runs, then 4 finals, 4 each / 2 each
    assert out.stdout.count("[downstream] selection on val200: 8 of 8 run(s) to do; 4 in process") == 2
    assert out.stdout.count("[downstream] final seeds on test: 4 of 4 run(s) to do; 2 in process") == 2
    assert "in process 0 of 2" in out.stdout and "in process 1 of 2" in out.stdout
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        one = sweep(upstream, ["demo_rotation", "demo_position"], tmp_path / "one", TINY, progress=lambda s: None)
    finally:
        torch.set_num_threads(threads)
    two = json.loads((tmp_path / "two" / "vtab.json").read_text())
    assert two["tasks"] == json.loads(json.dumps(one["tasks"]))  # the same choices and accuracies


def test_progress_from_the_model_load_to_each_run_with_what_is_left(upstream, tmp_path):
    lines = []
    sweep(upstream, ["demo_count"], tmp_path, TINY, progress=lines.append)
    assert lines[0] == f"[downstream] loading the model {upstream}"
    assert lines[1] == "[downstream] selection on val200: 4 of 4 run(s) to do"
    assert lines[2].startswith("[downstream] 1/4 demo_count") and "val200 accuracy" in lines[2]
    assert lines[2].endswith(" left)")  # the time left in the phase, from the runs so far
    assert "[downstream] final seeds on test: 2 of 2 run(s) to do" in lines
    assert lines[-1].startswith("[downstream] 2/2 demo_count") and "left" not in lines[-1]
    again = []
    sweep(upstream, ["demo_count"], tmp_path, TINY, progress=again.append)
    assert again == [f"[downstream] loading the model {upstream}"]  # nothing left to run


def test_a_sweep_logged_to_mlflow_and_tensorboard(upstream, tmp_path, mlflow_store):
    mlflow, store_uri = mlflow_store
    out = tmp_path / "sweep"
    res = CliRunner().invoke(
        main,
        [
            "downstream",
            "--upstream",
            upstream,
            "--tasks",
            "demo_count",
            "--lrs",
            "0.05",
            "--steps",
            "4",
            "--seeds",
            "1",
            "--batch-size",
            "32",
            "--micro-batch",
            "32",
            "--resolution",
            "16,16",
            "--out",
            str(out),
            "--log-with",
            "mlflow,tensorboard",
        ],
    )
    assert res.exit_code == 0, res.output
    client = mlflow.tracking.MlflowClient(store_uri)
    (logged,) = client.search_runs([client.get_experiment_by_name("harness-downstream").experiment_id])
    params = logged.data.params
    assert params["settings.lrs"] == "[0.05]" and params["settings.mixed_precision"] == "no"
    assert params["tasks"] == '["demo_count"]' and params["upstream"] == str(Path(upstream).resolve())
    table = json.loads((out / "vtab.json").read_text())
    assert logged.data.metrics["final/demo_count/seed0/accuracy"] == pytest.approx(table["tasks"]["demo_count"]["mean"])
    assert logged.data.metrics["test/mean_over_tasks"] == pytest.approx(table["mean_over_tasks"])
    assert "select/demo_count/lr0.05_steps4/accuracy" in logged.data.metrics  # the val200 fine-tune
    assert {"vtab.md", "vtab.json"} <= {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert any((out / "tb").rglob("events.out.tfevents.*"))
    bad = CliRunner().invoke(
        main,
        [
            "downstream",
            "--upstream",
            upstream,
            "--tasks",
            "demo_count",
            "--out",
            str(tmp_path / "bad"),
            "--log-with",
            "mlfow",
        ],
    )
    assert bad.exit_code != 0 and "unknown tracker(s) 'mlfow'" in bad.output and not (tmp_path / "bad").exists()
