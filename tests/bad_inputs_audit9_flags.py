"""Bad inputs found by the ninth reliability audit among the commands' flags (``audit9 <case id>``): a micro-batch
larger than the batch, an option the help offered and the command refused, flags dropped without a word, OOD specs
that reused a built-in set's name or broke the data section's rules, an empty report name, and ``harness env``
leaving out the variables that move the harness's files. Every refusal comes before any work."""

from __future__ import annotations

import json
from unittest import mock

import click
from bad_inputs_audit6_runs import _checkpoint_runs, _import
from click.testing import CliRunner

from bad_inputs import bad_input, handled
from bad_inputs_downstream import downstream
from bad_inputs_safety import _cli
from bad_inputs_uncertainty import make_run

CLI_ERROR = click.ClickException  # click.UsageError is one too


def _shift_ood(tmp, *ood: str) -> None:
    """``harness shift`` of a run folder with a real model.pt, no corruption and the OOD specs ``ood`` (each after
    its own ``--ood``); refused before any model is loaded."""
    _checkpoint_runs(tmp)
    args = [a for o in ood for a in ("--ood", o)]
    with mock.patch.dict("os.environ", {"HARNESS_CACHE": str(tmp / "cache")}):
        with mock.patch("harness.shift.predict._load_run_model", side_effect=AssertionError("a model was loaded")):
            _cli("shift", "-m", str(tmp / "a"), "--corruptions", "none", *args)


# ------------------------------------------------------------------------------------------------ downstream (C04)
@bad_input(
    "downstream",
    "harness downstream --batch-size 8 --micro-batch 16 (audit9 C04: accepted, vtab.md said 'batch 8 (16 per "
    "forward pass)')",
    CLI_ERROR,
    r"micro_batch=16 \(--micro-batch\) is larger than batch_size=8 \(--batch-size\): .*give --micro-batch at most 8",
)
def _micro_batch_over_batch(tmp):
    with mock.patch("harness.downstream.sweep.sweep", side_effect=AssertionError("the sweep ran")):
        downstream("--tasks", "demo_digit", "--batch-size", "8", "--micro-batch", "16")


@handled(
    "downstream",
    "harness downstream --preset demo --batch-size 8 and no --micro-batch: the preset's micro-batch 64 shrinks to "
    "the batch (audit9 C04: the preset's 64 recorded beside batch 8)",
    r"micro_batch 8",
)
def _micro_batch_default_capped(tmp):
    from harness.downstream.config import PRESETS, SweepSettings

    captured = {}

    def fake_sweep(upstream, names, out, settings, *a, **k):
        captured["settings"] = settings
        raise click.ClickException("stop before the sweep")

    with mock.patch("harness.downstream.sweep.sweep", side_effect=fake_sweep):
        try:
            _cli("downstream", "--upstream", "timm:x", "--tasks", "demo_digit", "--preset", "demo", "--batch-size", "8")
        except click.ClickException as e:
            assert "stop before the sweep" in str(e), e
    s = captured["settings"]
    assert (s.batch_size, s.micro_batch) == (8, 8), (s.batch_size, s.micro_batch)
    assert SweepSettings(**PRESETS["demo"]).micro_batch == 64
    return f"batch_size {s.batch_size}, micro_batch {s.micro_batch}"


# ---------------------------------------------------------------------------------------------------- import (C11)
@handled(
    "import",
    "harness import --help offers no --random-init, which import refuses (audit9 C11: the help documented 'random "
    "weights on purpose', the command said it has no place here)",
    r"no --random-init in import --help; --random-init refused",
)
def _import_random_init_help(tmp):
    from harness.cli import main

    text = CliRunner().invoke(main, ["import", "--help"]).output
    assert "--weights" in text and "--random-init" not in text, text
    try:
        _import(tmp, "--random-init", "--out", str(tmp / "imp"))
    except click.ClickException as e:
        assert "--random-init has no place here" in str(e), e
    else:
        raise AssertionError("import --random-init was accepted")
    assert not (tmp / "imp").exists()
    return "no --random-init in import --help; --random-init refused"


# ------------------------------------------------------------------------------------------------------ bench (C12)
@bad_input(
    "bench",
    "harness bench heads --quick --main-only (audit9 C12: the quick grid measured, --main-only ignored)",
    CLI_ERROR,
    r"--quick and --main-only ask for two different grids .*: give one of them",
)
def _bench_quick_main_only(tmp):
    with mock.patch("harness.bench.heads._measure", side_effect=AssertionError("a case was measured")):
        _cli("bench", "heads", "--quick", "--main-only", "--no-compile", "--out", str(tmp / "h.md"))
    assert not (tmp / "h.md").exists()


# ------------------------------------------------------------------------------------------- shift OOD (C13, S01-6)
@bad_input(
    "shift",
    "harness shift --ood none --ood gaussian (audit9 C13: none dropped, gaussian run)",
    CLI_ERROR,
    r"OOD sets \(--ood\) \['none', 'gaussian'\] name none \(no OOD set\) beside other sets: give --ood none alone",
)
def _shift_ood_none_and_gaussian(tmp):
    _shift_ood(tmp, "none", "gaussian")


@bad_input(
    "shift",
    "harness shift --ood gaussian,blobs (audit9 S01: 'must be a plain name', not how to give several sets)",
    CLI_ERROR,
    r"OOD set 'gaussian,blobs' names several sets in one: repeat --ood for each set \(e\.g\. --ood gaussian --ood "
    r"blobs\)",
)
def _shift_ood_comma(tmp):
    _shift_ood(tmp, "gaussian,blobs")


@bad_input(
    "shift",
    "harness shift --ood gaussian:source=digits (audit9 S05: the built-in set's name held digits images)",
    CLI_ERROR,
    r"OOD set 'gaussian:source=digits' gives data keys to the name of the built-in set 'gaussian'.*name your set "
    r"otherwise .*e\.g\. gaussian_data:source=digits",
)
def _shift_ood_builtin_name(tmp):
    _shift_ood(tmp, "gaussian:source=digits")


@bad_input(
    "shift",
    "harness shift --ood z:source=digits,limit_eval=-3 (audit9 S06: accepted, the upstream config refuses limit_* < 0)",
    CLI_ERROR,
    r"OOD set: limit_eval must be >= 0 \(0 = all\), got -3 \(keys are those of the data section",
)
def _shift_ood_negative_limit(tmp):
    _shift_ood(tmp, "z:source=digits,limit_eval=-3")


# ----------------------------------------------------------------------------------------------------- report (C14)
@bad_input(
    "report",
    "harness report RUN --name '' (audit9 C14: the report written under the default name)",
    CLI_ERROR,
    r"report name '' must be a plain name",
)
def _report_empty_name(tmp):
    run = make_run(tmp / "run")
    try:
        _cli("report", str(run), "--name", "", "--out-root", str(tmp / "res"), "--no-covariance", "--no-shift")
    finally:
        assert not (tmp / "res").exists() or not any((tmp / "res").iterdir()), "a report was written"


# -------------------------------------------------------------------------------------------------------- env (V02)
@handled(
    "env",
    "HARNESS_CACHE=/somewhere harness env lists HARNESS_CACHE (audit9 V02: 'none of OMP_NUM_THREADS, ... set')",
    r"HARNESS_CACHE listed",
)
def _env_lists_harness_variables(tmp):
    from harness.cli import main

    with mock.patch.dict("os.environ", {"HARNESS_CACHE": str(tmp / "cache")}):
        text = CliRunner().invoke(main, ["env"]).output
        data = json.loads(CliRunner().invoke(main, ["env", "--json"]).output)
    assert f"HARNESS_CACHE={tmp / 'cache'}" in text.splitlines()[-1], text
    assert data["variables"]["HARNESS_CACHE"] == str(tmp / "cache"), data["variables"]
    return "HARNESS_CACHE listed in harness env (text and --json)"


@bad_input(
    "report",
    "harness report --screenshot with a Chromium that renders nothing (audit9 RP4: refused after the report was built)",
    CLI_ERROR,
    r"Chromium \(.*chromium\) does not render pages \(exit 1: .*cannot open display.*\); reinstall it "
    r"\(apt-get install --reinstall chromium\), or leave out --screenshot",
)
def _report_broken_browser(tmp):
    make_run(tmp / "a", seed=0)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "chromium"
    fake.write_text("#!/bin/sh\necho 'ERROR: cannot open display' >&2\nexit 1\n")
    fake.chmod(0o755)
    with mock.patch.dict("os.environ", {"PATH": f"{bin_dir}:/usr/bin:/bin"}):
        try:
            _cli("report", str(tmp / "a"), "--out-root", str(tmp / "results"), "--screenshot")
        finally:
            assert not (tmp / "results").exists(), "the report was built before the browser was found broken"
