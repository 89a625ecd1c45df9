"""Shared by the whole suite: this folder on ``sys.path`` (pytest's default ``prepend`` import mode puts
a conftest's folder there), so tests in the package folders (``tests/uncertainty/``, ...) import the
bad-input catalogue (``bad_inputs*.py``) beside this file."""

import os
import tempfile
from pathlib import Path

import pytest
from filelock import FileLock

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


#: Under pytest-xdist (the README's ``python -m pytest -q -n 2 --dist loadfile``) each test file runs on one
#: worker, so its module fixtures are built once. Two tests in two workers may both start accelerate's
#: ``debug_launcher``, which always meets at port 29500: the :func:`debug_launcher_port` lock serialises them.
PORT_LOCK = Path(tempfile.gettempdir()) / "het-harness-tests-port-29500.lock"


def pytest_configure(config):
    """In an xdist worker, one torch thread (and one for the processes it starts): two workers with two threads
    each on two cores spin-wait on each other."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        import torch

        torch.set_num_threads(1)


@pytest.fixture
def debug_launcher_port():
    """Held while a test runs ``accelerate.debug_launcher`` (port 29500, fixed by accelerate): one such test at
    a time on this machine, whichever pytest worker or session runs it."""
    with FileLock(PORT_LOCK):
        yield
