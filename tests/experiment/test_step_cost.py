"""The x axis of the budget curves and the frontier: each run's recorded steps at one side-by-side step rate
(harness.experiment.step_cost.step_costs), cached in the experiment's runs folder, the recorded wall time beside it.
Run folders are written by hand here (run.json, metrics.json), so no run is trained."""

import json
from pathlib import Path

import pytest

import harness.upstream.cost as C
from harness.config import load_config, to_dict
from harness.experiment import Experiment, FrontierSection
from harness.experiment.budget import budget_section, frontier_section
from harness.experiment.plan import _Plan
from harness.experiment.step_cost import step_cost_section, step_costs
from harness.upstream.config import UpstreamConfig

BASE = Path(__file__).resolve().parents[2] / "upstream" / "configs" / "digits_base.yaml"
HEADS = {
    "hom": ["model.head.covariance=none"],
    "het": ["model.head.covariance=low_rank", "model.head.num_factors=2", "model.head.train_mc_samples=4"],
}
FAST = {"steps": 2, "warmup": 1, "rounds": 2}


def _run(
    root: Path,
    name: str,
    method: str,
    epochs: int,
    steps_per_epoch: int = 7,
    wall: float = 60.0,
    extra: "tuple[str, ...]" = (),
) -> Path:
    """A finished run folder as harness.upstream.train leaves it, as far as the sections read it."""
    d = root / name
    cfg = load_config(
        UpstreamConfig,
        BASE,
        [
            "data.batch_size=8",
            "data.image_size=16",
            f"train.epochs={epochs}",
            f"output_dir={d}",
            *HEADS[method],
            *extra,
        ],
        distinct=False,  # extra over the defaults
    )
    d.mkdir(parents=True)
    (d / "run.json").write_text(
        json.dumps({"config": to_dict(cfg), "class_names": [str(i) for i in range(10)], "num_processes": 1})
    )
    metrics = {"top1": 0.5 + epochs / 100, "nll": 1.5 - epochs / 100, "ece": 0.1}
    (d / "metrics.json").write_text(
        json.dumps(
            {
                "metrics": metrics,
                "heldout_metrics": metrics,
                "epochs": epochs,
                "steps": epochs * steps_per_epoch,
                "wall_seconds": wall,
                "threads": 1,
                "mixed_precision": "no",
            }
        )
    )
    return d


def _curves(root: Path) -> "dict[str, dict[int, Path]]":
    # recorded wall times out of line with the work done, as on a variably loaded machine
    walls = {1: 300.0, 2: 40.0, 4: 90.0}
    return {m: {e: _run(root, f"budget_{m}_e{e}", m, e, wall=walls[e]) for e in (1, 2, 4)} for m in ("hom", "het")}


def test_budget_axis_is_proportional_to_steps_and_states_its_measurement(tmp_path):
    curves = _curves(tmp_path)
    costs = step_costs({m: list(per.values()) for m, per in curves.items()}, tmp_path / "step_cost.json", **FAST)
    part = budget_section(curves, costs)
    points = part["json"]["budget_curves"]["points"]
    for m, ps in points.items():
        per_step = [p["cpu_minutes"] / p["steps"] for p in ps]
        assert per_step == pytest.approx([per_step[0]] * 3, rel=1e-12) and per_step[0] > 0
        assert [p["steps"] for p in ps] == [7, 14, 28]
        assert per_step[0] == pytest.approx(ps[0]["step_seconds"] / 60)  # one thread, one process
        # the recorded wall CPU-minutes, kept beside it, are not proportional (the old axis)
        assert [p["recorded_cpu_minutes"] for p in ps] == [5.0, 40.0 / 60, 1.5]
    assert costs["reference"] == "hom" and [e["name"] for e in costs["methods"]["het"]] == ["het"]
    assert costs["methods"]["hom"][0]["ratio"] == 1.0 and costs["methods"]["het"][0]["ratio"] > 0
    # one measured step per method: the runs of a method differ only in epochs
    assert set(costs["measurement"]["configs"]) == {"hom", "het"}
    title, header, rows = part["tables"][0]
    cpu = costs["measurement"]["cpu"]
    for text in (title, part["figures"][0][0], part["json"]["budget_curves"]["axis"]):
        assert "side-by-side rate" in text and cpu in text and "2 interleaved rounds x 2 steps" in text
        assert "x hom: het " in text
    assert "recorded wall CPU-minutes (load varies)" in header and len(rows) == 6
    assert part["figures"][0][2][:4] == b"\x89PNG"
    info = step_cost_section(costs)
    assert "Not timed: data loading" in info["text"][0] and cpu in info["text"][0]
    assert [r[0] for r in info["tables"][0][2]] == ["hom", "het"] and info["json"]["step_cost"] is costs


def test_the_measurement_is_cached_and_a_new_config_is_measured_with_the_others(tmp_path, monkeypatch):
    curves = _curves(tmp_path)
    runs = {m: list(per.values()) for m, per in curves.items()}
    cache = tmp_path / "step_cost.json"
    first = step_costs(runs, cache, **FAST)
    assert not first["measurement"]["reused"] and cache.is_file()

    measured = []
    real = C.step_seconds

    def recording(configs, **kwargs):
        measured.append(list(configs))
        return real(configs, **kwargs)

    monkeypatch.setattr(C, "step_seconds", recording)
    again = step_costs(runs, cache, **FAST)
    assert measured == [] and again["measurement"]["reused"]
    assert again["runs"] == first["runs"] and again["measurement"]["date"] == first["measurement"]["date"]
    # a run whose step differs (batch 16) is not in the cache: every config is measured again, together
    runs["hom"].append(_run(tmp_path, "frontier0_hom_s0", "hom", 2, extra=("data.batch_size=16",)))
    third = step_costs(runs, cache, **FAST)
    assert measured == [["hom", "hom (2)", "het"]] and not third["measurement"]["reused"]
    assert [e["name"] for e in third["methods"]["hom"]] == ["hom", "hom (2)"]
    assert len(json.loads(cache.read_text())["measurements"]) == 2


def test_frontier_rows_use_the_side_by_side_axis(tmp_path):
    study = {"hom": [_run(tmp_path, "hom_s0", "hom", 4, wall=30.0)]}
    cand = _run(tmp_path, "frontier0_hom_s0", "hom", 2, wall=500.0)
    exp = Experiment(name="t", seeds=[0], frontier=FrontierSection(methods=["hom"], schedules={"2 epochs": []}))
    plan = _Plan(configs={"frontier0_hom_s0": load_config(UpstreamConfig, base={"output_dir": str(cand)})})
    costs = step_costs({"hom": [study["hom"][0], cand]}, tmp_path / "step_cost.json", **FAST)
    part = frontier_section(plan, study, exp, costs)
    rows = part["json"]["frontier"]
    assert [r["epochs"] for r in rows] == [2, 4]  # by cost: the shorter schedule first, whatever the wall clock said
    assert rows[1]["cpu_minutes"] == pytest.approx(2 * rows[0]["cpu_minutes"], rel=1e-12)
    assert rows[0]["recorded_cpu_minutes"] > rows[1]["recorded_cpu_minutes"]
    assert "side-by-side rate" in part["tables"][0][0] and "side-by-side rate" in part["json"]["frontier_axis"]


def test_bf16_steps_timed_without_native_bf16_are_flagged(tmp_path):
    curves = _curves(tmp_path)
    costs = step_costs({m: list(per.values()) for m, per in curves.items()}, tmp_path / "step_cost.json", **FAST)
    assert isinstance(costs["measurement"]["native_bf16"], bool)  # recorded with the measurement
    warning = "This CPU has no native bf16"
    costs["measurement"]["native_bf16"] = False
    assert warning not in step_cost_section(costs)["text"][0]  # fp32 runs: nothing emulated
    for c in costs["measurement"]["configs"].values():
        c["key"]["precision"] = "bf16"
    assert warning in step_cost_section(costs)["text"][0]
    costs["measurement"]["native_bf16"] = True
    assert warning not in step_cost_section(costs)["text"][0]
