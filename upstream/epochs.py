"""The epochs of an upstream run (step 6 of :func:`harness.upstream.train.run`): each micro-batch through the
shared idiom (:func:`harness.training.loop.accumulate_step`), then after each optimiser step the schedule, the
logs, the evaluations and checkpoints due, and the stop requests; after each epoch its evaluation, few-shot
monitor and checkpoint."""

from __future__ import annotations

import time
from typing import Any

from tqdm.auto import tqdm

from harness.progress import check_ctrl_c
from harness.training.loop import accumulate_step
from harness.upstream.checkpoint import save_state
from harness.upstream.evaluation import DIVERGED_FIX, TrainingDiverged, evaluate, monitor
from harness.upstream.losses import training_loss
from harness.upstream.parts import Training


class Preempted(RuntimeError):
    """Training stopped early because ``stop_requested`` asked it to (a preemption or time-limit signal, see
    :mod:`harness.upstream.launch`); the state was saved at that step, so running the same config again resumes
    there."""


def train_epochs(t: Training) -> bool:
    """Train from the run's position to its end (``train.epochs``, or ``train.steps`` optimiser steps).

    Returns:
        False when ``stop_after_steps`` stopped the run (after checkpointing), True when it trained to its end.

    Raises:
        TrainingDiverged: a NaN or infinite loss (the last checkpoint stays intact).
        Preempted: ``stop_requested`` returned True on some process (the state is saved).
    """
    while t.p.epoch < t.epochs and not t.finished():
        if not _train_epoch(t):
            return False
        _end_epoch(t)
    return True


def _stop_agreed(accelerator: Any, stop_requested: Any) -> bool:
    """Whether any process's ``stop_requested()`` is True: a collective (``accelerator.set_trigger`` /
    ``check_trigger``, an all-reduce of one scalar), so every process must call it at the same step."""
    if stop_requested():
        accelerator.set_trigger()
    return bool(accelerator.check_trigger())


def _epoch_loader(t: Training) -> Any:
    """This epoch's batches from the run's position: a stream without the batches already done (resume),
    undecoded; in-memory data in the epoch's order, skipping the batches done (accelerate's
    ``skip_first_batches``)."""
    p, d = t.p, t.data
    if d.stream:
        d.train_ds.use_epoch(p.epoch, skip_batches=p.batch_in_epoch)
        return d.train_loader
    d.sampler.use_epoch(p.epoch)
    d.train_ds.use_epoch(p.epoch)
    return t.accelerator.skip_first_batches(d.train_loader, p.batch_in_epoch) if p.batch_in_epoch else d.train_loader


def _train_epoch(t: Training) -> bool:
    """The rest of the current epoch; False when ``stop_after_steps`` stopped the run."""
    p, cfg, accelerator, d = t.p, t.cfg, t.accelerator, t.data
    loader = _epoch_loader(t)
    t.model.train()
    bar = tqdm(
        loader,
        total=len(d.train_loader),
        initial=p.batch_in_epoch,
        disable=not (t.show_progress and t.main),
        desc=f"epoch {p.epoch + 1}/{t.epochs}",
        leave=False,
    )
    p.tic = time.perf_counter()

    def diverged(value: float) -> TrainingDiverged:
        last = t.ckpt_dir / "last.pt"
        kept = (
            f"the last checkpoint, {last}, is intact and resumable"
            if last.is_file()
            else "no checkpoint was written yet: the run starts over"
        )
        return TrainingDiverged(f"loss is {value} at epoch {p.epoch}, step {p.step}; {DIVERGED_FIX} ({kept})")

    for x, y, _ in bar:
        if d.stream:  # loaders accelerate did not prepare: on the device here
            x, y = x.to(accelerator.device), y.to(accelerator.device)
        x = x.contiguous(memory_format=t.memory_format)
        loss, synced = accumulate_step(
            accelerator,
            t.model,
            t.optimizer,
            lambda: t.model(x),
            lambda out: training_loss(
                out, y, d.multilabel, cfg.train.loss, cfg.train.label_smoothing, d.log_transition
            ),
            cfg.optim.clip_grad_norm,
            diverged,
        )
        p.batch_in_epoch += 1
        p.timing["train_images"] += x.shape[0] * accelerator.num_processes
        if not synced:
            continue
        t.scheduler.step()
        p.step += 1
        if p.step % cfg.train.log_every == 0:
            accelerator.log({"train/loss": loss.item(), "train/lr": t.scheduler.get_last_lr()[0]}, step=p.step)
            bar.set_postfix(loss=f"{loss.item():.4f}")
        if not _after_step(t):
            return False
        if t.finished():
            break
    p.timing["train_seconds"] += time.perf_counter() - p.tic
    bar.close()
    return True


def _after_step(t: Training) -> bool:
    """After an optimiser step: the evaluation and few-shot monitor due by steps (an epoch's end evaluates on its
    own), a checkpoint when something was evaluated, ``train.checkpoint_every`` is due, ``stop_after_steps`` is
    reached or a stop is requested; False when ``stop_after_steps`` stops the run here.

    Raises:
        Preempted: a stop request on any process (every process saves the state at this step first).
    """
    check_ctrl_c()  # a Ctrl-C CPython dropped in a finaliser (harness.progress.on_ctrl_c) stops the run here
    p, cfg, accelerator = t.p, t.cfg, t.accelerator
    mid_epoch = p.batch_in_epoch < len(t.data.train_loader)
    at = round(p.epoch + p.batch_in_epoch / len(t.data.train_loader), 4)
    evaluated = bool(
        cfg.train.eval_every_steps and p.step % cfg.train.eval_every_steps == 0 and not t.finished() and mid_epoch
    )
    if evaluated:
        evaluate(t, at)
    if (
        t.fewshot_tasks
        and t.main
        and cfg.train.fewshot_every_steps
        and not t.finished()
        and p.step % cfg.train.fewshot_every_steps == 0
        and mid_epoch
    ):
        monitor(t, at)
        evaluated = True
    # a stop request (preemption) on any process stops all of them at this step, after saving the state
    preempted = t.stop_requested is not None and _stop_agreed(accelerator, t.stop_requested) and not t.finished()
    stop = t.stop_after_steps is not None and p.step >= t.stop_after_steps
    if evaluated or (cfg.train.checkpoint_every and p.step % cfg.train.checkpoint_every == 0) or stop or preempted:
        p.timing["train_seconds"] += time.perf_counter() - p.tic
        save_state(t)
        p.tic = time.perf_counter()
    if stop:
        accelerator.end_training()
        return False
    if preempted:
        accelerator.end_training()
        raise Preempted(
            f"{t.run_dir}: stopped at step {p.step} on request (preemption), the state saved in "
            f"{t.ckpt_dir / 'last.pt'}; the same config resumes there"
        )
    return True


def _end_epoch(t: Training) -> None:
    """The end of an epoch (a run that reached ``train.steps`` ends its last, partial epoch here): the evaluation
    every ``train.eval_every`` epochs and after the last, the few-shot monitor likewise, and a checkpoint."""
    p, cfg = t.p, t.cfg
    p.epoch, p.batch_in_epoch = p.epoch + 1, 0
    last = p.epoch == t.epochs or t.finished()
    if p.epoch % cfg.train.eval_every == 0 or last:
        evaluate(t, p.epoch)
    if t.fewshot_tasks and t.main and ((cfg.train.fewshot_every and p.epoch % cfg.train.fewshot_every == 0) or last):
        monitor(t, p.epoch)
    save_state(t)
