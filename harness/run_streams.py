"""Run folders trained on a stream source (``data.source=shards``: WebDataset tar shards written by ``harness data
pack``) as the run-folder analyses read them (audit16 A16-05).

A packed split is read as a stream, never by index: :func:`read_split` gives its index as the stand-in of an
in-memory split (description, classes, size; :class:`harness.data.packed_split.ShardSplit`) and :func:`split_batches`
its evaluation stream, so re-predicting a run (``harness ensemble --from-checkpoints``, the report's covariance
analysis) works on shards as on any source. What needs a split's images by index (``harness shift``: the same
corrupted images and subset for every model) is refused, before any work, by :func:`check_read_by_index`, the one
rule every such command calls.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

from harness.data.config import SOURCES, STREAM_SOURCES, DataConfig

if TYPE_CHECKING:
    from harness.uncertainty.predictions import Predictions


def is_stream(data: DataConfig) -> bool:
    """Whether ``data``'s source is read as a stream (:data:`harness.data.config.STREAM_SOURCES`)."""
    return data.source in STREAM_SOURCES


def read_split(data: DataConfig, split: str) -> Any:
    """The split ``split`` of ``data``: an :class:`~harness.data.dataset.ImageDataset`
    (:func:`harness.data.sources.build_split`), or for a stream source its index only
    (:func:`harness.data.packed_split.shard_split`: ``description``, ``class_names``, ``multilabel``, ``len()``).

    Raises:
        ValueError, FileNotFoundError: as those readers (missing data, a missing or interrupted pack).
    """
    if is_stream(data):
        from harness.data.packed_split import shard_split

        return shard_split(data, split)
    from harness.data.sources import build_split

    return build_split(data, split)


def split_batches(data: DataConfig, base: Any, one_hot: bool) -> Iterable:
    """The evaluation loader of a split read by :func:`read_split` (batches ``(x [B, 3, S, S], target, index [B])``,
    every example once): :func:`harness.data.batched.make_loader`'s, or for shards one process's whole stream
    (rank 0 of 1, in shard order: sort by index where the order matters). ``one_hot``: single labels as multi-hot
    rows (a sigmoid model)."""
    if is_stream(data):
        part = base.one_hot() if one_hot and not base.multilabel else base
        return part.loader(train=False, seed=0, rank=0, world_size=1)[0]
    from harness.data.batched import make_loader
    from harness.data.dataset import LabelSets

    if one_hot and not base.multilabel:
        base = base.with_labels(LabelSets.from_labels(base.labels))
    return make_loader(data, base, train=False)[0]


def packed_from(data: DataConfig, split: str) -> str:
    """What the pack of ``split`` was packed from (its index's source description), or '' if it cannot be read."""
    try:
        return read_split(data, split).index.get("source", {}).get("description", "")
    except (OSError, ValueError, ImportError):
        return ""


def check_read_by_index(data: DataConfig, folder: "str | Path", command: str, why: str, fix: str) -> None:
    """Refuse, before any work, a run folder whose data ``command`` must read by index while its source is a stream.

    Args:
        data: the folder's data section (:func:`harness.runs.data_config`).
        folder: the run folder, for the message.
        command: the command or option that needs the images (``harness shift``).
        why: what it reads by index (``re-predicts the evaluation split's images by index ...``).
        fix: what the user can do instead, in words of the command line.

    Raises:
        ValueError: ``data.source`` is a stream source, naming the folder, the source, the rule and ``fix``.
    """
    if not is_stream(data):
        return
    origin = packed_from(data, data.eval_split)
    packed = f" (packed from {origin})" if origin else ""
    raise ValueError(
        f"{folder} was trained and evaluated on data.source={data.source} (data.path={data.path}{packed}), read as "
        f"a stream, and {command} {why}, which a stream cannot give: {command} covers runs on a source read by index "
        f"({', '.join(SOURCES)}); {fix}"
    )


def pack_clean_heldout(preds: "Predictions", data: DataConfig) -> "Optional[Predictions]":
    """The held-out predictions ``preds`` of a run trained on shards with the clean labels of their examples: their
    own targets when the pack of ``data.heldout_split`` holds the source's own labels (its ``index.json`` records no
    ``label_noise``, nor a cifar10n label set other than ``clean``) and the run drew no noise; None when the pack holds
    noisy labels, whose clean counterparts it does not record.

    Raises:
        ValueError, FileNotFoundError: the held-out pack cannot be read (:func:`read_split`).
    """
    index = read_split(data, data.heldout_split).index
    source = (index.get("source") or {}).get("config") or {}
    noisy_set = source.get("source") == "cifar10n" and source.get("label_set", "clean") != "clean"
    if index.get("label_noise") or noisy_set or (data.label_noise or {}).get("kind", "none") != "none":
        return None
    return replace(preds, source=f"{preds.source} (clean labels: the pack's own, no label noise recorded)")
