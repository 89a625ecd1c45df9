"""harness.extras: a missing optional package is named with the extra that installs it, and the extras
listed in the code are those of pyproject.toml."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomllib
from click.testing import CliRunner

from harness import extras

ROOT = Path(__file__).resolve().parents[1]


def _missing(monkeypatch, *modules: str) -> None:
    """Make ``import MODULE`` fail as it does when the package is not installed."""
    for m in modules:
        for name in [n for n in sys.modules if n == m or n.startswith(m + ".")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, m, None)


@pytest.mark.parametrize(
    "module, extra",
    [
        ("tensorflow_datasets", "vtab"),
        ("imagecorruptions", "shift"),
        ("skimage.data", "shift"),
        ("webdataset", "shards"),
        ("tensorboard", "track"),
        ("submitit", "slurm"),
    ],
)
def test_a_missing_module_names_its_extra(monkeypatch, module, extra):
    _missing(monkeypatch, module.split(".")[0])
    with pytest.raises(extras.MissingExtra) as e:
        extras.require(module, "this feature")
    assert isinstance(e.value, ImportError)  # callers that catch ImportError still do
    assert f'pip install "het-harness[{extra}]"' in str(e.value) and "(needed for this feature;" in str(e.value)


def test_an_installed_module_is_returned():
    assert extras.require("submitit", "x").__name__ == "submitit"
    assert extras.available("numpy") and not extras.available("no_such_module_xyz")


def test_an_error_inside_an_installed_package_is_not_hidden(monkeypatch):
    """Only the optional package's own absence becomes MissingExtra; a module it cannot import propagates."""

    def broken(name, *a, **k):
        raise ModuleNotFoundError("No module named 'cv2'", name="cv2")

    monkeypatch.setattr(extras.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError) as e:
        extras.require("imagecorruptions", "x")
    assert not isinstance(e.value, extras.MissingExtra)


def test_only_listed_modules_are_required():
    with pytest.raises(KeyError, match="EXTRAS"):
        extras.require("numpy", "x")


def test_the_extras_are_those_of_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    for module, (extra, package) in extras.EXTRAS.items():
        assert any(req.startswith(package) for req in optional[extra]), (module, extra, package)
    core = " ".join(project["dependencies"])
    for heavy in ("tensorflow", "imagecorruptions", "tensorboard", "scikit-image", "netcal", "webdataset", "submitit"):
        assert heavy not in core, f"{heavy} is in the core dependencies"
    assert any(r.startswith("netcal") for r in optional["test"]) and "netcal" not in " ".join(optional["all"])
    assert project["name"] == extras.DISTRIBUTION


def test_the_command_line_prints_the_install_command(monkeypatch, tmp_path):
    """harness shift without the shift extra: one line naming it, before any work (the settings check)."""
    from harness.cli import main

    _missing(monkeypatch, "imagecorruptions")
    run = tmp_path / "run"
    run.mkdir()
    result = CliRunner().invoke(main, ["shift", "-m", str(run), "--corruptions", "fog", "--ood", "none"])
    assert result.exit_code == 1, result.output
    assert 'pip install "het-harness[shift]"' in result.output and "Traceback" not in result.output


def test_shift_settings_name_the_extra_of_the_blobs_set(monkeypatch):
    from harness.shift.settings import ShiftSettings, check_settings

    _missing(monkeypatch, "skimage.data")  # (imagecorruptions itself imports other parts of scikit-image)
    with pytest.raises(extras.MissingExtra, match=r"het-harness\[shift\]"):
        check_settings(ShiftSettings(corruptions=[], severities=[1], ood=["blobs"]))
    check_settings(ShiftSettings(corruptions=[], severities=[1], ood=["gaussian"]))  # needs nothing optional
