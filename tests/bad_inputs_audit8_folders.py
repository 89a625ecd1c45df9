"""Bad inputs found by the eighth reliability audit in run, export and ensemble folders: an ensemble or an export
written over another one, unknown keyword arguments of ``export_run``, a re-saved copy of a run counted twice, and
damaged ``metrics.json`` files (``audit8 <case id>``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import click
import numpy as np
from bad_inputs_audit6_runs import _checkpoint_runs

from bad_inputs import bad_input
from bad_inputs_safety import _cli
from bad_inputs_uncertainty import make_run


def _report(tmp: Path, *folders: Path) -> None:
    """``harness report FOLDERS``; refused: no report folder left."""
    try:
        _cli("report", *map(str, folders), "--out-root", str(tmp / "results"), "--name", "r")
    finally:
        assert not (tmp / "results").exists(), "a report was written"


# ------------------------------------------------------------------------------ another ensemble or export replaced
@bad_input(
    "ensembles",
    "harness ensemble --out DIR where DIR holds the ensemble of other members (audit8 N03: replaced, rc 0, and the "
    "old members' shift/ left behind)",
    click.ClickException,
    r"--out .*ens holds another ensemble \(members .*/a, .*/b \(now .*/a, .*/c\)\): building this one there would "
    r"replace it and leave its shift sets \(shift/\) beside the new one, even with --overwrite; choose another --out, "
    r"or remove .*ens yourself",
)
def _ensemble_of_other_members(tmp):
    a, b, c = (make_run(tmp / n, s) for n, s in (("a", 0), ("b", 1), ("c", 2)))
    _cli("ensemble", "-m", str(a), "-m", str(b), "--out", str(tmp / "ens"))
    before = (tmp / "ens" / "ensemble.json").read_bytes()
    try:
        _cli("ensemble", "-m", str(a), "-m", str(c), "--out", str(tmp / "ens"), "--overwrite")
    finally:
        assert (tmp / "ens" / "ensemble.json").read_bytes() == before, "the earlier ensemble was replaced"


@bad_input(
    "export",
    "export_run(other_run, DIR) where DIR holds the export of another run (audit8 E28: the export replaced, no "
    "overwrite consent)",
    ValueError,
    r"ex holds an export of another model \(a none head, metrics .*\): its model\.safetensors is not the export of "
    r"the model being saved, and exporting there would replace it; give another folder, or pass overwrite=True",
)
def _export_over_another_run(tmp):
    from harness.runs import export_run

    _checkpoint_runs(tmp)
    export_run(tmp / "a", tmp / "ex")
    before = (tmp / "ex" / "model.safetensors").read_bytes()
    try:
        export_run(tmp / "b", tmp / "ex")
    finally:
        assert (tmp / "ex" / "model.safetensors").read_bytes() == before, "the earlier export was replaced"


@bad_input(
    "export",
    "export_run(run, DIR, bogus=1) (audit8 E30: the unknown keyword argument dropped, so push_to_hb=True is ignored)",
    ValueError,
    r"export_run got unknown keyword argument\(s\) bogus: it takes .*model_card_kwargs.*push_to_hub.*repo_id.*check "
    r"the spelling",
)
def _export_unknown_kwarg(tmp):
    from harness.runs import export_run

    _checkpoint_runs(tmp)
    try:
        export_run(tmp / "a", tmp / "ex", bogus=1)
    finally:
        assert not (tmp / "ex").exists(), "an export was written"


# ------------------------------------------------------------------------------ the same model counted twice
def _resave(run: Path) -> None:
    """Every predictions file of ``run`` written again with other bytes (compressed): the same arrays."""
    for p in run.glob("*predictions.npz"):
        with np.load(p) as z:
            arrays = dict(z)
        np.savez_compressed(p, **arrays)


@bad_input(
    "report",
    "harness report RUN COPY, COPY a copy of RUN whose predictions.npz was re-saved (audit8 R04: same arrays, new "
    "bytes, counted as a second model)",
    click.ClickException,
    r"folders '.*/a' and '.*/cp1' have identical predictions: the same model twice \(a copied folder, or two methods "
    r"or seeds with the same settings\); a report lists each run or ensemble once: keep one of them",
)
def _report_resaved_copy(tmp):
    make_run(tmp / "a", heldout=True)
    shutil.copytree(tmp / "a", tmp / "cp1")
    _resave(tmp / "cp1")
    assert (tmp / "a" / "predictions.npz").read_bytes() != (tmp / "cp1" / "predictions.npz").read_bytes()
    _report(tmp, tmp / "a", tmp / "cp1")


@bad_input(
    "report",
    "harness report of two methods with the same settings (audit8 R06: 'the same predictions.npz bytes: a copied "
    "folder', though nothing was copied)",
    click.ClickException,
    r"folders '.*/hom_s0' and '.*/hom2_s0' have identical predictions: the same model twice \(a copied folder, or two "
    r"methods or seeds with the same settings\)",
)
def _report_two_identical_methods(tmp):
    make_run(tmp / "hom_s0", 0)
    make_run(tmp / "hom2_s0", 0)  # trained alike: the same predictions
    _report(tmp, tmp / "hom_s0", tmp / "hom2_s0")


# ------------------------------------------------------------------------------ damaged metrics.json
@bad_input(
    "report",
    "harness report of a run whose metrics.json is truncated (audit8 Q01: 'Expecting ',' delimiter', no file named)",
    click.ClickException,
    r"/b/metrics\.json is not valid JSON \(Expecting ',' delimiter: line 1 column \d+ \(char \d+\)\): the file is "
    r"damaged; rerun the run, or restore the file",
)
def _report_truncated_metrics(tmp):
    make_run(tmp / "a", 0), make_run(tmp / "b", 1)
    (tmp / "b" / "metrics.json").write_text('{"top1": NaN')
    _report(tmp, tmp / "a", tmp / "b")


@bad_input(
    "report",
    "harness report of a run whose metrics.json holds [] (audit8 Q02: AttributeError 'list' object has no "
    "attribute 'get')",
    click.ClickException,
    r"/b/metrics\.json holds an array where a JSON object \{\.\.\.\} belongs: the file is damaged; rerun the run, or "
    r"restore the file",
)
def _report_list_metrics(tmp):
    make_run(tmp / "a", 0), make_run(tmp / "b", 1)
    (tmp / "b" / "metrics.json").write_text("[]")
    _report(tmp, tmp / "a", tmp / "b")
