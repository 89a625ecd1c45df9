"""The correctness part of ``harness bench device`` (:mod:`harness.bench.device`): seeded training steps of a het
model repeated with deterministic algorithms (identical losses), resumed from a checkpoint half way (identical),
repeated with the default algorithms (within :data:`NONDET_RTOL`), and its evaluation on the device against the
CPU's (within the Monte Carlo tolerance :data:`MC_Z` σ·sqrt(2/S) + :data:`FLOAT_ATOL`). Sizes from a
:class:`~harness.bench.device_parts.Sizes`; runs in this process."""

from __future__ import annotations

import contextlib
import copy
import math
import tempfile
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from harness.bench.device_parts import Sizes, guard
from harness.io import atomic_torch_save

#: relative loss difference allowed between two seeded runs without deterministic algorithms (bf16, a few steps)
NONDET_RTOL = 1e-2
#: device vs CPU evaluation: |p̄_dev - p̄_cpu| <= MC_Z · σ · sqrt(2 / S) + FLOAT_ATOL per class probability, σ the
#: per-sample standard deviation of the softmax over the S samples (two independent S-sample means differ by
#: σ·sqrt(2/S) in standard deviation; MC_Z = 6 leaves a chance of 1e-9 per element); FLOAT_ATOL covers TF32 convs
MC_Z, FLOAT_ATOL = 6.0, 1e-4


def _losses(s: Sizes, dev: torch.device, acc, resume_at: Optional[int] = None, tmp: str = "") -> tuple:
    """Seeded training losses of a het model over ``c_steps`` steps of seeded synthetic batches; with ``resume_at``
    the state (model, optimiser, RNG) is saved at that step and a fresh model and optimiser resume from it."""
    from harness.models import ModelConfig, build_model
    from harness.training.loop import accumulate_step

    het = {"covariance": "low_rank", "num_factors": s.R, "train_mc_samples": s.S, "eval_mc_samples": s.S}

    def fresh(seed: int) -> tuple:
        torch.manual_seed(seed)
        model = build_model(ModelConfig(s.backbone, s.K, het)).to(dev, memory_format=torch.channels_last).train()
        return model, acc.prepare(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9))

    (model, opt), losses = fresh(0), []
    for i in range(s.c_steps):
        if i == resume_at:
            rng = {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if dev.type == "cuda" else []}
            atomic_torch_save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": rng}, tmp)
            state = torch.load(tmp, map_location="cpu", weights_only=True)
            model, opt = fresh(1)
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["opt"])
            torch.set_rng_state(state["rng"]["cpu"])
            if state["rng"]["cuda"]:
                torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        g = torch.Generator().manual_seed(1000 + i)
        x = torch.randn(s.c_batch, 3, s.c_image, s.c_image, generator=g).to(dev, memory_format=torch.channels_last)
        y = torch.randint(0, s.K, (s.c_batch,), generator=g).to(dev)
        loss, _ = accumulate_step(acc, model, opt, lambda: model(x), lambda out: F.cross_entropy(out, y))
        losses.append(float(loss.detach()))
    return losses, model


@contextlib.contextmanager
def _deterministic(on: bool):
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def _eval_agreement(model: torch.nn.Module, s: Sizes, dev: torch.device) -> dict:
    """Evaluation (fp32) of ``model`` on ``dev`` and of its copy on the CPU: the largest gap in class probability
    and the gap in Monte Carlo standard errors (the bound: :data:`MC_Z`, :data:`FLOAT_ATOL`)."""
    x = torch.randn(s.eval_batch, 3, s.c_image, s.c_image, generator=torch.Generator().manual_seed(7))
    model = model.eval()
    cpu = copy.deepcopy(model).cpu()
    with torch.no_grad():
        p_dev = model(x.to(dev, memory_format=torch.channels_last)).float().softmax(-1).cpu()
        p_cpu = cpu(x).softmax(-1)
        sigma = cpu.head.sample_logits(cpu.pre_logits(x)).softmax(-1).std(dim=-2)
    gap, scale = (p_dev - p_cpu).abs(), sigma * math.sqrt(2 / s.S)
    return {
        "max_abs_gap": float(gap.max()),
        "max_z": float((gap / (scale + 1e-12)).max()),
        "ok": bool((gap <= MC_Z * scale + FLOAT_ATOL).all()),
    }


def measure_correctness(s: Sizes, dev: torch.device, acc, progress: Callable) -> "list[dict]":
    """Rows ``{check, ok, losses | max_rel_gap | max_abs_gap, max_z}`` (or ``{check, error}``): seeded steps twice
    with deterministic algorithms (identical losses), resumed from a checkpoint at half way (identical), twice with
    the default algorithms (within :data:`NONDET_RTOL`), and device vs CPU evaluation (:func:`_eval_agreement`)."""
    done: dict = {}

    def repeat() -> dict:
        with _deterministic(True):
            (a, done["model"]), (b, _) = _losses(s, dev, acc), _losses(s, dev, acc)
        done["a"] = a
        return {"ok": a == b, "losses": [a, b]}

    def resume() -> dict:
        with tempfile.TemporaryDirectory() as tmp, _deterministic(True):
            a = done.get("a") or _losses(s, dev, acc)[0]
            resumed = _losses(s, dev, acc, s.c_steps // 2, str(Path(tmp) / "state.pt"))[0]
        return {"ok": resumed == a, "losses": [a, resumed]}

    def default() -> dict:
        with _deterministic(False):
            c, d = _losses(s, dev, acc)[0], _losses(s, dev, acc)[0]
        rel = max(abs(u - v) / max(abs(u), 1e-12) for u, v in zip(c, d))
        return {"ok": rel <= NONDET_RTOL, "max_rel_gap": rel, "losses": [c, d]}

    checks = {
        "seeded steps twice, deterministic algorithms": repeat,
        f"checkpoint at step {s.c_steps // 2} of {s.c_steps}, resumed (deterministic)": resume,
        f"seeded steps twice, default algorithms (rtol {NONDET_RTOL:g})": default,
        f"het eval on the device vs the CPU (S={s.S}, z <= {MC_Z:g})": lambda: _eval_agreement(
            done.get("model") or _losses(s, dev, acc)[1], s, dev
        ),
    }
    rows = []
    for name, check in checks.items():
        rows.append({"check": name, **guard(check)})
        progress(f"[device] correctness: {name}: {'ok' if rows[-1].get('ok') else 'FAILED'}")
    return rows
