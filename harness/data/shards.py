"""Sharded streaming data in the WebDataset format: any source packed into tar shards, and the shards read back
as one stream split across ranks and data-loader workers.

Format (WebDataset, https://github.com/webdataset/webdataset; written and read with the ``webdataset`` library):
a shard is a POSIX tar file of examples, each a run of members sharing a key: ``{key}.jpg`` or ``{key}.png``
(the image), and ``{key}.cls`` (one class index in ASCII) or ``{key}.json`` (``{"labels": [ids]}``, a label set,
JFT-style; ``{"label": id}`` is read too). The keys :func:`harness.data.pack.pack` writes are the examples' rows in the source
split, zero-padded, so predictions made on shards line up with the source.

Writing is :mod:`harness.data.pack` (``harness data pack``); the index, its shard names and opening shards (local
files and ``file:``/``http(s):`` URLs, never through a shell) are :mod:`harness.data.shard_index`; which shards each
rank and worker reads, and where a resume starts, is :mod:`harness.data.shard_plan`; a packed split as a training
run sees it is :mod:`harness.data.packed_split`; this module reads the stream. Every shard read to its end is
compared with its index entry (examples, labels' digest), and member names with ``/`` or ``..`` are refused.

Reading (:class:`ShardDataset`, :func:`shard_loader`): every shard goes to exactly one (rank, worker) slot,
``shards[rank::world_size][worker::num_workers]`` in the index's order (the assignment of webdataset's
``split_by_node`` then ``split_by_worker``), so, per epoch:

- each shard is read once, by one worker of one rank: no example is seen twice; without ``drop_last``
  (evaluation) every example is seen exactly once, and ranks see different numbers of examples when the
  shards do not divide evenly among them;
- with ``drop_last`` (training) each worker stops after a whole number of batches, chosen from the index's
  counts so that every rank yields the same number of batches, as DDP needs. Left out of an epoch: each
  worker's partial last batch, plus what evens out the ranks (about one shard when the shard count is not a
  multiple of the world size); the examples left out are the last of each worker's shuffled stream, different
  ones every epoch;
- the order is a function of (seed, epoch, rank, worker) only: a seeded permutation of the slot's shards, then
  a seeded shuffle buffer. Unlike the map-style loader, the order depends on the number of ranks and workers;
- a run restarted mid-epoch replays the same stream without its first ``b`` batches
  (``use_epoch(epoch, skip_batches=b)``): each worker drops the examples of its batches among the loader's first
  ``b`` in whole rounds (``torch.utils.data.DataLoader`` takes batches from its workers in turn, skipping workers
  that have none left: :func:`resume_point`) before decoding them, and :class:`ShardLoader` drops the few batches
  of the last, partial round (fewer than the workers): the batches that follow are those an uninterrupted run
  reads;
- the augmentation of example i in epoch e is seeded by (seed, e, i), as in :mod:`harness.data.loading`.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch

from harness.data.config import DataConfig
from harness.data.loading import mix_seeds
from harness.data.shard_index import (  # noqa: F401 (the index's names, read here and by the packer)
    INDEX_FORMAT,
    INDEX_NAME,
    labels_digest,
    read_index,
    read_shards,
    shard_files,
    shard_name,
)
from harness.data.shard_plan import _slots, batch_limits, resume_point
from harness.io import check_location, quote


def _wds() -> Any:
    """The ``webdataset`` module, imported on first use (the ``shards`` extra: :func:`harness.extras.require`)."""
    from harness.extras import require

    return require("webdataset", "reading WebDataset shards (data.source=shards)")


#: the image members a reader takes, in this order of preference
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "ppm", "pgm", "pbm", "webp", "bmp", "tif", "tiff")


class ShardLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` of a :class:`ShardDataset` that starts where the dataset's ``use_epoch(e, skip_batches=b)``
    says: the dataset's workers skip whole rounds of batches undecoded, this loader drops the few batches of the
    partial round that remain (fewer than its workers)."""

    def __iter__(self) -> Any:
        iterator = super().__iter__()
        for _ in range(getattr(self.dataset, "discard", 0)):
            next(iterator)
        return iterator


class ShardDataset(torch.utils.data.IterableDataset):
    """``(image, target, index)`` examples streamed from WebDataset shards (guarantees in the module docstring).

    Args:
        urls: shard paths or ``file:``/``http(s):`` URLs (:func:`harness.data.shard_index.open_location`), in a
            fixed order.
        num_classes: K.
        multilabel: targets are float32 multi-hot ``[K]`` (single labels become one-element sets); else
            ``int`` class indices (a label set of another size is an error).
        counts: examples per shard (from ``index.json``); needed for ``len()``, ``drop_last`` and the check
            that every shard held what the index says.
        digests: per shard, the ``labels_sha256`` its index records (None: not recorded); a shard read to its end
            is checked against its count and digest (:func:`harness.data.shard_index.read_shards`).
        contents: per shard, the SHA-256 of its bytes its index records (``sha256``; None: not recorded, a pack
            written before audit26 A26-03); a shard read to its end is checked against it too.
        transform: PIL image -> tensor ``[3, S, S]`` (:mod:`harness.data.transforms`); None yields the
            RGB ``PIL.Image``.
        seed: seeds the shard order, the shuffle buffer and the augmentation.
        shuffle: shuffle shards and examples (training); False reads each slot's shards in order.
        shuffle_buffer: examples held by each worker's shuffle buffer (webdataset's ``shuffle``); 0 or 1: shards
            shuffled only.
        batch_size, drop_last: with ``drop_last``, each worker yields a whole number of batches of
            ``batch_size`` and every rank the same number (:func:`batch_limits`).
        batch_multiple: with ``drop_last``, every rank's batches per epoch are a multiple of this (the gradient
            accumulation steps).
        rank, world_size: this process's rank and the number of processes; None: webdataset's
            ``pytorch_worker_info`` (``torch.distributed`` if initialised, else ``RANK`` / ``WORLD_SIZE``),
            read when the dataset is built.
        num_workers: the data loader's workers (0: the main process).
        class_names: K names (default ``"0"``...).

    Raises:
        ValueError: no shards, fewer shards than ranks x workers (some slot would have none), bad sizes, a rank
            outside [0, world_size), ``drop_last`` without counts or batch size; while iterating: a loader with
            another number of workers than ``num_workers``, an example without image or label, a label outside
            [0, K), a shard holding another number of examples or other labels than its index says, a member name
            with ``/`` or ``..``, a shard that is not a tar file.
    """

    def __init__(
        self,
        urls: Sequence[str],
        num_classes: int,
        multilabel: bool,
        counts: Optional[Sequence[int]] = None,
        transform: Optional[Callable] = None,
        seed: int = 0,
        shuffle: bool = True,
        shuffle_buffer: int = 1000,
        batch_size: Optional[int] = None,
        drop_last: bool = False,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        num_workers: int = 0,
        class_names: Optional[Sequence[str]] = None,
        batch_multiple: int = 1,
        digests: Optional[Sequence[Optional[str]]] = None,
        contents: Optional[Sequence[Optional[str]]] = None,
    ) -> None:
        self.urls = [check_location(str(u), "shard") for u in urls]
        if not self.urls:
            raise ValueError("no shards to read: give at least one shard path or URL")
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if counts is not None and len(counts) != len(self.urls):
            raise ValueError(f"{len(counts)} counts for {len(self.urls)} shards: give one count per shard")
        if shuffle_buffer < 0 or num_workers < 0:
            raise ValueError(f"shuffle_buffer and num_workers must be >= 0, got {shuffle_buffer}, {num_workers}")
        if rank is None or world_size is None:
            found_rank, found_world, _, _ = _wds().utils.pytorch_worker_info()
            rank = found_rank if rank is None else rank
            world_size = found_world if world_size is None else world_size
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self.workers = max(1, int(num_workers))
        slots = world_size * self.workers
        if len(self.urls) < slots:
            raise ValueError(
                f"{len(self.urls)} shard(s) cannot be split across {world_size} rank(s) x {self.workers} "
                f"loader worker(s) = {slots} readers without some reading none: pack at least {slots} "
                "shards (a smaller --shard-size), or use fewer workers (data.num_workers)"
            )
        self.num_classes, self.multilabel = int(num_classes), bool(multilabel)
        self.class_names = list(class_names) if class_names else [str(c) for c in range(self.num_classes)]
        self.counts = None if counts is None else [int(c) for c in counts]
        if digests is not None and len(digests) != len(self.urls):
            raise ValueError(f"{len(digests)} label digests for {len(self.urls)} shards: give one per shard (or None)")
        self.expected = {
            u: (
                None if self.counts is None else self.counts[i],
                None if digests is None else digests[i],
                None if contents is None or len(contents) != len(self.urls) else contents[i],
            )
            for i, u in enumerate(self.urls)
        }
        self.transform, self.seed, self.shuffle, self.shuffle_buffer = (
            transform,
            int(seed),
            shuffle,
            int(shuffle_buffer),
        )
        self.rank, self.world_size, self.epoch = int(rank), int(world_size), 0
        self.limits, self.batch_size, self.skip, self.discard = None, batch_size, [0] * self.workers, 0
        if drop_last:
            if self.counts is None or not batch_size or batch_size < 1:
                raise ValueError("drop_last needs the shards' example counts (index.json) and a batch size >= 1")
            self.limits = batch_limits(self.counts, self.world_size, self.workers, int(batch_size), batch_multiple)

    def use_epoch(self, epoch: int, skip_batches: int = 0) -> None:
        """Read epoch ``epoch`` next (the shuffle and the augmentation depend on it), without the first
        ``skip_batches`` batches a :class:`ShardLoader` with ``num_workers`` workers and this batch size yields
        (a mid-epoch resume; the rest of the stream is unchanged): each worker skips its batches of the whole
        rounds done (:func:`resume_point`) before decoding them, and the loader drops the rest.

        Raises:
            ValueError: ``skip_batches`` > 0 without ``drop_last`` (the batch layout is known only then), or more
                than the epoch holds.
        """
        self.epoch, self.skip, self.discard = int(epoch), [0] * self.workers, 0
        if skip_batches:
            if self.limits is None:
                raise ValueError("skipping batches needs a training stream (drop_last, whole batches per worker)")
            bs = int(self.batch_size)
            per_worker = [v // bs for v in self.limits[self.rank]]
            rounds, self.discard = resume_point(per_worker, skip_batches)
            self.skip = [min(c, rounds) * bs for c in per_worker]

    def slot(self, worker: int) -> "list[str]":
        """The shards worker ``worker`` of this rank reads, in the index's order."""
        return [self.urls[i] for i in _slots(len(self.urls), self.world_size, self.workers)[self.rank][worker]]

    def __len__(self) -> int:
        """Examples this rank yields per epoch."""
        if self.limits is not None:
            return sum(self.limits[self.rank])
        if self.counts is None:
            raise TypeError("the length of these shards is unknown: give their counts (index.json)")
        return sum(
            self.counts[i]
            for w in range(self.workers)
            for i in _slots(len(self.urls), self.world_size, self.workers)[self.rank][w]
        )

    def __iter__(self) -> Iterator["tuple[Any, Any, Any]"]:
        wds = _wds()
        _, _, worker, workers = wds.utils.pytorch_worker_info()
        if workers != self.workers:
            raise ValueError(
                f"this shard dataset was built for {self.workers} loader worker(s) but runs in {workers}: "
                f"build it with num_workers={workers if workers > 1 else 0}"
            )
        urls = self.slot(worker)
        positions = _slots(len(self.urls), self.world_size, self.workers)[self.rank][worker]
        rng = random.Random(mix_seeds(self.seed, self.epoch, self.rank, worker))
        if self.shuffle:
            rng.shuffle(urls)
        entries = self.expected
        stages = [wds.SimpleShardList(urls), lambda src: read_shards(src, entries)]
        if self.shuffle and self.shuffle_buffer > 1:
            stages.append(wds.shuffle(self.shuffle_buffer, rng=rng))
        skip, dropped = self.skip[worker], [0]

        def drop(samples: Iterator[dict]) -> Iterator[dict]:  # the examples of the batches done, undecoded
            for sample in samples:
                if dropped[0] < skip:
                    dropped[0] += 1
                    continue
                yield sample

        if skip:
            stages.append(drop)
        stages += [wds.decode("pilrgb"), wds.map(self._example)]
        limit = None if self.limits is None else self.limits[self.rank][worker]
        if limit is not None and skip >= limit:
            return  # this worker's batches of the epoch are all done
        expected = (
            limit if limit is not None else (None if self.counts is None else sum(self.counts[i] for i in positions))
        )
        pipeline, taken = iter(wds.DataPipeline(*stages)), 0
        while limit is None or dropped[0] + taken < limit:  # stop at the limit without decoding one more
            try:
                example = next(pipeline)
            except StopIteration:
                break
            taken += 1
            yield example
        seen = dropped[0] + taken  # examples of this worker's stream, the dropped ones included
        if expected is not None and seen != expected:
            raise ValueError(
                f"rank {self.rank} worker {worker} read {seen} examples from {len(urls)} shard(s) "
                f"({', '.join(urls[:2])}...) where the index says {expected}: a shard is truncated or "
                "was replaced; pack the data again"
            )

    def _example(self, sample: dict) -> "tuple[Any, Any, Any]":
        key, url = sample.get("__key__", "?"), sample.get("__url__", "?")
        image = next((sample[e] for e in IMAGE_EXTENSIONS if e in sample), None)
        if image is None:
            raise ValueError(f"example {key!r} of {url} has no image (.jpg or .png member); repack the data")
        label = sample.get("json") if "cls" not in sample else {"label": sample["cls"]}
        if not isinstance(label, dict) or not ("labels" in label or "label" in label):
            raise ValueError(
                f'example {key!r} of {url} has no label: a .cls member, or .json with "label" or '
                '"labels"; repack the data'
            )
        ids = [int(c) for c in (label["labels"] if "labels" in label else [label["label"]])]
        bad = [c for c in ids if not 0 <= c < self.num_classes]
        if bad:
            raise ValueError(
                f"example {key!r} of {url} has label {bad[0]} outside [0, {self.num_classes}); repack "
                "the data or fix its index"
            )
        if self.multilabel:
            target: Any = np.zeros(self.num_classes, dtype=np.float32)
            target[ids] = 1.0
        elif len(ids) == 1:
            target = ids[0]
        else:
            raise ValueError(
                f"example {key!r} of {url} has the label set {ids} in single-label shards; read them "
                "with multilabel=True"
            )
        if not key.isdigit():  # a row number lines the predictions up with the source (and batches as a tensor)
            raise ValueError(
                f"example {quote(key, 80)!r} of {url}: its key is not a row number (a shard's members are "
                "ROW.EXT, e.g. 000123.png); pack the data with harness data pack"
            )
        index = int(key)
        if self.transform is None:
            return image, target, index
        with torch.random.fork_rng(devices=[]):
            # as harness.data.loading.TransformedDataset: the CPU generator only, seeded by (seed, epoch, index)
            torch.default_generator.manual_seed(mix_seeds(self.seed, self.epoch, index))
            return self.transform(image), target, index


def shard_loader(
    cfg: DataConfig,
    split: str,
    train: bool,
    seed: int = 0,
    batch_size: Optional[int] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
    batch_multiple: int = 1,
) -> "tuple[ShardLoader, ShardDataset]":
    """The loader of one split of ``data.source=shards``: the transforms of :func:`harness.data.batched.make_loader`'s
    per-image path, ``cfg.num_workers`` workers, batches of ``(x [B, 3, S, S], target [B] or [B, K], index [B])``;
    targets are multi-hot ``[B, K]`` float32 when the index holds label sets or ``cfg.multilabel`` is set (single
    labels then become one-hot rows).

    Training loaders shuffle (``cfg.shuffle_buffer``) and drop the last partial batch of each worker, every rank
    making the same number of batches (``len(loader)``, a multiple of ``batch_multiple``); evaluation loaders read
    every example once, in shard order per worker, each worker ending with its own partial batch (up to
    ``num_workers`` more batches than ``len(loader)``).
    Call ``dataset.use_epoch(e)`` before each training epoch (``use_epoch(e, skip_batches=b)`` to resume after b
    batches). Do not let ``accelerate`` shard this loader again (the dataset splits by rank itself).

    Raises:
        ValueError, FileNotFoundError: as :func:`shard_files` and :class:`ShardDataset`; ``data.limit_train`` /
            ``limit_eval`` set (pack fewer examples instead); ``data.num_classes`` disagreeing with the index.
    """
    from harness.data.transforms import eval_transform, train_transform

    if cfg.limit_train or cfg.limit_eval:
        raise ValueError(
            "data.limit_train / data.limit_eval do not apply to shards: pack the examples you want "
            "(e.g. harness data pack SOURCE OUT limit_train=N)"
        )
    urls, counts, index = shard_files(str(cfg.path or ""), split)
    k = len(index["class_names"])
    if cfg.num_classes and cfg.num_classes != k:
        raise ValueError(f"data.num_classes={cfg.num_classes} but the shards' index names {k} classes; unset it")
    bs = batch_size or (cfg.batch_size if train else cfg.eval_batch_size)
    if train:
        transform = train_transform(cfg.image_size, cfg.crop_scale, cfg.hflip, cfg.crop_padding)
    else:
        transform = eval_transform(cfg.image_size, cfg.eval_resize)
    ds = ShardDataset(
        urls,
        k,
        bool(index["multilabel"] or cfg.multilabel),
        counts,
        transform,
        seed,
        shuffle=train,
        shuffle_buffer=cfg.shuffle_buffer,
        batch_size=bs,
        drop_last=train,
        rank=rank,
        world_size=world_size,
        num_workers=cfg.num_workers,
        class_names=index["class_names"],
        batch_multiple=batch_multiple,
        digests=[s.get("labels_sha256") for s in index["shards"]],
        contents=[s.get("sha256") for s in index["shards"]],  # a shard replaced by another (audit26 A26-03)
    )
    loader = ShardLoader(
        ds,
        batch_size=bs,
        drop_last=train,
        num_workers=cfg.num_workers,
        pin_memory=torch.cuda.is_available(),
        # its own generator: starting an epoch draws nothing from the global RNG
        generator=torch.Generator().manual_seed(seed),
    )
    return loader, ds
