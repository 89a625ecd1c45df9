"""harness.provenance: the command a report records is one a shell could retype."""

from harness.provenance import command_line


def test_the_console_script_python_m_harness_and_harness_cli_read_as_harness():
    assert command_line(["/venv/bin/harness", "run", "cifar10n"]) == "harness run cifar10n"
    assert (
        command_line(["/wt/harness/__main__.py", "downstream", "--tasks", "demo"]) == "harness downstream --tasks demo"
    )
    assert command_line(["/x/site-packages/harness/cli/__main__.py", "run", "shift=null"]) == "harness run shift=null"
    assert command_line(["/x/other/cli/__main__.py", "run"]) == "/x/other/cli/__main__.py run"  # not ours: kept
    assert command_line(["harness", "run", "a b"]) == "harness run 'a b'"
