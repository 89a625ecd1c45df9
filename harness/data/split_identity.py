"""What a training split holds, as a run records it when it starts and compares when it resumes (audit26 A26-17: an
interrupted run resumed on an image folder whose class folders had been swapped, every label flipped, without a word).

The record (:func:`split_identity`): the number of examples, the class names, the labels' digest
(:meth:`harness.data.dataset.ImageDataset.labels_sha256`), the digest of the file listing (the reader's paths in
order, where it reads files) and the digest of the bytes of a fixed sample of images (the first, the last and 32 drawn
with seed 0, as :meth:`~harness.data.dataset.ImageDataset.check_images` decodes before training anyway). Cost: one pass
over the paths and labels in memory and 34 image files read; an image replaced outside the sample under the same name
is not seen (a full digest would read the whole split at every start and resume)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

import numpy as np

#: the key of ``run.json`` that records the training split's identity (:func:`split_identity`)
RECORD_KEY = "train_split_identity"

#: how many images besides the first and the last the sample holds (drawn with seed 0)
SAMPLE = 32


def split_identity(ds: Any) -> Optional[dict]:
    """``{"examples", "class_names", "labels_sha256", "listing_sha256", "sample_sha256"}`` of the split ``ds`` (an
    :class:`~harness.data.dataset.ImageDataset` as the run reads it: its labels after any synthetic noise, which the
    run's seed draws again on resume); ``listing_sha256`` is None for a reader of no files (in-memory arrays). None for
    a split read as a shard stream (a pack's index records its shards' digests itself).

    Raises:
        ValueError: a sampled image cannot be read (naming it).
    """
    if not hasattr(ds, "labels_sha256") or not hasattr(ds, "load_image"):
        return None
    load, n = ds.load_image, len(ds)
    paths = getattr(load, "paths", None)
    listing = None
    if paths is not None:
        h = hashlib.sha256()
        for p in paths:
            h.update(str(p).encode("utf-8", "surrogateescape") + b"\0")
        listing = h.hexdigest()
    rows = {0, n - 1} | set(np.random.default_rng(0).choice(n, min(SAMPLE, n), replace=False).tolist()) if n else set()
    sample = hashlib.sha256()
    for i in sorted(r for r in rows if 0 <= r < n):
        try:
            data = load.encoded(i)[0] if hasattr(load, "encoded") else np.asarray(load(i)).tobytes()
        except (OSError, ValueError) as e:
            raise ValueError(
                f"cannot read image {ds.image_name(i)} of {ds.description} ({type(e).__name__}: {e})"
            ) from e
        sample.update(hashlib.sha256(data).digest())
    return {
        "examples": int(n),
        "class_names": [str(c) for c in ds.class_names],
        "labels_sha256": ds.labels_sha256(),
        "listing_sha256": listing,
        "sample_sha256": sample.hexdigest(),
    }


#: how a message names each field of the record
_FIELDS = {
    "examples": "the number of examples",
    "class_names": "the class names",
    "listing_sha256": "the file list",
    "labels_sha256": "the labels (in the split's order)",
    "sample_sha256": f"the images' bytes (a sample of {SAMPLE + 2})",
}


def check_split_identity(run_dir: "str | Path", ds: Any, where: str) -> None:
    """The training split ``ds`` read now for resuming the run in ``run_dir`` holds what the run recorded when it
    started (``run.json``'s :data:`RECORD_KEY`, :func:`split_identity`). A run that recorded none (started before the
    record, a shard stream) passes.

    Args:
        where: how the message names the split (``data.train_split=train of image_folder at data.path=imgs``).

    Raises:
        ValueError: naming the run, the split, what differs (then and now) and the fixes (restore the data, or start
            the run over in another output_dir).
    """
    from harness.io import read_json

    meta = read_json(Path(run_dir) / "run.json")
    recorded = meta.get(RECORD_KEY) if isinstance(meta, dict) else None
    if not isinstance(recorded, dict):
        return
    now = split_identity(ds)
    if now is None:
        return
    differ = [
        f"{what}: {_shown(recorded.get(k))} then, {_shown(now[k])} now"
        for k, what in _FIELDS.items()
        if recorded.get(k) != now[k]
    ]
    if differ:
        raise ValueError(
            f"{run_dir} was started on other training data than {where} holds now ({'; '.join(differ)}; as its "
            f"run.json records it: {RECORD_KEY}): resumed, its last epochs would train on other images or labels than "
            "its first ones, under one record; restore the training data as it was when the run started, or start the "
            "run over in another output_dir"
        )


def _shown(value: Any) -> str:
    """A recorded value for a message: a digest as its first 12 digits, a list of names quoted short."""
    from harness.io import quote

    if isinstance(value, str) and len(value) == 64:
        return value[:12] + "..."
    return quote(repr(value), 120)
