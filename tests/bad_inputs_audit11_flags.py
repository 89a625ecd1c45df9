"""Bad inputs found by the eleventh reliability audit among the evaluating commands' data keys and the list options
(``audit11 <case id>``): ``harness import`` overrides and ``harness shift`` OOD specs of keys an evaluation never reads
(training augmentation, label noise, limit_train) or the source does not read (label_set on digits), an OOD set that
is the run's own test split, and a value given twice in a list option (run twice, or dropped without a word). Every
refusal comes before any work."""

from __future__ import annotations

from unittest import mock

import click
from bad_inputs_audit6_runs import _checkpoint_runs, _import, _model_pt
from bad_inputs_audit9_flags import _shift_ood
from bad_inputs_audit10_flags import _nothing_under

from bad_inputs import bad_input
from bad_inputs_downstream import downstream
from bad_inputs_safety import _cli

CLI_ERROR = click.ClickException  # click.UsageError is one too
DIGITS = "upstream/configs/digits_hom.yaml"


def _import_digits(tmp, *overrides: str, data: "str | None" = None) -> None:
    """``harness import`` of an untrained model.pt on the digits data (or the config text ``data``) with
    ``overrides``; refused: no run folder written."""
    try:
        if data is None:
            _import(tmp, "--out", str(tmp / "imp1"), *overrides)
        else:
            _import(tmp, "--out", str(tmp / "imp1"), *overrides, data=data)
    finally:
        _nothing_under(tmp / "imp1", "an import run folder")


# ------------------------------------------------------------------------- A11-16: import overrides it never reads
@bad_input(
    "import",
    "harness import --data digits.yaml limit_eval=50 label_set=worse (audit11 A11-16: rc 0, the metrics of the run "
    "without the key, label_set=worse recorded in config.yaml)",
    CLI_ERROR,
    r"data\.label_set=worse is read only by data\.source=cifar10n, and this run's source is digits: remove "
    r"data\.label_set",
)
def _import_label_set_digits(tmp):
    _import_digits(tmp, "limit_eval=50", "label_set=worse")


@bad_input(
    "import",
    "harness import --data digits.yaml limit_train=5 (audit11 A11-16: rc 0, a training-only key accepted and ignored)",
    CLI_ERROR,
    r"limit_train=5 is not read by harness import, which only evaluates: limit_train sets the number of training "
    r"examples; remove limit_train=5 \(give limit_eval=5 for the evaluated split\)",
)
def _import_limit_train(tmp):
    _import_digits(tmp, "limit_train=5")


@bad_input(
    "import",
    "harness import --data digits.yaml hflip=true crop_scale=0.2 (audit11 A11-16: rc 0, training augmentation "
    "accepted and ignored)",
    CLI_ERROR,
    r"hflip=true is not read by harness import, which only evaluates: hflip sets training augmentation \(the random "
    r"flip\), and an evaluation shows each image's centre crop .*remove hflip=true",
)
def _import_augmentation(tmp):
    _import_digits(tmp, "hflip=true", "crop_scale=0.2")


@bad_input(
    "import",
    "harness import --data a cifar10n config evaluating test only, label_set=worse (audit11 A11-16: the test split's "
    "labels are clean CIFAR-10's, label_set ignored)",
    CLI_ERROR,
    r"label_set=worse is read only on cifar10n's training splits \(train, train45k, val5k\), and harness import "
    r"evaluates test \(clean CIFAR-10 labels\): remove label_set=worse, or evaluate a training split",
)
def _import_label_set_cifar_test(tmp):
    (tmp / "c10n").mkdir()
    _import_digits(tmp, "data.label_set=worse", data=f"data:\n  source: cifar10n\n  path: {tmp / 'c10n'}\n")


# ----------------------------------------------------------------------- A11-17: OOD spec keys it never reads
@bad_input(
    "shift",
    "harness shift --ood 'x:source=digits,label_set=worse' (audit11 A11-17: rc 0, the same AUROC as without the key)",
    CLI_ERROR,
    r"OOD set 'x': label_set=worse is not read by harness shift for an OOD set, which only evaluates: .*an OOD set's "
    r"labels are never read \(only its images are scored\); remove label_set=worse",
)
def _shift_ood_label_set(tmp):
    _shift_ood(tmp, "x:source=digits,split=val,label_set=worse")


@bad_input(
    "shift",
    "harness shift --ood 'x:source=digits,label_noise.rate=0.5,batch_size=3,crop_padding=4' (audit11 A11-17: rc 0, "
    "training keys accepted and ignored)",
    CLI_ERROR,
    r"OOD set 'x': label_noise\.rate=0\.5 is not read by harness shift for an OOD set, which only evaluates: "
    r"label_noise sets noise added to the training labels.*remove label_noise\.rate=0\.5",
)
def _shift_ood_training_keys(tmp):
    _shift_ood(tmp, "x:source=digits,split=val,label_noise.rate=0.5,batch_size=3,crop_padding=4")


@bad_input(
    "shift",
    "harness shift --ood 'x:source=digits,multilabel=true' (audit11 A11-17: rc 0, ignored)",
    CLI_ERROR,
    r"OOD set 'x': multilabel=true is not read by harness shift for an OOD set.*remove multilabel=true",
)
def _shift_ood_multilabel(tmp):
    _shift_ood(tmp, "x:source=digits,split=val,multilabel=true")


@bad_input(
    "shift",
    "harness shift --ood 'x:source=digits,limit_train=3' (audit11 A11-17: rc 0, ignored)",
    CLI_ERROR,
    r"OOD set 'x': limit_train=3 is not read by harness shift for an OOD set.*remove limit_train=3 \(give "
    r"limit_eval=3 for the evaluated split\)",
)
def _shift_ood_limit_train(tmp):
    _shift_ood(tmp, "x:source=digits,split=val,limit_train=3")


@bad_input(
    "shift",
    "harness shift -m a digits run --ood 'x:source=digits' (audit11 A11-17: the run's own test split scored as an "
    "OOD set, AUROC 0.40, without a word)",
    CLI_ERROR,
    r"OOD set 'x' reads split test of data\.source=digits, which shares images with the run's own evaluation data \(data\.eval_split=test\): "
    r"an OOD set holds images the model was not trained to classify.*point it at other data \(another source or "
    r"path\), or drop the OOD set 'x'",
)
def _shift_ood_own_test_split(tmp):
    _shift_ood(tmp, "x:source=digits")


# ------------------------------------------------------------------------ A11-18: a value twice in a list option
@bad_input(
    "bench",
    "harness bench coverage --setting image-dominated --setting image-dominated (audit11 A11-18: rc 0, simulated "
    "twice, one table)",
    CLI_ERROR,
    r"--setting names image-dominated twice \(--setting image-dominated and --setting image-dominated\): each value "
    r"of a list option counts once.*give image-dominated once",
)
def _bench_setting_twice(tmp):
    with mock.patch("harness.bench.coverage.run", side_effect=AssertionError("simulated")):
        try:
            _cli(
                "bench",
                "coverage",
                "--sims",
                "10",
                "--out",
                str(tmp / "bc" / "c.md"),
                *["--setting", "image-dominated"] * 2,
            )
        finally:
            _nothing_under(tmp / "bc", "a coverage table")


@bad_input(
    "shift",
    "harness shift --corruptions gaussian_noise,gaussian_noise --severities 1 (audit11 A11-18: rc 0, the repeat "
    "dropped without a word)",
    CLI_ERROR,
    r"corruptions \(--corruptions\) 'gaussian_noise,gaussian_noise' name gaussian_noise twice: each corrupted set is "
    r"scored once.*name gaussian_noise once",
)
def _shift_corruption_twice(tmp):
    _shift(tmp, "--corruptions", "gaussian_noise,gaussian_noise", "--severities", "1")


@bad_input(
    "shift",
    "harness shift --corruptions noise,gaussian_noise (audit11 A11-18: gaussian_noise, in the family noise, dropped "
    "without a word)",
    CLI_ERROR,
    r"corruptions \(--corruptions\) 'noise,gaussian_noise' name gaussian_noise twice \(noise holds it\)",
)
def _shift_corruption_in_family(tmp):
    _shift(tmp, "--corruptions", "noise,gaussian_noise", "--severities", "1")


@bad_input(
    "shift",
    "harness shift --corruptions gaussian_noise --severities 1,1 (audit11 A11-18: rc 0, the repeat dropped without a "
    "word)",
    CLI_ERROR,
    r"severities \(--severities\) '1,1' name 1 twice: each corrupted set is scored once.*give each severity once",
)
def _shift_severity_twice(tmp):
    _shift(tmp, "--corruptions", "gaussian_noise", "--severities", "1,1")


@bad_input(
    "shift",
    "harness shift -m RUN -m RUN (audit11 A11-18: the folder predicted once, its line printed twice)",
    CLI_ERROR,
    r"--members names .*a twice \(-m .*a and -m .*a\): each value of a list option counts once",
)
def _shift_member_twice(tmp):
    _shift(tmp, "-m", str(tmp / "a"), "--corruptions", "none")


def _shift(tmp, *args: str) -> None:
    """``harness shift -m a --examples 20 --ood none ARGS`` of a run folder with a real model.pt; refused before any
    model is loaded and any shift folder written."""
    _checkpoint_runs(tmp)
    with mock.patch("harness.shift.predict._load_run_model", side_effect=AssertionError("a model was loaded")):
        try:
            _cli("shift", "-m", str(tmp / "a"), "--examples", "20", "--ood", "none", *args)
        finally:
            _nothing_under(tmp / "a" / "shift", "a shift folder")


@bad_input(
    "transfer",
    "harness fewshot --tasks demo_digit --shots 1,1 (audit11 A11-18: rc 0, the repeat dropped without a word)",
    CLI_ERROR,
    r"--shots names 1 twice \(--shots 1,1\): each value of a list option counts once.*give 1 once",
)
def _fewshot_shots_twice(tmp):
    with mock.patch("harness.downstream.fewshot.fewshot", side_effect=AssertionError("the probe ran")):
        try:
            _cli(
                "fewshot",
                *("--model", str(_model_pt(tmp / "model.pt")), "--tasks", "demo_digit", "--log-with", "none"),
                *("--out", str(tmp / "fs1"), "--shots", "1,1"),
            )
        finally:
            _nothing_under(tmp / "fs1", "a fewshot folder")


@bad_input(
    "transfer",
    "harness downstream --tasks demo_digit --tasks demo_digit (audit11 A11-18: the task listed once, the repeat "
    "dropped without a word)",
    CLI_ERROR,
    r"--tasks names demo_digit twice \(--tasks demo_digit and --tasks demo_digit\)",
)
def _downstream_task_twice(tmp):
    import harness.downstream.sweep  # noqa: F401 (the module patched below)

    with mock.patch("harness.downstream.sweep.sweep", side_effect=AssertionError("the sweep ran")):
        downstream("--tasks", "demo_digit", "--tasks", "demo_digit")
