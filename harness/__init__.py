"""harness: heteroscedastic classification research at scale (Collier et al., CVPR 2021).

Main entry points: :class:`harness.heads.HeteroscedasticHead` and :func:`harness.models.build_model`.
"""

__all__ = ["HeteroscedasticHead", "MCSoftmaxDenseFA", "MCSigmoidDenseFA", "hetify"]


def __getattr__(name: str):
    """The head exports, imported on first use (PEP 562): ``import harness`` (and so the ``harness`` command's start,
    where a Ctrl-C is answered by one line) does not wait for torch."""
    if name in __all__:
        import harness.heads

        return getattr(harness.heads, name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
