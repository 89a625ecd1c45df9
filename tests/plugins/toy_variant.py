"""A toy covariance variant, registered from the tests only, to show that a new variant is one registry row
(:func:`harness.heads.variants.register_variant`): loaded with ``-p toy_variant`` (``tests/plugins`` on the path),
it joins every test parametrised over the registry (the head's, the compile and the smoke tests), no other file
changed (``tests/heads/test_registry.py`` runs them).

The toy: Σ = V Vᵀ + diag(d(x)²) with V ``[W, R]`` shared by every input (homoscedastic low-rank noise beside the
input-dependent diagonal), drawn by the sampler's ``parameter_efficient`` form with v(x) = 1.
"""

from torch import nn

from harness.heads.variants import CovarianceVariant, NoiseTensors, register_variant


def _build(head) -> dict:
    return {"toy_factors": nn.Linear(head.num_factors, head.noise_width, bias=False)}


def _tensors(head, h) -> NoiseTensors:
    v = head.toy_factors.weight
    return NoiseTensors(h.new_ones(h.shape[0], head.noise_width), v, None, {"V": v})


TOY = CovarianceVariant(
    "toy_shared_low_rank",
    "toy",
    "parameter_efficient",
    "Σ(x) = V Vᵀ + diag(d(x)²), V shared by every input (a test's toy)",
    layers=("toy_factors",),
    build=_build,
    tensors=_tensors,
    count=lambda d1, w, r, bias: w * r,
)


def pytest_configure(config) -> None:
    register_variant(TOY)
