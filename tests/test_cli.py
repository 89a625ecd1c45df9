"""The ``harness`` command: help, and the head benchmark on a tiny grid."""

import json
import subprocess
import sys

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
    assert "Written by `" in text and "torch " in text and "| low_rank | 8 | 64 | 50 | 5 | 10 |" in text
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert {r["variant"] for r in rows} == {"low_rank", "hetxl_pe"}
    assert all(r["ours"]["ms"] > 0 and r["naive"]["ms"] > 0 for r in rows)


def test_bench_heads_refuses_missing_gpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        return
    res = CliRunner().invoke(main, ["bench", "heads", "--device", "cuda", "--out", str(tmp_path / "x.md")])
    assert res.exit_code != 0 and "no GPU" in res.output
