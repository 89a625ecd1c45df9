"""Upstream runs refuse training passes of one image for a backbone with BatchNorm (audit12 A12-21), in
:func:`harness.upstream.config.validate` (the backbone built on PyTorch's meta device) and once the model is built
(:func:`harness.upstream.parts.build_training`). Apart from both so that the config imports no training part."""

from __future__ import annotations

from typing import Any, Optional

import torch


def check_batch_norm(cfg: Any, model: Optional[torch.nn.Module] = None) -> None:
    """Refuse ``data.batch_size=1`` (``cfg``: an :class:`~harness.upstream.config.UpstreamConfig`) for a backbone with
    BatchNorm layers (:func:`harness.training.loop.check_batch_norm_batch`). data.batch_size is the images of one
    training forward pass on each process (each process's loader gives it data.batch_size a pass, whole batches only,
    so no pass is smaller; ``train.grad_accum_steps`` adds passes).

    Args:
        model: the built model; None (:func:`harness.upstream.config.validate`): the backbone built on PyTorch's meta
            device (nothing allocated, no weights read); an ``hf-hub:`` / ``local-dir:`` backbone, or one that cannot
            be built there, is checked once built (:func:`harness.upstream.parts.build_training`).

    Raises:
        ValueError: naming data.batch_size, a BatchNorm layer and the fix (2 or more).
    """
    from harness.training.loop import batch_norm_layers, check_batch_norm_batch

    size = cfg.data.batch_size
    if size >= 2:
        return
    layers = meta_batch_norm_layers(cfg.model) if model is None else batch_norm_layers(model)
    check_batch_norm_batch(
        layers,
        size,
        f"data.batch_size={size} is the images of one training forward pass on each process "
        "(train.grad_accum_steps adds passes, not images)",
        "use data.batch_size=2 or more (a smaller train.grad_accum_steps keeps the images an optimiser step), or a "
        "backbone without BatchNorm",
        f"backbone {cfg.model.backbone}",
    )


def meta_batch_norm_layers(model_cfg: Any) -> "list[str]":
    """The BatchNorm layers of the backbone ``model_cfg`` (a config's ``model`` section) names, built on PyTorch's meta
    device (nothing allocated, no weights read); ``[]`` for an ``hf-hub:`` / ``local-dir:`` backbone or one that
    cannot be built there (an unknown name or a refused option is named when the model is built). Read by
    :func:`check_batch_norm` and the experiment's transfer check (:mod:`harness.experiment.transfer_checks`)."""
    from harness.backbone_sources import create_backbone
    from harness.training.loop import batch_norm_layers
    from harness.weights import HF_HUB_PREFIX, LOCAL_DIR_PREFIX, TIMM_PREFIX

    if model_cfg.backbone.removeprefix(TIMM_PREFIX).startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        return []
    try:
        with torch.device("meta"):
            return batch_norm_layers(create_backbone(model_cfg.backbone, None, **dict(model_cfg.backbone_kwargs)))
    except Exception:  # noqa: BLE001 -- named when the model is built
        return []
