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

ROOT = Path(__file__).resolve().parents[2]
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
    # the verdicts open the report: the declared primary endpoint (held-out NLL) first, one interval over seeds
    # and images, then the secondary family with its size and Holm-adjusted p
    summary = report["summary"]
    assert summary["rows"][0][:3] == ["primary", "het − hom", "nll, held-out, noisy labels"]
    assert summary["rows"][0][4] == "seeds + images, n = 2"
    assert md.index("Summary: primary endpoint nll") < md.index("Evaluation data")
    family = report["secondary_family"]
    assert family["size"] == len(family["comparisons"]) >= 3 and all("p_holm" in r for r in family["comparisons"])
    # method rows carry their robustness (df = n − 1) and contain their models-fixed interval; the ensembles form
    # their own descriptive family
    assert all(r["contains_models_fixed"] and "p_holm_df_n1" in r for r in family["comparisons"])
    fixed = report["models_fixed_family"]
    assert fixed["size"] == 3 and {r["study"] for r in fixed["comparisons"]} == {"ensembles"}
    # downstream calibration: each method's NLL is the mean over its upstream runs' sweeps
    calib = report["downstream"]["calibration"]["demo_count"]
    sweeps = [
        json.loads((tmp_path / "runs" / "tiny" / "downstream" / f"hom_s{s}" / "vtab.json").read_text()) for s in (0, 1)
    ]
    nll = [v["uncertainty"]["tasks"]["demo_count"]["mean"]["nll"] for v in sweeps]
    assert calib["hom"]["nll"] == pytest.approx(sum(nll) / 2) and "Downstream calibration" in md
    # the ensemble across the two upstream seeds of each method, one fine-tune of each
    from harness.downstream.ensembles import upstream_ensemble

    ens = upstream_ensemble([tmp_path / "runs" / "tiny" / "downstream" / f"het_s{s}" for s in (0, 1)])
    assert report["downstream"]["ensembles"]["het"]["demo_count"]["ensemble"] == pytest.approx(
        ens["tasks"]["demo_count"]["ensemble"]["mean"]
    )
    assert "Downstream ensembles across upstream seeds" in md
    first = tmp_path / "runs" / "tiny" / "upstream" / "hom_s0" / "metrics.json"
    stamp = first.stat().st_mtime_ns
    res = CliRunner().invoke(main, ["run", str(path)])  # a rerun redoes nothing but the report
    assert res.exit_code == 0 and first.stat().st_mtime_ns == stamp


def test_killed_run_finishes_without_redoing_finished_stages(tmp_path):
    path = _write(tmp_path)
    first = tmp_path / "runs" / "tiny" / "upstream" / "hom_s0" / "metrics.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 300
    while time.time() < deadline and not first.is_file():
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    stamp = first.stat().st_mtime_ns
    run_experiment(load_experiment(str(path)), progress=lambda s: None)
    assert first.stat().st_mtime_ns == stamp
    assert (tmp_path / "results" / "tiny" / "report.md").is_file()


GRID = """
name: grid
upstream_config: digits_base.yaml
upstream_overrides: [train.epochs=1, data.limit_train=256]
methods:
  hom: {{covariance: none}}
  het: {{covariance: low_rank, num_factors: 3, train_mc_samples: 8, eval_mc_samples: 16}}
  ls: {{covariance: none, overrides: [train.loss=label_smoothing],
        tune: {{key: train.label_smoothing, values: [0.05, 0.3]}}}}
seeds: [0, 1]
temperature_grid: [0.5, 2.0]
ensemble_sizes: [2]
evaluate_methods: [hom, het]
workers: 2
multilabel:
  upstream_overrides: [train.best_metric=sigmoid_nll]
  methods:
    hom: {{covariance: none, link: sigmoid}}
    pe: {{covariance: parameter_efficient, num_factors: 2, link: sigmoid, train_mc_samples: 8, eval_mc_samples: 8}}
  seeds: [0, 1]
frontier:
  method: hom
  schedules: {{2 epochs: [train.epochs=2]}}
downstream:
  tasks: [demo_count]
  preset: demo
  settings: {{lrs: [0.05], steps: [3], seeds: 1, batch_size: 32, micro_batch: 32}}
runs_root: {root}/runs
results_root: {root}/results
"""


@pytest.mark.slow
def test_temperature_is_chosen_on_the_heldout_split_and_the_multilabel_study_is_reported(tmp_path):
    path = tmp_path / "grid.yaml"
    path.write_text(GRID.format(root=tmp_path))
    out = run_experiment(load_experiment(str(path)), progress=lambda s: None)
    report = json.loads((out / "report.json").read_text())
    grid = report["grid"]
    assert [(r["method"], r["parameter"], r["value"]) for r in grid] == [
        ("het", "τ", 0.5),
        ("het", "τ", 2.0),
        ("ls", "train.label_smoothing", 0.05),
        ("ls", "train.label_smoothing", 0.3),
    ]
    up = tmp_path / "runs" / "grid" / "upstream"
    picks = {}
    for method, tag, values in (("het", "t", (0.5, 2.0)), ("ls", "label_smoothing", (0.05, 0.3))):
        held = {r["value"]: r["heldout"]["nll"] for r in grid if r["method"] == method}
        chosen = [r["value"] for r in grid if r["method"] == method and r["chosen"]]
        assert chosen == [min(held, key=held.get)]  # the lowest held-out NLL, whatever the test split says
        picks[method] = chosen[0]
        assert (up / f"{method}_{tag}{chosen[0]:g}_s1" / "metrics.json").is_file()  # the second seed at the choice only
        other = values[1] if chosen[0] == values[0] else values[0]
        assert not (up / f"{method}_{tag}{other:g}_s1").exists()
    chosen = [picks["het"]]
    for seed in (0, 1):  # label smoothing's ε is the one chosen, in every seed's training config
        cfg = json.loads((up / f"ls_label_smoothing{picks['ls']:g}_s{seed}" / "run.json").read_text())["config"]
        assert cfg["train"]["label_smoothing"] == picks["ls"] and cfg["train"]["loss"] == "label_smoothing"
    md = (out / "report.md").read_text()
    assert f"ls train.label_smoothing = {picks['ls']:g}" in md and f"het τ = {picks['het']:g}" in md
    labels = [e["label"] for e in report["entries"]]
    assert labels == [
        "hom seed 0",
        "hom seed 1",
        "het seed 0",
        "het seed 1",
        "hom-ls seed 0",
        "hom-ls seed 1",
        "hom ensemble of 2",
        "het ensemble of 2",
        "hom-ls ensemble of 2",
    ]
    diffs = {(d["method"], d["metric"]): d for d in report["paired_differences"]}
    hom = [json.loads((up / f"hom_s{s}" / "metrics.json").read_text())["metrics"]["top1"] for s in (0, 1)]
    het = [
        json.loads((up / f"het_t{chosen[0]:g}_s{s}" / "metrics.json").read_text())["metrics"]["top1"] for s in (0, 1)
    ]
    assert diffs[("het", "top1")]["diffs"] == pytest.approx([a - b for a, b in zip(het, hom)])
    assert set(report["multilabel_study"]) == {"hom", "pe"}
    assert {d["method"] for d in report["multilabel_paired_differences"]} == {"pe"}
    md = (out / "report.md").read_text()
    assert "Multi-label study" in md and "Wall time per stage" in md and "held-out" in md
    assert 0 < report["wall_minutes"]["elapsed"] and report["wall_minutes"]["sessions"] == 1
    frontier = {r["schedule"].split(":")[0]: r for r in report["frontier"]}
    assert set(frontier) == {"this study's schedule (chosen)", "2 epochs"} and frontier["2 epochs"]["epochs"] == 2
    assert frontier["this study's schedule (chosen)"]["run"].endswith("hom_s0") and "Frontier" in md
    # CPU-minutes at one side-by-side step rate: twice the epochs, twice the cost, whatever the wall clock said
    assert frontier["2 epochs"]["cpu_minutes"] == pytest.approx(
        2 * frontier["this study's schedule (chosen)"]["cpu_minutes"], rel=1e-12
    )
    assert set(report["step_cost"]["measurement"]["configs"]) == {"hom"} and "side-by-side" in md
    # every final run is transferred (the chosen τ's first-seed run too, started once τ was chosen), no other
    transferred = {d.name for d in (tmp_path / "runs" / "grid" / "downstream").iterdir()}
    assert transferred == {"hom_s0", "hom_s1", f"het_t{chosen[0]:g}_s0", f"het_t{chosen[0]:g}_s1"}
    assert report["downstream"]["per_task"]["demo_count"].keys() == {"hom", "het"}


def _square(x):
    return x * x


def _fail(x):
    raise ValueError(f"job {x} failed")


@pytest.mark.parametrize("n", [1, 2])
def test_workers_run_jobs_that_jobs_submit_and_raise_after_the_others_finish(n):
    from harness.workers import Workers

    lines = []
    with Workers(n) as w:
        for i in range(3):  # each finished job of stage a submits one of stage b
            w.submit("a", f"a{i}", _square, (i,), then=lambda r, i=i: w.submit("b", f"b{i}", _square, (r + 1,)))
        w.wait(lines.append, stages={"a"})
        assert {k for k in w.results if k[0] == "a"} == {("a", "a0"), ("a", "a1"), ("a", "a2")}
        w.wait(lines.append)
        assert [w.results[("b", f"b{i}")] for i in range(3)] == [1, 4, 25] and w.seconds["b"] >= 0
        w.submit("c", "bad", _fail, (7,))
        w.submit("c", "good", _square, (3,))
        w.submit("d", "d", _square, (4,))
        w.wait(lines.append, stages={"d"})  # another stage's failure is not this wait's ...
        with pytest.raises(ValueError, match="job 7 failed"):
            w.wait(lines.append)  # ... but the next one's, once the other jobs have finished
        assert w.results[("c", "good")] == 9 and w.results[("d", "d")] == 16
        assert any("failed bad" in line for line in lines)
        w.wait(lines.append)  # raised once


def test_bad_experiments(tmp_path):
    with pytest.raises(FileNotFoundError, match="digits"):
        find_experiment("imagenet_everything")
    path = _write(tmp_path)
    with pytest.raises(ValueError, match="ensemble_sizes .* must be at most the number of seeds"):
        run_experiment(load_experiment(str(path), ("ensemble_sizes=[3]",)))
    empty = tmp_path / "empty.yaml"
    empty.write_text("name: empty\nseeds: [0]\n")
    with pytest.raises(ValueError, match="names no methods"):
        run_experiment(load_experiment(str(empty)))
    # `harness run key=value` overrides the default experiment (digits), checked before any work
    res = CliRunner().invoke(main, ["run", f"runs_root={tmp_path / 'r'}", "seeds=[]"])
    assert res.exit_code != 0 and "seeds is empty" in res.output and not (tmp_path / "r").exists()


def test_built_in_experiments_load():
    for name in ("digits", "cifar10n"):
        exp = load_experiment(name)
        assert exp.name == name and exp.methods and len(exp.seeds) >= 2


def test_an_override_of_an_empty_mapping_switches_a_section_off():
    """``frontier.schedules={}`` empties the mapping (a plain merge of {} would keep the file's entries), and the
    experiment then plans no frontier and no multi-label study."""
    from harness.experiment.validate import validate_experiment

    full = load_experiment("cifar10n")
    assert full.frontier.schedules and full.multilabel.methods
    cut = load_experiment("cifar10n", ("frontier.schedules={}", "multilabel.methods={}"))
    assert cut.frontier.schedules == {} and cut.multilabel.methods == {} and cut.methods == full.methods
    assert set(validate_experiment(cut)) == {"main"}
    assert load_experiment("cifar10n", ("seeds=[0]",)).frontier.schedules == full.frontier.schedules
