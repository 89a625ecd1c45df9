"""Bad inputs of the HET head and ``hetify`` found by the sixth reliability audit (``audit6 <case id>``): head options
that the chosen configuration does not use (dropped without a word, from Python, an upstream config and an export's
config.json), a call's sample count and seed truncated or wrapped, the ``meta`` device, an ``example_input`` that
does not fit the model, and a classifier registered twice."""

from __future__ import annotations

import math
from pathlib import Path

import click
import torch
from bad_inputs_schemas import _from_pretrained
from torch import nn

from bad_inputs import bad_input, bad_settings, handled

NOISY = r"or choose a noisy covariance \(diagonal, low_rank, parameter_efficient\)"


def _head(tmp, setting: str) -> None:
    from harness.heads import HeteroscedasticHead

    HeteroscedasticHead(8, 5, **eval(f"dict({setting})", {"math": math}))  # the settings below are literals


bad_settings(
    "head",
    "HeteroscedasticHead with {}",
    _head,
    [
        (
            "sample counts on a homoscedastic head (audit6 RT11: accepted, a hom head draws no samples)",
            "covariance='none', train_mc_samples=10, eval_mc_samples=7",
            r"train_mc_samples=10 is for a head that draws noise \(its Monte Carlo samples in training\); "
            rf"covariance='none' draws no noise: leave train_mc_samples unset \(its default, 1000\), {NOISY}",
        ),
        (
            "diag_noise='shared_scalar' on a homoscedastic head (audit6 RT13: dropped)",
            "covariance='none', diag_noise='shared_scalar'",
            rf"diag_noise='shared_scalar' is for a head that draws noise .*covariance='none' draws no noise.*{NOISY}",
        ),
        (
            "pe_noise_bias=False on a diagonal head (audit6 RT14: a PE-only option, dropped)",
            "covariance='diagonal', pe_noise_bias=False",
            r"pe_noise_bias=False is for the parameter-efficient head .*covariance='diagonal' has no shared V: leave "
            r"pe_noise_bias unset \(its default, True\), or choose covariance='parameter_efficient'",
        ),
        (
            "noise_space='pre_logits' on a homoscedastic head (audit6 RT15: dropped)",
            "covariance='none', noise_space='pre_logits'",
            rf"noise_space='pre_logits' is for a head that draws noise \(where its noise is added\).*{NOISY}",
        ),
        (
            "temperature_bounds without learn_temperature (audit6 RT16: dropped)",
            "covariance='diagonal', temperature_bounds=(0.05, 5.0)",
            r"temperature_bounds=\(0\.05, 5\.0\) is for a learned temperature .*learn_temperature is False.*"
            r"set learn_temperature=True",
        ),
        (
            "temperature=2.0 and temperature_bounds=(0.5, 1.0) without learning (audit6 N34: τ outside the bounds, no word)",
            "temperature=2.0, temperature_bounds=(0.5, 1.0)",
            r"temperature_bounds=\(0\.5, 1\.0\) is for a learned temperature",
        ),
        (
            "share_samples_across_batch=True on a homoscedastic head (audit6, RT11's kind)",
            "covariance='none', share_samples_across_batch=True",
            rf"share_samples_across_batch=True is for a head that draws noise.*{NOISY}",
        ),
        (
            "mc_chunk_size=4 on a homoscedastic head (audit6, RT11's kind)",
            "covariance='none', mc_chunk_size=4",
            rf"mc_chunk_size=4 is for a head that draws noise.*{NOISY}",
        ),
        (
            "eval_seed=None on a homoscedastic head (audit6, RT11's kind)",
            "covariance='none', eval_seed=None",
            rf"eval_seed=None is for a head that draws noise \(the seed of its evaluation noise\).*{NOISY}",
        ),
        (
            "clip_eps on a homoscedastic head (audit6, RT11's kind)",
            "covariance='none', clip_eps=1e-7",
            rf"clip_eps=1e-07 is for a head that draws noise.*{NOISY}",
        ),
        (
            "cov_init_scale under init='flax' on a homoscedastic head (audit6, RT11's kind: no covariance layers)",
            "covariance='none', init='flax', cov_init_scale=0.1",
            rf"cov_init_scale=0\.1 is for a noisy head's covariance layers .*{NOISY}",
        ),
    ],
)


def _upstream_hom(tmp: Path, *overrides: str) -> None:
    """``harness upstream`` on the homoscedastic digits config with ``overrides`` (a case's setting holds them
    separated by spaces): it must refuse before the run folder is made."""
    from bad_inputs import ROOT
    from bad_inputs_safety import _cli

    out = tmp / "run"
    try:
        config = str(ROOT / "upstream/configs/digits_hom.yaml")
        _cli("upstream", "--no-progress", "--config", config, f"output_dir={out}", *overrides)
    finally:
        assert not out.exists(), "the run folder was made before the error"


bad_settings(
    "upstream",
    "harness upstream --config digits_hom.yaml with {} (audit6, refused before the run folder is made)",
    lambda tmp, setting: _upstream_hom(tmp, *setting.split()),
    [
        (
            "model.head.train_mc_samples=10 model.head.eval_mc_samples=10 (audit6 RT35: rc 0, a run folder, the samples "
            "dropped)",
            "model.head.train_mc_samples=10 model.head.eval_mc_samples=10",
            r"model\.head: train_mc_samples=10 is for a head that draws noise .*covariance='none' draws no noise",
        ),
        (
            "model.head.noise_space=pre_logits (audit6 RT15 through a config)",
            "model.head.noise_space=pre_logits",
            r"model\.head: noise_space='pre_logits' is for a head that draws noise",
        ),
    ],
    error=(ValueError, click.ClickException),
)


bad_input(
    "export",
    "Classifier.from_pretrained of an export whose config.json gives a homoscedastic head sample counts (audit6 "
    "RT60: loaded, the counts dropped)",
    match=r"config\.json: its stored model config does not build a model \(eval_mc_samples=10 is for a head that "
    r"draws noise",
)(
    lambda tmp: _from_pretrained(
        tmp, lambda c: c["harness"]["model"].update(head={"covariance": "none", "eval_mc_samples": 10})
    )
)


def _call(tmp, setting: str) -> None:
    from harness.heads import HeteroscedasticHead

    head = HeteroscedasticHead(8, 5, covariance="low_rank", num_factors=2, eval_mc_samples=8).eval()
    args = eval(f"dict({setting})")  # the settings below are literals
    (head.sample_logits if args.pop("samples", False) else head)(torch.randn(2, 8), **args)


bad_settings(
    "head",
    "a HET head called with {}",
    _call,
    [
        (
            "mc_samples=2.7 (audit6 RT19: truncated to 2)",
            "mc_samples=2.7",
            r"mc_samples must be a whole number in \[1, 1,000,000\] .*got 2\.7 \(float\): give an integer count",
        ),
        (
            "mc_samples=True in sample_logits (audit6, RT19's kind: one sample)",
            "mc_samples=True, samples=True",
            r"mc_samples must be a whole number in \[1, 1,000,000\] .*got True \(bool\)",
        ),
        (
            "seed=-1 (audit6 N21: wrapped to 2**64 - 1)",
            "seed=-1",
            r"seed must be a whole number in \[0, 2\*\*32 - 1\] \(numpy's seed range\), or None \(the head's "
            r"eval_seed\), got -1",
        ),
        (
            "seed=2**70 (audit6 N22: folded to seed 0)",
            "seed=2**70",
            r"seed must be a whole number in \[0, 2\*\*32 - 1\]",
        ),
        (
            "seed=1.7 (audit6 N22c: truncated to seed 1)",
            "seed=1.7",
            r"seed must be a whole number in \[0, 2\*\*32 - 1\] .*got 1\.7 \(float\)",
        ),
    ],
)


@handled("head", "a HET head and its input on the meta device (audit6 N28: 'unsupported scalarType' from autocast)")
def _meta_device(tmp):
    from harness.heads import HeteroscedasticHead

    shapes = []
    for kw in (dict(covariance="none"), dict(covariance="low_rank", num_factors=2)):
        head = HeteroscedasticHead(8, 5, **kw).to("meta")
        x = torch.randn(3, 2, 8).to("meta")
        for training in (True, False):
            out = head.train(training)(x)
            assert out.is_meta and out.shape == (3, 2, 5), out
        samples = head.sample_logits(x, mc_samples=4)
        assert samples.is_meta and samples.shape == (3, 2, 4, 5)
        shapes.append(tuple(out.shape))
    return f"shapes only: logits of shape {shapes[0]} for [3, 2, 8] meta features, no noise drawn"


@bad_input(
    "hetify",
    "hetify with an example_input the model does not take (audit6 H03: torch's 'mat1 and mat2 shapes cannot be "
    "multiplied', no word of example_input)",
    match=r"example_input of shape \(2, 9\) does not fit Sequential: its forward raised RuntimeError: mat1 and mat2 "
    r"shapes cannot be multiplied .*pass example_input=<a batch the model accepts>",
)
def _hetify_example_misfit(tmp):
    from harness.heads import hetify

    hetify(nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 5)), example_input=torch.randn(2, 9))


@handled(
    "hetify",
    "hetify of a classifier registered twice, m.extra = m[1] (audit6 H06, A12: m.extra kept the old Linear)",
    match=r"the same head at both",
)
def _hetify_tied(tmp):
    from harness.heads import HeteroscedasticHead, hetify

    m = nn.Sequential(nn.Linear(8, 6), nn.Linear(6, 5))
    m.extra = m[1]
    hetify(m, layer="1")
    assert isinstance(m[1], HeteroscedasticHead) and m.extra is m[1], (m[1], m.extra)
    assert m._modules["extra"] is m._modules["1"]  # both registrations, not only the one named_children() yields
    return "m[1] and m.extra replaced: the same head at both, so the tie is kept"
