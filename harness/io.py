"""Files and folders: atomic writes (a crash never leaves a half-written checkpoint or result behind, a full
disk gives one clear message), valid JSON whatever the numbers, one rule for the names that become folder
names and one function for the paths built from them, one writer per run folder."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import tempfile
import time
from pathlib import Path
from typing import IO, Any, Callable

from harness.folder_paths import check_not_other_output

_UMASK = os.umask(0)
os.umask(_UMASK)

#: what a name that becomes a path component (experiment, method, task, run, ensemble, shift set, report) may be
NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
#: the largest share of a file quoted in an error message, in characters
QUOTE_LIMIT = 300
#: the URL schemes a path in a config may carry, opened by the harness's own code (never a shell or a command-line
#: tool); webdataset's ``pipe:`` (a shell command), ``gs:`` (gsutil), ``s3:``, ``hf:``, ``sftp:``... are refused
LOCATION_SCHEMES = ("file", "http", "https")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
#: the random part ``tempfile.mkstemp`` puts in the atomic writers' temporary names (``.<name>.<8 chars>.tmp``)
_TEMPORARY = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")
#: what a :class:`RunLock` leaves in the folder it owns (its lock and the holder's PID file)
LOCK_FILES = (".lock", ".lock.pid")


def check_name(name: Any, what: str) -> str:
    """``name`` if it may become one folder or file name: letters, digits, ``.``, ``_`` and ``-``, starting
    with a letter or digit, at most 128 characters, no ``..``.

    Raises:
        ValueError: naming ``what`` (e.g. ``"method name"``) and the rule.
    """
    if not isinstance(name, str) or not NAME_RULE.fullmatch(name) or ".." in name:
        raise ValueError(
            f"{what} {name!r} must be a plain name (letters, digits, '.', '_' or '-', starting with a "
            "letter or digit, at most 128 characters, no '..'): it becomes a folder name; rename it"
        )
    return name


def path_under(root: "str | os.PathLike", *names: str) -> Path:
    """``root/names[0]/names[1]/...``, every name checked by :func:`check_name`, and the resolved path checked to
    stay inside the resolved ``root`` (a link inside ``root`` cannot lead out of it): every writer builds the
    paths of named things with this function.

    Raises:
        ValueError: a bad name, or a path that would leave ``root``.
    """
    root = Path(root)
    path = root.joinpath(*(check_name(n, "name") for n in names))
    if not path.resolve().is_relative_to(root.resolve()):
        raise ValueError(f"{path} leads outside {root} (through a link): remove the link or choose another folder")
    return path


def check_writable(folder: "str | os.PathLike", what: str, fix: str) -> Path:
    """Check, before any work and without creating anything, that ``folder`` (or, if it does not exist yet, the
    nearest existing folder above it, where it would be created) takes new files.

    Raises:
        ValueError: naming ``what`` (e.g. ``"--out /data/ens"``), the reason and ``fix``.
    """
    folder = Path(folder)
    probe = folder.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{probe} is a file")
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as e:
        raise ValueError(f"{what} cannot be written ({e.strerror or e}): choose a writable folder ({fix})") from e
    return folder


def check_location(value: Any, what: str) -> Any:
    """``value`` (a path from a config, a ``base:`` file, a run's ``config.yaml``, a manifest or an index) if it is a
    local path or a URL of one of :data:`LOCATION_SCHEMES`; ``None`` passes; each part of a ``::`` shard pattern.

    Raises:
        ValueError: another URL scheme (``pipe:`` runs a shell command in webdataset; ``gs:``, ``s3:``... run
            command-line tools), or a control character (:func:`~harness.folder_paths.check_no_control`).
    """
    from harness.folder_paths import check_no_control

    if value is None:
        return value
    for part in check_no_control(str(value), what).split("::"):
        m = _SCHEME.match(part)
        if m and m.group(1).lower() not in LOCATION_SCHEMES:
            scheme = m.group(1).lower()
            why = " (webdataset would run it as a shell command)" if scheme == "pipe" else ""
            raise ValueError(
                f"{what} {quote(part, 80)!r} is a {scheme}: URL, which the harness does not open{why}: "
                f"give a local path (./NAME for a file whose name holds a colon) or a "
                f"{', '.join(s + ':' for s in LOCATION_SCHEMES)} URL; copy or mount remote data first"
            )
    return value


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """At most ``limit`` characters of ``text`` for an error message (a file's content is never printed whole)."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


#: the errors of a write that runs out of room, the name said of each and its fix (:func:`_disk_full`)
_NO_ROOM = {
    errno.ENOSPC: ("disk full", "free some space"),
    errno.EDQUOT: ("disk quota exceeded", "free some space under your quota (or ask for a larger one)"),
    errno.EFBIG: (
        "file-size limit reached",
        "the size of one file is capped by the shell's `ulimit -f` (raise it: ulimit -f unlimited), a quota or "
        "the file system (4 GiB on FAT32); raise the limit or write to another disk",
    ),
}


def _disk_full(path: Path, e: BaseException) -> "OSError | None":
    """The disk-full error for ``e`` raised while writing ``path``: an ``OSError`` ENOSPC, EDQUOT or EFBIG (a file-size
    limit: ``ulimit -f``, whose SIGXFSZ Python ignores, a quota, the file system's largest file), or an error raised
    while handling one (``torch.save`` turns it into ``RuntimeError: ... unexpected pos``); else None. The error
    returned keeps the errno and names ``path``, the cause and the fix."""
    seen = e
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _NO_ROOM:
            what, fix = _NO_ROOM[seen.errno]
            return OSError(
                seen.errno,
                f"{what} while writing {path}: {fix} and run the same command "
                "again (files written before are intact; an interrupted run resumes)",
            )
        seen = seen.__cause__ or seen.__context__
    return None


def interrupted(e: BaseException) -> bool:
    """Whether ``e`` was raised while a Ctrl-C was being handled: a ``KeyboardInterrupt`` in the chain a traceback
    shows (``__cause__``, else ``__context__`` unless ``raise ... from None`` hid it); ``torch.save`` stopped by
    one ends with ``RuntimeError: ... unexpected pos``."""
    seen, chain = e, set()
    while seen is not None and id(seen) not in chain:
        if isinstance(seen, KeyboardInterrupt):
            return True
        chain.add(id(seen))
        seen = seen.__cause__ if seen.__cause__ is not None else None if seen.__suppress_context__ else seen.__context__
    return False


def _atomic(path: "str | os.PathLike", write: Callable[[IO[bytes]], None]) -> Path:
    """The atomic write of every writer here. Stopped by Ctrl-C, whatever error the write then ends with (see
    :func:`interrupted`), it raises ``KeyboardInterrupt``, so the command ends as any Ctrl-C does; the temporary
    file is removed and ``path`` keeps its previous content."""
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
        full = _disk_full(path, e)
        if full is not None:
            raise full from e
        if not isinstance(e, KeyboardInterrupt) and interrupted(e):
            raise KeyboardInterrupt from None
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


def read_json(path: "str | os.PathLike") -> "dict | None":
    """The JSON object in ``path``, or None when there is no such file or it cannot be read as JSON (a marker or
    record that a killed writer never finished counts as absent)."""
    path = Path(path)
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


#: how a message names the JSON type of a value (``json.loads``'s Python types)
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "true or false",
}


def read_json_object(
    path: "str | os.PathLike", fix: str = "rerun the run, or restore the file", expected: type = dict, what: str = ""
) -> "dict | list | None":
    """The JSON object in ``path`` as a dict (``expected=list``: an array), or None when there is no such file: the one
    reader of the JSON files the harness writes (``metrics.json``, ``run.json``, ``ensemble.json``, an experiment's
    ``sessions.json``), whose damage is named, never skipped (:func:`read_json` is the lenient reader of markers a
    killed writer may have left unfinished). ``what`` says what the file is, after its path.

    Raises:
        ValueError: a file that cannot be read, is not valid JSON, or holds another JSON value than ``expected``,
            naming the file, what is wrong and ``fix``.
    """
    path = Path(path)
    if not path.is_file():
        return None
    named = f"{path} ({what})" if what else str(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ValueError(f"{named} cannot be read ({e.strerror or e}): {fix}") from e
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{named} is not valid JSON ({quote(str(e), 120)}): the file is damaged; {fix}") from e
    if not isinstance(data, expected):
        kind = "null" if data is None else _JSON_TYPES.get(type(data), type(data).__name__)
        belongs = {dict: "a JSON object {...}", list: "a JSON array [...]"}[expected]
        raise ValueError(f"{named} holds {kind} where {belongs} belongs: the file is damaged; {fix}")
    return data


def remove_orphaned_temporaries(folder: "str | os.PathLike", subfolders: "tuple[str, ...]" = ()) -> "list[Path]":
    """Delete the temporary files that killed atomic writes left in ``folder`` itself and in its ``subfolders``
    (the writer's own, e.g. ``checkpoints``): files named exactly as :func:`atomic_write_bytes` names its temporaries
    (``.<name>.<8 random characters>.tmp``), nothing below those folders, and nothing in a subfolder that holds a lock
    of its own (another writer's folder). Call it only while holding the folder's :class:`RunLock`.

    Returns:
        The removed paths.
    """
    folder, removed = Path(folder), []
    places = [folder] + [
        folder / s for s in subfolders if (folder / s).is_dir() and not (folder / s / ".lock").exists()
    ]
    for place in places:
        for p in place.iterdir():
            if _TEMPORARY.fullmatch(p.name) and p.is_file() and not p.is_symlink():
                p.unlink()
                removed.append(p)
    return removed


def check_output_folder(
    folder: "str | os.PathLike", ours: bool, writes: "tuple[str, ...]", overwrite: bool, what: str, flag: str
) -> Path:
    """Refuse, before any work, to write into a folder holding files this command did not write.

    Args:
        folder: the output folder (it may not exist yet).
        ours: the folder holds this command's own earlier output (its marker or record file): a rerun, a resume.
        writes: the names this command writes there.
        overwrite: the user's ``--overwrite``: write beside files of others, never replacing one.
        what, flag: how the message names the command (``harness upstream``) and the option or key that chooses the
            folder (``output_dir=...``, ``--out``).

    Raises:
        ValueError: not a folder; another command's output (:func:`~harness.folder_paths.check_not_other_output`)
            or files of others with the names this command writes (even with ``overwrite``); other files (without).
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file, not a folder: choose another {flag}")
    if ours or not folder.is_dir():
        return folder
    others = sorted(p.name for p in folder.iterdir() if p.name not in LOCK_FILES and not _TEMPORARY.fullmatch(p.name))
    if not others:
        return folder
    check_not_other_output(folder, what, flag, writes)  # another command's output, even with --overwrite
    taken = [n for n in writes if (folder / n).exists()]  # first: --overwrite is offered only where it would work
    if taken:
        raise ValueError(
            f"{folder} holds {', '.join(taken)} that {what} did not write: even with --overwrite they are "
            f"not replaced; move them, or choose another {flag}"
        )
    if not overwrite:
        raise ValueError(
            f"{folder} holds files {what} did not write ({', '.join(others[:3])}"
            f"{'...' if len(others) > 3 else ''}): choose another {flag}, or give --overwrite to write "
            "beside them (a file the harness did not write is never replaced)"
        )
    return folder


class RunLock:
    """One writer per folder: an exclusive lock on ``<folder>/<name>`` (``filelock``, an OS lock that is released
    when the holder exits or dies); the holder's PID, command and start time are kept in ``<name>.pid``.

    Entering creates the folder, takes the lock and removes orphaned temporary files of earlier killed
    writes (``clean=True``): in the folder itself and the writer's own ``subfolders`` only, named as the atomic
    writers name them (:func:`remove_orphaned_temporaries`; never a file below, never another writer's folder).
    A lock left by a holder that is gone is taken over with a message on stderr.

    Args:
        folder: the folder to own (a run folder; ``runs_root`` for a whole experiment).
        name: the lock file's name.
        what: how the refusal names the holder's work and the fix.
        subfolders: the writer's own subfolders whose orphaned temporaries are removed too (``checkpoints``).

    Raises:
        ValueError: another process holds the lock (the message gives its PID and command), or the folder
            cannot be written (read-only, no permission).
    """

    def __init__(
        self,
        folder: "str | os.PathLike",
        name: str = ".lock",
        clean: bool = True,
        what: str = "wait for it to finish or stop it, or give this run another output folder",
        subfolders: "tuple[str, ...]" = (),
    ) -> None:
        from filelock import FileLock

        self.folder, self.clean, self.what, self.subfolders = Path(folder), clean, what, tuple(subfolders)
        self.pid_file = self.folder / f"{name}.pid"
        self._lock = FileLock(str(self.folder / name), timeout=0)

    def __enter__(self) -> "RunLock":
        import sys

        from filelock import Timeout

        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock.acquire()
        except Timeout:
            holder = self.pid_file.read_text().strip() if self.pid_file.is_file() else "?"
            raise ValueError(
                f"{self.folder} is being written by another process ({quote(holder)}): {self.what}"
            ) from None
        except OSError as e:
            raise ValueError(
                f"cannot write to {self.folder} ({e.strerror or e}): choose a writable output folder (output_dir=...)"
            ) from e
        try:
            if self.pid_file.is_file():
                print(
                    f"{self.folder}: taking over the lock of a process that is gone "
                    f"({quote(self.pid_file.read_text().strip())})",
                    file=sys.stderr,
                )
            command = " ".join(sys.argv) or "python"
            atomic_write_text(
                self.pid_file, f"PID {os.getpid()}, {quote(command, 200)}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n"
            )
            if self.clean:
                remove_orphaned_temporaries(self.folder, self.subfolders)
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.pid_file.unlink(missing_ok=True)
        finally:
            self._lock.release()
