"""Bad inputs found by the seventh reliability audit in the commands (``audit7 <case id>``): outputs that cannot be
written found after the work, a copied run counted as a second model, contradictory or surplus options ignored. Every
refusal comes before any work."""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest import mock

import click
from bad_inputs_audit6_runs import _checkpoint_runs

from bad_inputs import bad_input
from bad_inputs_downstream import downstream, task_folder
from bad_inputs_safety import _cli, _model_pt
from bad_inputs_uncertainty import make_run

CLI_ERROR = click.ClickException  # click.UsageError is one too
UNWRITABLE = r"--out .*{}.* cannot be written \(.*\): choose a writable folder"


def _below_file(tmp: Path) -> Path:
    """A folder that cannot be written: a path below a regular file."""
    (tmp / "file").write_text("x")
    return tmp / "file" / "sub"


# ------------------------------------------------------------------------------ outputs checked before work (1)
@bad_input(
    "bench",
    "bench coverage --out below a file (audit7 W05: an OSError traceback after 17 s of simulation)",
    CLI_ERROR,
    UNWRITABLE.format(r"c\.md"),
)
def _coverage_unwritable(tmp):
    _cli("bench", "coverage", "--sims", "10", "--setting", "image-dominated", "--out", str(_below_file(tmp) / "c.md"))


@bad_input(
    "bench",
    "bench heads --out below a file (audit7 W08: an OSError traceback after the timings)",
    CLI_ERROR,
    UNWRITABLE.format(r"h\.md"),
)
def _heads_unwritable(tmp):
    out = str(_below_file(tmp) / "h.md")
    _cli("bench", "heads", "--quick", "--repeats", "1", "--no-compile", "--out", out)


@bad_input(
    "bench",
    "bench device --out below a file (audit7 W09: an OSError traceback after the checks)",
    CLI_ERROR,
    UNWRITABLE.format(r"device\.md"),
)
def _device_unwritable(tmp):
    _cli("bench", "device", "--dry-run", "--part", "correctness", "--out", str(_below_file(tmp) / "dev"))


@bad_input(
    "ensembles",
    "harness import --out below a file (audit7 W06: both splits predicted, then a bare '[Errno 30]')",
    CLI_ERROR,
    UNWRITABLE.format("imp"),
)
def _import_unwritable(tmp):
    (tmp / "data.yaml").write_text("data:\n  source: digits\n  limit_eval: 30\n")
    out = _below_file(tmp) / "imp"
    with mock.patch("harness.runs.predict_model", side_effect=AssertionError("work started before the check")):
        _cli("import", "--model", str(_model_pt(tmp / "model.pt")), "--data", str(tmp / "data.yaml"), "--out", str(out))


@bad_input(
    "data",
    "HARNESS_CACHE an existing folder that cannot be written (audit7 W03: a bare '[Errno 30]', the variable not named)",
    ValueError,
    r"the cache folder '.*cache' \(from HARNESS_CACHE\) cannot be written \(.*\): .*point HARNESS_CACHE at a writable",
)
def _cache_read_only(tmp):
    from harness.data.cache import default_cache_dir

    (tmp / "cache").mkdir()
    with mock.patch.dict("os.environ", {"HARNESS_CACHE": str(tmp / "cache")}):
        with mock.patch("harness.io.tempfile.TemporaryFile", side_effect=OSError(30, "Read-only file system")):
            default_cache_dir()


# ------------------------------------------------------------------------------ a copied run counted twice (2)
@bad_input(
    "report",
    "harness report RUN COPY, COPY a cp -r of RUN (audit7 R02: 'over the 2 single models', rc 0)",
    CLI_ERROR,
    r"folders '.*a' and '.*b' have identical predictions: the same model twice \(a copied folder, or two methods or "
    r"seeds with the same settings\); a report lists each run or ensemble once: keep one of them",
)
def _report_copy(tmp):
    make_run(tmp / "a")
    shutil.copytree(tmp / "a", tmp / "b")
    try:
        _cli("report", str(tmp / "a"), str(tmp / "b"), "--out-root", str(tmp / "results"), "--name", "r02")
    finally:
        assert not (tmp / "results").exists(), "a report was written"


# ------------------------------------------------------------------------------ contradictory or surplus inputs (3-6)
@bad_input(
    "ensembles",
    "harness ensemble --device cuda without --from-checkpoints (audit7 N07: --device ignored, rc 0)",
    CLI_ERROR,
    r"--device cuda goes with --from-checkpoints: .*add --from-checkpoints, or leave out --device",
)
def _ensemble_device(tmp):
    make_run(tmp / "a", seed=0)
    make_run(tmp / "b", seed=1)
    try:
        _cli("ensemble", "-m", str(tmp / "a"), "-m", str(tmp / "b"), "--device", "cuda", "--out", str(tmp / "ens"))
    finally:
        assert not (tmp / "ens").exists(), "an ensemble folder was written"


@bad_input(
    "downstream",
    "harness downstream --upstream timm:test_resnet --random-init --weights W (audit7 H06: W loaded, --random-init "
    "ignored)",
    CLI_ERROR,
    r"--random-init and --weights .*w\.pth contradict each other: .*give only one",
)
def _random_init_weights(tmp):
    from harness.cli import main

    (tmp / "w.pth").write_bytes(b"not loaded")
    args = ["--upstream", "timm:test_resnet", "--random-init", "--weights", str(tmp / "w.pth")]
    main(["downstream", *args, "--tasks", f"birds={task_folder(tmp)}:5", "--out", "out"], standalone_mode=False)


@bad_input(
    "downstream",
    "harness downstream --lrs 0.01,0.01 (audit7 D06: the same grid point trained twice)",
    CLI_ERROR,
    r"learning rates \(--lrs, lrs\) repeat a value: \[0\.01, 0\.01\]; give each lr once",
)
def _lrs_repeat(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:5", "--lrs", "0.01,0.01")


@bad_input(
    "downstream",
    "harness downstream --steps 1,1 (audit7 D06: the same grid point trained twice)",
    CLI_ERROR,
    r"steps \(--steps, steps\) repeat a value: \[1, 1\]; give each step count once",
)
def _steps_repeat(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:5", "--steps", "1,1")


@bad_input(
    "shift",
    "harness shift --examples 100000 on a 20-image split (audit7 V05: all 20 used without a word)",
    CLI_ERROR,
    r"--examples 100000 is more than the 20 images of .*'test': pass --examples 20 or fewer \(0: the whole split\)",
)
def _shift_examples(tmp):
    _checkpoint_runs(tmp)
    with mock.patch.dict("os.environ", {"HARNESS_CACHE": str(tmp / "cache")}):
        args = ["--corruptions", "gaussian_noise", "--severities", "1", "--examples", "100000", "--ood", "none"]
        _cli("shift", "-m", str(tmp / "a"), *args)
    assert not (tmp / "a" / "shift").exists()
