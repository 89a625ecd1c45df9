"""The type and range of every ``--slurm`` value (audit14 A14-08): one table (``PARAMETERS``) that the parsing and
the check both read, in step with what submitit takes."""

import pytest

from harness.training.slurm import EXECUTOR_KEYS, PARAMETERS, check_slurm_keys, slurm_parameters

submitit = pytest.importorskip("submitit")


def test_every_key_an_executor_reads_has_a_rule():
    assert set(EXECUTOR_KEYS["slurm"]) == set(PARAMETERS)
    assert set(EXECUTOR_KEYS["submitit-local"]) <= set(PARAMETERS)


@pytest.mark.parametrize("key", sorted(PARAMETERS))
def test_each_example_holds_and_submitit_takes_it(key, tmp_path):
    """An example parsed as a user would give it holds its rule, and submitit takes it (the debug cluster submits
    nothing)."""
    spec = PARAMETERS[key]
    parsed = slurm_parameters([f"{key}={spec.example.strip(chr(39))}"])
    check_slurm_keys("slurm", parsed)
    submitit.AutoExecutor(folder=str(tmp_path), cluster="debug").update_parameters(**parsed)


@pytest.mark.parametrize(
    "option, rule",
    [
        ("timeout_min=-5", "timeout_min .* must be a whole number >= 1, got -5"),
        ("timeout_min=0", "must be a whole number >= 1, got 0"),
        ("timeout_min=nan", "must be a whole number >= 1, got nan"),
        ("timeout_min=abc", "must be a whole number >= 1, got 'abc'"),
        ("timeout_min=1.5", "must be a whole number >= 1, got 1.5"),
        ("slurm_time=0", "slurm_time .* must be a whole number >= 1"),
        ("mem_gb=0", "mem_gb .* must be > 0, got 0"),
        ("cpus_per_task=0", "cpus_per_task .* must be a whole number >= 1"),
        ("gpus_per_node=-1", "gpus_per_node .* must be a whole number >= 0"),
        ("slurm_partition=a b", "slurm_partition .* must be a name: text without spaces"),
        ("slurm_partition=", "slurm_partition .* must be a name"),
        ("slurm_mem=lots", "slurm_mem .* must be a SLURM memory size"),
        ("slurm_use_srun=maybe", "slurm_use_srun .* must be true or false, got 'maybe'"),
        ("slurm_comment=a\nb", "slurm_comment .* must be text without control characters"),
    ],
)
def test_bad_values_are_refused_by_name(option, rule):
    parsed = slurm_parameters([option])
    with pytest.raises(ValueError, match=rf"(?s)^--slurm .*{rule}.*: give e\.g\. --slurm "):
        check_slurm_keys("slurm", parsed)


def test_values_are_parsed_as_their_type():
    got = slurm_parameters(
        ["timeout_min=60", "name=2024", "slurm_mem=16000", "slurm_setup=module load a", "slurm_setup=echo b"]
        + ["slurm_additional_parameters=reservation=r1", "slurm_exclusive=true", "stderr_to_stdout=false"]
    )
    assert got == {
        "timeout_min": 60,
        "name": "2024",  # a name stays text (submitit asserts a str)
        "slurm_mem": "16000",
        "slurm_setup": ["module load a", "echo b"],
        "slurm_additional_parameters": {"reservation": "r1"},
        "slurm_exclusive": True,
        "stderr_to_stdout": False,
    }
    check_slurm_keys("slurm", got)


def test_a_key_of_one_value_given_twice_is_refused():
    import click

    with pytest.raises(click.BadParameter, match="timeout_min is given twice"):
        slurm_parameters(["timeout_min=5", "timeout_min=6"])
