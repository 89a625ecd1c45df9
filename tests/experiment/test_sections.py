"""harness/experiment/sections.py: what a report records of a condition."""

from __future__ import annotations

import json

from harness.data.noise import inject_label_noise
from harness.experiment.sections import condition_record

NAMES = ["airplane", "automobile", "bird"]


def test_a_condition_records_its_overrides_and_the_permutation_its_runs_drew(tmp_path):
    """Issue 28's condition B: the report must say which π its noise was drawn with, by index and by name."""
    labels = [0, 1, 2] * 200
    _, noise = inject_label_noise(labels, 3, kind="pair_flip", rate=0.3, seed=0, permutation=[2, 0, 1])
    (tmp_path / "run.json").write_text(json.dumps({"class_names": NAMES, "label_noise": noise}))
    overrides = ["data.label_noise.kind=pair_flip", "data.label_noise.permutation=[2, 0, 1]"]
    record, line = condition_record("b", "permuted pair flips", overrides, tmp_path)
    assert record["upstream_overrides"] == overrides and record["description"] == "permuted pair flips"
    assert record["label_noise"]["permutation"] == [2, 0, 1]
    assert record["label_noise"]["permutation_names"] == {
        "airplane": "bird",
        "automobile": "airplane",
        "bird": "automobile",
    }
    assert "airplane→bird, automobile→airplane, bird→automobile" in line
    assert f"{100 * noise['realised_rate']:.1f}%" in line and 20 < 100 * noise["realised_rate"] < 40


def test_a_condition_without_label_noise_records_no_noise(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"class_names": NAMES, "label_noise": None}))
    record, line = condition_record("a", "clean labels", ["data.label_set=clean"], tmp_path)
    assert record["label_noise"] == {} and "π" not in line and "data.label_set=clean" in line
