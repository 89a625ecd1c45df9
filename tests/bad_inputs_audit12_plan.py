"""Bad inputs found by the twelfth reliability audit in an experiment's plan (``audit12 <case id>``): a shift subset
larger than the evaluation split found only after training, two planned runs sharing one run folder, and an
``upstream_config`` looked up from the current folder instead of the experiment file's. Every refusal comes before
any work."""

from __future__ import annotations

import os
from pathlib import Path

from bad_inputs_audit8_experiment import TINY

from bad_inputs import ROOT, bad_input, handled


def _run(tmp: Path, name: str, extra: str, tiny: str = TINY) -> None:
    """``harness run NAME.yaml`` (the ``tiny`` experiment named ``name`` plus ``extra``) with its roots under ``tmp``;
    it must refuse before any run folder is made."""
    from harness.experiment import load_experiment, run_experiment

    (tmp / f"{name}.yaml").write_text(tiny.replace("name: tiny", f"name: {name}") + extra)
    roots = (f"runs_root={tmp / 'r'}", f"results_root={tmp / 'res'}")
    try:
        run_experiment(load_experiment(str(tmp / f"{name}.yaml"), roots), progress=lambda s: None)
    finally:
        assert not (tmp / "r" / name / "upstream").exists(), "work started before the error"


# ------------------------------------------------------------------------------ A12-18: shift.examples
@bad_input(
    "experiment",
    "shift.examples=100000 with data.limit_eval=64 (audit12 A12-18: refused only after the upstream run trained, "
    "naming the CLI option --examples)",
    ValueError,
    r"^shift\.examples=100000 is more than the 64 images of split 'test' that the shift sets are drawn from .*give "
    r"shift\.examples=64 or fewer \(0: the whole split\)",
)
def _shift_examples_over_split(tmp):
    _run(tmp, "tsh", "shift: {corruptions: [gaussian_noise], severities: [1], ood: [], examples: 100000}\n")


# ------------------------------------------------------------------------------ A12-22: two runs, one folder
#: the tiny experiment's methods plus c1_hom (its own noise draw, so not a copy of hom)
TINY_C1 = TINY.replace(
    "methods: {hom: {covariance: none}}",
    "methods: {hom: {covariance: none}, c1_hom: {covariance: none, overrides: [data.label_noise.seed=5]}}",
)


@bad_input(
    "experiment",
    "a condition named multilabel beside the multi-label study (audit12 A12-22: both runs were "
    "upstream/multilabel_hom_s0; refused after 2 of 3 runs trained, advising to delete the condition's run)",
    ValueError,
    r"conditions\.multilabel, method hom, seed 0 and multilabel\.methods\.hom, seed 0 would share the run folder "
    r".*upstream/multilabel_hom_s0.*rename condition 'multilabel' or multilabel method 'hom'",
)
def _condition_named_multilabel(tmp):
    _run(
        tmp,
        "tml",
        "conditions: {multilabel: {description: x, upstream_overrides: [data.label_noise.seed=3], methods: [hom], "
        "seeds: [0]}}\nmultilabel: {methods: {hom: {covariance: none, link: sigmoid}}, seeds: [0], "
        "upstream_overrides: [train.best_metric=sigmoid_nll]}\n",
    )


@bad_input(
    "experiment",
    "a method named c1_hom beside condition c1's method hom (audit12 A12-22: both are run c1_hom_s0, the "
    "condition's config silently replacing the method's in the plan)",
    ValueError,
    r"methods\.c1_hom, seed 0 and conditions\.c1, method hom, seed 0 would share the run folder "
    r".*upstream/c1_hom_s0.*rename method 'c1_hom' or condition 'c1'",
)
def _method_named_like_a_condition_run(tmp):
    _run(
        tmp,
        "tc1",
        "conditions: {c1: {description: x, upstream_overrides: [data.label_noise.seed=3], methods: [hom], "
        "seeds: [0]}}\n",
        TINY_C1,
    )


# ------------------------------------------------------------------------------ A12-23: upstream_config
def _exps(tmp: Path, upstream_config: str) -> Path:
    """``tmp/exps/digits_base.yaml`` (the built-in digits_base with 2 epochs and 10% noise), ``tmp/exps/my_base.yaml``
    (the same) and ``tmp/exps/e.yaml`` naming ``upstream_config``; returns the experiment file."""
    exps = tmp / "exps"
    exps.mkdir(exist_ok=True)
    own = (
        f"base: {ROOT / 'upstream' / 'configs' / 'digits_base.yaml'}\ntrain: {{epochs: 2}}\n"
        "data: {label_noise: {rate: 0.1}}\n"
    )
    (exps / "digits_base.yaml").write_text(own)
    (exps / "my_base.yaml").write_text(own)
    (exps / "e.yaml").write_text(
        f"name: rel\nupstream_config: {upstream_config}\nmethods: {{hom: {{covariance: none}}}}\nseeds: [0]\n"
        f"runs_root: {tmp / 'xruns'}\nresults_root: {tmp / 'xres'}\ndownstream: {{tasks: []}}\n"
    )
    return exps / "e.yaml"


def _epochs(path: Path, where: Path) -> int:
    """The planned run's epochs of experiment file ``path``, planned from the folder ``where``."""
    from harness.experiment import load_experiment
    from harness.experiment.validate import validate_experiment

    before = os.getcwd()
    os.chdir(where)
    try:
        plan = validate_experiment(load_experiment(str(path.resolve())))["main"]
    finally:
        os.chdir(before)
    return plan.configs["hom_s0"].train.epochs


@bad_input(
    "experiment",
    "upstream_config: digits_base.yaml with a user file of that name beside the experiment file (audit12 A12-23: "
    "the built-in config planned from one folder, the user's file from another, no word either way)",
    ValueError,
    r"upstream_config=digits_base\.yaml \(in .*e\.yaml\) names both .*exps/digits_base\.yaml, beside the experiment "
    r"file, and the built-in config digits_base\.yaml.*write upstream_config: \./digits_base\.yaml for your file, "
    r"or upstream_config: builtin:digits_base\.yaml for the built-in",
)
def _upstream_config_ambiguous(tmp):
    _epochs(_exps(tmp, "digits_base.yaml"), tmp)


@handled(
    "experiment",
    "upstream_config: ./digits_base.yaml or my_base.yaml beside the experiment file, planned from two folders "
    "(audit12 A12-23: looked up from the current folder, then silently the built-in configs)",
    r"relative to the experiment file",
)
def _upstream_config_relative(tmp):
    for ref in ("./digits_base.yaml", "my_base.yaml"):
        e = _exps(tmp, ref)
        for where in (tmp, e.parent, ROOT):
            assert _epochs(e, where) == 2, (ref, where)
    e = _exps(tmp, "builtin:digits_base.yaml")
    assert _epochs(e, e.parent) == 15, "builtin: names the built-in config"
    e.write_text("".join(line + "\n" for line in e.read_text().splitlines() if "upstream_config" not in line))
    assert _epochs(e, e.parent) == 15, "the default (no upstream_config written) is the built-in digits_base.yaml"
    return (
        "./digits_base.yaml and my_base.yaml read relative to the experiment file (2 epochs from every folder); "
        "builtin:digits_base.yaml and the default the built-in (15 epochs)"
    )
