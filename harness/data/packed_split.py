"""A packed split (``data.source=shards``) as a training run sees it before reading it: its index, the stand-in
for an in-memory split's description, class names and size, and its loader (:func:`harness.data.shards.shard_loader`).
:func:`shard_split` reads the index only; no shard is opened until the loader is iterated.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.data.config import DataConfig
from harness.data.shard_index import shard_files
from harness.data.shards import ShardDataset, ShardLoader, _wds, shard_loader


@dataclass(frozen=True)
class ShardSplit:
    """A packed split as a training run sees it before reading it: what its index says (the stand-in, for shards,
    of :class:`harness.data.dataset.ImageDataset`'s ``description``, ``class_names``, ``num_classes``,
    ``multilabel`` and ``len()``), and its loader. Built by :func:`shard_split`.

    Attributes:
        cfg: the data config (``source: shards``).
        split: the split's name.
        index: its ``index.json``.
        multilabel: targets are multi-hot rows (label sets, or single labels read as one-hot sets).
        description: one line for run metadata and reports.
    """

    cfg: DataConfig
    split: str
    index: dict
    multilabel: bool
    description: str

    @property
    def class_names(self) -> "list[str]":
        return list(self.index["class_names"])

    @property
    def num_classes(self) -> int:
        return len(self.index["class_names"])

    def __len__(self) -> int:
        """Examples in the split (all ranks together)."""
        return int(self.index["num_examples"])

    def one_hot(self) -> "ShardSplit":
        """The same split with single labels read as one-label sets (multi-hot ``[K]`` targets, the sigmoid link)."""
        return replace(self, multilabel=True, description=f"{self.description}, one-hot")

    def loader(
        self, train: bool, seed: int, rank: int = 0, world_size: int = 1, batch_multiple: int = 1
    ) -> "tuple[ShardLoader, ShardDataset]":
        """:func:`shard_loader` of this split for rank ``rank`` of ``world_size``."""
        return shard_loader(
            replace(self.cfg, multilabel=self.multilabel),
            self.split,
            train,
            seed,
            rank=rank,
            world_size=world_size,
            batch_multiple=batch_multiple,
        )


def shard_split(cfg: DataConfig, split: str) -> ShardSplit:
    """The packed split ``split`` of ``cfg.path`` (``data.source=shards``), from its index; no shard is opened.

    Raises:
        FileNotFoundError, ValueError: as :func:`shard_files` (no pack of that split, an interrupted pack, a missing
            shard, a malformed index); ``data.num_classes`` disagreeing with the index.
        harness.extras.MissingExtra: webdataset is not installed (named before any work).
    """
    _wds()
    urls, _, index = shard_files(str(cfg.path or ""), split)
    k = len(index["class_names"])
    if cfg.num_classes and cfg.num_classes != k:
        raise ValueError(
            f"data.num_classes={cfg.num_classes} but the shards' index of {split!r} names {k} classes; unset it"
        )
    where = urls[0].rsplit("/", 1)[0] if "/" in urls[0] else "."
    source = index.get("source", {}).get("description", "unknown source")
    return ShardSplit(
        cfg,
        split,
        index,
        bool(index["multilabel"] or cfg.multilabel),
        f"{source}, packed as {len(urls)} shard(s) in {where}",
    )
