"""``harness bench upstream``: what makes training fast on a CPU, measured step by step.

Part 1, throughput: the same model as the previous version of this bench (timm ``resnet18`` + a
low-rank HET head, R = 6, 100 MC samples, 32 px CIFAR-10N images, batch 128, SGD) trained by the
harness loop in four settings, each adding one step to the one before:

1. today's default: fp32, the per-image PIL loader (decode + transform every image, 2 workers);
2. the array loader (decoded once, cached; whole-batch augmentation as tensor ops);
3. ``train.mixed_precision=auto``: bf16 autocast for the backbone where the CPU computes bf16
   natively (the HET head on the logits stays fp32), fp32 elsewhere (:mod:`harness.training.precision`);
4. channels_last activations;
5. two runs side by side, one thread each (as ``harness run`` trains with ``workers: 2``): the
   images/s of both together;

then the 32 px ResNets of :mod:`harness.backbones` in the fast setting. On a CPU without native
bf16, bf16 forced on (step 2 + ``train.mixed_precision=bf16``) is measured too, on fewer images (it
is that much slower), to show what ``auto`` avoids. Every measurement is one
epoch over ``images`` training images in a fresh process, the loop's own ``train_images_per_sec``
(training steps only); the settings are measured in turn, ``repeats`` rounds, so a busy machine
slows all of them alike. Ratios to the default are per round (default of the same round).

Part 3 (:mod:`harness.upstream.bench_breakdown`), after part 1: where one step of the fast setting goes in fp32 and in
bf16, by kind of operator and by convolution layer, so the gap between bf16's matmul speed-up and the step's is
explained by measurement.

Part 2, accuracy: one short run of each setting and backbone (``epochs`` over the 45,000
``train45k`` images, ``worse`` labels; clean test top-1 and NLL) and its training wall time, so
the speed-ups can be checked to cost no accuracy, and the backbones compared by accuracy per
CPU-minute. The plain PyTorch loop of the default setting is kept as a reference row
(the harness loop's overhead).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import statistics
import time
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from harness.io import atomic_write_text
from harness.provenance import check_replaceable, markdown_header, provenance
from harness.training.precision import native_bf16
from harness.upstream import bench_breakdown

CIFAR10N = Path("../shared/data/cifar10n")

#: the cumulative steps of part 1: (name, overrides)
STEPS = [
    ("default: fp32, PIL loader", ["data.loader=pil", "data.num_workers=2"]),
    ("+ array loader", ["data.loader=array"]),
    ("+ mixed precision auto", ["data.loader=array", "train.mixed_precision=auto"]),
    ("+ channels_last", ["data.loader=array", "train.mixed_precision=auto", "train.channels_last=true"]),
]
FAST = STEPS[-1][1]
FORCED_BF16 = "array loader + bf16 forced on"
#: the 32 px backbones, trained in the fast setting with their own augmentation (pad-4 crop + flip)
BACKBONES = ["resnet10_32px_w16", "resnet10_32px_w32", "resnet18_32px_w32", "resnet10_32px", "resnet18_32px"]
#: the title of the tables
TITLE = "Upstream training throughput on CPU: what each step buys"


def base_overrides(data_path: Path) -> "list[str]":
    """The measured model and data (as the earlier bench: resnet18, R = 6, S = 100, batch 128)."""
    return [
        "data.source=cifar10n",
        f"data.path={data_path}",
        "data.label_set=worse",
        "data.crop_scale=0.35",
        "data.image_size=32",
        "data.eval_resize=32",
        "data.batch_size=128",
        "data.eval_batch_size=500",
        "model.backbone=resnet18",
        "model.head.covariance=low_rank",
        "model.head.num_factors=6",
        "model.head.train_mc_samples=100",
        "model.head.eval_mc_samples=100",
        "optim.lr=0.05",
        "optim.warmup_epochs=0",
        "optim.nesterov=true",
        "optim.weight_decay=5e-4",
        "optim.schedule=cosine",
        "train.log_every=50",
    ]


def backbone_overrides(name: str) -> "list[str]":
    return [*FAST, f"model.backbone={name}", "data.crop_padding=4", "optim.lr=0.1"]


def _as_in_a_cli_process() -> None:
    """A spawned measurement process would start loader workers by spawning too (seconds of
    imports each); fork them, as a process started from the command line does on Linux."""
    if "fork" in mp.get_all_start_methods():
        mp.set_start_method("fork", force=True)


def _harness(overrides: "list[str]", out_dir: str) -> dict:
    """One harness run in this (fresh) process; its metrics.json."""
    _as_in_a_cli_process()
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig
    from harness.upstream.train import run

    cfg = load_config(UpstreamConfig, None, overrides + [f"output_dir={out_dir}"], distinct=False)
    return json.loads((run(cfg, progress=False) / "metrics.json").read_text())


def _bare(overrides: "list[str]") -> float:
    """The default setting's model, data, transform and optimiser in a plain PyTorch loop."""
    _as_in_a_cli_process()
    from harness.config import load_config
    from harness.data.sources import build_split
    from harness.data.transforms import train_transform
    from harness.models import ModelConfig, build_model
    from harness.upstream.config import UpstreamConfig

    cfg = load_config(UpstreamConfig, None, overrides)
    base = build_split(cfg.data, cfg.data.train_split)
    torch.manual_seed(cfg.seed)
    transform = train_transform(cfg.data.image_size, cfg.data.crop_scale, cfg.data.hflip)

    class Plain(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(base)

        def __getitem__(self, i: int):
            image, target = base[i]
            return transform(image), target

    loader = torch.utils.data.DataLoader(
        Plain(), cfg.data.batch_size, shuffle=True, drop_last=True, num_workers=cfg.data.num_workers
    )
    model = build_model(ModelConfig(cfg.model.backbone, base.num_classes, dict(cfg.model.head))).train()
    opt = torch.optim.SGD(
        model.parameters(), lr=cfg.optim.lr, momentum=cfg.optim.momentum, weight_decay=cfg.optim.weight_decay
    )
    images, tic = 0, time.perf_counter()
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        images += x.shape[0]
    return images / (time.perf_counter() - tic)


def _in_fresh_process(fn: Callable, *args) -> "float | dict":
    with cf.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _side_by_side(overrides: "list[str]", out_dirs: "list[str]") -> float:
    """Two runs at once, each in its own one-thread process: their images/s summed."""
    from harness.workers import init_worker

    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn"), initializer=init_worker, initargs=(1,)) as pool:
        futures = [pool.submit(_harness, overrides, d) for d in out_dirs]
        return sum(f.result()["train_images_per_sec"] for f in futures)


def matmul_rates(n: int = 2048, repeats: int = 5) -> "dict[str, float]":
    """GFLOP/s of an n x n matmul in fp32 and bf16 (best of ``repeats``), and the CPU's bf16 flags."""
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        a @ b
        best = min(_timed(lambda: a @ b) for _ in range(repeats))
        out[name] = 2 * n**3 / best / 1e9
    try:
        flags = set(
            next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")).split()
        )
    except (OSError, StopIteration):
        flags = set()
    out["flags"] = " ".join(f"{f}: {'yes' if f in flags else 'no'}" for f in ("avx512_bf16", "amx_bf16", "amx_tile"))
    return out


def _timed(fn: Callable) -> float:
    tic = time.perf_counter()
    fn()
    return time.perf_counter() - tic


def _throughput(
    settings: "dict[str, list[str]]",
    base: "list[str]",
    images: int,
    repeats: int,
    native: bool,
    work_dir: Path,
    progress: Callable[[str], None],
) -> "dict[str, list[float]]":
    """Part 1: ``repeats`` rounds of every setting's training images/s (one epoch over ``images`` images, each run in
    a fresh process), two fast runs side by side, the bare loop, and on a CPU without ``native`` bf16 the bf16
    forced on (on fewer images). Returns each measurement's images/s, round by round."""
    pair = "+ 2 runs side by side, 1 thread each"
    speed: "dict[str, list[float]]" = {name: [] for name in [*settings, pair, "bare loop (default setting)"]}
    throughput = [f"data.limit_train={images}", "data.limit_eval=16", "train.epochs=1"]
    if not native:  # auto means fp32 here: measure what bf16 would cost, on fewer images
        speed[FORCED_BF16] = []
        few = [f"data.limit_train={max(256, images // 16)}", "data.limit_eval=16", "train.epochs=1"]
    for r in range(repeats):
        if not native:
            summary = _in_fresh_process(
                _harness,
                base + ["data.loader=array", "train.mixed_precision=bf16"] + few,
                str(work_dir / f"bf16_{r}_{time.time_ns()}"),
            )
            speed[FORCED_BF16].append(summary["train_images_per_sec"])
            progress(f"round {r + 1}/{repeats} {FORCED_BF16:28s} {speed[FORCED_BF16][-1]:7.1f} images/s")
        for name, ov in settings.items():
            summary = _in_fresh_process(_harness, ov + throughput, str(work_dir / f"speed_{r}_{time.time_ns()}"))
            speed[name].append(summary["train_images_per_sec"])
            progress(f"round {r + 1}/{repeats} {name:28s} {speed[name][-1]:7.1f} images/s")
        speed[pair].append(
            _side_by_side(
                settings[STEPS[-1][0]] + throughput, [str(work_dir / f"pair{i}_{r}_{time.time_ns()}") for i in (0, 1)]
            )
        )
        progress(f"round {r + 1}/{repeats} {pair:28s} {speed[pair][-1]:7.1f} images/s")
        speed["bare loop (default setting)"].append(_in_fresh_process(_bare, settings[STEPS[0][0]] + throughput))
        progress(f"round {r + 1}/{repeats} {'bare loop':28s} {speed['bare loop (default setting)'][-1]:7.1f} images/s")
    return speed


def _accuracy(
    settings: "dict[str, list[str]]", epochs: int, native: bool, work_dir: Path, progress: Callable[[str], None]
) -> "dict[str, dict]":
    """Part 2: one short run of each setting (``epochs`` over ``train45k``, each in a fresh process): clean test
    top-1, NLL, training and wall minutes; without ``native`` bf16, ``auto`` is the array-loader run once more."""
    accuracy: "dict[str, dict]" = {}
    short = [
        "data.train_split=train45k",
        f"train.epochs={epochs}",
        f"train.eval_every={epochs}",
        "optim.warmup_epochs=0.5",
    ]
    for name, ov in settings.items():
        if name == STEPS[2][0] and not native:  # auto is fp32 here: the array-loader run, once more
            accuracy[name] = {**accuracy[STEPS[1][0]], "same_as": STEPS[1][0]}
            continue
        tic = time.perf_counter()
        summary = _in_fresh_process(_harness, ov + short, str(work_dir / f"accuracy_{time.time_ns()}"))
        wall = time.perf_counter() - tic
        train_min = summary["train_seconds"] / 60
        accuracy[name] = {
            "top1": summary["metrics"]["top1"],
            "nll": summary["metrics"]["nll"],
            "train_minutes": train_min,
            "wall_minutes": wall / 60,
        }
        progress(f"accuracy {name:28s} top-1 {summary['metrics']['top1']:.4f} in {train_min:.1f} min of training")
    return accuracy


def run(
    images: int = 6400,
    repeats: int = 3,
    epochs: int = 2,
    data_path: Optional[Path] = None,
    backbones: "tuple[str, ...]" = tuple(BACKBONES),
    out: Optional[Path] = Path("results/bench/upstream.md"),
    work_dir: Path = Path("runs/bench"),
    progress: Callable[[str], None] = print,
    breakdown_only: bool = False,
) -> dict:
    """Measure, then write the tables (Markdown and a JSON twin).

    Args:
        images: training images per throughput measurement (one epoch over the first ``images``).
        repeats: rounds of throughput measurements (every setting once a round).
        epochs: epochs of each accuracy run over ``train45k`` (0 skips part 2).
        data_path: the CIFAR-10N folder (default ``../shared/data/cifar10n``).
        backbones: the 32 px backbones to measure.
        breakdown_only: measure part 3 alone (``repeats`` rounds, about 30 s each) and write only its table.

    Raises:
        FileNotFoundError: no CIFAR-10N data.
        ValueError: a backbone that is not a timm model (:func:`harness.weights.check_timm_name`), or ``out`` or its
            JSON twin a file this bench did not write (:func:`harness.provenance.check_replaceable`); before any work.
    """
    from harness.weights import check_timm_name

    for name in () if breakdown_only else backbones:
        check_timm_name(name)
    if out is not None:
        title, key = (bench_breakdown.TITLE, "breakdown") if breakdown_only else (TITLE, "speed")
        check_replaceable(out, title, key, "harness bench upstream")
    data_path = Path(data_path or CIFAR10N)
    if not (data_path / "cifar10_jpeg.zip").is_file():
        raise FileNotFoundError(f"no cifar10_jpeg.zip in {str(data_path)!r}: pass --data-path to the CIFAR-10N folder")
    base = base_overrides(data_path)
    breakdown = bench_breakdown.measure(base + FAST, progress, repeats)
    if breakdown_only:
        summary = {"data": str(data_path), "breakdown": breakdown, "matmul": _in_fresh_process(matmul_rates)}
        if out is not None:
            bench_breakdown.write(Path(out), summary)
        return summary
    settings = {name: base + ov for name, ov in STEPS}
    settings.update({bb: base + backbone_overrides(bb) for bb in backbones})
    # decode the images into the cache once, before anything is timed
    _in_fresh_process(
        _harness,
        base + FAST + ["data.limit_train=256", "data.limit_eval=16", "train.epochs=1"],
        str(work_dir / f"warmup_{time.time_ns()}"),
    )

    native = native_bf16("cpu")
    speed = _throughput(settings, base, images, repeats, native, work_dir, progress)
    accuracy = _accuracy(settings, epochs, native, work_dir, progress) if epochs else {}

    summary = {
        "images": images,
        "repeats": repeats,
        "epochs": epochs,
        "data": str(data_path),
        "speed": speed,
        "native_bf16": native,
        "accuracy": accuracy,
        "settings": settings,
        "matmul": _in_fresh_process(matmul_rates),
        "breakdown": breakdown,
    }
    if out is not None:
        _write(Path(out), summary)
    return summary


def _write(out: Path, s: dict) -> None:
    prov = provenance()
    speed, acc = s["speed"], s["accuracy"]
    default = speed[STEPS[0][0]]

    def ratios(name: str) -> "list[float]":
        return [v / d for v, d in zip(speed[name], default)]

    lines = [
        markdown_header(TITLE, prov),
        f"Model: timm `resnet18` + low-rank HET head (R = 6, 100 MC samples), 32 px CIFAR-10N images (`worse` "
        f"labels), batch 128, SGD. Throughput: one epoch over {s['images']} training images in a fresh process, "
        f"training steps only, {s['repeats']} rounds with every setting measured once a round (interleaved). "
        "Ratio: to the default measured in the same round; median and range over rounds. Each step adds to "
        "the row above it. CPU-minutes = wall minutes x 2 cores.",
        "",
        f"`train.mixed_precision=auto` means {'bf16' if s['native_bf16'] else 'fp32'} on this CPU (native bf16, "
        f"AVX512-BF16 or AMX: {'yes' if s['native_bf16'] else 'no'}).",
        "",
        "| setting | images/s (each round) | median | x default (median, range) |",
        "|---|---|---|---|",
    ]
    pair = "+ 2 runs side by side, 1 thread each"
    extra = [FORCED_BF16] if FORCED_BF16 in speed else []
    for name in [n for n, _ in STEPS] + [pair, "bare loop (default setting)"] + extra:
        r = ratios(name)
        each = ", ".join(f"{v:.0f}" for v in speed[name])
        lines.append(
            f"| {name} | {each} | {statistics.median(speed[name]):.0f} | "
            f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f}) |"
        )
    fast, single = ratios(pair), ratios(STEPS[-1][0])
    verdict = "met" if statistics.median(fast) >= 4 else "not met"
    lines += [
        "",
        f"All steps together: **{statistics.median(fast):.2f}x** the default's training throughput "
        f"(range {min(fast):.2f}-{max(fast):.2f}; one run alone: {statistics.median(single):.2f}x; "
        f"target >= 4x: {verdict}).",
        "",
        f"This CPU ({s['matmul']['flags']}): a 2048 x 2048 matmul runs at {s['matmul']['fp32']:.3g} GFLOP/s in "
        f"fp32 and {s['matmul']['bf16']:.3g} in bf16 ({s['matmul']['bf16'] / s['matmul']['fp32']:.2f}x). "
        + (
            "The training step gains less, as the rows above show; the section below measures where."
            if s["native_bf16"]
            else "Without native bf16, bf16 is emulated: it is slower than fp32 here, and the bf16 step of "
            "the fast path cannot be had on this CPU, so auto trains in fp32."
        ),
        "",
        "32 px ResNets (`harness.backbones`: 3x3 stride-1 stem, no max-pool) in the fast setting "
        "(array loader, mixed precision auto, channels_last; pad-4 crop + flip, lr 0.1):",
        "",
        "| backbone | images/s (each round) | median | x default (median) |",
        "|---|---|---|---|",
    ]
    not_backbones = (*dict(STEPS), pair, "bare loop (default setting)", FORCED_BF16)
    for name in [n for n in speed if n not in not_backbones]:
        each = ", ".join(f"{v:.0f}" for v in speed[name])
        lines.append(
            f"| `{name}` | {each} | {statistics.median(speed[name]):.0f} | {statistics.median(ratios(name)):.2f} |"
        )
    if acc:
        lines += [
            "",
            f"Short runs: {s['epochs']} epochs over the 45,000 `train45k` images (worse labels), cosine "
            "schedule, evaluated on the clean 10,000-image test set; one run each (seed 0).",
            "",
            "| setting / backbone | clean test top-1 | NLL | training minutes | CPU-minutes | top-1 points per "
            "CPU-minute |",
            "|---|---|---|---|---|---|",
        ]
        for name, a in acc.items():
            cpu = 2 * a["train_minutes"]
            if "same_as" in a:
                name += f" (fp32 here: the run of '{a['same_as']}')"
            lines.append(
                f"| {name} | {100 * a['top1']:.2f}% | {a['nll']:.4f} | {a['train_minutes']:.1f} | {cpu:.1f} | "
                f"{100 * a['top1'] / cpu:.2f} |"
            )
    if "breakdown" in s:
        lines += bench_breakdown.section(s)
    atomic_write_text(out, "\n".join(lines) + "\n")
    atomic_write_text(out.with_suffix(".json"), json.dumps({"provenance": prov, **s}, indent=1))
