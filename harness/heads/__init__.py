"""Heteroscedastic classification heads: HET (Collier et al., CVPR 2021) and HET-XL (Collier, Jenatton et al., ICLR 2023).

- :mod:`~harness.heads.het`: :class:`HeteroscedasticHead`, the drop-in replacement of a final ``nn.Linear``
  (:mod:`~harness.heads.checks`: its value checks; :mod:`~harness.heads.noise_record`: the evaluation noise as
  results record it);
- :mod:`~harness.heads.sampling`: the chunked Monte Carlo average of the tempered softmax / sigmoid
  (:mod:`~harness.heads.chunk`: what one chunk of samples computes, in log space; :mod:`~harness.heads.linear_space`:
  the eager chunk kernels in linear space; :mod:`~harness.heads.planning`: a call's noise and chunks);
- :mod:`~harness.heads.variants`: the registry of covariance variants (:data:`VARIANTS`, :func:`register_variant`);
- :mod:`~harness.heads.options`: the options, layer names, initialisation and closed-form parameter counts;
- :mod:`~harness.heads.edward2`: constructors with edward2's argument names;
- :mod:`~harness.heads.noise`: the noise (seeded generators in eager mode, counter-based inside ``torch.compile``);
- :mod:`~harness.heads.hetify`: :func:`hetify`, a model's classifier replaced by a HET head in one call.
"""

from harness.heads.edward2 import MCSigmoidDenseFA, MCSoftmaxDenseFA
from harness.heads.het import HeteroscedasticHead
from harness.heads.hetify import HeteroscedasticConvHead, hetify
from harness.heads.options import (
    COVARIANCES,
    DEFAULT_NUM_FACTORS,
    INPUT_DEPENDENT_NOISE_LAYERS,
    LINKS,
    MIN_SCALE,
    NOISE_LAYERS,
    NOISE_SPACES,
    TRANSFER_HEADS,
    TRANSFER_NUM_FACTORS,
    VARIANTS,
    CovarianceVariant,
    count_head_parameters,
    has_factors,
)
from harness.heads.variants import register_variant

__all__ = [
    "HeteroscedasticHead",
    "HeteroscedasticConvHead",
    "hetify",
    "MCSoftmaxDenseFA",
    "MCSigmoidDenseFA",
    "count_head_parameters",
    "VARIANTS",
    "CovarianceVariant",
    "register_variant",
    "has_factors",
    "TRANSFER_HEADS",
    "COVARIANCES",
    "DEFAULT_NUM_FACTORS",
    "TRANSFER_NUM_FACTORS",
    "LINKS",
    "NOISE_SPACES",
    "NOISE_LAYERS",
    "INPUT_DEPENDENT_NOISE_LAYERS",
    "MIN_SCALE",
]
