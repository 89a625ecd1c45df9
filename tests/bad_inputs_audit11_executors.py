"""Bad inputs found by the eleventh reliability audit among the executors' options (``audit11 A11-23..25``): --slurm keys
the executor never reads (accepted and ignored under ``submitit-local``; a typo under ``slurm`` refused by submitit's
text, or a traceback, after folders were made), and ``harness downstream --executor slurm`` on a machine without
SLURM (the jobs ran here in local processes while the console said slurm). Every refusal comes before any work: no
output folder, no submitit folder, no executor."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

from bad_inputs_audit9_config import CLI_ERROR

from bad_inputs import bad_input
from bad_inputs_downstream import downstream
from bad_inputs_safety import upstream_cli


def _no_executor(*args, **kwargs):
    raise AssertionError("a submitit executor was created")


def _downstream(tmp: Path, *args: str) -> None:
    """The audit's ``harness downstream`` (demo_digit, one lr, 5 steps) into ``tmp/ds`` with ``args``; refused before
    any work: no output folder, no submitit executor."""
    import submitit

    try:
        with (
            mock.patch.object(submitit, "AutoExecutor", _no_executor),
            mock.patch.object(submitit, "LocalExecutor", _no_executor),
        ):
            downstream(
                "--tasks", "demo_digit", "--preset", "demo", "--seeds", "1", "--batch-size", "16", "--micro-batch",
                "16", "--log-with", "none", "--lrs", "0.05", "--steps", "5", "--out", str(tmp / "ds"), *args,
            )  # fmt: skip
    finally:
        assert not (tmp / "ds").exists(), "the sweep wrote its output folder before the error"


def _upstream(tmp: Path, *args: str) -> None:
    """The audit's ``H`` (digits_hom.yaml, one epoch on 100 examples) into ``tmp/sl`` with ``args``; refused before
    any work: no run folder (no submitit folder in it)."""
    try:
        upstream_cli(
            *args,
            "train.epochs=1",
            "data.limit_train=100",
            "data.limit_eval=50",
            "train.log_with=[]",
            f"output_dir={tmp / 'sl'}",
        )
    finally:
        assert not (tmp / "sl").exists(), "the run folder (its submitit folder) was made before the error"


def _path_with(tmp: Path, *programs: str) -> "dict[str, str]":
    """A PATH holding only stand-ins for ``programs`` (a machine without SLURM, or with part of it)."""
    folder = tmp / "bin"
    folder.mkdir()
    for name in programs:
        (folder / name).write_text("#!/bin/sh\nexit 1\n")
        (folder / name).chmod(0o755)
    return {"PATH": str(folder)}


# ------------------------------------------------------------------------ --slurm keys the executor does not read
@bad_input(
    "downstream",
    "harness downstream --executor submitit-local --slurm slurm_partition=gpu (audit11 A11-23: rc 0, the partition "
    "accepted and ignored: only timeout_min and --gpus are read)",
    CLI_ERROR,
    r"--slurm slurm_partition=gpu: --executor submitit-local runs the jobs on this machine and reads only timeout_min "
    r"of --slurm .*would be ignored: leave slurm_partition out, or use --executor slurm",
)
def _downstream_local_partition(tmp):
    _downstream(tmp, "--executor", "submitit-local", "--slurm", "slurm_partition=gpu")


@bad_input(
    "downstream",
    "harness downstream --executor submitit-local --slurm bogus_key=1 (audit11 A11-23: rc 0, the key accepted and "
    "ignored)",
    CLI_ERROR,
    r"--slurm bogus_key=1: --executor submitit-local .*reads only timeout_min of --slurm .*leave bogus_key out",
)
def _downstream_local_bogus(tmp):
    _downstream(tmp, "--executor", "submitit-local", "--slurm", "bogus_key=1")


@bad_input(
    "upstream",
    "harness upstream --executor submitit-local --slurm slurm_partition=gpu (audit11 A11-23: rc 0, the partition "
    "ignored)",
    CLI_ERROR,
    r"--slurm slurm_partition=gpu: --executor submitit-local runs the jobs on this machine and reads only timeout_min "
    r"of --slurm .*leave slurm_partition out, or use --executor slurm",
)
def _upstream_local_partition(tmp):
    _upstream(tmp, "--executor", "submitit-local", "--slurm", "slurm_partition=gpu")


@bad_input(
    "upstream",
    "harness upstream --executor slurm --slurm bogus=3 (audit11 A11-23: refused by submitit's text only after the "
    "run's submitit folder was made)",
    CLI_ERROR,
    r"--slurm bogus=3: bogus is not among the submitit parameters --executor slurm reads: the generic .*timeout_min"
    r".*slurm_partition.*: fix the key \(e\.g\. slurm_partition=gpu\), or leave it out",
)
def _upstream_slurm_bogus(tmp):
    with mock.patch.dict("os.environ", _path_with(tmp, "sbatch", "srun")):  # a key is checked on any machine
        _upstream(tmp, "--executor", "slurm", "--slurm", "bogus=3")


# ------------------------------------------------------------------------------------------ a machine without SLURM
@bad_input(
    "downstream",
    "harness downstream --executor slurm --slurm slurm_partition=gpu on a machine without sbatch/srun (audit11 A11-24: "
    "rc 0, 'as slurm jobs' printed while the fine-tunes ran here in local processes)",
    CLI_ERROR,
    r"--executor slurm submits SLURM jobs with sbatch and srun, and this machine has no sbatch and no srun on its "
    r"PATH .*: submit from a machine of the cluster \(a login node\), or use --executor submitit-local",
)
def _downstream_slurm_no_sbatch(tmp):
    with mock.patch.dict("os.environ", _path_with(tmp)):
        _downstream(tmp, "--executor", "slurm", "--slurm", "slurm_partition=gpu")


@bad_input(
    "upstream",
    "harness upstream --executor slurm on a machine with srun but no sbatch (audit11 A11-24: submitit's srun check "
    "passed, the submission failed after the run's submitit folder was made)",
    CLI_ERROR,
    r"--executor slurm submits SLURM jobs with sbatch and srun, and this machine has no sbatch on its PATH .*: submit "
    r"from a machine of the cluster \(a login node\), or use --executor submitit-local",
)
def _upstream_slurm_no_sbatch(tmp):
    with mock.patch.dict("os.environ", _path_with(tmp, "srun")):
        _upstream(tmp, "--executor", "slurm", "--slurm", "slurm_partition=gpu")


# ----------------------------------------------------------------------------- a typo in a key under --executor slurm
@bad_input(
    "downstream",
    "harness downstream --executor slurm --slurm bogus_key=1 (audit11 A11-25: rc 1, a NameError traceback from "
    "submitit after jobs/, predictions/ and sweep.json were written)",
    CLI_ERROR,
    r"--slurm bogus_key=1: bogus_key is not among the submitit parameters --executor slurm reads: .*fix the key",
)
def _downstream_slurm_bogus(tmp):
    with mock.patch.dict("os.environ", _path_with(tmp, "sbatch", "srun")):  # a SLURM machine: the key is the error
        _downstream(tmp, "--executor", "slurm", "--slurm", "bogus_key=1")
