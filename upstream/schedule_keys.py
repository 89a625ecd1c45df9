"""The keys each choice of a setting reads, and the check that a config sets no key its choices ignore: the optim keys
of each learning-rate schedule (:data:`SCHEDULE_KEYS`) and of each optimiser (:data:`OPTIMIZER_KEYS`), the train keys of
each loss (:data:`LOSS_KEYS`), checked by :func:`harness.rules.check_unread_keys`. Apart from
:mod:`harness.upstream.optim` so that :mod:`harness.upstream.config` can call it (optim imports config)."""

from __future__ import annotations

from typing import Any

from harness.rules import check_unread_keys

#: the optim keys each schedule reads, besides the warm-up (``warmup_epochs`` / ``warmup_steps``, read by every one): a
#: key another schedule reads, set away from its default, is refused (:func:`check_schedule_keys`)
SCHEDULE_KEYS = {"step": ("decay_epochs", "decay_steps", "decay_factor"), "cosine": ("min_lr",), "constant": ()}
#: the optim keys each optimiser reads, besides those of all (``lr``, the weight decays): ``torch.optim.SGD``'s
#: momentum, ``torch.optim.AdamW``'s betas (:mod:`harness.upstream.optim`)
OPTIMIZER_KEYS = {"sgd": ("momentum", "nesterov"), "adamw": ("betas",)}
#: the train keys each training loss reads (``train.loss``; :func:`harness.upstream.train.run`)
LOSS_KEYS = {"nll": (), "label_smoothing": ("label_smoothing",), "forward": ()}


def check_schedule_keys(cfg: Any) -> None:
    """A step schedule with its decay points, and no key set that ``cfg.schedule`` (:data:`SCHEDULE_KEYS`) or
    ``cfg.name`` (:data:`OPTIMIZER_KEYS`) does not read, ``cfg`` an :class:`~harness.upstream.config.OptimSection`.

    Raises:
        ValueError: ``schedule=step`` without decay points, a key the schedule or the optimiser does not read, or a
            cosine ``min_lr`` above ``lr``.
    """
    if cfg.schedule == "step" and not (cfg.decay_epochs or cfg.decay_steps):
        raise ValueError(
            "optim.schedule=step decays the learning rate at given points and none are given (it would train at a "
            "constant rate): set optim.decay_epochs (e.g. [30, 60]) or optim.decay_steps, or use "
            "optim.schedule=constant or cosine"
        )
    check_unread_keys(cfg, "optim", "schedule", SCHEDULE_KEYS, "schedule")
    check_unread_keys(cfg, "optim", "name", OPTIMIZER_KEYS, "optimiser")
    if cfg.min_lr > cfg.lr:
        raise ValueError(
            f"optim.min_lr={cfg.min_lr:g} is above optim.lr={cfg.lr:g}: the cosine schedule would raise the learning "
            "rate as it decays; give optim.min_lr <= optim.lr (0: decay to zero)"
        )


def check_loss_keys(cfg: Any) -> None:
    """No key set that ``cfg.loss`` does not read (:data:`LOSS_KEYS`), ``cfg`` a
    :class:`~harness.upstream.config.TrainSection`.

    Raises:
        ValueError: e.g. ``train.label_smoothing`` away from its default under ``train.loss=nll``.
    """
    check_unread_keys(cfg, "train", "loss", LOSS_KEYS, "loss")
