"""The registry of the head's covariance variants: one row per variant (:class:`CovarianceVariant`), read by the
head's options, the planner, the Σ analysis, the report, ``harness downstream --head`` and the parametrised tests.

Plain data (no torch), so that any layer may read it, the report included.
"""

from __future__ import annotations

from dataclasses import dataclass

#: rank used when ``num_factors`` is not given (paper Sec. 4, ImageNet). A fresh transfer head uses
#: :data:`TRANSFER_NUM_FACTORS` instead (tasks have 2 to 397 classes; 15 factors exceed K on most of them).
DEFAULT_NUM_FACTORS = 15
#: R of a fresh noisy transfer head (uncertainty-baselines' CIFAR ``num_factors`` 6), used as min(R, K) on a
#: K-class task: a transfer sweep shares one R over tasks of any K, while an upstream head built with R > K is
#: refused (its extra factors are redundant).
TRANSFER_NUM_FACTORS = 6


@dataclass(frozen=True)
class CovarianceVariant:
    """One covariance structure of the head: the registry row every other module reads (planner, Σ analysis,
    report, downstream ``--head``, CLI help, the parametrised tests), so a fact about a variant is written once.

    Attributes:
        name: the head's ``covariance`` option (upstream configs, ``config.json``).
        transfer_name: the short name of ``harness downstream --head`` and the experiment methods.
        has_factors: Σ(x) has a low-rank factor part of rank R (``num_factors``): the Σ analysis, the planner's
            R <= K rule and ``num_factors`` apply to it.
        input_dependent: the noise depends on x (``none`` has no noise at all).
        description: one line, as the docs and the CLI help say it.
    """

    name: str
    transfer_name: str
    has_factors: bool
    input_dependent: bool
    description: str


#: the covariance variants, in the order of the paper's ablations (Collier et al., CVPR 2021, Sec. 3 and Table 5)
VARIANTS = {
    v.name: v
    for v in (
        CovarianceVariant("none", "hom", False, False, "homoscedastic: a linear softmax/sigmoid layer, no noise"),
        CovarianceVariant("diagonal", "diag", False, True, "Σ(x) = diag(d(x)²): independent noise per class"),
        CovarianceVariant("low_rank", "het", True, True, "Σ(x) = V(x)V(x)ᵀ + diag(d(x)²), V(x) of rank R (HET)"),
        CovarianceVariant(
            "parameter_efficient",
            "pe",
            True,
            True,
            "Σ(x) = (V ∘ 1v(x)ᵀ)(V ∘ 1v(x)ᵀ)ᵀ + diag(d(x)²): a shared V scaled per input (HET-PE)",
        ),
    )
}
COVARIANCES = tuple(VARIANTS)
#: ``harness downstream --head`` name -> covariance
TRANSFER_HEADS = {v.transfer_name: v.name for v in VARIANTS.values()}


def has_factors(covariance: str) -> bool:
    """Whether a head of this ``covariance`` has a rank-R factor part (:class:`CovarianceVariant`).

    Raises:
        ValueError: an unknown covariance (the message lists the variants).
    """
    if covariance not in VARIANTS:
        raise ValueError(f"unknown covariance {covariance!r}: use one of {', '.join(map(repr, VARIANTS))}")
    return VARIANTS[covariance].has_factors
