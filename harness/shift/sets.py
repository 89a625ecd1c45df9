"""The images of the shift sets: a fixed subset of the evaluation split in the model's view, and the OOD sets."""

from __future__ import annotations

import zlib
from typing import Any, Dict, Optional

import numpy as np

from harness.shift.settings import BUILT_IN_OOD, ood_data


def spec_key(spec: dict) -> str:
    """A set's key in its folder's ``shift.json`` (``sets``): the SHA-256 (16 hex digits) of its spec (kind, corruption
    and severity, or an OOD set's name, data keys and :func:`ood_source`); a set stored under another is predicted
    again."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def subset_rows(n: int, examples: int, seed: int) -> np.ndarray:
    """Sorted row numbers of a fixed random subset of ``examples`` of ``n`` (all of them for 0 or >= n)."""
    if not examples or examples >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:examples])


def views(base: Any, data: Any, rows: np.ndarray) -> np.ndarray:
    """The evaluation view of ``rows`` of a split as uint8 ``[n, S, S, 3]``: resize the short side to
    ``data.eval_resize`` (default S / 0.875) and centre crop S = ``data.image_size``, as the model
    sees it. Sources with a decoded array (digits, cifar10n; :mod:`harness.data.cache`) go through
    the whole-batch view (:func:`harness.data.batched.center_crop`), others image by image with PIL.

    Raises:
        ValueError: an image cannot be read, or no rows.
    """
    import torch

    from harness.data.batched import center_crop

    if not len(rows):
        raise ValueError(f"no images to evaluate in {base.description}")
    size = data.image_size
    pixels = base.pixels(data.cache_dir) if data.loader != "pil" else None
    if pixels is not None:
        out = []
        for start in range(0, len(rows), 1024):
            x = center_crop(
                torch.from_numpy(np.ascontiguousarray(pixels[rows[start : start + 1024]])), size, data.eval_resize
            )
            out.append((x * 0.5 + 0.5).mul_(255).round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy())
        return np.concatenate(out)
    from torchvision.transforms import v2

    view = v2.Compose([v2.Resize(data.eval_resize or int(round(size / 0.875)), antialias=True), v2.CenterCrop(size)])
    return np.stack([np.asarray(view(base[int(i)][0]), dtype=np.uint8) for i in rows])


def synthetic_ood(kind: str, n: int, size: int, seed: int = 0) -> np.ndarray:
    """A built-in far-OOD set, uint8 ``[n, size, size, 3]``, seeded per image.

    ``gaussian``: i.i.d. N(0.5, 0.25²) per pixel and channel on [0, 1], clipped. ``blobs``:
    ``skimage.data.binary_blobs`` (blob size 0.2 of the side, half the area) in a random foreground
    and background colour. After the synthetic anomalies of Hendrycks, Mazeika & Dietterich (ICLR
    2019, Sec. 4.2); the parameters are ours.

    Raises:
        ValueError: an unknown kind.
    """
    from harness.data.loading import mix_seeds

    if kind not in BUILT_IN_OOD:
        raise ValueError(f"unknown built-in OOD set {kind!r}: use {' or '.join(BUILT_IN_OOD)}")
    tag = zlib.crc32(kind.encode())
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    for i in range(n):
        rng = np.random.default_rng(mix_seeds(seed, tag, i))
        if kind == "gaussian":
            img = np.clip(rng.normal(0.5, 0.25, (size, size, 3)), 0, 1)
        else:
            from harness.extras import require

            binary_blobs = require("skimage.data", "the blobs OOD set").binary_blobs
            mask = binary_blobs(
                length=size, blob_size_fraction=0.2, n_dim=2, volume_fraction=0.5, rng=int(rng.integers(2**31))
            )[..., None]
            fg, bg = rng.random(3), rng.random(3)
            img = np.where(mask, fg, bg)
        out[i] = np.round(img * 255)
    return out


def ood_images(name: str, keys: "Dict[str, str]", run_data: Any, n: int, seed: int) -> "tuple[np.ndarray, np.ndarray]":
    """The images ``[m, S, S, 3]`` uint8 and example indices ``[m]`` of one OOD set: ``n`` built-in
    images, or a fixed random subset of up to ``n`` images of a data source's split.

    Raises:
        ValueError: bad keys (:func:`ood_data`), or a split without images.
        FileNotFoundError: the source's data is missing.
    """
    from harness.data.sources import build_split

    if not keys:
        return synthetic_ood(name, n, run_data.image_size, seed), np.arange(n)
    cfg, split = ood_data(keys, run_data)
    try:
        base = build_split(cfg, split)
    except (FileNotFoundError, ValueError) as e:  # no such folder, a class folder with no image...
        raise type(e)(
            f"OOD set {name!r} (source {cfg.source}, split {split!r}): {e}; point the OOD set's "
            "path and split at images"
        ) from e
    if not len(base):
        raise ValueError(f"OOD set {name!r} ({base.description}) has no images: point it at a split with images")
    rows = subset_rows(len(base), n, seed)
    return views(base, cfg, rows), rows


def ood_source(keys: "Dict[str, str]", run_data: Any) -> Optional[dict]:
    """What the images of an OOD set of data ``keys`` are now, for the key its stored set is kept under (audit25
    A25-06: a set was reused by the text of its spec, ``path=oodf``, read from another working folder or after the
    folder's images were replaced): ``{"at": the split's folder or list file, resolved (links followed), "files": the
    SHA-256 of every file under it (a manifest: of the list and each image it lists) by relative path, size and
    modification time}`` (no image is read); None for a source read by name (tfds, digits, cifar10n), whose spec
    names its images. A split that cannot be listed gives ``files`` None (its reader names why when it is read)."""
    import hashlib
    import os

    from harness.data.splits import images_of, split_location, split_regions

    cfg, split = ood_data(keys, run_data)
    at = split_location(cfg.source, cfg.path, split)
    if at is None:
        return None
    listed = split_regions(images_of(cfg.source, cfg.name, cfg.path, split)) if cfg.source == "manifest" else None
    files = [at, *sorted(listed or ())] if cfg.source == "manifest" else []
    for root, dirs, names in os.walk(at, followlinks=True) if cfg.source != "manifest" else ():
        dirs.sort()
        files += [os.path.join(root, n) for n in sorted(names)]
    digest = hashlib.sha256()
    try:
        for f in files:
            st = os.stat(f)
            digest.update(f"{os.path.relpath(f, at)}|{st.st_size}|{st.st_mtime_ns};".encode())
    except OSError:
        return {"at": at, "files": None}
    return {"at": at, "files": digest.hexdigest()}


def with_ood_sources(sets: "list[tuple[str, dict]]", run_data: Any) -> "list[tuple[str, dict]]":
    """``sets`` (:func:`harness.shift.settings.check_settings`'s) with each OOD set of a data source given the
    :func:`ood_source` of its images as ``images``: part of the set's spec, so a stored set of other images (another
    folder named by the same text, or its images replaced since) is predicted again, never reused."""
    return [
        (n, {**s, "images": ood_source(s["data"], run_data)}) if s["kind"] == "ood" and s.get("data") else (n, s)
        for n, s in sets
    ]


def changed_ood(name: str, before: Optional[dict], now: Optional[dict]) -> str:
    """Why the stored OOD set ``name`` is predicted again: its :func:`ood_source` ``before`` (as the run's shift.json
    records it: ``ood_images``) against ``now``, a phrase for the progress line."""
    if not before or not now:
        return f"{name}: its images are not known to be those its stored set was predicted on: predicting it again"
    if before.get("at") != now.get("at"):
        return (
            f"{name}: its spec now names {now.get('at')}, its stored set was of {before.get('at')}: predicting it again"
        )
    return f"{name}: the files of {now.get('at')} changed since its stored set was predicted: predicting it again"
