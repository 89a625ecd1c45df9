"""Bad inputs found by the thirteenth reliability audit in the experiment file (``audit13 <case id>``): a τ grid no
method reads, a condition that changes nothing, a transfer of one-image passes for a BatchNorm backbone and a
runs_root inside another run's folder. Every refusal comes before any work."""

from __future__ import annotations

from bad_inputs_audit8_experiment import _run

from bad_inputs import bad_input


# ------------------------------------------------------------------------------ A13-06: a τ grid no method reads
@bad_input(
    "experiment",
    "temperature_grid=[1,2] with no noisy method (audit13 A13-06: accepted, never read: the user believes τ was tuned)",
    ValueError,
    r"^temperature_grid=\[1\.0, 2\.0\] tunes the τ of methods with noise only .*no method of this experiment has "
    r"noise \(hom: covariance none\), so it would be ignored .*: add a method with noise or drop the grid",
)
def _temperature_grid_without_noise(tmp):
    _run(tmp, "temperature_grid=[1,2]")


@bad_input(
    "experiment",
    "multilabel.temperature_grid=[1,2] with no noisy multi-label method (audit13 A13-06: accepted, never read)",
    ValueError,
    r"^multilabel\.temperature_grid=\[1\.0, 2\.0\] tunes the τ of methods with noise only .*no method of "
    r"multilabel\.methods has noise \(mh: covariance none\).*add a method with noise or drop the grid",
)
def _multilabel_temperature_grid_without_noise(tmp):
    _run(
        tmp,
        "multilabel={upstream_overrides: [train.best_metric=sigmoid_nll], methods: {mh: {covariance: none, link: sigmoid}}, "
        "seeds: [0], temperature_grid: [1, 2]}",
    )


# ------------------------------------------------------------------------------ A13-14: a condition that changes nothing
@bad_input(
    "experiment",
    "a condition whose override is the base's value (audit13 A13-14: rc 0, its run was the main run, reported as "
    "its own condition)",
    ValueError,
    r"^conditions\.c1\.upstream_overrides=\[data\.label_noise\.rate=0\.3\] changes nothing: data\.label_noise\.rate "
    r"already has that value in the main study's runs, so the runs of condition c1 would be the main study's .* "
    r"change a setting in conditions\.c1\.upstream_overrides, or remove the condition",
)
def _condition_same_value(tmp):
    _run(
        tmp,
        "conditions={c1: {description: x, upstream_overrides: [data.label_noise.rate=0.3], methods: [hom], "
        "seeds: [0]}}",
    )


@bad_input(
    "experiment",
    "a condition with upstream_overrides: [] (audit13 A13-14: rc 0, reported as its own condition)",
    ValueError,
    r"^conditions\.c1\.upstream_overrides=\[\] changes nothing: it sets no setting, so the runs of condition c1 "
    r"would be the main study's .*remove the condition",
)
def _condition_no_overrides(tmp):
    _run(tmp, "conditions={c1: {description: x, upstream_overrides: [], methods: [hom], seeds: [0]}}")


# ------------------------------------------------------------------------------ micro_batch=1, a BatchNorm backbone
@bad_input(
    "experiment",
    "downstream.settings.micro_batch=1 with a BatchNorm backbone (audit13, found by a fixer: refused only when the "
    "transfer stage started, after the upstream training)",
    ValueError,
    r"^downstream\.settings\.micro_batch=1 is the images of one fine-tuning forward pass .*backbone test_resnet .*"
    r"BatchNorm layer.*use downstream\.settings\.micro_batch=2 or more",
)
def _micro_batch_one_batch_norm(tmp):
    _run(tmp, "downstream={tasks: [demo], preset: demo, settings: {micro_batch: 1}}")


# ------------------------------------------------------------------------------ runs_root inside a run folder
@bad_input(
    "experiment",
    "runs_root inside an existing run folder (audit13, found by a fixer: refused with upstream's message naming "
    "output_dir=..., a key an experiment cannot set)",
    ValueError,
    r"^runs_root=.*old.*is inside the run folder .*old \(it holds run\.json\).*give runs_root a folder outside",
)
def _runs_root_inside_run(tmp):
    (tmp / "old").mkdir()
    (tmp / "old" / "run.json").write_text("{}\n")
    _run(tmp, runs="old/r")


@bad_input(
    "experiment",
    "results_root inside an existing downstream sweep folder (audit13, found by a fixer: refused naming output_dir "
    "or not at all)",
    ValueError,
    r"^results_root=.*sw.*is inside the downstream sweep folder .*sw \(it holds sweep\.json\).*give results_root a "
    r"folder outside",
)
def _results_root_inside_sweep(tmp):
    (tmp / "sw").mkdir()
    (tmp / "sw" / "sweep.json").write_text("{}\n")
    _run(tmp, results="sw/res")
