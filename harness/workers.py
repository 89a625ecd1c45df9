"""Where an experiment's jobs run: :class:`Workers`, a pool of worker processes (or this process)
that serves every stage of ``harness run``, each job timed, its result kept by (stage, name)."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Optional

from harness.progress import duration


def init_worker(threads: int, parent: Optional[int] = None) -> None:
    """Initialiser of a worker process: ``threads`` torch threads, and the worker dies with its parent (PID
    ``parent``), so a killed ``harness run`` leaves no worker training on while holding its run locks. On
    Linux the kernel sends SIGKILL when the parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a thread
    checks every second that the parent is still there."""
    import os
    import signal

    import torch

    torch.set_num_threads(threads)
    # Ctrl-C reaches the whole foreground process group: the parent alone handles it (it stops the workers,
    # :meth:`Workers.close`), so no worker prints a traceback of its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if parent is None:
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1 (linux/prctl.h)
        if os.getppid() != parent:  # the parent died before the call
            os._exit(1)
    except (OSError, AttributeError):  # not Linux: poll the parent
        import threading

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, daemon=True).start()


def _ignoring_ctrl_c(call: Callable, *args: Any) -> Any:
    """``call(*args)`` with SIGINT ignored in this process (the main thread's) meanwhile: worker processes
    it starts inherit that, so a Ctrl-C while they start up (before :func:`init_worker`) cannot stop them with
    a traceback; the parent alone handles Ctrl-C."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return call(*args)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return call(*args)
    finally:
        signal.signal(signal.SIGINT, previous)


def _timed(fn: Callable, args: tuple) -> "tuple[Any, float]":
    tic = time.perf_counter()
    return fn(*args), time.perf_counter() - tic


class Workers:
    """Where an experiment's jobs run: in this process one after the other (``workers <= 1``), or
    ``workers`` at a time in their own processes with ``cores // workers`` threads each (on a small
    CPU, one-thread processes side by side use it better than one process's threads). The processes
    start at the first job and serve every stage, so each imports torch once. Jobs run in the order
    they were submitted; a job's ``then`` callback (in this process) may submit more, so a trained
    run's evaluations start while other runs still train.

    Use as a context manager (the processes stop at its end; on Ctrl-C, at once: running jobs are
    stopped, and what they wrote atomically is kept). ``results[(stage, name)]`` holds each finished job's
    return value and ``seconds[stage]`` the summed time of a stage's jobs.

    Progress: every line :meth:`wait` gives counts the jobs over all stages, ``[12/87 jobs done, 75 left]``,
    out of those submitted or, if more, those announced with :meth:`expect` (the whole plan of an
    experiment, known before its later stages are submitted).
    """

    def __init__(self, workers: int) -> None:
        import os

        self.workers, self.threads = workers, max(1, (os.cpu_count() or 1) // max(1, workers))
        self.results: "dict[tuple[str, str], Any]" = {}
        self.seconds: "dict[str, float]" = {}
        self._pool, self._queue, self._pending, self._counts, self._finished = None, [], {}, {}, {}
        self._errors: "list[tuple[str, BaseException]]" = []  # failures not yet raised, by stage
        self._expected = 0  # jobs announced by expect(), over all stages
        self._children: "set[Any]" = set()  # child processes that were there before the pool: not its workers
        self._warm: "list[Any]" = []  # the futures of warm(): while no job was submitted, close() stops the processes

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        self.close(interrupted=kind is not None and issubclass(kind, KeyboardInterrupt))

    def close(self, interrupted: bool = False) -> None:
        """Stop the processes: queued jobs are dropped; running ones finish, or with ``interrupted`` (Ctrl-C) are
        stopped at once (SIGTERM; the harness writes its files atomically, so a stopped job leaves its last
        complete files: a training run its last checkpoint)."""
        import multiprocessing as mp

        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
            if interrupted or (self._warm and not self._counts):  # warmed, and no job submitted: nothing to keep
                for p in set(mp.active_children()) - self._children:
                    p.terminate()

    def warm(self, fn: Callable, args: tuple = ()) -> None:
        """Start the worker processes now and run ``fn(*args)`` (picklable) once in each, e.g. the imports every job
        needs, while this process goes on with its own checks: their start-up overlaps them. Not a job: not counted,
        its result and errors ignored (a job that needs what failed fails with its own error). Closed before any job
        was submitted (a bad experiment), the processes are stopped at once. In this process (``workers <= 1``):
        nothing."""
        if self.workers > 1:
            self._warm = [_ignoring_ctrl_c(self._processes().submit, fn, *args) for _ in range(self.workers)]

    def expect(self, jobs: int) -> None:
        """Announce ``jobs`` more jobs than submitted so far (e.g. the whole plan of an experiment at its start,
        then the runs a later decision adds), so that the progress lines count the work that is left."""
        self._expected += jobs

    def counts(self) -> "tuple[int, int]":
        """(jobs finished or failed, jobs in all: submitted, or announced by :meth:`expect` if more)."""
        return sum(self._finished.values()), max(self._expected, sum(self._counts.values()))

    def _status(self) -> str:
        done, total = self.counts()
        return f"[{done}/{total} jobs done, {total - done} left]"

    def submit(
        self, stage: str, name: str, fn: Callable, args: tuple, then: Optional[Callable[[Any], None]] = None
    ) -> None:
        """Queue ``fn(*args)`` (picklable) as job ``name`` of ``stage``; ``then(result)`` runs here when it
        has finished."""
        self._counts[stage] = self._counts.get(stage, 0) + 1
        if self.workers <= 1:
            self._queue.append((stage, name, fn, args, then))
            return
        self._pending[_ignoring_ctrl_c(self._processes().submit, _timed, fn, args)] = (stage, name, then)

    def _processes(self) -> Any:
        """The pool of worker processes, started at its first use."""
        import concurrent.futures as cf
        import multiprocessing as mp
        import os

        if self._pool is None:
            self._children = set(mp.active_children())
            self._pool = cf.ProcessPoolExecutor(
                self.workers,
                mp_context=mp.get_context("spawn"),
                initializer=init_worker,
                initargs=(self.threads, os.getpid()),
            )
        return self._pool

    def starmap(self, fn: Callable, args: "Iterable[tuple]") -> "list[Any]":
        """``[fn(*a) for a in args]`` (picklable), in order, side by side in the worker processes when they have
        started (else in this process: starting them would cost more than it saves); not counted as jobs (e.g. a
        report's figures, drawn once the jobs are done).

        Raises:
            The first error of a call, after the calls before it have finished.
        """
        if self._pool is None:
            return [fn(*a) for a in args]
        futures = [_ignoring_ctrl_c(self._processes().submit, fn, *a) for a in args]
        return [f.result() for f in futures]

    def wait(
        self,
        progress: Callable[[str], None],
        done: Callable[[], None] = lambda: None,
        stages: "Optional[set[str]]" = None,
    ) -> None:
        """Run jobs until none of ``stages`` (default: any stage) is queued or running, including jobs
        that finishing ones submit. ``progress`` gets a line per job with the count of jobs done and left over
        all stages (in this process as it starts, ``[upstream] het_s0 [3/40 jobs done, 37 left]``; from worker
        processes as it ends, ``[upstream] done het_s0 in 41 s [4/40 jobs done, 36 left]``); ``done()`` is
        called after each.

        Raises:
            The first error of a failed job of ``stages``, once the jobs waited for have finished or
            failed (what finished jobs wrote is kept); failures of other stages are raised by the
            wait that covers them.
        """
        import concurrent.futures as cf

        def waiting() -> bool:
            jobs = [j[0] for j in self._queue] + [j[0] for j in self._pending.values()]
            return any(stages is None or st in stages for st in jobs)

        while waiting():
            if self._queue:  # in this process
                stage, name, fn, args, then = self._queue.pop(0)
                progress(f"[{stage}] {name} {self._status()}")
                try:
                    outcome = [(stage, name, then, *_timed(fn, args), None)]
                except Exception as e:  # noqa: BLE001 -- kept and raised below, as from a worker process
                    outcome = [(stage, name, then, None, 0.0, e)]
            else:
                ready, _ = cf.wait(list(self._pending), return_when=cf.FIRST_COMPLETED)
                outcome = []
                for f in ready:
                    stage, name, then = self._pending.pop(f)
                    failed = f.exception()
                    outcome.append((stage, name, then, *(f.result() if failed is None else (None, 0.0)), failed))
            for stage, name, then, result, seconds, failed in outcome:  # record every outcome first ...
                done()
                self._finished[stage] = self._finished.get(stage, 0) + 1
                if self.workers > 1 or failed is not None:
                    took = f" in {duration(seconds)}" if failed is None else ""
                    progress(f"[{stage}] {'failed' if failed else 'done'} {name}{took} {self._status()}")
                if failed is not None:
                    self._errors.append((stage, failed))
                else:
                    self.results[(stage, name)] = result
                    self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
            for stage, name, then, result, seconds, failed in outcome:  # ... then let them queue more
                if failed is None and then is not None:
                    then(result)
        mine = [e for st, e in self._errors if stages is None or st in stages]
        self._errors = [(st, e) for st, e in self._errors if not (stages is None or st in stages)]
        if mine:
            raise mine[0]
