"""Every file and folder option of the command line follows the rule of every path a user gives
(:func:`harness.folder_paths.expand_home`): ``~`` expanded, ``$`` refused naming the option (audit13 A13-01)."""

from __future__ import annotations

import os

import click
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.path_options import LocalPath, PathText


def _commands(group: click.Group, ctx: click.Context, path: str = "harness"):
    """Every command of ``group``, below it, with its path (``harness data pack``)."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, ctx, f"{path} {name}")
        else:
            yield f"{path} {name}", cmd


def test_every_path_option_takes_the_rule():
    ctx = click.Context(main)
    bare = [
        f"{where} {p.name}"
        for where, cmd in _commands(main, ctx)
        for p in cmd.params
        if isinstance(p.type, click.Path) and not isinstance(p.type, LocalPath)
    ]
    assert not bare, f"click.Path without the rule of harness.cli.options.LocalPath: {bare}"
    models = {
        where: p.type
        for where, cmd in _commands(main, ctx)
        for p in cmd.params
        if p.name in ("source", "upstream_ckpt")
    }
    assert models and all(isinstance(t, PathText) for t in models.values()), models


def test_home_expanded_and_dollar_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(main, ["data", "pack", "digits", "$HOME/pk", "--shard-size", "50", "limit_train=20"])
    assert r.exit_code == 2, r.output
    assert "OUT '$HOME/pk' holds a $" in r.output and f"e.g. {tmp_path}/pk" in r.output, r.output
    assert not (tmp_path / "$HOME").exists()
    r = runner.invoke(main, ["report", "~/nowhere"])
    assert r.exit_code == 2 and f"{tmp_path}/nowhere" in r.output and "'~" not in r.output, r.output
    assert not os.path.exists(tmp_path / "~")


@pytest.mark.parametrize("value", ["a\nb", "$HOME/x", "${HOME}/x"])
def test_user_path_refusals_name_the_option(value):
    from harness.cli.options import user_path

    param = click.Option(["--out"])
    with pytest.raises(click.BadParameter, match=r"^--out '"):
        user_path(value, param)
