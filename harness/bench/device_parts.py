"""The measurements of ``harness bench device`` (:mod:`harness.bench.device`): the head against the naive
``[B, S, K]`` implementation, training throughput against a plain PyTorch loop, the downstream fine-tune step rate
and the shard loader's rate (the correctness checks on the device are :mod:`harness.bench.device_checks`). Each
takes its sizes from a :class:`Sizes` and runs in this process."""

from __future__ import annotations

import contextlib
import math
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from harness.bench.heads import Case, _rss_bytes, naive_log_probs
from harness.heads import HeteroscedasticHead, has_factors
from harness.heads.variants import VARIANTS

MiB = 2**20
RESERVE = {"head": 150.0, "train": 110.0}  # seconds left (of ``budget_s``) to start compiling the head, the models


@dataclass(frozen=True)
class Sizes:
    """Every size of a device check (the defaults: the GPU's, :data:`harness.bench.device.GPU`).

    Head: ``B`` rows of ``D`` features, ``K`` classes, rank ``R``, ``S`` samples, ``repeats`` timed steps; the
    big PE case ``big_K`` classes at rank ``big_R`` (ImageNet-21k). Training: timm ``backbone`` at ``image`` px,
    ``batch`` images, K classes, het at R and S; ``warmup`` steps, then ``rounds`` rounds of ``block`` steps.
    Transfer: ``ft_resolution`` px, ``ft_batch`` images a step, runs of ``ft_steps`` = (n1, n2) steps. Correctness:
    ``c_image`` px, ``c_batch`` images, ``c_steps`` steps, ``eval_batch`` images evaluated. ``backend``:
    ``torch.compile``'s; ``budget_s``: the first part's seconds (None: no limit). Loader: ``loader_workers``
    processes, ``loader_batches`` batches of ``batch`` images timed."""

    B: int = 64
    D: int = 2048
    K: int = 1000
    R: int = 15
    S: int = 1000
    big_K: int = 21843
    big_R: int = 50
    repeats: int = 5
    backbone: str = "resnet50"
    image: int = 224
    batch: int = 128
    warmup: int = 3
    block: int = 10
    rounds: int = 3
    ft_resolution: int = 128
    ft_batch: int = 64
    ft_steps: "tuple[int, int]" = (5, 25)
    c_image: int = 128
    c_batch: int = 16
    c_steps: int = 4
    eval_batch: int = 8
    backend: str = "inductor"
    budget_s: Optional[float] = 240.0
    loader_workers: int = 8
    loader_batches: int = 30


class Clock:
    """Seconds left of a time budget (None: no limit)."""

    def __init__(self, budget: Optional[float]) -> None:
        self.start, self.budget = time.perf_counter(), budget

    def left(self) -> float:
        return math.inf if self.budget is None else self.budget - (time.perf_counter() - self.start)


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _peak_start(dev: torch.device) -> int:
    """Reset the high-water mark; the bytes in use now (CUDA: allocated; CPU: resident set, Linux)."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        return torch.cuda.memory_allocated(dev)
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
        return _rss_bytes("VmRSS")
    return -1


def _peak_mib(dev: torch.device, base: int) -> Optional[float]:
    if dev.type == "cuda":
        return (torch.cuda.max_memory_allocated(dev) - base) / MiB
    return None if base < 0 else (_rss_bytes("VmHWM") - base) / MiB


def guard(fn: Callable, *args) -> dict:
    """``fn(*args)``, or ``{"error": ...}``: one failing measurement never stops the check."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - recorded in the report, the other parts still run
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}


# ------------------------------------------------------------------ head
def head_cases(s: Sizes) -> "list[dict]":
    """Every registry variant on the logits, HET-XL's pre-logits PE, and PE at ``big_K`` classes."""
    cases = [
        dict(name=f"{v.name} ({v.transfer_name})", covariance=v.name, noise_space="logits", K=s.K, R=s.R)
        for v in VARIANTS.values()
    ]
    pe = "parameter_efficient"
    cases.append(dict(name=f"{pe}, pre-logits (HET-XL)", covariance=pe, noise_space="pre_logits", K=s.K, R=s.R))
    cases.append(dict(name=f"{pe} (pe), K={s.big_K}", covariance=pe, noise_space="logits", K=s.big_K, R=s.big_R))
    return cases


def _head_impls(c: dict, s: Sizes, dev: torch.device, bf16: bool, compiled: bool) -> "tuple[dict, dict]":
    """Step functions (forward + cross-entropy + backward) of eager, compiled and naive; skipped ones' reasons."""
    torch.manual_seed(0)
    R = c["R"] if has_factors(c["covariance"]) else None
    samples = {"train_mc_samples": s.S} if VARIANTS[c["covariance"]].input_dependent else {}  # none draws none
    head = HeteroscedasticHead(s.D, c["K"], c["covariance"], num_factors=R, noise_space=c["noise_space"], **samples)
    head = head.to(dev)
    x = torch.randn(s.B, s.D, device=dev, requires_grad=True)
    y = torch.randint(0, c["K"], (s.B,), device=dev)

    def step(fn: Callable) -> Callable[[], None]:
        def run() -> None:
            with torch.autocast(dev.type, torch.bfloat16, enabled=bf16):
                out = fn(x)
            F.cross_entropy(out.float(), y).backward()
            head.zero_grad(set_to_none=True)
            x.grad = None

        return run

    impls, skipped = {"eager": step(head)}, {}
    if compiled:  # each head is a new compile of one forward: start afresh, or dynamo's recompile limit ends it
        torch.compiler.reset()
        impls["compiled"] = step(torch.compile(head, fullgraph=True, backend=s.backend))
    need = Case("hetxl" if c["noise_space"] == "pre_logits" else "het", s.B, c["K"], s.R, s.S, s.D).naive_bytes()
    room = torch.cuda.mem_get_info(dev)[0] * 0.8 if dev.type == "cuda" else 8 * 2**30
    if VARIANTS[c["covariance"]].form is None:
        skipped["naive"] = "no noise: nothing to sample"
    elif need > room:
        skipped["naive"] = f"needs about {need / 2**30:.0f} GiB"
    else:
        impls["naive"] = step(lambda x: naive_log_probs(head, x, s.S))
    return impls, skipped


def _head_row(c: dict, s: Sizes, dev: torch.device, bf16: bool, compiled: bool) -> dict:
    impls, skipped = _head_impls(c, s, dev, bf16, compiled)
    out: dict = {k: {"skipped": v} for k, v in skipped.items()}
    for name, fn in impls.items():  # warm-up (compiles), then the peak of one step
        tic = time.perf_counter()
        fn()
        _sync(dev)
        base = _peak_start(dev)
        fn()
        _sync(dev)
        out[name] = {"peak_mib": _peak_mib(dev, base), "times": [], "compile_s": time.perf_counter() - tic}
    for _ in range(s.repeats):  # round robin: a change of load hits every implementation alike
        for name, fn in impls.items():
            tic = time.perf_counter()
            fn()
            _sync(dev)
            out[name]["times"].append(time.perf_counter() - tic)
    for name in impls:
        out[name]["ms"] = 1000 * statistics.median(out[name].pop("times"))
        if name != "compiled":
            del out[name]["compile_s"]
    return out


def measure_head(s: Sizes, dev: torch.device, full: bool, clock: Clock, progress: Callable) -> "list[dict]":
    """Forward + backward (cross-entropy) of every case of :func:`head_cases` in fp32 and under bf16 autocast:
    eager (:class:`~harness.heads.HeteroscedasticHead`), compiled (``torch.compile(fullgraph=True)``; low rank in
    fp32, every case with ``full``, while :data:`RESERVE` allows) and naive
    (:func:`harness.bench.heads.naive_log_probs`, skipped where it would need over 80% of the free GPU memory).

    Returns:
        Rows ``{name, covariance, noise_space, K, R, dtype, B, D, S, eager|compiled|naive: {ms (median per step),
        peak_mib (MiB above the state before a step; None where not measurable)[, compile_s (seconds of the first
        step)]} | {skipped} | {error}}``."""
    rows = []
    for c in head_cases(s):
        for dtype in ("fp32", "bf16"):
            main = c["covariance"] == "low_rank" and dtype == "fp32"
            compiled = (full or main) and clock.left() > RESERVE["head"]
            if compiled:
                progress(f"[device] head {c['name']} {dtype}: compiling (under a minute on a GPU)")
            row = {**c, "dtype": dtype, "B": s.B, "D": s.D, "S": s.S}
            row.update(guard(_head_row, c, s, dev, dtype == "bf16", compiled))
            if (full or main) and not compiled:
                row["compiled"] = {"skipped": "time budget"}
            rows.append(row)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            got = [(n, row[n]) for n in ("eager", "compiled", "naive") if n in row]
            cells = "  ".join(f"{n} {m['ms']:.1f} ms" if "ms" in m else f"{n} -" for n, m in got)
            progress(f"[device] head {c['name']} {dtype}: {row.get('error') or cells}")
    return rows


# ------------------------------------------------------------------ training throughput
def _train_step(s: Sizes, dev: torch.device, head: Optional[dict], compiled: bool, accelerator) -> Callable:
    """One training step on a fixed synthetic batch: ``head`` None is the plain loop (timm model, SGD, bf16
    autocast, loss in fp32); else the harness's model and step (:func:`harness.training.loop.accumulate_step`)."""
    import timm

    from harness.models import ModelConfig, build_model
    from harness.training.loop import accumulate_step

    torch.manual_seed(0)
    cl = torch.channels_last
    if head is None:
        model = timm.create_model(s.backbone, num_classes=s.K)
    else:
        model = build_model(ModelConfig(s.backbone, s.K, head))
    model = model.to(dev, memory_format=cl).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
    fwd = torch.compile(model, backend=s.backend) if compiled else model
    x = torch.randn(s.batch, 3, s.image, s.image, device=dev).contiguous(memory_format=cl)
    y = torch.randint(0, s.K, (s.batch,), device=dev)
    if head is not None:
        opt = accelerator.prepare(opt)
        return lambda: accumulate_step(accelerator, model, opt, lambda: fwd(x), lambda out: F.cross_entropy(out, y))

    def plain() -> None:
        with torch.autocast(dev.type, torch.bfloat16):
            out = fwd(x)
        F.cross_entropy(out.float(), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return plain


def _setting(s: Sizes, dev: torch.device, head: Optional[dict], compiled: bool, acc, row: dict) -> Optional[Callable]:
    """Build one setting's step and run its warm-up steps (compiling, when compiled): ``row`` gets ``warmup_s``
    (seconds) and ``peak_mib`` (MiB above the state before), or ``error``; the step, or None."""

    def build() -> dict:
        tic = time.perf_counter()
        fn = _train_step(s, dev, head, compiled, acc)
        base = _peak_start(dev)
        for _ in range(s.warmup):
            fn()
        _sync(dev)
        return {"warmup_s": time.perf_counter() - tic, "peak_mib": _peak_mib(dev, base), "images_per_s": [], "fn": fn}

    got = guard(build)
    fn = got.pop("fn", None)
    row.update(got)
    return fn


def measure_train(s: Sizes, dev: torch.device, full: bool, clock: Clock, progress: Callable, acc) -> "list[dict]":
    """Training throughput, every setting built first, then ``rounds`` rounds of ``block`` steps of each in turn.

    Settings: ``plain`` (timm model, plain loop), ``hom`` and ``het`` (the harness model and step), eager; hom and
    het compiled (and plain with ``full``) while the time left allows (:data:`RESERVE`: the first compile needs
    ``RESERVE["train"]`` seconds left, each later one half of it).

    Returns:
        Rows ``{setting, compiled, backbone, batch, image, images_per_s (one per round, images/s), median,
        warmup_s (seconds to build and warm up, compiling included), peak_mib}``, or ``{..., error}``.
    """
    het = {"covariance": "low_rank", "num_factors": s.R, "temperature": 1.5, "train_mc_samples": s.S}
    settings = {"plain": None, "hom": {"covariance": "none"}, "het": het}
    todo = [(n, False) for n in settings] + [(n, True) for n in settings if full or n != "plain"]
    rows, steps = [], {}
    for name, compiled in todo:
        row = {"setting": name, "compiled": compiled, "backbone": s.backbone, "batch": s.batch, "image": s.image}
        rows.append(row)
        first = not any(r["compiled"] and "error" not in r for r in rows[:-1])
        if compiled and clock.left() <= RESERVE["train"] / (1 if first else 2):
            row["error"] = "skipped: time budget"
            continue
        if compiled:
            progress(f"[device] train {name}: compiling (about a minute on a GPU)")
        steps[name, compiled] = _setting(s, dev, settings[name], compiled, acc, row)
        progress(
            f"[device] train {name} {'compiled' if compiled else 'eager'}: "
            + (row.get("error") or f"built and warmed up in {row['warmup_s']:.0f} s")
        )
    for r in range(s.rounds):
        for row in (x for x in rows if "images_per_s" in x):
            fn = steps[row["setting"], row["compiled"]]
            tic = time.perf_counter()
            for _ in range(s.block):
                fn()
            _sync(dev)
            row["images_per_s"].append(s.block * s.batch / (time.perf_counter() - tic))
        progress(
            f"[device] train round {r + 1}/{s.rounds}: "
            + ", ".join(
                f"{x['setting']}{' compiled' if x['compiled'] else ''} {x['images_per_s'][-1]:.1f}"
                for x in rows
                if x.get("images_per_s")
            )
            + " images/s"
        )
    for row in rows:
        if row.get("images_per_s"):
            row["median"] = statistics.median(row["images_per_s"])
    return rows


# ------------------------------------------------------------------ loader
def measure_loader(s: Sizes, dev: torch.device, pack: Optional[str], progress: Callable) -> dict:
    """The real data path feeding the device: the training split of the shard pack ``pack`` (``harness data pack``;
    for the GPU check a few thousand CIFAR-10 images, carried with the working tree), decoded and augmented as in
    training (32 px, pad-4 crop, flip) by ``loader_workers`` processes, batches of ``batch`` moved to the device
    (:func:`harness.bench.data.measure_loader`); None: the digits training split packed here, in a temporary folder.

    Returns:
        ``{pack, workers, batch, images_per_sec, ...}`` (the keys of :func:`harness.bench.data.measure_loader`).
    """
    from harness.bench.data import measure_loader as loader_rate

    with tempfile.TemporaryDirectory() as tmp:
        what = pack
        if pack is None:
            from harness.data.config import DataConfig
            from harness.data.pack import pack as write_pack
            from harness.data.sources import build_split

            split = build_split(DataConfig(source="digits"), "train")
            write_pack(split, Path(tmp) / "train", max(1, len(split) // 4), prefix="train", progress=False)
            pack, what = tmp, f"the digits training split ({len(split)} images), packed for this check"
        progress(f"[device] loader: {what}, {s.loader_workers} worker(s), batches of {s.batch}")
        out = loader_rate("shards", str(pack), s.batch, 32, 2, s.loader_batches, s.loader_workers, str(dev))
    return {"pack": what, "workers": s.loader_workers, "batch": s.batch, **out}


# ------------------------------------------------------------------ transfer
def measure_transfer(s: Sizes, dev: torch.device, finetune: Optional[Callable], progress: Callable) -> dict:
    """``harness downstream``'s fine-tune step rate on ``demo_digit`` in bf16: runs of n1 (warm-up), n1 and n2 steps,
    rate = (n2 - n1) / (t2 - t1). ``finetune(upstream_path, train, test, settings)``: the stage's fine-tune with
    ``FinetuneConfig(**settings)``, returning top-1 (passed in by the command: the library never imports a stage).

    Returns:
        ``{task, backbone, resolution, batch, seconds: {n: whole run, s}, steps_per_s, images_per_s, top1}``."""
    if finetune is None:
        return {"error": "skipped: no fine-tune function given (run it through `harness bench device`)"}
    from harness.models import ModelConfig, build_model, save_model
    from harness.tasks.demo import DEMO_TASKS, demo_split

    task = DEMO_TASKS["demo_digit"]
    train, test = demo_split(task, "train800"), demo_split(task, "test")
    res = s.ft_resolution
    cfg = {"lr": 0.01, "batch_size": s.ft_batch, "micro_batch": s.ft_batch, "resolution": (res, res)}
    cfg |= {"device": str(dev), "mixed_precision": "bf16", "channels_last": True, "eval_batch_size": 250}
    out = {"task": task.name, "backbone": s.backbone, "resolution": res, "batch": s.ft_batch, "seconds": {}}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(save_model(build_model(ModelConfig(s.backbone, 10, {"covariance": "none"})), Path(tmp) / "m.pt"))
        for i, n in enumerate((s.ft_steps[0], *s.ft_steps)):
            tic = time.perf_counter()
            out["top1"] = finetune(path, train, test, {**cfg, "steps": n})
            _sync(dev)
            if i:
                out["seconds"][str(n)] = time.perf_counter() - tic
            progress(f"[device] transfer {n} steps: {time.perf_counter() - tic:.1f} s")
    (n1, n2), t = s.ft_steps, out["seconds"]
    out["steps_per_s"] = (n2 - n1) / max(t[str(n2)] - t[str(n1)], 1e-9)
    out["images_per_s"] = out["steps_per_s"] * s.ft_batch
    return out
