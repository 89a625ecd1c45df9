"""Shared by the whole suite: this folder on ``sys.path`` (pytest's default ``prepend`` import mode puts
a conftest's folder there), so tests in the package folders (``tests/uncertainty/``, ...) import the
bad-input catalogue (``bad_inputs*.py``) beside this file."""

import os
import tempfile
import time
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


class _FileProgress:
    """Per-file progress of a pytest-xdist run, on the controller: when a test file's last test has run, a line
    ``[files 12/160, 8.3 min] tests/x/test_y.py: 23 tests in 14 s``, so a person watching sees the suite move
    (the dots say nothing of which files are left). Registered by :func:`pytest_configure_node`'s controller
    hooks below; nothing changes in a run without xdist."""

    def __init__(self, config) -> None:
        self.config, self.totals, self.done, self.first, self.files_done = config, {}, {}, {}, 0
        self.started = time.monotonic()

    @pytest.hookimpl
    def pytest_xdist_node_collection_finished(self, node, ids):
        if not self.totals:  # every worker collects the same tests
            for nodeid in ids:
                path = nodeid.split("::")[0]
                self.totals[path] = self.totals.get(path, 0) + 1

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report):
        if report.when != "teardown":
            return
        path = report.nodeid.split("::")[0]
        self.first.setdefault(path, time.monotonic())
        self.done[path] = self.done.get(path, 0) + 1
        if self.totals and self.done[path] == self.totals.get(path):
            self.files_done += 1
            writer = self.config.pluginmanager.get_plugin("terminalreporter")
            if writer is not None:
                took = time.monotonic() - self.first[path]
                elapsed = (time.monotonic() - self.started) / 60
                writer.write_line(
                    f"[files {self.files_done}/{len(self.totals)}, {elapsed:.1f} min] {path}: "
                    f"{self.done[path]} tests in {took:.0f} s"
                )


def pytest_sessionstart(session):
    config = session.config
    if config.pluginmanager.hasplugin("dsession") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_FileProgress(config), "harness-file-progress")
