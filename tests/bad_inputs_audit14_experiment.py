"""Bad inputs found by the fourteenth reliability audit in the experiment file (``audit14 <case id>``): a value
repeated in a list key (refused by the one rule of distinct values declared on each list field,
:func:`harness.rules.check_distinct`) and a frontier schedule that trains another schedule's runs or the main
study's. Every refusal comes before any work."""

from __future__ import annotations

from bad_inputs_audit8_experiment import _run

from bad_inputs import bad_input


# ------------------------------------------------------------------------------ A14-04: a value repeated in a list key
@bad_input(
    "experiment",
    "evaluate_methods=[hom, hom] (audit14 A14-04: accepted, the repeat dropped without a word)",
    ValueError,
    r"^evaluate_methods \['hom', 'hom'\] repeats a value \('hom' given twice: .*\): give distinct values, e\.g\. "
    r"evaluate_methods=\[hom\]",
)
def _evaluate_methods_repeated(tmp):
    _run(tmp, "evaluate_methods=[hom, hom]")


@bad_input(
    "experiment",
    "budget.methods=[hom, hom] and budget.epochs=[1, 1] (audit14 A14-04: accepted, the repeats dropped without a word)",
    ValueError,
    r"^budget\.epochs \[1, 1\] repeats a value \(1 given twice: .*\): give distinct values, e\.g\. "
    r"budget\.epochs=\[1\]",
)
def _budget_repeated(tmp):
    try:
        _run(tmp, "budget={methods: [hom, hom], epochs: [2]}")
    except ValueError as e:
        assert str(e).startswith("budget.methods ['hom', 'hom'] repeats a value"), e
    else:
        raise AssertionError("budget.methods=[hom, hom] accepted")
    _run(tmp, "budget={methods: [hom], epochs: [1, 1]}")


@bad_input(
    "experiment",
    "conditions.c1.methods=[hom, hom] (audit14 A14-04: accepted, the repeat dropped without a word)",
    ValueError,
    r"^conditions\.c1\.methods \['hom', 'hom'\] repeats a value .*e\.g\. conditions\.c1\.methods=\[hom\]",
)
def _condition_methods_repeated(tmp):
    _run(
        tmp,
        "conditions={c1: {description: x, upstream_overrides: [data.label_noise.rate=0.2], methods: [hom, hom], "
        "seeds: [0]}}",
    )


@bad_input(
    "experiment",
    "frontier.methods=[hom, hom] (audit14 A14-04: refused with wrong advice, 'rename method hom so that their run "
    "names differ')",
    ValueError,
    r"^frontier\.methods \['hom', 'hom'\] repeats a value .*give distinct values, e\.g\. frontier\.methods=\[hom\]",
)
def _frontier_methods_repeated(tmp):
    _run(tmp, "frontier={method: hom, schedules: {a: [optim.lr=0.1]}, methods: [hom, hom]}")


@bad_input(
    "experiment",
    "confusable_pairs=[[0, 1], [1, 0]] (audit14 A14-04: accepted, one unordered pair counted twice among the top "
    "pairs)",
    ValueError,
    r"^confusable_pairs \[\['0', '1'\], \['1', '0'\]\] repeats a value \(\['1', '0'\] is \['0', '1'\] again: .*\): "
    r"give distinct values, e\.g\. confusable_pairs=\[\[0, 1\]\]",
)
def _confusable_pair_twice(tmp):
    _run(tmp, "confusable_pairs=[[0, 1], [1, 0]]")


@bad_input(
    "experiment",
    "confusable_pairs=[[3, 3]], a class paired with itself (audit14 A14-04: accepted)",
    ValueError,
    r"^confusable_pairs \[\['3', '3'\]\] repeats a value \(the pair \['3', '3'\] names class 3 twice: a pair holds "
    r"two distinct classes\): give distinct values",
)
def _confusable_pair_of_one_class(tmp):
    _run(tmp, "confusable_pairs=[[3, 3]]")


# ------------------------------------------------------------------------------ A14-05: frontier schedules alike
@bad_input(
    "experiment",
    "two frontier schedules with the same overrides (audit14 A14-05: accepted, one schedule shown as two points of "
    "the frontier)",
    ValueError,
    r"^frontier\.schedules\.b=\[optim\.lr=0\.1\] trains the same runs as frontier\.schedules\.a=\[optim\.lr=0\.1\] "
    r"\(hom at seed 0: the same config\), so the frontier would show one schedule as two points: remove "
    r"frontier\.schedules\.b, or change a setting in it",
)
def _frontier_schedules_alike(tmp):
    _run(tmp, "frontier={method: hom, schedules: {a: [optim.lr=0.1], b: [optim.lr=0.1]}}")


@bad_input(
    "experiment",
    "a frontier schedule [] (the main study's own schedule; audit14 A14-05: accepted, the chosen point trained again "
    "and shown as a schedule of its own)",
    ValueError,
    r"^frontier\.schedules\.a=\[\] changes nothing: it sets no setting, so its runs would be the main study's \(hom "
    r"at seed 0: the same config\), which the frontier shows already .*: change a setting in frontier\.schedules\.a, "
    r"or remove the schedule",
)
def _frontier_schedule_of_the_main_study(tmp):
    _run(tmp, "frontier={method: hom, schedules: {a: []}}")
