"""What a path given as an output folder is before anything is written there: :func:`check_folder_path`."""

from __future__ import annotations

import os
from pathlib import Path


def check_folder_path(folder: "str | os.PathLike", what: str) -> Path:
    """``folder`` as a Path if it is a folder or does not exist yet; refuse a file and a broken symbolic link (a link
    to a path that does not exist: ``mkdir`` would raise a bare ``FileExistsError`` on it).

    Args:
        folder: the output folder given.
        what: who takes it, for the messages (``"save_pretrained"``).

    Raises:
        ValueError: a file, or a broken symbolic link (naming its target and the fixes).
    """
    folder = Path(folder)
    if folder.is_symlink() and not folder.exists():
        raise ValueError(
            f"{folder} is a broken symbolic link (to {os.readlink(folder)!r}, which does not exist): remove the link "
            f"or create the folder it points to, or give {what} another folder"
        )
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file: give {what} a folder")
    return folder
