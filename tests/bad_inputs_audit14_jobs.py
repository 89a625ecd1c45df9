"""Bad inputs found by the fourteenth reliability audit among the jobs' options (``audit14 <case id>``): a --slurm
value outside its key's type and range (``timeout_min=-5``, ``0``, ``nan``, ``abc``: submitted, then a traceback or a
job that never ran). Every refusal comes before any work: no output folder, no submitit executor."""

from __future__ import annotations

from unittest import mock

from bad_inputs_audit9_config import CLI_ERROR
from bad_inputs_audit11_executors import _downstream, _path_with, _upstream

from bad_inputs import bad_input

#: the rule of the time limit, as the refusal says it (harness.training.slurm.PARAMETERS)
_MINUTES = r"timeout_min \(the job's time limit, in minutes\) must be a whole number >= 1, got "
_FIX = r": give e\.g\. --slurm timeout_min=60, or leave timeout_min out"


# ------------------------------------------------------------------------ A14-08: --slurm values outside their rule
@bad_input(
    "downstream",
    "harness downstream --executor submitit-local --slurm timeout_min=-5 (audit14 A14-08: the model loaded and the "
    "jobs submitted, then a submitit UncompletedJobError traceback; ds2/ left with jobs/ and sweep.json)",
    CLI_ERROR,
    r"--slurm timeout_min=-5: " + _MINUTES + "-5" + _FIX,
)
def _downstream_negative_minutes(tmp):
    _downstream(tmp, "--executor", "submitit-local", "--slurm", "timeout_min=-5")


@bad_input(
    "downstream",
    "harness downstream --executor submitit-local --slurm timeout_min=nan (audit14 A14-08: 'cannot convert float NaN "
    "to integer' after the model was loaded)",
    CLI_ERROR,
    r"--slurm timeout_min=nan: " + _MINUTES + "nan" + _FIX,
)
def _downstream_nan_minutes(tmp):
    _downstream(tmp, "--executor", "submitit-local", "--slurm", "timeout_min=nan")


@bad_input(
    "downstream",
    'harness downstream --executor slurm --slurm timeout_min=abc (audit14 A14-08: "invalid literal for int() ... '
    "'abcabc…'\", the text multiplied 60 times instead of parsed)",
    CLI_ERROR,
    r"--slurm timeout_min=abc: " + _MINUTES + "'abc'" + _FIX,
)
def _downstream_text_minutes(tmp):
    with mock.patch.dict("os.environ", _path_with(tmp, "sbatch", "srun")):  # a SLURM machine: the value is the error
        _downstream(tmp, "--executor", "slurm", "--slurm", "timeout_min=abc")


@bad_input(
    "upstream",
    "harness upstream --executor submitit-local --slurm timeout_min=-5 (audit14 A14-08: the job submitted, then 'job "
    "ended without finishing ... the same command resumes the run', which fails the same way)",
    CLI_ERROR,
    r"--slurm timeout_min=-5: " + _MINUTES + "-5" + _FIX,
)
def _upstream_negative_minutes(tmp):
    with mock.patch("submitit.AutoExecutor", side_effect=AssertionError("a submitit executor was created")):
        _upstream(tmp, "--executor", "submitit-local", "--slurm",
                  "timeout_min=-5")  # fmt: skip


@bad_input(
    "upstream",
    "harness upstream --executor slurm --slurm timeout_min=0 slurm_partition='a b' (audit14 A14-08: values reached "
    "submitit unchecked)",
    CLI_ERROR,
    r"--slurm timeout_min=0: " + _MINUTES + "0" + _FIX,
)
def _upstream_zero_minutes(tmp):
    with (
        mock.patch.dict("os.environ", _path_with(tmp, "sbatch", "srun")),
        mock.patch("submitit.AutoExecutor", side_effect=AssertionError("a submitit executor was created")),
    ):
        _upstream(tmp, "--executor", "slurm", "--slurm",
                  "timeout_min=0", "--slurm", "slurm_partition=a b")  # fmt: skip
