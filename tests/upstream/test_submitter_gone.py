"""A submitit-local job ends with the command that submitted it (audit B07, B07b): killed with kill -9, the submitter
left the job training with the run's lock held, and the rerun failed naming a submitit PID."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("submitit")

from harness.cli import main  # noqa: E402
from harness.upstream.launch import SubmitterWatch  # noqa: E402

CONFIG = Path(__file__).resolve().parents[2] / "upstream" / "configs" / "digits_hom.yaml"
ARGS = [
    "upstream",
    "--no-progress",
    "--config",
    str(CONFIG),
    "--executor",
    "submitit-local",
    "data.limit_train=256",
    "data.limit_eval=100",
    "data.heldout_split=null",
    "optim.warmup_epochs=0",
    "train.steps=150",
    "train.eval_every_steps=1000",
    "train.checkpoint_every=1000",
]


def test_the_watch_sees_its_submitter_go():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    watch = SubmitterWatch(child.pid, interval=0.1).start()
    assert not watch.is_set()
    child.wait()
    deadline = time.monotonic() + 10
    while not watch.is_set() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert watch.is_set()
    assert not SubmitterWatch(os.getpid(), interval=0.1).start().is_set()  # this process is alive


def _wait(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return condition()


@pytest.mark.slow
def test_a_job_whose_submitter_is_killed_stops_with_its_state_saved_and_the_rerun_resumes(tmp_path):
    out = tmp_path / "run"
    submitter = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", *ARGS, f"output_dir={out}"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert _wait(lambda: (out / "run.json").is_file(), 240), "the job did not start"
        time.sleep(2)  # training
        os.kill(submitter.pid, signal.SIGKILL)
        submitter.wait()
        # the job saves its state at the next step and ends: the lock is released, nothing is left running
        assert _wait(lambda: not (out / ".lock.pid").exists(), 120), "the job kept running without its submitter"
        logs = "".join(p.read_text() for p in (out / "submitit").glob("*_log.out"))
        assert "is gone: the job stops here, its state saved" in logs
        assert (out / "checkpoints" / "last.pt").is_file() and not (out / "metrics.json").exists()
    finally:
        if submitter.poll() is None:
            os.kill(submitter.pid, signal.SIGKILL)
    result = CliRunner().invoke(main, [*ARGS, f"output_dir={out}"])
    assert result.exit_code == 0, result.output
    assert (out / "metrics.json").is_file()
