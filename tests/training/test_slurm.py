"""``--slurm key=value`` is read by one function for both stages: numbers become numbers, the rest stays text."""

import click
import pytest

from harness.training.slurm import slurm_parameters


def test_numbers_and_text():
    got = slurm_parameters(["mem_gb=1.5", "timeout_min=60", "slurm_partition=gpu", "slurm_comment=a=b"])
    assert got == {"mem_gb": 1.5, "timeout_min": 60, "slurm_partition": "gpu", "slurm_comment": "a=b"}
    assert isinstance(got["timeout_min"], int)


@pytest.mark.parametrize("bad", ["partition", "=gpu"])
def test_a_pair_without_key_or_equals_is_refused(bad):
    with pytest.raises(click.BadParameter, match="expected key=value"):
        slurm_parameters([bad])


def test_both_stages_read_it():
    """The upstream and downstream commands call this function, not a copy of it."""
    import inspect

    import harness.cli.transfer as downstream_cli
    import harness.upstream.cli as upstream_cli

    for module in (upstream_cli, downstream_cli):
        assert module.slurm_parameters is slurm_parameters
        assert 'partition("=")' not in inspect.getsource(module)
