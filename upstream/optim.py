"""Optimiser and learning-rate schedule of the upstream stage (paper Appendix B).

SGD with momentum and *explicit* L2 (PyTorch's coupled ``weight_decay`` adds λθ to the gradient,
which is exactly the gradient of (λ/2)||θ||²), with its own weight for the kernels that map to the
covariance; or AdamW with decoupled weight decay. Schedule: linear warm-up, then step decay at
given epochs, cosine, or constant.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.heads.variants import noise_layers
from harness.upstream.config import OPTIMIZERS, SCHEDULES, OptimSection


def _covariance_parameter(name: str) -> bool:
    """A parameter of a layer that produces the noise covariance (the HET head's, over every registered variant)."""
    return any(name == f"head.{n}" or name.startswith(f"head.{n}.") for n in noise_layers())


def param_groups(model: nn.Module, weight_decay: float, cov_weight_decay: float) -> "list[dict]":
    """Three groups: covariance kernels (``cov_weight_decay``), other kernels (``weight_decay``), and
    biases / norm scales / temperature (no decay). A kernel is a parameter with >= 2 dims."""
    cov, other, none = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2:
            none.append(p)
        elif _covariance_parameter(name):
            cov.append(p)
        else:
            other.append(p)
    groups = [
        {"params": other, "weight_decay": weight_decay, "name": "kernels"},
        {"params": cov, "weight_decay": cov_weight_decay, "name": "covariance_kernels"},
        {"params": none, "weight_decay": 0.0, "name": "no_decay"},
    ]
    return [g for g in groups if g["params"]]


def build_optimizer(model: nn.Module, cfg: OptimSection) -> torch.optim.Optimizer:
    """SGD (momentum, explicit L2) or AdamW (decoupled decay) over :func:`param_groups`.

    Raises:
        ValueError: unknown optimiser name or non-positive learning rate.
    """
    if cfg.name not in OPTIMIZERS:
        raise ValueError(f"unknown optim.name {cfg.name!r}: use one of {', '.join(OPTIMIZERS)}")
    if not cfg.lr > 0:
        raise ValueError(f"optim.lr must be > 0, got {cfg.lr}")
    cov_wd = cfg.weight_decay if cfg.cov_weight_decay is None else cfg.cov_weight_decay
    groups = param_groups(model, cfg.weight_decay, cov_wd)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov)
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas))


def lr_multiplier(cfg: OptimSection, steps_per_epoch: int, epochs: int, total_steps: "int | None" = None):
    """``step -> factor`` of the peak learning rate (for ``LambdaLR``), ``step`` counting optimiser steps.

    Warm-up: (step + 1) / warm-up steps (``warmup_steps``, or ``warmup_epochs`` x ``steps_per_epoch``). Step:
    decay_factor ** (decay points passed: ``decay_steps``, or ``decay_epochs`` x ``steps_per_epoch``). Cosine:
    from 1 to min_lr / lr over the steps after warm-up, up to ``total_steps`` (default ``epochs`` x
    ``steps_per_epoch``).

    Raises:
        ValueError: unknown schedule.
    """
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"unknown optim.schedule {cfg.schedule!r}: use one of {', '.join(SCHEDULES)}")
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else int(round(cfg.warmup_epochs * steps_per_epoch))
    total = max(1, total_steps if total_steps is not None else epochs * steps_per_epoch)
    boundaries = sorted(cfg.decay_steps or (int(round(e * steps_per_epoch)) for e in cfg.decay_epochs))
    floor = cfg.min_lr / cfg.lr

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if cfg.schedule == "step":
            return cfg.decay_factor ** sum(step >= b for b in boundaries)
        if cfg.schedule == "cosine":
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return factor
