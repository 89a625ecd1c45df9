"""The transfer study (harness.experiment.transfer and transfer_report, `harness run cifar10n_transfer`): the score
interval's weighting, the study's checks, and the whole path on a tiny setting (two committed CIFAR-10N models a method, small tasks built
from the shared data, a few fine-tuning steps)."""

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.experiment import load_experiment
from harness.experiment.config import TransferSection
from harness.experiment.transfer import validate_transfer
from harness.experiment.transfer_report import score_interval
from harness.uncertainty.method import anova_interval

REPO = Path(__file__).resolve().parents[2]
DATA = REPO.parent / "shared" / "data" / "cifar10n"


def test_score_interval_weights_every_task_equally_whatever_its_size():
    """Two tasks of 10 and 1,000 images: the score difference is the mean of the two tasks' accuracy differences,
    not the pooled mean over images, and the interval is the ANOVA interval of the weighted per-image table."""
    rng = np.random.default_rng(0)
    a = [{"small": rng.integers(0, 2, 10).astype(float), "big": rng.integers(0, 2, 1000).astype(float)} for _ in "ab"]
    b = [{"small": np.zeros(10), "big": np.zeros(1000)} for _ in "ab"]
    r = score_interval(a, b, ["small", "big"])
    want = np.mean([np.mean([x["small"].mean(), x["big"].mean()]) for x in a])
    assert r["mean"] == pytest.approx(want, abs=1e-12)
    table = np.stack([np.concatenate([x["small"] * 1010 / 20, x["big"] * 1010 / 2000]) for x in a])
    assert r["se"] == pytest.approx(anova_interval(table)["se"], rel=1e-12)
    assert r["lo"] <= r["models_fixed"]["lo"] and r["models_fixed"]["hi"] <= r["hi"]


def test_the_registered_study_validates_and_bad_studies_are_refused_before_work():
    validate_transfer(load_experiment("cifar10n_transfer").transfer)
    with pytest.raises(ValueError, match="'pe' is compared but is not in transfer.methods"):
        validate_transfer(TransferSection(upstream="x", methods={"hom": ["a"]}, primary=["pe"]))
    with pytest.raises(ValueError, match="pair them seed by seed"):
        validate_transfer(TransferSection(upstream="x", methods={"hom": ["a"], "het": ["b", "c"]}, primary=["het"]))
    with pytest.raises(ValueError, match="transfer.ood: unknown task"):
        validate_transfer(TransferSection(upstream="x", methods={"hom": ["a"]}, ood=["demo_nope"]))


@pytest.mark.skipif(not DATA.is_dir(), reason="no ../shared/data/cifar10n")
def test_a_tiny_transfer_study_runs_end_to_end_from_the_committed_records(tmp_path):
    exp = tmp_path / "tiny.yaml"
    exp.write_text(
        "name: tiny_transfer\nprimary: {metric: top1, split: eval, declared: '2026-11-27'}\nworkers: 1\n"
        f"runs_root: {tmp_path / 'runs'}\nresults_root: {tmp_path / 'results'}\n"
        "transfer:\n  upstream: cifar10n\n"
        "  methods: {hom: [hom_s0, hom_s1], het: [het_t1.3_s0, het_t1.3_s1]}\n  primary: [het]\n"
        f"  data: {DATA}\n  sizes: [24, 8]\n  test_size: 24\n  ood: [demo_rotation]\n"
        "  settings: {lrs: [0.01], steps: [2], seeds: 1, batch_size: 8, micro_batch: 8}\n"
    )
    records = tmp_path / "results" / "cifar10n" / "records"
    records.mkdir(parents=True)
    for name in ("hom_s0", "hom_s1", "het_t1.3_s0", "het_t1.3_s1"):  # the committed records, linked
        (records / name).symlink_to(REPO / "results" / "cifar10n" / "records" / name)
    # --no-train before any transfer: nothing to compare yet, said before any fine-tuning
    res = CliRunner().invoke(main, ["run", str(exp), "--no-train"])
    assert res.exit_code == 1 and "'hom' have not all finished" in res.output, res.output
    assert not list((tmp_path / "runs" / "tiny_transfer" / "downstream").glob("*/predictions/*.npz"))
    res = CliRunner().invoke(main, ["run", str(exp)])
    assert res.exit_code == 0, res.output
    import json

    out = tmp_path / "results" / "tiny_transfer"
    report = json.loads((out / "report.json").read_text())
    (row,) = report["primary_endpoint"]["comparisons"]
    assert row["comparison"] == "het − hom" and row["n_seeds"] == 2 and row["lo"] <= row["mean"] <= row["hi"]
    assert set(report["groups"]) == {"natural", "structured", "ood"} and report["groups"]["ood"] == ["demo_rotation"]
    assert len(report["secondary_family"]["comparisons"]) == 3  # het − hom per group
    # the exploratory family: NLL and ECE per task, het − hom, each transfer as its fine-tuning seeds' ensemble
    explore = report["exploratory_family"]["comparisons"]
    assert len(explore) == 5 * 2 and {r["metric"] for r in explore} == {"nll", "ece"}
    assert all(r["contains_models_fixed"] and r["family"] == "exploratory" for r in explore)
    from harness.uncertainty.ensembles import average
    from harness.uncertainty.predictions import Predictions

    def nll(model: str) -> float:
        files = sorted((tmp_path / "runs" / "tiny_transfer" / "downstream" / model / "predictions").glob("cifar10_s*"))
        return average([Predictions.load(f) for f in files]).nll()

    (row,) = [r for r in explore if r["split"] == "cifar10" and r["metric"] == "nll"]
    want = np.mean([nll(f"het_t1.3_s{s}") - nll(f"hom_s{s}") for s in (0, 1)])
    assert row["mean"] == pytest.approx(want, rel=1e-9)
    md = (out / "report.md").read_text()
    assert md.index("**Bottom line**") < md.index("## Table 6 layout") < md.index("## Verdicts")
    assert md.index("## Verdicts") < md.index("## NLL and ECE per task") < md.index("## Protocol")
    # a rerun fine-tunes nothing again (every sweep is complete): no prediction file is rewritten
    preds = sorted((tmp_path / "runs" / "tiny_transfer" / "downstream").glob("*/predictions/*.npz"))
    stamps = [p.stat().st_mtime_ns for p in preds]
    assert len(preds) == 4 * 5 * 2  # 4 models x 5 tasks (4 CIFAR + 1 OOD) x (one val200 selection, one final)
    assert CliRunner().invoke(main, ["run", str(exp)]).exit_code == 0
    assert [p.stat().st_mtime_ns for p in preds] == stamps
    # --no-train with one het transfer unfinished (no vtab.json yet): het waits, named in the report; nothing runs
    (tmp_path / "runs" / "tiny_transfer" / "downstream" / "het_t1.3_s1" / "vtab.json").unlink()
    res = CliRunner().invoke(main, ["run", str(exp), "--no-train"])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    assert report["pending"] == ["het − hom"] and report["primary_endpoint"]["comparisons"] == []
    assert "**Partial report**" in (out / "report.md").read_text()
    assert [p.stat().st_mtime_ns for p in preds] == stamps
    # --no-train after a task's list file changed: the finished sweeps read the earlier list, refused before the
    # report (it read the sweeps as they were, without the sweep's own task-data check)
    listed = sorted((tmp_path / "runs" / "tiny_transfer" / "tasks").glob("*/test.txt"))[0]
    listed.write_text(listed.read_text() + "\n")
    res = CliRunner().invoke(main, ["run", str(exp), "--no-train"])
    assert res.exit_code == 1 and "holds a sweep of other task data" in res.output, res.output
    assert f"{listed.parent.name}'s {listed} changed since the sweep ran" in res.output, res.output
