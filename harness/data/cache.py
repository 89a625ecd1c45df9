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
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from PIL import Image

from harness.io import atomic_write_stream, check_writable


def default_cache_dir() -> Path:
    """``$HARNESS_CACHE``, else ``$XDG_CACHE_HOME/harness``, else ``~/.cache/harness``.

    Raises:
        ValueError: the folder, or the nearest of its parents that exists, is not a folder or cannot be written
            (:func:`harness.io.check_writable`), naming the variable.
    """
    if os.environ.get("HARNESS_CACHE"):
        where, path = "HARNESS_CACHE", Path(os.environ["HARNESS_CACHE"])
    elif os.environ.get("XDG_CACHE_HOME"):
        where, path = "XDG_CACHE_HOME", Path(os.environ["XDG_CACHE_HOME"]) / "harness"
    else:
        where, path = "the home folder", Path.home() / ".cache" / "harness"
    existing = next((p for p in (path, *path.parents) if os.path.lexists(p)), None)
    if existing is not None and not existing.is_dir():
        raise ValueError(
            f"the cache folder {str(path)!r} (from {where}) cannot be made: {str(existing)!r} is a file; point "
            "HARNESS_CACHE at a folder"
        )
    if existing is not None:
        check_writable(
            path, f"the cache folder {str(path)!r} (from {where})", "point HARNESS_CACHE at a writable folder"
        )
    return path


def read_cached(path: "str | os.PathLike") -> "np.ndarray | None":
    """The array ``images`` of a cache file written by :func:`write_cached`, when it is intact (its bytes match the
    SHA-256 saved beside them); None for a missing, unreadable, truncated or altered file, which the caller computes
    again and replaces."""
    if not Path(path).is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            images, digest = z["images"], str(z["sha256"])
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    return images if hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest() == digest else None


def write_cached(path: "str | os.PathLike", images: np.ndarray) -> None:
    """Write ``images`` and their SHA-256 to the cache file ``path`` (atomically), for :func:`read_cached`."""
    digest = hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()
    atomic_write_stream(Path(path), lambda f: np.savez(f, images=images, sha256=np.array(digest)))


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
    cached = read_cached(path)  # missing, unreadable or altered: decoded again and replaced
    if cached is not None and len(cached) == len(members):
        return cached

    def decode(member: str) -> np.ndarray:
        try:
            with Image.open(io.BytesIO(read(member))) as img:
                return np.asarray(rgb_image(img))
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
    write_cached(path, images)
    return images


#: PIL's modes of 16- and 32-bit integer pixels: ``convert("RGB")`` would clip each value to 255 (a 16-bit image
#: turns white), so :func:`rgb_image` scales them from 16 bits first
_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def rgb_image(img: Image.Image) -> Image.Image:
    """Every decoded image as 8-bit RGB, the one conversion of the harness's readers: 8-bit modes (L, P, RGBA, CMYK,
    ...) by PIL's ``convert("RGB")``; 16-bit grey (PIL's ``I;16*`` and ``I`` modes, values 0-65535) scaled to 8 bits
    (value >> 8) first.

    Raises:
        ValueError: integer pixels outside 0-65535, or floating-point pixels (mode ``F``): no 8-bit reading is
            implied; convert such files to 8- or 16-bit images.
    """
    if img.mode == "F":
        raise ValueError("a 32-bit floating-point image (PIL mode F) has no 8-bit reading: save it as 8- or 16-bit")
    if img.mode in _WIDE_MODES:
        wide = np.asarray(img).astype(np.int64)
        if wide.size and (wide.min() < 0 or wide.max() > 65535):
            raise ValueError(
                f"a {img.mode} image with values in [{wide.min()}, {wide.max()}], outside 16 bits (0-65535): save "
                "it as an 8- or 16-bit image"
            )
        img = Image.fromarray((wide >> 8).astype(np.uint8), mode="L")
    return img.convert("RGB")


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
