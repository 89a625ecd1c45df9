"""``harness bench upstream``'s part 3: where one training step's time goes, fp32 against bf16."""

from __future__ import annotations

import pytest

from harness.training.loop import in_fresh_process
from harness.upstream.bench_breakdown import CATEGORIES, breakdown_lines, category, step_breakdown, write

#: a tiny config: the digits images' size, the smallest timm ResNet, a low-rank HET head
TINY = [
    "model.backbone=test_resnet",
    "model.head.covariance=low_rank",
    "model.head.num_factors=2",
    "model.head.train_mc_samples=4",
    "data.image_size=16",
    "data.batch_size=8",
]


@pytest.mark.parametrize(
    "name, ancestors, expected",
    [
        ("aten::mkldnn_convolution", ["aten::convolution"], CATEGORIES[0]),
        ("aten::convolution_backward", ["autograd::engine::evaluate_function: ConvolutionBackward0"], CATEGORIES[1]),
        ("aten::native_batch_norm_backward", [], CATEGORIES[2]),
        ("aten::_to_copy", ["aten::to"], CATEGORIES[3]),
        ("aten::add_", ["Optimizer.step#SGD.step"], CATEGORIES[4]),
        ("aten::copy_", ["aten::zero_", "Optimizer.zero_grad#SGD.zero_grad"], CATEGORIES[4]),
        ("aten::threshold_backward", [], CATEGORIES[5]),
    ],
)
def test_each_operator_falls_in_one_category(name, ancestors, expected):
    assert category(name, ancestors) == expected


@pytest.mark.parametrize("precision", ["no", "bf16"])
def test_the_step_is_split_into_its_categories(precision):
    # in a fresh process: accelerate keeps one precision per process
    b = in_fresh_process(step_breakdown, TINY, precision, 2)
    parts = b["categories"]
    assert set(parts) == set(CATEGORIES) and all(v >= 0 for v in parts.values())
    # a ResNet step spends time in its convolutions both ways, and in the optimiser
    assert parts[CATEGORIES[0]] > 0 and parts[CATEGORIES[1]] > 0 and parts[CATEGORIES[4]] > 0
    assert b["wall_ms"] > 0 and b["conv_backward"]
    # the first layer's weight gradient: output gradient [8, 16, 8, 8] x input [8, 3, 16, 16] x weight [16, 3, 3, 3]
    assert "[8, 16, 8, 8] x [8, 3, 16, 16] x [16, 3, 3, 3]" in b["conv_backward"]


def test_the_table_gives_each_gain_and_share():
    fp32 = {"wall_ms": 100.0, "categories": dict.fromkeys(CATEGORIES, 10.0), "conv_backward": {"a": 8.0, "b": 2.0}}
    bf16 = {"wall_ms": 50.0, "categories": dict.fromkeys(CATEGORIES, 5.0), "conv_backward": {"a": 4.0, "b": 3.0}}
    bf16["categories"][CATEGORIES[1]] = 20.0  # slower in bf16: a gain below 1
    text = "\n".join(breakdown_lines({"fp32": fp32, "bf16": bf16}))
    assert f"| {CATEGORIES[0]} | 10.0 | 5.0 | 2.00x | 11% |" in text  # 5 of 45 ms
    assert f"| {CATEGORIES[1]} | 10.0 | 20.0 | 0.50x | 44% |" in text
    assert "| **profiled step** | 60.0 | 45.0 | 1.33x | 100% |" in text
    assert "| step without the profiler | 100.0 | 50.0 | 2.00x | |" in text
    # by layer, largest bf16 time first
    assert text.index("| a | 8.0 | 4.0 | 2.00x |") < text.index("| b | 2.0 | 3.0 | 0.67x |")


def test_breakdown_only_writes_its_section_alone(tmp_path):
    part = {"wall_ms": 10.0, "categories": dict.fromkeys(CATEGORIES, 1.0), "conv_backward": {}}
    summary = {
        "data": "x",
        "breakdown": {"fp32": part, "bf16": part},
        "matmul": {"fp32": 100.0, "bf16": 250.0, "flags": "avx512_bf16: yes"},
    }
    write(tmp_path / "b.md", summary)
    text = (tmp_path / "b.md").read_text()
    assert text.startswith("# Upstream training on CPU: where one step's time goes")
    assert "| **profiled step** | 6.0 | 6.0 | 1.00x | 100% |" in text and "(2.50x)" in text
    assert (tmp_path / "b.json").is_file() and "images/s" not in text


def test_breakdown_only_refuses_the_settings_of_the_parts_it_skips():
    from click.testing import CliRunner

    from harness.cli import main

    res = CliRunner().invoke(main, ["bench", "upstream", "--breakdown-only", "--images", "300", "--backbone", "x"])
    assert (
        res.exit_code == 2 and "--images, --backbone set what the throughput and accuracy parts measure" in res.output
    )


def test_rounds_give_medians_and_each_gains_range():
    def part(wall, scale):
        return {"wall_ms": wall, "categories": {c: scale for c in CATEGORIES}, "conv_backward": {"a": scale}}

    rounds = [{"fp32": part(100.0, 10.0), "bf16": part(50.0, s)} for s in (4.0, 5.0, 8.0)]
    text = "\n".join(breakdown_lines({"rounds": rounds, "load": [1.0, 1.0]}))
    # bf16 median 5.0; the gains 2.5, 2.0 and 1.25 over the rounds
    assert f"| {CATEGORIES[0]} | 10.0 | 5.0 | 2.00x (1.25-2.50) | 17% |" in text
    assert "| step without the profiler | 100.0 | 50.0 | 2.00x (2.00-2.00) | |" in text
    assert "| a | 10.0 | 5.0 | 2.00x (1.25-2.50) |" in text
