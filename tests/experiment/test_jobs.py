"""harness run's remaining-work count: the jobs planned before the run (harness.experiment.jobs) are the jobs it
submits, over every phase (τ grid and its extension, the chosen τ's seeds, budget and condition runs that are not
study runs, shift predictions and transfers)."""

import json
import re
from pathlib import Path

import pytest

from harness.experiment import load_experiment, run_experiment

EXPERIMENT = """
name: count
upstream_config: digits_base.yaml
upstream_overrides: [train.epochs=1, train.eval_every=1]
methods:
  hom: {{covariance: none}}
  het: {{covariance: low_rank, num_factors: 3, train_mc_samples: 8, eval_mc_samples: 16}}
seeds: [0, 1]
temperature_grid: [1.0, 2.0]
grid_extensions: 1
ensemble_sizes: [2]
budget: {{methods: [hom], epochs: [1, 2]}}
conditions:
  other: {{upstream_overrides: [train.epochs=2, train.eval_every=2], methods: [hom, het], seeds: [0]}}
evaluate_methods: [het]
downstream: {{tasks: [demo_count], preset: demo, settings: {{lrs: [0.05], steps: [5], seeds: 1}}}}
shift: {{corruptions: [fog], severities: [1], examples: 20, ood: []}}
runs_root: {root}/runs
results_root: {root}/results
"""


class _Stop(Exception):
    """Raised where the runner leaves the workers (its first ensemble): every job has run by then."""


def test_the_count_covers_every_phase_and_ends_at_zero_left(tmp_path, monkeypatch):
    import harness.ensemble_folder
    import harness.experiment.stages as stages
    import harness.shift.predict
    from harness.workers import Workers

    def train(cfg):  # a finished run in no time: its held-out NLL grows with τ, so the grid extends below
        out = Path(cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        tau = float(cfg.model.head.get("temperature", 1.0))
        (out / "metrics.json").write_text(json.dumps({"heldout_metrics": {"nll": tau}}))
        return str(out)

    monkeypatch.setattr(stages, "_train_one", train)
    monkeypatch.setattr(stages, "_transfer_one", lambda *args: {})
    monkeypatch.setattr(harness.shift.predict, "predict_run", lambda *args, **kwargs: None)
    monkeypatch.setattr(harness.ensemble_folder, "build_ensemble", lambda *args, **kw: (_ for _ in ()).throw(_Stop()))
    seen = {}
    close = Workers.close

    def spy(self, interrupted=False):
        seen.setdefault("counts", self.counts())
        seen.setdefault("submitted", dict(self._counts))
        close(self, interrupted)

    monkeypatch.setattr(Workers, "close", spy)
    path = tmp_path / "count.yaml"
    path.write_text(EXPERIMENT.format(root=tmp_path))
    lines = []
    with pytest.raises(_Stop):
        run_experiment(load_experiment(str(path), ("workers=1",)), progress=lines.append)
    # study: hom x 2 seeds, het's grid (τ 1, 2) and its extension (0.5), het seed 1 at the chosen τ; budget hom e2
    # (e1 is the study's hom_s0); condition other: het s0 (its hom s0 is budget hom e2: planned once); shift and
    # transfer of het's two final runs (a condition that changes nothing is refused since audit13 A13-14)
    assert seen["submitted"] == {"upstream": 8, "shift": 2, "downstream": 2}
    assert seen["counts"] == (12, 12)
    planned = re.search(r"\[plan\] (\d+) jobs", "\n".join(lines))
    assert planned and int(planned.group(1)) == 11  # all but the extension, which the τ choice adds
    jobs = [line for line in lines if re.search(r"jobs done, \d+ left\]$", line)]
    assert jobs[0].endswith("[0/11 jobs done, 11 left]") and jobs[-1].endswith("[11/12 jobs done, 1 left]"), jobs
    assert len(jobs) == 12  # a line as each job starts (one process)
