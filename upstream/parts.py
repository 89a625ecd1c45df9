"""The parts of an upstream run the training loop works on: the model, optimiser and schedule (step 3 of
:func:`harness.upstream.train.run`), and the run's position and record so far (:class:`Progress`), which a
checkpoint saves and a resume restores (:mod:`harness.upstream.checkpoint`)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from harness.models import ModelConfig, build_model
from harness.upstream.batch_norm import check_batch_norm
from harness.upstream.config import UpstreamConfig
from harness.upstream.optim import build_optimizer, lr_multiplier
from harness.upstream.pretrained import check_pretrained_file
from harness.upstream.rundata import RunData


def _timing() -> "dict[str, float]":
    # train_seconds, train_images: training steps only (no eval, no checkpoints); wall_seconds: the
    # whole run (data, model, evaluation, checkpoints) summed over its sessions up to its last checkpoint
    return {"train_seconds": 0.0, "train_images": 0, "wall_seconds": 0.0}


@dataclass
class Progress:
    """Where a run is and what it has recorded: the epoch, the batches done in it, the optimiser steps, the
    timing, one entry per evaluation (``history``, the lines of ``metrics.jsonl``) and per few-shot record
    (``fewshot``), the best evaluation (``best``); ``session_start`` and ``tic`` are this session's clocks (its
    start, and the start of the training time not yet counted)."""

    epoch: int = 0
    batch_in_epoch: int = 0
    step: int = 0
    timing: dict = field(default_factory=_timing)
    history: list = field(default_factory=list)
    fewshot: list = field(default_factory=list)
    best: dict = field(default_factory=dict)
    session_start: float = field(default_factory=time.perf_counter)
    tic: float = 0.0


@dataclass
class Training:
    """One run in training: its settings, folder, accelerator, data, model (prepared), optimiser (prepared),
    schedule, memory format, length (``epochs``; ``total_steps`` when ``train.steps`` counts), few-shot monitor
    tasks, the caller's progress-bar and stop settings, and its :class:`Progress`."""

    cfg: UpstreamConfig
    run_dir: Path
    accelerator: Any
    data: RunData
    model: torch.nn.Module
    optimizer: Any
    scheduler: Any
    memory_format: torch.memory_format
    epochs: int
    total_steps: Optional[int]
    fewshot_tasks: Optional[list]
    show_progress: bool = True
    stop_after_steps: Optional[int] = None
    stop_requested: Optional[Callable[[], bool]] = None
    p: Progress = field(default_factory=Progress)

    @property
    def main(self) -> bool:
        return bool(self.accelerator.is_main_process)

    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    def finished(self) -> bool:
        """Whether ``train.steps`` optimiser steps are done (never, when ``train.epochs`` counts)."""
        return self.total_steps is not None and self.p.step >= self.total_steps


def build_training(
    cfg: UpstreamConfig, run_dir: Path, data: RunData, accelerator: Any, fewshot_tasks: Optional[list]
) -> Training:
    """The model (built, its head's bias set by ``model.head_bias_init``, in the memory format of
    ``train.channels_last``), the optimiser, both prepared by accelerate with the in-memory loaders (not the shard
    loaders: accelerate would split their streams across processes a second time), and the learning-rate
    schedule over ``train.steps`` optimiser steps (the last epoch may be partial) or ``train.epochs`` epochs.

    Raises:
        ValueError: an unknown backbone, a harness run's model.pt as model.pretrained_file
            (:func:`check_pretrained_file`), weights that do not fit (:func:`harness.models.build_model`); data.batch_size=1
            for a backbone with BatchNorm (:func:`harness.upstream.batch_norm.check_batch_norm`).
    """
    model_cfg = ModelConfig(cfg.model.backbone, data.num_classes, dict(cfg.model.head), dict(cfg.model.backbone_kwargs))
    check_pretrained_file(cfg.model.pretrained_file)  # validate checked it; the file may have changed since
    model = build_model(model_cfg, cfg.model.pretrained_file)
    check_batch_norm(cfg, model)  # a backbone validate could not build on the meta device
    if cfg.model.head_bias_init is not None:
        torch.nn.init.constant_(model.head.loc.bias, cfg.model.head_bias_init)
    memory_format = torch.channels_last if cfg.train.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    optimizer = build_optimizer(model, cfg.optim)
    if data.stream:
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        model, optimizer, data.train_loader, data.eval_loader = accelerator.prepare(
            model, optimizer, data.train_loader, data.eval_loader
        )
    steps_per_epoch = max(1, len(data.train_loader) // cfg.train.grad_accum_steps)
    total_steps = cfg.train.steps
    epochs = cfg.train.epochs if total_steps is None else math.ceil(total_steps / steps_per_epoch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lr_multiplier(cfg.optim, steps_per_epoch, epochs, total_steps)
    )
    if data.log_transition is not None:
        data.log_transition = data.log_transition.to(accelerator.device)
    return Training(
        cfg, run_dir, accelerator, data, model, optimizer, scheduler, memory_format, epochs, total_steps, fewshot_tasks
    )
