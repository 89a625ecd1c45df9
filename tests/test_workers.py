"""harness.workers: the remaining-work count over all stages, and Ctrl-C (the parent alone handles it, stops its
workers at once, and no process prints a traceback)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _square(x):
    return x * x


@pytest.mark.parametrize("n", [1, 2])
def test_progress_counts_jobs_over_all_stages_against_the_announced_plan(n):
    from harness.workers import Workers

    lines = []
    with Workers(n) as w:
        w.expect(5)  # the plan: 5 jobs, of which the first stage submits 2
        w.submit("a", "a0", _square, (1,))
        w.submit("a", "a1", _square, (2,))
        w.wait(lines.append)
        assert w.counts() == (2, 5)
        for i in range(4):  # one more than announced: the total grows with it
            w.submit("b", f"b{i}", _square, (i,))
        w.wait(lines.append)
        assert w.counts() == (6, 6)
    status = [line.rsplit("[", 1)[1] for line in lines]
    if n == 1:  # a line as each job starts, from this process
        assert lines[0] == "[a] a0 [0/5 jobs done, 5 left]" and lines[2] == "[b] b0 [2/6 jobs done, 4 left]"
        assert status[-1] == "5/6 jobs done, 1 left]"
    else:  # a line as each job ends, from the worker processes
        assert (
            lines[0].startswith("[a] done a")
            and " in " in lines[0]
            and status[:2] == ["1/5 jobs done, 4 left]", "2/5 jobs done, 3 left]"]
        )
        assert status[-1] == "6/6 jobs done, 0 left]"


def test_starmap_gives_the_calls_results_in_order_in_the_workers_once_they_run():
    """The report's figures: drawn in the worker processes once they have started (the same bytes as here), in this
    process before; neither counts as a job."""
    import os

    from harness.workers import Workers

    with Workers(2) as w:
        assert w.starmap(_square, [(i,) for i in range(5)]) == [0, 1, 4, 9, 16] and w._pool is None
        w.submit("a", "a0", _square, (3,))
        w.wait(lambda s: None)
        pids = set(w.starmap(_pid, [()] * 6))
        assert w.starmap(_square, [(i,) for i in range(7)]) == [i * i for i in range(7)]
        assert os.getpid() not in pids and w.counts() == (1, 1)
        with pytest.raises(ZeroDivisionError):
            w.starmap(divmod, [(1, 1), (1, 0)])


def _pid():
    import os

    return os.getpid()


SCRIPT = """
import sys, time
from harness.workers import Workers


def nap(seconds, name):
    open(f"started_{name}", "w").close()  # the job has begun: the worker is past its imports
    time.sleep(seconds)


if __name__ == "__main__":
    try:
        with Workers(2) as w:
            w.submit("x", "a", nap, (300, "a"))
            w.submit("x", "b", nap, (300, "b"))
            w.submit("x", "c", nap, (300, "c"))
            print("submitted", flush=True)
            w.wait(lambda s: None)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and signals of Linux")
def test_ctrl_c_stops_the_workers_at_once_without_their_tracebacks(tmp_path):
    import psutil

    (tmp_path / "script.py").write_text(SCRIPT)
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "script.py")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        start_new_session=True,  # its own process group: a terminal's Ctrl-C reaches all of it
        # Ctrl-C's default, as in a terminal (a shell's background job passes SIGINT on ignored)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert parent.stdout.readline().strip() == "submitted"
        proc = psutil.Process(parent.pid)

        def workers():
            return [c for c in proc.children() if "resource_tracker" not in " ".join(c.cmdline())]

        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(workers()) < 2:
            time.sleep(0.2)
        started = workers()
        assert len(started) == 2, "the workers did not start"
        while time.monotonic() < deadline and len(list(tmp_path.glob("started_*"))) < 2:
            time.sleep(0.2)  # until both workers are in their jobs (past their imports, however loaded the machine)
        assert len(list(tmp_path.glob("started_*"))) == 2, "the jobs did not start"
        tic = time.monotonic()
        os.killpg(parent.pid, signal.SIGINT)
        out, err = parent.communicate(timeout=60)
        assert time.monotonic() - tic < 30, "the parent waited for its workers' jobs"
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 130 and out.strip() == "interrupted"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in started):
        time.sleep(0.2)
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in started)


def _mark(folder):
    (Path(folder) / str(os.getpid())).write_text("warm")  # one file per process that ran the warm-up


def _slow():
    time.sleep(30)


def test_warm_starts_each_process_ahead_of_the_jobs(tmp_path):
    """``harness run`` warms its workers while it checks the experiment: each process runs the warm-up once, before the
    jobs, which then run in those same processes and are the only ones counted."""
    from harness.workers import Workers

    lines = []
    (tmp_path / "warm").mkdir()
    with Workers(2) as w:
        w.warm(_mark, (str(tmp_path / "warm"),))
        assert w.counts() == (0, 0)  # not a job
        for i in range(4):
            w.submit("a", f"a{i}", _pid, ())
        w.wait(lines.append)
        assert w.counts() == (4, 4) and len(lines) == 4
        jobs = {w.results[("a", f"a{i}")] for i in range(4)}
    warmed = {int(p.name) for p in (tmp_path / "warm").iterdir()}
    # every process that ran a job ran the warm-up (a loaded machine may give all four jobs to one of the two)
    assert jobs <= warmed and os.getpid() not in jobs | warmed, (jobs, warmed)


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_closing_before_any_job_stops_the_warmed_processes_at_once():
    """A bad experiment is refused while the workers warm up: closing the pool then stops them, so the error is not held
    back by a warm-up still running (here one that would take 30 s). The workers are followed by PID (psutil): the
    pool's own thread may reap them while ``multiprocessing.active_children`` polls, which then lists a dead one."""
    import multiprocessing as mp

    import psutil

    from harness.workers import Workers

    before = set(mp.active_children())
    tic = time.perf_counter()
    with pytest.raises(ValueError, match="bad experiment"):
        with Workers(2) as w:
            w.warm(_slow)
            warmed = [psutil.Process(p.pid) for p in set(mp.active_children()) - before]
            raise ValueError("bad experiment")
    assert len(warmed) == 2

    def running():
        return [p for p in warmed if _alive(p)]

    while running() and time.perf_counter() - tic < 15:
        time.sleep(0.1)
    assert not running() and time.perf_counter() - tic < 15
