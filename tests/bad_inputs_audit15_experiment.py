"""Bad inputs found by the fifteenth reliability audit in the experiment file (``audit15 <case id>``): two conditions
that train the same runs, a frontier schedule that changes the data its point is trained or scored on, and a transfer
study that compares a method with itself. Every refusal comes before any work."""

from __future__ import annotations

from pathlib import Path

from bad_inputs_audit8_experiment import _run

from bad_inputs import bad_input


# ------------------------------------------------------------------------------ A15-06: two conditions alike
@bad_input(
    "experiment",
    "two conditions with the same overrides, rate=0.2 and rate=0.20 (audit15 A15-06: accepted, one condition "
    "trained twice and reported as two)",
    ValueError,
    r"^conditions\.c2\.upstream_overrides=\[data\.label_noise\.rate=0\.20\] trains the same runs as "
    r"conditions\.c1\.upstream_overrides=\[data\.label_noise\.rate=0\.2\] \(hom at seed 0: the same config\), so they "
    r"would be trained twice and reported as two conditions, one a copy of the other: remove condition c2 \(add its "
    r"methods and seeds to conditions\.c1\), or change a setting in conditions\.c2\.upstream_overrides",
)
def _conditions_alike(tmp):
    _run(
        tmp,
        "conditions={c1: {description: x, upstream_overrides: [data.label_noise.rate=0.2], methods: [hom], "
        "seeds: [0, 1]}, c2: {description: y, upstream_overrides: [data.label_noise.rate=0.20], methods: [hom], "
        "seeds: [0]}}",
    )


# ------------------------------------------------------------------------------ A15-07: a schedule of other data
@bad_input(
    "experiment",
    "frontier.schedules.a=[data.limit_eval=20], a schedule scored on other test images (audit15 A15-07: accepted, "
    "shown as another point of the accuracy-vs-cost frontier)",
    ValueError,
    r"^frontier\.schedules\.a sets data\.limit_eval \(data\.limit_eval=20\), which is not a training schedule's "
    r"setting: .*scored on the same evaluation data, so a schedule sets only train\.\*, optim\.\*, .*: remove "
    r"data\.limit_eval from frontier\.schedules\.a, or study other data as a condition "
    r"\(conditions\.<name>\.upstream_overrides: \[data\.limit_eval=20\]\)",
)
def _frontier_schedule_of_other_test_data(tmp):
    _run(tmp, "frontier={method: hom, schedules: {a: [data.limit_eval=20]}}")


@bad_input(
    "experiment",
    "frontier.schedules.b=[data.label_noise.rate=0.1], a schedule trained on other labels (audit15 A15-07: accepted)",
    ValueError,
    r"^frontier\.schedules\.b sets data\.label_noise\.rate \(data\.label_noise\.rate=0\.1\), which is not a training "
    r"schedule's setting: .*trained on the same examples and labels.*remove data\.label_noise\.rate from "
    r"frontier\.schedules\.b, or study other data as a condition",
)
def _frontier_schedule_of_other_labels(tmp):
    _run(
        tmp,
        "frontier={method: hom, schedules: {a: [optim.lr=0.05, data.batch_size=32], b: [data.label_noise.rate=0.1]}}",
    )


# ------------------------------------------------------------------------------ A15-08: a method compared with itself
def _transfer(tmp: Path, override: str) -> None:
    """``harness run cifar10n_transfer <override>`` with its folders under ``tmp``; it must refuse before any work
    (the experiment's lock, a record restored)."""
    from harness.experiment import load_experiment
    from harness.experiment.transfer import run_transfer

    roots = [f"runs_root={tmp / 'r'}", f"results_root={tmp / 'res'}", f"reference_root={tmp / 'ref'}"]
    try:
        run_transfer(load_experiment("cifar10n_transfer", (override, *roots)), progress=lambda s: None)
    finally:
        assert not (tmp / "r").exists(), "work started before the error"


@bad_input(
    "transfer",
    "transfer.primary=[pe, hom], the reference hom among the primary methods (audit15 A15-08: accepted, hom − hom "
    "reported and counted in the primary Holm family)",
    ValueError,
    r"^transfer\.primary=\[pe, hom\] holds transfer\.reference=hom, so it compares hom with itself \(hom − hom: the "
    r"difference is 0 by construction.*\): a comparison is of two methods: remove hom from transfer\.primary .*, or "
    r"set transfer\.reference to another method",
)
def _transfer_primary_holds_reference(tmp):
    _transfer(tmp, "transfer.primary=[pe, hom]")


@bad_input(
    "transfer",
    "transfer.secondary={het_e30: het_e30}, a method paired with itself (audit15 A15-08: accepted)",
    ValueError,
    r"^transfer\.secondary\.het_e30=het_e30 compares het_e30 with itself .*: give het_e30 another method as its "
    r"reference, or remove transfer\.secondary\.het_e30",
)
def _transfer_secondary_with_itself(tmp):
    _transfer(tmp, "transfer.secondary={het_e30: het_e30}")


@bad_input(
    "transfer",
    "transfer.methods.diag=[hom_s0, hom_s1, hom_s2], hom's own records (audit15 A15-08: accepted, diag − hom "
    "reported as a comparison)",
    ValueError,
    r"^transfer\.methods\.diag=\[hom_s0, hom_s1, hom_s2\] lists record\(s\) hom_s0, hom_s1, hom_s2 of "
    r"transfer\.methods\.hom=\[hom_s0, hom_s1, hom_s2\]: a record is one upstream model and belongs to one method.*: "
    r"give transfer\.methods\.diag its own records \(one per upstream seed\), or remove it",
)
def _transfer_methods_share_records(tmp):
    _transfer(tmp, "transfer.methods.diag=[hom_s0, hom_s1, hom_s2]")
