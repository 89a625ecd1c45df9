"""``harness bench heads``: forward+backward time and peak memory of every head variant, eager and compiled.

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
import json
import multiprocessing as mp
import platform
import sys
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from harness.heads import MIN_SCALE, HeteroscedasticHead
from harness.heads.noise import fill_standard_normal
from harness.io import atomic_write_text
from harness.provenance import markdown_header, provenance

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

    def head_kwargs(self) -> dict:
        cov = {"hom": "none", "diagonal": "diagonal", "low_rank": "low_rank", "pe": "parameter_efficient",
               "hetxl_pe": "parameter_efficient", "hetxl_low_rank": "low_rank"}[self.variant]
        kw = dict(covariance=cov, link=self.link, train_mc_samples=self.S, eval_mc_samples=self.S)
        if cov in ("low_rank", "parameter_efficient"):
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


def _steps(case: Case, impl: str, dev: torch.device, before_src: Optional[str] = None
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
        return F.cross_entropy(logits, y) if case.link == "softmax" else F.binary_cross_entropy_with_logits(logits, t)

    def step() -> None:
        loss(naive_log_probs(head, x, case.S) if impl == "naive" else model(x)).backward()
        head.zero_grad(set_to_none=True)
        x.grad = None

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
        head(x)

    out = {"step": step, "forward": forward, "dense": dense(True), "dense_forward": dense(False), "noise": noise}
    if head.noise_space == "pre_logits":  # HET-XL: the GEMM of all samples' logits, [B·S, D] x [D, K]
        pre = torch.randn(case.B * case.S, case.D, device=dev)

        def gemm() -> None:
            with torch.no_grad():
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
        parts = ["step", "forward", "dense", "dense_forward", "noise"] + (["gemm"] if case.variant.startswith("hetxl")
                                                                          else [])
        names = {impl: parts if impl == "breakdown" else ["step"] for impl in impls}
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
        res.update({name: 1000 * statistics.median(ts) for name, ts in res.pop("times").items()})
        res["ms"] = res.pop("step")
    return out


def default_grid(quick: bool = False, main_only: bool = False) -> "list[Case]":
    """Every variant and link at S=1000 (K=1000, R=15), low rank at S=10 and 100, K=21,843 PE R=50
    (``main_only``: the S=1000, K=1000 cases and low rank at S=10, for the targets; ``quick``: a tiny grid)."""
    if quick:
        return [Case("low_rank", 8, 50, 5, 10, D=64), Case("hetxl_pe", 8, 50, 5, 100, D=64, link="sigmoid")]
    grid = [Case("low_rank", 64, 1000, 15, s) for s in ((10,) if main_only else (10, 100))]
    grid += [Case(v, 64, 1000, 15, 1000, link=link) for link in ("softmax", "sigmoid")
             for v in ("low_rank", "diagonal", "pe", "hetxl_pe")]
    if not main_only:
        grid += [Case("hom", 64, 1000, 15, 1000), Case("pe", 16, 21843, 50, 100), Case("pe", 64, 21843, 50, 1000)]
    return grid


def _impls(case: Case, compiled: bool, naive_budget_gib: float, before: bool) -> "tuple[list[str], dict]":
    impls, skipped = ["ours"], {}
    if before and case.variant != "hom" and ((case.K, case.S) == (1000, 1000) or case.D == 64):
        impls.insert(0, "before")  # the cases of the targets (and the quick grid's)
    if compiled and (case.variant, case.link, case.K, case.S) == ("low_rank", "softmax", 1000, 1000):
        impls.append("compiled")  # the main case only: compiling takes minutes per variant on a CPU
    if case.variant != "hom":
        if case.naive_bytes() > naive_budget_gib * 2**30:
            skipped["naive"] = {"skipped": f"needs about {case.naive_bytes() / 2**30:.0f} GiB"}
        else:
            impls.append("naive")
    if (case.link, case.K, case.S) == ("softmax", 1000, 1000) and case.variant in ("low_rank", "hetxl_pe") or case.D == 64:
        impls.append("breakdown")  # the main case, HET-XL's GEMM floor (and the quick grid's)
    return impls, skipped


def run(device: str = "cpu", quick: bool = False, repeats: int = 3, naive_budget_gib: float = 8.0,
        compiled: bool = True, main_only: bool = False, out: Optional[Path] = Path("results/bench/heads.md"),
        progress=print, before_src: Optional[str] = None) -> "list[dict]":
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
        ValueError: ``device`` is ``"cuda"`` but no GPU is visible, or ``before_src`` holds no harness source.
    """
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but torch sees no GPU; use --device cpu")
    if before_src is not None and not (Path(before_src) / "harness" / "heads").is_dir():
        raise ValueError(f"--before {before_src} holds no harness/heads/: give a source tree, "
                         "e.g. mkdir DIR && git archive <commit> | tar -x -C DIR")
    rows, start_load = [], os.getloadavg()
    for case in default_grid(quick, main_only):
        impls, skipped = _impls(case, compiled, naive_budget_gib, before_src is not None)
        row = {**asdict(case), **skipped, "load_before": os.getloadavg()[0]}
        row.update(_measure(case, impls, device, repeats, before_src))
        row["load_after"] = os.getloadavg()[0]
        rows.append(row)
        progress(f"{case.variant:9s} {case.link:7s} B={case.B:<3d} K={case.K:<6d} S={case.S:<5d} " + "  ".join(
            f"{impl} {row[impl]['ms']:.0f} ms {row[impl]['peak_mib']:.0f} MiB" for impl in impls if impl != "breakdown")
            + f"  (load {row['load_before']:.1f})")
    if out is not None:
        write_report(rows, device, Path(out), (start_load, os.getloadavg()))
    return rows


# ---------------------------------------------------------------------------------------------- report
def _cpu() -> str:
    """CPU model and vector capability as torch sees it (lscpu's model name on Linux)."""
    name = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} logical CPUs, torch CPU capability {torch.backends.cpu.get_cpu_capability()}"


def _f(m: Optional[dict], key: str = "ms") -> str:
    if m is None:
        return "-"
    return m["skipped"] if "skipped" in m else f"{m[key]:.1f}"


def _ratio(row: dict, impl: str) -> "tuple[Optional[float], Optional[float]]":
    """(speed-up over naive, memory ratio to naive) of an implementation, None where not measured."""
    naive, m = row.get("naive", {}), row.get(impl)
    if m is None or "ms" not in naive:
        return None, None
    return naive["ms"] / m["ms"], m["peak_mib"] / max(naive["peak_mib"], 1e-9)


def _table(columns: "list[str]", body: "list[str]", title: Optional[str] = None) -> "list[str]":
    """A Markdown table (under a ``## title`` when given): its header, separator and ``body`` rows."""
    head = ["", f"## {title}", ""] if title else []
    return head + ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)] + body


def _main_table(rows: "list[dict]") -> "list[str]":
    lines = []
    for r in rows:
        (se, me), (sc, mc) = _ratio(r, "ours"), _ratio(r, "compiled")
        mem = min(v for v in (me, mc, float("inf")) if v is not None)
        lines.append(
            f"| {r['variant']} | {r['B']} | {r['D']} | {r['K']} | {r['R']} | {r['S']} | {r['link']} | "
            f"{_f(r.get('ours'))} | "
            f"{_f(r.get('compiled'))} | {_f(r.get('naive'))} | {'-' if se is None else f'{se:.2f}x'} | "
            f"{'-' if sc is None else f'{sc:.2f}x'} | {_f(r.get('ours'), 'peak_mib')} | "
            f"{_f(r.get('compiled'), 'peak_mib')} | {_f(r.get('naive'), 'peak_mib')} | "
            f"{'-' if mem == float('inf') else f'{mem:.3f}'} | {r['load_before']:.1f}-{r['load_after']:.1f} |")
    return _table(["variant", "B", "D", "K", "R", "S", "link", "eager ms", "compiled ms", "naive ms", "speed-up eager",
                   "speed-up compiled", "eager MiB", "compiled MiB", "naive MiB", "memory ratio", "load"], lines)


def _breakdown(rows: "list[dict]") -> "list[str]":
    """Per case with a breakdown: where its eager step's time goes and the floors it implies."""
    return [line for row in rows if "breakdown" in row for line in _breakdown_table(row)]


_FLAT = "dense + two draws + three GEMMs (logits, their recomputation, one contraction of the gradient with the noise)"
_KEPT = "dense + one draw + two GEMMs"


def _xl_floor(b: dict, flat: bool) -> float:
    """HET-XL's floor in ms from a breakdown ``b`` (dense, noise, gemm): :data:`_FLAT` or :data:`_KEPT`."""
    return b["dense"] + (2 * b["noise"] + 3 * b["gemm"] if flat else b["noise"] + 2 * b["gemm"])


def _breakdown_table(row: dict) -> "list[str]":
    b, naive = row["breakdown"], row.get("naive", {}).get("ms")
    backward = b["ms"] - b["forward"]
    dense_bwd = b["dense"] - b["dense_forward"]
    items = [
        ("dense layers, forward + backward (μ, d, factors)", b["dense"]),
        ("noise, one draw of the B·S·W normals (eager generator)", b["noise"]),
        ("per-sample softmax work, forward (forward − dense forward − one draw)",
         b["forward"] - b["dense_forward"] - b["noise"]),
        ("per-sample softmax work, backward (backward − dense backward − the redraw)",
         backward - dense_bwd - b["noise"]),
        ("whole forward", b["forward"]),
        ("whole backward", backward),
        ("whole step (eager)", b["ms"]),
        ("floor drawing the noise once: dense + one draw", b["dense"] + b["noise"]),
        ("floor redrawing it in the backward pass (eager): dense + two draws", b["dense"] + 2 * b["noise"]),
    ]
    if "gemm" in b:
        items += [("one GEMM [B·S, D] x [D, K]: the logits of every sample", b["gemm"]),
                  ("naive's three GEMMs (logits; gradients to the noise and to the projection)", 3 * b["gemm"]),
                  ("floor of an exact head with memory flat in S: " + _FLAT, _xl_floor(b, flat=True)),
                  ("floor keeping every sample's logits and noise (memory grows with S, like naive's): " + _KEPT,
                   _xl_floor(b, flat=False))]
    if naive:
        items.append(("the 2x target: naive / 2", naive / 2))
    case = f"{row['variant']} {row['link']}, B={row['B']} D={row['D']} K={row['K']} R={row['R']} S={row['S']}"
    lines = _table(["part", "ms"], [f"| {name} | {ms:.1f} |" for name, ms in items],
                   f"Where the time goes ({case}, eager, one process, medians)")
    if "gemm" in b and naive:
        flat, kept = _xl_floor(b, flat=True), _xl_floor(b, flat=False)
        lines += ["", f"HET-XL projects every sample's D-dimensional noise onto the K classes, a GEMM of B·S·D·K "
                      f"multiply-adds that the naive implementation does three times. An exact head needs the logits "
                      f"of every sample in the backward pass, so with memory flat in S it does the GEMM at least three "
                      f"times too: its speed-up over naive is at most {naive / flat:.2f}x here "
                      f"(naive / floor), and {naive / kept:.2f}x if it kept every sample's logits and noise (memory "
                      "growing with S, like naive's). A 2x speed-up for "
                      "HET-XL needs faster GEMMs (bf16 on a CPU with native bf16, or a GPU), not a better loop."]
    return lines


def _compiled(rows: "list[dict]") -> "list[str]":
    rs = [r for r in rows if "compiled" in r]
    if not rs:
        return []
    lines = []
    for r in rs:
        e, c = r["ours"], r["compiled"]
        lines.append(f"| {r['variant']} | {r['link']} | {r['S']} | {e['ms']:.1f} | {c['ms']:.1f} | "
                     f"{c['ms'] / e['ms']:.2f} | "
                     f"{c['compile_s']:.0f} | {e['peak_mib']:.1f} | {c['peak_mib']:.1f} |")
    return _table(["variant", "link", "S", "eager ms", "compiled ms", "compiled / eager", "compile s", "eager MiB",
                   "compiled MiB"], lines,
                  "Compiled vs eager (`torch.compile(head, fullgraph=True)`, inductor; measured side by side)")


def _before_after(rows: "list[dict]") -> "list[str]":
    rs = [r for r in rows if "before" in r]
    if not rs:
        return []
    lines = []
    for r in rs:
        (sb, _), (sa, _) = _ratio(r, "before"), _ratio(r, "ours")
        lines.append(f"| {r['variant']} | {r['link']} | {r['S']} | {_f(r['before'])} | {_f(r['ours'])} | "
                     f"{_f(r.get('naive'))} | {r['ours']['ms'] / r['before']['ms']:.2f} | "
                     f"{'-' if sb is None else f'{sb:.2f}x'} | {'-' if sa is None else f'{sa:.2f}x'} | "
                     f"{_f(r['before'], 'peak_mib')} | {_f(r['ours'], 'peak_mib')} | "
                     f"{_f(r.get('naive'), 'peak_mib')} |")
    return _table(["variant", "link", "S", "before ms", "after ms", "naive ms", "after / before", "speed-up before",
                   "speed-up after", "before MiB", "after MiB", "naive MiB"], lines,
                  "Before / after (the head of `--before`, this head and naive, side by side in one run)")


def _targets(rows: "list[dict]", cpu: str) -> "list[str]":
    """Verdicts on issue 32's targets (>= 2x naive at S=1000 for every variant, memory <= 0.2 of naive, flat in S)."""
    out = ["", f"## Targets (on {cpu})", ""]
    for r in rows:
        if r["S"] != 1000 or r["K"] != 1000 or r["variant"] == "hom":
            continue
        (se, me), (sc, mc) = _ratio(r, "ours"), _ratio(r, "compiled")
        if se is None:
            continue
        best, least = max(v for v in (se, sc) if v is not None), min(v for v in (me, mc) if v is not None)
        xl = next((x["breakdown"] for x in rows if x["variant"] == r["variant"] and "gemm" in x.get("breakdown", {})),
                  None)
        bound = "" if xl is None else (f"; at most {r['naive']['ms'] / _xl_floor(xl, flat=True):.2f}x for any exact "
                                       "head with memory flat in S, from its GEMMs (see its breakdown)")
        out.append(f"- {r['variant']} {r['link']}: speed-up {se:.2f}x eager"
                   + ("" if sc is None else f", {sc:.2f}x compiled")
                   + f" (target >= 2x: **{'met' if best >= 2 else 'not met'}**{bound}); memory {me:.3f} of naive eager"
                   + ("" if mc is None else f", {mc:.3f} compiled")
                   + f" (target <= 0.2: **{'met' if least <= 0.2 else 'not met'}**).")
    small = next((r for r in rows if (r["variant"], r["S"], r["K"]) == ("low_rank", 10, 1000)), None)
    big = next((r for r in rows if (r["variant"], r["link"], r["S"], r["K"]) == ("low_rank", "softmax", 1000, 1000)),
               None)
    if small and big:
        flat = big["ours"]["peak_mib"] / max(small["ours"]["peak_mib"], 1e-9)
        out.append(f"- Peak memory (eager) at S=1000 vs S=10: {flat:.2f}x (target <= 1.5x): "
                   f"**{'met' if flat <= 1.5 else 'not met'}**.")
    return out


def write_report(rows: "list[dict]", device: str, out: Path, loads: tuple) -> None:
    """Markdown tables + JSON of the measured rows, with command, machine, CPU, load and versions."""
    prov, cpu = provenance(), _cpu()
    (l1, l5, l15), (e1, e5, e15) = loads
    lines = [markdown_header(f"HET head benchmark ({device})", prov),
             f"- CPU: {cpu}",
             f"- Load average (1, 5, 15 min) at the start {l1:.1f}, {l5:.1f}, {l15:.1f}; "
             f"at the end {e1:.1f}, {e5:.1f}, {e15:.1f} "
             "(the table gives the 1-min load before and after each case). On a loaded machine the absolute times "
             "grow; the ratios, measured side by side round robin, are what to read.", "",
             "Forward+backward of the head alone (cross-entropy, or binary cross-entropy for the sigmoid link, on its "
             "logits), median of the timed steps; peak memory above the state before the steps (inputs and "
             "parameters excluded, noise, activations and gradients included). *naive* materialises all `[B, S, K]` "
             "samples (the reference algorithm); *eager* (key `ours` in the JSON) is `HeteroscedasticHead` "
             "(chunked over S, recomputed in the backward pass); *compiled* is "
             "`torch.compile(head, fullgraph=True)` (the chunk loop a "
             "`torch.while_loop`, the noise counter-based and fused into the kernels).", ""]
    lines += _main_table(rows) + _before_after(rows) + _breakdown(rows) + _compiled(rows) + _targets(rows, cpu)
    lines.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(lines))
    atomic_write_text(out.with_suffix(".json"), json.dumps({"provenance": prov, "cpu": cpu, "loads": loads,
                                                            "device": device, "rows": rows}, indent=1))
