"""The views of a task's images a transfer or a probe sees: the BiT-HyperRule resolution, the fine-tuning
transforms (random crop and flip where the task allows them, [-1, 1] range) and the loaders that apply them.

The resolution rule is BiT's (Kolesnikov et al., "Big Transfer (BiT)", ECCV 2020, Sec. 3.3; google-research/
big_transfer ``bit_hyperrule.py``): images whose area is below 96x96 are resized to 160 and randomly cropped to 128,
others resized to 512 and cropped to 480; evaluation resizes to the crop size.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torchvision.transforms import v2

from harness.data.batched import ArrayBatches, BatchAugment, batch_loader
from harness.data.dataset import ImageDataset
from harness.data.loading import EpochSampler, TransformedDataset


def bit_resolution(image_size: "tuple[int, int]") -> "tuple[int, int]":
    """(resize, crop) of the BiT-HyperRule: area < 96x96 -> (160, 128), else (512, 480)."""
    w, h = image_size
    return (160, 128) if w * h < 96 * 96 else (512, 480)


def transforms(
    flip: bool, crop: bool, resize: int, size: int, interpolation: str = "bilinear"
) -> "tuple[v2.Compose, v2.Compose]":
    """Train and eval transforms, [-1, 1] range: resize to ``resize`` and random crop ``size`` where the
    task allows crops, else resize to ``size``; random flip where allowed; evaluation resizes to ``size``.
    Every resize uses ``interpolation`` (a ``torchvision.transforms.InterpolationMode`` value: the model's
    own, from its ``pretrained_cfg``, bilinear for harness models).

    Raises:
        ValueError: an unknown interpolation.
    """
    mode = v2.InterpolationMode(interpolation)
    tail = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5] * 3, [0.5] * 3)]
    train = (
        [v2.Resize((resize, resize), mode, antialias=True), v2.RandomCrop(size)]
        if crop
        else [v2.Resize((size, size), mode, antialias=True)]
    )
    if flip:
        train.append(v2.RandomHorizontalFlip())
    return v2.Compose(train + tail), v2.Compose([v2.Resize((size, size), mode, antialias=True)] + tail)


def task_views(
    data: ImageDataset,
    train: bool,
    flip: bool,
    crop: bool,
    resize: int,
    size: int,
    batch_size: int,
    seed: int,
    interpolation: str = "bilinear",
) -> "tuple[torch.utils.data.DataLoader, Any, Optional[EpochSampler]]":
    """``(loader, dataset, sampler)`` of the fine-tuning view (:func:`transforms`) of ``data``.

    Images held in one array (the DEMO tasks) and only ever upsampled (no side above ``size``) are
    augmented a whole batch at a time (:class:`~harness.data.batched.BatchAugment` with ``resize``:
    the same views, bilinear, equal to PIL's up to its uint8 rounding); others image by image with
    torchvision. Either way the augmentation of example i in epoch e of a split depends on (seed, e, i)
    only. Another ``interpolation`` than bilinear always takes the torchvision path.
    """
    sampler = EpochSampler(len(data), seed) if train else None
    pixels = data.pixels()
    if pixels is not None and max(pixels.shape[1:3]) <= size and interpolation == "bilinear":
        augment = (
            BatchAugment(size, resize=resize if crop else size, hflip=flip)
            if train
            else BatchAugment(size, resize=size, hflip=False)
        )
        ds = ArrayBatches(data, pixels, augment, seed=seed)
        return batch_loader(ds, batch_size, sampler, drop_last=train and len(ds) >= batch_size), ds, sampler
    train_tf, eval_tf = transforms(flip, crop, resize, size, interpolation)
    ds = TransformedDataset(data, train_tf, seed=seed) if train else TransformedDataset(data, eval_tf)
    loader = torch.utils.data.DataLoader(
        ds, batch_size, sampler=sampler, shuffle=False, drop_last=train and len(ds) >= batch_size
    )
    return loader, ds, sampler
