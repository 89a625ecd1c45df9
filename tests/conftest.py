"""Shared by the whole suite: this folder on ``sys.path`` (pytest's default ``prepend`` import mode puts
a conftest's folder there), so tests in the package folders (``tests/uncertainty/``, ...) import the
bad-input catalogue (``bad_inputs*.py``) beside this file."""

import os

import pytest

# No test downloads: weights by name come from the local cache only (timm and huggingface_hub read this at call
# time; the harness no longer forces it, so a user with a network gets timm's downloads). A test that needs the
# online path sets it itself.
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """(the mlflow module, the URI of a local MLflow file store in ``tmp_path/mlruns``) set as the tracking URI:
    no server, no network. Skips where the ``track`` extra is not installed."""
    mlflow = pytest.importorskip("mlflow")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks for the opt-in to its file store
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return mlflow, uri
