"""Packing any source the harness reads into WebDataset tar shards (``harness data pack``).

Packing (:func:`pack`, ``harness data pack``) writes ``{prefix}-000000.tar``, ``{prefix}-000001.tar``, ... of
``shard_size`` examples each (the last one shorter), the examples in a seeded random order (so every shard holds
a sample of every class even when the source is sorted by class), then ``index.json``: the example and label
counts of every shard, the total, class names, per-class label counts, the label type and the source. Each shard
is written under a temporary name and renamed when complete; a rerun after an interruption writes only the
missing shards (the plan in ``index.json``, written first, must match).

The format, and reading it back, is :mod:`harness.data.shards`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from harness.data.cache import file_digest
from harness.data.config import (
    DataConfig,
)
from harness.data.dataset import ImageDataset
from harness.data.noise import inject_label_noise
from harness.data.pack_source import noise_splits
from harness.data.shard_index import INDEX_FORMAT, INDEX_NAME, labels_digest, read_index, shard_name
from harness.io import (
    RunLock,
    atomic_write_stream,
    atomic_write_text,
    check_name,
    check_output_folder,
    check_writable,
    json_dumps,
)

#: image extensions kept as they are when the source holds encoded files (others are re-encoded as PNG)
KEEP_ENCODED = {"jpg": "jpg", "jpeg": "jpg", "png": "png"}


def _label_ids(ds: ImageDataset, i: int) -> np.ndarray:
    return ds.labels[i] if ds.multilabel else np.asarray([ds.labels[i]], dtype=np.int64)


def noisy_split(cfg: DataConfig, split: str, ds: ImageDataset) -> "tuple[ImageDataset, Optional[dict]]":
    """The split with ``cfg.label_noise`` drawn on its labels as a run draws it (:mod:`harness.upstream.train`): the
    training split from the noise seed's first stream, the held-out split from its second (:func:`noise_splits`); any
    other split (the evaluation split, which a run scores on its clean labels) is returned as it is.

    Returns:
        ``(split, noise)``: the dataset (with the noisy labels) and the noise's description
        (:func:`harness.data.noise.inject_label_noise`: kind, rate, seed, realised rate, transition), or None when
        no noise was drawn.

    Raises:
        ValueError: label noise on a multi-label split, or input-dependent noise on a source that does not hold its
            images in one array.
    """

    noise = dict(cfg.label_noise or {})
    if noise.get("kind", "none") == "none" or split not in noise_splits(cfg):
        return ds, None
    if ds.multilabel:
        raise ValueError(
            "data.label_noise flips single labels and this split holds label sets: unset it "
            "(data.label_noise=null) to pack the label sets"
        )
    images = None
    if noise.get("kind") == "input_dependent":
        images = ds.pixels(cfg.cache_dir)
        if images is None:
            raise ValueError(
                f"data.label_noise.kind=input_dependent needs the images in one array, and "
                f"{ds.description} reads them one by one: use a class-conditional kind, or "
                "data.label_noise=null to pack the clean labels"
            )
    noisy, info = inject_label_noise(
        ds.labels, ds.num_classes, **noise, images=images, stream=0 if split == cfg.train_split else 1
    )
    return ds.with_labels(
        noisy, f"{ds.description}, with {info['kind']} label noise ({info['realised_rate']:.1%} flipped)"
    ), info


def pack(
    ds: ImageDataset,
    out_dir: "str | os.PathLike",
    shard_size: int,
    prefix: str = "shard",
    order_seed: Optional[int] = 0,
    source: Optional[dict] = None,
    progress: bool = True,
    label_noise: Optional[dict] = None,
    overwrite: bool = False,
) -> dict:
    """Write a split as WebDataset tar shards and ``index.json`` (format in the module docstring).

    Args:
        ds: the split (:func:`harness.data.sources.build_split`), N >= 1 examples of K classes.
        out_dir: the folder of the shards (created; it may hold only this pack's files).
        shard_size: examples per shard (the last shard holds the rest), >= 1.
        prefix: shard names ``{prefix}-000000.tar``... (a plain name: letters, digits, ``.``, ``_``, ``-``).
        order_seed: examples go to shards in the permutation of ``numpy.random.default_rng(order_seed)``;
            None keeps the source order.
        source: what to record about the source besides ``ds.description`` (e.g. the data config and split).
        progress: show a progress bar (tqdm) on stderr.
        label_noise: the synthetic noise already drawn on ``ds``'s labels (:func:`noisy_split`), recorded in the
            index as ``label_noise`` (None: the labels are the source's).
        overwrite: pack into a folder that holds files of others, beside them (never replacing one).

    Each example's image is decoded first (a broken file stops the pack, named); its bytes are kept as they
    are when the source holds them encoded as JPEG or PNG, else it is written as a PNG of its RGB pixels.
    ``index.json`` is written first with ``"complete": false`` and the plan (source, labels' SHA-256, shard
    size, order), each shard under a temporary name renamed when complete, and ``index.json`` again at the end.
    Run again after an interruption, the same pack writes only the shards that are missing; a finished pack
    is left as it is.

    Returns:
        The index (the content of ``index.json``).

    Raises:
        ValueError: ``shard_size`` < 1, an empty split, a bad prefix, an unwritable folder, a folder holding
            another pack, tar files of unknown origin or (without ``overwrite``) other files, another process packing
            into it, an unreadable image.
    """
    from tqdm import tqdm

    if isinstance(shard_size, bool) or not isinstance(shard_size, (int, np.integer)) or shard_size < 1:
        raise ValueError(f"shard_size must be a whole number >= 1 (examples per shard), got {shard_size!r}")
    check_name(prefix, "shard prefix")
    from harness.extras import require

    wds = require("webdataset", "harness data pack")  # named before any work
    n = len(ds)
    if n == 0:
        raise ValueError(f"{ds.description} holds no examples: there is nothing to pack; check the source and split")
    out_dir = check_writable(out_dir, f"shard folder {str(out_dir)!r}", "give another output folder")
    order = np.arange(n) if order_seed is None else np.random.default_rng(order_seed).permutation(n)
    digits = max(6, len(str(n - 1)))
    starts = list(range(0, n, int(shard_size)))
    names = [shard_name(prefix, j) for j in range(len(starts))]

    plan, shards, index = _plan_index(
        ds, prefix, shard_size, order_seed, order, starts, names, digits, source, label_noise
    )
    example = _example_writer(ds, digits)
    _check_pack_folder(out_dir, names, overwrite)
    path = out_dir / INDEX_NAME
    with RunLock(out_dir, what="wait for the other pack to finish, or pack into another folder"):
        old = read_index(path) if path.is_file() else None  # again, under the lock
        _check_same_plan(out_dir, old, plan)
        check_same_images(out_dir, old, shards, ds, order, starts)  # an image replaced since (audit25 A25-11)
        recorded = {sh.get("name"): sh for sh in (old or {}).get("shards", []) if isinstance(sh, dict)}
        missing = [j for j, name in enumerate(names) if not _whole(out_dir / name, recorded.get(name))]
        if old is not None and old.get("complete") and not missing:
            return old
        # the shards' image files recorded from the start: a resumed pack compares those it wrote (A25-11)
        atomic_write_text(path, json_dumps({**plan, "complete": False, "shards": shards}, indent=1) + "\n")
        todo = set(missing)
        done = sum(shards[j]["examples"] for j in range(len(names)) if j not in todo)
        with tqdm(total=n, initial=done, unit="img", desc=f"pack {prefix}", disable=not progress) as bar:
            for j in missing:
                rows = order[starts[j] : starts[j] + int(shard_size)]

                def write(f: Any, rows: np.ndarray = rows) -> None:
                    # mtime fixed: the same data and settings give the same bytes
                    with wds.TarWriter(f, mtime=0) as sink:
                        for i in rows:
                            sink.write(example(int(i)))
                            bar.update(1)

                atomic_write_stream(out_dir / names[j], write)
        # each shard's size and content digest, by which a reader knows one cut short or replaced by another shard of
        # the same size and labels (harness.data.shard_index; audit26 A26-03)
        for sh in index["shards"]:
            sh["bytes"] = (out_dir / sh["name"]).stat().st_size
            sh["sha256"] = file_digest(out_dir / sh["name"])
        atomic_write_text(path, json_dumps(index, indent=1) + "\n")
    return index


def _check_same_plan(out_dir: Path, old: Optional[dict], plan: dict) -> None:
    """A pack already in ``out_dir`` (its index ``old``; None: none) is of the same data and settings as ``plan``.
    Raises ValueError naming the keys that differ and the fix."""
    changed = sorted(key for key in plan if old.get(key) != plan[key]) if old is not None else []
    if changed:
        raise ValueError(
            f"{out_dir} holds a pack of other data or settings (differs in {', '.join(changed)}): "
            "choose another folder, or delete that one to pack again"
        )


def files_digest(ds: ImageDataset, rows: np.ndarray) -> Optional[str]:
    """SHA-256 of what the image files of examples ``rows`` are now: each one's path, size and modification time
    (nanoseconds), read with one ``stat`` each (no image read); None for a source not read from files (digits, TFDS)
    or a file that cannot be read (the pack names it when it reads it)."""
    import hashlib

    from harness.data.dataset import FileImages

    if not isinstance(ds.load_image, FileImages):
        return None
    h = hashlib.sha256()
    try:
        for i in rows:
            p = ds.load_image.path(int(i))
            st = os.stat(p)
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    except OSError:
        return None
    return h.hexdigest()


def check_same_images(
    out_dir: Path, old: Optional[dict], shards: "list[dict]", ds: ImageDataset, order: np.ndarray, starts: "list[int]"
) -> None:
    """Refuse a rerun of a pack (finished or resumed) whose written shard holds an image file that changed since
    (:func:`files_digest` of its examples other than the index records: replaced, rewritten, resized), which the
    pack would otherwise keep as if current (audit25 A25-11). A pack whose index records no such digest (an older
    pack, a source not read from files) is not compared.

    Raises:
        ValueError: naming the pack folder, the shard, the image (the first of the shard's files modified after the
            shard was written, where one is) and the fixes.
    """
    if old is None:
        return
    before = {sh.get("name"): sh.get("files_sha256") for sh in old.get("shards") or [] if isinstance(sh, dict)}
    for j, sh in enumerate(shards):
        was, tar = before.get(sh["name"]), out_dir / sh["name"]
        if not was or was == sh.get("files_sha256") or not tar.is_file():
            continue
        rows = order[starts[j] : starts[j] + sh["examples"]]
        after = tar.stat().st_mtime_ns
        newer = [ds.load_image.path(int(i)) for i in rows if _mtime(ds.load_image.path(int(i))) > after]
        which = f"the image {newer[0]} (changed after the shard was written)" if newer else "one of its image files"
        raise ValueError(
            f"{out_dir} holds a pack whose shard {sh['name']} was written from images that changed since: {which} "
            f"is no longer what the shard holds ({ds.description}; its path, size or modification time differs from "
            f"what {out_dir / INDEX_NAME} records), so the pack would be kept as if it held the data now: pack into a "
            f"new OUT folder, or delete {out_dir} to pack the data again (or restore the image)"
        )


def _mtime(path: str) -> int:
    """``path``'s modification time in nanoseconds, or -1 when it cannot be read."""
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _whole(shard: Path, entry: Any) -> bool:
    """``shard`` exists and, where its index entry (``entry``) recorded its size and content digest, has them (a shard
    cut short, or replaced by another of the same size: audit26 A26-03, is written again)."""
    entry = entry if isinstance(entry, dict) else {}
    size, digest = entry.get("bytes"), entry.get("sha256")
    if not shard.is_file() or (isinstance(size, int) and shard.stat().st_size != size):
        return False
    return not isinstance(digest, str) or file_digest(shard) == digest


def _plan_index(
    ds: ImageDataset,
    prefix: str,
    shard_size: int,
    order_seed: Optional[int],
    order: np.ndarray,
    starts: "list[int]",
    names: "list[str]",
    digits: int,
    source: Optional[dict],
    label_noise: Optional[dict],
) -> "tuple[dict, list[dict], dict]":
    """The plan written before any shard (what a resumed pack must match), the shards' entries and the final index."""
    n = len(ds)
    k = ds.num_classes
    sizes = np.diff(ds.labels.offsets) if ds.multilabel else np.ones(n, dtype=np.int64)
    flat = ds.labels.ids if ds.multilabel else ds.labels
    plan = {
        "format": INDEX_FORMAT,
        "prefix": prefix,
        "shard_size": int(shard_size),
        "order_seed": order_seed,
        "num_examples": n,
        "num_classes": k,
        "class_names": list(ds.class_names),
        "multilabel": ds.multilabel,
        "labels_sha256": ds.labels_sha256(),
        "key_digits": digits,
        "label_noise": label_noise,
        "source": {"description": ds.description, **(source or {})},
    }
    shards = []
    for name, lo in zip(names, starts):
        rows = order[lo : lo + int(shard_size)]
        files = files_digest(ds, rows)
        shards.append(
            {
                "name": name,
                "examples": int(len(rows)),
                "labels": int(sizes[rows].sum()),
                "labels_sha256": labels_digest([_label_ids(ds, int(i)).tolist() for i in rows]),
                **({"files_sha256": files} if files else {}),
            }
        )
    index = {
        **plan,
        "complete": True,
        "shards": shards,
        "label_counts": np.bincount(np.asarray(flat, dtype=np.int64), minlength=k).astype(int).tolist(),
        "labels_per_example": {
            "min": int(sizes.min()),
            "mean": float(sizes.mean()),
            "max": int(sizes.max()),
            "without_labels": int((sizes == 0).sum()),
        },
    }
    return plan, shards, index


def _example_writer(ds: ImageDataset, digits: int) -> "Callable[[int], dict]":
    """The WebDataset sample of example ``i``: its image (kept encoded where it is JPEG or PNG) and label(s)."""
    encoded = getattr(ds.load_image, "encoded", None)

    def example(i: int) -> dict:
        image, _ = ds[i]  # decoded (and converted to RGB) first: a broken file stops the pack here, named
        sample: "dict[str, Any]" = {"__key__": f"{i:0{digits}d}"}
        data, ext = encoded(i) if encoded is not None else (None, "")
        if data is not None and ext in KEEP_ENCODED:
            sample[KEEP_ENCODED[ext]] = data
        else:
            sample["png"] = image  # webdataset's encoder writes a PNG
        ids = _label_ids(ds, i)
        if ds.multilabel:
            sample["json"] = {"labels": [int(c) for c in ids]}
        else:
            sample["cls"] = int(ids[0])
        return sample

    return example


def _check_pack_folder(out_dir: Path, names: "list[str]", overwrite: bool) -> None:
    """Refuse, before any work, a folder holding an index this command did not write, tar files of unknown origin,
    or (without ``overwrite``) files of others."""
    path = out_dir / INDEX_NAME
    try:
        old = read_index(path) if path.is_file() else None
    except ValueError as e:
        raise ValueError(
            f"{out_dir} holds an {INDEX_NAME} this command did not write ({e}): choose another folder"
        ) from e
    strays = sorted(p.name for p in out_dir.glob("*.tar")) if old is None and out_dir.is_dir() else []
    if strays:
        raise ValueError(
            f"{out_dir} holds tar files without an {INDEX_NAME} ({', '.join(strays[:3])}...): not "
            "a pack this command wrote; choose an empty folder, or delete those files"
        )
    check_output_folder(
        out_dir, old is not None, (INDEX_NAME, *names), overwrite, "harness data pack", "OUT folder (or --split)"
    )
