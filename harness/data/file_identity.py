"""One image file by what it is, not by its name: two paths are one image when they are one file (``st_dev`` and
``st_ino``: a hard link has a name of its own, which no path comparison, resolved or not, sees; audit25 A25-09). Read
by the split rules (:func:`harness.data.splits.split_regions`' comparison, :func:`harness.data.splits.images_relation`)
and the folder-format task lists (:func:`harness.tasks.folder_format.check_disjoint`)."""

from __future__ import annotations

import os
from typing import Iterable, Optional


def file_id(path: str) -> "Optional[tuple[int, int]]":
    """``(st_dev, st_ino)`` of the file ``path`` leads to (links followed), or None when it cannot be read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


class SameFiles:
    """Names each file by the first path it was met under: ``canon(path)`` is ``path`` (resolved, as given) unless
    another path met before is the same file (a hard link of it), whose name is returned instead. Paths that cannot be
    read are their own name."""

    def __init__(self) -> None:
        self._first: "dict[tuple[int, int], str]" = {}

    def __call__(self, path: str) -> str:
        """The name of the file at ``path`` (a resolved path): the first path met that is the same file."""
        key = file_id(path)
        return path if key is None else self._first.setdefault(key, path)


def linked_files(regions: Iterable[str]) -> "dict[tuple[int, int], str]":
    """The files under ``regions`` (resolved folders and files, :func:`harness.data.splits.split_regions`) that have
    another name (``st_nlink`` > 1: a hard link), by ``(st_dev, st_ino)`` -> one of their paths. Folders are walked
    without following links (the regions hold the targets of the links already).

    Raises:
        OSError: a folder that cannot be listed.
    """
    found: "dict[tuple[int, int], str]" = {}

    def note(path: str, st: os.stat_result) -> None:
        if st.st_nlink > 1:
            found.setdefault((st.st_dev, st.st_ino), path)

    todo = []
    for r in regions:
        if os.path.isdir(r):
            todo.append(r)
        elif os.path.isfile(r):
            note(r, os.stat(r))
    while todo:
        with os.scandir(todo.pop()) as entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    todo.append(e.path)
                elif e.is_file(follow_symlinks=False):
                    note(e.path, e.stat(follow_symlinks=False))
    return found


def shared_file(a: Iterable[str], b: Iterable[str]) -> "Optional[tuple[str, str]]":
    """A file under the regions ``a`` that is a file under ``b`` by another name (a hard link), as ``(path under a,
    path under b)``, or None (none, or a region that cannot be listed: its reader names why)."""
    try:
        ours, theirs = linked_files(a), linked_files(b)
    except OSError:
        return None
    key = next((k for k in ours if k in theirs), None)
    return None if key is None else (ours[key], theirs[key])
