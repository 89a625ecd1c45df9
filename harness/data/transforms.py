"""Image transforms (torchvision v2): inception-style crop + flip for training, resize + centre crop
for evaluation, inputs scaled to [-1, 1] as in the paper's setup (big_vision and uncertainty-baselines' JAX configs: ``value_range(-1, 1)``)."""

from __future__ import annotations

from typing import Optional

import torch
from torchvision.transforms import v2

#: the mean and std (per channel, of [0, 1] pixels) of the harness's own loaders: pixels map to [-1, 1]
HARNESS_NORMALISATION = (0.5, 0.5, 0.5)


def _to_unit_range() -> "list":
    return [
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(list(HARNESS_NORMALISATION), list(HARNESS_NORMALISATION)),
    ]


def train_transform(image_size: int, crop_scale: float = 0.08, hflip: bool = True, crop_padding: int = 0) -> v2.Compose:
    """RandomResizedCrop(image_size, scale=(crop_scale, 1)) [+ horizontal flip] -> float [-1, 1] ``[3, S, S]``.

    ``crop_scale`` = 0.08 is the inception crop; raise it for small images (e.g. 0.35 at 32 px) and
    turn ``hflip`` off where mirroring changes the label (digits). ``crop_padding`` = p > 0 takes
    ``RandomCrop(padding=p)`` at the image's own size instead (the CIFAR augmentation), then resizes
    to ``image_size``.

    Raises:
        ValueError: crop_scale outside (0, 1] or a negative crop_padding.
    """
    if not 0.0 < crop_scale <= 1.0:
        raise ValueError(f"crop_scale must be in (0, 1], got {crop_scale}")
    if crop_padding < 0:
        raise ValueError(f"crop_padding must be >= 0, got {crop_padding}")
    if crop_padding:
        ops = [_RandomTranslate(crop_padding), v2.Resize((image_size, image_size), antialias=True)]
    else:
        ops = [v2.RandomResizedCrop(image_size, scale=(crop_scale, 1.0), antialias=True)]
    if hflip:
        ops.append(v2.RandomHorizontalFlip())
    return v2.Compose(ops + _to_unit_range())


def eval_transform(image_size: int, resize: Optional[int] = None) -> v2.Compose:
    """Resize the short side to ``resize`` (default image_size / 0.875, the 256 -> 224 rule), centre
    crop ``image_size`` -> float [-1, 1] ``[3, S, S]``."""
    resize = resize or int(round(image_size / 0.875))
    return v2.Compose([v2.Resize(resize, antialias=True), v2.CenterCrop(image_size)] + _to_unit_range())


class _RandomTranslate(v2.Transform):
    """``RandomCrop(size of the input, padding=p)``: a shift by up to p pixels, black fill."""

    def __init__(self, padding: int) -> None:
        super().__init__()
        self.padding = padding

    def make_params(self, flat_inputs: list) -> dict:
        h, w = v2.query_size(flat_inputs)
        top, left = (int(v) for v in torch.randint(0, 2 * self.padding + 1, (2,)))
        return {"top": top - self.padding, "left": left - self.padding, "height": h, "width": w}

    def transform(self, inpt, params: dict):
        return self._call_kernel(v2.functional.crop, inpt, **params)
