"""One-call conversion of a classifier to a heteroscedastic one: :func:`hetify`.

The classifier is never guessed: it is the layer the caller names (``layer=``), else every layer a timm model's
``pretrained_cfg['classifier']`` names, else the layer whose output is the model's output in a traced forward
pass of ``example_input``. Anything else is refused with the fix.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from typing import Optional, Sequence, Union

from torch import Tensor, nn

from harness.heads.checks import LIVE_OPTIONS
from harness.heads.het import HeteroscedasticHead
from harness.heads.hetify_trace import FIX, SUPPORTED, check_named_output, is_conv_1x1, traced_output_layer


class HeteroscedasticConvHead(HeteroscedasticHead):
    """A :class:`HeteroscedasticHead` in place of a 1x1 ``nn.Conv2d`` classifier on pooled features (timm's
    ResNetV2/BiT ``head.fc``, DLA ``fc``): channels first in and out, as the convolution was.

    Shapes:
        ``[B, D, H, W]`` -> ``[B, K, H, W]`` (pooled features: H = W = 1, and timm flattens the result to
        ``[B, K]`` after the convolution as before); each position is classified on its own. The analysis
        methods (``mean_logits``, ``sample_logits``, ``covariance``, ...) take channels-last ``[..., D]``
        features as in :class:`HeteroscedasticHead`.

    Raises:
        ValueError: input that is not 4-d ``[B, D, H, W]``, or whose channels are not D.

    Source: Collier et al., CVPR 2021, Sec. 3 (the HET layer replaces the final layer); BiT's 1x1 convolution
    head: Kolesnikov et al., ECCV 2020 (timm ``timm/models/resnetv2.py``).
    """

    def forward(self, x: Tensor, mc_samples: Optional[int] = None, seed: Optional[int] = None) -> Tensor:
        if x.dim() != 4:
            raise ValueError(
                f"HeteroscedasticConvHead replaces a 1x1 Conv2d and takes [B, D, H, W] input, got shape "
                f"{tuple(x.shape)}; use HeteroscedasticHead for [..., D] features"
            )
        return super().forward(x.movedim(1, -1), mc_samples, seed).movedim(-1, 1)


def _check_conv(name: str, conv: nn.Conv2d) -> None:
    """A 1x1 convolution is a linear classifier only with stride, dilation and groups 1 and no padding."""
    plain = conv.stride == (1, 1) and conv.dilation == (1, 1) and conv.groups == 1
    if not plain or conv.padding not in ((0, 0), "valid", "same"):
        raise ValueError(
            f"layer {name!r} is a 1x1 Conv2d with stride={conv.stride}, padding={conv.padding}, "
            f"dilation={conv.dilation}, groups={conv.groups}: only a plain 1x1 convolution (stride, dilation and "
            f"groups 1, no padding) is a linear classifier; {FIX}"
        )


def _is_norm_linear(module: nn.Module) -> bool:
    """timm's LeViT ``NormLinear`` (BatchNorm1d, dropout, linear); timm not imported means not one."""
    levit = sys.modules.get("timm.models.levit")
    norm_linear = getattr(levit, "NormLinear", None)
    return isinstance(norm_linear, type) and isinstance(module, norm_linear)


def _resolve(model: nn.Module, name: str, source: str) -> "list[tuple[str, nn.Module]]":
    """The ``(dotted name, layer)`` pairs to replace for the module ``name`` (a ModuleList gives each of its
    layers, a NormLinear its ``linear``); ``source`` says where the name came from, for the messages."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"{source} must name a submodule by a non-empty dotted name, got {name!r}; {FIX}")
    parent, _, attr = name.rpartition(".")
    try:
        owner = model.get_submodule(parent) if parent else model
    except AttributeError:
        owner = None
    module = getattr(owner, attr, None) if owner is not None else None
    if module is not None and not isinstance(module, nn.Module):
        module = None
    if module is None:
        candidates = [n for n, m in model.named_modules() if n and (isinstance(m, nn.Linear) or is_conv_1x1(m))]
        raise ValueError(
            f"{source} names {name!r}, which {type(model).__name__} does not have; its nn.Linear and 1x1 "
            f"nn.Conv2d layers are {candidates[-8:]} (the last 8 in registration order); {FIX}"
        )
    if isinstance(module, nn.modules.lazy.LazyModuleMixin) and module.has_uninitialized_params():
        raise ValueError(
            f"{source} names {name!r}, an uninitialised {type(module).__name__}: its input size is not known until "
            "a forward pass; run one first, model(<a batch>), then hetify, or drop layer= and pass "
            "example_input=<a batch> (hetify runs it)"
        )
    if isinstance(module, nn.Linear):
        return [(name, module)]
    if is_conv_1x1(module):
        _check_conv(name, module)
        return [(name, module)]
    if _is_norm_linear(module):
        return [(f"{name}.linear", module.linear)]
    if isinstance(module, nn.ModuleList) and len(module) > 0:
        return [pair for i in range(len(module)) for pair in _resolve(model, f"{name}.{i}", source)]
    if isinstance(module, nn.Identity):
        raise ValueError(
            f"{source} names {name!r}, which is nn.Identity: the model has no classifier there (a timm model "
            "created with num_classes=0); create it with num_classes=K or call model.reset_classifier(K) "
            "first, then hetify it"
        )
    if isinstance(module, (HeteroscedasticHead, HeteroscedasticConvHead)):
        raise ValueError(
            f"{source} names {name!r}, which is a HET head already: this model was hetified; build the head with "
            f"other options by hetifying the original model, or set its Monte Carlo options on the head "
            f"({', '.join(LIVE_OPTIONS)}: checked when it is called; the others are fixed when it is built)"
        )
    raise ValueError(f"{source} names {name!r}, a {type(module).__name__}; hetify replaces {SUPPORTED}; {FIX}")


def _timm_names(model: nn.Module) -> "Optional[list[str]]":
    """The names in a timm model's ``pretrained_cfg['classifier']`` (a string or a tuple of them), present
    ones only (an attribute set to None, as VOLO's ``aux_head`` without ``use_aux_head``, is no head); None
    for a model without that config."""
    cfg = getattr(model, "pretrained_cfg", None)
    if not isinstance(cfg, Mapping) or not cfg.get("classifier"):
        return None
    names = cfg["classifier"]
    names = [names] if isinstance(names, str) else list(names)
    return [n for n in names if not (isinstance(n, str) and _is_none_attribute(model, n))]


def _is_none_attribute(model: nn.Module, name: str) -> bool:
    parent, _, attr = name.rpartition(".")
    try:
        owner = model.get_submodule(parent) if parent else model
    except AttributeError:
        return False
    return hasattr(owner, attr) and getattr(owner, attr) is None


def _layers(model: nn.Module, layer, example_input, check_output: bool = True) -> "list[tuple[str, nn.Module]]":
    """The layers to replace: ``layer=`` (its output checked, :func:`check_named_output`), else timm's
    ``pretrained_cfg['classifier']``, else traced."""
    if layer is not None:
        names = [layer] if isinstance(layer, str) else list(layer) if isinstance(layer, (list, tuple)) else None
        if not names:
            raise ValueError(f"layer must be a dotted module name or a non-empty list of them, got {layer!r}")
        layers = [pair for n in names for pair in _resolve(model, n, f"layer={n!r}")]
        if check_output:
            check_named_output(model, layers, example_input)
        return layers
    timm_names = _timm_names(model)
    if timm_names is not None:
        if not timm_names:
            raise ValueError(f"{type(model).__name__}.pretrained_cfg['classifier'] names no present layer; {FIX}")
        return [pair for n in timm_names for pair in _resolve(model, n, "pretrained_cfg['classifier']")]
    if isinstance(model, nn.Linear) or is_conv_1x1(model):
        raise ValueError(
            f"the model is itself a {type(model).__name__}: build HeteroscedasticHead(in_features, num_classes) "
            "in its place"
        )
    if example_input is None:
        raise ValueError(
            f"{type(model).__name__} is not a timm model (no pretrained_cfg['classifier']), so its classifier is "
            "not known: name it, hetify(model, layer='fc'), or pass example_input=<a batch it accepts, e.g. "
            "torch.randn(1, 3, 224, 224)> to find the layer whose output is the model's output by tracing"
        )
    return _resolve(model, traced_output_layer(model, example_input), "the traced output layer")


def _check_options(options: dict) -> None:
    """Head options that :class:`HeteroscedasticHead` takes, else a TypeError naming the closest option.

    Raises:
        TypeError: an option the head does not have (``num_factor``: did you mean ``num_factors``?).
    """
    import difflib

    known = [p for p in inspect.signature(HeteroscedasticHead).parameters if p not in ("in_features", "num_classes")]
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise TypeError(f"hetify: unknown head option {key!r}: {hint}the head's options are {', '.join(known)}")


def hetify(
    model: nn.Module,
    *,
    layer: Union[str, Sequence[str], None] = None,
    num_classes: Optional[int] = None,
    example_input: Union[Tensor, tuple, None] = None,
    check_output: bool = True,
    **head_options,
) -> nn.Module:
    """Replace a model's classifier by heteroscedastic head(s) of the same sizes, in place; never guessing which.

    The layers replaced:

    1. ``layer=`` given: those modules (dotted names, as ``model.named_modules()`` spells them).
    2. Else a timm model: every layer its ``pretrained_cfg['classifier']`` names (both heads of a distilled
       model, VOLO's ``head`` and ``aux_head``, CrossViT's ``head.0`` and ``head.1``, LeViT's ``head.linear``).
    3. Else, with ``example_input``: the layer whose output is the model's output in an ``eval()`` forward
       pass of it (traced with forward hooks). Without it a non-timm model is refused: its input shape is
       not known here, and the last ``nn.Linear`` in registration order is not necessarily the classifier.

    Each named module must be an ``nn.Linear`` (-> :class:`HeteroscedasticHead`, ``[..., D] -> [..., K]``),
    a plain 1x1 ``nn.Conv2d`` (-> :class:`HeteroscedasticConvHead`, ``[B, D, H, W] -> [B, K, H, W]``), timm's
    LeViT ``NormLinear`` (its BatchNorm1d kept, its ``linear`` replaced) or an ``nn.ModuleList`` of these
    (each replaced). A head is freshly initialised, on the old layer's device and dtype and in its training mode
    (``head.train(old.training)``: a model in ``eval()`` keeps predicting with ``eval_mc_samples`` seeded samples,
    not ``train_mc_samples`` of fresh noise), and set at every place the old layer was registered: one module
    registered under two names (``m.extra = m[1]``) gets the same head object under both, so that tie is kept. A
    classifier whose weight or bias is shared with another module (a classifier tied to an embedding,
    ``out.weight = emb.weight``) is refused: the head's new parameters would silently untie it. The model then
    returns the heads' outputs where it returned logits: log p̄ for the softmax link (a model that combines two
    heads, as timm's distilled models, VOLO and CrossViT do, combines log-probabilities: see the head guide).

    Args:
        model: the model, modified in place.
        layer: dotted name(s) of the classifier; overrides timm's config and tracing. Its output is checked to be
            the model's output (a hidden layer named is refused) by a forward of ``example_input`` if given, else
            of one zero row for a model whose first registered layer is an ``nn.Linear``; other models (their
            input not known here) are not checked: pass ``example_input`` to check them.
        num_classes: K of the new heads (default: each old layer's output size); a timm model's
            ``num_classes`` attribute follows.
        example_input: a batch the model accepts (a tensor, or a tuple of positional arguments), used to trace
            a model that is neither named by ``layer=`` nor a timm model, and to check a ``layer=``; a batch of 1
            is enough.
        check_output: False skips the check that a named ``layer=`` gives the model's output (for modules after
            the classifier that are meant to act on its log-probabilities).
        **head_options: keyword arguments of :class:`HeteroscedasticHead` (``covariance``, ``num_factors``,
            ``temperature``, ``train_mc_samples``, ...) except ``in_features``.

    Returns:
        ``model`` itself, modified.

    Raises:
        ValueError: no classifier known (non-timm model without ``layer=`` or ``example_input=``), a name
            that is absent or names an unsupported module (its type in the message), an ``example_input`` the
            model's forward fails on (its shape and the model's error named), a traced output that
            no supported layer produces or that is not one tensor, a bad ``num_classes`` or an
            ``in_features`` option, a lazy layer (``nn.LazyLinear``) not yet run, a named ``layer=`` whose output
            a traced forward shows is not the model's output, a layer whose parameters another module shares (a
            tied embedding); each message gives the fix.
        TypeError: an unknown head option (checked before any tracing).

    Source: Collier et al., CVPR 2021, Sec. 3 (the HET layer replaces the final linear layer); the
    one-call form after probly's Het-Nets transform; timm's ``pretrained_cfg['classifier']`` convention.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"hetify takes a torch.nn.Module (the model whose classifier it replaces), got {type(model).__name__}; "
            "build the model first, e.g. timm.create_model(name)"
        )
    if "in_features" in head_options:
        raise ValueError("hetify takes in_features from the replaced layer: drop in_features= from the head options")
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1
    ):
        raise ValueError(f"num_classes must be an int >= 1 or None (keep each layer's size), got {num_classes!r}")
    _check_options(head_options)  # an unknown option: TypeError naming the closest, before any tracing
    layers = _layers(model, layer, example_input, check_output)
    _check_untied(model, layers)
    old_classes = {m.out_features if isinstance(m, nn.Linear) else m.out_channels for _, m in layers}
    replaced: "set[int]" = set()
    for _, old in layers:
        if id(old) in replaced:
            continue
        replaced.add(id(old))
        _replace(model, old, num_classes, head_options)
    current = getattr(model, "num_classes", None)
    if (
        num_classes is not None
        and isinstance(current, int)
        and not isinstance(current, bool)
        and current in old_classes
    ):
        model.num_classes = num_classes
    return model


def _check_untied(model: nn.Module, layers: "list[tuple[str, nn.Module]]") -> None:
    """Refuse layers whose weight or bias another module also holds (a classifier tied to an embedding): the head's
    new parameters would silently untie them. One module registered twice is not a tie of this kind.

    Raises:
        ValueError: naming the layer, the parameter, the other module and the fixes.
    """
    for name, old in layers:
        own = {id(p): n for n, p in old.named_parameters(recurse=False)}
        for other, module in model.named_modules(remove_duplicate=False):
            if module is old:
                continue
            for pname, param in module.named_parameters(recurse=False):
                if id(param) in own:
                    raise ValueError(
                        f"layer {name!r} shares its {own[id(param)]} with {other}.{pname} ({type(module).__name__}, "
                        "a tied classifier): a HET head has new parameters of its own, so hetify would silently "
                        f"untie them ({other} keeping the old {pname}); untie the classifier first if that is "
                        f"intended, model.{name}.{own[id(param)]} = nn.Parameter(model.{name}.{own[id(param)]}"
                        ".detach().clone()), or keep the tied classifier (a HET head cannot share its weight)"
                    )


def _replace(model: nn.Module, old: nn.Module, num_classes: Optional[int], head_options: dict) -> None:
    """Set a new head wherever ``old`` is registered in ``model``."""
    if isinstance(old, nn.Linear):
        head = HeteroscedasticHead(old.in_features, num_classes or old.out_features, **head_options)
    else:
        head = HeteroscedasticConvHead(old.in_channels, num_classes or old.out_channels, **head_options)
    head = head.to(device=old.weight.device, dtype=old.weight.dtype).train(old.training)  # the old one's mode
    # every registration, not named_children(), which yields a module registered twice (a tied layer) once
    owners = [(p, n) for p in model.modules() for n, c in p._modules.items() if c is old]
    for parent, attr in owners:
        setattr(parent, attr, head)
