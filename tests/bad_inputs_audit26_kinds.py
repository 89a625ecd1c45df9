"""Bad inputs found by the twenty-sixth reliability audit: a harness folder of one kind given where another is expected
(``audit26 <case id>``): an ensemble of downstream sweeps or a sweep given to report, shift, ensemble or export_run,
and a model source of another kind. One message names each (:func:`harness.folder_kinds.wrong_kind`): what the
folder is, the command that wrote it, where its results are, and the folders it was made from."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli


def _runs(tmp: Path) -> None:
    """Two upstream run folders as the kind rules see them (config.yaml beside model.pt), and what was made from
    them: a downstream sweep of each (``ds/a``, ``ds/b``), their ensemble (``dens``: ensemble.json listing sweeps), an
    ensemble of the runs (``ens``) and a few-shot study (``fs``)."""
    for name in ("a", "b"):
        run = tmp / "runs" / name
        run.mkdir(parents=True)
        (run / "config.yaml").write_text("seed: 0\n")
        (run / "model.pt").write_bytes(b"")
        sweep = tmp / "ds" / name
        sweep.mkdir(parents=True)
        (sweep / "sweep.json").write_text(json.dumps({"upstream": str(run / "model.pt")}))
        (sweep / "vtab.json").write_text(json.dumps({"upstream": str(run / "model.pt"), "tasks": {}}))
    (tmp / "dens").mkdir()
    members = [{"folder": f"ds/{n}", "upstream": str(tmp / "runs" / n / "model.pt")} for n in ("a", "b")]
    (tmp / "dens" / "ensemble.json").write_text(json.dumps({"members": members, "tasks": {}}))
    (tmp / "ens").mkdir()
    (tmp / "ens" / "ensemble.json").write_text(json.dumps({"members": ["runs/a", "runs/b"], "method": "het"}))
    (tmp / "fs").mkdir()
    (tmp / "fs" / "fewshot.json").write_text(json.dumps({"source": str(tmp / "runs" / "a" / "model.pt")}))


_DENS = (
    r"'dens' is an ensemble of downstream sweeps \(written by harness ensemble of sweep folders; its results are "
    r"ensemble\.md\), not a run folder .*: .*give the run folders it was made from: '.*runs/a', '.*runs/b'"
)
_SWEEP = (
    r"'ds/a' is a downstream sweep \(written by harness downstream; its results are vtab\.md and vtab\.html\), not a "
    r"run folder \(harness upstream or harness import\) or an ensemble of them \(harness ensemble\): give the run "
    r"folder it was made from: '.*runs/a'"
)


# ------------------------------------------------------------------------------ A26-10: an ensemble of sweeps
@bad_input(
    "report",
    "harness report of an ensemble of downstream sweeps (harness ensemble -m ds/a ds/b --out dens) (audit26 A26-10: "
    "TypeError: expected str, bytes or os.PathLike object, not dict)",
    click.ClickException,
    _DENS,
)
def _report_sweep_ensemble(tmp):
    _runs(tmp)
    _cli("report", "dens", "--out-root", "res")


@bad_input(
    "shift",
    "harness shift -m of an ensemble of downstream sweeps (audit26 A26-10: a TypeError traceback, or a message naming "
    "a member as a dict)",
    click.ClickException,
    _DENS,
)
def _shift_sweep_ensemble(tmp):
    _runs(tmp)
    _cli("shift", "-m", "dens", "--corruptions", "none")


@bad_input(
    "ensemble",
    "harness ensemble -m of an ensemble of downstream sweeps beside a run folder (audit26 A26-10: 'not a run folder "
    "(no config.yaml); pass the folder that harness upstream wrote')",
    click.ClickException,
    r"'dens' is an ensemble of downstream sweeps .*not a run folder \(harness upstream or harness import\) or a "
    r"downstream sweep \(harness downstream\): give the run folders it was made from: '.*runs/a', '.*runs/b'",
)
def _ensemble_of_sweep_ensemble(tmp):
    _runs(tmp)
    _cli("ensemble", "-m", "dens", "runs/a", "--out", "x")


@bad_input(
    "report",
    "harness.report.build.load_entry (the Python API) of an ensemble of downstream sweeps (audit26 A26-10: TypeError)",
    ValueError,
    _DENS,
)
def _load_entry_sweep_ensemble(tmp):
    from harness.report.build import load_entry

    _runs(tmp)
    load_entry("dens")


@bad_input(
    "fewshot",
    "Classifier.from_pretrained of an ensemble of downstream sweeps (audit26 A26-10: the message named its first "
    "member as \"{'folder': 'ds/a', ...}/model.pt\")",
    ValueError,
    r"'dens' is an ensemble of downstream sweeps .*not a model .*an ensemble is no single model: give one of the "
    r"models it was made from: '.*runs/a/model\.pt', '.*runs/b/model\.pt'",
)
def _from_pretrained_sweep_ensemble(tmp):
    from harness.models import Classifier

    _runs(tmp)
    Classifier.from_pretrained("dens")


# ------------------------------------------------------------------------------ A26-11: a sweep to report or shift
@bad_input(
    "report",
    "harness report of a downstream sweep folder (audit26 A26-11: 'run harness upstream / harness ensemble first')",
    click.ClickException,
    _SWEEP,
)
def _report_sweep(tmp):
    _runs(tmp)
    _cli("report", "ds/a", "--out-root", "res")


@bad_input(
    "shift",
    "harness shift -m of a downstream sweep folder (audit26 A26-11: 'pass folders written by harness upstream or "
    "harness ensemble')",
    click.ClickException,
    _SWEEP,
)
def _shift_sweep(tmp):
    _runs(tmp)
    _cli("shift", "-m", "ds/a", "--corruptions", "none")


@bad_input(
    "report",
    "harness report of a few-shot study's folder (audit26 A26-11's neighbour: 'run harness upstream / harness "
    "ensemble first')",
    click.ClickException,
    r"'fs' is a few-shot study \(written by harness fewshot; its results are fewshot\.md\), not a run folder .*give "
    r"the run folder it was made from: '.*runs/a'",
)
def _report_fewshot(tmp):
    _runs(tmp)
    _cli("report", "fs", "--out-root", "res")


# ------------------------------------------------------------------------------ A26-20: export_run of no run
@bad_input(
    "export",
    "harness.runs.export_run of an ensemble folder (audit26 A26-20: 'no checkpoint at ens/model.pt; pass the model.pt "
    "written by a harness run')",
    ValueError,
    r"'ens' is an ensemble of run folders \(written by harness ensemble; its results are ensemble\.json\), not a run "
    r"folder \(harness upstream or harness import wrote it\): an ensemble is no single model: give the run folders it "
    r"was made from: 'runs/a', 'runs/b', or run the command once per member",
)
def _export_ensemble(tmp):
    from harness.runs import export_run

    _runs(tmp)
    export_run("ens", "exp_ens")


@bad_input(
    "export",
    "harness.runs.export_run of a downstream sweep folder (audit26 A26-20: 'pass the model.pt written by a harness "
    "run')",
    ValueError,
    r"'ds/a' is a downstream sweep \(written by harness downstream; .*\), not a run folder \(harness upstream or "
    r"harness import wrote it\): give the run folder it was made from: '.*runs/a'",
)
def _export_sweep(tmp):
    from harness.runs import export_run

    _runs(tmp)
    export_run("ds/a", "exp_ds")


# ------------------------------------------------------------------------------ A26-09: --no-train, no grid run
@bad_input(
    "run",
    "harness run digits runs_root=empty --no-train, with no τ-grid run finished (audit26 A26-09: a bare '[Errno 2] No "
    "such file or directory: empty/digits/upstream/diag_t0.5_s0/metrics.json', an empty empty/digits/ left behind)",
    click.ClickException,
    r"harness run --no-train builds its report from finished runs only, and the grid a method's τ \(or tuned "
    r"setting\) is chosen from has unfinished runs \(diag: diag_t0\.5_s0, .*; looked for in empty/digits/upstream\): "
    r"run harness run digits without --no-train to train them, or give runs_root= the folder that holds this experiment's runs",
)
def _no_train_without_grid_runs(tmp):
    (tmp / "empty").mkdir()
    try:
        _cli("run", "digits", "runs_root=empty", "--no-train")
    finally:
        assert not (tmp / "empty" / "digits").exists()  # checked before any folder is made
