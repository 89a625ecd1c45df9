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

from timm.models import register_model
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


def resnet_32px(layers: "tuple[int, ...]", width: int, pretrained: bool = False, **kwargs: Any) -> ResNet:
    """A timm BasicBlock ResNet with a 3x3 stride-1 stem and no max-pool (He et al. 2016, Sec. 4.2).

    Input ``[B, 3, H, W]`` (any size; designed for 32 px); features ``[B, 8 * width]`` after global
    average pooling (``num_classes=0``), or logits ``[B, num_classes]``.

    Args:
        layers: BasicBlocks in each of the four stages.
        width: channels of the stem and the first stage; stages double it.
        pretrained: must be False (no weights exist for these models; nothing is downloaded).
        **kwargs: :class:`timm.models.resnet.ResNet` arguments (``num_classes``, ``drop_rate``...).

    Raises:
        ValueError: ``pretrained=True`` without a local file (``pretrained_cfg_overlay``).
    """
    overlay = kwargs.pop("pretrained_cfg_overlay", None)
    for key in ("pretrained_cfg", "cache_dir"):  # timm.create_model's download options: nothing to download
        kwargs.pop(key, None)
    model = ResNet(BasicBlock, list(layers), channels=tuple(width * 2 ** i for i in range(4)), stem_width=width,
                   **kwargs)
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
    if pretrained:
        if not overlay or "file" not in overlay:
            raise ValueError("the 32 px ResNets have no published weights: pass a local file "
                             "(build_model(cfg, pretrained_file=...)) or pretrained=False")
        from timm.models import load_checkpoint

        load_checkpoint(model, overlay["file"], strict=True)
    return model


def _register(name: str, layers: "tuple[int, ...]", width: int) -> None:
    def build(pretrained: bool = False, **kwargs: Any) -> ResNet:
        return resnet_32px(layers, width, pretrained, **kwargs)

    build.__name__ = name
    build.__doc__ = f"{name}: BasicBlock ResNet {'-'.join(map(str, layers))}, width {width}, 3x3 stride-1 stem."
    register_model(build)


for _name, (_layers, _width) in VARIANTS.items():
    _register(_name, _layers, _width)
