"""The data of an upstream run: its splits, the label noise drawn on them, the labels its head's link takes, the
loss it trains with, and its loaders (step 1 of :func:`harness.upstream.train.run`).

``data.source=shards``: WebDataset shards read as a stream, each process its own shards
(:mod:`harness.data.shards`); every other source a split held in memory (:func:`harness.data.sources.build_split`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from harness.data.batched import make_loader
from harness.data.config import STREAM_SOURCES
from harness.data.copies import warn_copies
from harness.data.dataset import LabelSets
from harness.data.noise import inject_label_noise
from harness.data.packed_split import shard_split
from harness.data.sources import build_split
from harness.upstream.config import UpstreamConfig, check_best_metric
from harness.upstream.losses import loss_setup


@dataclass
class RunData:
    """What a run reads, as the training loop uses it.

    Attributes:
        stream: the splits are shard streams (``data.source=shards``), read by each process in its own part.
        read_split: the reader of a split (:func:`harness.data.packed_split.shard_split` or
            :func:`harness.data.sources.build_split`).
        train, eval: the training split (its labels noisy where ``data.label_noise`` says so) and the evaluation
            split, one-hot where a sigmoid head trains on single labels.
        link, multilabel, num_classes: the head's link, whether targets are label sets ``[B, K]``, and K.
        noise_info: the label noise drawn (``inject_label_noise``'s description), or None.
        loss_info, log_transition: the loss as recorded and forward correction's ``[K, K]`` log T
            (:func:`harness.upstream.losses.loss_setup`).
        train_loader, train_ds, sampler, eval_loader: the loaders (``sampler`` None for streams).
        layout: a stream's process and loader-worker counts (its order depends on both; a resume needs the same),
            None otherwise.
        rank, world: this process's index and the number of processes.
        heldout: ``data.heldout_split`` as read before training (:func:`read_heldout`), or None without one.
    """

    stream: bool
    read_split: Callable
    train: Any
    eval: Any
    link: str
    multilabel: bool
    num_classes: int
    noise_info: Optional[dict]
    loss_info: dict
    log_transition: Optional[torch.Tensor]
    train_loader: Any
    train_ds: Any
    sampler: Any
    eval_loader: Any
    layout: Optional[dict]
    rank: int
    world: int
    heldout: Any = None


def _check_same_classes(train: Any, evaluation: Any, train_split: str, eval_split: str) -> None:
    """The training and evaluation splits name the same classes in the same order, with the same kind of label.

    Raises:
        ValueError: naming the classes one split lacks (or the order that differs), both splits' data and the fix.
    """
    where = (
        f"train split {train_split!r} ({train.description}) and eval split {eval_split!r} ({evaluation.description})"
    )
    if train.multilabel != evaluation.multilabel:
        kinds = ["label sets" if d.multilabel else "single labels" for d in (train, evaluation)]
        raise ValueError(f"{where} differ in label type ({kinds[0]} and {kinds[1]}): give both splits one kind")
    a, b = list(train.class_names), list(evaluation.class_names)
    if a == b:
        return
    only_train, only_eval = [c for c in a if c not in b], [c for c in b if c not in a]
    if only_train or only_eval:
        lacks = "; ".join(
            f"{name} lacks {', '.join(map(repr, missing[:10]))}{' ...' if len(missing) > 10 else ''}"
            for name, missing in (("the eval split", only_train), ("the train split", only_eval))
            if missing
        )
        raise ValueError(
            f"{where} differ in classes ({lacks}): every split needs every class, in the same order (class k is the "
            "model's output k); add the missing class, with images of it (an image folder's class folder must hold "
            "one), or remove it from the other split"
        )
    raise ValueError(
        f"{where} name the same classes in another order ({a[:10]} and {b[:10]}): class k is the model's output k, so "
        "the orders must agree; fix the class list of one split"
    )


def read_run_data(cfg: UpstreamConfig, rank: int, world: int) -> RunData:
    """Read the splits, draw the label noise, fit the labels to the link, check the sizes, set up the loss and make
    the loaders of process ``rank`` of ``world``.

    Raises:
        ValueError: splits that differ in classes or label type; label noise on multi-label data or on images read
            one by one (input-dependent); a sigmoid/softmax link that does not fit the labels; model.num_classes
            not the data's; fewer training examples than a batch.
        FileNotFoundError: missing data.
    """
    stream = cfg.data.source in STREAM_SOURCES
    read_split = shard_split if stream else build_split
    train_base = read_split(cfg.data, cfg.data.train_split)
    eval_base = read_split(cfg.data, cfg.data.eval_split)
    heldout = read_heldout(cfg, read_split)  # a missing held-out split is named now, not after training
    _check_same_classes(train_base, eval_base, cfg.data.train_split, cfg.data.eval_split)
    if not stream and rank == 0:  # evaluation images that are copies of training ones, named (audit26 A26-14)
        evaluated = {f"data.eval_split={cfg.data.eval_split}": eval_base}
        evaluated[f"data.heldout_split={cfg.data.heldout_split}"] = heldout if hasattr(heldout, "load_image") else None
        warn_copies(train_base, evaluated, f"data.train_split={cfg.data.train_split}")
    clean_labels = None if stream else train_base.labels
    train_base, noise_info = _noisy_training(cfg, train_base)
    link = cfg.model.head.get("link", "softmax")
    if link == "sigmoid" and not train_base.multilabel:  # sigmoid link on single-label data: one-hot targets
        train_base, eval_base = (
            d.one_hot() if stream else d.with_labels(LabelSets.from_labels(d.labels), f"{d.description}, one-hot")
            for d in (train_base, eval_base)
        )
    multilabel = train_base.multilabel
    num_classes = cfg.model.num_classes or train_base.num_classes
    _check_sizes(cfg, train_base, num_classes, multilabel, link)
    noisy_labels = None if stream else train_base.labels  # a shard reader streams its labels
    loss_info, log_transition = loss_setup(cfg, clean_labels, noisy_labels, num_classes)
    if stream:  # whole batches, as many on every rank, a multiple of the accumulation steps an epoch
        train_loader, train_ds = train_base.loader(True, cfg.seed, rank, world, cfg.train.grad_accum_steps)
        eval_loader, sampler = eval_base.loader(False, cfg.seed, rank, world)[0], None
    else:
        train_loader, train_ds, sampler = make_loader(cfg.data, train_base, train=True, seed=cfg.seed)
        eval_loader = make_loader(cfg.data, eval_base, train=False, seed=cfg.seed)[0]
    layout = {"world_size": world, "num_workers": cfg.data.num_workers} if stream else None
    return RunData(
        stream,
        read_split,
        train_base,
        eval_base,
        link,
        multilabel,
        num_classes,
        noise_info,
        loss_info,
        log_transition,
        train_loader,
        train_ds,
        sampler,
        eval_loader,
        layout,
        rank,
        world,
        heldout,
    )


def read_heldout(cfg: UpstreamConfig, read_split: Callable) -> Any:
    """``data.heldout_split`` read with ``read_split`` (before any training: audit12 A12-03), or None without one.

    Raises:
        ValueError, FileNotFoundError: the split cannot be read; the reader's message, prefixed with the key and
            followed by the fix (``data.heldout_split=null``).
    """
    split = cfg.data.heldout_split
    if not split:
        return None
    try:
        return read_split(cfg.data, split)
    except (ValueError, FileNotFoundError) as e:
        raise type(e)(
            f"data.heldout_split={split}: {e} (held-out predictions are saved for post-hoc calibration): give a split "
            "the data has, or data.heldout_split=null for none"
        ) from e


def _noisy_training(cfg: UpstreamConfig, train_base: Any) -> "tuple[Any, Optional[dict]]":
    """The training split with ``data.label_noise`` drawn on its labels (the noise seed's first stream), and the
    noise's description; unchanged and None without noise."""
    if not (cfg.data.label_noise and cfg.data.label_noise.get("kind", "none") != "none"):
        return train_base, None
    if train_base.multilabel:
        raise ValueError("data.label_noise flips single labels; this training split is multi-label")
    images = None
    if cfg.data.label_noise.get("kind") == "input_dependent":
        images = train_base.pixels(cfg.data.cache_dir)
        if images is None:
            raise ValueError(
                f"data.label_noise.kind=input_dependent needs the training images in one array, and "
                f"{train_base.description} reads them one by one: use a class-conditional kind"
            )
    noisy, noise_info = inject_label_noise(
        train_base.labels, train_base.num_classes, **cfg.data.label_noise, images=images
    )
    return train_base.with_labels(
        noisy,
        f"{train_base.description}, with {noise_info['kind']} label noise ({noise_info['realised_rate']:.1%} flipped)",
    ), noise_info


def _check_sizes(cfg: UpstreamConfig, train_base: Any, num_classes: int, multilabel: bool, link: str) -> None:
    """The class count, the link and the batch size against the training split (see :func:`read_run_data`)."""
    if num_classes != train_base.num_classes:
        raise ValueError(
            f"model.num_classes={num_classes} but the data has {train_base.num_classes} classes; "
            "leave model.num_classes unset to take it from the data"
        )
    if multilabel and link != "sigmoid":
        raise ValueError(
            f"{train_base.description} holds label sets (multi-hot targets), which need the sigmoid link, and "
            f"model.head.link={link}: set model.head.link=sigmoid, or read single labels (data.multilabel=false)"
        )
    check_best_metric(cfg.train.best_metric, link, num_classes)
    if len(train_base) < cfg.data.batch_size:
        raise ValueError(
            f"the training split has {len(train_base)} examples, fewer than data.batch_size="
            f"{cfg.data.batch_size}; lower the batch size"
        )
    step = cfg.data.batch_size * cfg.train.grad_accum_steps
    if len(train_base) < step:
        raise ValueError(
            f"one optimiser step takes train.grad_accum_steps x data.batch_size = {cfg.train.grad_accum_steps} x "
            f"{cfg.data.batch_size} = {step} examples, more than the training split's {len(train_base)}: lower "
            "train.grad_accum_steps"
        )


def _noisy_heldout(cfg: UpstreamConfig, held: Any) -> "tuple[Any, dict]":
    """The held-out split with ``data.label_noise`` drawn on its labels too, from the noise seed's
    second stream (:func:`harness.data.noise.inject_label_noise`, ``stream=1``): held-out labels are
    what a user has, so they are as noisy as the training labels, and a held-out NLL (the choice of
    τ, a primary endpoint) is scored against them. Returns the split and the noise's description."""
    images = held.pixels(cfg.data.cache_dir) if cfg.data.label_noise.get("kind") == "input_dependent" else None
    noisy, info = inject_label_noise(held.labels, held.num_classes, **cfg.data.label_noise, images=images, stream=1)
    return held.with_labels(
        noisy, f"{held.description}, with {info['kind']} label noise ({info['realised_rate']:.1%} flipped)"
    ), info


def heldout_loader(cfg: UpstreamConfig, data: RunData, accelerator: Any) -> Any:
    """The loader of ``data.heldout_split`` (read before training, :func:`read_heldout`), its labels as noisy as the training labels
    (:func:`_noisy_heldout`, recorded in ``data.noise_info["heldout"]``) and as the link takes them; prepared by
    accelerate unless it is a shard stream."""
    held_base = data.heldout if data.heldout is not None else data.read_split(cfg.data, cfg.data.heldout_split)
    if data.noise_info is not None:  # the held-out labels carry the same noise (what a user holds out is noisy)
        held_base, data.noise_info["heldout"] = _noisy_heldout(cfg, held_base)
    if data.multilabel and not held_base.multilabel:
        held_base = (
            held_base.one_hot() if data.stream else held_base.with_labels(LabelSets.from_labels(held_base.labels))
        )
    if data.stream:
        return held_base.loader(False, cfg.seed, data.rank, data.world)[0]
    return accelerator.prepare(make_loader(cfg.data, held_base, train=False, seed=cfg.seed)[0])
