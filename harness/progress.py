"""Progress lines of long jobs that have no progress bar of their own (``harness import``, ``harness report``):
numbered steps, ``[import] 2/4 loading the model``, and counts of items with the time left,
``[import]   4096/10000 images, about 1.2 min left``, at most one every ``every`` seconds."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")


#: whether a Ctrl-C reached this process (:func:`on_ctrl_c`, the command line's SIGINT handler)
_CTRL_C = {"seen": False}


def on_ctrl_c(signum: int, frame: Any) -> None:
    """SIGINT handler of the command line (:func:`install_ctrl_c`): Python's own (it raises ``KeyboardInterrupt``),
    remembering the signal. CPython drops an exception raised inside a finaliser (a ``__del__``, a weakref callback,
    garbage collection: "Exception ignored in ..."), so a Ctrl-C that lands there would be lost and the run would go on;
    :func:`check_ctrl_c` raises it again at the next training step, step of a job or count of its items.

    Raises:
        KeyboardInterrupt: always.
    """
    _CTRL_C["seen"] = True
    raise KeyboardInterrupt


def install_ctrl_c() -> None:
    """Make :func:`on_ctrl_c` the SIGINT handler where Python's own is (not where a parent made Ctrl-C ignored, as a
    worker process's: :func:`harness.workers.init_worker`); from the main thread only."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is (
        signal.default_int_handler
    ):
        signal.signal(signal.SIGINT, on_ctrl_c)


def check_ctrl_c() -> None:
    """Raise the ``KeyboardInterrupt`` of a Ctrl-C that reached this process and was dropped in a finaliser
    (:func:`on_ctrl_c`); called at points reached only while a job runs normally (after a training step), never
    while one unwinds.

    Raises:
        KeyboardInterrupt: a Ctrl-C was seen.
    """
    if _CTRL_C["seen"]:
        raise KeyboardInterrupt


def duration(seconds: float) -> str:
    """``41 s``, ``3.2 min`` or ``1.5 h``."""
    if seconds < 100:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 6000 else f"{seconds / 3600:.1f} h"


class Steps:
    """The numbered steps of one job, each announced as it starts: ``[prefix] i/n text``.

    Args:
        progress: where the lines go (``click.echo``, ``print``); None: nowhere.
        prefix: the job's name in the lines, e.g. ``import``.
        total: the number of steps (the ``n`` of ``i/n``); a step past it raises the total.
    """

    def __init__(self, progress: Optional[Callable[[str], None]], prefix: str, total: int) -> None:
        self.progress, self.prefix, self.total, self.done = progress, prefix, total, 0
        self.started = time.perf_counter()

    def step(self, text: str) -> None:
        """Announce the next step (a Ctrl-C dropped in a finaliser is raised here: :func:`check_ctrl_c`)."""
        check_ctrl_c()
        self.done += 1
        self.total = max(self.total, self.done)
        self.say(f"{self.done}/{self.total} {text}")

    def say(self, text: str) -> None:
        """A line of this job (no step counted)."""
        if self.progress is not None:
            self.progress(f"[{self.prefix}] {text}")

    def count(
        self,
        items: Iterable[T],
        total: int,
        size: Callable[[T], int] = lambda item: 1,
        unit: str = "items",
        every: float = 10.0,
    ) -> Iterator[T]:
        """Yield ``items``, saying how many of ``total`` units are done and the time left (from the rate so far)
        at most every ``every`` seconds, and once at the end. ``size(item)``: the units an item holds (e.g. the
        images of a batch)."""
        tic = last = time.perf_counter()
        done = 0
        for item in items:
            yield item
            check_ctrl_c()
            done += size(item)
            now = time.perf_counter()
            if now - last >= every and done < total:
                last = now
                left = (now - tic) / done * (total - done)
                self.say(f"  {done}/{total} {unit}, about {duration(left)} left")
        self.say(f"  {done}/{total} {unit} in {duration(time.perf_counter() - tic)}")


class Countdown:
    """Progress inside one long loop: ``done/total unit, rate/s, about T left`` at most every ``every`` seconds (the
    first line after ``every`` seconds too), for loops whose units are counted by hand (optimiser steps).

    Args:
        progress: where the lines go; None: nowhere.
        total: the units of the whole loop.
        unit: what a unit is called in the lines (``steps``).
        every: the least seconds between two lines.
    """

    def __init__(
        self, progress: Optional[Callable[[str], None]], total: int, unit: str = "steps", every: float = 15.0
    ) -> None:
        self.progress, self.total, self.unit, self.every = progress, total, unit, every
        self.started = self.last = time.perf_counter()

    def tick(self, done: int) -> None:
        """``done`` units are done: say so if ``every`` seconds have passed since the last line (a Ctrl-C dropped in a
        finaliser is raised here: :func:`check_ctrl_c`)."""
        check_ctrl_c()
        now = time.perf_counter()
        if self.progress is None or now - self.last < self.every or done >= self.total or done <= 0:
            return
        self.last = now
        rate = done / (now - self.started)
        left = (self.total - done) / rate
        self.progress(f"{done}/{self.total} {self.unit}, {rate:.2f}/s, about {duration(left)} left")
