"""Bad inputs found by the tenth reliability audit among the commands' flags (``audit10 <case id>``): a single-valued
option given twice (the last value won without a word), OOD specs with a split key or a key given twice, data pack
overrides given twice and a seed with ``--in-order``, an ensemble written inside a member, and two reports of one name
written at once. Every refusal comes before any work."""

from __future__ import annotations

from unittest import mock

import click
from bad_inputs_audit6_runs import _checkpoint_runs
from bad_inputs_audit9_flags import _shift_ood

from bad_inputs import bad_input
from bad_inputs_downstream import downstream
from bad_inputs_safety import _cli
from bad_inputs_uncertainty import make_run

CLI_ERROR = click.ClickException  # click.UsageError is one too


def _nothing_under(folder, what: str) -> None:
    assert not folder.exists(), f"{what} was written: {folder}"


# ------------------------------------------------------------------------------------- an option given twice (A10-26)
@bad_input(
    "cli",
    "harness shift -m RUN --examples 20 --examples 0 (audit10 A10-26: accepted, the last value won: all 359 images "
    "scored instead of 20)",
    CLI_ERROR,
    r"--examples was given twice \(--examples 20 and --examples 0\): it takes one value and only the last would "
    r"count; give --examples once",
)
def _shift_examples_twice(tmp):
    _checkpoint_runs(tmp)
    with mock.patch("harness.shift.predict._load_run_model", side_effect=AssertionError("a model was loaded")):
        try:
            _cli("shift", "-m", str(tmp / "a"), "--examples", "20", "--corruptions", "none", "--examples", "0")
        finally:
            _nothing_under(tmp / "a" / "shift", "a shift folder")


@bad_input(
    "cli",
    "harness report RUN --name r08 --name r08b (audit10 A10-26: accepted, the report went to r08b only)",
    CLI_ERROR,
    r"--name was given twice \(--name r08 and --name r08b\): .*give --name once",
)
def _report_name_twice(tmp):
    run = make_run(tmp / "run")
    try:
        _cli("report", str(run), "--name", "r08", "--out-root", str(tmp / "rep"), "--name=r08b", "--no-covariance")
    finally:
        _nothing_under(tmp / "rep", "a report folder")


@bad_input(
    "cli",
    "harness downstream --log-with none ... --log-with mlflow (audit10 A10-26: accepted, MLflow wrote ./mlflow.db and "
    "./mlruns)",
    CLI_ERROR,
    r"--log-with was given twice \(--log-with none and --log-with mlflow\): .*give --log-with once",
)
def _downstream_log_with_twice(tmp):
    with mock.patch("harness.downstream.sweep.sweep", side_effect=AssertionError("the sweep ran")):
        downstream("--tasks", "demo_digit", "--log-with", "none", "--steps", "1", "--log-with", "mlflow")


@bad_input(
    "cli",
    "harness upstream --config A.yaml --config B.yaml, a stage's command (audit10 A10-26: the last config trained)",
    CLI_ERROR,
    r"--config was given twice \(--config a\.yaml and --config b\.yaml\): .*give --config once",
)
def _upstream_config_twice(tmp):
    _cli("upstream", "--config", "a.yaml", "--config", "b.yaml")


@bad_input(
    "cli",
    "harness data pack digits OUT --shard-size 100 --shard-size 50, a subgroup's command (audit10 A10-26: the last "
    "size packed)",
    CLI_ERROR,
    r"--shard-size was given twice \(--shard-size 100 and --shard-size 50\): .*give --shard-size once",
)
def _pack_shard_size_twice(tmp):
    _pack(tmp, "--shard-size", "50")


def _pack(tmp, *args: str) -> None:
    """``harness data pack digits`` into ``tmp/p`` with shards of 100 and ``args``; refused: no pack folder left."""
    try:
        _cli("data", "pack", "digits", str(tmp / "p"), "--shard-size", "100", *args)
    finally:
        _nothing_under(tmp / "p", "a pack folder")


# ----------------------------------------------------------------------------------------------- OOD specs (A10-27)
@bad_input(
    "shift",
    "harness shift --ood 'x:source=digits,eval_split=bogus' (audit10 A10-27: eval_split ignored, the set was the "
    "test split)",
    CLI_ERROR,
    r"OOD set 'x:source=digits,eval_split=bogus': eval_split=bogus is not read for an OOD set, whose images come "
    r"from split= \(default test\): write split=bogus instead of eval_split=bogus",
)
def _shift_ood_eval_split(tmp):
    _shift_ood(tmp, "x:source=digits,eval_split=bogus")


@bad_input(
    "shift",
    "harness shift --ood 'x:source=digits,limit_eval=5,limit_eval=6' (audit10 A10-27: the last value kept)",
    CLI_ERROR,
    r"OOD set 'x:source=digits,limit_eval=5,limit_eval=6' sets limit_eval twice \(limit_eval=5 and limit_eval=6\): "
    r"only the last would count; keep one",
)
def _shift_ood_key_twice(tmp):
    _shift_ood(tmp, "x:source=digits,limit_eval=5,limit_eval=6")


# ----------------------------------------------------------------------------------------------- data pack (A10-28)
@bad_input(
    "data pack",
    "harness data pack digits OUT --shard-size 100 data.limit_train=50 limit_train=60 (audit10 A10-28: 60 examples "
    "packed, the last value won)",
    CLI_ERROR,
    r"the data overrides set limit_train twice \(limit_train=50 and limit_train=60\): only the last would count; "
    r"keep one",
)
def _pack_override_twice(tmp):
    _pack(tmp, "data.limit_train=50", "limit_train=60")


@bad_input(
    "data pack",
    "harness data pack digits OUT --shard-size 100 --in-order --seed 3 (audit10 A10-28: --seed unused without a word)",
    CLI_ERROR,
    r"--seed 3 orders the examples across shards, and --in-order keeps the source's order: the seed would be "
    r"unused; give --in-order alone, or --seed without --in-order",
)
def _pack_seed_in_order(tmp):
    _pack(tmp, "--in-order", "--seed", "3")


# ------------------------------------------------------------------------------------------------ ensemble (A10-31)
@bad_input(
    "ensemble",
    "harness ensemble -m A -m B --out A/ens, inside a member (audit10 A10-31: the ensemble folder written inside "
    "member A)",
    CLI_ERROR,
    r"--out .*a/ens is inside the member .*a, which would then hold harness ensemble's files beside its own .*: give "
    r"--out a folder outside every member and run folder",
)
def _ensemble_out_inside_member(tmp):
    a, b = make_run(tmp / "a"), make_run(tmp / "b", seed=1)
    try:
        _cli("ensemble", "-m", str(a), "-m", str(b), "--out", str(a / "ens"))
    finally:
        _nothing_under(a / "ens", "an ensemble folder")


@bad_input(
    "ensemble",
    "harness ensemble -m A -m B --out C/sub/ens, inside run folder C that is no member (audit10 A10-31: written there)",
    CLI_ERROR,
    r"--out .*c/sub/ens is inside the run folder .*c \(it holds run\.json\), which would then hold harness ensemble's "
    r"files",
)
def _ensemble_out_inside_run(tmp):
    a, b, c = make_run(tmp / "a"), make_run(tmp / "b", seed=1), make_run(tmp / "c", seed=2)
    (c / "run.json").write_text("{}")
    try:
        _cli("ensemble", "-m", str(a), "-m", str(b), "--out", str(c / "sub" / "ens"))
    finally:
        _nothing_under(c / "sub", "an ensemble folder")


# -------------------------------------------------------------------------------------------------- report (A10-32)
@bad_input(
    "report",
    "harness report A B --name conc while another harness report writes rep/conc (audit10 A10-32: both said 'wrote', "
    "one report silently replaced the other)",
    CLI_ERROR,
    r"rep/conc is being written by another process \(.*\): another harness report is being written there; wait for "
    r"it to finish, or choose another --name or --out-root",
)
def _report_concurrent(tmp):
    from harness.io import RunLock
    from harness.report.build import REPORT_LOCK

    a, b = make_run(tmp / "a"), make_run(tmp / "b", seed=1)
    with RunLock(tmp / "rep" / "conc", REPORT_LOCK, what="another report"):  # the other report, still writing
        try:
            _cli("report", str(a), str(b), "--out-root", str(tmp / "rep"), "--name", "conc", "--no-covariance")
        finally:
            assert not (tmp / "rep" / "conc" / "report.json").exists(), "a report was written"
