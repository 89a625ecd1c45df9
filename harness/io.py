"""Atomic file writes: a crash never leaves a half-written checkpoint or result behind; valid JSON
whatever the numbers; one writer per run folder."""

from __future__ import annotations

import errno
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable

_UMASK = os.umask(0)
os.umask(_UMASK)


def _atomic(path: "str | os.PathLike", write: Callable[[IO[bytes]], None]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; give the usual permissions
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OSError(e.errno, f"disk full while writing {path}: free some space and run the same command "
                                   f"again (files written before are intact; an interrupted run resumes)") from e
        raise
    return path


def atomic_write_stream(path: "str | os.PathLike", write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync, then rename over ``path``."""
    return _atomic(path, write)


def atomic_write_bytes(path: "str | os.PathLike", data: bytes) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync, then rename over ``path``."""
    return _atomic(path, lambda f: f.write(data))


def atomic_write_text(path: "str | os.PathLike", text: str) -> Path:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_torch_save(obj: Any, path: "str | os.PathLike") -> Path:
    """``torch.save(obj)`` with the same all-or-nothing guarantee."""
    import torch

    return _atomic(path, lambda f: torch.save(obj, f))


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def json_dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps`` that writes NaN and infinities as ``null``: the text stays valid JSON (the
    standard has no NaN token; Python's default writes one that other readers reject)."""
    return json.dumps(_finite(obj), allow_nan=False, **kwargs)


def remove_orphaned_temporaries(folder: "str | os.PathLike") -> "list[Path]":
    """Delete the temporary files that killed atomic writes left in ``folder`` (recursively).

    Only files named as :func:`atomic_write_bytes` names them (``.<name>.<random>.tmp``) are removed;
    call it only while holding the folder's :class:`RunLock`. Returns the removed paths.
    """
    removed = []
    for p in Path(folder).rglob(".*.tmp"):
        if p.is_file():
            p.unlink()
            removed.append(p)
    return removed


class RunLock:
    """One writer per run folder: an exclusive lock on ``<folder>/.lock`` (``filelock``), released
    when the holder exits or dies; the holder's PID and start time are kept in ``.lock.pid``.

    Entering creates the folder, takes the lock and removes orphaned temporary files of earlier
    killed writes.

    Raises:
        ValueError: another process holds the lock (the message gives its PID), or the folder
            cannot be written (read-only, no permission).
    """

    def __init__(self, folder: "str | os.PathLike") -> None:
        from filelock import FileLock

        self.folder = Path(folder)
        self._lock = FileLock(str(self.folder / ".lock"), timeout=0)

    def __enter__(self) -> "RunLock":
        from filelock import Timeout

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock.acquire()
        except Timeout:
            holder = (self.folder / ".lock.pid").read_text().strip() if (self.folder / ".lock.pid").is_file() else "?"
            raise ValueError(f"{self.folder} is being written by another process ({holder}): wait for it to finish "
                             "or stop it, or give this run another output folder") from None
        except OSError as e:
            raise ValueError(f"cannot write to {self.folder} ({e.strerror or e}): choose a writable output folder "
                             "(output_dir=...)") from e
        try:
            atomic_write_text(self.folder / ".lock.pid",
                              f"PID {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            remove_orphaned_temporaries(self.folder)
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self._lock.release()
