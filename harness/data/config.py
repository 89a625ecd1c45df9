"""The data config: which source to read, where, and how to feed it (the ``data`` section of a run).

The readers that act on it: :func:`harness.data.sources.build_split`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from harness.rules import MAX_IMAGE_SIDE, check_unread_keys, setting

SOURCES = ("digits", "cifar10n", "image_folder", "tfds", "manifest")
#: sources read as a stream (no random access): WebDataset tar shards, :mod:`harness.data.shards`
STREAM_SOURCES = ("shards",)
#: how a split is decoded and augmented (``data.loader``; :mod:`harness.data.batched`)
LOADERS = ("auto", "array", "pil")
#: cifar10n's training label sets (``data.label_set``; its ``<name>_label`` columns, :mod:`harness.data.sources`)
LABEL_SETS = ("clean", "aggre", "random1", "random2", "random3", "worse")
#: the data keys each source reads that the others do not (:func:`check_data`)
SOURCE_KEYS = {"cifar10n": ("label_set",)}


@dataclass
class DataConfig:
    """Which data to read and how to feed it.

    Attributes:
        source: one of ``digits``, ``cifar10n``, ``image_folder``, ``tfds``, ``manifest``; or ``shards``
            (WebDataset tar shards written by ``harness data pack``, read as a stream by
            :func:`harness.data.shards.shard_loader`, not by :func:`~harness.data.sources.build_split`).
        path: data location (cifar10n folder, image folder root, manifest file, TFDS data_dir; for
            ``shards`` a folder holding ``<split>/index.json``, or a shard pattern such as
            ``/data/in21k/{split}-{000000..000999}.tar`` beside an ``index.json``).
        name: TFDS dataset name (``imagenet2012``, ``imagenet21k``...).
        train_split, eval_split: split names (per source; see :func:`harness.data.sources.build_split`).
        heldout_split: optional held-out split (e.g. digits ``val``) on which the final model's
            predictions are also saved, for post-hoc calibration (temperature scaling).
        label_set: cifar10n training labels (``clean``, ``aggre``, ``random1..3``, ``worse``); no other source
            reads it (:func:`check_data`).
        multilabel: cifar10n: train on the multi-hot set of the three annotators' labels.
        num_classes: manifest / tfds override of K (default: read from the data).
        image_key, label_key: TFDS feature names.
        label_noise: synthetic noise on single-label training data, see ``harness.data.noise`` (``{}`` or
            null: none).
        image_size, eval_resize, crop_scale, hflip: augmentation (see ``harness.data.transforms``).
        crop_padding: p > 0 replaces the random resized crop by a random translation of up to p
            pixels (``RandomCrop(size, padding=p)``, the CIFAR augmentation of He et al. 2016); below
            ``image_size`` (:func:`check_data`).
        loader: ``array`` decodes the split once into a uint8 array (cached on disk for zip
            sources) and augments whole batches as tensor ops (``harness.data.batched``); ``pil``
            decodes and transforms each image on every epoch, in ``num_workers`` processes (any
            source, any image size); ``auto`` takes ``array`` where the source supports it
            (digits, cifar10n) and ``pil`` elsewhere.
        cache_dir: folder of the decoded-image cache (default ``$HARNESS_CACHE`` or ``~/.cache/harness``).
        allow_outside_root: let manifest entries name images outside the manifest's folder (``../``,
            absolute paths); off by default, so a list from elsewhere cannot read arbitrary files.
        batch_size, eval_batch_size, num_workers: loader settings (batch per process; workers of
            the ``pil`` loader).
        limit_train, limit_eval: use only the first N examples (quick runs); 0 = all.
        shuffle_buffer: ``shards``: examples held in each loader worker's shuffle buffer (0: shard
            order shuffled only).
    """

    source: str = setting("digits", choices=SOURCES + STREAM_SOURCES)
    path: Optional[str] = None
    name: Optional[str] = None
    train_split: str = "train"
    eval_split: str = "test"
    heldout_split: Optional[str] = None
    label_set: str = setting("clean", choices=LABEL_SETS)
    multilabel: bool = False
    num_classes: Optional[int] = setting(None, low=1, whole=True, note="or null: read from the data")
    image_key: str = "image"
    label_key: str = "label"
    label_noise: Optional[dict] = field(default_factory=dict)
    image_size: int = setting(32, low=1)
    eval_resize: Optional[int] = None
    crop_scale: float = setting(0.08, low=0, low_open=True, high=1)
    hflip: bool = True
    crop_padding: int = setting(0, low=0, high=MAX_IMAGE_SIDE, whole=True, note="0 = none")
    loader: str = setting("auto", choices=LOADERS)
    cache_dir: Optional[str] = None
    allow_outside_root: bool = False
    batch_size: int = setting(64, low=1)
    eval_batch_size: int = setting(256, low=1)
    num_workers: int = setting(0, low=0, note="0 = none")
    limit_train: int = setting(0, low=0, note="0 = all")
    limit_eval: int = setting(0, low=0, note="0 = all")
    shuffle_buffer: int = setting(1000, low=0, whole=True, note="0: shard order shuffled only")

    def __post_init__(self) -> None:
        """``label_noise: null`` means no noise (as ``{}``); ``path`` and ``cache_dir`` are local paths or
        ``file:``/``http(s):`` URLs (:func:`harness.io.check_location`: a ``pipe:`` URL would run a shell command)."""
        from harness.io import check_location

        if self.label_noise is None:
            self.label_noise = {}
        check_location(self.path, "data.path")
        check_location(self.cache_dir, "data.cache_dir")


def check_data(d: DataConfig) -> None:
    """The rules that relate data settings (each one's range is declared beside it): ``label_set`` set away from its
    default only for a source that reads it (:data:`SOURCE_KEYS`), ``crop_padding`` below ``image_size`` (a shift by a
    whole image can leave nothing of it in the crop, and the padded batch grows as (side + 2p)²).

    Raises:
        ValueError: naming the key, its value, the rule and the fix.
    """
    check_unread_keys(d, "data", "source", SOURCE_KEYS, "source")
    if d.crop_padding >= d.image_size:
        raise ValueError(
            f"data.crop_padding={d.crop_padding} must be below data.image_size={d.image_size}: a random shift by up "
            f"to {d.crop_padding} px can move the whole image out of the crop (CIFAR's augmentation shifts 32 px "
            "images by 4); give a few pixels, or 0 for the random resized crop"
        )
