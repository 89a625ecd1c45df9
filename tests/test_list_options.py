"""Every list option of every command is decided in one place (harness.cli.group): a value given twice is refused by
the one rule (refuse_repeated_values), by the command's own check (OWN_REPEAT_CHECK), or is no list (NOT_LISTS)."""

import re

import click
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.cli.group import COMMA_LISTS, NOT_LISTS, OWN_REPEAT_CHECK

#: an option's help that reads as a comma-separated list: "comma-separated", "comma-separate", "e.g. 0.001,0.01"
LIST_HELP = re.compile(r"comma|\d,\d|\w,\w")


def _commands(group: click.Group = main, path: "tuple[str, ...]" = ()):
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path + (name,))
        else:
            yield " ".join(path + (name,)), cmd


def test_every_comma_option_is_decided_and_every_entry_exists():
    options = {
        path: {max(p.opts, key=len): p for p in cmd.params if isinstance(p, click.Option)} for path, cmd in _commands()
    }
    for path, opts in options.items():
        for name, p in opts.items():
            if LIST_HELP.search(p.help or "") and not p.multiple:
                decided = [t for t in (COMMA_LISTS, OWN_REPEAT_CHECK, NOT_LISTS) if name in t.get(path, {})]
                assert len(decided) == 1, f"harness {path} {name}: decide it in one of harness.cli.group's tables"
    for table in (COMMA_LISTS, OWN_REPEAT_CHECK, NOT_LISTS):
        for path, names in table.items():
            assert path in options, path
            assert not set(names) - set(options[path]), (path, set(names) - set(options[path]))


@pytest.mark.parametrize(
    "args, match",
    [
        (["bench", "data", "--size", "10", "--size", "010"], r"--size names 10 \(as 10 and 010\) twice"),
        (["bench", "device", "--part", "loader", "--part=loader"], r"--part names loader twice"),
        (["fewshot", "--model", "m.pt", "--tasks", "demo_digit", "--shots", "5,1,5"], r"--shots names 5 twice"),
        (
            ["downstream", "--upstream", "m.pt", "--tasks", "demo_digit,demo_count", "--tasks", "demo_count"],
            r"--tasks names demo_count twice \(--tasks demo_digit,demo_count and --tasks demo_count\)",
        ),
        (["downstream", "--upstream", "m.pt", "--tasks", "demo_digit", "--gpus", "0,1,0"], r"--gpus names 0 twice"),
    ],
)
def test_a_value_twice_in_a_list_option_is_refused(args, match):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and re.search(match, res.output), res.output


def test_resolution_is_no_list_and_help_is_left_alone():
    res = CliRunner().invoke(main, ["fewshot", "--model", "m.pt", "--tasks", "demo_digit", "--resolution", "32,32"])
    assert "twice" not in res.output, res.output
    assert CliRunner().invoke(main, ["bench", "data", "--size", "1", "--size", "1", "--help"]).exit_code == 0
