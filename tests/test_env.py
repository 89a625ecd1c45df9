"""``harness env``: versions, devices and CPU features for bug reports, as lines and as JSON."""

import json
import shutil

import pytest
from click.testing import CliRunner

from harness.cli import main


@pytest.fixture(scope="module")
def env():
    from harness.env import environment

    return environment()


def test_environment_gives_versions_devices_and_cpu_features(env):
    import numpy
    import torch

    from harness.env import CPU_FLAGS, PACKAGES
    from harness.training.precision import native_bf16

    assert set(env["versions"]) == {"python", *PACKAGES}
    assert env["versions"]["numpy"] == numpy.__version__ and torch.__version__.startswith(env["versions"]["torch"])
    assert env["bf16"]["cpu"] == ("native" if native_bf16("cpu") else "emulated")
    assert env["bf16"]["mixed_precision_auto"] == ("bf16" if native_bf16(env["bf16"]["training_device"]) else "no")
    assert env["cpu"]["torch_threads"] == torch.get_num_threads() and env["cpu"]["usable_cores"] >= 1
    assert env["cuda"]["available"] == torch.cuda.is_available()
    assert len(env["cuda"]["devices"]) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    if shutil.which("lscpu"):  # the flags are lscpu's; its summary line says the same of avx512_bf16
        assert set(env["cpu"]["flags"]) == set(CPU_FLAGS)
        said = "avx512_bf16: yes" in env["cpu"]["lscpu"]
        assert env["cpu"]["flags"]["avx512_bf16"] == said


def test_describe_prints_one_line_per_topic(env):
    from harness.env import describe

    text = describe(env)
    lines = text.splitlines()
    assert lines[0].startswith("het-harness ") and f"Python {env['versions']['python']}" in lines[0]
    for start in (
        "versions: torch ",
        "optional: ",
        "CPU: ",
        "cores: ",
        "CPU features: ",
        "bf16 on the CPU: ",
        "training device: ",
        "CUDA",
        "environment: ",
    ):
        assert sum(line.startswith(start) for line in lines) == 1, (start, text)
    assert f"bf16 on the CPU: {env['bf16']['cpu']}" in text


def test_harness_env_json_is_the_environment(env):
    res = CliRunner().invoke(main, ["env", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert (
        got["versions"] == env["versions"] and got["bf16"] == env["bf16"] and got["cpu"]["flags"] == env["cpu"]["flags"]
    )
    res = CliRunner().invoke(main, ["env"])
    assert res.exit_code == 0 and "bf16 on the CPU:" in res.output


def test_extras_are_read_from_the_installed_metadata_as_pyproject_declares_them():
    """Every package of every extra in pyproject.toml is reported under that extra, by its distribution name (the
    shift extra installs imagecorruptions-imaug, not imagecorruptions), installed or not."""
    from pathlib import Path

    import tomllib
    from packaging.requirements import Requirement

    from harness.extras import DISTRIBUTION, extra_packages

    declared = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    reported = extra_packages()
    for extra, lines in declared["optional-dependencies"].items():
        names = {Requirement(x).name for x in lines if Requirement(x).name != DISTRIBUTION}
        assert set(reported[extra]) == names, extra
    assert "imagecorruptions-imaug" in reported["shift"] and "scikit-image" in reported["shift"]
    # the suite runs on the README's install, pip install -e ".[test]": every package of those extras is present
    for extra in ("vtab", "shift", "shards", "track", "slurm", "test"):
        assert "not installed" not in reported[extra].values(), (extra, reported[extra])
