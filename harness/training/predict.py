"""One way to predict: a model in eval mode, without gradients, over ``(x, y, index)`` batches, under the run's
mixed-precision context. Upstream's evaluation, downstream's fine-tune and the re-prediction of a saved run
(:func:`harness.runs.predict_model`) all call :func:`predict_logits`."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch


def predict_logits(
    model: torch.nn.Module,
    batches: Iterable,
    autocast: Optional[Callable[[], Any]] = None,
    device: "Optional[torch.device | str]" = None,
    memory_format: torch.memory_format = torch.contiguous_format,
    gather: Optional[Callable[[tuple], tuple]] = None,
) -> "dict[str, np.ndarray]":
    """The model's outputs on every batch, in order.

    Args:
        model: called on ``x``; put in eval mode here. A HET head returns log p̄ (its ``forward``), a linear head
            its logits: both are the ``logits`` of :class:`~harness.uncertainty.predictions.Predictions`.
        batches: ``(x [B, C, H, W], y [B] or [B, K], index [B])`` tuples (a loader, or any iterable).
        autocast: the run's mixed-precision context (``accelerator.autocast``), or None for fp32.
        device: where ``x`` is moved (None: where the loader put it, as an accelerate-prepared loader does).
        memory_format: of ``x`` (``torch.channels_last`` for a channels-last model).
        gather: applied to ``(logits, y, index)`` of each batch before it is kept (accelerate's
            ``gather_for_metrics``, to collect every process's part).

    Returns:
        ``{"logits": float32 [N, K], "targets": [N] or [N, K], "index": [N]}`` (numpy).
    """
    model.eval()
    outs: "dict[str, list]" = {"logits": [], "targets": [], "index": []}
    with torch.no_grad():
        for x, y, idx in batches:
            x = x.to(device) if device is not None else x
            with (autocast or contextlib.nullcontext)():
                logits = model(x.contiguous(memory_format=memory_format)).float()
            y, idx = torch.as_tensor(np.asarray(y) if not torch.is_tensor(y) else y), torch.as_tensor(idx)
            if gather is not None:
                logits, y, idx = gather((logits, y, idx))
            for key, value in zip(outs, (logits, y, idx)):
                outs[key].append(value.cpu())
    return {k: torch.cat(v).numpy() for k, v in outs.items()}
