"""A user's `harness run` writes beside its runs and compares itself with the committed reference."""

import json
from pathlib import Path

from click.testing import CliRunner

from harness.cli import main
from harness.experiment.reference import compare_reports


def _report(verdict: str, nll: float, fragile: bool = False) -> dict:
    row = {
        "study": "main",
        "comparison": "het − hom",
        "metric": "nll",
        "split": "heldout",
        "verdict": verdict,
        "fragile": fragile,
    }
    entry = {"label": "het seed 0", "metrics": {"top1": 0.8, "nll": nll, "ece": 0.1}}
    return {
        "schema": "x",
        "primary_endpoint": {"comparisons": [row]},
        "entries": [entry],
        "provenance": {"machine": {"cpu": "CPU", "cores": "2"}, "cpu_details": "a CPU", "versions": {}},
    }


def test_verdicts_that_agree_and_differ_and_the_largest_differences():
    c = compare_reports(_report("better", 0.50), _report("better", 0.47))
    assert len(c["agree"]) == 1 and not c["differ"] and c["largest"][0]["difference"] > 0.029
    c = compare_reports(_report("better", 0.50), _report("no detectable difference", 0.5, fragile=True))
    assert c["differ"][0]["reference_fragile"] and c["differ"][0]["own"] == "better"


def test_harness_run_writes_under_runs_and_compares_with_the_reference(tmp_path, monkeypatch):
    import harness.experiment as E

    seen = {}

    def fake_run(exp, progress=print, train=True, reevaluate=False):  # the stages are tested elsewhere
        seen["results_root"] = exp.results_root
        out = Path(exp.results_root) / exp.name
        out.mkdir(parents=True)
        (out / "report.json").write_text(json.dumps(_report("better", 0.50)))
        return out

    monkeypatch.setattr(E, "run_experiment", fake_run)
    ref = tmp_path / "reference" / "digits"
    ref.mkdir(parents=True)
    (ref / "report.json").write_text(json.dumps(_report("worse", 0.60)))
    args = ["run", f"runs_root={tmp_path / 'runs'}", f"reference_root={tmp_path / 'reference'}"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert seen["results_root"] == str(tmp_path / "runs" / "results")
    assert "0 of 1 verdicts agree" in res.output
    text = (tmp_path / "runs" / "results" / "digits" / "comparison.md").read_text()
    assert "| main: het − hom | nll | heldout | better | worse | no |" in text
    assert json.loads((ref / "report.json").read_text())["primary_endpoint"]["comparisons"][0]["verdict"] == "worse"
    # --reference writes into the reference itself (and compares with nothing)
    res = CliRunner().invoke(main, [*args, "--reference", "name=other"])
    assert res.exit_code == 0, res.output
    assert seen["results_root"] == str(tmp_path / "reference") and "verdicts agree" not in res.output
