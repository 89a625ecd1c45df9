"""Bad inputs found by the tenth reliability audit in the trackers and the transfer commands (``audit10 <case id>``):
accelerate's warning on a run that asked for no tracker, an MLflow file store that MLflow 3 refuses and an MLflow
server that does not answer (found after start, tracking then off), a minute of hub retries without a network, fp16
on a CPU refused after the output folder was made, an empty task list scored NaN, and data options the tasks do
not read. Every refusal comes before any work."""

from __future__ import annotations

import os
import re
import socket
import time
import warnings
from unittest import mock

import click
import pytest
from bad_inputs_audit8_flags import TINY

from bad_inputs import bad_input, handled
from bad_inputs_downstream import _upstream, downstream, task_folder
from bad_inputs_safety import _cli
from bad_inputs_trackers import CONFIG, _upstream_with_mlflow

CLI_ERROR = click.ClickException  # click.UsageError and click.BadParameter are ones too


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then closed): a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------------- trackers
@handled(
    "trackers",
    "harness upstream train.log_with=[] (audit10 A10-07: accelerate warned 'log_with=[] was passed but no supported "
    "trackers are currently installed')",
    r"trained without a tracker, no tracker warning",
)
def _log_with_empty_no_warning(tmp):
    from harness.cli import main

    args = ["upstream", "--no-progress", "--config", str(CONFIG), "train.epochs=1", "data.limit_train=64"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main([*args, "data.limit_eval=64", f"output_dir={tmp / 'run'}", "train.log_with=[]"], standalone_mode=False)
    assert (tmp / "run" / "model.pt").is_file(), "the run did not train"
    said = [str(w.message) for w in caught if "tracker" in str(w.message)]
    assert not said, said
    assert not (tmp / "run" / "tb").exists()
    return "trained without a tracker, no tracker warning"


@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=file:///... with MLflow 3 (audit10 A10-29: passed the check, MLflow refused its file store "
    "at start and the run went on untracked)",
    ValueError,
    r"MLFLOW_TRACKING_URI 'file:[^']*' is a file store .*MLflow 3.* refuses .*sqlite:///.*mlflow\.db.*"
    r"MLFLOW_ALLOW_FILE_STORE=true.*train\.log_with",
)
def _mlflow_file_store_mlflow3(tmp):
    from harness.training.trackers import mlflow_version

    if not re.match(r"[3-9]|\d\d", mlflow_version() or "0"):
        pytest.skip("MLflow < 3 (or none) here: it takes a file store, nothing to refuse")
    with mock.patch.dict(os.environ):
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        _upstream_with_mlflow(tmp, (tmp / "mlf").as_uri())
    assert not (tmp / "mlf").exists()


@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=http://127.0.0.1:<closed port> (audit10 A10-30: about 250 s of MLflow's retries, then "
    "tracking off and the run went on)",
    ValueError,
    r"MLFLOW_TRACKING_URI 'http://127\.0\.0\.1:\d+': no tracking server answers there within 3 s "
    r"\(ConnectionRefusedError.*mlflow server .*sqlite:///mlflow\.db.*leave mlflow out of train\.log_with",
)
def _mlflow_server_unreachable(tmp):
    tic = time.perf_counter()
    try:
        _upstream_with_mlflow(tmp, f"http://127.0.0.1:{_closed_port()}")
    finally:
        assert time.perf_counter() - tic < 60, "the refusal came after minutes"


# -------------------------------------------------------------------------------------------------- downstream
@bad_input(
    "downstream",
    "harness downstream --upstream timm:test_resnet with no hub reachable and HF_HUB_OFFLINE unset (audit10 A10-22: "
    "a minute of huggingface_hub's retries before 'no weights')",
    CLI_ERROR,
    r"no weights for timm:test_resnet: .*Hugging Face Hub \(http://127\.0\.0\.1:\d+\).*cannot be reached .*"
    r"--weights FILE.*--random-init.*HF_HUB_OFFLINE=1",
)
def _timm_hub_unreachable(tmp):
    from huggingface_hub import constants

    hub = f"http://127.0.0.1:{_closed_port()}"
    tic = time.perf_counter()
    with (
        mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "0"}),
        mock.patch.object(constants, "HF_HUB_OFFLINE", False),
        mock.patch.object(constants, "ENDPOINT", hub),
        mock.patch.object(constants, "HF_HUB_CACHE", str(tmp / "hub-cache")),  # nothing cached
    ):
        try:
            _cli("downstream", "--upstream", "timm:test_resnet", "--tasks", "demo_digit", *TINY, "--out", "ds")
        finally:
            assert time.perf_counter() - tic < 20, "the refusal came after the hub's retries"
            assert not (tmp / "ds").exists()


@bad_input(
    "downstream",
    "harness downstream --mixed-precision fp16 on a CPU (audit10 A10-23: refused after predictions/ and sweep.json "
    "were written)",
    CLI_ERROR,
    r"--mixed-precision=fp16 does not run on a CPU.*bf16 or no",
)
def _fp16_on_cpu_before_out(tmp):
    try:
        downstream("--tasks", "demo_digit", "--mixed-precision", "fp16", "--device", "cpu")
    finally:
        assert not (tmp / "out").exists(), "the output folder was made first"


@bad_input(
    "downstream",
    "harness downstream --tasks '' (audit10 A10-24: rc 0, 'mean over 0 tasks: nan')",
    CLI_ERROR,
    r"--tasks.*'' names no task.*no score.*demo_digit",
)
def _empty_tasks(tmp):
    try:
        downstream("--tasks", "")
    finally:
        assert not (tmp / "out").exists()


@bad_input(
    "fewshot",
    "harness fewshot --tasks , (audit10 A10-24, its few-shot spelling: a probe over no task)",
    CLI_ERROR,
    r"--tasks.*',' names no task",
)
def _empty_tasks_fewshot(tmp):
    _cli("fewshot", "--model", _upstream(), "--tasks", ",", "--shots", "1", "--out", str(tmp / "fs"))


@bad_input(
    "downstream",
    "harness downstream --tasks demo_digit --data-format folder (audit10 A10-25: ignored, rc 0)",
    CLI_ERROR,
    r"--data-format folder: read by VTAB-1k tasks only .*--tasks demo_digit names none .*remove --data-format",
)
def _data_format_unread(tmp):
    with mock.patch("harness.downstream.sweep.sweep", side_effect=AssertionError("the sweep ran")):
        downstream("--tasks", "demo_digit", "--data-format", "folder")


@bad_input(
    "downstream",
    "harness downstream --tasks birds=FOLDER:5 --data-dir /nonexistent (audit10 A10-25: ignored, rc 0)",
    CLI_ERROR,
    r"--data-dir /nonexistent: read by VTAB-1k tasks only .*custom tasks NAME=FOLDER:K are read from their own "
    r"folders.*remove --data-dir",
)
def _data_dir_unread(tmp):
    with mock.patch("harness.downstream.sweep.sweep", side_effect=AssertionError("the sweep ran")):
        downstream("--tasks", f"birds={task_folder(tmp)}:5", "--data-dir", "/nonexistent")
