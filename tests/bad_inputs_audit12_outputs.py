"""Bad inputs found by the twelfth reliability audit (``audit12 A12-19``): output folders given inside another run's
or an export's folder (one rule for every writer: :func:`harness.folder_paths.check_outside_outputs`), and two
harness fewshot commands on one ``--out``."""

from __future__ import annotations

from pathlib import Path

import click
from bad_inputs_audit6_runs import _import

from bad_inputs import bad_input
from bad_inputs_downstream import downstream
from bad_inputs_safety import _cli, _model_pt, upstream_cli
from bad_inputs_uncertainty import make_run

BESIDE = r"which would then hold harness {}'s files beside its own \(an output folder holds only the files of the "
RUN_JSON = r"the run folder .*runs/base \(it holds run\.json\), "


def _base(tmp: Path) -> Path:
    """``tmp/runs/base``: a finished run folder (``run.json``, a real tiny ``model.pt``)."""
    run = make_run(tmp / "runs" / "base")
    (run / "run.json").write_text("{}")
    _model_pt(run / "model.pt")
    return run


def _nothing_in(folder: Path, what: str) -> None:
    assert not folder.exists(), f"{what} was written inside another command's folder: {folder}"


def _fewshot(model: Path, out: Path) -> None:
    _cli(
        "fewshot",
        "--model",
        str(model),
        "--tasks",
        "demo_digit",
        "--shots",
        "1",
        "--log-with",
        "none",
        "--out",
        str(out),
    )


# ------------------------------------------------------------------------------ A12-19: inside a run or an export
@bad_input(
    "outputs",
    "harness import --model runs/base/model.pt --out runs/base/imp (audit12 A12-19: rc 0, a run folder written "
    "inside upstream run base)",
    click.ClickException,
    r"--out .*runs/base/imp is inside " + RUN_JSON + BESIDE.format("import") + r".*: give --out a folder outside it, "
    r"e\.g\. .*runs/imp",
)
def _import_into_run(tmp):
    run = _base(tmp)
    try:
        _import(tmp, "--out", str(run / "imp"))
    finally:
        _nothing_in(run / "imp", "an imported run")


@bad_input(
    "outputs",
    "harness import --out exp2/imp, exp2 a folder written by save_pretrained (audit12 A12-19: rc 0, a run folder "
    "written inside the export, which save_pretrained then refused)",
    click.ClickException,
    r"--out .*exp2/imp is inside the export folder .*exp2 \(it holds config\.json and model\.safetensors\), "
    + BESIDE.format("import")
    + r".*: give --out a folder outside it",
)
def _import_into_export(tmp):
    from harness.models import ModelConfig, build_model

    build_model(ModelConfig("test_resnet", 10, {"covariance": "none"})).save_pretrained(tmp / "exp2")
    try:
        _import(tmp, "--out", str(tmp / "exp2" / "imp"))
    finally:
        _nothing_in(tmp / "exp2" / "imp", "an imported run")


@bad_input(
    "outputs",
    "harness report runs/base --out-root runs/base --name rin (audit12 A12-19: rc 0, the report written inside its "
    "own input run)",
    click.ClickException,
    r"--out-root .*runs/base \(with --name rin: the report folder .*runs/base/rin\) is inside the input folder "
    r".*runs/base, " + BESIDE.format("report") + r".*: give --out-root a folder outside .*runs/base, e\.g\. results",
)
def _report_into_input_run(tmp):
    run = _base(tmp)
    try:
        _cli("report", str(run), "--out-root", str(run), "--name", "rin", "--no-covariance", "--no-shift")
    finally:
        _nothing_in(run / "rin", "a report")


@bad_input(
    "outputs",
    "harness fewshot --model runs/base/model.pt --out runs/base/fs (audit12 A12-19: rc 0, fewshot.json and "
    "fewshot.md written inside the run folder)",
    click.ClickException,
    r"--out .*runs/base/fs is inside " + RUN_JSON + BESIDE.format("fewshot") + r".*: give --out a folder outside it",
)
def _fewshot_into_run(tmp):
    run = _base(tmp)
    try:
        _fewshot(run / "model.pt", run / "fs")
    finally:
        _nothing_in(run / "fs", "a few-shot result")


@bad_input(
    "outputs",
    "harness downstream ... --out runs/base/ds (audit12 A12-19: rc 0, a sweep written inside the run folder)",
    click.ClickException,
    r"--out .*runs/base/ds is inside " + RUN_JSON + BESIDE.format("downstream") + r".*: give --out a folder outside",
)
def _downstream_into_run(tmp):
    run = _base(tmp)
    try:
        downstream(
            "--tasks", "demo_digit", "--preset", "demo", "--seeds", "1", "--log-with", "none", "--out", str(run / "ds")
        )
    finally:
        _nothing_in(run / "ds", "a downstream sweep")


@bad_input(
    "outputs",
    "harness upstream ... output_dir=runs/base/sub (audit12 A12-19: a whole run trained inside run folder runs/base)",
    click.ClickException,
    r"output_dir=.*runs/base/sub is inside " + RUN_JSON + BESIDE.format("upstream") + r".*: give output_dir a "
    r"folder outside it, e\.g\. .*runs/sub",
)
def _upstream_into_run(tmp):
    run = _base(tmp)
    try:
        upstream_cli(
            "train.epochs=1",
            "data.limit_train=64",
            "data.limit_eval=32",
            "train.log_with=[]",
            f"output_dir={run / 'sub'}",
        )
    finally:
        _nothing_in(run / "sub", "a run")


# ------------------------------------------------------------------------------ A12-19: two fewshots on one --out
@bad_input(
    "fewshot",
    "harness fewshot --out F while another harness fewshot writes F (audit12 A12-19: no lock, both wrote "
    "fewshot.json, the last one's kept without a word)",
    click.ClickException,
    r"fs is being written by another process \(.*\): another harness fewshot writes its results there; wait for it "
    r"to finish, or give another --out",
)
def _fewshot_twice_at_once(tmp):
    from harness.io import RunLock

    model = _model_pt(tmp / "model.pt")
    with RunLock(tmp / "fs", what="the other fewshot"):  # the other harness fewshot, still writing
        try:
            _fewshot(model, tmp / "fs")
        finally:
            _nothing_in(tmp / "fs" / "fewshot.json", "a result beside the other writer's")
