"""Image transforms (torchvision v2): inception-style crop + flip for training, resize + centre crop
for evaluation, inputs scaled to [-1, 1] as in the paper's setup (protocol.md Sec. 5)."""

from __future__ import annotations

from typing import Optional

import torch
from torchvision.transforms import v2


def _to_unit_range() -> "list":
    return [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.5] * 3)]


def train_transform(image_size: int, crop_scale: float = 0.08, hflip: bool = True) -> v2.Compose:
    """RandomResizedCrop(image_size, scale=(crop_scale, 1)) [+ horizontal flip] -> float [-1, 1] ``[3, S, S]``.

    ``crop_scale`` = 0.08 is the inception crop; raise it for small images (e.g. 0.35 at 32 px) and
    turn ``hflip`` off where mirroring changes the label (digits).
    """
    if not 0.0 < crop_scale <= 1.0:
        raise ValueError(f"crop_scale must be in (0, 1], got {crop_scale}")
    ops = [v2.RandomResizedCrop(image_size, scale=(crop_scale, 1.0), antialias=True)]
    if hflip:
        ops.append(v2.RandomHorizontalFlip())
    return v2.Compose(ops + _to_unit_range())


def eval_transform(image_size: int, resize: Optional[int] = None) -> v2.Compose:
    """Resize the short side to ``resize`` (default image_size / 0.875, the 256 -> 224 rule), centre
    crop ``image_size`` -> float [-1, 1] ``[3, S, S]``."""
    resize = resize or int(round(image_size / 0.875))
    return v2.Compose([v2.Resize(resize, antialias=True), v2.CenterCrop(image_size)] + _to_unit_range())
