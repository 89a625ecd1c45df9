"""Re-evaluating a finished run (harness.upstream.reevaluate): the same evaluation as training's last step, so the
files come back identical at the current noise; a run recorded with another noise is brought up to date."""

import json
from pathlib import Path

import numpy as np
import pytest

from harness.config import load_config
from harness.upstream.config import UpstreamConfig
from harness.upstream.reevaluate import needs_reevaluation, reevaluate
from harness.upstream.train import run

CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"
QUICK = ["train.epochs=1", "model.head.train_mc_samples=4", "model.head.eval_mc_samples=16", "train.log_with=[]"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("reeval") / "run"
    cfg = load_config(
        UpstreamConfig, CONFIGS / "digits_het.yaml", [*QUICK, "data.heldout_split=val", f"output_dir={out}"]
    )
    run(cfg, progress=False)
    return out


def _arrays(path: Path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def test_reevaluation_at_the_current_noise_reproduces_the_run(finished, tmp_path):
    before = {n: _arrays(finished / n) for n in ("predictions.npz", "heldout_predictions.npz")}
    metrics = json.loads((finished / "metrics.json").read_text())
    assert not needs_reevaluation(finished) and reevaluate(finished) is None  # up to date: nothing done
    after = reevaluate(finished, force=True)
    for name, arrays in before.items():
        again = _arrays(finished / name)
        assert arrays.keys() == again.keys()
        for k in arrays:
            np.testing.assert_array_equal(arrays[k], again[k], err_msg=f"{name}:{k}")
    assert after["metrics"] == metrics["metrics"] and after["heldout_metrics"] == metrics["heldout_metrics"]
    assert after["eval_noise"] == metrics["eval_noise"] and after["history"] == metrics["history"]
    assert after["reevaluated"]["eval_noise_before"] == metrics["eval_noise"]


def test_a_run_recorded_with_another_noise_is_reevaluated(finished):
    metrics = json.loads((finished / "metrics.json").read_text())
    truth = metrics["metrics"]
    stale = {**metrics, "eval_noise": None, "metrics": {**truth, "nll": 9.9}}  # as versions before counter/1 wrote
    (finished / "metrics.json").write_text(json.dumps(stale))
    assert needs_reevaluation(finished)
    after = reevaluate(finished)
    assert after["metrics"] == truth and after["eval_noise"] == metrics["eval_noise"]
    assert after["reevaluated"]["eval_noise_before"] is None
    assert json.loads((finished / "metrics.json").read_text()) == after
    assert not needs_reevaluation(finished)


def test_only_finished_runs_are_reevaluated(tmp_path):
    (tmp_path / "config.yaml").write_text("name: x\n")
    with pytest.raises(FileNotFoundError, match="has no model.pt: only a finished upstream run"):
        reevaluate(tmp_path)
    assert not needs_reevaluation(tmp_path)


def test_harness_run_names_stale_runs_and_reevaluates_them_with_their_records(tmp_path):
    """An experiment's finished run recorded with another noise: named by harness run, re-evaluated (not trained) by
    harness run --reevaluate, its record written again with the current noise's metrics."""
    from harness.experiment import load_experiment, run_experiment

    het = "{het: {covariance: low_rank, num_factors: 2, train_mc_samples: 4, eval_mc_samples: 8}}"
    (tmp_path / "tiny.yaml").write_text(
        f"name: tiny\nupstream_config: digits_base.yaml\nupstream_overrides: [train.epochs=1, data.limit_train=128]\n"
        f"methods: {het}\nseeds: [0]\nrecords: true\ncovariance: false\ndownstream: {{tasks: []}}\n"
        f"runs_root: {tmp_path}/runs\nresults_root: {tmp_path}/results\n"
    )
    exp = lambda: load_experiment(str(tmp_path / "tiny.yaml"))  # noqa: E731
    run_experiment(exp(), progress=lambda s: None)
    run_dir, record = tmp_path / "runs/tiny/upstream/het_s0", tmp_path / "results/tiny/records/het_s0"
    truth = json.loads((run_dir / "metrics.json").read_text())
    # what an evaluation with another noise draw left: other predictions, and the metrics measured on them (a
    # metrics.json that disagrees with its predictions.npz is refused as damaged, audit26 A26-05)
    from dataclasses import replace

    from harness.uncertainty.predictions import Predictions

    drawn = Predictions.load(run_dir / "predictions.npz")
    other = replace(drawn, logits=drawn.logits * 0.5)
    other.save(run_dir / "predictions.npz")
    stale = {**truth, "eval_noise": None, "metrics": {**truth["metrics"], **other.metrics()}}
    assert stale["metrics"]["nll"] != truth["metrics"]["nll"]
    (run_dir / "metrics.json").write_text(json.dumps(stale))
    lines: list = []
    run_experiment(exp(), progress=lines.append, train=False)
    assert any("[reevaluate] 1 finished run(s) were evaluated with another" in s and "het_s0" in s for s in lines)
    lines.clear()
    run_experiment(exp(), progress=lines.append, train=False, reevaluate=True)
    assert any("[reevaluate] 1 run(s) re-evaluated" in s for s in lines)
    again = json.loads((run_dir / "metrics.json").read_text())
    assert again["metrics"] == truth["metrics"] and again["eval_noise"] == truth["eval_noise"]
    assert json.loads((record / "metrics.json").read_text()) == again  # recorded again, and its hashes verify
    from harness.records import verify_record

    assert verify_record(record)
