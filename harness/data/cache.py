"""Decode an image set once: a uint8 array on disk, keyed by the content it was decoded from.

Decoding and transforming every JPEG with PIL on every epoch costs more CPU than training a small
model on it. :func:`decoded_images` decodes the images of a source once (in threads; PIL releases
the GIL while decoding) into an ``[N, H, W, 3]`` uint8 array and stores it as an ``.npz`` file in
the cache folder. The file name holds a SHA-256 of the source's bytes and of the member list, so a
changed source gets a new file and is decoded again; the file is written atomically
(:mod:`harness.io`), so a killed decode leaves no half-written cache behind.
"""

from __future__ import annotations

import hashlib
import io
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from harness.io import atomic_write_stream


def default_cache_dir() -> Path:
    """``$HARNESS_CACHE``, else ``$XDG_CACHE_HOME/harness``, else ``~/.cache/harness``."""
    if os.environ.get("HARNESS_CACHE"):
        return Path(os.environ["HARNESS_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "harness"


def file_digest(path: "str | os.PathLike", chunk: int = 1 << 22) -> str:
    """SHA-256 hex digest of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def decoded_images(
    name: str,
    content_digest: str,
    members: Sequence[str],
    read: Callable[[str], bytes],
    cache_dir: "str | os.PathLike | None" = None,
    threads: int = 4,
) -> np.ndarray:
    """The images ``members`` decoded to one uint8 array, from the cache or decoded now and cached.

    Args:
        name: a readable prefix of the cache file (e.g. ``cifar10_jpeg``).
        content_digest: digest of the source's bytes (e.g. :func:`file_digest` of the zip).
        members: the images, in the order of the array's rows.
        read: ``member -> encoded bytes``; called from several threads.
        cache_dir: where cache files live (default :func:`default_cache_dir`).
        threads: decoding threads.

    Returns:
        ``[len(members), H, W, 3]`` uint8 (RGB).

    Raises:
        ValueError: the images differ in size (train from the per-image PIL path instead:
            ``data.loader=pil``), or one cannot be decoded (the message names it).
    """
    key = hashlib.sha256(content_digest.encode() + b"\0" + "\n".join(members).encode()).hexdigest()[:24]
    path = Path(cache_dir or default_cache_dir()) / f"{name}-{key}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                images = z["images"]
            if len(images) == len(members):
                return images
        except (OSError, ValueError, KeyError):  # unreadable: decode again and replace it
            pass

    def decode(member: str) -> np.ndarray:
        try:
            with Image.open(io.BytesIO(read(member))) as img:
                return np.asarray(img.convert("RGB"))
        except Exception as e:
            raise ValueError(
                f"cannot decode image {member!r} ({type(e).__name__}: {e}); replace or remove that file"
            ) from e

    with ThreadPoolExecutor(threads) as pool:
        arrays = list(pool.map(decode, members, chunksize=256))
    shapes = {a.shape for a in arrays}
    if len(shapes) > 1:
        raise ValueError(
            f"{name}: images have {len(shapes)} different sizes (e.g. {sorted(shapes)[:3]}); the decoded "
            "cache holds equal-size images only: set data.loader=pil"
        )
    images = np.stack(arrays) if arrays else np.zeros((0, 1, 1, 3), np.uint8)
    atomic_write_stream(path, lambda f: np.savez(f, images=images))
    return images


def as_rgb(pixels: np.ndarray) -> np.ndarray:
    """``[N, H, W]`` grey or ``[N, H, W, 1|3]`` uint8 -> ``[N, H, W, 3]`` uint8 (copied only when not RGB).

    Raises:
        ValueError: not a uint8 image array.
    """
    if pixels.ndim == 3:
        pixels = pixels[..., None]
    if pixels.shape[-1] == 1:
        pixels = np.repeat(pixels, 3, axis=-1)
    if pixels.ndim != 4 or pixels.shape[-1] != 3 or pixels.dtype != np.uint8:
        raise ValueError(f"expected uint8 images [N, H, W(, 1|3)], got {pixels.dtype} {pixels.shape}")
    return pixels
