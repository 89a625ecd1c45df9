"""Bad inputs found by the fourteenth reliability audit among the jobs' options (``audit14 <case id>``): a --slurm
value outside its key's type and range (``timeout_min=-5``, ``0``, ``nan``, ``abc``: submitted, then a traceback or a
job that never ran), and a harness run's ``model.pt`` given as ``--weights`` of a timm model (a key mismatch with
advice that does not apply). Every refusal comes before any work: no output folder, no submitit executor."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

from bad_inputs_audit9_config import CLI_ERROR, CONFIGS
from bad_inputs_audit11_executors import _downstream, _path_with, _upstream

from bad_inputs import bad_input
from bad_inputs_downstream import _upstream as _harness_model
from bad_inputs_downstream import downstream

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


# ------------------------------------------------------------------ A14-09: a harness run's model.pt as --weights
#: the refusal of a harness checkpoint as --weights (harness.checkpoint_files.check_weights_file)
_CHECKPOINT = (
    r"--weights '.*model\.pt' is a harness run's model\.pt \(format 'harness\.model/1'.*--weights takes the state "
    r"dict of a timm or torchvision model: give .*model\.pt as --model \(--upstream for harness downstream\), "
    r"without --weights"
)


def _not_built():
    """The backbone is never built (the check comes first)."""
    return mock.patch("harness.backbone_sources.create_backbone", side_effect=AssertionError("backbone built"))


def _harness(tmp: Path, out: str, *args: str) -> None:
    """``harness ARGS`` in-process; refused before any work: no ``tmp/out`` folder."""
    from harness.cli import main

    try:
        main(list(args), standalone_mode=False)
    finally:
        assert not (tmp / out).exists(), f"{out} was made before the refusal"


@bad_input(
    "import",
    "harness import --model timm:test_resnet --weights <a harness run's model.pt> (audit14 A14-09: 'do not fit the "
    "model (missing bn1.bias ...; unexpected backbone.bn1.bias ...)', advising other classes or other data)",
    CLI_ERROR,
    _CHECKPOINT,
)
def _import_checkpoint_weights(tmp):
    with mock.patch("harness.run_streams.read_split", side_effect=AssertionError("data read")):
        _harness(tmp, "imp2", "import", "--model", "timm:test_resnet", "--weights", _harness_model(), "--data",
                 str(CONFIGS / "digits_hom.yaml"), "--out", str(tmp / "imp2"), "limit_eval=20")  # fmt: skip


@bad_input(
    "fewshot",
    "harness fewshot --model timm:test_resnet --weights <a harness run's model.pt> (audit14 A14-09: a key mismatch "
    "advising harness.models.load_model, which no option of the command gives)",
    CLI_ERROR,
    _CHECKPOINT,
)
def _fewshot_checkpoint_weights(tmp):
    with _not_built(), mock.patch("harness.downstream.fewshot.prepare_tasks", side_effect=AssertionError("data read")):
        _harness(tmp, "fs2", "fewshot", "--model", "timm:test_resnet", "--weights", _harness_model(), "--tasks",
                 "demo_digit", "--log-with", "none", "--shots", "1", "--out", str(tmp / "fs2"))  # fmt: skip


@bad_input(
    "downstream",
    "harness downstream --upstream timm:test_resnet --weights <a harness run's model.pt> (audit14 A14-09: a key "
    "mismatch advising harness.models.load_model)",
    CLI_ERROR,
    _CHECKPOINT,
)
def _downstream_checkpoint_weights(tmp):
    try:
        with _not_built():
            downstream("--upstream", "timm:test_resnet", "--weights", _harness_model(), "--tasks", "demo_digit",
                       "--preset", "demo", "--seeds", "1", "--log-with", "none", "--out", str(tmp / "ds6"))  # fmt: skip
    finally:
        assert not (tmp / "ds6").exists(), "ds6 was made before the refusal"
