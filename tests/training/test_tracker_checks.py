"""The trackers' settings checked before any work (harness.training.tracker_checks): what must still be accepted
(a Databricks workspace configured, W&B offline by its settings file, a key in ~/.netrc) and what is refused; and the
one-line failure message of a tracker, never cut mid-word. No network: servers are closed local ports."""

import socket
import sys
import types

import pytest

from harness.network import no_listener
from harness.training.tracker_checks import check_tracking_uri, check_wandb
from harness.training.trackers import one_line

_OUTSIDE = ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL", "WANDB_MODE", "WANDB_DIR", "NETRC")
_DATABRICKS = ("DATABRICKS_HOST", "DATABRICKS_CONFIG_FILE", "DATABRICKS_CONFIG_PROFILE", "DATABRICKS_RUNTIME_VERSION")


def _closed_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A home of nothing (no ~/.netrc, no ~/.databrickscfg, no W&B settings) and the working folder in it."""
    for name in (*_OUTSIDE, *_DATABRICKS):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / ".config" / "wandb"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_one_line_never_cuts_a_word():
    text = "1 validation error for Settings\nmode\n  Input should be " + "'online', " * 40 + "or 'run'"
    line = one_line(text)
    assert "\n" not in line and len(line) <= 200 and line.endswith(" ...")
    assert line[: -len(" ...")].endswith("'online'")  # a whole word before the ellipsis
    assert one_line("short\n  message") == "short message"


def test_databricks_is_accepted_with_a_workspace_and_refused_without(home, monkeypatch):
    with pytest.raises(ValueError, match=r"'databricks-uc' is MLflow's Databricks store.*\[DEFAULT\] profile"):
        check_tracking_uri("databricks-uc", "train.log_with")
    with pytest.raises(ValueError, match=r"\[team\] profile with a host"):
        check_tracking_uri("databricks://team", "train.log_with")
    (home / ".databrickscfg").write_text("[team]\nhost = https://x.cloud.databricks.com\ntoken = dapi%1\n")
    check_tracking_uri("databricks://team")  # the profile named in the URI
    monkeypatch.setenv("DATABRICKS_CONFIG_PROFILE", "team")
    check_tracking_uri("databricks")
    monkeypatch.delenv("DATABRICKS_CONFIG_PROFILE")
    monkeypatch.setenv("DATABRICKS_HOST", "https://x.cloud.databricks.com")
    check_tracking_uri("databricks")


def test_database_urls(home, monkeypatch):
    pytest.importorskip("sqlalchemy")
    check_tracking_uri("sqlite:///mlflow.db")
    check_tracking_uri(f"sqlite:///{home / 'mlflow.db'}")
    with pytest.raises(ValueError, match=r"'sqlite:mlflow\.db' is no database URL .*sqlite:///relative/path\.db"):
        check_tracking_uri("sqlite:mlflow.db")
    with pytest.raises(ValueError, match=r"'postgresql\+nodriver://u@h/d' is no database URL.*NoSuchModuleError"):
        check_tracking_uri("postgresql+nodriver://u@h/d")
    # a driver that is installed (a stand-in for pg8000): the server at host:port is looked at, the password never
    # shown
    monkeypatch.setitem(sys.modules, "pg8000", types.ModuleType("pg8000"))
    port = _closed_url().rsplit(":", 1)[1]
    assert no_listener("127.0.0.1", int(port)).startswith("ConnectionRefusedError")
    with pytest.raises(ValueError, match=rf"'postgresql\+pg8000://user:\*\*\*@127\.0\.0\.1:{port}/db': no database "):
        check_tracking_uri(f"postgresql+pg8000://user:secret@127.0.0.1:{port}/db")


def test_wandb_offline_by_its_settings_file_needs_no_key(home):
    pytest.importorskip("wandb")
    (home / "wandb").mkdir()
    (home / "wandb" / "settings").write_text("[default]\nmode = offline\n")  # what `wandb offline` writes
    check_wandb("train.log_with")
    (home / "wandb" / "settings").write_text("[default]\nmode = online\n")
    with pytest.raises(ValueError, match=r"online here \(mode = online in .*settings\) and finds no API key"):
        check_wandb("train.log_with")


def test_wandb_key_in_netrc_then_the_server_is_looked_at(home, monkeypatch):
    pytest.importorskip("wandb")
    url = _closed_url()
    monkeypatch.setenv("WANDB_BASE_URL", url)
    (home / ".netrc").write_text(f"machine {url.split('//')[1]}\n  login user\n  password {'k' * 40}\n")
    (home / ".netrc").chmod(0o600)
    with pytest.raises(ValueError, match=r"its server '.*' \(WANDB_BASE_URL\) does not answer within 3 s"):
        check_wandb("train.log_with")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    check_wandb("train.log_with")
    monkeypatch.setenv("WANDB_MODE", "Offline")  # wandb's modes are lower case: it refuses this one too
    with pytest.raises(ValueError, match=r"WANDB_MODE='Offline' is not one of W&B's modes"):
        check_wandb("train.log_with")
