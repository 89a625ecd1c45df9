"""The training losses of the upstream stage (``train.loss``) and what each run records of its loss.

Moved from :mod:`harness.upstream.train` unchanged (that module re-exports :func:`training_loss` and
:func:`forward_corrected_nll`).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from harness.data.noise import empirical_transition, transition_matrix
from harness.upstream.config import UpstreamConfig


def forward_corrected_nll(logits: torch.Tensor, target: torch.Tensor, log_transition: torch.Tensor) -> torch.Tensor:
    """Forward loss correction: the mean over examples of -log (pᵀT)_ỹ, the NLL of the noisy label ỹ
    under the noisy-label distribution the model implies, with p = softmax(logits) the model's
    distribution over clean classes and T[c, j] = P(noisy = j | clean = c) (Patrini et al., CVPR
    2017, "Making deep neural networks robust to label noise: a loss correction approach", Sec. 3.1,
    Theorem 2). For a HET head the logits are log p̄, so p is its MC-averaged probability.

    Computed in log space: log (pᵀT)_ỹ = logsumexp_c (log p_c + log T[c, ỹ]), with log T = -inf where
    T = 0; only the column of each target enters, so the gradient is finite whenever that column
    has a non-zero entry (always, for labels drawn from T).

    Args:
        logits: ``[B, K]`` (p = softmax(logits); computed in their dtype).
        target: ``[B]`` int64 noisy labels.
        log_transition: ``[K, K]`` log T (``torch.log`` of a row-stochastic T).

    Returns:
        Scalar loss.
    """
    log_p = F.log_softmax(logits, dim=-1)
    columns = log_transition.to(log_p.dtype).t()[target]  # [B, K]: log T[c, ỹ_b] over clean classes c
    return -torch.logsumexp(log_p + columns, dim=-1).mean()


def training_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    multilabel: bool,
    loss: str = "nll",
    label_smoothing: float = 0.1,
    log_transition: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The training loss of a batch (``train.loss``).

    Multi-label (multi-hot ``target`` ``[B, K]``): sigmoid cross-entropy summed over classes and
    averaged over examples (UB ``sigmoid_xent``). Single-label (``target`` ``[B]`` ints or soft
    ``[B, K]``), on ``logits`` ``[B, K]``: ``nll``, softmax cross-entropy; ``label_smoothing``, the
    cross-entropy against (1 - ε)·onehot(y) + ε/K with ε = ``label_smoothing`` (Szegedy et al.,
    CVPR 2016, Sec. 7; ``F.cross_entropy(..., label_smoothing=ε)``); ``forward``,
    :func:`forward_corrected_nll` with ``log_transition`` ``[K, K]``.

    Raises:
        ValueError: unknown ``loss``, ``forward`` without ``log_transition``, or a loss other than
            ``nll`` on multi-label targets.
    """
    if multilabel:
        if loss != "nll":
            raise ValueError(f"train.loss={loss} applies to single-label (softmax) training; multi-label takes nll")
        return F.binary_cross_entropy_with_logits(logits, target.float(), reduction="sum") / logits.shape[0]
    if loss == "nll":
        return F.cross_entropy(logits, target)
    if loss == "label_smoothing":
        return F.cross_entropy(logits, target, label_smoothing=label_smoothing)
    if loss == "forward":
        if log_transition is None:
            raise ValueError("train.loss=forward needs the log transition matrix of the label noise")
        return forward_corrected_nll(logits, target, log_transition)
    raise ValueError(f"unknown train.loss {loss!r}: use nll, label_smoothing or forward")


def loss_setup(
    cfg: UpstreamConfig, clean_labels: Optional[np.ndarray], noisy_labels: Optional[np.ndarray], num_classes: int
) -> "tuple[dict[str, Any], Optional[torch.Tensor]]":
    """The training loss as a run records it (``run.json`` / ``metrics.json`` ``loss``) and, for ``forward``, the
    ``[K, K]`` log transition matrix it corrects with: the noise's nominal matrix, or for input-dependent noise
    (which has none) the empirical one of the noisy labels against ``clean_labels`` (both None for shards, whose
    labels are streamed: input-dependent noise is refused there before this)."""
    loss_info: "dict[str, Any]" = {"name": cfg.train.loss}
    log_transition = None
    if cfg.train.loss == "label_smoothing":
        loss_info["label_smoothing"] = cfg.train.label_smoothing
    elif cfg.train.loss == "forward":
        noise = cfg.data.label_noise
        if noise["kind"] == "input_dependent":
            t = empirical_transition(clean_labels, noisy_labels, num_classes)
            loss_info["transition"] = "empirical"
        else:
            t = transition_matrix(
                noise["kind"], num_classes, noise.get("rate", 0.0), noise.get("matrix"), noise.get("permutation")
            )
            loss_info["transition"] = "nominal"
        loss_info["matrix"] = np.round(t, 4).tolist()
        log_transition = torch.log(torch.as_tensor(t, dtype=torch.float32))
    return loss_info, log_transition
