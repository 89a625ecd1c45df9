"""Bad inputs found by the twentieth reliability audit in the experiment file (``audit20 <case id>``): a condition or
frontier schedule of settings that change nothing a run trains (trackers, data reading, the checkpoint metric), the
numbers of the experiment's clock file, and an experiment whose folders are, or hold, another experiment's roots.
Every refusal comes before any work."""

from __future__ import annotations

import json
from pathlib import Path

from bad_inputs_audit8_experiment import _run
from bad_inputs_audit19_experiment import _run_with_clock

from bad_inputs import bad_input, handled

_CHANGES_NOTHING = r"changes nothing: {key} sets {what}, so {whose}"
_FILES = r"where a run's files and curves go, not what it trains"
_READING = r"how a run's data is read, not which data or what it trains"
_BEST = (
    r"which evaluation keeps checkpoints/best\.pt, not what a run trains \(the study reads each run's final model\.pt\)"
)
_CONDITION = r"the runs of condition c would be the main study's"
_SCHEDULE = r"its runs would be the main study's"


def _condition(tmp: Path, override: str) -> None:
    _run(tmp, f'conditions={{c: {{description: x, upstream_overrides: ["{override}"], methods: [hom], seeds: [0]}}}}')


def _schedule(tmp: Path, override: str) -> None:
    _run(tmp, f'frontier={{methods: [hom], schedules: {{a: ["{override}"]}}}}')


# ------------------------------------------------------------------------------ A20-03: settings that train nothing
@bad_input(
    "experiment",
    "a condition with upstream_overrides [data.eval_batch_size=16] (audit20 A20-03: accepted, the main study trained "
    "again and reported as a condition compared with itself)",
    ValueError,
    r"^conditions\.c\.upstream_overrides=\[data\.eval_batch_size=16\] "
    + _CHANGES_NOTHING.format(key=r"data\.eval_batch_size", what=_READING, whose=_CONDITION),
)
def _condition_of_reading(tmp):
    _condition(tmp, "data.eval_batch_size=16")


@bad_input(
    "experiment",
    "a condition with upstream_overrides [train.log_with=[tensorboard]] (audit20 A20-03: accepted, a condition that "
    "only logs elsewhere)",
    ValueError,
    r"^conditions\.c\.upstream_overrides=\[train\.log_with=\[tensorboard\]\] "
    + _CHANGES_NOTHING.format(key=r"train\.log_with", what=_FILES, whose=_CONDITION),
)
def _condition_of_trackers(tmp):
    _condition(tmp, "train.log_with=[tensorboard]")


@bad_input(
    "experiment",
    "a condition with upstream_overrides [train.log_model=true] (audit20 A20-03: accepted)",
    ValueError,
    r"^conditions\.c\.upstream_overrides=\[train\.log_model=true\] "
    + _CHANGES_NOTHING.format(key=r"train\.log_model", what=_FILES, whose=_CONDITION),
)
def _condition_of_log_model(tmp):
    _condition(tmp, "train.log_model=true")


@bad_input(
    "experiment",
    "a condition with upstream_overrides [train.best_metric=top1] (audit20 A20-03: accepted; best_metric only picks "
    "checkpoints/best.pt, the study reads model.pt)",
    ValueError,
    r"^conditions\.c\.upstream_overrides=\[train\.best_metric=top1\] "
    + _CHANGES_NOTHING.format(key=r"train\.best_metric", what=_BEST, whose=_CONDITION),
)
def _condition_of_best_metric(tmp):
    _condition(tmp, "train.best_metric=top1")


@bad_input(
    "experiment",
    "a frontier schedule [train.log_with=[tensorboard]] (audit20 A20-03: accepted, the main study's point plotted again "
    "as another schedule)",
    ValueError,
    r"^frontier\.schedules\.a=\[train\.log_with=\[tensorboard\]\] "
    + _CHANGES_NOTHING.format(key=r"train\.log_with", what=_FILES, whose=_SCHEDULE),
)
def _schedule_of_trackers(tmp):
    _schedule(tmp, "train.log_with=[tensorboard]")


@bad_input(
    "experiment",
    "a frontier schedule [train.log_model=true] (audit20 A20-03: accepted)",
    ValueError,
    r"^frontier\.schedules\.a=\[train\.log_model=true\] "
    + _CHANGES_NOTHING.format(key=r"train\.log_model", what=_FILES, whose=_SCHEDULE),
)
def _schedule_of_log_model(tmp):
    _schedule(tmp, "train.log_model=true")


@bad_input(
    "experiment",
    "a frontier schedule [train.best_metric=top1] (audit20 A20-03: accepted)",
    ValueError,
    r"^frontier\.schedules\.a=\[train\.best_metric=top1\] "
    + _CHANGES_NOTHING.format(key=r"train\.best_metric", what=_BEST, whose=_SCHEDULE),
)
def _schedule_of_best_metric(tmp):
    _schedule(tmp, "train.best_metric=top1")


@bad_input(
    "experiment",
    "two conditions [train.epochs=2] and [train.epochs=2, train.log_model=true] (audit20 A20-03, conditions apart: "
    "accepted, one condition trained twice and reported as two)",
    ValueError,
    r"^conditions\.d\.upstream_overrides=\[train\.epochs=2, train\.log_model=true\] trains the same runs as "
    r"conditions\.c\.upstream_overrides=\[train\.epochs=2\]",
)
def _conditions_apart_by_log_model(tmp):
    _run(
        tmp,
        "conditions={c: {description: x, upstream_overrides: [train.epochs=2], methods: [hom], seeds: [0]}, "
        "d: {description: y, upstream_overrides: [train.epochs=2, train.log_model=true], methods: [hom], seeds: [0]}}",
    )


# ------------------------------------------------------------------------------ A20-04: the clock's numbers
_DAMAGED = r"the file is damaged; move it away \(the experiment's elapsed time then restarts from this session\)"


@bad_input(
    "experiment",
    'sessions.json holding [{"start": NaN, "last": 1, "excluded": 0}] (audit20 A20-04: rc 0, the report said '
    '"Wall time: nan minutes")',
    ValueError,
    r"sessions\.json \(the experiment's clock: .*\) holds \{'start': nan, 'last': 1, 'excluded': 0\} as session 0, "
    r"with a number that is not finite .*: " + _DAMAGED,
)
def _clock_of_nan(tmp):
    _run_with_clock(tmp, '[{"start": NaN, "last": 1, "excluded": 0}]')


@bad_input(
    "experiment",
    'sessions.json holding [{"start": 1, "last": Infinity, "excluded": 0}] (audit20 A20-04: "inf minutes")',
    ValueError,
    r"holds \{'start': 1, 'last': inf, 'excluded': 0\} as session 0, with a number that is not finite .*: " + _DAMAGED,
)
def _clock_of_infinity(tmp):
    _run_with_clock(tmp, '[{"start": 1, "last": Infinity, "excluded": 0}]')


@bad_input(
    "experiment",
    'sessions.json holding [{"start": 100, "last": 1, "excluded": 0}] (audit20 A20-04: "-1.6 minutes")',
    ValueError,
    r"holds \{'start': 100, 'last': 1, 'excluded': 0\} as session 0, with a start after its last tick \(start and "
    r"last are seconds since the epoch, start <= last; .*\): " + _DAMAGED,
)
def _clock_start_after_last(tmp):
    _run_with_clock(tmp, '[{"start": 100, "last": 1, "excluded": 0}]')


@bad_input(
    "experiment",
    'sessions.json holding [{"start": 1, "last": 5, "excluded": -1e9}] (audit20 A20-04: "16666666.7 minutes")',
    ValueError,
    r"holds \{'start': 1, 'last': 5, 'excluded': -1000000000\.0\} as session 0, with a negative excluded time .*: "
    + _DAMAGED,
)
def _clock_negative_excluded(tmp):
    _run_with_clock(tmp, '[{"start": 1, "last": 5, "excluded": -1e9}]')


@bad_input(
    "experiment",
    'sessions.json holding [{"start": 1, "last": 5, "excluded": 100}] (audit20 A20-04: a negative wall time)',
    ValueError,
    r"holds \{'start': 1, 'last': 5, 'excluded': 100\} as session 0, with more excluded time than the session lasted "
    r"\(4 s\) .*excluded is seconds, from 0 to last - start\): " + _DAMAGED,
)
def _clock_excluded_past_span(tmp):
    _run_with_clock(tmp, '[{"start": 1, "last": 5, "excluded": 100}]')


# ------------------------------------------------------------------------------ A20-06: folders holding other roots
_LOCK = r"runs_root \(it holds \.harness-run\.lock\)"


def _report(folder: Path, name: str) -> None:
    """An experiment's report folder ``folder/name`` (its report.json, of the report schema)."""
    (folder / name).mkdir(parents=True)
    (folder / name / "report.json").write_text(json.dumps({"schema": "harness.report/1", "name": name}, indent=1))


@bad_input(
    "experiment",
    "runs_root=o with o/tiny another experiment's runs_root (its lock; audit20 A20-06: accepted, trained; the other "
    "experiment's runs then lay inside this one's folder, and it was locked out of them)",
    ValueError,
    r"^runs_root=.*/o and name=tiny: this experiment's folder .*/o/tiny is the " + _LOCK + r" of another experiment, "
    r"whose runs or reports would then lie inside this experiment's folder .*: give this experiment a folder apart, "
    r"another name or runs_root",
)
def _folder_is_a_runs_root(tmp):
    (tmp / "o" / "tiny").mkdir(parents=True)
    (tmp / "o" / "tiny" / ".harness-run.lock").write_text("")
    _run(tmp, runs="o")


@bad_input(
    "experiment",
    "runs_root=o with o/tiny/sub another experiment's runs_root (audit20 A20-06: accepted)",
    ValueError,
    r"^runs_root=.*/o and name=tiny: this experiment's folder .*/o/tiny holds .*/o/tiny/sub, which is the " + _LOCK,
)
def _folder_holds_a_runs_root(tmp):
    (tmp / "o" / "tiny" / "sub").mkdir(parents=True)
    (tmp / "o" / "tiny" / "sub" / ".harness-run.lock").write_text("")
    _run(tmp, runs="o")


@bad_input(
    "experiment",
    "runs_root=o with o/tiny another experiment's results_root (o/tiny/cx/report.json; audit20 A20-06: accepted)",
    ValueError,
    r"^runs_root=.*/o and name=tiny: this experiment's folder .*/o/tiny is the results_root \(it holds "
    r"cx/report\.json, the report of experiment 'cx'\) of another experiment",
)
def _folder_is_a_results_root(tmp):
    _report(tmp / "o" / "tiny", "cx")
    _run(tmp, runs="o")


@bad_input(
    "experiment",
    "runs_root=<another experiment's results_root> (audit20 A20-06: accepted by validate_experiment)",
    ValueError,
    r"^runs_root=.*/o is the results_root \(it holds cx/report\.json, the report of experiment 'cx'\) of another "
    r"experiment: one folder would hold runs of one study and reports of another .*: give runs_root a folder of its "
    r"own",
)
def _runs_root_a_results_root(tmp):
    _report(tmp / "o", "cx")
    _run(tmp, runs="o")


@bad_input(
    "experiment",
    "results_root=<another experiment's runs_root> (audit20 A20-06: accepted by validate_experiment)",
    ValueError,
    r"^results_root=.*/o is the " + _LOCK + r" of another experiment: one folder would hold runs of one study and "
    r"reports of another .*: give results_root a folder of its own, e.g\. results_root=.*/o/results",
)
def _results_root_a_runs_root(tmp):
    (tmp / "o").mkdir()
    (tmp / "o" / ".harness-run.lock").write_text("")
    _run(tmp, results="o")


@bad_input(
    "experiment",
    "results_root=res with res/tiny another experiment's runs_root (the report's folder; audit20 A20-06: accepted)",
    ValueError,
    r"^results_root=.*/res and name=tiny: this experiment's report's folder .*/res/tiny is the " + _LOCK,
)
def _report_folder_a_runs_root(tmp):
    (tmp / "res" / "tiny").mkdir(parents=True)
    (tmp / "res" / "tiny" / ".harness-run.lock").write_text("")
    _run(tmp)


@bad_input(
    "experiment",
    "harness run --sync-records with runs_root=o, o/tiny another experiment's runs_root (audit20 A20-06, the same "
    "rule for the records' sync: it took the lock and wrote there)",
    ValueError,
    r"^runs_root=.*/o and name=tiny: this experiment's folder .*/o/tiny is the " + _LOCK,
)
def _sync_records_in_a_runs_root(tmp):
    from bad_inputs_audit8_experiment import TINY

    from harness.experiment import load_experiment
    from harness.experiment.stages import sync_records_locked

    (tmp / "o" / "tiny").mkdir(parents=True)
    (tmp / "o" / "tiny" / ".harness-run.lock").write_text("")
    (tmp / "tiny.yaml").write_text(TINY)
    roots = (f"runs_root={tmp / 'o'}", f"results_root={tmp / 'res'}", "records=true")
    sync_records_locked(load_experiment(str(tmp / "tiny.yaml"), roots))


@handled(
    "experiment",
    "a runs_root shared with another experiment (its lock, its folder cx beside) and a results_root shared with its "
    "report (audit20 A20-06: still taken; only a folder of this experiment's that is another's root is refused)",
    r"^roots shared with experiment cx: taken$",
)
def _roots_shared(tmp):
    from bad_inputs_audit8_experiment import TINY

    from harness.experiment import load_experiment
    from harness.experiment.roots import check_outside_experiments

    (tmp / "o" / "cx").mkdir(parents=True)
    (tmp / "o" / ".harness-run.lock").write_text("")
    (tmp / "o" / "cx" / "sessions.json").write_text("[]")
    _report(tmp / "res", "cx")
    (tmp / "tiny.yaml").write_text(TINY)
    check_outside_experiments(
        load_experiment(str(tmp / "tiny.yaml"), (f"runs_root={tmp / 'o'}", f"results_root={tmp / 'res'}"))
    )
    return "roots shared with experiment cx: taken"


# ------------------------------------------------------------------------------ A20-10: a condition on other data
@handled(
    "experiment",
    "a condition with upstream_overrides [data.eval_split=val, data.heldout_split=null] (audit20 A20-10: its section "
    "was titled as the main study's, its numbers on 50 val images read beside the main study's on 50 test images)",
    r"^condition c1's section: .*scored on scikit-learn digits, val split .*\(data\.eval_split=val, "
    r"data\.heldout_split=null\), not on the main study's scikit-learn digits, test split",
)
def _condition_on_other_split(tmp):
    from harness.experiment.sections import condition_label

    label = condition_label(
        "c1",
        "x",
        ["data.eval_split=val", "data.heldout_split=null"],
        "scikit-learn digits, val split (50 images 8x8)",
        "scikit-learn digits, test split (50 images 8x8)",
    )
    assert label.startswith("Condition c1 (x), scored on scikit-learn digits, val split"), label
    return f"condition c1's section: {label}"


@handled(
    "experiment",
    "a condition with upstream_overrides [data.eval_resize=40] (audit20 A20-10: another view of the same images, its "
    "section titled as the main study's)",
    r"^condition c2's section: Condition c2 \(data\.eval_resize=40\), scored on .* \(data\.eval_resize=40\), not on "
    r"the main study's",
)
def _condition_on_other_view(tmp):
    from harness.experiment.sections import condition_label

    same = "scikit-learn digits, test split (50 images 8x8)"
    label = condition_label("c2", "", ["data.eval_resize=40"], same, same)
    plain = condition_label("c3", "", ["optim.lr=0.1"], same, same)
    assert plain == "Condition c3 (optim.lr=0.1)", plain  # a training condition: titled as before
    return f"condition c2's section: {label}"
