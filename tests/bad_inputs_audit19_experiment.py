"""Bad inputs found by the nineteenth reliability audit in the experiment file (``audit19 <case id>``): the frontier's
two spellings of its methods given together, a frontier schedule or condition that sets only how often a run is
monitored, the experiment's clock file, the shift's split, and a runs_root inside another experiment's folder. Every
refusal comes before any work."""

from __future__ import annotations

from bad_inputs_audit8_experiment import _run

from bad_inputs import bad_input


# ------------------------------------------------------------------------------ A19-08: frontier.method beside methods
@bad_input(
    "experiment",
    "frontier={methods: [hom], method: het, schedules: {a: [optim.lr=0.1]}} (audit19 A19-08: accepted, "
    "frontier.method ignored without a word though het is no method of the experiment)",
    ValueError,
    r"^frontier\.method=het is the older single-method spelling and frontier\.methods=\[hom\] is given too, and the "
    r"frontier reads only one of them: keep one \(frontier\.methods: \[het\] for that method alone, or remove "
    r"frontier\.method\)",
)
def _frontier_method_beside_methods(tmp):
    _run(tmp, "frontier={methods: [hom], method: het, schedules: {a: [optim.lr=0.1]}}")


@bad_input(
    "experiment",
    "frontier={methods: [hom], method: hom, ...} (audit19 A19-08: accepted; the two spellings agree here, but one is "
    "still read and the other not)",
    ValueError,
    r"^frontier\.method=hom is the older single-method spelling and frontier\.methods=\[hom\] is given too.*keep one",
)
def _frontier_method_beside_methods_alike(tmp):
    _run(tmp, "frontier={methods: [hom], method: hom, schedules: {a: [optim.lr=0.1]}}")


# ------------------------------------------------------------------------------ A19-14: monitoring keys only
@bad_input(
    "experiment",
    "a frontier schedule [train.log_every=7] (audit19 A19-14: accepted, the main study's runs trained again and shown "
    "as a second schedule)",
    ValueError,
    r"^frontier\.schedules\.a=\[train\.log_every=7\] changes nothing: train\.log_every sets how often a run is "
    r"evaluated, logged or checkpointed, not what it trains, so its runs would be the main study's .*: change a "
    r"setting in frontier\.schedules\.a, or remove the schedule",
)
def _frontier_schedule_of_monitoring(tmp):
    _run(tmp, "frontier={methods: [hom], schedules: {a: [train.log_every=7]}}")


@bad_input(
    "experiment",
    "a frontier schedule [train.epochs=1, train.eval_every=2] (the main study's epochs; audit19 A19-14: accepted)",
    ValueError,
    r"^frontier\.schedules\.a=\[train\.epochs=1, train\.eval_every=2\] changes nothing: train\.epochs already has "
    r"that value in the main study's runs; train\.eval_every sets how often a run is evaluated, logged or "
    r"checkpointed, not what it trains",
)
def _frontier_schedule_of_main_and_monitoring(tmp):
    _run(tmp, "frontier={methods: [hom], schedules: {a: [train.epochs=1, train.eval_every=2]}}")


@bad_input(
    "experiment",
    "two frontier schedules [train.epochs=2] and [train.epochs=2, train.checkpoint_every=1] (audit19 A19-14: "
    "accepted, one schedule shown as two points)",
    ValueError,
    r"^frontier\.schedules\.b=\[train\.epochs=2, train\.checkpoint_every=1\] trains the same runs as "
    r"frontier\.schedules\.a=\[train\.epochs=2\]",
)
def _frontier_schedules_apart_by_monitoring(tmp):
    _run(
        tmp,
        "frontier={methods: [hom], schedules: {a: [train.epochs=2], b: [train.epochs=2, train.checkpoint_every=1]}}",
    )


@bad_input(
    "experiment",
    "a condition with upstream_overrides [train.log_every=3] (audit19 A19-14, the same rule for conditions: accepted, "
    "the main study trained again and reported as a condition)",
    ValueError,
    r"^conditions\.c\.upstream_overrides=\[train\.log_every=3\] changes nothing: train\.log_every sets how often a "
    r"run is evaluated, logged or checkpointed, not what it trains, so the runs of condition c would be the main "
    r"study's",
)
def _condition_of_monitoring(tmp):
    _run(tmp, "conditions={c: {description: x, upstream_overrides: [train.log_every=3], methods: [hom], seeds: [0]}}")


# ------------------------------------------------------------------------------ A19-09: the experiment's clock file
def _run_with_clock(tmp, text: str) -> None:
    """The tiny experiment with ``text`` in its ``sessions.json`` (``<runs_root>/tiny/``)."""
    (tmp / "r" / "tiny").mkdir(parents=True)
    (tmp / "r" / "tiny" / "sessions.json").write_text(text)
    _run(tmp)


@bad_input(
    "experiment",
    'sessions.json holding [{"start": "yesterday", "last": 1}] (audit19 A19-09: every stage ran, then a TypeError '
    "traceback at the report stage, no report)",
    ValueError,
    r"sessions\.json \(the experiment's clock: a list of its sessions, each \{start, last, excluded\} in seconds\) "
    r"holds \{'start': 'yesterday', 'last': 1\} as session 0, which is not an object with numeric start and last .*"
    r"the file is damaged; move it away \(the experiment's elapsed time then restarts from this session\)",
)
def _clock_of_strings(tmp):
    _run_with_clock(tmp, '[{"start": "yesterday", "last": 1}]')


@bad_input(
    "experiment",
    'sessions.json holding {"a": 1} (audit19 A19-09: AttributeError traceback)',
    ValueError,
    r"sessions\.json \(the experiment's clock\) holds an object where a JSON array \[\.\.\.\] belongs: the file is "
    r"damaged; move it away",
)
def _clock_of_an_object(tmp):
    _run_with_clock(tmp, '{"a": 1}')


@bad_input(
    "experiment",
    "sessions.json holding '[' (audit19 A19-09: 'Error: Expecting value: line 2 column 1 (char 2)', no file named)",
    ValueError,
    r"tiny/sessions\.json \(the experiment's clock\) is not valid JSON \(Expecting value.*\): the file is damaged; "
    r"move it away",
)
def _clock_not_json(tmp):
    _run_with_clock(tmp, "[\n")


# ------------------------------------------------------------------------------ A19-13: the shift's split
@bad_input(
    "experiment",
    "shift={..., split: train} (audit19 A19-13: accepted; the shift section's clean and corrupted numbers were on the "
    "100 images the runs trained on, reported as the evaluation split's)",
    ValueError,
    r"^shift: split=train \(the experiment's shift\.split, ShiftSettings\.split: the split the shift sets are drawn "
    r"from, read as the run's evaluation split would be, so the rule of data\.eval_split holds\): "
    r"data\.eval_split=train is also data\.train_split: "
    r"the model would be scored on the images it was trained on .*; or leave the split unset",
)
def _shift_split_of_training(tmp):
    _run(tmp, "shift={corruptions: [gaussian_noise], severities: [1], ood: [], split: train, examples: 30}")


@bad_input(
    "shift",
    "ShiftSettings(split='train') for a digits run trained on train (predict_run's check_settings; audit19 A19-13: "
    "accepted, training images scored as the evaluation split)",
    ValueError,
    r"^split=train \(the experiment's shift\.split, ShiftSettings\.split: .*\): data\.eval_split=train is also "
    r"data\.train_split",
)
def _shift_settings_split_of_training(tmp):
    from harness.data.config import DataConfig
    from harness.shift.settings import ShiftSettings, check_settings

    settings = ShiftSettings(corruptions=["gaussian_noise"], severities=[1], ood=[], examples=30, split="train")
    check_settings(settings, DataConfig(source="digits", heldout_split="val"))


# ------------------------------------------------------------------------------ A19-17: runs_root in an experiment
def _run_inside_experiment(tmp, runs: str) -> None:
    """The tiny experiment with ``runs_root=tmp/<runs>``, ``tmp/o/cx`` being experiment cx's folder (its clock)."""
    (tmp / "o" / "cx" / "upstream").mkdir(parents=True)
    (tmp / "o" / "cx" / "sessions.json").write_text("[]")
    _run(tmp, runs=runs)


@bad_input(
    "experiment",
    "runs_root=<experiment cx's folder> (audit19 A19-17: accepted, trained; cx's folder then held this experiment's)",
    ValueError,
    r"^runs_root=.*/o/cx is the folder of another experiment, .*/o/cx \(it holds sessions\.json: experiment 'cx' of "
    r"runs_root .*/o\).*: give runs_root a folder outside .*/o/cx, e\.g\. runs_root=.*/o \(several experiments may "
    r"share one runs_root\)",
)
def _runs_root_an_experiment(tmp):
    _run_inside_experiment(tmp, "o/cx")


@bad_input(
    "experiment",
    "runs_root=<experiment cx's folder>/upstream, its run tree (audit19 A19-17: accepted, trained inside cx's runs)",
    ValueError,
    r"^runs_root=.*/o/cx/upstream is inside the folder of another experiment, .*/o/cx \(it holds sessions\.json",
)
def _runs_root_in_an_experiment(tmp):
    _run_inside_experiment(tmp, "o/cx/upstream")
