"""The ``--slurm`` keys each executor reads (audit11 A11-23, A11-25): one table for both stages, in step with
submitit's own parameter names (checked through its public ``update_parameters``)."""

import pytest

from harness.training.slurm import EXECUTOR_KEYS, GENERIC_PARAMETERS, check_slurm_available, check_slurm_keys

submitit = pytest.importorskip("submitit")
#: a value of the type submitit checks for each generic parameter
GENERIC_VALUES = {"name": "x", "mem_gb": 1.5, "stderr_to_stdout": True}


def test_every_key_accepted_under_slurm_is_a_submitit_parameter(tmp_path):
    """submitit validates every prefixed name whatever the cluster; the debug cluster submits nothing."""
    ex = submitit.AutoExecutor(folder=str(tmp_path), cluster="debug")
    for key in EXECUTOR_KEYS["slurm"]:
        ex.update_parameters(**{key: GENERIC_VALUES.get(key, 1) if key in GENERIC_PARAMETERS else "1"})
    with pytest.raises(NameError):  # and it refuses one that is not (what check_slurm_keys refuses first)
        ex.update_parameters(slurm_bogus=1)


@pytest.mark.parametrize(
    "executor, parameters, message",
    [
        ("submitit-local", {"slurm_partition": "gpu"}, "leave slurm_partition out, or use --executor slurm"),
        ("submitit-local", {"mem_gb": 4, "name": "x"}, "they would be ignored: leave mem_gb name out"),
        ("slurm", {"partition": "gpu"}, "(did you mean slurm_partition?)"),
        ("slurm", {"local_setup": "x"}, "local_setup is not among the submitit parameters --executor slurm reads"),
        ("local", {"timeout_min": 5}, "--executor local runs in this process and reads no --slurm key"),
    ],
)
def test_keys_an_executor_does_not_read_are_refused(executor, parameters, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
        check_slurm_keys(executor, parameters)


def test_keys_an_executor_reads_pass():
    check_slurm_keys("submitit-local", {"timeout_min": 30})
    check_slurm_keys("slurm", {"slurm_partition": "gpu", "timeout_min": 30, "slurm_timeout_min": 30, "mem_gb": 8})


def test_slurm_needs_sbatch_and_srun(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    check_slurm_available("submitit-local")  # nothing to check
    with pytest.raises(ValueError, match="this machine has no sbatch and no srun on its PATH"):
        check_slurm_available("slurm")
    for name in ("sbatch", "srun"):
        (folder / name).write_text("#!/bin/sh\n")
        (folder / name).chmod(0o755)
    check_slurm_available("slurm")
