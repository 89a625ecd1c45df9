"""Bad inputs found by the tenth reliability audit in the experiment file (``audit10 <case id>``): a tuned setting
also set in the overrides, ``grid_overrides`` without a grid, a declaration date that is no date, a folder given as
the experiment and an empty runs_root. Every refusal comes before any run folder is made."""

from __future__ import annotations

from pathlib import Path

import click
from bad_inputs_audit8_experiment import TINY, _run

from bad_inputs import bad_input

CLI_ERROR = click.ClickException
TUNE = "tune: {key: train.label_smoothing, values: [0.1, 0.2]}"


def _harness_run(tmp: Path, *args: str) -> None:
    """``harness run ARGS`` (the audit's command line) from ``tmp``, with the audit's tiny experiment in
    ``tmp/exp/tiny.yaml``; it must refuse before any run folder is made."""
    import os

    from harness.cli import main

    (tmp / "exp").mkdir()
    (tmp / "exp" / "tiny.yaml").write_text(TINY)
    here = os.getcwd()
    os.chdir(tmp)
    try:
        main(["run", *args], standalone_mode=False)
    finally:
        os.chdir(here)
        assert not list(tmp.glob("**/upstream")), "work started before the error"


# ------------------------------------------------------------------------------ A10-08: a tuned key set elsewhere
@bad_input(
    "experiment",
    "a method's tune of train.label_smoothing beside train.label_smoothing=0.3 in its overrides (audit10 A10-08: "
    "trained 0.1 and 0.2, the 0.3 never, without a word)",
    ValueError,
    r"method 'ls': tune\.key train\.label_smoothing is also set in methods\.ls\.overrides "
    r"\(train\.label_smoothing=0\.3\): .*one of tune\.values \[0\.1, 0\.2\] instead.*drop train\.label_smoothing "
    r"from methods\.ls\.overrides, or drop the method's tune",
)
def _tune_key_in_method_overrides(tmp):
    _run(tmp, "methods={ls: {overrides: [train.loss=label_smoothing, train.label_smoothing=0.3], " + TUNE + "}}")


@bad_input(
    "experiment",
    "a method's tune of train.label_smoothing beside train.label_smoothing=0.3 in upstream_overrides (audit10 "
    "A10-08: the value of upstream_overrides was never trained)",
    ValueError,
    r"tune\.key train\.label_smoothing is also set in upstream_overrides \(train\.label_smoothing=0\.3\).*drop "
    r"train\.label_smoothing from upstream_overrides, or drop the method's tune",
)
def _tune_key_in_upstream_overrides(tmp):
    limits = "train.epochs=1,train.eval_every=1,data.limit_train=128,data.limit_eval=64"
    _run(
        tmp,
        f"upstream_overrides=[{limits},train.loss=label_smoothing,train.label_smoothing=0.3]",
        "methods={ls: {" + TUNE + "}}",
    )


# ------------------------------------------------------------------------------ A10-09: grid_overrides, no grid
@bad_input(
    "experiment",
    "grid_overrides=[train.epochs=0] with a temperature_grid but only hom (no method has a grid) (audit10 A10-09: "
    "not checked, ignored without a word)",
    ValueError,
    r"grid_overrides \[train\.epochs=0\] set the grid runs only, and no method has a grid \(temperature_grid tunes "
    r"methods with noise only.*drop grid_overrides, or add a grid",
)
def _grid_overrides_without_grid(tmp):
    _run(tmp, "temperature_grid=[1.0,2.0]", "grid_overrides=[train.epochs=0]")


# ------------------------------------------------------------------------------ A10-10: primary.declared
@bad_input(
    "experiment",
    "primary.declared='not a date' (audit10 A10-10: accepted, the report said 'declared not a date')",
    ValueError,
    r"primary\.declared='not a date' is not a date: give the day .* as YYYY-MM-DD",
)
def _declared_not_a_date(tmp):
    _run(tmp, "primary={metric: nll, split: heldout, declared: 'not a date'}")


# ------------------------------------------------------------------------------ A10-12: folder, empty runs_root
@bad_input(
    "experiment",
    "harness run exp, a folder holding tiny.yaml (audit10 A10-12: `no experiment 'exp'`, the folder not named)",
    CLI_ERROR,
    r"experiment 'exp' is a folder, not an experiment file: give the YAML file inside it \(exp/tiny\.yaml\)",
)
def _experiment_folder(tmp):
    _harness_run(tmp, "exp")


@bad_input(
    "experiment",
    "harness run exp/tiny.yaml runs_root='' (audit10 A10-12: `Incompatible value 'None' ... not a list or mapping`)",
    CLI_ERROR,
    r"runs_root is empty \(runs_root=\): runs_root must not be empty .*give a folder, e.g\. runs_root=runs",
)
def _empty_runs_root(tmp):
    _harness_run(tmp, "exp/tiny.yaml", "runs_root=")
