"""Backbones for 32 px images, registered in timm's model registry.

An ImageNet ResNet reduces a 32 px image to 8 px in its stem (7x7 stride-2 convolution, then a
stride-2 max-pool) before the first residual stage, throwing most of the image away. The CIFAR
ResNets of He et al. (2016, Sec. 4.2) and the pre-activation / wide ResNets used on CIFAR since
keep full resolution there: a 3x3 stride-1 stem and no max-pool, so the four stages run at 32, 16,
8 and 4 px. These are timm :class:`~timm.models.resnet.ResNet` models (BasicBlock, the torchvision
layout) with that stem; importing this module registers them, so configs name them like any timm
model (``model.backbone: resnet18_32px``) and ``timm.create_model`` builds them.

| name | stages | widths | parameters (no head) |
|---|---|---|---|
| ``resnet18_32px`` | 2-2-2-2 | 64-128-256-512 | 11.2M |
| ``resnet10_32px`` | 1-1-1-1 | 64-128-256-512 | 4.9M |
| ``resnet18_32px_w32`` | 2-2-2-2 | 32-64-128-256 | 2.8M |
| ``resnet10_32px_w32`` | 1-1-1-1 | 32-64-128-256 | 1.2M |
| ``resnet10_32px_w16`` | 1-1-1-1 | 16-32-64-128 | 0.3M |

``results/bench/upstream.md`` lists their training throughput and accuracy per CPU-minute.
"""

from __future__ import annotations

from typing import Any

from timm.models import build_model_with_cfg, generate_default_cfgs, register_model, resolve_pretrained_cfg
from timm.models.resnet import BasicBlock, ResNet
from torch import nn

#: name -> (blocks per stage, width of the first stage)
VARIANTS = {
    "resnet18_32px": ((2, 2, 2, 2), 64),
    "resnet10_32px": ((1, 1, 1, 1), 64),
    "resnet18_32px_w32": ((2, 2, 2, 2), 32),
    "resnet10_32px_w32": ((1, 1, 1, 1), 32),
    "resnet10_32px_w16": ((1, 1, 1, 1), 16),
}

#: their timm pretrained configs (read by timm's registry when :func:`_register` registers them): no published
#: weights; 32 px inputs normalised as the harness's loaders do (mean = std = 0.5, pixels to [-1, 1]); classifier
#: ``fc`` and first convolution ``conv1`` as in timm's ResNets, so timm's loaders (``pretrained_cfg_overlay=dict(
#: file=...)``, ``local-dir:``, ``hf-hub:``) and exports (``Classifier.save_pretrained``) handle them like any
#: timm model
default_cfgs = generate_default_cfgs(
    {
        name: dict(
            input_size=(3, 32, 32),
            pool_size=(4, 4),
            crop_pct=1.0,
            interpolation="bilinear",
            mean=(0.5, 0.5, 0.5),
            std=(0.5, 0.5, 0.5),
            first_conv="conv1",
            classifier="fc",
            license="apache-2.0",
        )
        for name in VARIANTS
    }
)


def _build_32px(layers: "tuple[int, ...]", width: int, **kwargs: Any) -> ResNet:
    """The network of :func:`resnet_32px` with random weights (``model_cls`` of timm's ``build_model_with_cfg``)."""
    model = ResNet(BasicBlock, list(layers), channels=tuple(width * 2**i for i in range(4)), stem_width=width, **kwargs)
    # timm's plain stem is 64 channels wide whatever the stage widths: replace it by a 3x3 stride-1
    # convolution of the first stage's width, and the first block by one taking that width
    norm = kwargs.get("norm_layer", nn.BatchNorm2d)
    model.conv1 = nn.Conv2d(kwargs.get("in_chans", 3), width, kernel_size=3, stride=1, padding=1, bias=False)
    model.bn1 = norm(width)
    model.maxpool = nn.Identity()
    if width != 64:
        model.layer1[0] = BasicBlock(width, width, act_layer=kwargs.get("act_layer", nn.ReLU), norm_layer=norm)
        if kwargs.get("zero_init_last", True):
            model.layer1[0].zero_init_last()
    for m in (model.conv1, model.layer1[0].conv1, model.layer1[0].conv2):  # timm's initialisation
        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    for info in model.feature_info:  # the stem no longer reduces: stage k runs at 1 / 2^(k-1) of the input
        info["reduction"] = max(1, info["reduction"] // 4)
    return model


def resnet_32px(
    layers: "tuple[int, ...]", width: int, pretrained: bool = False, variant: str = "resnet18_32px", **kwargs: Any
) -> ResNet:
    """A timm BasicBlock ResNet with a 3x3 stride-1 stem and no max-pool (He et al. 2016, Sec. 4.2), built by timm's
    ``build_model_with_cfg`` so it carries a ``pretrained_cfg`` (:data:`default_cfgs`) and loads weights as timm does.

    Input ``[B, 3, H, W]`` (any size; designed for 32 px); features ``[B, 8 * width]`` after global
    average pooling (``num_classes=0``), or logits ``[B, num_classes]``.

    Args:
        layers: BasicBlocks in each of the four stages.
        width: channels of the stem and the first stage; stages double it.
        pretrained: load weights through timm (``load_pretrained``): only from a local source, a
            ``pretrained_cfg_overlay=dict(file=...)``, or a ``local-dir:`` / ``hf-hub:`` export (these models
            have no published weights).
        variant: the registry name (its pretrained config).
        **kwargs: :class:`timm.models.resnet.ResNet` arguments (``num_classes``, ``drop_rate``...) and
            ``timm.create_model``'s ``pretrained_cfg``, ``pretrained_cfg_overlay``, ``cache_dir``.

    Raises:
        ValueError: ``pretrained=True`` without a weights source.
    """
    cfg = resolve_pretrained_cfg(variant, kwargs.get("pretrained_cfg"), kwargs.get("pretrained_cfg_overlay"))
    if pretrained and not (cfg.file or cfg.hf_hub_id or cfg.url or cfg.state_dict):
        raise ValueError(
            f"{variant}: the 32 px ResNets have no published weights: pass a local file "
            "(build_model(cfg, pretrained_file=...), or timm's pretrained_cfg_overlay=dict(file=...)) or "
            "pretrained=False"
        )
    return build_model_with_cfg(_build_32px, variant, pretrained, layers=layers, width=width, **kwargs)


def _register(name: str, layers: "tuple[int, ...]", width: int) -> None:
    def build(pretrained: bool = False, **kwargs: Any) -> ResNet:
        return resnet_32px(layers, width, pretrained, variant=name, **kwargs)

    build.__name__ = name
    build.__module__ = __name__
    build.__doc__ = f"{name}: BasicBlock ResNet {'-'.join(map(str, layers))}, width {width}, 3x3 stride-1 stem."
    register_model(build)


for _name, (_layers, _width) in VARIANTS.items():
    _register(_name, _layers, _width)
