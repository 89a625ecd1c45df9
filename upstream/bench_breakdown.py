"""Where one training step's time goes, fp32 against bf16 (part 3 of ``harness bench upstream``).

The throughput rows of :mod:`harness.upstream.bench` say how much bf16 buys the whole step; this part says why it
buys less than bf16's matmuls do. The harness's own step (:func:`harness.training.loop.accumulate_step`: the
accelerator's autocast, the fp32 loss, backward, the optimiser) of the measured model is profiled with
``torch.profiler`` in one process with one thread (as the fastest setting trains: two such processes side by side),
on a fixed batch (the loader is measured by the throughput rows), channels_last, once with
``mixed_precision=no`` and once with ``bf16``. Each operator's own time is put in one category (convolutions
forward and backward, batch norm, dtype casts and layout copies, the optimiser, the rest); the convolution
backward is also listed per layer shape, where the gain differs most.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Callable

import torch

#: the title of the file of ``harness bench upstream --breakdown-only``
TITLE = "Upstream training on CPU: where one step's time goes, fp32 against bf16"
#: the categories of an operator's own time, in the order the table lists them
CATEGORIES = (
    "convolutions, forward",
    "convolutions, backward",
    "batch norm, forward and backward",
    "dtype casts and layout copies",
    "optimiser step and zeroing",
    "the rest (activations, pooling, the HET head, the loss, autograd)",
)
_CONV_FORWARD = {"aten::mkldnn_convolution", "aten::convolution", "aten::_convolution", "aten::conv2d"}
_COPIES = {"aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "aten::contiguous"}


def category(name: str, ancestors: "list[str]") -> str:
    """The category (one of :data:`CATEGORIES`) of an operator ``name`` called under ``ancestors`` (the names of
    the profiler events around it, innermost first)."""
    if any(a.startswith("Optimizer.") for a in ancestors):
        return CATEGORIES[4]
    if name in _CONV_FORWARD:
        return CATEGORIES[0]
    if name == "aten::convolution_backward":
        return CATEGORIES[1]
    if "batch_norm" in name:
        return CATEGORIES[2]
    if name in _COPIES:
        return CATEGORIES[3]
    return CATEGORIES[5]


def _profiled(step: Callable[[], None], steps: int) -> "tuple[float, dict[str, float], dict[str, float]]":
    """(wall ms per step without the profiler, ms per step by category, convolution backward ms per step by the
    shapes of its gradient, input and weight) over ``steps`` steps of ``step``."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    tic = time.perf_counter()
    for _ in range(steps):
        step()
    wall = (time.perf_counter() - tic) / steps * 1e3
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(steps):
            step()
    by_category = dict.fromkeys(CATEGORIES, 0.0)
    for event in prof.events():
        ancestors, parent = [], event.cpu_parent
        while parent is not None:
            ancestors.append(parent.name)
            parent = parent.cpu_parent
        by_category[category(event.name, ancestors)] += event.self_cpu_time_total / 1e3 / steps
    shapes = {
        " x ".join(str(list(s)) for s in e.input_shapes[:3]): e.self_cpu_time_total / 1e3 / steps
        for e in prof.key_averages(group_by_input_shape=True)
        if e.key == "aten::convolution_backward"
    }
    return wall, by_category, shapes


def step_breakdown(overrides: "list[str]", precision: str, steps: int = 6) -> dict:
    """Profile ``steps`` training steps of the upstream config ``overrides`` (its model, head, optimiser and batch
    size; a random batch of its image size, channels_last) with ``mixed_precision=precision`` (``no`` or ``bf16``),
    in this process with one torch thread. For a fresh process each (accelerate keeps one precision per process):
    :func:`harness.upstream.bench._step_breakdown` runs both.

    Returns:
        ``wall_ms`` (per step, not profiled), ``categories`` (ms per step by :data:`CATEGORIES`; their sum is the
        profiled step) and ``conv_backward`` (ms per step by the shapes of its gradient, input and weight).
    """
    from harness.config import load_config
    from harness.models import ModelConfig, build_model
    from harness.training.loop import accumulate_step, make_accelerator
    from harness.upstream.config import UpstreamConfig
    from harness.upstream.losses import training_loss
    from harness.upstream.optim import build_optimizer

    torch.set_num_threads(1)
    cfg = load_config(UpstreamConfig, None, overrides)
    size, batch, loss = cfg.data.image_size, cfg.data.batch_size, cfg.train.loss
    torch.manual_seed(cfg.seed)
    accelerator = make_accelerator(precision, cpu=True)
    model = build_model(ModelConfig(cfg.model.backbone, 10, dict(cfg.model.head))).train()
    model = model.to(memory_format=torch.channels_last)
    model, optimizer = accelerator.prepare(model, build_optimizer(model, cfg.optim))
    x = torch.randn(batch, 3, size, size).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))

    def step() -> None:
        accumulate_step(accelerator, model, optimizer, lambda: model(x), lambda o: training_loss(o, y, False, loss))

    wall, categories, shapes = _profiled(step, steps)
    return {"wall_ms": wall, "categories": categories, "conv_backward": shapes}


def breakdown_lines(b: dict) -> "list[str]":
    """The Markdown of :func:`measure`'s ``rounds`` (or one round, ``{"fp32": ..., "bf16": ...}``): a table by
    category and the convolution backward by shape, each time the median over rounds and each gain with its range
    (min-max of the rounds' gains) when there are several."""
    rounds = b.get("rounds") or [b]
    med = statistics.median

    def cell(a: "list[float]", z: "list[float]") -> "list[str]":
        gains = [x / y for x, y in zip(a, z) if y > 0]
        gain = (
            "-"
            if not gains
            else f"{med(gains):.2f}x" + (f" ({min(gains):.2f}-{max(gains):.2f})" if len(gains) > 1 else "")
        )
        return [f"{med(a):.1f}", f"{med(z):.1f}", gain]

    def values(prec: str, key: str, name: str) -> "list[float]":
        return [r[prec][key][name] for r in rounds]

    totals = {p: [sum(r[p]["categories"].values()) for r in rounds] for p in ("fp32", "bf16")}
    lines = [
        "| part of the step | fp32 ms/step | bf16 ms/step | bf16 gain | share of the bf16 step |",
        "|---|---|---|---|---|",
    ]
    for c in CATEGORIES:
        a, z = values("fp32", "categories", c), values("bf16", "categories", c)
        lines.append(f"| {c} | {' | '.join(cell(a, z))} | {100 * med(z) / med(totals['bf16']):.0f}% |")
    walls = {p: [r[p]["wall_ms"] for r in rounds] for p in ("fp32", "bf16")}
    lines += [
        f"| **profiled step** | {' | '.join(cell(totals['fp32'], totals['bf16']))} | 100% |",
        f"| step without the profiler | {' | '.join(cell(walls['fp32'], walls['bf16']))} | |",
        "",
        "The convolution backward by layer (shapes of the output gradient x input x weight), largest bf16 time first:",
        "",
        "| shapes | fp32 ms/step | bf16 ms/step | bf16 gain |",
        "|---|---|---|---|",
    ]
    shapes = [
        k
        for k in rounds[0]["bf16"]["conv_backward"]
        if all(k in r[p]["conv_backward"] for r in rounds for p in ("fp32", "bf16"))
    ]
    for k in sorted(shapes, key=lambda k: -med(values("bf16", "conv_backward", k)))[:8]:
        lines.append(
            f"| {k} | {' | '.join(cell(values('fp32', 'conv_backward', k), values('bf16', 'conv_backward', k)))} |"
        )
    return lines


def measure(overrides: "list[str]", progress: Callable[[str], None], rounds: int = 3) -> dict:
    """:func:`step_breakdown` of ``overrides`` in fp32 and in bf16, each in a fresh process, ``rounds`` times in turn
    (a busy machine slows both alike), with the 1-minute load average before and after (``load``).

    Returns:
        ``{"rounds": [{"fp32": ..., "bf16": ...}, ...], "load": [before, after]}``.
    """
    import os

    from harness.training.loop import in_fresh_process

    before, done = os.getloadavg()[0], []
    for r in range(rounds):
        progress(f"round {r + 1}/{rounds}: profiling one step of the fast setting in fp32 and bf16 (one thread)")
        done.append(
            {name: in_fresh_process(step_breakdown, overrides, p) for name, p in (("fp32", "no"), ("bf16", "bf16"))}
        )
    return {"rounds": done, "load": [before, os.getloadavg()[0]]}


def section(s: dict) -> "list[str]":
    """The Markdown section of a bench summary ``s`` holding ``breakdown`` (:func:`measure`) and ``matmul``
    (:func:`harness.upstream.bench.matmul_rates`)."""
    load = s["breakdown"].get("load")
    return [
        "",
        "## Where the step's time goes",
        "",
        "The harness's own training step of the bench's model (timm `resnet18` + low-rank HET head, R = 6, 100 MC "
        "samples; 32 px, batch 128, channels_last, SGD), profiled in one process with one thread (`torch.profiler`, "
        "each operator's own time), with `mixed_precision=no` and `bf16`, each in a fresh process, "
        f"{len(s['breakdown'].get('rounds') or [0])} round(s) in turn: medians, and each gain's range over the rounds"
        + (" (1-minute load {:.1f} before, {:.1f} after)".format(*load) if load else "")
        + ":",
        "",
        *breakdown_lines(s["breakdown"]),
        "",
        f"This CPU ({s['matmul']['flags']}): a 2048 x 2048 matmul runs at {s['matmul']['fp32']:.3g} GFLOP/s in "
        f"fp32 and {s['matmul']['bf16']:.3g} in bf16 ({s['matmul']['bf16'] / s['matmul']['fp32']:.2f}x).",
    ]


def write(out: Path, s: dict) -> None:
    """The file of ``harness bench upstream --breakdown-only``: :func:`section` alone (and its JSON twin)."""
    from harness.io import atomic_write_text
    from harness.provenance import markdown_header, provenance

    prov = provenance()
    lines = [markdown_header(TITLE, prov)]
    lines += section(s)[3:]
    atomic_write_text(out, "\n".join(lines) + "\n")
    atomic_write_text(out.with_suffix(".json"), json.dumps({"provenance": prov, **s}, indent=1))
