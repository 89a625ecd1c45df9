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


def expand_home(value: "str | os.PathLike | None", key: str) -> "str | None":
    """A path setting from a config (``output_dir``, ``data.path``, ``data.cache_dir``, ``model.pretrained_file``) as
    a string with a leading ``~`` expanded to the home folder, as a shell would have done on a command line (a YAML
    file, or a quoted override, reaches the harness unexpanded, and a folder literally named ``~`` would be made);
    None passes.

    Raises:
        ValueError: a ``$NAME`` or ``${NAME}`` in it (no shell expands it here: a folder literally named so would be
            made), naming the key, the value and the fix.
    """
    if value is None:
        return None
    value = os.fspath(value)
    if "$" in value:
        raise ValueError(
            f"{key}={value!r} holds a $: nothing expands variables in a setting from a file or a quoted override, "
            f"so a folder literally named so would be made: write the folder out (on a command line, unquoted, the "
            "shell expands $HOME)"
        )
    return os.path.expanduser(value) if value.startswith("~") else value


def check_no_control(value: str, key: str) -> str:
    """``value`` (a path setting) if it holds no control character (newline, tab, carriage return, NUL... ASCII 0-31
    and 127): a file name holding one is invisible in a listing and breaks line-based logs, and YAML folds a newline
    of a plain scalar into a space, so the folder made is not the one asked for.

    Raises:
        ValueError: naming the key, the value, the character and the fix.
    """
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        shown = repr(value) if len(value) <= 80 else repr(value[:80]) + "..."
        raise ValueError(
            f"{key} {shown} holds the control character {bad!r}: a path setting cannot hold one (a name with it is "
            "invisible in a listing, and a newline in an override is read as a space): remove it"
        )
    return value
