"""Bad inputs of the trackers: an MLflow tracking URI that is no MLflow store, or one inside a harness folder."""

from __future__ import annotations

import os

import pytest

from harness.cli import main

from bad_inputs import ROOT, bad_input

CONFIG = ROOT / "upstream" / "configs" / "digits_hom.yaml"


def _upstream_with_mlflow(tmp, uri: str) -> None:
    from click.testing import CliRunner

    pytest.importorskip("mlflow")
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = uri
    try:
        args = [
            "upstream",
            "--no-progress",
            "--config",
            str(CONFIG),
            "train.epochs=1",
            "data.limit_train=64",
            f"output_dir={tmp / 'run'}",
            "train.log_with=[mlflow]",
        ]
        res = CliRunner().invoke(main, args)
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI") if old is None else os.environ.__setitem__("MLFLOW_TRACKING_URI", old)
    assert not (tmp / "run" / "model.pt").exists(), "the run trained"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    if res.exit_code != 0:
        raise ValueError(res.output)


@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=pipe:... (audit: two chained tracebacks)",
    ValueError,
    r"MLFLOW_TRACKING_URI 'pipe:touch x' is a pipe: URI, not an MLflow store",
)
def mlflow_pipe_uri(tmp):
    _upstream_with_mlflow(tmp, "pipe:touch x")


@bad_input(
    "trackers",
    "an MLflow store inside another run's folder (audit: filled it with MLflow's files)",
    ValueError,
    r"is inside the harness run folder .*other \(it holds run\.json\).* give the store a folder of its own",
)
def mlflow_store_in_a_run(tmp):
    other = tmp / "other"
    other.mkdir()
    (other / "run.json").write_text("{}")
    _upstream_with_mlflow(tmp, str(other / "mlruns"))
    assert not (other / "mlruns").exists()
