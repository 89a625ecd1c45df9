"""Where HET-XL's row-by-row driver starts to pay: its training step against the chunk-by-chunk driver's, side by
side (rounds interleaved), over S; writes results/bench/hetxl-rows.md. The threshold it backs is
``harness.heads.rows.MIN_SAMPLES``.

    python tools/rows_threshold.py [--samples 128,256,384,512,1000] [--rounds 3] [--out results/bench/hetxl-rows.md]

One process, the machine's torch threads; B = 64, D = 2048, K = 1000, R = 15, the parameter-efficient HET-XL
head (the bench's ``hetxl_pe``), softmax, cross-entropy, forward + backward. Takes about 3 minutes on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

import harness.heads.planning as planning
from harness.heads import HeteroscedasticHead


def _step(head: HeteroscedasticHead, x: torch.Tensor, y: torch.Tensor) -> float:
    head.zero_grad(set_to_none=True)
    tic = time.perf_counter()
    F.cross_entropy(head(x), y).backward()
    return (time.perf_counter() - tic) * 1e3


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", default="128,256,384,512,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="results/bench/hetxl-rows.md")
    args = parser.parse_args()
    threshold = planning.MIN_SAMPLES
    rows = []
    start = time.time()
    grid = [int(s) for s in args.samples.split(",")]
    for i, s in enumerate(grid):
        torch.manual_seed(0)
        head = HeteroscedasticHead(
            2048, 1000, covariance="parameter_efficient", num_factors=15, noise_space="pre_logits", train_mc_samples=s
        ).train()
        x, y = torch.randn(64, 2048), torch.randint(0, 1000, (64,))
        times: "dict[str, list[float]]" = {"rows": [], "chunks": []}
        load = [os.getloadavg()[0]]
        for r in range(args.rounds + 1):  # round 0 warms up
            for driver in ("rows", "chunks"):
                planning.MIN_SAMPLES = 1 if driver == "rows" else 10**9
                ms = _step(head, x, y)
                if r:
                    times[driver].append(ms)
        planning.MIN_SAMPLES = threshold
        load.append(os.getloadavg()[0])
        ratios = [c / r for r, c in zip(times["rows"], times["chunks"])]
        rows.append((s, statistics.median(times["rows"]), statistics.median(times["chunks"]), ratios, load))
        left = (time.time() - start) / (i + 1) * (len(grid) - i - 1)
        print(f"S={s}: chunks / rows {statistics.median(ratios):.2f}x ({i + 1}/{len(grid)}, ~{left:.0f} s left)")
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# HET-XL: row by row against chunk by chunk",
        "",
        f"Written by `python tools/rows_threshold.py --samples {args.samples} --rounds {args.rounds}` on {now}.",
        "",
        f"- CPU: {_cpu()}, {os.cpu_count()} logical CPUs, torch {torch.__version__}, {torch.get_num_threads()} threads",
        "- Training step (forward + backward, cross-entropy) of the parameter-efficient HET-XL head, B = 64, "
        "D = 2048, K = 1000, R = 15, softmax; medians of the rounds, the two drivers alternating step by step.",
        f"- The planner goes row by row from `harness.heads.rows.MIN_SAMPLES` = {threshold} samples (one row's chunk).",
        "",
        "| S | row by row ms | chunk by chunk ms | chunks / rows | rounds (min-max) | load (1 min) |",
        "|---|---|---|---|---|---|",
    ]
    for s, r, c, ratios, load in rows:
        lines.append(
            f"| {s} | {r:.0f} | {c:.0f} | {statistics.median(ratios):.2f}x | {min(ratios):.2f}-{max(ratios):.2f}x "
            f"| {load[0]:.1f}-{load[1]:.1f} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
