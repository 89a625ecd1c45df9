"""``harness bench data``: memory and throughput of the data path against the data set's size.

For each size N, N synthetic examples are written: 32x32 PNG images (a pool of 1,000 random images, written
byte for byte N times over, 1,000 files a folder), 10 classes, a ``train.jsonl`` manifest listing them
(``data.source=manifest``); then the same split is packed as WebDataset shards by
:func:`harness.data.pack.pack` (``data.source=shards``). Each source is then measured in a fresh process
(``spawn``), its loader in that process (no loader workers, so one process holds everything):

- the time to open the split (manifest: read the list and check every path stays in its folder, plus the
  per-image loader's decode of a sample of images; shards: read the index);
- peak resident memory (``getrusage(RUSAGE_SELF).ru_maxrss``) and its growth over the process's peak after its
  imports, i.e. what opening the split and reading batches cost: flat in N when nothing is held per example;
- loader throughput: images/s (wall clock) and images per CPU-second (``time.process_time``, the process's CPU
  time over all its threads: the cost, whatever else the machine runs) of the training loader (:func:`harness.data.batched.make_loader`'s per-image
  path or :func:`harness.data.shards.shard_loader`: PIL decode, the CIFAR training transform of pad-4 crop and
  flip, seeded shuffle, batches of ``batch_size``) over ``batches`` batches after ``warmup`` batches.

Each source is measured ``repeats`` times, the two sources in turn (so a change in the machine's load hits both):
the median and range of the throughputs, the largest of the peaks.

Beside them, in a fresh process too, the training step of the default small model (the model of
``upstream/configs/cifar10n_het.yaml``: ``resnet10_32px_w16`` with the low-rank HET head, at the precision its
``mixed_precision: auto`` takes on this CPU, channels_last, SGD) on random 32 px inputs of the same batch size:
a loader faster than the step keeps the model busy. On a machine shared with other work wall-clock rates follow
the others' load; the CPU-second rates compare the cost of an image in the loader and in the step. The generated data lives under ``work_dir`` and is deleted
after each size.
"""

from __future__ import annotations

import concurrent.futures as cf
import io
import json
import multiprocessing as mp
import shutil
import statistics
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from harness.io import atomic_write_text
from harness.provenance import cpu_details, load_note, machine_load, markdown_header, provenance

SIZES = (10_000, 100_000, 1_000_000)
SOURCES = ("manifest", "shards")
MODEL_CONFIG = Path(__file__).resolve().parents[2] / "upstream" / "configs" / "cifar10n_het.yaml"
NUM_CLASSES = 10
POOL = 1_000
PER_FOLDER = 1_000
MiB = 2**20


def make_data(root: Path, n: int, image_size: int = 32, seed: int = 0) -> dict:
    """Write ``n`` examples under ``root``: ``img/<folder>/<i>.png`` and ``train.jsonl`` (``{"path", "labels"}``).

    Image i is image ``i % 1000`` of a pool of random ``image_size`` x ``image_size`` RGB PNGs, its label that
    image's number mod 10.

    Returns:
        ``{"seconds", "image_bytes"}``: the time taken and the bytes of all image files.

    Raises:
        ValueError: ``n`` < 1.
    """
    from PIL import Image

    if n < 1:
        raise ValueError(f"the number of examples must be >= 1, got {n}")
    tic = time.perf_counter()
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(POOL):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8)).save(buf, "PNG")
        pool.append(buf.getvalue())
    root.mkdir(parents=True, exist_ok=True)
    total = 0
    with open(root / "train.jsonl", "w") as manifest:
        for i in range(n):
            folder = f"img/{i // PER_FOLDER:05d}"
            if i % PER_FOLDER == 0:
                (root / folder).mkdir(parents=True, exist_ok=True)
            data = pool[i % POOL]
            (root / folder / f"{i:07d}.png").write_bytes(data)
            total += len(data)
            manifest.write(json.dumps({"path": f"{folder}/{i:07d}.png", "labels": [i % POOL % NUM_CLASSES]}) + "\n")
    (root / "classes.txt").write_text("".join(f"c{c}\n" for c in range(NUM_CLASSES)))
    return {"seconds": time.perf_counter() - tic, "image_bytes": total}


def _pack(manifest_dir: str, out: str, shard_size: int) -> dict:
    """Pack the manifest's train split into shards (in a fresh process): ``{"seconds", "shards", "shard_bytes"}``."""
    from harness.data.config import DataConfig
    from harness.data.pack import pack
    from harness.data.sources import build_split

    tic = time.perf_counter()
    index = pack(
        build_split(DataConfig(source="manifest", path=manifest_dir), "train"),
        Path(out) / "train",
        shard_size,
        prefix="train",
        progress=False,
    )
    size = sum(p.stat().st_size for p in (Path(out) / "train").glob("*.tar"))
    return {"seconds": time.perf_counter() - tic, "shards": len(index["shards"]), "shard_bytes": size}


def _max_rss() -> int:
    """This process's peak resident set so far, in bytes (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure_loader(
    source: str,
    path: str,
    batch_size: int,
    image_size: int,
    warmup: int,
    batches: int,
    num_workers: int = 0,
    device: str = "cpu",
) -> dict:
    """Open the ``train`` split of ``path`` (``data.source=source``) and time its training loader (see the module
    docstring): ``warmup`` batches, then ``batches`` batches, each moved to ``device`` (CUDA: pinned, non-blocking,
    synchronised at the end), with ``num_workers`` loader processes. Also the device bench's loader part
    (:func:`harness.bench.device_parts.measure_loader`).

    Returns:
        ``{open_seconds, images, seconds, images_per_sec, cpu_seconds, images_per_cpu_second, peak_rss (bytes),
        rss_growth (bytes), batches_per_epoch}``; the CPU times are this process's only (not its loader workers').
    """
    import torch  # imported before the baseline, as the loaders import it

    from harness.data.batched import make_loader
    from harness.data.config import DataConfig
    from harness.data.shards import shard_loader
    from harness.data.sources import build_split

    base_rss = _max_rss()
    cfg = DataConfig(
        source=source,
        path=path,
        image_size=image_size,
        batch_size=batch_size,
        crop_padding=4,
        hflip=True,
        loader="pil",
        num_workers=num_workers,
    )
    tic = time.perf_counter()
    if source == "shards":
        loader, ds = shard_loader(cfg, "train", train=True, seed=0)
        epochs = [ds]
    else:
        split = build_split(cfg, "train")
        loader, ds, sampler = make_loader(cfg, split, train=True, seed=0)
        epochs = [ds, sampler]
    opened = time.perf_counter() - tic

    def stream():
        epoch = 0
        while True:
            for d in epochs:
                d.use_epoch(epoch)
            yield from loader
            epoch += 1

    it, cuda = stream(), device.startswith("cuda")
    for _ in range(warmup):
        next(it)[0].to(device)
    images, tic, cpu = 0, time.perf_counter(), time.process_time()
    for _ in range(batches):
        x = next(it)[0]
        x = (x.pin_memory() if cuda else x).to(device, non_blocking=cuda)
        images += x.shape[0]
    if cuda:
        torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - tic, time.process_time() - cpu
    peak = _max_rss()
    return {
        "open_seconds": opened,
        "images": images,
        "seconds": seconds,
        "images_per_sec": images / seconds,
        "cpu_seconds": cpu,
        "images_per_cpu_second": images / cpu,
        "peak_rss": peak,
        "rss_growth": peak - base_rss,
        "batches_per_epoch": len(loader),
    }


def _measure_step(batch_size: int, image_size: int, warmup: int, steps: int) -> dict:
    """Training steps of the default small model on random inputs (in a fresh process): images/s."""
    import torch
    import torch.nn.functional as F

    from harness.config import read_settings
    from harness.models import ModelConfig, build_model
    from harness.training.precision import resolve

    settings = read_settings(MODEL_CONFIG)
    m = settings["model"]
    precision = resolve(settings.get("train", {}).get("mixed_precision", "no"), "cpu")
    torch.manual_seed(0)
    model = (
        build_model(
            ModelConfig(m["backbone"], NUM_CLASSES, dict(m.get("head", {})), dict(m.get("backbone_kwargs", {})))
        )
        .to(memory_format=torch.channels_last)
        .train()
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(batch_size, 3, image_size, image_size).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NUM_CLASSES, (batch_size,))
    tic, cpu = time.perf_counter(), time.process_time()
    for i in range(warmup + steps):
        if i == warmup:
            tic, cpu = time.perf_counter(), time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    seconds, cpu = time.perf_counter() - tic, time.process_time() - cpu
    return {
        "model": m["backbone"],
        "head": dict(m.get("head", {})),
        "precision": precision,
        "images_per_sec": steps * batch_size / seconds,
        "images_per_cpu_second": steps * batch_size / cpu,
        "steps": steps,
        "batch_size": batch_size,
        "threads": torch.get_num_threads(),
    }


def _in_fresh_process(fn: Callable, *args) -> dict:
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def run(
    sizes: Sequence[int] = SIZES,
    batch_size: int = 128,
    image_size: int = 32,
    warmup: int = 5,
    batches: int = 40,
    steps: int = 20,
    shard_size: int = 10_000,
    repeats: int = 3,
    work_dir: Optional[Path] = None,
    out: Optional[Path] = Path("results/bench/data.md"),
    max_minutes: float = 0.0,
    keep: bool = False,
    progress: Callable[[str], None] = print,
) -> dict:
    """Measure every size and source, then the training step; write the tables (Markdown and a JSON twin).

    Args:
        sizes: numbers of examples N (each >= ``batch_size`` x (``warmup`` + 1)).
        batch_size: loader batch and training batch.
        image_size: side of the synthetic images and of the loaders' output, in pixels.
        warmup, batches: loader batches read before timing, and timed.
        steps: timed training steps (after 3 warm-up steps).
        shard_size: examples per shard.
        repeats: measurements of each source and size (in turn with the other source).
        work_dir: where the data is generated (default: a new folder under the system's temporary folder); each
            size's data is deleted after it is measured unless ``keep``.
        max_minutes: no new size is started after this many minutes (0: no limit); sizes left out are listed.

    Raises:
        ValueError: a size too small for the warm-up and one batch, or a bad setting.
    """
    import tempfile

    sizes = sorted(int(n) for n in sizes)
    if min(batch_size, image_size, batches, steps, shard_size, repeats) < 1 or warmup < 0:
        raise ValueError("batch_size, image_size, batches, steps, shard_size and repeats must be >= 1, warmup >= 0")
    small = [n for n in sizes if n < batch_size * (warmup + 1)]
    if small:
        raise ValueError(
            f"size(s) {small} hold fewer than the {batch_size * (warmup + 1)} examples of the warm-up and "
            "one batch: give larger sizes or a smaller --batch-size"
        )
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="harness-bench-data-"))
    load = machine_load()
    start, cases, prep, skipped = time.perf_counter(), [], [], []
    for n in sizes:
        if max_minutes and (time.perf_counter() - start) / 60 > max_minutes:
            skipped.append(n)
            progress(f"N={n}: not started, past the time budget of {max_minutes} min")
            continue
        tic = time.perf_counter()
        root = work / f"n{n}"
        made = make_data(root / "manifest", n, image_size)
        progress(f"N={n}: wrote images and manifest in {made['seconds']:.0f} s")
        packed = _in_fresh_process(_pack, str(root / "manifest"), str(root / "shards"), shard_size)
        progress(f"N={n}: packed {packed['shards']} shard(s) in {packed['seconds']:.0f} s")
        rounds: "dict[str, list[dict]]" = {source: [] for source in SOURCES}
        for i in range(repeats):
            for source in SOURCES:
                path = str(root / ("shards" if source == "shards" else "manifest"))
                r = _in_fresh_process(measure_loader, source, path, batch_size, image_size, warmup, batches)
                rounds[source].append(r)
                progress(
                    f"N={n} {source:8s} round {i + 1}/{repeats}: open {r['open_seconds']:.1f} s, peak RSS "
                    f"{r['peak_rss'] / MiB:.0f} MiB (+{r['rss_growth'] / MiB:.1f}), {r['images_per_sec']:.0f} "
                    "images/s"
                )
        cases += [_case(n, source, rs) for source, rs in rounds.items()]
        prep.append(
            {
                "examples": n,
                "write_seconds": made["seconds"],
                "image_bytes": made["image_bytes"],
                "pack_seconds": packed["seconds"],
                "shards": packed["shards"],
                "shard_bytes": packed["shard_bytes"],
                "wall_seconds": time.perf_counter() - tic,
            }
        )
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    if not keep and not work_dir:
        shutil.rmtree(work, ignore_errors=True)
    step_rounds = []
    for i in range(repeats):
        step_rounds.append(_in_fresh_process(_measure_step, batch_size, image_size, 3, steps))
        r = step_rounds[-1]
        progress(
            f"training step ({r['model']}, {r['precision']}) round {i + 1}/{repeats}: "
            f"{r['images_per_sec']:.0f} images/s, {r['images_per_cpu_second']:.0f} per CPU-second"
        )
    step = {
        **step_rounds[0],
        "rounds": step_rounds,
        "images_per_sec": statistics.median(r["images_per_sec"] for r in step_rounds),
        "images_per_cpu_second": statistics.median(r["images_per_cpu_second"] for r in step_rounds),
    }
    summary = {
        "sizes": sizes,
        "skipped": skipped,
        "batch_size": batch_size,
        "image_size": image_size,
        "warmup": warmup,
        "batches": batches,
        "shard_size": shard_size,
        "repeats": repeats,
        "cases": cases,
        "preparation": prep,
        "training_step": step,
        "cpu": cpu_details(),
        "minutes": (time.perf_counter() - start) / 60,
        "load": {"start": load, "end": machine_load()},
    }
    if out is not None:
        _write(Path(out), summary)
    return summary


def _case(n: int, source: str, rs: "list[dict]") -> dict:
    """One size and source over its rounds: medians of the speeds and times, the largest memory figures."""
    speeds = [r["images_per_sec"] for r in rs]
    return {
        "examples": n,
        "source": source,
        "rounds": rs,
        "images": rs[0]["images"],
        "images_per_sec": statistics.median(speeds),
        "images_per_sec_range": [min(speeds), max(speeds)],
        "images_per_cpu_second": statistics.median(r["images_per_cpu_second"] for r in rs),
        "open_seconds": statistics.median(r["open_seconds"] for r in rs),
        "peak_rss": max(r["peak_rss"] for r in rs),
        "rss_growth": max(r["rss_growth"] for r in rs),
    }


def _write(out: Path, s: dict) -> None:
    prov = provenance()
    step = s["training_step"]
    lines = [
        markdown_header("Data path: memory and loader throughput against the data set's size", prov),
        f"CPU (`lscpu`): {s['cpu'] or 'lscpu not available'}. " + load_note(s["load"]["start"], s["load"]["end"]),
        "",
        f"Synthetic split: N examples, {s['image_size']}x{s['image_size']} PNG images (a pool of {POOL} random "
        f"images written N times over, {PER_FOLDER} files a folder), {NUM_CLASSES} classes, listed in a "
        f"`train.jsonl` manifest (`data.source=manifest`) and packed by `harness.data.pack.pack` into shards "
        f"of {s['shard_size']} (`data.source=shards`). Each source measured in a fresh process with its "
        f"training loader in that process (no loader workers): the per-image path (PIL decode, pad-4 crop + "
        f"flip to {s['image_size']} px, seeded shuffle; shards: a shuffle buffer of 1,000), batches of "
        f"{s['batch_size']}, {s['batches']} batches timed after {s['warmup']}; {s['repeats']} measurements of "
        "each, the two sources in turn. Peak RSS: `ru_maxrss` of the process (the largest of the "
        "measurements); growth: over its peak after its imports (what opening the split and reading batches "
        "add). Open: median seconds to open the split.",
        "",
        "| examples | source | open (s) | peak RSS (MiB) | RSS growth (MiB) | loader images/s (median, range) "
        "| images per CPU-second (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in s["cases"]:
        lo, hi = c["images_per_sec_range"]
        lines.append(
            f"| {c['examples']:,} | {c['source']} | {c['open_seconds']:.2f} | {c['peak_rss'] / MiB:.0f} | "
            f"{c['rss_growth'] / MiB:.1f} | {c['images_per_sec']:.0f} ({lo:.0f}-{hi:.0f}) | "
            f"{c['images_per_cpu_second']:.0f} |"
        )
    measured = sorted({c["examples"] for c in s["cases"]})
    if len(measured) > 1:
        lo, hi = measured[0], measured[-1]
        lines += [""]
        for source in SOURCES:
            by = {c["examples"]: c for c in s["cases"] if c["source"] == source}
            per = (by[hi]["rss_growth"] - by[lo]["rss_growth"]) / (hi - lo)
            lines.append(
                f"- {source}: RSS growth from {lo:,} to {hi:,} examples: "
                f"{(by[hi]['rss_growth'] - by[lo]['rss_growth']) / MiB:+.1f} MiB, {per:.0f} bytes an example."
            )
    if s["skipped"]:
        lines += ["", f"Not measured: N = {', '.join(f'{n:,}' for n in s['skipped'])} (past the time budget)."]
    lines += [
        "",
        "Preparing the data (not part of a training run):",
        "",
        "| examples | write images + manifest (s) | image bytes (MiB) | pack shards (s) | shards | shard bytes (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    for p in s["preparation"]:
        lines.append(
            f"| {p['examples']:,} | {p['write_seconds']:.0f} | {p['image_bytes'] / MiB:.0f} | "
            f"{p['pack_seconds']:.0f} | {p['shards']} | {p['shard_bytes'] / MiB:.0f} |"
        )
    slowest = min((c["images_per_sec"] for c in s["cases"]), default=float("nan"))  # of the medians
    cheapest = min((c["images_per_cpu_second"] for c in s["cases"]), default=float("nan"))
    each = ", ".join(f"{r['images_per_sec']:.0f}" for r in step["rounds"])
    lines += [
        "",
        f"Training step of the default small model (`{step['model']}` with the head of "
        f"`cifar10n_het.yaml`: {json.dumps(step['head'])}; precision {step['precision']} as "
        f"`mixed_precision: auto` takes it here, channels_last, SGD; batch {step['batch_size']} of random "
        f"{s['image_size']} px inputs, {step['steps']} steps timed after 3, {step['threads']} threads; "
        f"{len(step['rounds'])} measurements): **{step['images_per_sec']:.0f} images/s** (median; each: "
        f"{each}), **{step['images_per_cpu_second']:.0f} images per CPU-second**.",
        "",
        f"The slowest loader above (median) gives {slowest:.0f} images/s, "
        f"{slowest / step['images_per_sec']:.1f}x the step's median rate; per CPU-second the costliest gives "
        f"{cheapest:.0f} images, {cheapest / step['images_per_cpu_second']:.1f}x the step: decoding and "
        f"augmenting an image takes {100 * step['images_per_cpu_second'] / cheapest:.0f}% of the CPU time the "
        "step spends on it, in one process (a run's loader workers run beside the step).",
    ]
    atomic_write_text(out, "\n".join(lines) + "\n")
    atomic_write_text(out.with_suffix(".json"), json.dumps({"provenance": prov, **s}, indent=1))
