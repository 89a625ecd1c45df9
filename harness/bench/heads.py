"""``harness bench heads``: forward+backward time and peak memory of every head variant, eager and compiled, and
the time of the eager head's seeded evaluation (forward in ``eval()`` mode, no gradients).

Each implementation of a case runs in its own process (so one's freed memory cannot hide another's
peak), and the processes of a case take turns step by step (round robin), so a change of load on a
shared machine hits them alike and the ratios stay fair. Peak memory is the high-water mark of the
process's resident set during its steps minus the resident set just before them (Linux
``/proc/self/clear_refs``) on CPU; on GPU it is ``torch.cuda.max_memory_allocated`` over the same
steps. Both cover the head's input, noise, activations and parameter gradients; the parameters exist
before the baseline. A compiled head is compiled by a first step that is neither timed nor counted.

The comparison implementation, :func:`naive_log_probs`, is the reference algorithm written
straightforwardly: it materialises all ``[B, S, K]`` logit samples at once, averages the
softmax (or sigmoid) over S and clips (edward2 ``MCSoftmaxDenseFA`` / ``MCSigmoidDenseFA``,
``edward2/tensorflow/layers/heteroscedastic.py``).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from harness.bench.heads_report import TITLE, write_report
from harness.heads import MIN_SCALE, HeteroscedasticHead, has_factors
from harness.heads.noise import fill_standard_normal
from harness.heads.variants import VARIANTS
from harness.provenance import check_replaceable

MiB = 2**20


@dataclass(frozen=True)
class Case:
    """One grid point: head variant, link and sizes."""

    variant: str  # hom | diagonal | low_rank | pe | hetxl_pe | hetxl_low_rank
    B: int
    K: int
    R: int
    S: int
    D: int = 2048
    link: str = "softmax"
    precision: str = "fp32"  # fp32 | bf16 (every implementation of the case under torch.autocast in bf16)

    def head_kwargs(self) -> dict:
        cov = {
            "hom": "none",
            "diagonal": "diagonal",
            "low_rank": "low_rank",
            "pe": "parameter_efficient",
            "hetxl_pe": "parameter_efficient",
            "hetxl_low_rank": "low_rank",
        }[self.variant]
        kw = dict(covariance=cov, link=self.link)
        if VARIANTS[cov].input_dependent:  # the sample counts of a head that draws noise (none draws none)
            kw.update(train_mc_samples=self.S, eval_mc_samples=self.S)
        if has_factors(cov):
            kw["num_factors"] = self.R
        if self.variant.startswith("hetxl"):
            kw["noise_space"] = "pre_logits"
        return kw

    def naive_bytes(self) -> int:
        """Rough peak of the naive implementation: ~6 live ``[B, S, max(K, W)]`` float32 tensors."""
        width = self.K + (self.D if self.variant.startswith("hetxl") else 0)
        return 6 * 4 * self.B * self.S * width


def naive_log_probs(head: HeteroscedasticHead, x: torch.Tensor, num_samples: int, eps: float = 1e-7) -> torch.Tensor:
    """Reference algorithm with all ``[B, S, K]`` samples in memory.

    Args:
        head: a head whose parameters and link are used (any covariance but ``none``).
        x: ``[B, D]`` features.
    Returns:
        ``[B, K]``: softmax link, log(clip(mean_s softmax(z_s))); sigmoid link, the logit of
        clip(mean_s sigmoid(z_s)).
    """
    b, s = x.shape[0], num_samples
    d = F.softplus(head.diag(x)) + MIN_SCALE
    w = head.noise_width
    noise = d.unsqueeze(1) * torch.randn(b, s, w, device=x.device)
    if head.covariance_type == "low_rank":
        v = head.scale(x).view(b, w, head.num_factors)
        noise = noise + torch.einsum("bwr,bsr->bsw", v, torch.randn(b, s, head.num_factors, device=x.device))
    elif head.covariance_type == "parameter_efficient":
        eps_r = torch.randn(b, s, head.num_factors, device=x.device)
        noise = noise + head.scale_het(x).unsqueeze(1) * head.scale_hom(eps_r)
    if head.noise_space == "pre_logits":
        logits = head.loc(x.unsqueeze(1) + noise)
    else:
        logits = head.loc(x).unsqueeze(1) + noise
    if head.link == "softmax":
        return torch.log(torch.softmax(logits / head.temperature, dim=-1).mean(dim=1).clamp(min=eps, max=1.0))
    p = torch.sigmoid(logits / head.temperature).mean(dim=1).clamp(min=eps, max=1.0 - eps)
    return torch.log(p) - torch.log1p(-p)


def _rss_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _head_class(before_src: Optional[str]) -> type:
    """``HeteroscedasticHead``, or the one of the harness source tree ``before_src`` (e.g. ``git archive`` of an
    earlier commit): this process's harness modules are dropped from ``sys.modules`` and the tree goes first on
    ``sys.path``, so ``harness.heads`` is imported again from it. Only ever called in a bench worker process."""
    if before_src is None:
        return HeteroscedasticHead
    for name in [m for m in sys.modules if m == "harness" or m.startswith("harness.")]:
        del sys.modules[name]
    sys.path.insert(0, str(before_src))
    return importlib.import_module("harness.heads").HeteroscedasticHead


def _steps(
    case: Case, impl: str, dev: torch.device, before_src: Optional[str] = None
) -> "dict[str, Callable[[], None]]":
    """The timed functions of one implementation (``impl``: ours (eager) | before | compiled | naive | breakdown)."""
    cls = _head_class(before_src if impl == "before" else None)
    torch.manual_seed(0)
    head = cls(case.D, case.K, **case.head_kwargs()).to(dev).train()
    x = torch.randn(case.B, case.D, device=dev, requires_grad=True)
    y = torch.randint(0, case.K, (case.B,), device=dev)
    t = (torch.rand(case.B, case.K, device=dev) < 0.01).float()
    model = torch.compile(head, fullgraph=True) if impl == "compiled" else head

    def loss(logits):
        logits = logits.float()
        return F.cross_entropy(logits, y) if case.link == "softmax" else F.binary_cross_entropy_with_logits(logits, t)

    def autocast():  # the case's precision, for every implementation alike
        return torch.autocast(dev.type, dtype=torch.bfloat16, enabled=case.precision == "bf16")

    def step() -> None:
        with autocast():
            out = naive_log_probs(head, x, case.S) if impl == "naive" else model(x)
        loss(out).backward()
        head.zero_grad(set_to_none=True)
        x.grad = None

    def evaluate() -> None:  # a seeded evaluation (the default eval_seed), no gradients
        head.eval()
        try:
            with torch.no_grad(), autocast():
                head(x)
        finally:
            head.train()

    if impl in ("ours", "before"):
        return {"step": step, "eval": evaluate}
    if impl != "breakdown":
        return {"step": step}

    def dense(backward: bool) -> Callable[[], None]:
        def run() -> None:
            p = head.latent_parameters(x)  # the dense layers: mu, d and the factors
            if backward:
                sum(v.sum() for v in p.values() if v.requires_grad).backward()
                head.zero_grad(set_to_none=True)
                x.grad = None

        return run

    def noise() -> None:  # one draw of the B x S x W normals, the way the eager head draws them
        gens = [torch.Generator(device=dev).manual_seed(i) for i in (1, 2)]
        fill_standard_normal(torch.empty(case.B, case.S, head.noise_width, device=dev), gens)

    def forward() -> None:
        with autocast():
            head(x)

    out = {"step": step, "forward": forward, "dense": dense(True), "dense_forward": dense(False), "noise": noise}
    if head.noise_space == "pre_logits":  # HET-XL: the GEMM of all samples' logits, [B·S, D] x [D, K]
        pre = torch.randn(case.B * case.S, case.D, device=dev)

        def gemm() -> None:
            with torch.no_grad(), autocast():
                head.loc(pre)

        out["gemm"] = gemm
    return out


def _worker(case: Case, impl: str, device: str, conn, before_src: Optional[str] = None) -> None:
    """A process holding one implementation: compiles (compiled) or warms up, then runs steps on request."""
    dev = torch.device(device)
    steps = _steps(case, impl, dev, before_src)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    if impl == "compiled":  # compile: neither timed nor counted in the peak
        steps["step"]()
        sync()
    compile_s = time.perf_counter() - t0
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        Path("/proc/self/clear_refs").write_text("5")  # reset the high-water mark
        base = _rss_bytes("VmRSS")
    for fn in steps.values():  # warm-up; its peak counts too
        fn()
    sync()
    peak = (torch.cuda.max_memory_allocated() if dev.type == "cuda" else _rss_bytes("VmHWM")) - base
    conn.send({"peak_mib": peak / MiB, "compile_s": compile_s if impl == "compiled" else None})
    while (name := conn.recv()) is not None:
        t0 = time.perf_counter()
        steps[name]()
        sync()
        conn.send(time.perf_counter() - t0)


def _measure(case: Case, impls: "list[str]", device: str, repeats: int, before_src: Optional[str] = None) -> dict:
    """Time the implementations of one case round robin, each in its own process; medians in ms."""
    ctx = mp.get_context("spawn")
    procs, out = {}, {}
    try:
        for impl in impls:  # one at a time, so compiling or warming up one does not slow another's steps
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(case, impl, device, child, before_src), daemon=True)
            proc.start()
            procs[impl] = (proc, parent)
            out[impl] = {**parent.recv(), "times": {}}
        parts = ["step", "forward", "dense", "dense_forward", "noise"] + (
            ["gemm"] if case.variant.startswith("hetxl") else []
        )
        names = {impl: parts if impl == "breakdown" else list(steps_of(impl)) for impl in impls}
        for _ in range(repeats):
            for impl in impls:
                for name in names[impl]:
                    procs[impl][1].send(name)
                    out[impl]["times"].setdefault(name, []).append(procs[impl][1].recv())
    finally:
        for proc, conn in procs.values():
            try:
                conn.send(None)
            except OSError:
                pass
            proc.join(timeout=60)
            if proc.is_alive():
                proc.kill()
    for res in out.values():
        res["rounds_ms"] = [1000 * t for t in res["times"]["step"]]  # one step per round, the rounds interleaved
        res.update({name: 1000 * statistics.median(ts) for name, ts in res.pop("times").items()})
        res["ms"] = res.pop("step")
        if "eval" in res:
            res["eval_ms"] = res.pop("eval")
    return out


def steps_of(impl: str) -> "tuple[str, ...]":
    """The timed functions of an implementation besides the breakdown's: the training step (forward + backward, in
    ``train()`` mode), and for the eager heads (ours, before) a seeded evaluation (``eval()`` mode, no gradients)."""
    return ("step", "eval") if impl in ("ours", "before") else ("step",)


def default_grid(quick: bool = False, main_only: bool = False) -> "list[Case]":
    """Every variant and link at S=1000 (K=1000, R=15), in fp32 and under bf16 autocast, low rank at S=10 and 100,
    K=21,843 PE R=50 (``main_only``: the S=1000, K=1000 cases and low rank at S=10, for the targets; ``quick``: a
    tiny grid).

    Raises:
        ValueError: both ``quick`` and ``main_only``: two different grids.
    """
    if quick and main_only:
        raise ValueError(
            "--quick and --main-only ask for two different grids (the tiny smoke-test grid, the targets' cases): "
            "give one of them"
        )
    if quick:
        return [
            Case("low_rank", 8, 50, 5, 10, D=64),
            Case("hetxl_pe", 8, 50, 5, 100, D=64, link="sigmoid"),
            Case("hetxl_pe", 8, 50, 5, 100, D=64, link="sigmoid", precision="bf16"),
        ]
    grid = [Case("low_rank", 64, 1000, 15, s) for s in ((10,) if main_only else (10, 100))]
    grid += [
        Case(v, 64, 1000, 15, 1000, link=link, precision=precision)
        for precision in ("fp32", "bf16")
        for link in ("softmax", "sigmoid")
        for v in ("low_rank", "diagonal", "pe", "hetxl_pe")
    ]
    if not main_only:
        grid += [Case("hom", 64, 1000, 15, 1000), Case("pe", 16, 21843, 50, 100), Case("pe", 64, 21843, 50, 1000)]
    return grid


def _impls(case: Case, compiled: bool, naive_budget_gib: float, before: bool) -> "tuple[list[str], dict]":
    impls, skipped = ["ours"], {}
    fp32 = case.precision == "fp32"
    if before and fp32 and case.variant != "hom" and ((case.K, case.S) == (1000, 1000) or case.D == 64):
        impls.insert(0, "before")  # the cases of the targets (and the quick grid's)
    if compiled and fp32 and (case.variant, case.link, case.K, case.S) == ("low_rank", "softmax", 1000, 1000):
        impls.append("compiled")  # the main case only: compiling takes minutes per variant on a CPU
    if case.variant != "hom":
        if case.naive_bytes() > naive_budget_gib * 2**30:
            need = case.naive_bytes() / 2**30
            skipped["naive"] = {"skipped": f"needs about {need:.3g} GiB, over the {naive_budget_gib:g} GiB budget"}
        else:
            impls.append("naive")
    target = (case.link, case.K, case.S) == ("softmax", 1000, 1000) and case.variant in ("low_rank", "hetxl_pe")
    if target or (case.D == 64 and fp32):
        impls.append("breakdown")  # the main case, HET-XL's GEMM floor (and the quick grid's)
    return impls, skipped


def run(
    device: str = "cpu",
    quick: bool = False,
    repeats: int = 3,
    naive_budget_gib: float = 8.0,
    compiled: bool = True,
    main_only: bool = False,
    out: Optional[Path] = Path("results/bench/heads.md"),
    progress=print,
    before_src: Optional[str] = None,
) -> "list[dict]":
    """Measure the grid and write the Markdown table (plus a JSON twin) to ``out``.

    Args:
        device: ``"cpu"`` or ``"cuda"``.
        quick: a tiny grid (for tests).
        repeats: timed steps per measurement (the median is reported).
        naive_budget_gib: skip the naive implementation where its estimated peak is larger.
        main_only: only the cases of the targets (see :func:`default_grid`).
        before_src: a harness source tree of an earlier version (``git archive <commit> | tar -x -C DIR``): its
            head is measured too ("before"), side by side, at S=1000 and K=1000 (and in the quick grid).
        compiled: also measure ``torch.compile(head, fullgraph=True)`` (the main case, low rank at S=1000).
        out: Markdown path (None: do not write).

    Raises:
        ValueError: both ``quick`` and ``main_only``; ``device`` is ``"cuda"`` but no GPU is visible, ``before_src`` holds no harness source, or
            ``out`` or its JSON twin is a file this bench did not write (:func:`harness.provenance.check_replaceable`); all
            before any work.
    """
    grid = default_grid(quick, main_only)
    if out is not None:
        check_replaceable(out, TITLE, "rows", "harness bench heads")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no GPU; use --device cpu")
    if before_src is not None and not (Path(before_src) / "harness" / "heads").is_dir():
        raise ValueError(
            f"--before {before_src} holds no harness/heads/: give a source tree, "
            "e.g. mkdir DIR && git archive <commit> | tar -x -C DIR"
        )
    rows, start_load = [], os.getloadavg()
    for case in grid:
        impls, skipped = _impls(case, compiled, naive_budget_gib, before_src is not None)
        row = {**asdict(case), **skipped, "load_before": os.getloadavg()[0]}
        row.update(_measure(case, impls, device, repeats, before_src))
        row["load_after"] = os.getloadavg()[0]
        rows.append(row)
        progress(
            f"{case.variant:9s} {case.link:7s} {case.precision} B={case.B:<3d} K={case.K:<6d} S={case.S:<5d} "
            + "  ".join(
                f"{impl} {row[impl]['ms']:.0f} ms {row[impl]['peak_mib']:.0f} MiB"
                + (f" (eval {row[impl]['eval_ms']:.0f} ms)" if "eval_ms" in row[impl] else "")
                for impl in impls
                if impl != "breakdown"
            )
            + f"  (load {row['load_before']:.1f})"
        )
    if out is not None:
        write_report(rows, device, Path(out), (start_load, os.getloadavg()))
    return rows
