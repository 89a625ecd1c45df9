"""Bad inputs found by the eighth reliability audit in the experiment file (``audit8 <case id>``): overrides of the
settings the experiment sets for every run, a report folder that collides with the runs, two identical methods and
downstream settings left unchecked. Every refusal comes before any run folder is made."""

from __future__ import annotations

from pathlib import Path

from bad_inputs import bad_input

TINY = (
    "name: tiny\nupstream_overrides: [train.epochs=1, train.eval_every=1, data.limit_train=128, data.limit_eval=64]\n"
    "methods: {hom: {covariance: none}}\nseeds: [0]\nensemble_sizes: []\nrecords: false\nworkers: 1\n"
    "downstream: {tasks: []}\n"
)


def _run(tmp: Path, *overrides: str, runs: str = "r", results: str = "res") -> None:
    """``harness run tiny.yaml runs_root=tmp/runs results_root=tmp/results overrides...`` (the audit's fixture); it
    must refuse before any run folder is made."""
    from harness.experiment import load_experiment, run_experiment

    (tmp / "tiny.yaml").write_text(TINY)
    roots = (f"runs_root={tmp / runs}", f"results_root={tmp / results}")
    try:
        run_experiment(load_experiment(str(tmp / "tiny.yaml"), (*roots, *overrides)), progress=lambda s: None)
    finally:
        assert not (tmp / runs / "tiny" / "upstream").exists(), "work started before the error"


@bad_input(
    "experiment",
    "upstream_overrides=[seed=5] in an experiment (audit8 C14: trained with the experiment's seed 0 without a word)",
    ValueError,
    r"upstream_overrides sets seed \(seed=5\), which the experiment sets for every run itself.*seeds: \[5\]",
)
def _experiment_seed_override(tmp):
    _run(tmp, "upstream_overrides=[train.epochs=1,data.limit_train=128,data.limit_eval=64,seed=5]")


@bad_input(
    "experiment",
    "a method's overrides set output_dir (audit8 C15: the override was ignored without a word)",
    ValueError,
    r"methods\.hom\.overrides sets output_dir \(output_dir=.*\).*drop it and set runs_root=PATH",
)
def _experiment_output_dir_override(tmp):
    _run(tmp, f"methods.hom.overrides=[output_dir={tmp / 'elsewhere'}]")


@bad_input(
    "experiment",
    "runs_root equal to results_root (audit8 C16: refused only after all training)",
    ValueError,
    r"runs_root=.*same and results_root=.*same: the report's folder .*tiny is also the runs' folder.*give "
    r"results_root a folder apart from runs_root",
)
def _experiment_roots_equal(tmp):
    _run(tmp, runs="same", results="same")


@bad_input(
    "experiment",
    "runs_root inside the report's folder results_root/<name> (audit8 C16: refused only after all training)",
    ValueError,
    r"the report's folder .*tiny holds the runs' folder .*tiny/tiny, so the report would collide with the runs",
)
def _experiment_runs_in_report(tmp):
    _run(tmp, runs="res/tiny", results="res")


@bad_input(
    "experiment",
    "two methods with identical settings, hom and hom2 (audit8 R06: both trained, then the report refused a "
    "'copied folder')",
    ValueError,
    r"methods hom and hom2 have the same settings .*drop one, or make them differ",
)
def _experiment_same_methods(tmp):
    _run(tmp, "methods.hom2={covariance: none}")


@bad_input(
    "experiment",
    "a typo in downstream.settings with no downstream tasks (audit8 X08: not checked when the stage is skipped)",
    ValueError,
    # since audit13 A13-22 the whole section is refused as unread while the stage is off, typo or not
    r"downstream\.settings=\{'lrz': \[1\]\} is read only with downstream\.tasks, and this experiment has none",
)
def _experiment_downstream_typo(tmp):
    _run(tmp, "downstream.settings.lrz=[1]")
