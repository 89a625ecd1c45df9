"""The ensemble across upstream models of their transfers (harness.downstream.ensembles; harness ensemble on sweep folders)."""

import json
import shutil

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from harness.cli import main
from harness.downstream.config import SweepSettings
from harness.downstream.ensembles import upstream_ensemble
from harness.downstream.sweep import sweep
from harness.models import build_model, save_model
from harness.uncertainty import metrics as M
from harness.uncertainty.predictions import Predictions

ONE = SweepSettings(lrs=[0.05], steps=[3], seeds=2, batch_size=32, micro_batch=32, resolution=[32, 32])


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """Two upstream models (different initialisations) each transferred to a demo task by the same recipe."""
    root = tmp_path_factory.mktemp("ens")
    out = []
    for seed in range(2):
        torch.manual_seed(seed)
        model = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
        up = save_model(model, root / f"up{seed}" / "model.pt")
        out.append(root / f"sweep{seed}")
        sweep(str(up), ["demo_digit"], out[-1], ONE, progress=lambda s: None)
    return out


def test_the_ensemble_averages_one_fine_tune_per_upstream_model_for_each_fine_tuning_seed(sweeps):
    result = upstream_ensemble(sweeps)
    assert [m["folder"] for m in result["members"]] == [str(s) for s in sweeps]
    task = result["tasks"]["demo_digit"]
    assert task["seeds"] == 2 and set(task["ensemble"]["mean"]) == {"top1", "nll", "ece", "brier"}
    for s in range(2):  # recomputed from the members' saved test predictions
        members = [Predictions.load(d / "predictions" / f"demo_digit_seed{s}.npz") for d in sweeps]
        probs = np.mean([np.exp(M.log_softmax(p.logits)) for p in members], axis=0)
        nll = -np.log(probs[np.arange(len(probs)), members[0].targets]).mean()
        assert task["ensemble"]["per_seed"][s]["nll"] == pytest.approx(nll)
        assert task["ensemble"]["per_seed"][s]["top1"] == pytest.approx(np.mean(probs.argmax(1) == members[0].targets))
    assert task["ensemble"]["mean"]["nll"] == pytest.approx(np.mean([r["nll"] for r in task["ensemble"]["per_seed"]]))
    # the members' mean is the mean of the three sweeps' own per-seed metrics
    own = [
        json.loads((d / "vtab.json").read_text())["uncertainty"]["tasks"]["demo_digit"]["mean"]["nll"] for d in sweeps
    ]
    assert task["members"]["nll"] == pytest.approx(np.mean(own))
    assert result["groups"]["demo"]["tasks"] == 1


def test_harness_ensemble_on_sweep_folders_writes_the_table(sweeps, tmp_path):
    res = CliRunner().invoke(main, ["ensemble", "--members", *map(str, sweeps), "--out", str(tmp_path / "e")])
    assert res.exit_code == 0, res.output
    written = json.loads((tmp_path / "e" / "ensemble.json").read_text())
    assert set(written["tasks"]) == {"demo_digit"} and "provenance" in written
    assert "| demo_digit | demo | 2 |" in (tmp_path / "e" / "ensemble.md").read_text()


def test_bad_ensembles_across_sweeps_are_refused(sweeps, tmp_path):
    with pytest.raises(ValueError, match="2 or more"):
        upstream_ensemble(sweeps[:1])
    with pytest.raises(ValueError, match="given twice"):
        upstream_ensemble([sweeps[0], sweeps[0]])
    with pytest.raises(ValueError, match="not a finished downstream sweep"):
        upstream_ensemble([sweeps[0], tmp_path])
    other = tmp_path / "other"  # the same sweep with another recipe recorded
    shutil.copytree(sweeps[1], other)
    vtab = json.loads((other / "vtab.json").read_text())
    vtab["recipe"]["lrs"] = [0.1]
    (other / "vtab.json").write_text(json.dumps(vtab))
    with pytest.raises(ValueError, match="differ in recipe or tasks"):
        upstream_ensemble([sweeps[0], other])
    # a sweep folder mixed with a run folder, through the CLI
    up = save_model(build_model(dict(backbone="test_resnet", num_classes=10)), tmp_path / "up" / "model.pt")
    res = CliRunner().invoke(
        main, ["ensemble", "--members", str(sweeps[0]), str(up.parent), "--out", str(tmp_path / "x")]
    )
    assert res.exit_code != 0 and "only sweeps, or only run folders" in res.output
