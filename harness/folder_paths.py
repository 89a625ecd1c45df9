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


def expand_home(value: "str | None", key: str) -> "str | None":
    """A folder setting from a config (``output_dir``) with a leading ``~`` expanded to the home folder, as a shell
    would have done on a command line (a YAML file, or a quoted override, reaches the harness unexpanded, and a folder
    literally named ``~`` would be made); None passes.

    Raises:
        ValueError: a ``$NAME`` or ``${NAME}`` in it (no shell expands it here: a folder literally named so would be
            made), naming the key, the value and the fix.
    """
    if value is None:
        return None
    if "$" in value:
        raise ValueError(
            f"{key}={value!r} holds a $: nothing expands variables in a setting from a file or a quoted override, "
            f"so a folder literally named so would be made: write the folder out (on a command line, unquoted, the "
            "shell expands $HOME)"
        )
    return os.path.expanduser(value) if value.startswith("~") else value
