"""The ``harness`` command: help, the head benchmark on a tiny grid, Ctrl-C (one line on what rerunning keeps,
exit status 130) and ``harness env``."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "harness.cli", "--help"], capture_output=True, text=True, check=True)
    assert "bench" in out.stdout


def test_bench_heads_quick_writes_table_with_provenance(tmp_path):
    out = tmp_path / "heads.md"
    res = CliRunner().invoke(main, ["bench", "heads", "--quick", "--repeats", "1", "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "Written by `" in text and "torch " in text and "| low_rank | fp32 | 8 | 64 | 50 | 5 | 10 |" in text
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert {r["variant"] for r in rows} == {"low_rank", "hetxl_pe"}
    assert {r["precision"] for r in rows} == {
        "fp32",
        "bf16",
    } and "| hetxl_pe | bf16 | 8 | 64 | 50 | 5 | 100 | sigmoid |" in text
    assert all(r["ours"]["ms"] > 0 and r["naive"]["ms"] > 0 for r in rows)


def test_bench_heads_before_times_the_head_of_the_given_tree(tmp_path):
    """--before DIR: the head imported from DIR's harness/ is timed beside ours (a copy of this tree whose
    forward sleeps 0.1 s: its steps take over 100 ms, ours about 6 ms on a Zen 3), in a before/after table."""
    import shutil

    import harness

    tree = tmp_path / "before"
    shutil.copytree(Path(harness.__file__).parent, tree / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tree / "harness" / "heads" / "__init__.py", "a") as f:
        f.write(
            "\nimport time as _t\n_fwd = HeteroscedasticHead.forward\n"
            "HeteroscedasticHead.forward = lambda self, *a, **k: (_t.sleep(0.1), _fwd(self, *a, **k))[1]\n"
        )
    out = tmp_path / "heads.md"
    res = CliRunner().invoke(
        main, ["bench", "heads", "--quick", "--repeats", "1", "--no-compile", "--out", str(out), "--before", str(tree)]
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    fp32 = [r for r in rows if r["precision"] == "fp32"]  # the before head is timed in fp32 only
    # the sleep is in the before head's times only (ours can pass 100 ms on a loaded machine)
    assert fp32 and all(r["before"]["ms"] >= 100 and r["before"]["ms"] > r["ours"]["ms"] for r in fp32)
    assert all("before" not in r for r in rows if r["precision"] == "bf16")
    assert "## Before / after" in out.read_text() and "| low_rank | softmax | 10 |" in out.read_text()
    res = CliRunner().invoke(main, ["bench", "heads", "--quick", "--out", str(out), "--before", str(tmp_path)])
    assert res.exit_code != 0 and "holds no harness/heads/" in res.output


def test_bench_heads_refuses_missing_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        return
    res = CliRunner().invoke(main, ["bench", "heads", "--device", "cuda", "--out", str(tmp_path / "x.md")])
    assert res.exit_code != 0 and "no GPU" in res.output


def test_bench_upstream_table_reports_ratios_per_round_and_the_verdict(tmp_path):
    from harness.upstream import bench

    speed = {name: [100.0, 200.0] for name, _ in bench.STEPS}  # the default: 100 then 200 images/s
    speed["+ 2 runs side by side, 1 thread each"] = [450.0, 700.0]  # 4.5x then 3.5x: median 4.0
    speed["bare loop (default setting)"] = [101.0, 199.0]
    speed[bench.FORCED_BF16] = [10.0, 20.0]
    speed["resnet10_32px_w16"] = [300.0, 600.0]
    summary = {
        "images": 256,
        "repeats": 2,
        "epochs": 1,
        "speed": speed,
        "native_bf16": False,
        "accuracy": {"resnet10_32px_w16": {"top1": 0.5, "nll": 1.5, "train_minutes": 2.5, "wall_minutes": 3}},
        "matmul": {"fp32": 100.0, "bf16": 20.0, "flags": "avx512_bf16: no"},
    }
    bench._write(tmp_path / "upstream.md", summary)
    text = (tmp_path / "upstream.md").read_text()
    assert "**4.00x** the default's training throughput (range 3.50-4.50" in text and "target >= 4x: met" in text
    assert "| array loader + bf16 forced on | 10, 20 | 15 | 0.10 (0.10-0.10) |" in text
    assert "means fp32 on this CPU" in text and "it is slower than fp32 here" in text
    assert "| resnet10_32px_w16 | 50.00% | 1.5000 | 2.5 | 5.0 | 10.00 |" in text


CONFIGS = Path(__file__).resolve().parents[1] / "upstream" / "configs"
#: each long command, the function it hands its work to, and its arguments
INTERRUPTIBLE = {
    "upstream": ("harness.upstream.train", "run", ["--config", str(CONFIGS / "digits_hom.yaml")]),
    "run": ("harness.experiment", "run_experiment", []),
    "downstream": ("harness.downstream.sweep", "sweep", ["--upstream", "timm:resnet18", "--tasks", "demo"]),
    "import": (
        "harness.importing",
        "import_run",
        ["--model", "timm:resnet18", "--data", str(CONFIGS / "digits_base.yaml"), "--out", "{tmp}/imported"],
    ),
    "data pack": ("harness.data.pack_source", "source_config", ["digits", "{tmp}/packed", "--shard-size", "100"]),
}


@pytest.mark.parametrize("command", list(INTERRUPTIBLE))
def test_ctrl_c_ends_a_long_command_with_one_line_on_rerunning_and_status_130(command, tmp_path, monkeypatch):
    import importlib

    from harness.cli import RESUMES

    module, name, args = INTERRUPTIBLE[command]

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(module), name, interrupted)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, [*command.split(), *(a.format(tmp=tmp_path) for a in args)])
    assert res.exit_code == 130, res.output
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    said = [line for line in res.output.splitlines() if line.startswith("interrupted")]
    assert said == [f"interrupted: {RESUMES[command]}"], res.output
    assert "rerun the same command" in said[0]


def test_ctrl_c_in_other_commands_says_only_that_it_was_interrupted(monkeypatch):
    import harness.env

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(harness.env, "environment", interrupted)
    res = CliRunner().invoke(main, ["env"])
    assert res.exit_code == 130 and res.output.strip() == "interrupted"


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and signals of Linux")
def test_sigint_in_harness_upstream_ends_it_with_the_resume_line_and_no_traceback(tmp_path):
    """A real Ctrl-C: SIGINT to the command's process group once it has started its run."""
    import os
    import signal
    import time

    from harness.cli import RESUMES

    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "upstream",
            "--config",
            str(CONFIGS / "digits_hom.yaml"),
            f"output_dir={run_dir}",
            "train.epochs=50",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # Ctrl-C's default, as in a terminal: a shell's background job (pytest started with &)
        # would pass on SIGINT ignored, and the command would never see the signal
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        started = run_dir / "checkpoints" / "last.pt"  # the first epoch done: the run is training, past its start-up
        while time.monotonic() < deadline and not started.is_file() and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err and f"interrupted: {RESUMES['upstream']}" in err, err[-2000:]
    assert not (run_dir / "metrics.json").exists()  # stopped, not finished
