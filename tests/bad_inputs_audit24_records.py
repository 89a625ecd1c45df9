"""Bad inputs found by the twenty-fourth reliability audit in what a sweep's and an ensemble's records hold
(``audit24 <case id>``): a sweep resumed after a task's list files changed, and an ensemble whose member was trained
again."""

from __future__ import annotations

import json
import os
import shutil

import click
from bad_inputs_audit23_lead import _custom_task

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli

_SWEEP = ("--preset", "demo", "--lrs", "0.01", "--steps", "5", "--seeds", "1", "--log-with", "none")


# ------------------------------------------------------------------------------ A24-03: a task's lists changed
@bad_input(
    "downstream",
    "harness downstream --tasks mytask=ptc:2 --out swc again after ptc/test.txt was cut, and from another working "
    "folder whose ptc holds other lists (audit24 A24-03: rc 0, no run trained, vtab.md rewritten with the earlier "
    "lists' numbers)",
    click.ClickException,
    r"^.*swc holds a sweep of other task data \(task mytask's folder is now .*other/ptc, the sweep's sweep\.json "
    r"records .*/ptc\): resuming it would report the runs of the data it read then as this data's; write this sweep "
    r"elsewhere \(--out; runs_root for harness run\), or delete that folder to start it over",
)
def _sweep_of_changed_lists(tmp):
    import pytest

    _custom_task(tmp / "ptc")

    def sweep(out, tasks="mytask=ptc:2"):
        _cli("downstream", "--upstream", "timm:resnet10t", "--random-init", "--tasks", tasks, *_SWEEP, "--out", out)

    sweep(str(tmp / "swc"))
    recorded = json.loads((tmp / "swc" / "sweep.json").read_text())["task_data"]["mytask"]
    assert recorded["folder"] == str((tmp / "ptc").resolve()) and len(recorded["lists"]) == 4, recorded
    sweep(str(tmp / "swc"), "demo_digit")  # another task into the folder: mytask's record is kept
    assert "mytask" in json.loads((tmp / "swc" / "sweep.json").read_text())["task_data"]
    lines = (tmp / "ptc" / "test.txt").read_text().splitlines()
    (tmp / "ptc" / "test.txt").write_text("\n".join(lines[:3]) + "\n")  # the test list re-cut
    with pytest.raises(click.ClickException, match=r"task mytask's .*ptc/test\.txt changed since the sweep ran"):
        sweep(str(tmp / "swc"))
    (tmp / "ptc" / "test.txt").write_text("\n".join(lines) + "\n")  # as it was: the sweep resumes
    sweep(str(tmp / "swc"))
    shutil.copytree(tmp / "ptc", tmp / "other" / "ptc")
    (tmp / "other" / "ptc" / "val200.txt").write_text("img/val200_0_0.png 1\nimg/val200_1_0.png 0\n")
    os.chdir(tmp / "other")  # the same spelling, ptc, names other/ptc from here
    try:
        sweep(str(tmp / "swc"))
    finally:
        os.chdir(tmp)


# ------------------------------------------------------------------------------ A24-05: an ensemble's member trained again
def _digits_run(tmp, folder, seed: int) -> None:
    """The small digits run ``folder`` (``digits_hom.yaml``, tiny settings) of ``seed``, trained anew."""
    from bad_inputs_audit9_config import CONFIGS

    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig
    from harness.upstream.train import run

    shutil.rmtree(folder, ignore_errors=True)
    tiny = ["train.epochs=1", "data.limit_train=64", "data.limit_eval=32", "train.log_with=[]"]
    overrides = [*tiny, "model.backbone=test_resnet", f"seed={seed}", f"output_dir={folder}"]
    run(load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", overrides), progress=False)


@bad_input(
    "uncertainty",
    "harness report ens/e1 after its member runs/b1 was trained again, and harness ensemble -m runs/base -m runs/b1 "
    "--out ens/e1 again (audit24 A24-05: rc 0 each, no word: the report showed the ensemble of b1's earlier model as "
    "one of the new run, and the rerun replaced the earlier ensemble without --overwrite)",
    click.ClickException,
    r"^--out ens/e1 holds the ensemble of member .*runs/b1's earlier weights \(its model\.pt's weights digest is now "
    r"\w{12}\.\.\., ensemble\.json records \w{12}\.\.\.\): the member was trained again or replaced since, so this is "
    r"another ensemble; give --overwrite to replace it",
)
def _ensemble_of_retrained_member(tmp):
    import pytest

    from harness.ensemble_folder import check_members_unchanged
    from harness.shift.store import load_sets

    for name, seed in (("base", 0), ("b1", 1)):
        _digits_run(tmp, tmp / "runs" / name, seed)
    ensemble = ("ensemble", "-m", "runs/base", "-m", "runs/b1", "--out", "ens/e1")
    _cli(*ensemble)
    recorded = json.loads((tmp / "ens" / "e1" / "ensemble.json").read_text())["member_weights"]
    assert len(recorded) == 2 and all(recorded.values()), recorded
    report = ("report", "ens/e1", "--no-shift", "--no-covariance", "--out-root", "results", "--name")
    _cli(*report, "re0")  # the members as they were built: reported
    _digits_run(tmp, tmp / "runs" / "b1", 5)
    with pytest.raises(
        click.ClickException,
        match=r"ens/e1 was built from member .*runs/b1's earlier weights .*"
        r"build the ensemble again \(harness ensemble -m .*base -m .*b1 --out ens/e1 --overwrite\)",
    ):
        _cli(*report, "re1")
    with pytest.raises(ValueError, match="build the ensemble again"):  # shift's ensemble sets read it too
        check_members_unchanged(tmp / "ens" / "e1")
    spec = json.loads((tmp / "ens" / "e1" / "ensemble.json").read_text())
    (tmp / "ens" / "e1" / "shift").mkdir()
    shift = {"members": spec["members"], "member_weights": recorded, "sets": {}}
    (tmp / "ens" / "e1" / "shift" / "shift.json").write_text(json.dumps(shift))
    del spec["member_weights"]  # an ensemble recorded before the digests: kept working
    (tmp / "ens" / "e1" / "ensemble.json").write_text(json.dumps(spec))
    _cli(*report, "re2")
    _cli(*ensemble, "--overwrite")  # b1's seed-5 model: rebuilt on request
    assert load_sets(tmp / "ens" / "e1") is None  # the earlier members' shift sets are no longer the ensemble's
    _cli(*report, "re3")
    _digits_run(tmp, tmp / "runs" / "b1", 6)
    _cli(*ensemble)
