"""``harness bench device``: one check of the harness on the accelerator torch sees (CUDA; else the CPU, with a note),
each figure measured side by side with its baseline in this one process, written to ``device.md`` + ``device.json``.

Parts, in the order they run, with the estimated seconds on one H100 at :data:`GPU` sizes (the first part, all
four: at most 4 minutes, plus ~10 s of start-up; :mod:`harness.bench.device_parts` measures, the correctness part
:mod:`harness.bench.device_checks`):

- ``correctness`` (~15 s): a few seeded training steps of a het ResNet-50 twice under
  ``torch.use_deterministic_algorithms(True)`` (``CUBLAS_WORKSPACE_CONFIG=:4096:8`` on CUDA) give identical losses,
  and within ``NONDET_RTOL`` without it; a checkpoint saved and resumed continues identically; evaluation on the
  device agrees with the CPU's within the Monte Carlo tolerance ``MC_Z`` σ·sqrt(2/S) (+ ``FLOAT_ATOL``).
- ``transfer`` (~20 s): the ``harness downstream`` fine-tune step rate on ``demo_digit`` in bf16 (the step rate is
  the difference of two runs of different lengths, so loading and evaluation cancel).
- ``head`` (~60 s): forward + backward of every variant of :data:`harness.heads.variants.VARIANTS`, HET-XL's
  pre-logits PE and the 21,843-class PE case at B = 64, D = 2048, K = 1000, R = 15, S = 1000, against the naive
  ``[B, S, K]`` implementation (:func:`harness.bench.heads.naive_log_probs`), fp32 and bf16 autocast: time, peak
  memory, speed-up; ``torch.compile`` for low rank in fp32 (~40 s of compiling).
- ``train`` (~110 s): images/s of the harness training step (:func:`harness.training.loop.accumulate_step`, the
  step of both stages) for a hom and a het (low rank, R = 15, S = 1000, τ = 1.5: the paper's ImageNet ResNet-50)
  ResNet-50 at 224 px, batch 128, synthetic data, bf16, channels_last, eager and compiled (~90 s of compiling,
  the backbone's kernels shared through inductor's cache), against a plain PyTorch loop (timm ``resnet50``, SGD).
- ``loader`` (~10 s): images/s of the real data path, a shard pack (``--pack``: a few thousand CIFAR-10 images
  packed by ``harness data pack`` and carried with the working tree) decoded and augmented as in training by
  ``loader_workers`` processes and moved to the device, beside the het training step's images/s.

A compile that the time left would not fit is skipped and says so (``RESERVE``). ``--full`` (no time limit; ~5
minutes more) compiles every head case in both precisions and the plain loop. ``--dry-run`` runs everything on the
CPU at :data:`DRY` sizes in seconds (``torch.compile`` with the ``eager`` backend: dynamo without code generation).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

import torch

from harness.bench.device_checks import FLOAT_ATOL, MC_Z, NONDET_RTOL, measure_correctness
from harness.bench.device_parts import (
    Clock,
    Sizes,
    guard,
    measure_head,
    measure_loader,
    measure_train,
    measure_transfer,
)
from harness.io import atomic_write_text, json_dumps
from harness.provenance import check_replaceable, machine_load, markdown_header, provenance

#: the parts, in the order they run
PARTS = ("correctness", "transfer", "head", "train", "loader")
#: the title of ``device.md`` (with the device in brackets)
TITLE = "Device check"
#: the sizes on a GPU (the defaults of :class:`~harness.bench.device_parts.Sizes`)
GPU = Sizes()
#: the sizes of ``--dry-run``: the CPU in seconds (timm's ``test_resnet``, 32 px; the compiler's ``eager`` backend)
DRY = Sizes(2, 16, 10, 3, 4, 50, 5, 2, "test_resnet", 32, 2, 1, 2, 1, 16, 8, (1, 3), 32, 2, 4, 2, "eager", None, 0, 2)


def pick_device(dry_run: bool, device: str = "auto") -> "tuple[torch.device, str]":
    """The device and a note: ``auto`` is CUDA where torch sees a GPU (CPU for a dry run).

    Raises:
        ValueError: ``cuda`` asked for and no GPU is visible; an unknown device."""
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}: use auto, cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda but torch sees no GPU (torch.cuda.is_available() is False); use --device cpu")
    dry = "dry run at tiny sizes: the figures check the code, not the device; " if dry_run else ""
    if device == "cuda" or (device == "auto" and not dry_run and torch.cuda.is_available()):
        return torch.device("cuda"), f"{dry}GPU: {torch.cuda.get_device_name(0)}"
    if dry_run or device == "cpu":
        return torch.device("cpu"), f"{dry}the CPU"
    return torch.device("cpu"), "NOTE: torch sees no GPU, so this ran on the CPU at the GPU's sizes"


def run(
    out: Path,
    dry_run: bool = False,
    full: bool = False,
    parts: "tuple[str, ...]" = PARTS,
    device: str = "auto",
    finetune: Optional[Callable] = None,
    progress: Callable[[str], None] = print,
    pack: Optional[str] = None,
) -> dict:
    """Run the parts and write ``out/device.md`` and ``out/device.json`` (rewritten after each part, so a run cut
    short leaves what it measured).

    Args:
        out: the folder to write in (created).
        dry_run: the CPU at :data:`DRY` sizes; else :data:`GPU` sizes on the device (see :func:`pick_device`).
        full: also the optional part (every head case compiled in both precisions, the plain loop compiled).
        parts: a subset of :data:`PARTS`, run in that order.
        finetune: ``(upstream_path, train, test, settings) -> top-1`` (the downstream stage's fine-tune), for the
            ``transfer`` part.
        pack: the shard pack the ``loader`` part reads (None: the digits training split, packed for the check).

    Returns:
        The JSON written: ``{provenance, device, note, sizes, seconds, head, train, transfer, correctness}``.

    Raises:
        ValueError: an unknown part or device, ``cuda`` without a GPU, a ``pack`` that is no shard pack with a train
            split (for the loader part), a ``device.md`` or ``device.json`` in ``out`` that this check did not
            write (:func:`harness.provenance.check_replaceable`); all before any work. A part that fails does not raise: its
            error is written in its place (:func:`failed_parts` lists them).
    """
    from harness.training.loop import PrecisionHeld, in_fresh_process, make_accelerator

    bad = sorted(set(parts) - set(PARTS))
    if bad:
        raise ValueError(f"unknown part(s) {', '.join(bad)}: use {', '.join(PARTS)}")
    check_replaceable(Path(out) / "device.md", TITLE, "device", "harness bench device")
    if pack is not None and "loader" in parts:
        check_pack(pack)
    dev, note = pick_device(dry_run, device)
    if dev.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before cuBLAS is first used
    try:
        acc = make_accelerator("bf16", cpu=dev.type == "cpu")
    except PrecisionHeld:  # this process's accelerate holds another precision: a fresh process holds bf16
        return in_fresh_process(run, out, dry_run, full, parts, device, finetune, progress, pack)
    s, clock = DRY if dry_run else GPU, Clock(None if dry_run or full else GPU.budget_s)
    progress(f"[device] {note}; parts {', '.join(p for p in PARTS if p in parts)}{' + full' if full else ''}")
    result = {"device": str(dev), "note": note, "full": full, "sizes": asdict(s), "seconds": {}}
    result["load"] = {"start": machine_load()["load_average"]}
    jobs = {
        "correctness": lambda: measure_correctness(s, dev, acc, progress),
        "transfer": lambda: measure_transfer(s, dev, finetune, progress),
        "head": lambda: measure_head(s, dev, full, clock, progress),
        "train": lambda: measure_train(s, dev, full, clock, progress, acc),
        "loader": lambda: measure_loader(s, dev, pack, progress),
    }
    threads = torch.get_num_threads()
    try:
        if dry_run:  # tiny sizes gain nothing from threads, which spin-wait for each other on a busy machine
            torch.set_num_threads(1)
        for name in (p for p in PARTS if p in parts):
            tic = time.perf_counter()
            result[name] = guard(jobs[name])
            result["seconds"][name] = time.perf_counter() - tic
            acc.free_memory()  # the part's optimisers (and so its models) go, and CUDA's cache with them
            errors = _errors(result[name])
            done = f"FAILED ({errors[0]})" if errors else "done"
            progress(f"[device] {name} {done} in {result['seconds'][name]:.1f} s")
            write(out, result, pending=[p for p in PARTS if p in parts and p not in result])
    finally:
        torch.set_num_threads(threads)
    result["seconds"]["total"] = time.perf_counter() - clock.start
    result["load"]["end"] = machine_load()["load_average"]
    return write(out, result, pending=[])


def check_pack(pack: str) -> None:
    """Check, before any work, that ``pack`` is a shard pack with a train split (``harness data pack`` wrote it).

    Raises:
        ValueError: naming ``--pack``, what is wrong (no ``index.json``, a shard missing...) and the fix.
    """
    from harness.data.shard_index import shard_files
    from harness.folder_paths import harness_folder_kind

    kind = harness_folder_kind(pack) if Path(pack).is_dir() else None
    if kind is not None and kind.kind != "data pack split":  # audit21 A21-15: told to pack into a run folder
        raise ValueError(
            f"--pack {pack} is the folder of a harness {kind.kind} (it holds {kind.holds}), not a shard pack: give a "
            "folder harness data pack wrote (harness data pack SOURCE PACKDIR --split train, PACKDIR a new folder), "
            "or drop --pack to read the digits training split packed for the check"
        )
    try:
        shard_files(str(pack), "train")
    except (FileNotFoundError, ValueError) as e:
        raise ValueError(
            f"--pack {pack} is not a shard pack with a train split ({e}); or drop --pack to read the digits "
            "training split packed for the check"
        ) from e


def _errors(part: "dict | list | None") -> "list[str]":
    """The errors of one part's result: the part's own, or its rows' (a head case, a training setting, a failed
    correctness check); a measurement skipped on purpose (``skipped: ...``) is none."""
    rows = part if isinstance(part, list) else [part]
    found = []
    for r in rows:
        if not isinstance(r, dict):
            continue
        error = str(r.get("error") or "")
        if error and not error.startswith("skipped"):
            found.append(error)
        elif r.get("ok") is False:
            found.append(f"check {r.get('check')} failed")
    return found


def failed_parts(result: dict) -> "list[str]":
    """The parts of ``result`` (:func:`run`'s JSON) that failed, each with its first error: ``"loader (...)"``."""
    return [f"{name} ({_errors(result[name])[0]})" for name in PARTS if name in result and _errors(result[name])]


def _ms(m: Optional[dict], key: str = "ms") -> str:
    if not m:
        return "-"
    if "skipped" in m or "error" in m:
        return (m.get("skipped") or m["error"]) if key == "ms" else "-"
    return "-" if m.get(key) is None else f"{m[key]:.1f}"


def _ratio(a: Optional[float], b: Optional[float], fmt: str = "{:.2f}x") -> str:
    return "-" if not a or not b else fmt.format(a / b)


def _head_md(rows: "list[dict]") -> "list[str]":
    cols = "case | dtype | K | R | eager ms | compiled ms | naive ms | speed-up eager | speed-up compiled | "
    cols += "eager MiB | compiled MiB | naive MiB | memory eager / naive"
    lines = ["| " + cols + " |", "|" + "---|" * (cols.count("|") + 1)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['name']} | {r['dtype']} | {r['K']} | {r['R']} | {r['error']} |")
            continue
        e, c, n = (r.get(k) or {} for k in ("eager", "compiled", "naive"))
        lines.append(
            f"| {r['name']} | {r['dtype']} | {r['K']} | {r['R']} | {_ms(e)} | {_ms(c)} | {_ms(n)} | "
            f"{_ratio(n.get('ms'), e.get('ms'))} | {_ratio(n.get('ms'), c.get('ms'))} | {_ms(e, 'peak_mib')} | "
            f"{_ms(c, 'peak_mib')} | {_ms(n, 'peak_mib')} | {_ratio(e.get('peak_mib'), n.get('peak_mib'), '{:.3f}')} |"
        )
    return lines


def _train_md(rows: "list[dict]") -> "list[str]":
    lines = [
        "| setting | compiled | images/s (each round) | median images/s | set-up s (compile) | peak MiB |",
        "|---|---|---|---|---|---|",
    ]
    med = {(r["setting"], r["compiled"]): r.get("median") for r in rows}
    for r in rows:
        each = ", ".join(f"{v:.1f}" for v in r.get("images_per_s", [])) or r.get("error", "-")
        lines.append(
            f"| {r['setting']} | {'yes' if r['compiled'] else 'no'} | {each} | {_ms(r, 'median')} | "
            f"{_ms(r, 'warmup_s')} | {_ms(r, 'peak_mib')} |"
        )
    lines += ["", "| ratio | eager | compiled |", "|---|---|---|"]
    for name, a, b in (
        ("het ÷ hom (the paper's cost claim)", "het", "hom"),
        ("harness hom ÷ plain loop", "hom", "plain"),
        ("het ÷ plain loop", "het", "plain"),
    ):
        lines.append(
            f"| {name} | {_ratio(med.get((a, False)), med.get((b, False)))} | "
            f"{_ratio(med.get((a, True)), med.get((b, True)))} |"
        )
    lines.append(
        "| compiled ÷ eager: plain, hom, het | "
        + ", ".join(_ratio(med.get((n, True)), med.get((n, False))) for n in ("plain", "hom", "het"))
        + " | |"
    )
    return lines


def _loader_md(res: dict) -> "list[str]":
    """The loader part beside the training step it feeds (the het step, eager: images/s of both)."""
    r = res["loader"]
    lines = ["", "## Loader: shards decoded and augmented as in training, moved to the device", ""]
    if "error" in r:
        return lines + [r["error"]]
    het = next(
        (t.get("median") for t in res.get("train") or [] if t.get("setting") == "het" and not t["compiled"]), None
    )
    lines.append(
        f"{r['pack']}: **{r['images_per_sec']:.0f} images/s** with {r['workers']} loader worker(s), batches of "
        f"{r['batch']} ({r['images']} images in {r['seconds']:.1f} s)"
        + (
            f"; the het training step takes {het:.0f} images/s, so the loader could feed "
            f"{r['images_per_sec'] / het:.2f}x the step (above 1: the loader keeps up)."
            if het
            else "."
        )
    )
    return lines


def _other_md(res: dict) -> "list[str]":
    lines = _loader_md(res) if "loader" in res else []
    if "transfer" in res:
        t = res["transfer"]
        lines += ["", "## Transfer: `harness downstream` fine-tune step rate (bf16, channels_last)", ""]
        lines.append(
            t.get("error")
            or (
                f"{t['task']}, {t['backbone']} at {t['resolution']} px, batch {t['batch']}: **{t['steps_per_s']:.2f} "
                f"steps/s** ({t['images_per_s']:.0f} images/s), from whole runs of "
                + " and ".join(f"{n} steps in {v:.1f} s" for n, v in t["seconds"].items())
                + f" (their difference: loading and evaluation cancel); top-1 {t['top1']:.3f}."
            )
        )
    if "correctness" in res:
        lines += ["", "## Correctness on the device", ""]
        rows = res["correctness"]
        if isinstance(rows, dict):
            return lines + [rows["error"]]
        lines += ["| check | result | detail |", "|---|---|---|"]
        for r in rows:
            detail = r.get("error") or ", ".join(
                f"{k} {v:.3g}" for k, v in r.items() if k in ("max_rel_gap", "max_abs_gap", "max_z")
            )
            if "losses" in r:
                detail = (detail + "; " if detail else "") + " vs ".join(
                    "[" + ", ".join(f"{v:.6f}" for v in ls) + "]" for ls in r["losses"]
                )
            lines.append(f"| {r['check']} | {'ok' if r.get('ok') else '**failed**'} | {detail} |")
    return lines


def write(out: Path, result: dict, pending: "list[str]") -> dict:
    """Write ``device.md`` and ``device.json`` in ``out`` atomically (provenance header as the other benches)."""
    result = {"provenance": provenance(), **result}
    s, sec = result["sizes"], result["seconds"]
    lines = [
        markdown_header(f"{TITLE} ({result['device']})", result["provenance"]),
        f"- {result['note']}.",
        "- Seconds per part: "
        + ", ".join(f"{k} {v:.1f}" for k, v in sec.items())
        + (f"; **not yet run: {', '.join(pending)}** (cut short)" if pending else "")
        + ".",
        f"- Head: B={s['B']}, D={s['D']}, K={s['K']}, R={s['R']}, S={s['S']} (the big case K={s['big_K']}, "
        f"R={s['big_R']}); median of {s['repeats']} steps, round robin; peak memory above the state before a step "
        "(CUDA: `max_memory_allocated`; CPU: the resident set's high-water mark). Training and correctness: "
        f"{s['backbone']}, bf16, channels_last; `torch.compile` backend `{s['backend']}`.",
    ]
    if "head" in result:
        lines += ["", "## Head: forward + backward vs the naive [B, S, K] implementation", ""]
        h = result["head"]
        lines += [h["error"]] if isinstance(h, dict) else _head_md(h)
    if "train" in result:
        lines += [
            "",
            f"## Training throughput ({s['backbone']}, {s['image']} px, batch {s['batch']}, synthetic, "
            f"bf16, channels_last; {s['rounds']} rounds of {s['block']} steps, side by side)",
            "",
            f"*plain*: timm `{s['backbone']}` with its own linear classifier in a PyTorch loop written in the bench "
            "(forward under bf16 autocast, cross-entropy in fp32, SGD with Nesterov momentum). *hom*, *het*: the "
            "harness model (`build_model`) and training step (`accumulate_step` on an "
            f"`Accelerator(mixed_precision='bf16')`, as both stages train); het is low rank, R={s['R']}, S={s['S']}, "
            "τ=1.5 (the paper's ImageNet ResNet-50). Set-up: building and the warm-up steps (compiling, when compiled).",
            "",
        ]
        t = result["train"]
        lines += [t["error"]] if isinstance(t, dict) else _train_md(t)
    lines += _other_md(result)
    if "correctness" in result:
        lines += [
            "",
            "Correctness: a het model (low rank, the sizes above) trained by the harness step on seeded synthetic "
            "batches, its losses compared exactly (deterministic algorithms; cuBLAS workspace `:4096:8` on CUDA) "
            f"or within a relative {NONDET_RTOL:g} (default algorithms); the checkpoint holds the model, the "
            "optimiser and the RNG states (CPU and CUDA) and is read back into a fresh model and optimiser. "
            "Evaluation (fp32, seeded) on the device and of a copy on the CPU: each class probability p̄ is a mean of "
            "S samples drawn from different generators, so the two may differ by Monte Carlo error; allowed: "
            f"|Δp̄| <= {MC_Z:g}·σ·sqrt(2/S) + {FLOAT_ATOL:g}, σ the standard deviation of the sampled softmax "
            "(the CPU's), max_z the largest |Δp̄| / (σ·sqrt(2/S)).",
        ]
    load = result.get("load", {})
    if load:
        lines += [
            "",
            f"Load average (1 min) {load['start'][0]:.1f} at the start, {load.get('end', load['start'])[0]:.1f} at the end.",
        ]
    lines.append("")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "device.md", "\n".join(lines))
    atomic_write_text(out / "device.json", json_dumps(result, indent=1))
    return result
