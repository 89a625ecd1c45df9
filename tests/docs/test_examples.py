"""Every code block of README.md and docs/**/*.md runs (tests/docs/examples.py): an example whose path, flag or
API has rotted fails here. Conventions: docs/development.md, "The documentation's examples run"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import examples as E  # noqa: E402

RUNNER = Path(E.__file__)
#: blocks that may be marked not-run (a GPU, a cluster, a download, the install and the suite themselves)
MAX_NOT_RUN = 16


def _run(workdir: Path, *pages: Path, timeout: int = 1800) -> "subprocess.CompletedProcess":
    return subprocess.run(
        [sys.executable, str(RUNNER), *map(str, pages), "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_every_block_is_run_or_marked_with_a_reason():
    """Every page is in the site's navigation; every block names a language that is run or shown; the blocks
    that are not run say why, and they are few."""
    pages = E.pages()
    on_disk = {p.resolve() for p in (E.ROOT / "docs").rglob("*.md")}
    assert on_disk == {p.resolve() for p in pages[1:]}, "docs pages missing from mkdocs.yml's nav (or the reverse)"
    blocks = [b for p in pages for b in E.blocks(p.read_text())]
    not_run = [b for b in blocks if b.not_run is not None]
    assert all(b.not_run.strip() for b in not_run), "a not-run marker without its reason"
    assert len(not_run) <= MAX_NOT_RUN, f"{len(not_run)} blocks are not run: run them with small settings"
    assert sum(b.runs for b in blocks) >= 40
    unchecked = {str(p.relative_to(E.ROOT)): E.unchecked_expectations(p.read_text()) for p in pages}
    assert not any(unchecked.values()), f"blocks whose 'Expect ...' has no <!-- expect: --> marker: {unchecked}"
    assert sum(len(b.expect) for b in blocks) >= 8  # the pages' stated outputs, checked


def test_a_stated_expectation_is_checked(tmp_path):
    """A block whose output differs from what the page says fails; the right statement passes."""
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nprint(f'ECE {0.0836:.4f}')\n```\n<!-- expect: ^ECE 0\\.08\\d\\d$ -->\n\nExpect `ECE 0.08..`.\n\n"
        "```python\nprint('NLL 0.45')\n```\n<!-- expect: NLL 0\\.3 -->\n\nExpect `NLL 0.3`.\n"
    )
    assert E.unchecked_expectations("```python\nprint(1)\n```\n\nExpect `1`.\n") == [1]
    assert [b.expect for b in E.blocks(page.read_text())] == [("^ECE 0\\.08\\d\\d$",), ("NLL 0\\.3",)]
    done = _run(tmp_path / "work", page, timeout=300)
    failed = done.stdout.split("FAILED BLOCKS:")[1]
    assert done.returncode == 1 and "page.md:8 (python)" in failed and "does not show what the page states" in failed
    assert "page.md:1 " not in failed


def test_the_parser_reads_markers_languages_and_continuations():
    page = (
        "text\n\n<!-- not-run: needs a GPU -->\n```bash\naccelerate launch x\n```\n\n```python\nprint(1)\n```\n"
        "```bash\nharness upstream --config c.yaml \\\n    train.epochs=1  # small\n# a comment\nls\n```\n"
    )
    gpu, py, sh = E.blocks(page)
    assert (gpu.not_run, gpu.runs, py.runs, sh.runs) == ("needs a GPU", False, True, True)
    assert E.command_lines(sh.code) == ["harness upstream --config c.yaml train.epochs=1  # small", "ls"]
    with pytest.raises(ValueError, match="without a language"):
        E.blocks("```\nx\n```\n")
    with pytest.raises(ValueError, match="neither run"):
        E.blocks("```rust\nfn main() {}\n```\n")


def test_a_wrong_path_or_flag_fails(tmp_path):
    """The acceptance check: an example naming a folder that the harness does not write, or a flag that does not
    exist, fails the test (the old README's runs/upstream/digits_het_s0 did)."""
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\nharness report runs/upstream/digits_het_s0 --name x\n```\n\n"
        "```bash\nharness upstream --configg upstream/configs/digits_het.yaml\n```\n\n"
        "```python\nfrom harness.uncertainty import metrics as M\nM.no_such_metric\n```\n\n"
        "```bash\nharness --version\n```\n"
    )
    done = _run(tmp_path / "work", page, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failed = done.stdout.split("FAILED BLOCKS:")[1]
    assert "page.md:1 (bash)" in failed and "does not exist" in failed
    assert "page.md:5 (bash)" in failed and "--configg" in failed
    assert "page.md:9 (python)" in failed and "no_such_metric" in failed
    assert "page.md:14" not in failed  # the good block ran


@pytest.mark.slow
def test_every_example_runs(tmp_path):
    """README.md and every docs page, in the site's order, in one working folder (the slow test: every command
    the pages show, with small settings)."""
    done = _run(tmp_path / "work")
    assert done.returncode == 0, "\n".join([done.stdout[-6000:], done.stderr[-3000:]])
