"""harness.config: schema defaults <- file <- overrides, and loads that do not change one another."""

from dataclasses import asdict

import pytest

from harness.config import load_config
from harness.upstream.config import UpstreamConfig


def test_one_loads_overrides_do_not_reach_the_next_load(tmp_path):
    """The schema's defaults are built once and shared: a load's file, overrides and ``key={}`` must not change
    them."""
    fresh = asdict(UpstreamConfig())
    path = tmp_path / "run.yaml"
    path.write_text("seed: 3\nmodel: {head: {covariance: low_rank, num_factors: 2}}\n")
    first = load_config(UpstreamConfig, path, ["optim.lr=0.5", "model.head={}", "data.limit_train=64"])
    assert first.seed == 3 and first.optim.lr == 0.5 and first.model.head == {} and first.data.limit_train == 64
    assert asdict(load_config(UpstreamConfig)) == fresh
    again = load_config(UpstreamConfig, path)
    assert again.model.head == {"covariance": "low_rank", "num_factors": 2} and again.optim.lr == fresh["optim"]["lr"]


def test_an_unknown_key_and_a_bad_override_are_named():
    with pytest.raises(ValueError, match="optim.nope"):
        load_config(UpstreamConfig, overrides=["optim.nope=1"])
    with pytest.raises(ValueError, match="key=value"):
        load_config(UpstreamConfig, overrides=["optim.lr"])
