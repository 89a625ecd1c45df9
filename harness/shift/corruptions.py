"""CIFAR-10-C / ImageNet-C-style corrupted copies of evaluation images, seeded per example and cached.

The 15 standard corruptions of Hendrycks & Dietterich (ICLR 2019, *Benchmarking Neural Network
Robustness to Common Corruptions and Perturbations*, Sec. 3), in four families, at severities 1-5:

- noise: ``gaussian_noise``, ``shot_noise``, ``impulse_noise``;
- blur: ``defocus_blur``, ``glass_blur``, ``motion_blur``, ``zoom_blur``;
- weather: ``snow``, ``frost``, ``fog``, ``brightness``;
- digital: ``contrast``, ``elastic_transform``, ``pixelate``, ``jpeg_compression``.

The pixels are made by the ``imagecorruptions`` package (Michaelis et al. 2019, *Benchmarking
Robustness in Object Detection*), in its maintained fork ``imagecorruptions-imaug`` on PyPI: the
original 1.1.2 (2020) no longer imports with current setuptools (``pkg_resources``) and SciPy, the
fork does, with all 15 corruptions (motion blur and snow reimplemented without ImageMagick, so none
needs Wand). Nothing here re-implements a corruption.

Determinism: example ``i`` of a set is corrupted under a seed that is a function of (seed,
corruption, severity, example index) only: NumPy's legacy global generator (which the package draws
from) is seeded with it around each call and restored afterwards, and the two corruptions that take a
seed argument (``glass_blur``, ``impulse_noise``) get it too. So a corrupted image does not depend on
which other images are corrupted with it, and repeated generation is bit-identical.

Caching: a set is stored once as ``<cache>/corrupted/<corruption>-<severity>-<key>.npz``, the key a
SHA-256 of the clean images, their indices, the corruption, severity, seed and package version;
written atomically (:mod:`harness.io`), so a killed generation leaves no partial file, and an
unreadable file is regenerated. Every model evaluated on a set reads the same pixels.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from harness.data.cache import read_cached, write_cached

PACKAGE = "imagecorruptions-imaug"
FAMILIES = ("noise", "blur", "weather", "digital")
SEVERITIES = (1, 2, 3, 4, 5)
MIN_SIDE = 32  # the package refuses smaller images
_SEEDED_BY_ARGUMENT = ("glass_blur", "impulse_noise")


def _library():
    """The imagecorruptions module (imported on first use: it loads OpenCV, scikit-image and numba)."""
    from harness.extras import require

    return require("imagecorruptions", "the corruptions of harness shift")


def package_version() -> str:
    """Version of the installed corruption package (part of every cache key and report)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"{PACKAGE} {version(PACKAGE)}"
    except PackageNotFoundError:  # pragma: no cover
        return f"{PACKAGE} unknown"


def families() -> "dict[str, list[str]]":
    """``{family: [corruption, ...]}`` for the 15 standard corruptions, from the package's own lists."""
    ic = _library()
    return {f: list(ic.get_corruption_names(f)) for f in FAMILIES}


def standard_corruptions() -> "list[str]":
    """The 15 standard corruptions, in the benchmark's order (noise, blur, weather, digital)."""
    return [c for names in families().values() for c in names]


def resolve(corruptions: Sequence[str], severities: Sequence[int]) -> "list[tuple[str, int]]":
    """The (corruption, severity) sets named by a config: ``all``, family names (``noise``,
    ``blur``, ``weather``, ``digital``) or corruption names; every corruption at every severity.

    Args:
        corruptions: names as above; repeats are dropped, the order kept. Empty or ``none``: no sets.
        severities: integers in 1-5.

    Returns:
        ``[(corruption, severity), ...]``, corruption-major.

    Raises:
        ValueError: an unknown name (the message lists the valid ones) or a severity outside 1-5,
            or corruptions named without any severity.
    """
    fam = families()
    names: "list[str]" = []
    for item in corruptions:
        item = str(item).strip()
        if item in ("", "none"):
            continue
        expanded = standard_corruptions() if item == "all" else fam.get(item, [item])
        for c in expanded:
            if c not in standard_corruptions():
                raise ValueError(
                    f"unknown corruption {item!r}: use all, a family ({', '.join(FAMILIES)}) or one of "
                    f"{', '.join(standard_corruptions())}"
                )
            if c not in names:
                names.append(c)
    levels: "list[int]" = []
    for s in severities:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or int(s) not in SEVERITIES:
            raise ValueError(
                f"corruption severity {s!r} is not one of 1, 2, 3, 4, 5 (Hendrycks & Dietterich's "
                "levels): give severities between 1 and 5, e.g. 1,3,5"
            )
        if int(s) not in levels:
            levels.append(int(s))
    if names and not levels:
        raise ValueError("corruptions are named but no severity: give severities between 1 and 5, e.g. 1,3,5")
    return [(c, s) for c in names for s in levels]


def set_name(corruption: str, severity: int) -> str:
    """Folder name of a corrupted set: ``<corruption>-<severity>``."""
    return f"{corruption}-{severity}"


def example_seeds(seed: int, corruption: str, severity: int, index: np.ndarray) -> np.ndarray:
    """Per-example seeds ``[N]`` (uint32): a function of (seed, corruption, severity, example index)."""
    from harness.data.loading import mix_seeds

    tag = zlib.crc32(corruption.encode())
    return np.array([mix_seeds(seed, tag, severity, int(i)) & 0xFFFFFFFF for i in np.asarray(index)], dtype=np.uint32)


def _check_images(images: np.ndarray) -> None:
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"expected uint8 RGB images [N, H, W, 3], got {images.dtype} {images.shape}")
    if min(images.shape[1:3]) < MIN_SIDE:
        raise ValueError(
            f"images of {images.shape[1]}x{images.shape[2]} px are too small to corrupt: the corruptions "
            f"(Hendrycks & Dietterich, as implemented by {PACKAGE}) need at least {MIN_SIDE}x{MIN_SIDE} "
            f"px; evaluate at data.image_size >= {MIN_SIDE}"
        )


def corrupt_images(images: np.ndarray, corruption: str, severity: int, seeds: np.ndarray) -> np.ndarray:
    """Corrupt each image under its own seed.

    Args:
        images: ``[N, H, W, 3]`` uint8, H and W >= 32.
        corruption: one of :func:`standard_corruptions`.
        severity: 1-5.
        seeds: ``[N]`` per-example seeds (:func:`example_seeds`).

    Returns:
        ``[N, H, W, 3]`` uint8 (the package's output, values in [0, 255]).

    Raises:
        ValueError: unknown corruption or severity, images not uint8 RGB or smaller than 32 px.

    NumPy's global legacy generator is restored on return, so callers' random streams are untouched.
    """
    resolve([corruption], [severity])
    _check_images(images)
    ic = _library()
    out = np.empty_like(images)
    state = np.random.get_state()
    try:
        for i, (img, s) in enumerate(zip(images, np.asarray(seeds))):
            np.random.seed(int(s))
            kwargs = {"seed": int(s)} if corruption in _SEEDED_BY_ARGUMENT else {}
            out[i] = ic.corrupt(np.ascontiguousarray(img), severity=severity, corruption_name=corruption, **kwargs)
    finally:
        np.random.set_state(state)
    return out


def cache_path(
    images: np.ndarray,
    index: np.ndarray,
    corruption: str,
    severity: int,
    seed: int,
    cache_dir: "str | os.PathLike | None" = None,
) -> Path:
    """Where :func:`corrupted` keeps a set: ``<cache>/corrupted/<corruption>-<severity>-<key>.npz``."""
    from harness.data.cache import default_cache_dir

    h = hashlib.sha256()
    h.update(np.ascontiguousarray(images).tobytes())
    h.update(np.ascontiguousarray(np.asarray(index, dtype=np.int64)).tobytes())
    h.update(f"\0{images.shape}\0{corruption}\0{severity}\0{seed}\0{package_version()}".encode())
    name = f"{set_name(corruption, severity)}-{h.hexdigest()[:24]}.npz"
    return Path(cache_dir or default_cache_dir()) / "corrupted" / name


def corrupted(
    images: np.ndarray,
    index: np.ndarray,
    corruption: str,
    severity: int,
    seed: int = 0,
    cache_dir: "str | os.PathLike | None" = None,
) -> np.ndarray:
    """A corrupted copy of ``images``, from the cache or generated now and cached (atomically).

    Args:
        images: ``[N, H, W, 3]`` uint8 clean images (the evaluation view the model sees), H, W >= 32.
        index: ``[N]`` their example indices in the split (they seed the corruption of each).
        corruption, severity: the set (:func:`resolve`).
        seed: the set's base seed.
        cache_dir: cache root (default ``$HARNESS_CACHE`` or ``~/.cache/harness``).

    Returns:
        ``[N, H, W, 3]`` uint8.

    Raises:
        ValueError: as :func:`corrupt_images`, or ``index`` not of length N.
    """
    index = np.asarray(index)
    if len(index) != len(images):
        raise ValueError(f"{len(index)} example indices for {len(images)} images")
    resolve([corruption], [severity])
    _check_images(images)
    path = cache_path(images, index, corruption, severity, seed, cache_dir)
    cached = read_cached(path)  # missing, unreadable or altered: generated again and replaced
    if cached is not None and cached.shape == images.shape and cached.dtype == np.uint8:
        return cached
    out = corrupt_images(images, corruption, severity, example_seeds(seed, corruption, severity, index))
    write_cached(path, out)
    return out


def describe(sets: "Sequence[tuple[str, int]]", n: Optional[int] = None) -> str:
    """One line naming the corruption sets (for reports)."""
    names = list(dict.fromkeys(c for c, _ in sets))
    levels = sorted({s for _, s in sets})
    what = (
        "all 15 standard corruptions"
        if set(names) == set(standard_corruptions())
        else f"{len(names)} of the 15 standard corruptions ({', '.join(names)})"
    )
    return (
        f"{what} at severities {', '.join(map(str, levels))}"
        + (f", {n} images each" if n else "")
        + f"; Hendrycks & Dietterich (2019) definitions as implemented by {package_version()}"
    )
