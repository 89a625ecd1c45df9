"""The registry of covariance variants is the one place a variant lives: a toy variant registered from the tests
only (``tests/plugins/toy_variant.py``) runs through the parametrised head, compile and smoke tests."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.heads.variants import VARIANTS, CovarianceVariant, register_variant

ROOT = Path(__file__).resolve().parents[2]
#: the test files parametrised over the registry, each of which must run the toy
PARAMETRISED = (
    "tests/heads/test_het_properties.py",
    "tests/heads/test_het_compile.py",
    "tests/heads/test_het_api.py",
    "tests/smoke/test_smoke_core.py",
)


def test_a_toy_variant_registered_in_a_test_runs_through_the_parametrised_tests():
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "plugins"))
    # the harness this process imported (installed, or the editable checkout), not the checkout put first on the path
    args = [sys.executable, "-m", "pytest", "-p", "toy_variant", "-p", "no:cacheprovider", "-o", "pythonpath="]
    args += ["-rA", "-k", "toy"]
    r = subprocess.run([*args, *PARAMETRISED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    passed = re.findall(r"^PASSED (\S+?)::", r.stdout, flags=re.M)
    for path in PARAMETRISED:  # every file ran the toy (training, evaluation, compile, parameter count)
        assert passed.count(path) >= 1, f"{path} ran no toy case:\n{r.stdout[-2000:]}"
    assert len(passed) >= 30


def test_the_toy_stays_in_its_own_process():
    assert "toy_shared_low_rank" not in VARIANTS


def test_registering_refuses_a_clash_or_an_unknown_form():
    with pytest.raises(ValueError, match="clashes with a registered one"):
        register_variant(CovarianceVariant("low_rank", "het2", "low_rank", "x"))
    with pytest.raises(ValueError, match="clashes with a registered one"):
        register_variant(CovarianceVariant("new", "het", "low_rank", "x"))
    with pytest.raises(ValueError, match="is not a noise form"):
        register_variant(CovarianceVariant("new", "new", "full", "x"))
    with pytest.raises(ValueError, match="input_dependent_layers must be among layers"):
        register_variant(CovarianceVariant("new", "new", "low_rank", "x", input_dependent_layers=("a",)))
    assert "new" not in VARIANTS
