"""Heads built with the argument names of edward2's ``MCSoftmaxDenseFA`` / ``MCSigmoidDenseFA``
(edward2 ``edward2/tensorflow/layers/heteroscedastic.py``), for code ported from the reference."""

from __future__ import annotations

from typing import Optional

from harness.heads.het import HeteroscedasticHead
from harness.heads.options import DEFAULT_TEMPERATURE_BOUNDS


def _reference_head(
    link: str,
    in_features: int,
    num_classes: int,
    num_factors: int,
    temperature: float,
    parameter_efficient: bool,
    train_mc_samples: int,
    test_mc_samples: int,
    share_samples_across_batch: bool,
    tune_temperature: bool,
    temperature_lower_bound: Optional[float],
    temperature_upper_bound: Optional[float],
    latent_dim: Optional[int],
    eps: Optional[float],
    **kwargs,
) -> HeteroscedasticHead:
    if latent_dim is not None and latent_dim != in_features:
        raise ValueError(f"latent_dim must equal in_features ({in_features}) for HET-XL, got {latent_dim}")
    if num_factors < 0:
        raise ValueError(f"num_factors must be >= 0 (0 = diagonal), got {num_factors}")
    covariance = "diagonal" if num_factors == 0 else ("parameter_efficient" if parameter_efficient else "low_rank")
    lo = DEFAULT_TEMPERATURE_BOUNDS[0] if temperature_lower_bound is None else temperature_lower_bound
    hi = DEFAULT_TEMPERATURE_BOUNDS[1] if temperature_upper_bound is None else temperature_upper_bound
    return HeteroscedasticHead(
        in_features,
        num_classes,
        covariance=covariance,
        link=link,
        num_factors=num_factors or None,
        temperature=temperature,
        learn_temperature=tune_temperature,
        temperature_bounds=(lo, hi),
        noise_space="pre_logits" if latent_dim is not None else "logits",
        train_mc_samples=train_mc_samples,
        eval_mc_samples=test_mc_samples,
        share_samples_across_batch=share_samples_across_batch,
        clip_eps=eps,
        **kwargs,
    )


def MCSoftmaxDenseFA(  # noqa: N802 - the reference's name
    num_classes: int,
    num_factors: int,
    temperature: float = 1.0,
    parameter_efficient: bool = False,
    train_mc_samples: int = 1000,
    test_mc_samples: int = 1000,
    share_samples_across_batch: bool = False,
    tune_temperature: bool = False,
    temperature_lower_bound: Optional[float] = None,
    temperature_upper_bound: Optional[float] = None,
    latent_dim: Optional[int] = None,
    eps: Optional[float] = None,
    *,
    in_features: int,
    **kwargs,
) -> HeteroscedasticHead:
    """Softmax HET head with edward2's ``MCSoftmaxDenseFA`` argument names (edward2 ``edward2/tensorflow/layers/heteroscedastic.py``).

    PyTorch needs the input width up front: pass ``in_features=D``. ``num_factors=0`` gives the
    diagonal model; ``latent_dim=D`` gives HET-XL. ``eps=None`` (default) averages exactly in log
    space; ``eps=1e-7`` reproduces the reference's clipping. Further keyword arguments go to
    :class:`HeteroscedasticHead`.
    """
    return _reference_head(
        "softmax",
        in_features,
        num_classes,
        num_factors,
        temperature,
        parameter_efficient,
        train_mc_samples,
        test_mc_samples,
        share_samples_across_batch,
        tune_temperature,
        temperature_lower_bound,
        temperature_upper_bound,
        latent_dim,
        eps,
        **kwargs,
    )


def MCSigmoidDenseFA(  # noqa: N802 - the reference's name
    num_outputs: int,
    num_factors: int = 0,
    temperature: float = 1.0,
    parameter_efficient: bool = False,
    train_mc_samples: int = 1000,
    test_mc_samples: int = 1000,
    share_samples_across_batch: bool = False,
    tune_temperature: bool = False,
    temperature_lower_bound: Optional[float] = None,
    temperature_upper_bound: Optional[float] = None,
    latent_dim: Optional[int] = None,
    eps: Optional[float] = None,
    *,
    in_features: int,
    **kwargs,
) -> HeteroscedasticHead:
    """Sigmoid (multilabel) HET head with edward2's ``MCSigmoidDenseFA`` argument names.

    Same conventions as :func:`MCSoftmaxDenseFA`; ``num_factors=0`` (default) is diagonal.
    """
    return _reference_head(
        "sigmoid",
        in_features,
        num_outputs,
        num_factors,
        temperature,
        parameter_efficient,
        train_mc_samples,
        test_mc_samples,
        share_samples_across_batch,
        tune_temperature,
        temperature_lower_bound,
        temperature_upper_bound,
        latent_dim,
        eps,
        **kwargs,
    )
