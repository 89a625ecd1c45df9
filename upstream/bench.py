"""``harness bench upstream``: training throughput of the harness loop against a bare PyTorch loop.

Both loops train the same model (timm backbone + HET head) on the same images with the same
transform, batch size, loader workers and optimiser. The harness figure is the loop's own
``train_images_per_sec`` (training steps only: evaluation and checkpoint writes excluded, as the
bare loop has neither); the bare loop is ``for x, y in loader: loss.backward(); opt.step()``.
Each measurement runs in a fresh process; the best of ``repeats`` is kept for both.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import time
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

from harness.io import atomic_write_text
from harness.provenance import markdown_header, provenance

CIFAR10N = Path("../shared/data/cifar10n")


def bench_overrides(data_path: Optional[Path], images: int, backbone: str) -> "list[str]":
    """Config overrides of the measured run: one epoch over ``images`` training images."""
    data = (["data.source=cifar10n", f"data.path={data_path}", "data.label_set=worse", "data.crop_scale=0.35"]
            if data_path else ["data.source=digits", "data.hflip=false"])
    return data + [
        f"model.backbone={backbone}", "model.head.covariance=low_rank", "model.head.num_factors=6",
        "model.head.train_mc_samples=100", "model.head.eval_mc_samples=10", "data.image_size=32",
        "data.eval_resize=32", "data.batch_size=128", "data.num_workers=2", f"data.limit_train={images}",
        "data.limit_eval=128", "train.epochs=1", "train.log_every=10", "optim.lr=0.05", "optim.warmup_epochs=0",
    ]


def _as_in_a_cli_process() -> None:
    """A spawned measurement process would start loader workers by spawning too (seconds of
    imports each); fork them, as a process started from the command line does on Linux."""
    if "fork" in mp.get_all_start_methods():
        mp.set_start_method("fork", force=True)


def _harness(overrides: "list[str]", out_dir: str) -> float:
    _as_in_a_cli_process()
    from harness.config import load_config
    from upstream.config import UpstreamConfig
    from upstream.train import run

    cfg = load_config(UpstreamConfig, None, overrides + [f"output_dir={out_dir}"])
    run_dir = run(cfg, progress=True)
    return json.loads((run_dir / "metrics.json").read_text())["train_images_per_sec"]


class _Plain(torch.utils.data.Dataset):
    """A dataset as a bare loop would write it: image -> transform, nothing else."""

    def __init__(self, base, transform) -> None:
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int):
        image, target = self.base[i]
        return self.transform(image), target


def _bare(overrides: "list[str]") -> float:
    """The same model, data, transform and optimiser in a plain PyTorch loop."""
    _as_in_a_cli_process()
    from harness.config import load_config
    from harness.data.sources import build_split
    from harness.data.transforms import train_transform
    from harness.models import ModelConfig, build_model
    from upstream.config import UpstreamConfig

    cfg = load_config(UpstreamConfig, None, overrides)
    base = build_split(cfg.data, cfg.data.train_split)
    torch.manual_seed(cfg.seed)
    plain = _Plain(base, train_transform(cfg.data.image_size, cfg.data.crop_scale, cfg.data.hflip))
    loader = torch.utils.data.DataLoader(plain, cfg.data.batch_size, shuffle=True, drop_last=True,
                                         num_workers=cfg.data.num_workers)
    model = build_model(ModelConfig(cfg.model.backbone, base.num_classes, dict(cfg.model.head))).train()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.optim.lr, momentum=cfg.optim.momentum,
                          weight_decay=cfg.optim.weight_decay)
    images, tic = 0, time.perf_counter()
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        images += x.shape[0]
    return images / (time.perf_counter() - tic)


def run(images: int = 6400, repeats: int = 2, backbone: str = "resnet18", data_path: Optional[Path] = None,
        out: Optional[Path] = Path("results/bench/upstream.md"), work_dir: Path = Path("runs/bench"),
        progress=print) -> dict:
    """Measure both loops ``repeats`` times (alternating, fresh processes) and write the table.

    Args:
        images: training images per measurement (one epoch over the first ``images``).
        backbone: timm model.
        data_path: CIFAR-10N folder; default ``../shared/data/cifar10n`` when present, else digits.
    """
    if data_path is None and (CIFAR10N / "cifar10_jpeg.zip").is_file():
        data_path = CIFAR10N
    overrides = bench_overrides(data_path, images, backbone)
    ctx = mp.get_context("spawn")
    result: "dict[str, list[float]]" = {"harness": [], "bare": []}
    for r in range(repeats):
        for impl in ("bare", "harness"):
            with cf.ProcessPoolExecutor(1, mp_context=ctx) as pool:
                if impl == "harness":
                    fut = pool.submit(_harness, overrides, str(work_dir / f"upstream_{r}_{time.time_ns()}"))
                else:
                    fut = pool.submit(_bare, overrides)
                result[impl].append(fut.result())
            progress(f"{impl:8s} repeat {r + 1}: {result[impl][-1]:.1f} images/s")
    best = {k: max(v) for k, v in result.items()}
    overhead = 1 - best["harness"] / best["bare"]
    summary = {"images": images, "backbone": backbone, "data": str(data_path or "digits"), "runs": result,
               "best": best, "overhead": overhead}
    if out is not None:
        prov = provenance()
        lines = [markdown_header("Upstream training throughput: harness loop vs bare PyTorch loop", prov),
                 f"Model: timm `{backbone}` + low-rank HET head (R = 6, 100 MC samples), 32 px images, batch 128, "
                 f"2 loader workers, SGD; one epoch over {images} training images of "
                 f"{'CIFAR-10N (worse labels)' if data_path else 'scikit-learn digits'}. Training steps only.", "",
                 "| loop | images/s (each run) | best |", "|---|---|---|"]
        for impl in ("bare", "harness"):
            lines.append(f"| {impl} | {', '.join(f'{v:.1f}' for v in result[impl])} | {best[impl]:.1f} |")
        verdict = "met" if overhead <= 0.05 else "not met"
        lines += ["", f"Harness overhead: {100 * overhead:.1f}% of the bare loop's throughput "
                      f"(target <= 5%): **{verdict}**.", ""]
        atomic_write_text(Path(out), "\n".join(lines))
        atomic_write_text(Path(out).with_suffix(".json"), json.dumps({"provenance": prov, **summary}, indent=1))
    return summary
