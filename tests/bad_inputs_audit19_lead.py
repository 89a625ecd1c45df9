"""Bad inputs found by the nineteenth reliability audit that the lead fixed (``audit19 <case id>``)."""

from __future__ import annotations

import click

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


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


# ------------------------------------------------------------------------------ A19-06: the run's own split, named
@handled(
    "shift",
    "predict_run(run, ShiftSettings(split='test')) after harness shift of the same run (split unset: its evaluation "
    "split, test) (audit19 A19-06: refused as 'another subset' in the words of a --split flag harness shift lacks)",
    r"^split='test' adds blobs to the sets of the unset split \(the run's test split\); another split is refused "
    r"naming split=val$",
)
def _shift_own_split(tmp):
    import json

    import pytest
    from bad_inputs_audit6_runs import _checkpoint_runs

    from harness.shift.predict import predict_run
    from harness.shift.settings import ShiftSettings

    run = tmp / "a"
    _checkpoint_runs(tmp)
    _cli("shift", "-m", str(run), "--corruptions", "none", "--ood", "gaussian", "--examples", "10")
    predict_run(run, ShiftSettings(corruptions=[], ood=["blobs"], examples=10, split="test"))
    sets = json.loads((run / "shift" / "shift.json").read_text())["sets"]
    assert sorted(sets) == ["clean", "ood-blobs", "ood-gaussian"], sets
    with pytest.raises(
        ValueError, match=r"this call asks for split=val: .*give --examples 10 --seed 0 split=test to add"
    ):
        predict_run(run, ShiftSettings(corruptions=[], ood=["blobs"], examples=10, split="val"))
    return "split='test' adds blobs to the sets of the unset split (the run's test split); another split is refused naming split=val"


# ------------------------------------------------------------------------------ A19-07: two imports of one name
@bad_input(
    "report",
    "harness report i1/m i2/m, two imports of other models into folders of one name (audit19 A19-07: refused with "
    "fixes that do not apply to imports: 'report them apart', 'give runs of other seeds')",
    click.ClickException,
    r"are both 'hom import m': an imported run is named by its folder's name, and the report names each entry once; "
    r"import one of them into a folder of another name \(harness import \.\.\. --out .*i2/m_2\)$",
)
def _two_imports_one_name(tmp):
    from bad_inputs_audit6_runs import _checkpoint_runs

    _checkpoint_runs(tmp)
    data = tmp / "e.yaml"
    data.write_text("data:\n  source: digits\n  eval_split: test\n  limit_eval: 20\n")
    for src, out in (("a", "i1"), ("b", "i2")):
        _cli("import", "--model", str(tmp / src / "model.pt"), "--data", str(data), "--out", str(tmp / out / "m"))
    _cli("report", str(tmp / "i1" / "m"), str(tmp / "i2" / "m"), "--out-root", str(tmp / "rep"), "--no-shift")


# ------------------------------------------------------------------------------ A19-01: an OOD set of the run's images
@bad_input(
    "shift",
    "harness shift --ood 'x:source=digits,split=all' for a digits run (audit19 A19-01: accepted, digits' own images, "
    "train, val and test, scored as out-of-distribution; split=train or val was refused)",
    click.ClickException,
    r"OOD set 'x' reads split all of data\.source=digits, which shares images with the run's own evaluation data "
    r"\(data\.eval_split=test\)",
)
def _shift_ood_all(tmp):
    from bad_inputs_audit6_runs import _checkpoint_runs

    _checkpoint_runs(tmp)
    _cli("shift", "-m", str(tmp / "a"), "--corruptions", "none", "--ood", "x:source=digits,split=all")
