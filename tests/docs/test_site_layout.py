"""The documentation site read on a 1280 px screen (issue 45): no table of the API reference, the guides or the
reports wider than the page, in a real browser (Debian's chromium, which .ci/run installs with apt-get).

The site is built with ``mkdocs build --strict`` (the docs extra) into a temporary folder, or read from
``HARNESS_SITE_DIR`` (.ci/run builds it once and points here); without mkdocs or Chromium the test skips."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    given = os.environ.get("HARNESS_SITE_DIR")
    if given:
        return Path(given)
    pytest.importorskip("mkdocs", reason="the docs extra is not installed")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env=env)
    return out


PAGES = ["reference/heads", "reference/models", "reference/stages", "reference/uncertainty", "reference/cli"]
PAGES += ["guide/head", "guide/experiments", "concepts", "results"]


@pytest.mark.parametrize("page", PAGES)
def test_no_table_is_wider_than_a_1280_px_page(site, page):
    from harness.report.browser import overflowing_tables

    path = site / page / "index.html"
    assert path.is_file(), f"{path} was not built"
    assert overflowing_tables(path, 1280) == []


@pytest.mark.parametrize("report", ["digits", "cifar10n"])
def test_the_committed_reports_fit_and_show_a_figure_within_three_screens(report):
    from harness.report.browser import layout, overflowing_tables

    path = ROOT / "results" / report / "report.html"
    page = layout(path, 1280, 900)
    assert page["nav"] and page["first_figure"] is not None and page["first_figure"] < 3 * 900, page
    assert overflowing_tables(path, 1280) == []


def test_the_header_names_the_installed_version_and_links_the_changelog(site):
    from importlib.metadata import version

    home = (site / "index.html").read_text()
    assert f"het-harness {version('het-harness')}" in home and 'href="changelog/"' in home
    assert "All notable changes" in (site / "changelog" / "index.html").read_text()  # CHANGELOG.md, included
