"""Eager evaluation of a HET head (eval mode, seeded: the evaluation noise), one tree's harness/ against another's,
side by side round robin, each round a fresh process per tree with one torch thread (issue 43: the eager head must
not get slower with the one, counter-based evaluation noise). B = 64, D = 2048, K = 1000, R = 15, S = 1000; the first
call of each head (where the counter-based code draws its noise bank) is not timed, the median of the next 5 is.

    git archive REV harness | tar -x -C OLD_TREE      (e.g. f1517a8^, the last commit with the earlier noise)
    python tools/bench_eval_noise.py OLD_TREE NEW_TREE   (NEW_TREE: "." for this checkout)

Writes results/bench/eval-noise.md."""

import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

CODE = r"""
import sys, time, torch, json
sys.path.insert(0, sys.argv[1])
torch.set_num_threads(1)
from harness.heads import HeteroscedasticHead
torch.manual_seed(0)
out = {}
for cov in ("low_rank", "diagonal", "parameter_efficient"):
    h = HeteroscedasticHead(2048, 1000, covariance=cov, num_factors=15, eval_mc_samples=1000).eval()
    x = torch.randn(64, 2048)
    with torch.no_grad():
        h(x)  # first call (the new code draws its bank here)
        ts = []
        for _ in range(5):
            t = time.perf_counter(); h(x); ts.append(time.perf_counter() - t)
    out[cov] = sorted(ts)[2] * 1000
print(json.dumps(out))
"""
old, new = sys.argv[1], sys.argv[2]
rounds = {"old": [], "new": []}
for r in range(3):
    for name, tree in (("old", old), ("new", new)):
        res = subprocess.run([sys.executable, "-c", CODE, tree], capture_output=True, text=True, check=True)
        rounds[name].append(json.loads(res.stdout.strip().splitlines()[-1]))
load = open("/proc/loadavg").read().split()[:3]
cpu = next(
    (l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor()
)
lines = [
    "# Eager evaluation of a HET head: the earlier noise against the one evaluation noise",
    "",
    f"Written by `python tools/bench_eval_noise.py {old} {new}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())};"
    f" {cpu}, load at the end {', '.join(load)}. B = 64, D = 2048, K = 1000, R = 15, S = 1000, eval mode, one torch"
    " thread, median of 5 calls after the first, 3 rounds side by side.",
    "",
    "| covariance | earlier noise, ms | one noise, ms | earlier ÷ one (above 1: faster now) | rounds |",
    "|---|---|---|---|---|",
]
for cov in rounds["old"][0]:
    o = statistics.median(x[cov] for x in rounds["old"])
    n = statistics.median(x[cov] for x in rounds["new"])
    ratios = [a[cov] / b[cov] for a, b in zip(rounds["old"], rounds["new"])]
    lines.append(f"| {cov} | {o:.1f} | {n:.1f} | {o / n:.2f}x | {min(ratios):.2f}-{max(ratios):.2f}x |")
Path("results/bench").mkdir(parents=True, exist_ok=True)
Path("results/bench/eval-noise.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
