"""The rule of every file and folder a user gives on the command line (:func:`user_path`), as click types:
:class:`LocalPath` (click's ``Path``) and :class:`PathText` (a path or a name). Every command's path options take
them (``harness`` in :mod:`harness.cli`, and the stages' own commands, which sit below :mod:`harness.cli`);
tests/test_cli_paths.py holds every command to it."""

from __future__ import annotations

import click


def _option_name(param: "click.Parameter | None") -> str:
    """How a message names ``param``: its long option (``--out``), or an argument's upper-case name (``OUT``)."""
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.human_readable_name if param is not None else "PATH"


def user_path(value: str, param: "click.Parameter | None") -> str:
    """``value``, a file or folder given on the command line, by the rule of every path a user gives
    (:func:`harness.folder_paths.expand_home`, :func:`harness.folder_paths.check_no_control`): a leading ``~``
    expanded, as the shell would have done (it does not in a quoted value, nor after ``--out=``).

    Raises:
        click.BadParameter: a ``$`` (nothing expands it here) or a control character, naming the option, the value
            and the fix.
    """
    from harness.folder_paths import check_no_control, expand_home

    name = _option_name(param)
    try:
        return expand_home(check_no_control(value, name), name)
    except ValueError as e:
        raise click.BadParameter(str(e), param=param) from None


class LocalPath(click.Path):
    """The type of every file and folder option and argument (``--out``, ``--out-root``, ``--config``, run folders):
    click's ``Path`` (its checks: ``exists``, ``file_okay``...) of the value after :func:`user_path` (``~``
    expanded, a ``$`` refused naming the option). tests/test_cli_paths.py holds every command to
    it."""

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 (click's signature)
        if isinstance(value, str):
            value = user_path(value, param)
        return super().convert(value, param, ctx)


class PathText(click.ParamType):
    """The type of an option that is a path or a name (``--model``: a ``model.pt`` or ``timm:NAME``; ``--data-dir``):
    the text after :func:`user_path`."""

    name = "text"

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 (click's signature)
        return user_path(value, param) if isinstance(value, str) else value


class RunFolder(LocalPath):
    """The type of a run or ensemble folder argument (``harness ensemble``, ``shift``, ``report``): an existing
    folder (:class:`LocalPath`), where a file or a model folder is named for what it is, with the fix
    (:func:`harness.model_folders.not_a_run_folder`: a run's ``model.pt``, a model file, an export; audit21 A21-10),
    and a harness folder of a kind the command does not take (a downstream sweep, an ensemble of sweeps, a few-shot
    study, a report...) too (:func:`harness.folder_kinds.check_kind`, audit26 A26-10/11).

    Args:
        accepted: the kinds of :data:`harness.folder_kinds.KINDS` the command takes (default: runs, imports and
            ensembles of them).
        expected: how the message names them (a key of :data:`harness.folder_kinds.EXPECTED`).

    Raises:
        click.BadParameter: naming the option, the path, what it is and what to give instead.
    """

    def __init__(
        self, accepted: "tuple[str, ...]" = ("run", "import", "ensemble"), expected: str = "run or ensemble"
    ) -> None:
        from pathlib import Path

        super().__init__(exists=True, path_type=Path)
        self.accepted, self.expected = accepted, expected

    def convert(self, value, param, ctx):  # noqa: ANN001, ANN201 (click's signature)
        from harness.folder_kinds import check_kind
        from harness.model_folders import not_a_run_folder

        path = super().convert(value, param, ctx)
        problem = not_a_run_folder(path)
        if problem:
            self.fail(problem, param, ctx)
        try:
            check_kind(path, self.accepted, self.expected)
        except ValueError as e:
            self.fail(str(e), param, ctx)
        return path
