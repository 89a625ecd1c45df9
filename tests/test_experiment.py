"""`harness run`: every stage of an experiment, one report, resumption after a kill."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.experiment import find_experiment, load_experiment, run_experiment

ROOT = Path(__file__).resolve().parents[1]
TINY = """
name: tiny
upstream_config: digits_base.yaml
upstream_overrides: [train.epochs=1]
methods:
  hom: {{covariance: none}}
  het: {{covariance: low_rank, num_factors: 3, train_mc_samples: 8, eval_mc_samples: 16}}
seeds: [0, 1]
ensemble_sizes: [2]
downstream:
  tasks: [demo_count]
  preset: demo
  settings: {{lrs: [0.05], steps: [5], seeds: 1}}
runs_root: {root}/runs
results_root: {root}/results
"""


def _write(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY.format(root=tmp_path))
    return path


def test_experiment_runs_every_stage_and_resumes(tmp_path):
    path = _write(tmp_path)
    res = CliRunner().invoke(main, ["run", str(path)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "results" / "tiny"
    report = json.loads((out / "report.json").read_text())
    labels = [e["label"] for e in report["entries"]]
    assert labels == ["hom seed 0", "hom seed 1", "het seed 0", "het seed 1", "hom ensemble of 2", "het ensemble of 2"]
    assert report["downstream"]["per_task"]["demo_count"].keys() == {"hom", "het"}
    assert report["covariance"]["het_run"].endswith("het_s0")
    md = (out / "report.md").read_text()
    assert "Table 6" in md and "Table 7" in md and "het vs hom" in md and (out / "report.html").is_file()
    first = tmp_path / "runs" / "tiny" / "upstream" / "hom_s0" / "metrics.json"
    stamp = first.stat().st_mtime_ns
    res = CliRunner().invoke(main, ["run", str(path)])  # a rerun redoes nothing but the report
    assert res.exit_code == 0 and first.stat().st_mtime_ns == stamp


def test_killed_run_finishes_without_redoing_finished_stages(tmp_path):
    path = _write(tmp_path)
    first = tmp_path / "runs" / "tiny" / "upstream" / "hom_s0" / "metrics.json"
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "run", str(path)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while time.time() < deadline and not first.is_file():
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stamp = first.stat().st_mtime_ns
    run_experiment(load_experiment(str(path)), progress=lambda s: None)
    assert first.stat().st_mtime_ns == stamp
    assert (tmp_path / "results" / "tiny" / "report.md").is_file()


def test_bad_experiments(tmp_path):
    with pytest.raises(FileNotFoundError, match="digits"):
        find_experiment("imagenet_everything")
    path = _write(tmp_path)
    with pytest.raises(ValueError, match="ensemble sizes"):
        run_experiment(load_experiment(str(path), ("ensemble_sizes=[3]",)))
    empty = tmp_path / "empty.yaml"
    empty.write_text("name: empty\nseeds: [0]\n")
    with pytest.raises(ValueError, match="names no methods"):
        run_experiment(load_experiment(str(empty)))


def test_built_in_experiments_load():
    for name in ("digits", "cifar10n"):
        exp = load_experiment(name)
        assert exp.name == name and exp.methods and len(exp.seeds) >= 2
