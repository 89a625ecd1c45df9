"""One-call conversion of a classifier to a heteroscedastic one: :func:`hetify`."""

from __future__ import annotations

from torch import nn

from harness.heads.het import HeteroscedasticHead


def _classifiers(model: nn.Module) -> "list[nn.Linear]":
    """The classifier layer(s): timm's ``get_classifier()`` where the model has it (a module, or a tuple
    of them for distilled models), else the model's last ``nn.Linear``."""
    get = getattr(model, "get_classifier", None)
    if callable(get):
        found = get()
        layers = list(found) if isinstance(found, (tuple, list)) else [found]
        bad = [type(layer).__name__ for layer in layers if not isinstance(layer, nn.Linear)]
        if bad:
            raise ValueError(
                f"{type(model).__name__}.get_classifier() returned {', '.join(bad)}, not nn.Linear: give the model a "
                "linear classifier first (timm: model.reset_classifier(num_classes)) or replace it by hand"
            )
        return layers
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(
            f"{type(model).__name__} has no nn.Linear to replace and no get_classifier(): nothing to hetify"
        )
    return linears[-1:]


def hetify(model: nn.Module, **head_options) -> nn.Module:
    """Replace a model's classifier by a :class:`HeteroscedasticHead` of the same in/out sizes, in place.

    The classifier is the one timm's ``get_classifier()`` names where the model has it (every
    timm model; both heads of a distilled one), else the model's last ``nn.Linear`` (in
    ``model.modules()`` order). The new head is freshly initialised (as ``reset_classifier``
    does), on the old layer's device and dtype; a model that was ``[..., D] -> [..., K]`` logits
    stays so, the logits now being those of the MC-averaged heteroscedastic probabilities.

    Args:
        model: any ``nn.Module`` with a linear classifier.
        **head_options: keyword arguments of :class:`HeteroscedasticHead` (``covariance``,
            ``num_factors``, ``temperature``, ``train_mc_samples``, ...), except the sizes.

    Returns:
        ``model`` itself, modified.

    Raises:
        ValueError: no linear classifier (the message says what to do), or sizes among ``head_options``.
        TypeError: an unknown head option (from :class:`HeteroscedasticHead`).

    Source: Collier et al., CVPR 2021, Sec. 3 (the HET layer replaces the final linear layer); the
    one-call form after probly's Het-Nets transform.
    """
    for size in ("in_features", "num_classes"):
        if size in head_options:
            raise ValueError(f"hetify takes the sizes from the replaced layer: drop {size}= from the head options")
    layers = _classifiers(model)
    owners = {id(layer): [] for layer in layers}
    for parent in model.modules():
        for name, child in parent.named_children():
            if id(child) in owners:
                owners[id(child)].append((parent, name))
    for layer in layers:
        head = HeteroscedasticHead(layer.in_features, layer.out_features, **head_options)
        head = head.to(device=layer.weight.device, dtype=layer.weight.dtype)
        for parent, name in owners[id(layer)]:
            setattr(parent, name, head)
    return model
