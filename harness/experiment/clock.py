"""The experiment's clock: its elapsed wall time over all its sessions, kept in ``<runs_root>/<name>/sessions.json``
(the file that also marks the experiment's folder: :data:`harness.folder_paths.EXPERIMENT_MARKS`)."""

from __future__ import annotations

import datetime
import json
import math
import time
from pathlib import Path

from harness.rules import EARLIEST_DAY


class _Clock:
    """Elapsed wall time of an experiment over all its sessions, kept in ``<runs>/<name>/sessions.json``:
    per session its start, its last tick (a killed session counts up to its last tick) and the
    seconds spent on diagnostics that do not count (the frontier runs)."""

    def __init__(self, path: Path) -> None:
        """Read the sessions so far (none without the file) and start this one.

        Raises:
            ValueError: a file that cannot be read, is not JSON, or is not a list of sessions (objects with numeric
                ``start`` and ``last``, and ``excluded`` if given, finite, ``start <= last``, ``0 <= excluded <=
                last - start``), naming the file and the fix (audit19 A19-09, audit20 A20-04).
        """
        self.path = path
        self.sessions = _read_sessions(path)
        self.sessions.append({"start": time.time(), "last": time.time(), "excluded": 0.0})

    def tick(self) -> None:
        from harness.io import atomic_write_text

        self.sessions[-1]["last"] = time.time()
        atomic_write_text(self.path, json.dumps(self.sessions, indent=1))

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` of this session out of :meth:`minutes`."""
        self.sessions[-1]["excluded"] += seconds
        self.tick()

    def minutes(self) -> float:
        """Elapsed minutes over all sessions, excluded time left out."""
        return sum(s["last"] - s["start"] - s.get("excluded", 0.0) for s in self.sessions) / 60


def _read_sessions(path: Path) -> "list[dict]":
    """The sessions recorded in ``path`` (the experiment's ``sessions.json``; none without the file): a list of
    objects with numeric ``start`` and ``last`` (seconds since the epoch) and ``excluded`` (seconds) if given, each
    finite, ``start <= last`` and ``0 <= excluded <= last - start`` (audit20 A20-04: NaN, infinity, a start after its
    last or a negative exclusion were reported as the study's wall time, "nan minutes" or a negative one), between
    :data:`_EARLIEST` and a day from now, in time order without overlap (audit21 A21-06: a start at 0, a session in
    the future or inside another gave "57 years" or a 300-digit wall time).

    Raises:
        ValueError: naming the file, what is wrong and the fix.
    """
    from harness.io import read_json_object

    fix = "move it away (the experiment's elapsed time then restarts from this session), or restore it"
    sessions = read_json_object(path, fix, list, what="the experiment's clock")
    if sessions is None:
        return []
    now = time.time()
    bad = next(filter(None, (_session_problem(i, s, now) for i, s in enumerate(sessions))), None)
    bad = bad or next(filter(None, (_overlap(i, sessions) for i in range(1, len(sessions)))), None)
    if bad:
        raise ValueError(
            f"{path} (the experiment's clock: a list of its sessions, each {{start, last, excluded}} in seconds) "
            f"{bad}: the file is damaged; {fix}"
        )
    return sessions


#: seconds an exclusion (timed by ``time.perf_counter``) may exceed its session's span (timed by ``time.time``): the two
#: clocks' rounding, never a damaged file
_SLACK = 1.0
#: no session starts before :data:`harness.rules.EARLIEST_DAY` (00:00 UTC, seconds since the epoch); none ends more
#: than :data:`_AHEAD` seconds after now (another machine's clock may run a little ahead)
_EARLIEST = datetime.datetime.fromisoformat(EARLIEST_DAY).replace(tzinfo=datetime.timezone.utc).timestamp()
_AHEAD = 86400.0


def _session_problem(i: int, s: object, now: float) -> "str | None":
    """What is wrong with session ``i`` of a clock file, or None for ``{start, last, excluded}`` of finite numbers with
    ``_EARLIEST <= start <= last <= now + _AHEAD`` and ``0 <= excluded <= last - start`` (+ :data:`_SLACK`)."""
    shown = repr(s) if len(repr(s)) <= 150 else repr(s)[:147] + "..."
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    keys = ("start", "last", "excluded")
    if not isinstance(s, dict) or not all(number(s.get(k, 0.0 if k == "excluded" else None)) for k in keys):
        return f"holds {shown} as session {i}, which is not an object with numeric start and last (and excluded)"
    try:
        start, last, excluded = (float(s.get(k, 0.0)) for k in keys)
    except OverflowError:  # an integer past any float
        start = last = excluded = math.inf
    if not all(math.isfinite(v) for v in (start, last, excluded)):
        why = "a number that is not finite"
    elif start > last:
        why = "a start after its last tick"
    elif excluded < 0:
        why = "a negative excluded time"
    elif excluded > last - start + _SLACK:
        why = f"more excluded time than the session lasted ({last - start:g} s)"
    elif start < _EARLIEST or last > now + _AHEAD:
        why = "a time before 2020 or after tomorrow"
    else:
        return None
    return (
        f"holds {shown} as session {i}, with {why} (start and last are seconds since the epoch, start <= last; "
        "excluded is seconds, from 0 to last - start)"
    )


def _overlap(i: int, sessions: list) -> "str | None":
    """What is wrong with session ``i`` (``i >= 1``, each session already checked alone) against the one before it:
    it starts before that one's last tick (a session inside or across another, or out of time order)."""
    before, s = sessions[i - 1], sessions[i]
    if float(s["start"]) >= float(before["last"]) - _SLACK:
        return None
    return (
        f"holds session {i} starting at {s['start']!r}, before session {i - 1}'s last tick {before['last']!r}: the "
        "sessions of one experiment follow each other, in time order, without overlap"
    )
