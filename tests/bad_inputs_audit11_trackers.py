"""Bad inputs found by the eleventh reliability audit in the trackers (``audit11 <case id>``): a W&B mode wandb does
not know, an online W&B run without an API key or a server, an MLflow database URL SQLAlchemy cannot open or whose
driver is missing, and MLflow's Databricks store taken for a folder. Each was found only as the tracker started, and
the run went on untracked with exit status 0; every refusal now comes before any work (no run folder)."""

from __future__ import annotations

import os
from unittest import mock

import pytest
from bad_inputs_audit10_transfer import _closed_port

from bad_inputs import bad_input
from bad_inputs_trackers import CONFIG

#: the variables through which wandb or MLflow might find credentials or settings outside the case's folder
_OUTSIDE = (
    "WANDB_API_KEY",
    "WANDB_IDENTITY_TOKEN_FILE",
    "WANDB_BASE_URL",
    "WANDB_MODE",
    "WANDB_DIR",
    "NETRC",
    "DATABRICKS_HOST",
    "DATABRICKS_TOKEN",
    "DATABRICKS_CONFIG_FILE",
    "DATABRICKS_CONFIG_PROFILE",
    "DATABRICKS_RUNTIME_VERSION",
)


def _upstream_tracked(tmp, tracker: str, **env: str) -> None:
    """``harness upstream`` (one epoch of 64 digits) with ``train.log_with=[tracker]``, run with ``env`` set, the
    home and W&B's config folder in ``tmp`` (no key or profile of this machine's) and the variables of
    :data:`_OUTSIDE` unset otherwise; its error raised as the CLI gives it. The run folder must not exist after."""
    from click.testing import CliRunner

    from harness.cli import main

    pytest.importorskip(tracker)
    (tmp / "home").mkdir()
    with mock.patch.dict(os.environ):
        for name in _OUTSIDE:
            os.environ.pop(name, None)
        os.environ.update(HOME=str(tmp / "home"), WANDB_CONFIG_DIR=str(tmp / "home" / "wandb"), **env)
        args = ["upstream", "--no-progress", "--config", str(CONFIG), "train.epochs=1", "data.limit_train=64"]
        res = CliRunner().invoke(main, [*args, f"output_dir={tmp / 'run'}", f"train.log_with=[{tracker}]"])
    assert not (tmp / "run").exists(), f"the run folder was made: {res.output[-600:]}"
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    if res.exit_code != 0:
        raise ValueError(res.output)


# ------------------------------------------------------------------------------------------------ A11-07: W&B
@bad_input(
    "trackers",
    "WANDB_MODE=bogus with train.log_with=[wandb] (audit11 A11-07: '[tracking] wandb failed in start (ValidationError: "
    "... For further informatio)', the run went on untracked, exit status 0)",
    ValueError,
    r"WANDB_MODE='bogus' is not one of W&B's modes \(online, offline, .*disabled.*\): wandb would fail as the run "
    r"starts.*set WANDB_MODE=online, or set WANDB_MODE=offline .*leave wandb out of train\.log_with",
)
def _wandb_mode_bogus(tmp):
    _upstream_tracked(tmp, "wandb", WANDB_MODE="bogus")


@bad_input(
    "trackers",
    "WANDB_MODE=online and no W&B API key (audit11 A11-07: 'wandb failed in start (UsageError: No API key "
    "configured...)', the run went on untracked, exit status 0)",
    ValueError,
    r"W&B runs online here \(WANDB_MODE=online\) and finds no API key for http://127\.0\.0\.1:\d+ \(WANDB_BASE_URL\)"
    r": WANDB_API_KEY is unset and .*\.netrc \(no such file\) has no entry .*run wandb login .*set WANDB_API_KEY; or "
    r"set WANDB_MODE=offline",
)
def _wandb_online_no_key(tmp):
    _upstream_tracked(tmp, "wandb", WANDB_MODE="online", WANDB_BASE_URL=f"http://127.0.0.1:{_closed_port()}")


@bad_input(
    "trackers",
    "WANDB_MODE=online, an API key, WANDB_BASE_URL=http://127.0.0.1:<closed port> (audit11 A11-07: the W&B server "
    "was never looked at before the run)",
    ValueError,
    r"W&B runs online here \(WANDB_MODE=online\), and its server 'http://127\.0\.0\.1:\d+' \(WANDB_BASE_URL\) does "
    r"not answer within 3 s \(ConnectionRefusedError.*correct WANDB_BASE_URL, or set WANDB_MODE=offline",
)
def _wandb_server_unreachable(tmp):
    url = f"http://127.0.0.1:{_closed_port()}"
    _upstream_tracked(tmp, "wandb", WANDB_MODE="online", WANDB_API_KEY="k" * 40, WANDB_BASE_URL=url)


# --------------------------------------------------------------------------------------------- A11-08: MLflow
@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=sqlite:relative.db (audit11 A11-08: 'mlflow failed in start (ArgumentError: Could not parse "
    "SQLAlchemy URL ...)', the run went on untracked, exit status 0)",
    ValueError,
    r"MLFLOW_TRACKING_URI 'sqlite:relative\.db' is no database URL SQLAlchemy can open \(ArgumentError.*write it as "
    r"sqlite:///relative/path\.db or sqlite:////absolute/path\.db.*leave mlflow out of train\.log_with",
)
def _mlflow_sqlite_without_slashes(tmp):
    _upstream_tracked(tmp, "mlflow", MLFLOW_TRACKING_URI="sqlite:relative.db")


@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=postgresql://u:p@127.0.0.1:1/db (audit11 A11-08: 'mlflow failed in start "
    "(ModuleNotFoundError: No module named 'psycopg')', the run went on untracked, exit status 0)",
    ValueError,
    r"MLFLOW_TRACKING_URI 'postgresql://u:\*\*\*@127\.0\.0\.1:1/db' (is opened with SQLAlchemy's postgresql\+\w+ "
    r"driver, whose module is not installed here .*pip install |: no database server answers at 127\.0\.0\.1:1 )"
    r".*sqlite:///mlflow\.db.*leave mlflow out of train\.log_with",
)
def _mlflow_postgres_no_driver(tmp):
    _upstream_tracked(tmp, "mlflow", MLFLOW_TRACKING_URI="postgresql://u:p@127.0.0.1:1/db")


@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=databricks with no Databricks workspace configured (audit11 A11-08: refused as 'a file "
    "store (a folder)')",
    ValueError,
    r"MLFLOW_TRACKING_URI 'databricks' is MLflow's Databricks store.*DATABRICKS_HOST is unset and .*\.databrickscfg "
    r"has no \[DEFAULT\] profile with a host.*databricks configure.*DATABRICKS_HOST and DATABRICKS_TOKEN.*"
    r"leave mlflow out of train\.log_with",
)
def _mlflow_databricks_unconfigured(tmp):
    _upstream_tracked(tmp, "mlflow", MLFLOW_TRACKING_URI="databricks")
