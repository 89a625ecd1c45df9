"""The tables of ``harness bench data`` (:mod:`harness.bench.data`): peak memory, its growth and the loader's
throughput per size and source, the growth per example between the smallest and largest size, the cost of
preparing the data, and the training step of the default small model beside the slowest loader.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.bench.synthetic_data import NUM_CLASSES, PER_FOLDER, POOL, SOURCES
from harness.io import atomic_write_text
from harness.provenance import load_note, markdown_header, provenance

MiB = 2**20
#: the title of the tables
TITLE = "Data path: memory and loader throughput against the data set's size"


def write_report(out: Path, s: dict) -> None:
    """Write the summary ``s`` of :func:`harness.bench.data.run` to ``out`` (Markdown) and its ``.json`` twin."""
    prov = provenance()
    step = s["training_step"]
    lines = [
        markdown_header(TITLE, prov),
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
