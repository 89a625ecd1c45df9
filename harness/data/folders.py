"""Images read from files under one folder (``data.path``): the one containment rule (an image's real path, links
resolved, stays under the folder unless ``data.allow_outside_root``), read by the ``manifest`` and ``image_folder``
sources, and the ``image_folder`` reader."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable

import numpy as np

from harness.data.dataset import FileImages, ImageDataset


def resolver(root: "str | os.PathLike") -> "Callable[[str], str]":
    """``path -> os.path.realpath(os.path.join(root, path))`` (what ``Path.resolve`` gives), resolving each folder
    once (an LRU cache) and a file's own name only when it is a link: one ``lstat`` per file."""
    real_dir = functools.lru_cache(maxsize=4096)(os.path.realpath)

    def resolve(path: str) -> str:
        full = os.path.join(root, path)
        head, tail = os.path.split(full)
        if tail in ("", ".", "..") or os.path.islink(full):
            return os.path.realpath(full)
        return os.path.join(real_dir(head), tail)

    return resolve


def inside(real: str, real_root: str) -> bool:
    """Whether the resolved path ``real`` is the resolved folder ``real_root`` or lies under it."""
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def leaving_link(root: str, path: str, real_root: str) -> "tuple[str, str]":
    """The first path on the way from ``root`` down to ``path`` (under ``root``) whose real path leaves
    ``real_root`` (the link that leads out), and that real path (shared by the image folders and the transfer tasks'
    split lists, :func:`harness.tasks.folder_format.read_list`)."""
    step = root
    for part in Path(os.path.relpath(path, root)).parts:
        step = os.path.join(step, part)
        real = os.path.realpath(step)
        if not inside(real, real_root):
            return step, real
    return path, os.path.realpath(path)


def read_image_folder(root: Path, split: str, allow_outside_root: bool = False) -> ImageDataset:
    """``<root>/<split>/<class>/<image>`` read with torchvision's ImageFolder (class = folder name, sorted; links
    followed). Every image's real path must stay under ``root`` (``data.path``) unless ``allow_outside_root``: a
    split or class folder, a subfolder or an image that is a link out of it is refused before any image is read.

    Raises:
        FileNotFoundError: no ``<root>/<split>`` folder, or one holding no class folder.
        ValueError: a class folder holding no image (:func:`_check_class_folders`); a link that leads out of
            ``root``, naming the link, where it points and the fix.
    """
    from torchvision.datasets import ImageFolder

    if not (root / split).is_dir():
        raise FileNotFoundError(f"no split folder {str(root / split)!r}; expected <data.path>/<split>/<class>/...")
    _check_class_folders(root, split)
    folder = ImageFolder(str(root / split))
    paths = [p for p, _ in folder.samples]
    if not allow_outside_root:
        # ImageFolder's paths name root already (audit26 A26-04: joined to a relative root again, ../imgs read as
        # a link out and a link out of imgs passed): each resolved as it is, against root resolved once
        real_root, resolve = os.path.realpath(root), resolver("")
        for path in paths:
            if not inside(resolve(path), real_root):
                link, real = leaving_link(str(root), path, real_root)
                raise ValueError(
                    f"image folder {str(root / split)!r}: {link!r} is a link to {real!r}, outside data.path "
                    f"{str(root)!r}, so image {path!r} would be read from there; copy the images under data.path "
                    "(or replace the link by one to a folder under it), or set data.allow_outside_root=true if the folder is yours "
                    "and the link is meant to point elsewhere"
                )
    return ImageDataset(
        FileImages(paths),
        np.asarray(folder.targets, dtype=np.int64),
        folder.classes,
        f"image folder {root / split} ({len(paths)} images)",
    )


def _check_class_folders(root: Path, split: str) -> None:
    """Every class folder of ``<root>/<split>`` holds an image (a file ImageFolder reads: torchvision's
    ``IMG_EXTENSIONS``, in the folder or below it), as ImageFolder requires, checked here to name the folder.

    Raises:
        FileNotFoundError: a split folder with no class folder, naming it, data.path and the layout.
        ValueError: the class folders with no image, naming them, data.path and the fix.
    """
    from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes

    try:
        classes, _ = find_classes(str(root / split))
    except FileNotFoundError as e:
        raise FileNotFoundError(
            f"split folder {str(root / split)!r} (split {split!r} of data.path {str(root)!r}) holds no class folder: "
            "expected <data.path>/<split>/<class>/<image>"
        ) from e
    empty = [
        c
        for c in classes
        if not any(
            f.lower().endswith(IMG_EXTENSIONS)
            for _, _, files in os.walk(root / split / c, followlinks=True)
            for f in files
        )
    ]
    if empty:
        shown = ", ".join(repr(str(root / split / c)) for c in empty[:3]) + (" ..." if len(empty) > 3 else "")
        raise ValueError(
            f"{len(empty)} class folder(s) of split {split!r} (data.path {str(root)!r}) hold no image "
            f"({', '.join(IMG_EXTENSIONS)}): {shown}; add images, or remove the folder (every class folder is a class)"
        )
