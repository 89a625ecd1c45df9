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


def test_bench_upstream_table_reports_ratios_per_round_and_the_verdict(tmp_path):
    from harness.upstream import bench

    speed = {name: [100.0, 200.0] for name, _ in bench.STEPS}  # the default: 100 then 200 images/s
    speed["+ 2 runs side by side, 1 thread each"] = [450.0, 700.0]  # 4.5x then 3.5x: median 4.0
    speed["bare loop (default setting)"] = [101.0, 199.0]
    speed[bench.FORCED_BF16] = [10.0, 20.0]
    speed["resnet10_32px_w16"] = [300.0, 600.0]
    summary = {"images": 256, "repeats": 2, "epochs": 1, "speed": speed, "native_bf16": False,
               "accuracy": {"resnet10_32px_w16": {"top1": 0.5, "nll": 1.5, "train_minutes": 2.5, "wall_minutes": 3}},
               "matmul": {"fp32": 100.0, "bf16": 20.0, "flags": "avx512_bf16: no"}}
    bench._write(tmp_path / "upstream.md", summary)
    text = (tmp_path / "upstream.md").read_text()
    assert "**4.00x** the default's training throughput (range 3.50-4.50" in text and "target >= 4x: met" in text
    assert "| array loader + bf16 forced on | 10, 20 | 15 | 0.10 (0.10-0.10) |" in text
    assert "means fp32 on this CPU" in text and "it is slower than fp32 here" in text
    assert "| resnet10_32px_w16 | 50.00% | 1.5000 | 2.5 | 5.0 | 10.00 |" in text
