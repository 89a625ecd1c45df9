"""The evaluation noise of a model's heteroscedastic heads, as results record it (``metrics.json``'s ``eval_noise``).

The noise is each head's :attr:`~harness.heads.het.HeteroscedasticHead.noise_definition`: upstream's outputs record
it (:func:`eval_noise`), re-evaluation compares it with what this version draws (:func:`noise_definition_of`,
from a run's config alone) and the shift predictions key their cache by it.
"""

from __future__ import annotations

from typing import Optional

from torch import nn

from harness.heads.het import HeteroscedasticHead


def noise_definition_of(head_options: dict) -> Optional[str]:
    """The :attr:`~HeteroscedasticHead.noise_definition` a head built with ``head_options`` (a run config's
    ``model.head``) has, without its model: a small stand-in head is built with them.

    Raises:
        ValueError: options the head refuses.
    """
    k = max(2, int(head_options.get("num_factors") or 2))
    return HeteroscedasticHead(max(8, k), k, **head_options).noise_definition


def eval_noise(model: nn.Module) -> Optional[str]:
    """The evaluation noise of every :class:`HeteroscedasticHead` in ``model`` (its own modules included), as
    results record it (``metrics.json``'s ``eval_noise``): their :attr:`~HeteroscedasticHead.noise_definition`,
    the distinct ones joined by ``", "``; None when no head draws noise (homoscedastic heads, or none at all)."""
    found = {m.noise_definition for m in model.modules() if isinstance(m, HeteroscedasticHead)}
    found.discard(None)
    return ", ".join(sorted(found)) or None
