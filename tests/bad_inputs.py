"""The catalogue of bad inputs: what a user may get wrong, and the error each must get.

Each area keeps its cases in ``tests/bad_inputs_<area>.py`` with the :func:`bad_input` decorator: a
function that does what the user would do (in a fresh temporary folder) and must raise ``error``
with a message matching ``match`` (the message names the fix). A case whose right outcome is a correct result
(an interrupted run that resumes, an ``--overwrite`` that writes beside the user's files and keeps them) is
registered with :func:`handled`: its function checks the result and returns what happened. ``tests/test_bad_inputs.py``
runs every case; this file, run as a script, runs them too and writes the table of what each input now
gets to ``results/reliability.md``::

    python tests/bad_inputs.py            # writes results/reliability.md
"""

from __future__ import annotations

import importlib
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass
class Handled:
    """The outcome of a :func:`handled` case: what the harness did (checked by the case)."""

    message: str


@dataclass
class BadInput:
    """One bad input.

    Attributes:
        area: where it is given (``upstream``, ``downstream``, ``uncertainty``, ...).
        what: the input, as a user would describe it.
        trigger: ``tmp_path -> None``; does what the user does and must raise. It runs with the
            temporary folder as working directory; repository files are reached through ``ROOT``.
        error: the exception type(s) it must raise; None: it must raise nothing (a :func:`handled` case, whose
            trigger checks the result and returns what happened).
        match: a regular expression the message must match (``re.search``).
        before: the error comes before any work (False: found during the work, e.g. a disk that fills
            up or an image that turns out corrupt when read; the message then names the file).
    """

    area: str
    what: str
    trigger: Callable[[Path], Any]
    error: "type | tuple[type, ...] | None"
    match: str
    before: bool = True

    @property
    def verdict(self) -> str:
        """``clear before work``, ``clear during work`` (the error names the file) or ``handled``."""
        return "handled" if self.error is None else "clear before work" if self.before else "clear during work"

    def run(self, tmp_path: Path) -> "BaseException | Handled":
        """Trigger the input; return the exception raised (a :func:`handled` case: what happened).

        Raises:
            AssertionError: nothing was raised, another type was, or the message does not match; a handled case
                whose checks fail, or that raises.
        """
        if self.error is None:
            result = self.trigger(tmp_path)
            if not isinstance(result, str) or not re.search(self.match, result, re.S):
                raise AssertionError(f"{self.what}: outcome {result!r} does not match {self.match!r}")
            return Handled(result)
        try:
            self.trigger(tmp_path)
        except self.error as e:
            if not re.search(self.match, str(e), re.S):
                raise AssertionError(f"{self.what}: message {str(e)!r} does not match {self.match!r}") from e
            return e
        raise AssertionError(f"{self.what}: no {self.error} raised")


CASES: "list[BadInput]" = []


def bad_input(
    area: str, what: str, error: "type | tuple[type, ...]" = ValueError, match: str = "", before: bool = True
) -> Callable:
    """Decorator registering ``fn(tmp_path)`` as a :class:`BadInput`."""

    def register(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        CASES.append(BadInput(area, what, fn, error, match, before))
        return fn

    return register


def handled(area: str, what: str, match: str = "") -> Callable:
    """Decorator registering ``fn(tmp_path) -> str`` as a case whose right outcome is a correct result: ``fn`` checks
    it (assertions) and returns one line on what happened (matching ``match``)."""

    def register(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
        CASES.append(BadInput(area, what, fn, None, match))
        return fn

    return register


def bad_settings(
    area: str,
    describe: str,
    run: Callable[[Path, str], Any],
    cases: "list[tuple[str, str, str]]",
    error: "type | tuple[type, ...]" = ValueError,
) -> None:
    """Register one case per ``(what, setting, match)``: ``run(tmp_path, setting)`` must raise
    ``error`` matching ``match``; the case is described as ``describe.format(what)``."""
    for what, setting, match in cases:
        bad_input(area, describe.format(what), error, match)(lambda tmp, setting=setting: run(tmp, setting))


def load_cases() -> "list[BadInput]":
    """Import every ``bad_inputs_*.py`` beside this file; return all registered cases."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    if sys.path[0] != str(ROOT):  # the packages before the test folders named like them (tests/upstream/)
        sys.path.insert(0, str(ROOT))
    for f in sorted(HERE.glob("bad_inputs_*.py")):
        importlib.import_module(f.stem)
    # the case files register into the module ``bad_inputs``; run as a script this file is
    # ``__main__``, a second copy with a registry of its own
    return importlib.import_module("bad_inputs").CASES


def write_table(out: Path = ROOT / "results" / "reliability.md") -> None:
    """Run every case and write the Markdown table of inputs and the messages they now get."""
    import os

    from harness.io import atomic_write_text
    from harness.provenance import markdown_header, provenance

    prov = provenance()
    prov["command"] = "python tests/bad_inputs.py"
    lines = [
        markdown_header("Reliability: bad inputs and what each gets", prov),
        "Every row was run by the command above: the input was given as a user would, and the message is "
        "the one the harness printed (or, for a handled case, what it did, checked by the case). The same cases "
        'run in the test suite (`tests/test_bad_inputs.py`). Verdicts: "clear before work", an error naming '
        'the problem and the fix before any training, prediction or output; "clear during work", one found '
        'while the work reads the input, naming the file; "handled", the right result (a resume, files kept). '
        "A traceback (another exception), a silent wrong result (no exception, or a result the case's checks "
        "refuse), lost data (a file of the user's replaced or deleted) or a security hole (a command run, a "
        'file read outside its folder) fails the case, and this table is not written. "(audit X)": the case '
        "of the second reliability audit (2026-11-25) it reproduces.",
        "",
        "| area | bad input | verdict | error | message |",
        "|---|---|---|---|---|",
    ]
    cases = load_cases()
    for case in cases:
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            try:
                e = case.run(Path(tmp))
            finally:
                os.chdir(ROOT)
        handled = case.error is None  # (run as a script this module is __main__: its Handled is another class)
        msg = " ".join((e.message if handled else str(e)).split()).replace("|", "\\|")
        error = "—" if handled else f"`{type(e).__name__}`"
        lines.append(f"| {case.area} | {case.what} | {case.verdict} | {error} | {msg} |")
    counts = {v: sum(c.verdict == v for c in cases) for v in ("clear before work", "clear during work", "handled")}
    lines += [
        "",
        f"{len(cases)} cases: {counts['clear before work']} clear before work, {counts['clear during work']} "
        f"clear during work (naming the file), {counts['handled']} handled; tracebacks 0, silent wrong 0, "
        "data lost 0, security holes 0 (any of these fails its case, and the table is not written).",
    ]
    atomic_write_text(out, "\n".join(lines) + "\n")
    print(f"{len(cases)} cases ({', '.join(f'{n} {v}' for v, n in counts.items())}) -> {out}")


if __name__ == "__main__":
    write_table()
