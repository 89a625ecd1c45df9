"""Bad inputs found by the ninth reliability audit in what the harness writes (``audit9 <case id>``): a run name that
leads out of ``runs/upstream/``, an export of another model replaced by ``save_pretrained``, and the report of other
runs (``harness report``) or of another experiment (``harness run``) replaced without ``--overwrite``. Every refusal
comes before any work and leaves the folder as it was."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import click

from bad_inputs import bad_input, handled
from bad_inputs_safety import _cli
from bad_inputs_uncertainty import make_run

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------------------------------ run names
@bad_input(
    "names",
    "harness upstream name=../../../escape without output_dir (audit9 U20: the run written outside runs/upstream/, "
    "to wherever the name leads)",
    click.ClickException,
    r"run name \(key name\) '\.\./\.\./\.\./escape' must be a plain name .*: it becomes a folder name; rename it",
)
def _upstream_name_escapes(tmp):
    cwd = tmp / "a" / "b" / "c"
    cwd.mkdir(parents=True)
    config = str(ROOT / "upstream" / "configs" / "digits_hom.yaml")
    try:
        with contextlib.chdir(cwd):
            _cli(
                "upstream", "--no-progress", "--config", config, "train.epochs=1", "data.limit_train=16",
                "data.limit_eval=16", "name=../../../escape",
            )  # fmt: skip
    finally:
        assert not (tmp / "escape").exists() and not (cwd / "runs").exists(), "a run folder was made"


# ------------------------------------------------------------------------------------------------ exports
def _two_models():
    import torch

    from harness.models import build_model

    torch.manual_seed(0)
    hom = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    het = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="diagonal")))
    return hom.eval(), het.eval()


@bad_input(
    "export",
    "Classifier.save_pretrained(DIR) where DIR holds the export of another model (audit9 E06: its weights replaced, "
    "no overwrite consent)",
    ValueError,
    r"B holds an export of another model \(a diagonal head, metrics .*\): its model\.safetensors is not the export of "
    r"the model being saved, and exporting there would replace it; give another folder, or pass overwrite=True",
)
def _save_pretrained_over_another_export(tmp):
    hom, het = _two_models()
    het.save_pretrained(tmp / "B")
    before = (tmp / "B" / "model.safetensors").read_bytes()
    try:
        hom.save_pretrained(tmp / "B")
    finally:
        assert (tmp / "B" / "model.safetensors").read_bytes() == before, "the other model's export was replaced"


@handled(
    "export",
    "Classifier.save_pretrained of the same model again, and over another export with overwrite=True (audit9 E06: "
    "the rerun and the consented replacement still allowed)",
    r"rerun and overwrite=True written",
)
def _save_pretrained_rerun_and_overwrite(tmp):
    from harness.models import Classifier

    hom, het = _two_models()
    het.save_pretrained(tmp / "B")
    het.save_pretrained(tmp / "B")
    hom.save_pretrained(tmp / "B", overwrite=True)
    assert Classifier.from_pretrained(tmp / "B").head.covariance_type == "none"
    return "rerun and overwrite=True written"


# ------------------------------------------------------------------------------------------------ reports
def _report(tmp: Path, *runs: str, extra: "tuple[str, ...]" = ()) -> None:
    _cli(
        "report", *(str(tmp / r) for r in runs), "--out-root", str(tmp / "res"), "--name", "R",
        "--no-covariance", "--no-shift", *extra,
    )  # fmt: skip


def _three_runs(tmp: Path) -> None:
    for seed, name in enumerate("abc"):
        make_run(tmp / name, seed=seed)


@bad_input(
    "report",
    "harness report c --name R over the report R of runs a and b (audit9 RP5: the report of other runs replaced, and "
    "its figures left beside the new one)",
    click.ClickException,
    r"res/R holds the report of .*/a, .*/b, not of .*/c: writing this report there would replace it; choose another "
    r"--name or --out-root, or give --overwrite to replace it",
)
def _report_over_other_runs(tmp):
    _three_runs(tmp)
    _report(tmp, "a", "b")
    before = {p.name: p.read_bytes() for p in (tmp / "res" / "R").iterdir()}
    try:
        _report(tmp, "c")
    finally:
        assert {p.name: p.read_bytes() for p in (tmp / "res" / "R").iterdir()} == before, "the report was changed"


@handled(
    "report",
    "harness report again on the same runs, then --overwrite with other runs (audit9 RP5: the rerun allowed; the "
    "consented replacement removes the old report's stale figures, never a file it did not write)",
    r"rerun allowed; --overwrite removed reliability_1\.png, kept notes\.txt",
)
def _report_rerun_and_overwrite(tmp):
    _three_runs(tmp)
    _report(tmp, "a", "b")
    _report(tmp, "b", "a")
    out = tmp / "res" / "R"
    assert (out / "reliability_1.png").is_file()
    (out / "notes.txt").write_text("mine")
    _report(tmp, "c", extra=("--overwrite",))
    assert not (out / "reliability_1.png").exists() and (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "report.json").read_text())["inputs"] == [str((tmp / "c").resolve())]
    return "rerun allowed; --overwrite removed reliability_1.png, kept notes.txt"


@bad_input(
    "experiment",
    "harness run with another runs_root and the same results_root and name (audit9 X09: the report of the other "
    "experiment replaced at the report stage, without a word)",
    ValueError,
    r"res/tiny holds the report of .*/X1/tiny/upstream/a \(outside .*/X2/tiny\), not of .*/X2/tiny: writing this "
    r"report there would replace it; give the experiment another results_root=PATH",
)
def _experiment_report_of_another_runs_root(tmp):
    from harness.experiment.report_stage import report_stage
    from harness.report.build import build

    run = make_run(tmp / "X1" / "tiny" / "upstream" / "a")
    build([run], "tiny", tmp / "res", covariance=False, shift=False, inputs_under=tmp / "X1" / "tiny")
    before = (tmp / "res" / "tiny" / "report.json").read_bytes()
    exp = SimpleNamespace(name="tiny", results_root=str(tmp / "res"))
    try:  # the report stage of the experiment with runs_root X2: refused before its sections are computed
        report_stage(exp, {}, tmp / "X2" / "tiny", None, None, None, [], {}, print, True)
    finally:
        assert (tmp / "res" / "tiny" / "report.json").read_bytes() == before, "the other experiment's report changed"
