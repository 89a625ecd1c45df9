"""One training-loop idiom for both stages (upstream pretraining, downstream fine-tuning), on ``accelerate``.

A run makes its :class:`accelerate.Accelerator` with :func:`make_accelerator` (``mixed_precision``,
``gradient_accumulation_steps``) and takes every micro-batch through :func:`accumulate_step`::

    with accelerator.accumulate(model):           # no gradient sync between micro-batches
        with accelerator.autocast():              # bf16 / fp16 where the run asks for it
            out = forward()
        loss = loss_of(out.float())               # the loss in fp32, as before autocast existed
        accelerator.backward(loss)                # / accumulation steps; fp16 loss scaling
        if accelerator.sync_gradients and clip:   # once per optimiser step
            accelerator.clip_grad_norm_(model.parameters(), clip)
        optimizer.step(); optimizer.zero_grad()   # the prepared optimiser steps on sync only

(accelerate's ``gradient_accumulation`` and ``autocast`` guides). In fp32 (``mixed_precision="no"``) every one
of these calls computes what the plain PyTorch loop computes: autocast is a null context, the loss is divided by
the accumulation steps as a hand-written loop divides it, and ``clip_grad_norm_`` is
``torch.nn.utils.clip_grad_norm_``.

**One mixed precision per process.** accelerate keeps its state (``AcceleratorState``, which holds the mixed
precision) once per process and refuses an ``Accelerator`` of another precision once it exists ("restart your
runtime completely and pass mixed_precision=..."); it has no public way to drop that state. So a run whose
precision differs from the one this process already holds raises :class:`PrecisionHeld` in
:func:`make_accelerator`, and the stages train it in a fresh process (:func:`in_fresh_process`) whose state
starts empty; runs of the precision already held (every run of a sweep, every job of a ``harness run`` worker)
share the process as before.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch


class PrecisionHeld(RuntimeError):
    """accelerate's state in this process already holds another mixed precision (or device type) than a run asks
    for; the run has to be trained in a fresh process (:func:`in_fresh_process`)."""


def held_precision() -> "Optional[tuple[str, str]]":
    """``(mixed precision, device type)`` of accelerate's state in this process, or None before the first
    ``Accelerator`` (``accelerate.state.is_initialized``)."""
    from accelerate.state import AcceleratorState, is_initialized

    if not is_initialized():
        return None
    state = AcceleratorState()
    return str(state.mixed_precision), state.device.type


def make_accelerator(
    precision: str,
    grad_accum_steps: int = 1,
    log_with: Optional[list] = None,
    project_dir: Optional[str] = None,
    cpu: bool = False,
) -> Any:
    """An ``accelerate.Accelerator`` with ``mixed_precision=precision`` and ``gradient_accumulation_steps``.

    Args:
        precision: ``no``, ``bf16`` or ``fp16`` (resolved already: :func:`harness.training.precision.resolve`).
        grad_accum_steps: micro-batches per optimiser step (:func:`accumulate_step` counts them; a data loader
            that accelerate did not prepare never forces a sync at its end).
        log_with: trackers (names or ``accelerate.tracking.GeneralTracker`` objects; :mod:`harness.training.trackers`);
            None or empty: no tracker (accelerate is given None, so it warns of no missing tracker).
        project_dir: where trackers that need a folder write.
        cpu: train on the CPU even where a GPU is visible.

    Raises:
        PrecisionHeld: this process's accelerate state holds another precision, or a GPU where ``cpu`` is asked
            (the message names both).
    """
    from accelerate import Accelerator

    held = held_precision()
    if held is not None and (held[0] != precision or (cpu and held[1] != "cpu")):
        raise PrecisionHeld(
            f"accelerate holds mixed precision {held[0]!r} on {held[1]} in this process and the run "
            f"asks for {precision!r}{' on cpu' if cpu else ''}: it trains in a fresh process"
        )
    return Accelerator(
        mixed_precision=precision,
        gradient_accumulation_steps=grad_accum_steps,
        log_with=list(log_with or ()) or None,
        project_dir=project_dir,
        cpu=cpu,
    )


def accumulate_step(
    accelerator: Any,
    model: torch.nn.Module,
    optimizer: Any,
    forward: Callable[[], torch.Tensor],
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    clip_grad_norm: Optional[float] = None,
    non_finite: Optional[Callable[[float], Exception]] = None,
) -> "tuple[torch.Tensor, bool]":
    """One micro-batch: forward under autocast, the loss in fp32, backward, and on the micro-batch that completes
    an optimiser step the clip and the step (see the module docstring for the idiom).

    Args:
        accelerator: the run's accelerator (:func:`make_accelerator`).
        model: the model being trained (prepared by accelerate or not).
        optimizer: the optimiser prepared by accelerate (``accelerator.prepare``): it steps and zeroes only when
            gradients are synchronised.
        forward: computes the model's output ``[B, K]`` (run under ``accelerator.autocast()``).
        loss_of: the scalar loss of the output, computed in fp32.
        clip_grad_norm: global gradient-norm clip (None or 0: off).
        non_finite: the exception to raise for a NaN or infinite loss (called with its value), before backward.

    Returns:
        ``(loss, synced)``: the loss before the division by the accumulation steps, and whether this micro-batch
        completed an optimiser step (``accelerator.sync_gradients``).

    Raises:
        The exception ``non_finite`` makes for a non-finite loss (``FloatingPointError`` without it).
    """
    with accelerator.accumulate(model):
        with accelerator.autocast():
            out = forward()
        loss = loss_of(out.float())
        if not torch.isfinite(loss.detach()):
            value = loss.item()
            raise (non_finite(value) if non_finite else FloatingPointError(f"the loss is {value}"))
        accelerator.backward(loss)
        if accelerator.sync_gradients and clip_grad_norm:
            accelerator.clip_grad_norm_(model.parameters(), clip_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return loss, bool(accelerator.sync_gradients)


def in_fresh_process(fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` in a new (spawned) Python process with this process's number of torch threads; its result,
    or its exception re-raised here. ``fn`` and ``args`` must pickle (module-level functions, dataclasses)."""
    import concurrent.futures as cf
    import multiprocessing as mp

    with cf.ProcessPoolExecutor(
        1, mp_context=mp.get_context("spawn"), initializer=torch.set_num_threads, initargs=(torch.get_num_threads(),)
    ) as pool:
        return pool.submit(fn, *args).result()


#: the layers that normalise each channel over the images of a training forward pass (timm's ``BatchNormAct2d`` is a
#: ``BatchNorm2d``); a pass of one image cannot train them (:func:`check_batch_norm_batch`)
BATCH_NORMS = (
    torch.nn.BatchNorm1d,
    torch.nn.BatchNorm2d,
    torch.nn.BatchNorm3d,
    torch.nn.LazyBatchNorm1d,
    torch.nn.LazyBatchNorm2d,
    torch.nn.LazyBatchNorm3d,
    torch.nn.SyncBatchNorm,
)


def batch_norm_layers(model: torch.nn.Module) -> "list[str]":
    """The names of ``model``'s :data:`BATCH_NORMS` layers (``named_modules`` order; any device, ``meta`` too)."""
    return [name for name, module in model.named_modules() if isinstance(module, BATCH_NORMS)]


def check_batch_norm_batch(layers: "list[str]", images: int, given: str, fix: str, owner: str = "the model") -> None:
    """Refuse training forward passes of fewer than 2 images for a model with BatchNorm layers.

    Args:
        layers: the model's BatchNorm layers (:func:`batch_norm_layers`); none: nothing to refuse.
        images: the images of one training forward pass on one process (after gradient accumulation and any split
            across processes).
        given: the setting that makes it so, as the user gave it (``data.batch_size=1 ...``).
        fix: what to give instead (``use data.batch_size=2 or more ...``).
        owner: the model, as the message names it (``backbone resnet50``).

    Raises:
        ValueError: ``images`` < 2 and ``layers``: names the setting, the first layer, the rule and the fix (torch's
            own error would come at the first step, after the run's files were written, naming neither).
    """
    if images >= 2 or not layers:
        return
    raise ValueError(
        f"{given}, and {owner} has {len(layers)} BatchNorm layer(s) (e.g. {layers[0]}): BatchNorm normalises each "
        "channel over the images of a training forward pass, so a pass of one image cannot train it (torch refuses it "
        "where a feature map is 1x1, elsewhere each image would be normalised by its own statistics, unlike at "
        f"evaluation); {fix}"
    )
