"""Bad inputs found by the eighteenth reliability audit that the lead fixed (``audit18 <case id>``)."""

from __future__ import annotations

import click

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli, make_run


# ------------------------------------------------------------------------------ A18-01: replicates, reading keys
@handled(
    "report",
    "harness report of hom seeds 0 and 1, the second evaluated with data.eval_batch_size=16 and logged every 7 steps "
    "(audit18 A18-01: refused as runs that 'train differently', though neither setting changes what a run trains)",
    r"^reported together as seeds of hom: 2 entries$",
)
def _replicates_read_differently(tmp):
    import json

    a, b = make_run(tmp / "a", seed=0), make_run(tmp / "b", seed=1)
    for run, size, every in ((a, 256, 20), (b, 16, 7)):
        extra = f"data:\n  eval_batch_size: {size}\n  num_workers: 0\ntrain:\n  log_every: {every}\n  epochs: 3\n"
        (run / "config.yaml").write_text((run / "config.yaml").read_text() + extra)
    _cli("report", str(a), str(b), "--out-root", str(tmp / "rep"), "--name", "r", "--no-covariance")
    entries = json.loads((tmp / "rep" / "r" / "report.json").read_text())["entries"]
    assert [e["label"] for e in entries] == ["hom seed 0", "hom seed 1"]
    return f"reported together as seeds of hom: {len(entries)} entries"


# ------------------------------------------------------------------------------ A18-02: TOST's level
@bad_input(
    "uncertainty",
    "harness.uncertainty.power.tost_power(1.0, 10, 0.5, alpha=0.5) and alpha=0.6; single_pair.alpha=0.5 in an "
    "experiment (audit18 A18-02: a bare ZeroDivisionError, and a negative power, for an empty 1 - 2·alpha interval)",
    ValueError,
    r"^alpha=0\.5: TOST at level alpha each is the 1 - 2·alpha interval, empty for alpha >= 0\.5; give alpha < 0\.5",
)
def _tost_level(tmp):
    import pytest

    from harness.experiment import load_experiment
    from harness.rules import check_rules
    from harness.uncertainty.power import tost_power

    with pytest.raises(ValueError, match=r"single_pair\.alpha must be in \(0, 0\.5\)"):
        check_rules(load_experiment("cifar10n", ("single_pair.alpha=0.5",)))
    with pytest.raises(ValueError, match=r"^alpha=0\.6: TOST"):
        tost_power(1.0, 10, 0.5, alpha=0.6)
    tost_power(1.0, 10, 0.5, alpha=0.5)


# ------------------------------------------------------------------------------ A18-14: frontier.methods=[]
@bad_input(
    "experiment",
    "frontier.methods=[] with frontier.schedules (audit18 A18-14: read as the default method, so the frontier trained "
    "hom, which the user did not list, at every schedule)",
    ValueError,
    r"^frontier\.methods=\[\] names no method: to switch the frontier off, give frontier\.schedules=\{\}; for the "
    r"default method \(frontier\.method\), leave frontier\.methods unset",
)
def _frontier_methods_empty(tmp):
    from bad_inputs_audit8_experiment import _run

    _run(tmp, "frontier={schedules: {a: [optim.lr=0.1]}, methods: []}")


# ------------------------------------------------------------------------------ A18-10: --top-pairs read by nothing
@bad_input(
    "report",
    "harness report of two hom runs with --top-pairs 3 (audit18 A18-10: accepted, no covariance section and no word; "
    "the same option is refused beside --no-covariance)",
    click.ClickException,
    r"^--top-pairs 3 sets the pairs of the covariance analysis of a het model .*and no entry has one \(hom seed 0: "
    r"covariance none, hom seed 1: covariance none\), so it would be ignored: drop --top-pairs",
)
def _top_pairs_without_het(tmp):
    a, b = make_run(tmp / "a", seed=0), make_run(tmp / "b", seed=1)
    _cli("report", str(a), str(b), "--out-root", str(tmp / "rep"), "--name", "r", "--no-shift", "--top-pairs", "3")


# ------------------------------------------------------------------------------ A18-07: the other split's limit
@bad_input(
    "packs",
    "harness data pack digits OUT --split test limit_train=50 (audit18 A18-07: accepted, the whole test split packed; "
    "likewise --split train limit_eval=50)",
    click.ClickException,
    r"^limit_train=50 limits the training split, and --split test is read with limit_eval, so the whole split would "
    r"be packed: give limit_eval=50 instead",
)
def _pack_other_limit(tmp):
    import pytest

    with pytest.raises(click.ClickException, match=r"^limit_eval=50 limits the evaluation split, and --split train"):
        _cli("data", "pack", "digits", str(tmp / "pk2"), "--shard-size", "100", "--split", "train", "limit_eval=50")
    try:
        _cli("data", "pack", "digits", str(tmp / "pk"), "--shard-size", "100", "--split", "test", "limit_train=50")
    finally:
        assert not (tmp / "pk").exists() and not (tmp / "pk2").exists()  # refused before any folder is made


# ------------------------------------------------------------------------------ A18-03: an experiment's own folders
@bad_input(
    "outputs",
    "harness ensemble --out <runs_root>/<name> --overwrite, and harness upstream output_dir=<runs_root> --overwrite "
    "(audit18 A18-03: both rc 0, the experiment's folders took another command's files and the experiment was "
    "then refused)",
    click.ClickException,
    r"^--out .*xruns/cx is the experiment folder of another harness command \(it holds sessions\.json\): harness "
    r"ensemble writes a folder of its own, even with --overwrite",
)
def _experiment_folders_taken(tmp):
    import pytest
    from bad_inputs_audit9_config import CONFIGS

    from harness.folder_paths import EXPERIMENT_LOCK

    (tmp / "xruns" / "cx").mkdir(parents=True)
    (tmp / "xruns" / EXPERIMENT_LOCK).write_text("")  # what harness run leaves in runs_root
    (tmp / "xruns" / "cx" / "sessions.json").write_text("[]")  # and in <runs_root>/<name>
    config = str(CONFIGS / "digits_hom.yaml")
    with pytest.raises(click.ClickException, match=r"xruns is the experiment runs_root folder of another harness"):
        _cli("upstream", "--config", config, "train.epochs=1", f"output_dir={tmp / 'xruns'}", "--overwrite")
    assert sorted(p.name for p in (tmp / "xruns").iterdir()) == [EXPERIMENT_LOCK, "cx"]  # nothing written
    a, b = make_run(tmp / "a", seed=0), make_run(tmp / "b", seed=1)
    _cli("ensemble", "-m", str(a), "-m", str(b), "--out", str(tmp / "xruns" / "cx"), "--overwrite")


# ------------------------------------------------------------------------------ A18-04: shift sets of another subset
@bad_input(
    "shift",
    "harness shift -m RUN --corruptions none --ood blobs after a harness shift of --examples 30 --seed 2 (audit18 "
    "A18-04: rc 0, 'starting over', the first call's gaussian_noise-1 and ood-gaussian deleted without --overwrite)",
    click.ClickException,
    r"shift holds gaussian_noise-1, ood-gaussian, predicted on the subset of --examples 30 --seed 2, and this call "
    r"asks for --examples 0 --seed 0: its sets would replace them all; give --examples 30 --seed 2 to add sets to "
    r"them, or --overwrite to replace them",
)
def _shift_other_subset(tmp):
    import json

    run = make_run(tmp / "a")
    (run / "model.pt").write_bytes(b"refused before it is read")
    spec = {
        "settings": {"examples": 30, "seed": 2, "split": None},
        "sets": {"gaussian_noise-1": "k", "ood-gaussian": "k"},
    }
    for name in spec["sets"]:
        (run / "shift" / name).mkdir(parents=True)
        (run / "shift" / name / "predictions.npz").write_bytes(b"kept")
    (run / "shift" / "shift.json").write_text(json.dumps(spec))
    try:
        _cli("shift", "-m", str(run), "--corruptions", "none", "--ood", "blobs")
    finally:
        assert all((run / "shift" / n / "predictions.npz").read_bytes() == b"kept" for n in spec["sets"])


# ------------------------------------------------------------------------------ A18-11: MLflow's default store
@bad_input(
    "trackers",
    "--log-with mlflow with MLFLOW_TRACKING_URI unset, from inside a run folder (audit18 A18-11: rc 0, the run folder "
    "filled with MLflow's default mlflow.db and mlruns/)",
    ValueError,
    r"^MLflow's default store \(MLFLOW_TRACKING_URI unset\) 'sqlite:///.*' is inside the harness run "
    r"folder .*a \(it holds .*\), which MLflow would fill with its own files: give the store a folder of its own",
)
def _mlflow_default_store_in_run(tmp):
    import os
    from unittest import mock

    import pytest

    pytest.importorskip("mlflow")
    from harness.training.trackers import available

    run = make_run(tmp / "a")
    before = sorted(p.name for p in run.iterdir())
    here = os.getcwd()
    with mock.patch.dict(os.environ):
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        os.chdir(run)
        try:
            available(["mlflow"], key="--log-with")
        finally:
            os.chdir(here)
            assert sorted(p.name for p in run.iterdir()) == before  # nothing of MLflow's written


@bad_input(
    "outputs",
    "harness report --out-root <runs_root> --name <name> --overwrite, and harness data pack digits <runs_root> "
    "--overwrite (a variation of audit18 A18-03: the report written beside sessions.json, the pack's split folder "
    "beside the experiment's lock)",
    click.ClickException,
    r"^--out-root \(with --name\) .*xruns/cx is the experiment folder of another harness command \(it holds "
    r"sessions\.json\): harness report writes a folder of its own, even with --overwrite",
)
def _experiment_folders_report_pack(tmp):
    import pytest

    from harness.folder_paths import EXPERIMENT_LOCK

    (tmp / "xruns" / "cx").mkdir(parents=True)
    (tmp / "xruns" / EXPERIMENT_LOCK).write_text("")
    (tmp / "xruns" / "cx" / "sessions.json").write_text("[]")
    with pytest.raises(click.ClickException, match=r"^OUT .*xruns is the experiment runs_root folder of another"):
        _cli("data", "pack", "digits", str(tmp / "xruns"), "--shard-size", "100", "--overwrite")
    a, b = make_run(tmp / "a", seed=0), make_run(tmp / "b", seed=1)
    try:
        _cli("report", str(a), str(b), "--out-root", str(tmp / "xruns"), "--name", "cx", "--overwrite")
    finally:
        assert sorted(p.name for p in (tmp / "xruns").iterdir()) == [EXPERIMENT_LOCK, "cx"]
        assert [p.name for p in (tmp / "xruns" / "cx").iterdir()] == ["sessions.json"]
