"""Bad inputs found by the nineteenth reliability audit that the lead fixed (``audit19 <case id>``)."""

from __future__ import annotations

from bad_inputs import bad_input


def _experiment_folders(tmp):
    """``tmp/xruns`` as a harness run leaves it (its lock) with the experiment folder ``cx`` (its clock)."""
    from harness.folder_paths import EXPERIMENT_LOCK

    (tmp / "xruns" / "cx").mkdir(parents=True)
    (tmp / "xruns" / EXPERIMENT_LOCK).write_text("")
    (tmp / "xruns" / "cx" / "sessions.json").write_text("[]")
    return tmp / "xruns" / "cx"


# ------------------------------------------------------------------------------ A19-05: a tracker in an experiment
@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=sqlite:///<runs_root>/<name>/m.db, and MLflow's default store from inside <runs_root>/<name> "
    "(audit19 A19-05: rc 0, the experiment's folder filled with mlflow.db and mlruns/)",
    ValueError,
    r"^MLFLOW_TRACKING_URI 'sqlite:///.*' is inside the harness experiment folder .*xruns/cx \(it holds "
    r"sessions\.json\), which MLflow would fill with its own files",
)
def _mlflow_in_experiment(tmp):
    import os
    from unittest import mock

    import pytest

    pytest.importorskip("mlflow")
    from harness.training.tracker_checks import check_tracking_uri

    folder = _experiment_folders(tmp)
    here = os.getcwd()
    with mock.patch.dict(os.environ):
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.chdir(folder)
        try:
            with pytest.raises(ValueError, match=r"^MLflow's default store .* is inside the harness experiment"):
                check_tracking_uri()
        finally:
            os.chdir(here)
    check_tracking_uri(f"sqlite:///{folder / 'm.db'}")
