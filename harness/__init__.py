"""harness: heteroscedastic classification research at scale (Collier et al., CVPR 2021).

Main entry points: :class:`harness.heads.HeteroscedasticHead` and :func:`harness.models.build_model`.
"""

from harness.heads import HeteroscedasticHead, MCSigmoidDenseFA, MCSoftmaxDenseFA, hetify

__all__ = ["HeteroscedasticHead", "MCSoftmaxDenseFA", "MCSigmoidDenseFA", "hetify"]
