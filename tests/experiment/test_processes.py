"""Processes of `harness run`: one experiment per runs_root at a time, and workers that die with their parent."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKERS = """
import sys, time
from harness.workers import Workers


def nap(seconds):
    time.sleep(seconds)


if __name__ == "__main__":
    with Workers(2) as w:
        w.submit("x", "a", nap, (300,))
        w.submit("x", "b", nap, (300,))
        print("submitted", flush=True)
        w.wait(lambda s: None)
"""


def _wait(condition, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="kill -9 and /proc semantics of Linux")
def test_workers_die_within_seconds_of_a_kill_9_of_their_parent(tmp_path):
    (tmp_path / "workers.py").write_text(WORKERS)
    parent = subprocess.Popen(
        [sys.executable, str(tmp_path / "workers.py")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert parent.stdout.readline().strip() == "submitted"
        proc = psutil.Process(parent.pid)
        # the pool's two workers (spawn also starts a resource tracker, which is not a worker)
        assert _wait(
            lambda: len([c for c in proc.children() if "resource_tracker" not in " ".join(c.cmdline())]) >= 2, 120
        ), "the workers did not start"
        workers = [c for c in proc.children() if "resource_tracker" not in " ".join(c.cmdline())]
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert _wait(lambda: not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers), 10), (
            f"workers {[w.pid for w in workers]} outlived their killed parent"
        )
    finally:
        if parent.poll() is None:
            parent.kill()
        for c in psutil.Process().children(recursive=True):
            if c.pid != os.getpid():
                c.kill()


def test_a_second_harness_run_in_one_runs_root_is_refused_at_once_naming_the_first(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-c",
        "from harness.cli import main; main()",
        "run",
        f"runs_root={tmp_path / 'runs'}",
        f"results_root={tmp_path / 'results'}",
    ]
    first = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        lock = tmp_path / "runs" / ".harness-run.lock.pid"
        assert _wait(lock.is_file, 120), "the first run never took the experiment lock"
        tic = time.monotonic()
        second = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
        assert second.returncode != 0
        assert f"PID {first.pid}" in second.stderr and "runs_root=" in second.stderr, second.stderr
        assert "one harness run at a time uses a runs_root" in second.stderr
        assert time.monotonic() - tic < 60, "the refusal was not immediate"
        assert first.poll() is None, "the second run disturbed the first"
    finally:
        first.kill()
        first.wait(30)
    # the holder is gone: its lock is free again (a stale pid file is taken over with a message)
    from harness.experiment.stages import EXPERIMENT_LOCK
    from harness.io import RunLock

    with RunLock(tmp_path / "runs", name=EXPERIMENT_LOCK, clean=False):
        pass
