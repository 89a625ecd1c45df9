"""The fine-tuning schedules of a transfer (:mod:`harness.downstream.finetune`): how many optimiser steps a run
takes, the learning-rate factor of each step, and mixup's alpha.

``bit_hyperrule`` is BiT's published rule (Kolesnikov et al. 2020; google-research/big_transfer
``bit_hyperrule.py``): 500 steps below 20k training examples (warm-up 100, x0.1 after steps 200/300/400), 10k below
500k (500; 3k/6k/9k), 20k above (500; 6k/12k/18k), the rate rising linearly from 0, mixup (alpha 0.1) from 20k
examples; ``staircase`` scales that shape to any number of steps (warm-up 20%, x0.1 at 40/60/80%), the schedule of
the VTAB sweep; ``ta`` and ``cosine`` are the task_adaptation and big_vision recipes.
"""

from __future__ import annotations

import math
from typing import Any, Optional

#: schedule -> (warm-up fraction, decay fractions; None: cosine), or None for the BiT-HyperRule's own supports
SCHEDULES = {
    "staircase": (0.2, (0.4, 0.6, 0.8)),
    "ta": (0.08, (0.3, 0.6, 0.9)),
    "cosine": (0.05, None),
    "bit_hyperrule": None,
}


def bit_hyperrule_supports(num_train: int) -> "tuple[int, int, int, int, int]":
    """BiT-HyperRule schedule for ``num_train`` training examples: (end of warm-up, 3 decay steps, total
    steps) = (100, 200, 300, 400, 500) below 20k examples, (500, 3000, 6000, 9000, 10000) below 500k,
    else (500, 6000, 12000, 18000, 20000) (big_transfer ``bit_hyperrule.get_schedule``)."""
    if num_train < 20_000:
        return 100, 200, 300, 400, 500
    if num_train < 500_000:
        return 500, 3000, 6000, 9000, 10_000
    return 500, 6000, 12_000, 18_000, 20_000


def resolved_steps(cfg: Any, num_train: int) -> int:
    """Optimiser steps of a run (``cfg``: a :class:`harness.downstream.finetune.FinetuneConfig`, read for its
    ``schedule`` and ``steps``): ``cfg.steps``, or the BiT-HyperRule's for ``num_train`` examples.

    Raises:
        ValueError: steps not positive; steps missing outside ``bit_hyperrule``; steps other than the
            rule's with ``bit_hyperrule``.
    """
    if cfg.schedule == "bit_hyperrule":
        rule = bit_hyperrule_supports(num_train)[-1]
        if cfg.steps not in (None, rule):
            raise ValueError(
                f"the BiT-HyperRule trains {rule} steps on {num_train} examples, not {cfg.steps}: leave "
                "steps unset, or use the staircase schedule for another length"
            )
        return rule
    if cfg.steps is None or cfg.steps < 1:
        raise ValueError(f"steps must be >= 1 with the {cfg.schedule!r} schedule, got {cfg.steps}")
    return cfg.steps


def lr_schedule(steps: int, kind: str = "staircase", num_train: Optional[int] = None):
    """``step -> lr factor`` for optimiser step 0, 1, ... of ``steps``.

    ``bit_hyperrule`` (needs ``num_train``): ``step / warm-up`` during the warm-up (0 at step 0), then
    x0.1 after each decay step (big_transfer ``bit_hyperrule.get_lr``: 1 up to step 200, 0.1 from 201
    for 500 steps). Others: linear warm-up ``(step + 1) / warm-up``, then x0.1 from each decay step
    (``staircase``: warm-up 20%, decays at 40/60/80%; ``ta``: 8%, 30/60/90%) or cosine to 0
    (``cosine``: warm-up 5%).

    Raises:
        ValueError: unknown schedule.
    """
    if kind not in SCHEDULES:
        raise ValueError(f"unknown fine-tuning schedule {kind!r}: use one of {', '.join(SCHEDULES)}")
    if kind == "bit_hyperrule":
        warm, *decays, _ = bit_hyperrule_supports(num_train)
        return lambda step: step / warm if step < warm else 0.1 ** sum(d < step for d in decays)
    warm_frac, decay_fracs = SCHEDULES[kind]
    warmup = max(1, round(warm_frac * steps))
    decays = [round(f * steps) for f in decay_fracs] if decay_fracs else []

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if decay_fracs is None:
            return 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, steps - warmup))))
        return 0.1 ** sum(step >= d for d in decays)

    return factor


def mixup_alpha(num_train: int, alpha: Optional[float] = None) -> float:
    """BiT-HyperRule: mixup with alpha 0.1 from 20k training examples, none below (or ``alpha``)."""
    return alpha if alpha is not None else (0.1 if num_train >= 20_000 else 0.0)
