"""The training-loop idiom both stages share (harness.training.loop): it computes what the plain PyTorch loop
computes in fp32, accelerate's one precision per process, and runs of another precision in a fresh process."""

import ast
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness.config import load_config
from harness.training.loop import PrecisionHeld, accumulate_step, held_precision, in_fresh_process, make_accelerator
from harness.upstream.config import UpstreamConfig
from harness.upstream.train import run

ROOT = Path(__file__).resolve().parents[2]


def _steps(accelerated: bool) -> "list[torch.Tensor]":
    """4 micro-batches of a small model, accumulated 2 to an optimiser step, clipped to norm 0.5: with the shared
    idiom on an fp32 accelerator, or with a plain loop (loss / accum, backward, clip, step every 2)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    batches = [(torch.randn(5, 6), torch.randint(0, 3, (5,))) for _ in range(4)]
    if accelerated:
        accelerator = make_accelerator("no", grad_accum_steps=2)
        opt = accelerator.prepare(opt)
        for x, y in batches:
            accumulate_step(accelerator, model, opt, lambda: model(x), lambda out: F.cross_entropy(out, y), 0.5)
    else:
        for i, (x, y) in enumerate(batches, 1):
            (F.cross_entropy(model(x), y) / 2).backward()
            if i % 2 == 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
                opt.step()
                opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _fp32_process_state() -> None:
    if held_precision() is not None and held_precision()[0] != "no":
        pytest.skip("an earlier test left accelerate's state in another precision in this process")


def test_the_shared_step_is_the_plain_loop_in_fp32():
    _fp32_process_state()
    for a, b in zip(_steps(True), _steps(False)):
        assert torch.equal(a, b)  # bit for bit: the same operations in the same order


def test_one_precision_per_process_and_a_clear_refusal():
    _fp32_process_state()
    make_accelerator("no")
    assert held_precision() == ("no", "cpu")
    with pytest.raises(PrecisionHeld, match="holds mixed precision 'no' on cpu.*asks for 'bf16'"):
        make_accelerator("bf16")
    with pytest.raises(FloatingPointError, match="the loss is nan"):
        accelerator = make_accelerator("no")
        model = torch.nn.Linear(2, 2)
        opt = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=0.1))
        accumulate_step(accelerator, model, opt, lambda: model(torch.ones(1, 2)), lambda out: out.sum() * float("nan"))


def test_a_run_of_another_precision_trains_in_a_fresh_process(tmp_path):
    """accelerate holds fp32 here; a bf16 run is trained in a fresh process, and this one keeps fp32."""
    _fp32_process_state()
    make_accelerator("no")
    cfg = load_config(
        UpstreamConfig,
        ROOT / "upstream" / "configs" / "digits_hom.yaml",
        [
            "train.epochs=1",
            "data.limit_train=128",
            "data.limit_eval=64",
            "train.mixed_precision=bf16",
            "train.log_with=[]",
            f"output_dir={tmp_path / 'bf16'}",
        ],
    )
    run_dir = run(cfg, progress=False)
    assert json.loads((run_dir / "metrics.json").read_text())["mixed_precision"] == "bf16"
    assert held_precision() == ("no", "cpu")


def _square(x: int) -> int:
    return x * x


def test_in_fresh_process_returns_the_result_and_raises_the_error():
    assert in_fresh_process(_square, 7) == 49
    with pytest.raises(TypeError):
        in_fresh_process(_square, "x")


def test_no_private_accelerate_api_in_the_stages():
    """accelerate's state is never reset through its private API (AcceleratorState._reset_state)."""
    files = [*(ROOT / "upstream").glob("*.py"), *(ROOT / "downstream").glob("*.py")]
    bad = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("_reset_state", "_shared_state"):
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, bad


def test_batch_norm_layers_and_passes_of_one_image():
    import timm.layers

    from harness.training.loop import batch_norm_layers, check_batch_norm_batch

    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        timm.layers.BatchNormAct2d(4),  # a BatchNorm2d
        nn.SyncBatchNorm(4),
        nn.LazyBatchNorm2d(),
        nn.GroupNorm(2, 4),
        nn.LayerNorm(4),
        nn.Flatten(),
        nn.BatchNorm1d(4),
    )
    assert batch_norm_layers(model) == ["1", "2", "3", "4", "8"]
    assert batch_norm_layers(nn.Sequential(nn.GroupNorm(2, 4), nn.LayerNorm(4), nn.InstanceNorm2d(4))) == []
    check_batch_norm_batch(["1"], 2, "x", "y")  # two images a pass: BatchNorm trains
    check_batch_norm_batch([], 1, "x", "y")  # no BatchNorm: one image a pass is fine
    with pytest.raises(
        ValueError,
        match=r"^data\.batch_size=1 is one, and backbone b has 2 BatchNorm layer\(s\) "
        r"\(e\.g\. stem\.bn\): .* a pass of one image cannot train it .*; use 2$",
    ):
        check_batch_norm_batch(["stem.bn", "x.bn"], 1, "data.batch_size=1 is one", "use 2", "backbone b")
