"""``harness bench shards``: CIFAR-10N trained from WebDataset shards against the cached-array path, on the same
short schedule, so that the streaming path is checked to cost no accuracy.

1. ``harness data pack`` writes the config's ``train45k`` (``worse`` labels), ``val5k`` (held out, ``worse``
   labels) and ``test`` (clean labels) splits as shards (a rerun keeps a finished pack).
2. ``harness upstream`` trains the config (default ``cifar10n_hom.yaml``: the base config's ``resnet10_32px_w16``,
   SGD, cosine, pad-4 crop + flip, channels_last, ``mixed_precision: auto``) for ``epochs`` epochs on each path,
   for each seed, one run at a time, each in its own process: the array path as the config reads it
   (``data.loader: array``, the whole split decoded once, a full permutation per epoch), and the shard path
   (``data.source=shards``: per-image decoding in ``num_workers`` loader workers, a shuffled shard order and a
   shuffle buffer per worker). A rerun resumes unfinished runs and keeps finished ones.
3. The clean-test top-1 of every run, its mean and spread per path, and the difference shards - array paired by
   seed (the same seed starts from the same weights; the data order differs): a Student-t interval over seeds
   (:func:`harness.uncertainty.stats.paired_difference`) and, per seed, an exact McNemar test on the 10,000 test
   predictions (:func:`harness.uncertainty.stats.mcnemar_exact`). With two seeds the t interval is wide (one
   degree of freedom); equality is expected only within the seed spread.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from harness.io import atomic_write_text, json_dumps, read_json
from harness.provenance import check_replaceable, command_line, markdown_header, provenance

CONFIG = Path("upstream/configs/cifar10n_hom.yaml")
CIFAR10N = Path("../shared/data/cifar10n")
SPLITS = ("train45k", "val5k", "test")
PATHS = ("array", "shards")
#: the title of the tables
TITLE = "CIFAR-10N from WebDataset shards vs the cached-array path"


def _harness() -> "list[str]":
    """The ``harness`` console script beside this interpreter, else ``python -m harness.cli``."""
    script = Path(sys.executable).with_name("harness")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "harness.cli"]


def pack_commands(config: Path, data_path: Path, out: Path, shard_size: int) -> "list[list[str]]":
    """The ``harness data pack`` command of each split."""
    return [
        [
            *_harness(),
            "data",
            "pack",
            str(config),
            str(out),
            "--split",
            split,
            "--shard-size",
            str(shard_size),
            f"path={data_path}",
        ]
        for split in SPLITS
    ]


def run_command(
    path: str, seed: int, config: Path, data_path: Path, shards: Path, epochs: int, num_workers: int, out_dir: Path
) -> "list[str]":
    """The ``harness upstream`` command of one run: the config on the array path or on the shards."""
    cmd = [
        *_harness(),
        "upstream",
        "--config",
        str(config),
        "--no-progress",
        f"seed={seed}",
        f"train.epochs={epochs}",
        f"train.eval_every={epochs}",
        f"output_dir={out_dir}",
    ]
    if path == "shards":
        return cmd + [
            "data.source=shards",
            f"data.path={shards}",
            "data.loader=auto",
            f"data.num_workers={num_workers}",
        ]
    return cmd + [f"data.path={data_path}"]


#: a command as a shell would retype it, the console script as ``harness``
shown = command_line


def _check(cmd: "list[str]") -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} failed ({done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}")


def _pack(
    config: Path, data_path: Path, shards: Path, shard_size: int, progress: Callable[[str], None]
) -> "tuple[list[list[str]], Optional[float], dict]":
    """Pack every split into ``shards`` (:func:`pack_commands`; a finished pack is kept).

    Returns:
        ``(commands, seconds, index)``: the pack commands, the seconds they took (None where every split was
        packed already: a kept pack's time is not measured), and each split's ``index.json``.
    """
    measured = not all((read_json(shards / s / "index.json") or {}).get("complete") for s in SPLITS)
    if not measured:
        progress(f"{shards} holds the finished packs: their packing time is not measured again (delete it to)")
    tic = time.perf_counter()
    packs = pack_commands(config, data_path, shards, shard_size)
    for cmd in packs:
        _check(cmd)
    seconds = time.perf_counter() - tic
    index = {s: json.loads((shards / s / "index.json").read_text()) for s in SPLITS}
    counts = ", ".join(f"{s}: {len(i['shards'])} shards" for s, i in index.items())
    progress(f"packed {counts} in {seconds:.0f} s")
    return packs, seconds if measured else None, index


def _read_run(path: str, seed: int, cmd: "list[str]", run_dir: Path, tic: float) -> dict:
    """One finished run as the comparison reads it: its metrics (``metrics.json``), its command, the session's
    minutes (since ``tic``, a ``time.perf_counter()`` reading), and per test example whether it was right
    (``correct``) and its ``index`` (``predictions.npz``)."""
    m = json.loads((run_dir / "metrics.json").read_text())
    pred = np.load(run_dir / "predictions.npz")
    correct = pred["logits"].argmax(1) == pred["targets"]
    return {
        "path": path,
        "seed": seed,
        "command": shown(cmd),
        "run_dir": str(run_dir),
        "top1": m["metrics"]["top1"],
        "nll": m["metrics"]["nll"],
        "ece": m["metrics"]["ece"],
        "heldout_top1": (m.get("heldout_metrics") or {}).get("top1"),
        "steps": m["steps"],
        "train_minutes": m["train_seconds"] / 60,
        "wall_minutes": m["wall_seconds"] / 60,
        "images_per_sec": m["train_images_per_sec"],
        "mixed_precision": m["mixed_precision"],
        "train_data": m["train_data"],
        "session_minutes": (time.perf_counter() - tic) / 60,
        "correct": correct,
        "index": pred["index"],
    }


def run(
    seeds: Sequence[int] = (0, 1),
    epochs: int = 2,
    config: Path = CONFIG,
    data_path: Optional[Path] = None,
    shard_size: int = 2500,
    num_workers: int = 1,
    work_dir: Path = Path("runs/bench/shards_vs_array"),
    out: Optional[Path] = Path("results/bench/shards_vs_array.md"),
    progress: Callable[[str], None] = print,
) -> dict:
    """Pack, train every (path, seed), compare, and write the tables (Markdown and a JSON twin).

    Args:
        seeds: training seeds (each trained on both paths).
        epochs: epochs of every run (the config's cosine schedule ends there).
        config: the run config (its splits ``train45k``, ``val5k``, ``test``).
        data_path: the CIFAR-10N folder (default ``../shared/data/cifar10n``).
        shard_size: examples per shard (the split with fewest shards must have at least ``num_workers``).
        num_workers: loader workers of the shard runs.
        work_dir: where the shards (``shards/``) and the run folders go.

    Raises:
        FileNotFoundError: no CIFAR-10N data or config.
        ValueError: no seeds, ``epochs`` < 1, or ``out`` or its JSON twin a file this bench did not write
            (:func:`harness.provenance.check_replaceable`); before any work.
        RuntimeError: a command failed (its output ends the message).
    """
    if out is not None:
        check_replaceable(out, TITLE, "per_path", "harness bench shards")
    data_path = Path(data_path or CIFAR10N)
    if not (data_path / "cifar10_jpeg.zip").is_file():
        raise FileNotFoundError(f"no cifar10_jpeg.zip in {str(data_path)!r}: pass --data-path to the CIFAR-10N folder")
    if not Path(config).is_file():
        raise FileNotFoundError(f"no config file at {str(config)!r}")
    if not seeds or epochs < 1:
        raise ValueError("give at least one seed and epochs >= 1")
    from harness.provenance import machine_load

    load = machine_load()
    work_dir = Path(work_dir)
    shards = work_dir / "shards"
    packs, pack_seconds, index = _pack(Path(config), data_path, shards, shard_size, progress)
    runs = []
    for seed in seeds:
        for path in PATHS:
            run_dir = work_dir / f"{path}_seed{seed}"
            cmd = run_command(path, seed, Path(config), data_path, shards, epochs, num_workers, run_dir)
            tic = time.perf_counter()
            _check(cmd)
            runs.append(_read_run(path, seed, cmd, run_dir, tic))
            progress(
                f"{path} seed {seed}: clean test top-1 {runs[-1]['top1']:.4f} "
                f"({runs[-1]['train_minutes']:.1f} min of training)"
            )
    summary = {
        "seeds": list(seeds),
        "epochs": epochs,
        "config": str(config),
        "data": str(data_path),
        "shard_size": shard_size,
        "num_workers": num_workers,
        "pack_commands": [shown(c) for c in packs],
        "pack_seconds": pack_seconds,
        "shards": {s: len(i["shards"]) for s, i in index.items()},
        "load": {"start": load, "end": machine_load()},
        **compare(runs),
        "runs": [{k: v for k, v in r.items() if k not in ("correct", "index")} for r in runs],
    }
    if out is not None:
        _write(Path(out), summary)
    return summary


def compare(runs: "list[dict]") -> dict:
    """Per path the t interval of the top-1 over seeds and its range; shards - array paired by seed (t interval,
    verdict) and, per seed, McNemar's exact test on the test predictions (``correct`` / ``index`` of each run)."""
    from harness.uncertainty.stats import mcnemar_exact, paired_difference, t_interval, verdict

    by = {(r["path"], r["seed"]): r for r in runs}
    seeds = sorted({r["seed"] for r in runs})
    per_path = {}
    for path in PATHS:
        top1 = [by[path, s]["top1"] for s in seeds]
        per_path[path] = {**t_interval(top1), "min": min(top1), "max": max(top1)}
    diff = paired_difference([by["shards", s]["top1"] for s in seeds], [by["array", s]["top1"] for s in seeds])
    mcnemar = {}
    for s in seeds:
        a, b = by["shards", s], by["array", s]
        if not np.array_equal(a["index"], b["index"]):
            raise ValueError(f"seed {s}: the two paths predicted different test examples; they must score the same set")
        mcnemar[str(s)] = mcnemar_exact(a["correct"], b["correct"])
    return {
        "per_path": per_path,
        "difference": {**diff, "verdict": verdict(diff["lo"], diff["hi"], True, len(seeds))},
        "mcnemar": mcnemar,
    }


def _write(out: Path, s: dict) -> None:
    from harness.provenance import cpu_details, load_note

    prov = provenance()
    pp, d = s["per_path"], s["difference"]
    pct = 100.0
    shard_counts = ", ".join(f"{k}: {v} shards" for k, v in s["shards"].items())
    lines = [
        markdown_header(TITLE, prov),
        f"CPU (`lscpu`): {cpu_details() or 'lscpu not available'}. " + load_note(s["load"]["start"], s["load"]["end"]),
        "",
        f"Config `{s['config']}` ({s['epochs']} epochs, `train.eval_every={s['epochs']}`), CIFAR-10N "
        f"`{s['data']}`: training on `train45k` (`worse` labels), `val5k` held out, clean `test`. Array path: the "
        "config as it is (`data.loader: array`, decoded once, a full permutation an epoch, whole-batch "
        "augmentation). Shard path: the same config with `data.source=shards` (PIL decode and the same pad-4 "
        f"crop + flip image by image, {s['num_workers']} loader worker(s), shard order shuffled and a shuffle "
        "buffer of 1,000 per worker). The two differ in shuffling, so equality is expected only within the seed "
        "spread.",
        "",
        (
            f"Packed in {s['pack_seconds'] / 60:.1f} min ({shard_counts}) by:"
            if s["pack_seconds"] is not None
            else f"Packed ({shard_counts}; by an earlier run of this command, not timed here) by:"
        ),
        "",
        "```bash",
        *s["pack_commands"],
        "```",
        "",
        "| path | seed | clean test top-1 | NLL | ECE | val5k top-1 (noisy) | steps | training min | images/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["runs"]:
        held = "-" if r["heldout_top1"] is None else f"{pct * r['heldout_top1']:.2f}%"
        lines.append(
            f"| {r['path']} | {r['seed']} | {pct * r['top1']:.2f}% | {r['nll']:.4f} | {r['ece']:.4f} | "
            f"{held} | {r['steps']} | {r['train_minutes']:.1f} | {r['images_per_sec']:.0f} |"
        )
    lines += [
        "",
        "| path | mean top-1 | seed range (max - min) | std over seeds | 95% t interval of the mean |",
        "|---|---|---|---|---|",
    ]
    for path, p in pp.items():
        lines.append(
            f"| {path} | {pct * p['mean']:.2f}% | {pct * (p['max'] - p['min']):.2f} points "
            f"({pct * p['min']:.2f}-{pct * p['max']:.2f}%) | {pct * p['std']:.2f} | "
            f"[{pct * p['lo']:.2f}%, {pct * p['hi']:.2f}%] |"
        )
    lines += [
        "",
        f"Shards - array, paired by seed: **{pct * d['mean']:+.2f} points** (per seed "
        f"{', '.join(f'{pct * v:+.2f}' for v in d['diffs'])}); 95% t interval over the {d['n']} seeds "
        f"[{pct * d['lo']:+.2f}, {pct * d['hi']:+.2f}] points: {d['verdict']}. McNemar's exact test on "
        "the 10,000 test predictions of each seed (shards right / array right where they disagree): "
        + "; ".join(f"seed {k}: {m['n10']} / {m['n01']}, p = {m['p']:.3g}" for k, m in s["mcnemar"].items())
        + ". The per-seed test says whether the two models "
        "of a seed differ, not whether the paths do: seeds alone move top-1 by the spread above.",
        "",
        "Commands (run one at a time, each in its own process; `harness bench shards` runs them all):",
        "",
        "```bash",
        *[r["command"] for r in s["runs"]],
        "```",
    ]
    atomic_write_text(out, "\n".join(lines) + "\n")
    atomic_write_text(out.with_suffix(".json"), json_dumps({"provenance": prov, **s}, indent=1))
