"""Bad inputs of the head and of ``hetify`` from Python: sizes, options, temperatures, a second hetify."""

from __future__ import annotations

import math

import torch
from torch import nn

from harness.heads import HeteroscedasticHead, hetify

from bad_inputs import bad_input, bad_settings


def _head(tmp, setting: str) -> None:
    HeteroscedasticHead(8, 5, **eval(f"dict({setting})", {"math": math}))  # the settings below are literals


bad_settings(
    "head",
    "HeteroscedasticHead with {}",
    _head,
    [
        ("a fractional num_factors (audit: truncated to 2)", "num_factors=2.7", r"num_factors must be a whole number"),
        ("a fractional train_mc_samples", "train_mc_samples=1.9", r"train_mc_samples must be a whole number"),
        ("no evaluation samples", "eval_mc_samples=0", r"eval_mc_samples must be a whole number in \[1, 1,000,000\]"),
        ("more factors than classes", "num_factors=9", r"num_factors must be an integer in \[1, 5\]"),
        ("an unknown covariance", "covariance='full'", r"unknown covariance 'full': use one of"),
        ("an unknown link", "link='relu'", r"unknown link 'relu'"),
        ("temperature 0", "temperature=0.0", r"temperature must be a finite number at least 0\.001"),
        ("temperature inf", "temperature=math.inf", r"temperature must be a finite number at least 0\.001 .*got inf"),
        ("temperature NaN", "temperature=math.nan", r"temperature must be a finite number at least 0\.001 .*got nan"),
        (
            "a learned τ with an infinite upper bound (audit: uniform predictions)",
            "learn_temperature=True, temperature_bounds=(0.3, math.inf)",
            r"temperature_bounds must be \(lower, upper\) with lower < upper, each a finite number .*got \(0\.3, inf\)",
        ),
        (
            "a learned τ with reversed bounds",
            "learn_temperature=True, temperature_bounds=(3.0, 0.3)",
            r"lower < upper, each a finite number at least 0\.001",
        ),
        ("an unknown noise space", "noise_space='x'", r"unknown noise_space 'x'"),
        ("an unknown diagonal noise", "covariance='diagonal', diag_noise='x'", r"unknown diag_noise 'x'"),
        ("an unknown initialisation", "init='x'", r"unknown init 'x'"),
        ("cov_init_scale without init='flax'", "cov_init_scale=0.1", r"only used with init='flax'"),
        ("an MC chunk of 0", "mc_chunk_size=0", r"mc_chunk_size must be >= 1"),
        ("a negative eval_seed", "eval_seed=-1", r"eval_seed must be a whole number in \[0, 2\*\*32 - 1\]"),
        ("a fractional eval_seed", "eval_seed=1.5", r"eval_seed must be a whole number"),
        ("a negative clip_eps", "clip_eps=-1.0", r"clip_eps must be in \(0, 0.5\)"),
    ],
)


@bad_input(
    "head", "input features of the wrong width at call time", ValueError, r"expected input features of width D=8"
)
def head_wrong_width(tmp):
    HeteroscedasticHead(8, 5)(torch.randn(2, 7))


@bad_input("hetify", "hetify of a bare nn.Linear", ValueError, r"the model is itself a Linear")
def hetify_linear(tmp):
    hetify(nn.Linear(4, 3))


@bad_input("hetify", "a second hetify of a hetified model (audit: nested a head)", ValueError, r"HET head already")
def hetify_twice(tmp):
    import timm

    hetify(hetify(timm.create_model("resnet18", pretrained=False, num_classes=4)))


@bad_input(
    "hetify",
    "a model with no known classifier, no layer= (audit: replaced a hidden layer)",
    ValueError,
    r"is not a timm model .* name it, hetify\(model, layer='fc'\)",
)
def hetify_unknown_classifier(tmp):
    hetify(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 3)))


@bad_input("hetify", "layer= naming no layer", ValueError, r"layer='nope' names 'nope', which Sequential does not have")
def hetify_layer_absent(tmp):
    hetify(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3)), layer="nope")


@bad_input("hetify", "num_classes=0", ValueError, r"num_classes must be an int >= 1")
def hetify_zero_classes(tmp):
    hetify(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3)), layer="1", num_classes=0)


@bad_input(
    "hetify",
    "a misspelt head option (audit: a bare TypeError)",
    TypeError,
    r"unknown head option 'num_factor': did you mean num_factors\?",
)
def hetify_misspelt_option(tmp):
    hetify(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 3)), layer="1", num_factor=3)
