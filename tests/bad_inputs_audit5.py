"""Bad inputs found by the fifth reliability audit (2026-11-28, issue 42): head options that were dropped, magnitudes
without a bound, advice that could not be followed, and messages that named the wrong cause (``audit5 <case id>``)."""

from __future__ import annotations

from pathlib import Path

import click
from bad_inputs_schemas import _upstream

from bad_inputs import bad_input, bad_settings
from bad_inputs_downstream import CLI_ERROR, downstream, task_folder
from bad_inputs_safety import _experiment

bad_settings(
    "upstream",
    "harness upstream with {} (audit5)",
    _upstream,
    [
        (
            "a learned τ given a start outside its bounds (U06: the start ignored)",
            "model.head={covariance: low_rank, learn_temperature: true, temperature: 3.0}",
            r"temperature=3\.0 is where the learned τ starts: it must lie strictly inside temperature_bounds",
        ),
        (
            "num_factors on a head without factors (U07, U08: dropped, config.yaml kept it)",
            "model.head={covariance: diagonal, num_factors: 3}",
            r"num_factors=3 is for a head with factors .*covariance='diagonal' has none",
        ),
        (
            "model.head_bias_init=1e12 (U03: uniform predictions, rc 0)",
            "model.head_bias_init=1e12",
            r"model\.head_bias_init must be in \[-100, 100\]",
        ),
        ("optim.lr=1e12 (U01: stopped after an epoch)", "optim.lr=1e12", r"optim\.lr must be in \(0, 100\]"),
        (
            "optim.weight_decay=1e12 (U02: advice named optim.lr)",
            "optim.weight_decay=1e12",
            r"optim\.weight_decay must be in \[0, 1\]",
        ),
        (
            "model.head.cov_init_scale=1e12 (U04: advice named optim.lr)",
            "model.head={covariance: low_rank, init: flax, cov_init_scale: 1.0e12}",
            r"cov_init_scale must be a finite number > 0 \(at most 100",
        ),
        (
            "model.head.eval_mc_samples=1e9 (U41: no output for 300 s)",
            "model.head.eval_mc_samples=1000000000",
            r"eval_mc_samples must be a whole number in \[1, 1,000,000\]",
        ),
        (
            "model.head=none (U40: 'Cannot assign str to Dict', no fix)",
            "model.head=none",
            r"give a mapping of settings, one by one \(model\.head\.covariance=none\)",
        ),
        (
            "model.head.init=7 (U45: the names not listed)",
            "model.head.init=7",
            r"init must be a name, got 7 \(int\): give one of 'keras', 'flax', 'torch'",
        ),
        (
            "optim.betas[5]=0.5 (U05: described a list/mapping mix-up)",
            "optim.betas[5]=0.5",
            r"an index sets an element of a list that exists .*optim\.betas=\[v1,v2,\.\.\.\]",
        ),
    ],
    error=(ValueError, click.ClickException),
)


def _upstream_reads_data(tmp: Path, *overrides: str) -> None:
    """``harness upstream`` refusing a setting once it has read the data (the run folder then holds its lock file
    and nothing else: no checkpoint, config or output)."""
    from bad_inputs import ROOT
    from bad_inputs_safety import _cli

    out = tmp / "run"
    try:
        _cli(
            "upstream",
            "--no-progress",
            "--config",
            str(ROOT / "upstream/configs/digits_base.yaml"),
            f"output_dir={out}",
            *overrides,
        )
    finally:
        assert not out.exists() or {p.name for p in out.iterdir()} <= {".lock"}, "work started before the error"


bad_settings(
    "upstream",
    "harness upstream with {} (audit5)",
    _upstream_reads_data,
    [
        (
            "data.num_classes=5 on the 10-class digits (U29: ignored, a 10-class model)",
            "data.num_classes=5",
            r"data\.num_classes=5, but the digits data has 10 classes: unset it",
        ),
        (
            "train.grad_accum_steps=1e6 (U35: one optimiser step of 2 micro-batches)",
            "train.grad_accum_steps=1000000",
            r"one optimiser step takes train\.grad_accum_steps x data\.batch_size = 1000000 x 64",
        ),
    ],
    error=(ValueError, click.ClickException),
)


@bad_input(
    "head",
    "HeteroscedasticHead(eval_seed=2**64) (P09: the same outputs as eval_seed=0)",
    ValueError,
    r"eval_seed must be a whole number in \[0, 2\*\*32 - 1\]",
)
def _eval_seed_wraps(tmp):
    from harness.heads import HeteroscedasticHead

    HeteroscedasticHead(8, 5, eval_seed=2**64)


@bad_input(
    "experiment",
    "harness run with a user's file in the report folder (F07: advised --overwrite, which harness run lacks)",
    ValueError,
    r"holds files no report wrote: give the experiment another results_root=PATH$",
)
def _run_report_taken(tmp: Path):
    (tmp / "a" / "b" / "results" / "digits").mkdir(parents=True)
    (tmp / "a" / "b" / "results" / "digits" / "report.md").write_text("mine")
    _experiment(tmp)


@bad_input(
    "experiment",
    "a tune key that is no setting (X04: blamed an override the user never wrote)",
    ValueError,
    r"method 'ls': tune\.key 'train\.bogus' is not a setting of the upstream config \(train holds .*epochs",
)
def _tune_unknown_key(tmp):
    _experiment(tmp, "methods.ls.tune.key=train.bogus")


@bad_input(
    "experiment",
    "fractional values for a whole-number tune key (X18: integer settings could not be tuned at all)",
    ValueError,
    r"method 'ls': train\.epochs counts whole units, so tune\.values must be whole numbers",
)
def _tune_int_key(tmp):
    _experiment(tmp, "methods.ls.tune={key: train.epochs, values: [1, 2.5]}")


@bad_input(
    "downstream",
    "--lrs 1e12 (D03: refused by a file-name rule)",
    CLI_ERROR,
    r"learning rates \(--lrs, lrs\) must be a non-empty list of positive numbers, at most 100",
)
def _lrs_huge(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:5", "--lrs", "1e12")


@bad_input(
    "downstream",
    "a custom task with 0 classes (D08: the format message)",
    CLI_ERROR,
    r"NUM_CLASSES must be a whole number >= 1 \(the task's class count\), got 0",
)
def _task_k0(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:0")


@bad_input(
    "downstream",
    "a sweep.json that is not JSON in --out (F05: a bare 'Expecting value', no file named)",
    CLI_ERROR,
    r"out/sweep\.json is not a sweep's record \(not a JSON object with its settings\)",
)
def _sweep_json_garbage(tmp):
    Path("out").mkdir()
    Path("out/sweep.json").write_text("not json")
    downstream("--tasks", f"birds={task_folder(tmp)}:5", "--overwrite")
