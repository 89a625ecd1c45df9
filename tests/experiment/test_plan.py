"""The experiment planner's newer parts on one tiny digits experiment: τ grid with its own schedule and
extension, budget curves that reuse identical runs, frontier methods, conditions, a method's own
training overrides, the comparison sections, records and restoring from them; and the checks that
reject a bad experiment before any run folder exists."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from harness.experiment import BudgetSection, ConditionSection, load_experiment, run_experiment, validate_experiment
from harness.experiment.choice import possible_extensions

PLAN = """
name: plan
upstream_config: digits_base.yaml
upstream_overrides: [train.epochs=2, train.eval_every=2, data.limit_train=128, data.limit_eval=200]
methods:
  hom: {{covariance: none}}
  het: {{covariance: low_rank, num_factors: 3, train_mc_samples: 8, eval_mc_samples: 16}}
  fwd: {{covariance: none, overrides: [train.loss=forward]}}
seeds: [0, 1]
temperature_grid: [0.5, 1.0]
grid_overrides: [train.epochs=1, train.eval_every=1]
grid_extensions: 1
ensemble_sizes: [2]
budget: {{methods: [hom, het], epochs: [1, 2]}}
frontier:
  methods: [hom, het]
  schedules: {{3 epochs: [train.epochs=3, train.eval_every=3]}}
conditions:
  sym:
    description: symmetric label noise
    upstream_overrides: [data.label_noise.kind=symmetric]
    methods: [hom, het]
    seeds: [0]
  short:
    upstream_overrides: [train.epochs=1, train.eval_every=1]
    methods: [hom]
    seeds: [0, 1]
records: true
covariance: false
workers: 1
downstream: {{tasks: []}}
runs_root: {root}/runs
results_root: {root}/results
"""


def _exp(tmp_path: Path, sub: str = ""):
    root = tmp_path / sub if sub else tmp_path
    root.mkdir(parents=True, exist_ok=True)
    path = root / "plan.yaml"
    path.write_text(PLAN.format(root=root))
    return load_experiment(str(path))


def _epochs(run: Path) -> int:
    return json.loads((run / "metrics.json").read_text())["epochs"]


def _cfg(run: Path) -> dict:
    return json.loads((run / "run.json").read_text())["config"]


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda e: replace(e, temperature_grid=[]), "grid_overrides"),
        (lambda e: replace(e, budget=BudgetSection(methods=["hom", "pe"], epochs=[1])), "budget method.*pe"),
        (lambda e: replace(e, conditions={"odd": ConditionSection(methods=["hom", "nope"])}), "condition 'odd'"),
        (lambda e: replace(e, evaluate_methods=["nope"]), "evaluate_methods nope"),
        (lambda e: replace(e, frontier=replace(e.frontier, methods=["nope"])), "frontier method.*nope"),
    ],
)
def test_bad_experiments_are_refused_before_any_run_folder(tmp_path, change, match):
    exp = change(_exp(tmp_path))
    with pytest.raises(ValueError, match=match):
        run_experiment(exp, progress=lambda s: None)
    assert not (tmp_path / "runs").exists() and not (tmp_path / "results").exists()


def test_a_method_override_and_a_condition_reach_their_configs(tmp_path):
    plan = validate_experiment(_exp(tmp_path))["main"]
    assert plan.configs["fwd_s0"].train.loss == "forward" and plan.configs["hom_s0"].train.loss == "nll"
    assert "overrides" not in plan.configs["fwd_s0"].model.head
    assert set(plan.grid["het"]) == {0.5, 1.0} and "het" not in [m for m in plan.grid if m != "het"]
    grid = plan.configs[plan.grid["het"][0.5]]
    assert plan.grid["het"][0.5] == "grid_het_t0.5_s0" and grid.train.epochs == 1 and grid.train.eval_every == 1
    assert grid.model.head["temperature"] == 0.5
    assert plan.configs["hom_s0"].train.epochs == 2
    assert not (tmp_path / "runs").exists()  # validation writes nothing


TINY = """
name: tiny
upstream_config: digits_base.yaml
upstream_overrides: [train.epochs=1, data.limit_train=128]
methods: {methods}
seeds: [0]
downstream: {{tasks: []}}
runs_root: {root}/runs
results_root: {root}/results
"""


def _tiny(tmp_path: Path, methods: str, *overrides: str):
    (tmp_path / "tiny.yaml").write_text(TINY.format(methods=methods, root=tmp_path))
    return load_experiment(str(tmp_path / "tiny.yaml"), overrides)


def test_head_overrides_reach_the_runs_config_over_the_methods_head(tmp_path):
    """Audit Y11, Y12: model.head keys in upstream_overrides or in a method's own overrides were dropped (the plan set
    model.head from the method afterwards); they are merged over the method's head and land in config.yaml."""
    from harness.config import to_yaml

    het = "{het: {covariance: low_rank, num_factors: 2, train_mc_samples: 5, eval_mc_samples: 5}}"
    plan = validate_experiment(_tiny(tmp_path, het, "upstream_overrides=[train.epochs=1,model.head.temperature=0.25]"))
    head = plan["main"].configs["het_s0"].model.head
    assert head["temperature"] == 0.25 and head["num_factors"] == 2 and head["covariance"] == "low_rank"
    assert "temperature: 0.25" in to_yaml(plan["main"].configs["het_s0"])  # what the run writes as its config.yaml
    own = (  # a key the method's entry sets is the method's own: refused (audit9 X01), another method is the fix
        "{het: {covariance: low_rank, num_factors: 2, train_mc_samples: 5, eval_mc_samples: 5, "
        "overrides: [model.head.num_factors=7]}}"
    )
    with pytest.raises(ValueError, match=r"sets model\.head\.num_factors .* which method 'het' defines itself"):
        validate_experiment(_tiny(tmp_path, own))
    assert not (tmp_path / "runs").exists()


def test_a_methods_tune_grid_plans_its_setting_and_bad_tunes_are_refused(tmp_path):
    """Issue 28, item 8: label smoothing's ε chosen on the held-out split like a noisy head's τ."""
    ls = (
        "{ls: {covariance: none, overrides: [train.loss=label_smoothing], tune: {key: train.label_smoothing, "
        "values: [0.05, 0.2]}}}"
    )
    plan = validate_experiment(_tiny(tmp_path, ls, "upstream_overrides=[data.heldout_split=val]"))["main"]
    assert plan.grid == {"ls": {0.05: "ls_label_smoothing0.05_s0", 0.2: "ls_label_smoothing0.2_s0"}}
    assert [plan.configs[f].train.label_smoothing for f in plan.grid["ls"].values()] == [0.05, 0.2]
    assert {c.train.loss for c in plan.configs.values()} == {"label_smoothing"}
    plan.chosen["ls"] = 0.2
    assert plan.final("ls", 1, "x").train.label_smoothing == 0.2
    assert plan.folder("ls", 0.2, 1) == "ls_label_smoothing0.2_s1"
    bad = [
        ("tune: {key: train.label_smoothing}", "tune takes a key and its values"),
        ("tune: {key: train.label_smoothing, values: []}", "tune.values must be distinct numbers"),
        ("tune: {key: model.head.temperature, values: [0.5]}", "is a head option"),
        ("tune: {key: train.label_smoothing, values: [0.1, 1.5]}", r"train\.label_smoothing must be in \(0, 1\)"),
        ("tune: {key: 'train./../x', values: [0.1]}", "is not a config setting"),
    ]
    for tune, message in bad:
        with pytest.raises(ValueError, match=message):
            validate_experiment(
                _tiny(
                    tmp_path,
                    "{ls: {covariance: none, overrides: [train.loss=label_smoothing], " + tune + "}}",
                    "upstream_overrides=[data.heldout_split=val]",
                )
            )
    with pytest.raises(ValueError, match="tune needs a held-out split"):
        validate_experiment(_tiny(tmp_path, ls, "upstream_overrides=[data.heldout_split=null]"))
    het = "{het: {covariance: low_rank, num_factors: 2, tune: {key: train.lr, values: [0.1]}}}"
    with pytest.raises(ValueError, match="temperature_grid tunes its τ: one grid per method"):
        validate_experiment(
            _tiny(tmp_path, het, "temperature_grid=[0.5,1.0]", "upstream_overrides=[data.heldout_split=val]")
        )


def test_a_head_override_the_head_does_not_take_is_refused_like_harness_upstream_refuses_it(tmp_path):
    """Audit Y10: upstream_overrides=[model.head.bogus=1] passed (dropped); harness upstream refuses it."""
    with pytest.raises(ValueError, match=r"method 'hom': unknown head option\(s\) model\.head\.bogus"):
        validate_experiment(_tiny(tmp_path, "{hom: {covariance: none}}", "upstream_overrides=[model.head.bogus=1]"))
    with pytest.raises(ValueError, match=r"model\.head\.temperature=0\.25 in the overrides would replace the τ"):
        validate_experiment(
            _tiny(
                tmp_path,
                "{het: {covariance: low_rank, num_factors: 2}}",
                "temperature_grid=[0.5,1.0]",
                "upstream_overrides=[model.head.temperature=0.25,data.heldout_split=val]",
            )
        )


@pytest.mark.slow
def test_experiment_plan_end_to_end_and_restore_from_records(tmp_path, monkeypatch):
    exp = _exp(tmp_path)
    out = run_experiment(exp, progress=lambda s: None)
    up = tmp_path / "runs" / "plan" / "upstream"
    report = json.loads((out / "report.json").read_text())

    # --- τ grid: own schedule (1 epoch) in grid_* folders, final seeds at the main schedule (2 epochs)
    grid = report["grid"]
    held = {r["value"]: r["heldout"]["nll"] for r in grid}
    chosen = [r["value"] for r in grid if r["chosen"]]
    assert len(chosen) == 1 and chosen[0] == min(held, key=lambda t: (held[t], t))
    tau = chosen[0]
    for t in held:
        assert _epochs(up / f"grid_het_t{t:g}_s0") == 1
    for s in (0, 1):
        assert _epochs(up / f"het_t{tau:g}_s{s}") == 2
        assert _cfg(up / f"het_t{tau:g}_s{s}")["model"]["head"]["temperature"] == tau
        assert _epochs(up / f"hom_s{s}") == 2 and _epochs(up / f"fwd_s{s}") == 2
    # extension: with two values the first best is on an edge, so exactly one run past it
    first_best = min((0.5, 1.0), key=lambda t: (held[t], t))
    extension = 0.25 if first_best == 0.5 else 1.5
    grid_dirs = sorted(d.name for d in up.glob("grid_*"))
    assert grid_dirs == sorted(f"grid_het_t{t:g}_s0" for t in (0.5, 1.0, extension))
    assert set(held) == {0.5, 1.0, extension}
    assert possible_extensions([0.5, 1.0], 1) == [0.25, 1.5]  # what the run folder check claims before any run

    # --- budget: identical configs reused, only budget_hom_e1 trained for it
    budget = report["budget_curves"]
    assert set(budget["points"]) == {"hom", "het"} and budget["reference"] == "hom"
    runs = {m: {p["epochs"]: Path(p["run"]).name for p in ps} for m, ps in budget["points"].items()}
    assert runs["hom"] == {1: "budget_hom_e1", 2: "hom_s0"}
    assert runs["het"] == {1: f"grid_het_t{tau:g}_s0", 2: f"het_t{tau:g}_s0"}
    assert (up / "budget_hom_e1").is_dir() and _epochs(up / "budget_hom_e1") == 1
    assert not list(up.glob("budget_het_*")) and not (up / "budget_hom_e2").exists()
    assert set(budget["crossings"]) == {"het"} and set(budget["crossings"]["het"]["diffs"]) == {"1", "2"}
    hom_e1 = json.loads((up / "budget_hom_e1" / "metrics.json").read_text())["metrics"]["top1"]
    het_e1 = json.loads((up / f"grid_het_t{tau:g}_s0" / "metrics.json").read_text())["metrics"]["top1"]
    assert budget["crossings"]["het"]["diffs"]["1"] == pytest.approx(het_e1 - hom_e1)
    # their x axis: each run's recorded steps at one side-by-side step rate, one measured step per method
    for m, ps in budget["points"].items():
        assert [p["cpu_minutes"] / p["steps"] for p in ps] == pytest.approx(
            [ps[0]["cpu_minutes"] / ps[0]["steps"]] * 2, rel=1e-12
        )
    cost = report["step_cost"]
    assert set(cost["measurement"]["configs"]) == {"hom", "het"} and cost["reference"] == "hom"
    assert (tmp_path / "runs" / "plan" / "step_cost.json").is_file() and "side-by-side rate" in budget["axis"]

    # --- frontier: both methods, the study's schedule and the 3-epoch one
    rows = report["frontier"]
    assert {r["method"] for r in rows} == {"hom", "het"} and len(rows) == 4
    for m in ("hom", "het"):
        mine = {r["schedule"].split(":")[0]: r for r in rows if r["method"] == m}
        assert set(mine) == {"this study's schedule (chosen)", "3 epochs"}
        assert mine["3 epochs"]["epochs"] == 3 and Path(mine["3 epochs"]["run"]).name == f"frontier0_{m}_s0"
        assert mine["this study's schedule (chosen)"]["epochs"] == 2
    assert _cfg(up / "frontier0_het_s0")["model"]["head"]["temperature"] == tau

    # --- condition: its runs at the chosen τ, compared against hom
    assert (up / "sym_hom_s0" / "metrics.json").is_file() and (up / "sym_het_s0" / "metrics.json").is_file()
    assert _cfg(up / "sym_het_s0")["data"]["label_noise"]["kind"] == "symmetric"
    assert _cfg(up / "sym_het_s0")["model"]["head"]["temperature"] == tau
    cond = report["conditions"]["sym"]
    diffs = {d["metric"]: d for d in cond["paired_differences"] if d["method"] == "het"}
    assert set(diffs) == {"top1", "nll", "ece"} and diffs["top1"]["n"] == 1
    sym = {m: json.loads((up / f"sym_{m}_s0" / "metrics.json").read_text())["metrics"] for m in ("hom", "het")}
    assert diffs["top1"]["diffs"] == pytest.approx([sym["het"]["top1"] - sym["hom"]["top1"]])
    assert set(cond["image_level_differences"]["het"]) == {"top1", "nll", "ece"}
    # one seed: no seed-level interval (NaN written as null) and no verdict either way
    assert diffs["top1"]["lo"] is None and diffs["top1"]["hi"] is None and diffs["top1"]["p"] is None
    assert diffs["top1"]["verdict"] == "no detectable difference at n = 1"
    assert "ensemble_differences" not in cond  # a condition has no ensembles
    assert cond["mixed_precision"] == report["schedule"]["mixed_precision"] == ["no"]  # so no precision note
    assert cond["upstream_overrides"] == ["data.label_noise.kind=symmetric"]  # what the condition changed
    assert cond["label_noise"]["kind"] == "symmetric" and 0 < cond["label_noise"]["realised_rate"] < 1
    assert not any(", the main study's in" in n for n in report["notes"])
    # a condition's run identical to a budget run is that run: seed 0 of "short" is budget_hom_e1
    assert not (up / "short_hom_s0").exists() and _epochs(up / "short_hom_s1") == 1
    short = report["conditions"]["short"]["method_intervals"]["hom"]["seeds"]["top1"]
    e1 = [
        json.loads((up / r / "metrics.json").read_text())["metrics"]["top1"] for r in ("budget_hom_e1", "short_hom_s1")
    ]
    assert short["mean"] == pytest.approx(sum(e1) / 2)

    # --- the main comparison
    pd = {(d["method"], d["metric"]): d for d in report["paired_differences"]}
    assert {m for m, _ in pd} == {"het", "fwd"}
    for d in pd.values():
        assert {"lo", "hi", "verdict", "diffs", "p"} <= set(d) and d["n"] == 2
    hom = [json.loads((up / f"hom_s{s}" / "metrics.json").read_text())["metrics"]["nll"] for s in (0, 1)]
    fwd = [json.loads((up / f"fwd_s{s}" / "metrics.json").read_text())["metrics"]["nll"] for s in (0, 1)]
    assert pd[("fwd", "nll")]["diffs"] == pytest.approx([a - b for a, b in zip(fwd, hom)])
    assert set(report["image_level_differences"]) == {"het", "fwd"}
    assert len(report["image_level_differences"]["fwd"]["top1"]["mcnemar"]) == 2
    assert set(report["method_intervals"]) == {"hom", "het", "fwd"}
    assert report["method_intervals"]["hom"]["seeds"]["top1"]["mean"] == pytest.approx(
        sum(json.loads((up / f"hom_s{s}" / "metrics.json").read_text())["metrics"]["top1"] for s in (0, 1)) / 2
    )
    labels = [e["label"] for e in report["entries"]]
    assert "hom-fwd seed 0" in labels and "hom-fwd seed 1" in labels and "hom-fwd ensemble of 2" in labels
    # ensembles are told apart by their training loss too: fwd's is not mistaken for hom's
    assert set(report["ensemble_differences"]) == {"het", "hom-fwd"}
    assert _cfg(up / "fwd_s0")["train"]["loss"] == "forward"

    # --- records: one per finished upstream run, identical metrics
    rec = tmp_path / "results" / "plan" / "records"
    finished = {d.name for d in up.iterdir() if (d / "metrics.json").is_file()}
    assert {d.name for d in rec.iterdir()} == finished
    assert len(finished) == 15  # 3 grid + 6 final + 1 budget + 2 frontier + 3 condition
    for name in finished:
        assert (rec / name / "metrics.json").read_bytes() == (up / name / "metrics.json").read_bytes()
        assert not (rec / name / "checkpoints").exists()
    before = {name: (up / name / "metrics.json").read_bytes() for name in finished}

    # --- a machine that lost runs/: restored from the records, nothing trained
    shutil.rmtree(tmp_path / "runs" / "plan")
    import harness.upstream.train as T

    def no_training(*args, **kwargs):
        raise AssertionError("a recorded run was trained again")

    monkeypatch.setattr(T, "_train", no_training)
    lines = []
    out2 = run_experiment(_exp(tmp_path), progress=lines.append)
    assert any("[records] restored 15" in line for line in lines)
    assert {d.name for d in up.iterdir()} == finished
    for name in finished:
        assert (up / name / "metrics.json").read_bytes() == before[name]
        assert not (up / name / "checkpoints").exists()
    again = json.loads((out2 / "report.json").read_text())
    assert [r["value"] for r in again["grid"] if r["chosen"]] == [tau]
    assert again["budget_curves"]["points"]["het"][0]["run"].endswith(f"grid_het_t{tau:g}_s0")
    assert [e["label"] for e in again["entries"]] == labels


# --- the committed studies' run configs do not move ------------------------------------------------------------------
RECORDS = Path(__file__).resolve().parents[2] / "results" / "cifar10n" / "records"


def _planned_cifar10n() -> dict:
    """Every upstream config of the cifar10n experiment whose folder has a committed record, planned as
    ``harness run cifar10n`` plans it (with the τ the study chose: diag 0.5, het 1.3, pe 0.5)."""
    from harness.experiment.plan import _derived, _plan, frontier_plan
    from harness.io import path_under

    exp = load_experiment("cifar10n")
    root = path_under(exp.runs_root, exp.name)
    main = _plan(exp, root, "", exp.methods, exp.seeds, exp.temperature_grid, [], exp.grid_overrides)
    for method, tau in (("diag", 0.25), ("pe", 0.25)):  # the grid extensions past the lower edge
        main.grid_run(method, tau)
    main.chosen.update(diag=0.5, het=1.3, pe=0.5)
    configs = dict(main.configs)
    for method, tau in main.chosen.items():
        for seed in exp.seeds:
            folder = f"{method}_t{tau:g}_s{seed}"
            configs[folder] = main.final(method, seed, folder)
    for m in exp.budget.methods:
        for e in exp.budget.epochs:
            folder = _derived(main, m, f"budget_{m}_e{e}", [f"train.epochs={e}", f"train.eval_every={e}"])
            configs[f"budget_{m}_e{e}"] = main.configs[folder]
    for name, cond in exp.conditions.items():
        for m in cond.methods:
            for seed in cond.seeds:
                folder = _derived(main, m, f"{name}_{m}_s{seed}", list(cond.upstream_overrides), seed)
                configs[f"{name}_{m}_s{seed}"] = main.configs[folder]
    configs.update(frontier_plan(main, exp).configs)
    ml = exp.multilabel
    configs.update(
        {
            f"multilabel_{f}": c
            for f, c in _plan(
                exp, root, "multilabel_", ml.methods, ml.seeds, ml.temperature_grid, ml.upstream_overrides
            ).configs.items()
        }
    )
    return configs


@pytest.mark.skipif(not RECORDS.is_dir(), reason="no committed cifar10n records")
def test_planning_cifar10n_gives_the_configs_of_its_committed_records():
    """The committed records are reused by config equality: a change to the planner that moved any run's config
    would retrain the study. Every record's config.yaml must equal the config planned for its folder."""
    from harness.config import to_yaml
    from harness.records import _with_output_dir
    from harness.upstream.train import _same_config

    planned = _planned_cifar10n()
    records = sorted(p for p in RECORDS.iterdir() if (p / "config.yaml").is_file())
    assert len(records) >= 54
    for rec in records:  # compared as restore_record compares them: output_dir set to the folder restored into
        assert rec.name in planned, rec.name
        saved = _with_output_dir((rec / "config.yaml").read_text(), planned[rec.name].output_dir)
        assert _same_config(saved, to_yaml(planned[rec.name])), rec.name


def test_a_part_of_a_study_in_another_precision_is_noted():
    from harness.experiment.report_stage import precision_note

    assert precision_note("condition b", ["no"], ["no"]) is None
    note = precision_note("condition b", ["no"], ["bf16"])
    assert note.startswith("Note: condition b's runs trained in fp32, the main study's in bf16 (")
    assert precision_note("condition c", ["bf16", "no"], ["no", "bf16"]) is None
