"""Bad inputs found by the eighth reliability audit among the commands' flags (``audit8 <case id>``): contradictory
flags dropped without a word, messages that named the wrong thing, an unbounded resolution, a shift folder that cannot
be written found after the work, and an HF_HUB_OFFLINE read as online. Every refusal comes before any work."""

from __future__ import annotations

from unittest import mock

import click
from bad_inputs_audit6_runs import _checkpoint_runs
from bad_inputs_schemas import _export

from bad_inputs import bad_input
from bad_inputs_downstream import downstream, task_folder
from bad_inputs_safety import _cli, _model_pt
from bad_inputs_uncertainty import make_run

CLI_ERROR = click.ClickException  # click.UsageError is one too
#: a tiny fine-tuning grid, so that a command that is not refused ends soon
TINY = ["--lrs", "0.05", "--steps", "1", "--batch-size", "8", "--micro-batch", "8", "--resolution", "32,32"]


def _fewshot(tmp, model: str, *args: str) -> None:
    """``harness fewshot`` of ``model`` on a tiny folder task with ``args``; refused: no output folder left."""
    try:
        _cli(
            "fewshot",
            "--model",
            model,
            "--tasks",
            f"birds={task_folder(tmp)}:5",
            "--data-format",
            "folder",
            "--shots",
            "1",
            "--log-with",
            "none",
            "--out",
            str(tmp / "fs"),
            *args,
        )
    finally:
        assert not (tmp / "fs").exists(), "an output folder was written"


def _shift(tmp, *args: str) -> None:
    """``harness shift`` of a run folder with real model.pt; refused before any prediction."""
    _checkpoint_runs(tmp)
    with mock.patch.dict("os.environ", {"HARNESS_CACHE": str(tmp / "cache")}):
        with mock.patch("harness.shift.predict._load_run_model", side_effect=AssertionError("a model was loaded")):
            _cli("shift", "-m", str(tmp / "a"), "--ood", "none", *args)


# ------------------------------------------------------------------------------ contradictory flags (C01-C04, C08-C10)
@bad_input(
    "downstream",
    "harness downstream --upstream local-dir:EXPORT --random-init (audit8 C01: trained weights used, the flag dropped)",
    CLI_ERROR,
    r"--random-init asks for untrained weights but local-dir:.*export holds trained ones .*: drop --random-init, or "
    r"use timm:NAME for a randomly initialised backbone",
)
def _downstream_random_init_export(tmp):
    args = ["--upstream", f"local-dir:{_export(tmp, lambda c: None)}", "--random-init", "--data-format", "folder"]
    _cli("downstream", *args, *TINY, "--tasks", f"birds={task_folder(tmp)}:5", "--out", str(tmp / "ds"))


@bad_input(
    "fewshot",
    "harness fewshot --model MODEL.PT --random-init (audit8 C02: trained weights used, the flag dropped)",
    CLI_ERROR,
    r"--random-init asks for untrained weights but .*model\.pt holds trained ones .*: drop --random-init",
)
def _fewshot_random_init_model_pt(tmp):
    _fewshot(tmp, str(_model_pt(tmp / "model.pt")), "--random-init")


@bad_input(
    "downstream",
    "harness downstream --gpus 0,1 under the default --executor local (audit8 C03: --gpus ignored, rc 0)",
    CLI_ERROR,
    r"--gpus 0,1 spreads the runs over this machine's GPUs, which only --executor submitit-local does; --executor "
    r"local would ignore it",
)
def _downstream_gpus_local(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:5", "--data-format", "folder", "--gpus", "0,1")


@bad_input(
    "downstream",
    "harness downstream --slurm partition=x under the default --executor local (audit8 C04: --slurm ignored, rc 0)",
    CLI_ERROR,
    r"--slurm partition=x describes SLURM jobs, which --executor local .* does not submit: add --executor slurm",
)
def _downstream_slurm_local(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:5", "--data-format", "folder", "--slurm", "partition=x")


@bad_input(
    "shift",
    "harness shift --corruptions all,none (audit8 C08: all 14 corruptions run, none dropped)",
    CLI_ERROR,
    r"corruptions \(--corruptions\) 'all,none' names none \(no corrupted set\) with corruptions: give none alone",
)
def _shift_all_none(tmp):
    _shift(tmp, "--corruptions", "all,none", "--severities", "1")


@bad_input(
    "shift",
    "harness shift --corruptions none --severities 3 (audit8 C09: --severities ignored, rc 0)",
    CLI_ERROR,
    r"--severities 3 sets the corrupted sets' severities, and --corruptions 'none' runs no corruption: drop "
    r"--severities",
)
def _shift_none_severities(tmp):
    _shift(tmp, "--corruptions", "none", "--severities", "3")


@bad_input(
    "report",
    "harness report --no-covariance --top-pairs 5 (audit8 C10: --top-pairs ignored, rc 0)",
    CLI_ERROR,
    r"--top-pairs 5 sets the pairs of the covariance analysis, which --no-covariance leaves out",
)
def _report_top_pairs(tmp):
    make_run(tmp / "a", seed=0)
    try:
        _cli("report", str(tmp / "a"), "--out-root", str(tmp / "results"), "--no-covariance", "--top-pairs", "5")
    finally:
        assert not (tmp / "results").exists(), "a report was written"


# ------------------------------------------------------------------------------ messages that named the wrong thing
@bad_input(
    "trackers",
    "--log-with none,mlflow (audit8 C13: 'unknown tracker(s) 'none'', though none alone is accepted)",
    ValueError,
    r"--log-with: none \(no tracker\) cannot be combined with trackers .*: give none alone for no tracking, or only "
    r"the trackers \(mlflow\)",
)
def _log_with_none_and_tracker(tmp):
    from harness.training.trackers import available, parse_log_with

    available(parse_log_with("none,mlflow"), "--log-with")


@bad_input(
    "import",
    "harness import --model local-dir:EXPORT/model.safetensors, the file and not its folder (audit8 I03: 'no folder')",
    CLI_ERROR,
    r"local-dir:.*model\.safetensors: '.*model\.safetensors' is a file, and local-dir: takes a folder: give its "
    r"folder, local-dir:.*export",
)
def _import_local_dir_file(tmp):
    (tmp / "data.yaml").write_text("data:\n  source: digits\n  limit_eval: 30\n")
    model = f"local-dir:{_export(tmp, lambda c: None) / 'model.safetensors'}"
    try:
        _cli("import", "--model", model, "--data", str(tmp / "data.yaml"), "--out", str(tmp / "imp"))
    finally:
        assert not (tmp / "imp").exists(), "a run folder was written"


@bad_input(
    "downstream",
    "harness downstream --upstream local-dir:EXPORT/model.safetensors, the file (audit8 I03: 'no folder at')",
    CLI_ERROR,
    r"local-dir:.*model\.safetensors: '.*model\.safetensors' is a file, and local-dir: takes a folder: give its "
    r"folder, local-dir:.*export",
)
def _downstream_local_dir_file(tmp):
    model = f"local-dir:{_export(tmp, lambda c: None) / 'model.safetensors'}"
    downstream("--tasks", f"birds={task_folder(tmp)}:5", "--upstream", model)


@bad_input(
    "trackers",
    "--log-with none,none (audit8 C13: 'unknown tracker(s) 'none'')",
    ValueError,
    r"--log-with says no tracker 2 times \(none, none\): give none once",
)
def _log_with_none_twice(tmp):
    from harness.training.trackers import available, parse_log_with

    available(parse_log_with("none,none"), "--log-with")


# ------------------------------------------------------------------------------ bounds and late failures (T06, W06, W15)
@bad_input(
    "fewshot",
    "harness fewshot --resolution 100000 (audit8 T06: a PIL MemoryError traceback, without ulimit an OOM kill)",
    CLI_ERROR,
    r"resolution \(--resolution\) must be SIZE or RESIZE,CROP: whole numbers in \[1, 1024\] \(pixels\) .*got "
    r"\[100000\]",
)
def _fewshot_resolution(tmp):
    with mock.patch("harness.downstream.fewshot.prepare_tasks", side_effect=AssertionError("the data was read")):
        _fewshot(tmp, str(_model_pt(tmp / "model.pt")), "--resolution", "100000")


@bad_input(
    "downstream",
    "harness downstream --resolution 100000,100000 (audit8 T06: no upper bound, the images resized to 30 GB each)",
    CLI_ERROR,
    r"resolution \(--resolution\) must be RESIZE,CROP: .*1 <= CROP <= RESIZE <= 1024 \(pixels\).*got "
    r"\[100000, 100000\]",
)
def _downstream_resolution(tmp):
    with mock.patch("harness.downstream.sweep._phases", side_effect=AssertionError("a fine-tune started")):
        downstream("--tasks", f"birds={task_folder(tmp)}:5", "--data-format", "folder", "--resolution", "100000,100000")


@bad_input(
    "shift",
    "harness shift -m RUN on a read-only file system (audit8 W06: a bare '[Errno 30] Read-only file system' after 9 s "
    "of predictions)",
    CLI_ERROR,
    r"the run folder '.*a': its shift/ \(where harness shift writes its sets\) cannot be written \(Read-only file "
    r"system\): .*copy the run folder to a writable place and pass the copy",
)
def _shift_read_only(tmp):
    read_only = OSError(30, "Read-only file system")
    with mock.patch("harness.io.tempfile.TemporaryFile", side_effect=read_only):
        _shift(tmp, "--corruptions", "gaussian_noise", "--severities", "2", "--examples", "8")


@bad_input(
    "sources",
    "HF_HUB_OFFLINE=maybe with timm:NAME and timm's weights (audit8 W15: read as online, 51 s of download retries)",
    ValueError,
    r"HF_HUB_OFFLINE='maybe' is neither on nor off: set it to 1 \(also on, yes, true\) .*or 0 \(also off, no, false",
)
def _hf_hub_offline_maybe(tmp):
    from harness.sources import load_source

    with mock.patch.dict("os.environ", {"HF_HUB_OFFLINE": "maybe"}):
        with mock.patch("timm.create_model", side_effect=AssertionError("a download was attempted")):
            load_source("timm:test_resnet")
