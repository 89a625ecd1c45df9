"""Whole-batch augmentation of decoded uint8 images, as tensor ops.

The per-image path (:mod:`harness.data.loading`) decodes and transforms every image with PIL on
every epoch; for small equal-size images (CIFAR, digits) that costs more than the model. Here the
images of a split are one ``[N, H, W, 3]`` uint8 array (:mod:`harness.data.cache`) and a batch is
augmented at once: per-example crop boxes and flips become one affine sampling grid
(``torch.nn.functional.affine_grid`` / ``grid_sample``, bilinear), then the [-1, 1] scaling of
:mod:`harness.data.transforms`.

Randomness keeps the contract of the per-image path: the augmentation of example ``i`` in epoch
``e`` is a function of (seed, e, i) only, drawn for the whole epoch from a generator seeded by
(seed, e), and the batch order comes from :class:`~harness.data.loading.EpochSampler`; a run
resumed mid-epoch continues exactly, whatever the batch composition.

Augmentations (as torchvision's, vectorised):

- ``crop_padding = p > 0``: an H x W crop of the image zero-padded by p on each side, i.e. a
  shift by integers in [-p, p] with black fill, ``RandomCrop(size, padding=p)`` (He et al. 2016,
  Sec. 4.2), then a resize to ``image_size`` if it differs;
- ``resize = R``: ``Resize((R, R))`` then ``RandomCrop(image_size)`` (BiT's fine-tuning view; R equal
  to ``image_size`` is a plain ``Resize((S, S))``): an S/R fraction of each side at an integer offset
  of the resized image, resampled bilinearly from the whole image;
- otherwise ``RandomResizedCrop(image_size, scale=(crop_scale, 1), ratio=(3/4, 4/3))`` (the same
  box distribution: 10 tries, then the centre), resampled bilinearly from the whole image (pixels at
  the crop's edge blend with their real neighbours, where crop-then-resize repeats the edge); no
  antialiasing, so use it for crops no larger than the output (small images), PIL for large ones;
- ``hflip``: mirror with probability 1/2.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from harness.data.config import LOADERS
from harness.data.dataset import ImageDataset
from harness.data.loading import mix_seeds


def _grid(images: torch.Tensor, boxes: torch.Tensor, flip: torch.Tensor, size: int) -> torch.Tensor:
    """Sample ``size x size`` outputs from the boxes of a batch.

    Args:
        images: ``[B, 3, H, W]`` float.
        boxes: ``[B, 4]`` float (x0, y0, w, h) in pixels of the input, inside it (bilinear samples
            within half a pixel of the border take the border's value, as PIL's resize does).
        flip: ``[B]`` bool, mirror the box horizontally.
        size: output side in pixels.

    Returns:
        ``[B, 3, size, size]`` float.
    """
    b, _, h, w = images.shape
    x0, y0, bw, bh = boxes.unbind(1)
    sx = torch.where(flip, -bw / w, bw / w)
    theta = torch.zeros(b, 2, 3, dtype=images.dtype)
    theta[:, 0, 0], theta[:, 0, 2] = sx, (2 * x0 + bw) / w - 1
    theta[:, 1, 1], theta[:, 1, 2] = bh / h, (2 * y0 + bh) / h - 1
    grid = F.affine_grid(theta, [b, 3, size, size], align_corners=False)
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _to_unit(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 ``[B, H, W, 3]`` -> float32 ``[B, 3, H, W]`` in [0, 1]."""
    return pixels.permute(0, 3, 1, 2).float().div_(255.0)


class BatchAugment:
    """Per-example random crops and flips of a batch, drawn per epoch from (seed, epoch).

    Args:
        image_size: output side S in pixels.
        crop_padding: p > 0: random translation by up to p pixels (RandomCrop with padding); 0: a
            random resized crop with area fraction in [crop_scale, 1] (or the ``resize`` view).
        crop_scale: smallest crop area fraction, in (0, 1].
        hflip: mirror half of the examples.
        resize: R >= S: resize to R x R then a random S x S crop (no crop when R == S); None: off.

    Raises:
        ValueError: crop_scale outside (0, 1], a negative crop_padding, resize below image_size or
            with crop_padding.
    """

    def __init__(
        self,
        image_size: int,
        crop_padding: int = 0,
        crop_scale: float = 1.0,
        hflip: bool = True,
        resize: Optional[int] = None,
    ) -> None:
        if not 0.0 < crop_scale <= 1.0:
            raise ValueError(f"crop_scale must be in (0, 1], got {crop_scale}")
        if crop_padding < 0:
            raise ValueError(f"crop_padding must be >= 0, got {crop_padding}")
        if resize is not None and (resize < image_size or crop_padding):
            raise ValueError(f"resize must be >= image_size ({image_size}) and without crop_padding, got {resize}")
        self.image_size, self.crop_padding, self.crop_scale, self.hflip = image_size, crop_padding, crop_scale, hflip
        self.resize = resize

    def draw(self, n: int, height: int, width: int, seed: int, epoch: int) -> "dict[str, np.ndarray]":
        """The epoch's parameters of all ``n`` examples: ``boxes`` ``[n, 4]`` (x0, y0, w, h) and ``flip`` ``[n]``."""
        rng = np.random.default_rng(mix_seeds(seed, epoch, 0xA06))
        if self.crop_padding:  # (x0, y0) of the crop in the zero-padded image; the crop is H x W
            p = self.crop_padding
            shift = rng.integers(0, 2 * p + 1, size=(n, 2))
            boxes = np.column_stack([shift[:, 0], shift[:, 1], np.full(n, width), np.full(n, height)]).astype(
                np.float32
            )
        elif self.resize:  # RandomCrop(S) of the R x R resized image, as a box in input pixels
            r, s = self.resize, self.image_size
            offset = rng.integers(0, r - s + 1, size=(n, 2))
            boxes = np.column_stack(
                [
                    offset[:, 0] * width / r,
                    offset[:, 1] * height / r,
                    np.full(n, s * width / r),
                    np.full(n, s * height / r),
                ]
            ).astype(np.float32)
        else:  # torchvision's RandomResizedCrop.get_params, for all n examples at once
            lo, hi = 3 / 4, 4 / 3
            area = height * width * rng.uniform(self.crop_scale, 1.0, (n, 10))
            ratio = np.exp(rng.uniform(math.log(lo), math.log(hi), (n, 10)))
            bw, bh = np.rint(np.sqrt(area * ratio)), np.rint(np.sqrt(area / ratio))
            fits = (bw > 0) & (bw <= width) & (bh > 0) & (bh <= height)
            first = fits.argmax(1)  # the first of 10 tries that fits ...
            bw, bh = bw[np.arange(n), first], bh[np.arange(n), first]
            # ... else the whole image, cut to the ratio range
            in_ratio = width / height
            fw, fh = (
                (width, round(width / lo))
                if in_ratio < lo
                else (round(height * hi), height)
                if in_ratio > hi
                else (width, height)
            )
            none = ~fits.any(1)
            bw, bh = np.where(none, fw, bw), np.where(none, fh, bh)
            x0 = np.floor(rng.random(n) * (width - bw + 1))
            y0 = np.floor(rng.random(n) * (height - bh + 1))
            x0, y0 = np.where(none, (width - bw) // 2, x0), np.where(none, (height - bh) // 2, y0)
            boxes = np.column_stack([x0, y0, bw, bh]).astype(np.float32)
        flip = rng.random(n) < 0.5 if self.hflip else np.zeros(n, bool)
        return {"boxes": boxes, "flip": flip}

    def apply(self, pixels: torch.Tensor, boxes: np.ndarray, flip: np.ndarray) -> torch.Tensor:
        """uint8 ``[B, H, W, 3]`` + the batch's parameters -> float32 ``[B, 3, S, S]`` in [-1, 1]."""
        flip = torch.from_numpy(flip)
        if not self.crop_padding:
            out = _grid(_to_unit(pixels), torch.from_numpy(boxes), flip, self.image_size)
        else:  # integer shifts: exact crops of the zero-padded images, then resize if needed
            b, h, w, _ = pixels.shape
            p = self.crop_padding
            padded = F.pad(pixels.permute(0, 3, 1, 2), (p, p, p, p))
            x0, y0 = torch.from_numpy(boxes[:, 0]).long(), torch.from_numpy(boxes[:, 1]).long()
            rows = (y0[:, None] + torch.arange(h))[:, :, None]
            cols = (x0[:, None] + torch.arange(w))[:, None, :]
            cols = torch.where(flip[:, None, None], cols.flip(-1), cols)
            out = padded[torch.arange(b)[:, None, None], :, rows, cols]  # [B, H, W, 3]
            out = _to_unit(out)
            if (h, w) != (self.image_size, self.image_size):
                out = F.interpolate(
                    out, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False, antialias=True
                )
        return out.sub_(0.5).div_(0.5)


def center_crop(pixels: torch.Tensor, image_size: int, resize: Optional[int] = None) -> torch.Tensor:
    """Evaluation view: resize the short side to ``resize`` (default ``image_size / 0.875``), centre
    crop ``image_size``, scale to [-1, 1]. uint8 ``[B, H, W, 3]`` -> float32 ``[B, 3, S, S]``; as
    :func:`harness.data.transforms.eval_transform` (bilinear; exact when no resizing is needed, equal
    up to uint8 rounding when upsampling; no antialiasing when downsampling)."""
    b, h, w, _ = pixels.shape
    resize = resize or int(round(image_size / 0.875))
    # torchvision's Resize(resize) then CenterCrop(image_size), as one box in input pixels
    rh, rw = (resize, int(resize * w / h)) if h <= w else (int(resize * h / w), resize)
    top, left = int(round((rh - image_size) / 2.0)), int(round((rw - image_size) / 2.0))
    box = torch.tensor(
        [left * w / rw, top * h / rh, image_size * w / rw, image_size * h / rh], dtype=torch.float32
    ).expand(b, 4)
    out = _grid(_to_unit(pixels), box, torch.zeros(b, dtype=torch.bool), image_size)
    return out.sub_(0.5).div_(0.5)


class ArrayBatches(torch.utils.data.Dataset):
    """A split fetched batch by batch: ``ds.__getitems__([i, j, ...]) -> (x [B, 3, S, S] float32,
    targets, index [B])``, the hook through which a ``DataLoader`` with a ``batch_sampler`` fetches a
    whole batch at once (:func:`batch_loader`). Targets are ``[B]`` int64, or ``[B, K]`` float32
    multi-hot; ``ds[i]`` gives one example.

    Args:
        base: the split (its labels and class count).
        pixels: its images, ``[N, H, W, 3]`` uint8.
        augment: training augmentation; None = the evaluation view (:func:`center_crop`).
        image_size, eval_resize: evaluation view settings (used when ``augment`` is None).
        seed: augmentation seed.
    """

    def __init__(
        self,
        base: ImageDataset,
        pixels: np.ndarray,
        augment: Optional[BatchAugment] = None,
        image_size: int = 32,
        eval_resize: Optional[int] = None,
        seed: int = 0,
    ) -> None:
        if len(pixels) != len(base):
            raise ValueError(f"{len(pixels)} images for {len(base)} labels in {base.description}")
        self.base, self.pixels, self.augment = base, torch.from_numpy(np.ascontiguousarray(pixels)), augment
        self.image_size, self.eval_resize, self.seed = image_size, eval_resize, seed
        self.epoch, self._params, self._params_epoch = 0, None, None
        self._labels = None if base.multilabel else torch.from_numpy(base.labels)

    def use_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.base)

    def _epoch_params(self) -> "dict[str, np.ndarray]":
        if self._params_epoch != self.epoch:
            _, h, w, _ = self.pixels.shape
            self._params = self.augment.draw(len(self), h, w, self.seed, self.epoch)
            self._params_epoch = self.epoch
        return self._params

    def __getitem__(self, i: int) -> "tuple[torch.Tensor, Any, int]":
        x, y, _ = self.__getitems__([i])
        return x[0], y[0], int(i)

    def __getitems__(self, indices: Any) -> "tuple[torch.Tensor, torch.Tensor, torch.Tensor]":
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        pixels = self.pixels[torch.from_numpy(idx)]
        if self.augment is None:
            x = center_crop(pixels, self.image_size, self.eval_resize)
        else:
            p = self._epoch_params()
            x = self.augment.apply(pixels, p["boxes"][idx], p["flip"][idx])
        if self.base.multilabel:
            k = self.base.num_classes
            y = torch.from_numpy(np.stack([self.base.labels.multi_hot(int(i), k) for i in idx]))
        else:
            y = self._labels[torch.from_numpy(idx)]
        return x, y, torch.from_numpy(idx)


def batch_loader(
    ds: ArrayBatches, batch_size: int, sampler: Optional[torch.utils.data.Sampler] = None, drop_last: bool = False
) -> torch.utils.data.DataLoader:
    """A ``DataLoader`` yielding whole batches of ``ds`` (indices from ``sampler``, default in order),
    in the main process: a batch costs less to build than to move between processes."""
    sampler = sampler if sampler is not None else torch.utils.data.SequentialSampler(range(len(ds)))
    return torch.utils.data.DataLoader(
        ds,
        batch_sampler=torch.utils.data.BatchSampler(sampler, batch_size, drop_last),
        collate_fn=_whole_batch,
        num_workers=0,
        # its own generator: starting an epoch then draws no number from the
        # global RNG, which drives the HET noise (exact resume)
        generator=torch.Generator().manual_seed(0),
    )


def _whole_batch(batch: Any) -> Any:
    """The collate function of :func:`batch_loader`: ``__getitems__`` already made the batch."""
    return batch


def make_loader(
    cfg: Any, base: ImageDataset, train: bool, seed: int = 0, batch_size: Optional[int] = None
) -> "tuple[torch.utils.data.DataLoader, Any, Optional[Any]]":
    """The loader of one split, by ``cfg.loader`` (a :class:`~harness.data.config.DataConfig`).

    Training loaders shuffle with :class:`~harness.data.loading.EpochSampler`, drop the last
    partial batch and augment; evaluation loaders keep the order and use the centre view.

    Returns:
        ``(loader, dataset, sampler)``: call ``use_epoch(e)`` on the dataset and the sampler (None
        for evaluation) before each training epoch.

    Raises:
        ValueError: unknown ``cfg.loader``, or ``array`` for a source that cannot give one.
    """
    from harness.data.loading import EpochSampler, TransformedDataset
    from harness.data.transforms import eval_transform, train_transform

    if cfg.loader not in LOADERS:
        raise ValueError(f"unknown data.loader {cfg.loader!r}: use one of {', '.join(LOADERS)}")
    bs = batch_size or (cfg.batch_size if train else cfg.eval_batch_size)
    pixels = base.pixels(cfg.cache_dir) if cfg.loader != "pil" else None
    if pixels is None and cfg.loader == "array":
        raise ValueError(
            f"data.loader=array needs images in one array; source {cfg.source!r} reads image by image: "
            "set data.loader=pil (or auto)"
        )
    sampler = EpochSampler(len(base), seed) if train else None
    if pixels is not None:
        augment = BatchAugment(cfg.image_size, cfg.crop_padding, cfg.crop_scale, cfg.hflip) if train else None
        ds = ArrayBatches(base, pixels, augment, cfg.image_size, cfg.eval_resize, seed)
        return batch_loader(ds, bs, sampler, drop_last=train), ds, sampler
    base.check_images()
    if train:
        ds = TransformedDataset(
            base, train_transform(cfg.image_size, cfg.crop_scale, cfg.hflip, cfg.crop_padding), seed=seed
        )
    else:
        ds = TransformedDataset(base, eval_transform(cfg.image_size, cfg.eval_resize))
    # the loader gets its own generator: creating an iterator then draws no number from the global
    # RNG (which drives the HET noise), so a resumed run continues the exact random stream
    loader = torch.utils.data.DataLoader(
        ds,
        bs,
        sampler=sampler,
        shuffle=False,
        drop_last=train,
        num_workers=cfg.num_workers,
        pin_memory=torch.cuda.is_available(),
        generator=torch.Generator().manual_seed(seed),
    )
    return loader, ds, sampler
