"""``harness bench data``: memory and throughput of the data path against the data set's size.

For each size N, N synthetic examples are written (:mod:`harness.bench.synthetic_data`): 32x32 PNG images (a
pool of 1,000 random images, written byte for byte N times over, 1,000 files a folder), 10 classes, a
``train.jsonl`` manifest listing them (``data.source=manifest``); then the same split is packed as WebDataset
shards by :func:`harness.data.pack.pack` (``data.source=shards``). Each source is then measured in a fresh process
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
after each size. The tables: :mod:`harness.bench.data_report`.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import shutil
import statistics
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness.bench.data_report import TITLE, MiB, write_report
from harness.bench.synthetic_data import NUM_CLASSES, SOURCES, make_data, pack_data
from harness.provenance import check_replaceable, cpu_details, machine_load

SIZES = (10_000, 100_000, 1_000_000)
MODEL_CONFIG = Path(__file__).resolve().parents[2] / "upstream" / "configs" / "cifar10n_het.yaml"


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
        multilabel=True,  # the synthetic data's labels are sets (multi-hot targets), as JFT's
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
            size's data is deleted after it is measured unless ``keep`` (which needs a ``work_dir``).
        max_minutes: no new size is started after this many minutes (0: no limit); sizes left out are listed.

    Raises:
        ValueError: a size too small for the warm-up and one batch, a bad setting, ``keep`` without ``work_dir``, ``out`` or its JSON twin a file
            this bench did not write (:func:`harness.provenance.check_replaceable`), or a size's folder ``n<N>`` already in
            ``work_dir`` (the bench writes and deletes it); all before any work.
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
    if keep and not work_dir:
        raise ValueError(
            "--keep keeps the generated data, and without --work-dir it would be kept in a new folder under the "
            "system's temporary folder that nothing names (each run another): give --work-dir DIR to keep it there"
        )
    if out is not None:
        check_replaceable(out, TITLE, "sizes", "harness bench data")
    taken = [f"n{n}" for n in sizes if work_dir and (Path(work_dir) / f"n{n}").exists()]
    if taken:
        raise ValueError(
            f"--work-dir {work_dir} holds {', '.join(taken)}, which this bench writes and then deletes: move "
            "them (a folder an earlier run kept with --keep too), or choose another --work-dir"
        )
    work = Path(work_dir) if work_dir else Path(tempfile.mkdtemp(prefix="harness-bench-data-"))
    load = machine_load()
    start, cases, prep, skipped = time.perf_counter(), [], [], []
    for n in sizes:
        if max_minutes and (time.perf_counter() - start) / 60 > max_minutes:
            skipped.append(n)
            progress(f"N={n}: not started, past the time budget of {max_minutes} min")
            continue
        root = work / f"n{n}"
        size_cases, size_prep = _measure_size(
            n, root, batch_size, image_size, warmup, batches, shard_size, repeats, progress
        )
        cases += size_cases
        prep.append(size_prep)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    if not keep and not work_dir:
        shutil.rmtree(work, ignore_errors=True)
    step = _measure_steps(batch_size, image_size, steps, repeats, progress)
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
        write_report(Path(out), summary)
    return summary


def _measure_size(
    n: int,
    root: Path,
    batch_size: int,
    image_size: int,
    warmup: int,
    batches: int,
    shard_size: int,
    repeats: int,
    progress: Callable[[str], None],
) -> "tuple[list[dict], dict]":
    """One size N: write the synthetic split under ``root`` (:func:`~harness.bench.synthetic_data.make_data`), pack
    it (in a fresh process), then measure each source's loader ``repeats`` times, the sources in turn, each
    measurement in a fresh process.

    Returns:
        ``(cases, preparation)``: one :func:`_case` per source, and the times and bytes of writing and packing.
    """
    tic = time.perf_counter()
    made = make_data(root / "manifest", n, image_size)
    progress(f"N={n}: wrote images and manifest in {made['seconds']:.0f} s")
    packed = _in_fresh_process(pack_data, str(root / "manifest"), str(root / "shards"), shard_size)
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
    cases = [_case(n, source, rs) for source, rs in rounds.items()]
    prep = {
        "examples": n,
        "write_seconds": made["seconds"],
        "image_bytes": made["image_bytes"],
        "pack_seconds": packed["seconds"],
        "shards": packed["shards"],
        "shard_bytes": packed["shard_bytes"],
        "wall_seconds": time.perf_counter() - tic,
    }
    return cases, prep


def _measure_steps(batch_size: int, image_size: int, steps: int, repeats: int, progress: Callable[[str], None]) -> dict:
    """The training step of the default small model, ``repeats`` times, each in a fresh process (after 3 warm-up
    steps): the first round's settings, every round, and the medians of the rates."""
    step_rounds = []
    for i in range(repeats):
        step_rounds.append(_in_fresh_process(_measure_step, batch_size, image_size, 3, steps))
        r = step_rounds[-1]
        progress(
            f"training step ({r['model']}, {r['precision']}) round {i + 1}/{repeats}: "
            f"{r['images_per_sec']:.0f} images/s, {r['images_per_cpu_second']:.0f} per CPU-second"
        )
    return {
        **step_rounds[0],
        "rounds": step_rounds,
        "images_per_sec": statistics.median(r["images_per_sec"] for r in step_rounds),
        "images_per_cpu_second": statistics.median(r["images_per_cpu_second"] for r in step_rounds),
    }


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
