"""The optim keys each learning-rate schedule reads (:data:`SCHEDULE_KEYS`), and the check that a config sets no key
its schedule ignores. Apart from :mod:`harness.upstream.optim` so that :mod:`harness.upstream.config` can call it
(optim imports config)."""

from __future__ import annotations

from typing import Any

#: the optim keys each schedule reads, besides the warm-up (``warmup_epochs`` / ``warmup_steps``, read by every one): a
#: key another schedule reads, set away from its default, is refused (:func:`check_schedule_keys`)
SCHEDULE_KEYS = {"step": ("decay_epochs", "decay_steps", "decay_factor"), "cosine": ("min_lr",), "constant": ()}


def check_schedule_keys(cfg: Any) -> None:
    """A step schedule with its decay points, and no key set that ``cfg.schedule`` does not read (:data:`SCHEDULE_KEYS`),
    ``cfg`` an :class:`~harness.upstream.config.OptimSection` (its defaults tell which keys are set).

    Raises:
        ValueError: ``schedule=step`` without decay points, a key the schedule does not read, or a cosine ``min_lr``
            above ``lr``.
    """
    if cfg.schedule == "step" and not (cfg.decay_epochs or cfg.decay_steps):
        raise ValueError(
            "optim.schedule=step decays the learning rate at given points and none are given (it would train at a "
            "constant rate): set optim.decay_epochs (e.g. [30, 60]) or optim.decay_steps, or use "
            "optim.schedule=constant or cosine"
        )
    default, read = type(cfg)(), SCHEDULE_KEYS.get(cfg.schedule, ())
    for key in (k for keys in SCHEDULE_KEYS.values() for k in keys if k not in read):
        if getattr(cfg, key) != getattr(default, key):
            users = [s for s, keys in SCHEDULE_KEYS.items() if key in keys]
            raise ValueError(
                f"optim.{key}={getattr(cfg, key)} is read only by optim.schedule={' or '.join(users)}, and this run's "
                f"schedule is {cfg.schedule}: remove optim.{key}, or use optim.schedule={users[0]}"
            )
    if cfg.min_lr > cfg.lr:
        raise ValueError(
            f"optim.min_lr={cfg.min_lr:g} is above optim.lr={cfg.lr:g}: the cosine schedule would raise the learning "
            "rate as it decays; give optim.min_lr <= optim.lr (0: decay to zero)"
        )
