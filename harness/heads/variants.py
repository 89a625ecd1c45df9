"""The registry of the head's covariance variants: one row per variant (:class:`CovarianceVariant`), read by the
head (its layers, the tensors its sampler reads, its parameter count), the planner, the Σ analysis, the report,
``harness downstream --head`` and the parametrised tests. A new variant is one :func:`register_variant` call: the
head, the compile and smoke tests and every reader above pick it up from here.

No torch at import time (each variant's ``build`` imports it when it builds the layers), so that any part of the
project may read the registry, the report included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

#: rank used when ``num_factors`` is not given (paper Sec. 4, ImageNet). A fresh transfer head uses
#: :data:`TRANSFER_NUM_FACTORS` instead (tasks have 2 to 397 classes; 15 factors exceed K on most of them).
DEFAULT_NUM_FACTORS = 15
#: R of a fresh noisy transfer head (uncertainty-baselines' CIFAR ``num_factors`` 6), used as min(R, K) on a
#: K-class task: a transfer sweep shares one R over tasks of any K, while an upstream head built with R > K is
#: refused (its extra factors are redundant).
TRANSFER_NUM_FACTORS = 6

#: the noise forms the sampler (:mod:`harness.heads.sampling`) draws, n = V ε_R + d ⊙ ε_W in the noise space W:
#: ``"diagonal"`` (no V), ``"low_rank"`` (a per-row V(x) ``[N, W, R]``), ``"parameter_efficient"`` (V(x) =
#: diag(v(x)) V with v(x) ``[N, W]`` and a shared V ``[W, R]``); a variant without noise has form None.
FORMS = ("diagonal", "low_rank", "parameter_efficient")
#: the forms with a rank-R factor part
FACTOR_FORMS = ("low_rank", "parameter_efficient")


class NoiseTensors(NamedTuple):
    """What a variant hands the sampler for features ``h`` ``[N, D]`` (besides μ(x) and d(x), which every head has).

    Attributes:
        factors: V(x) ``[N, W, R]`` (form ``low_rank``) or v(x) ``[N, W]`` (``parameter_efficient``), else None.
        hom_factors: the shared V ``[W, R]`` (``parameter_efficient``), else None.
        mean_shift: ``[N, W]`` added to the noise's mean (the PE bias, v(x) ⊙ b_V), or None.
        latent: the named tensors :meth:`~harness.heads.het.HeteroscedasticHead.latent_parameters` reports.
    """

    factors: Any = None
    hom_factors: Any = None
    mean_shift: Any = None
    latent: "dict[str, Any]" = {}


@dataclass(frozen=True)
class CovarianceVariant:
    """One covariance structure of the head: the registry row every other module reads (head, planner, Σ
    analysis, report, downstream ``--head``, CLI help, the parametrised tests), so a fact about a variant is
    written once.

    Attributes:
        name: the head's ``covariance`` option (upstream configs, ``config.json``).
        transfer_name: the short name of ``harness downstream --head`` and the experiment methods.
        form: the sampler's noise form (:data:`FORMS`), None without noise.
        description: one line, as the docs and the CLI help say it.
        layers: the attribute names of the layers ``build`` adds to the head (beyond ``loc`` and ``diag``, which
            every noisy head has), in the order they are registered.
        input_dependent_layers: those of ``layers`` whose output depends on x (initialised with
            ``cov_init_scale`` under ``init="flax"``).
        build: ``build(head) -> {name: nn.Module}``, the layers, from ``head.in_features``, ``head.noise_width``
            (W), ``head.num_factors`` (R) and ``head.pe_noise_bias``.
        tensors: ``tensors(head, h) -> NoiseTensors`` for features ``h`` ``[N, D]``.
        count: ``count(d1, w, r, pe_noise_bias) -> int``, the parameters of ``layers`` (d1 = D + 1).
    """

    name: str
    transfer_name: str
    form: Optional[str]
    description: str
    layers: "tuple[str, ...]" = ()
    input_dependent_layers: "tuple[str, ...]" = ()
    build: Callable[[Any], dict] = field(default=lambda head: {}, repr=False)
    tensors: Callable[[Any, Any], NoiseTensors] = field(default=lambda head, h: NoiseTensors(), repr=False)
    count: Callable[[int, int, int, bool], int] = field(default=lambda d1, w, r, bias: 0, repr=False)

    @property
    def has_factors(self) -> bool:
        """Σ(x) has a low-rank factor part of rank R (``num_factors``): the Σ analysis, the planner's R <= K rule
        and ``num_factors`` apply to it."""
        return self.form in FACTOR_FORMS

    @property
    def input_dependent(self) -> bool:
        """The head draws noise (``none`` has none; every other variant's d(x) depends on x)."""
        return self.form is not None


def _build_low_rank(head) -> dict:
    from torch import nn

    return {"scale": nn.Linear(head.in_features, head.noise_width * head.num_factors)}


def _low_rank(head, h) -> NoiseTensors:
    v = head.scale(h).view(h.shape[0], head.noise_width, head.num_factors)
    return NoiseTensors(factors=v, latent={"V": v})


def _build_pe(head) -> dict:
    from torch import nn

    return {
        "scale_het": nn.Linear(head.in_features, head.noise_width),
        "scale_hom": nn.Linear(head.num_factors, head.noise_width, bias=head.pe_noise_bias),
    }


def _pe(head, h) -> NoiseTensors:
    v, hom, bias = head.scale_het(h), head.scale_hom.weight, head.scale_hom.bias
    latent = {"v": v, "V": hom} if bias is None else {"v": v, "V": hom, "b_V": bias}
    # v ⊙ (V ε + b) = v ⊙ V ε + v ⊙ b: the bias is a (learned) shift of the mean
    return NoiseTensors(v, hom, None if bias is None else v * bias, latent)


#: the covariance variants, in the order of the paper's ablations (Collier et al., CVPR 2021, Sec. 3 and Table 5);
#: layer names follow edward2 (``edward2/tensorflow/layers/heteroscedastic.py``)
VARIANTS: "dict[str, CovarianceVariant]" = {}
#: ``harness downstream --head`` name -> covariance (kept in step with :data:`VARIANTS` by :func:`register_variant`)
TRANSFER_HEADS: "dict[str, str]" = {}


def register_variant(variant: CovarianceVariant) -> CovarianceVariant:
    """Add a covariance variant to the registry: the head builds it (``covariance=variant.name``), the sampler
    draws its noise form, and every reader of :data:`VARIANTS` and :data:`TRANSFER_HEADS` lists it.

    Raises:
        ValueError: a name or transfer name already registered, or a form not in :data:`FORMS`.
    """
    if variant.name in VARIANTS or variant.transfer_name in TRANSFER_HEADS:
        raise ValueError(
            f"covariance variant {variant.name!r} (transfer name {variant.transfer_name!r}) clashes with a registered "
            f"one ({', '.join(f'{v.name}/{v.transfer_name}' for v in VARIANTS.values())}): choose new names"
        )
    if variant.form is not None and variant.form not in FORMS:
        raise ValueError(f"variant {variant.name!r}: form {variant.form!r} is not a noise form: use one of {FORMS}")
    if not set(variant.input_dependent_layers) <= set(variant.layers):
        raise ValueError(f"variant {variant.name!r}: input_dependent_layers must be among layers {variant.layers}")
    VARIANTS[variant.name] = variant
    TRANSFER_HEADS[variant.transfer_name] = variant.name
    return variant


for _v in (
    CovarianceVariant("none", "hom", None, "homoscedastic: a linear softmax/sigmoid layer, no noise"),
    CovarianceVariant("diagonal", "diag", "diagonal", "Σ(x) = diag(d(x)²): independent noise per class"),
    CovarianceVariant(
        "low_rank",
        "het",
        "low_rank",
        "Σ(x) = V(x)V(x)ᵀ + diag(d(x)²), V(x) of rank R (HET)",
        layers=("scale",),
        input_dependent_layers=("scale",),
        build=_build_low_rank,
        tensors=_low_rank,
        count=lambda d1, w, r, bias: d1 * w * r,
    ),
    CovarianceVariant(
        "parameter_efficient",
        "pe",
        "parameter_efficient",
        "Σ(x) = (V ∘ 1v(x)ᵀ)(V ∘ 1v(x)ᵀ)ᵀ + diag(d(x)²): a shared V scaled per input (HET-PE)",
        layers=("scale_het", "scale_hom"),
        input_dependent_layers=("scale_het",),
        build=_build_pe,
        tensors=_pe,
        count=lambda d1, w, r, bias: d1 * w + (r + int(bias)) * w,
    ),
):
    register_variant(_v)
#: the names of the built-in variants (a variant registered later is in :data:`VARIANTS` only)
COVARIANCES = tuple(VARIANTS)


def variant(covariance: str) -> CovarianceVariant:
    """The registry row of ``covariance``.

    Raises:
        ValueError: an unknown covariance (the message lists the variants).
    """
    if covariance not in VARIANTS:
        raise ValueError(f"unknown covariance {covariance!r}: use one of {', '.join(map(repr, VARIANTS))}")
    return VARIANTS[covariance]


def has_factors(covariance: str) -> bool:
    """Whether a head of this ``covariance`` has a rank-R factor part (:class:`CovarianceVariant`).

    Raises:
        ValueError: an unknown covariance (the message lists the variants).
    """
    return variant(covariance).has_factors


def noise_layers(input_dependent_only: bool = False) -> "tuple[str, ...]":
    """The names of the head's layers that produce the noise covariance, over every registered variant: ``diag``
    (d(x)) and each variant's ``layers`` (with ``input_dependent_only``, those whose output depends on x)."""
    out = ["diag"]
    for v in VARIANTS.values():
        for name in v.input_dependent_layers if input_dependent_only else v.layers:
            if name not in out:
                out.append(name)
    return tuple(out)
