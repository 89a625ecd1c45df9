"""Run the code blocks of a Markdown page (README.md, docs/**/*.md) as a reader would paste them.

Conventions (docs/development.md):

- Every fenced block names its language. ``python`` blocks are executed, in order, in one namespace per
  page (a later block may use an earlier block's names, as in a notebook); ``bash`` blocks run each
  command line (``\\`` continues a line, ``#`` starts a comment). Blocks in ``text``, ``yaml``, ``json``,
  ``toml``, ``bibtex``, ``markdown`` and ``console`` are shown, not run (outputs, file contents).
- A block that cannot run here (it needs a GPU, a cluster, a download, or it is the install or the whole
  test suite) is preceded by ``<!-- not-run: REASON -->`` on the line before its fence; keep these few.
- A block whose output the page states ("Expect ...", a ``# value`` comment) is followed, on the lines after its
  closing fence, by ``<!-- expect: REGEX -->`` markers: each regular expression must be found (``re.search``,
  multiline) in what the block printed, stdout and stderr, or the block fails. A paragraph starting "Expect"
  right after a run block needs at least one marker (:func:`unchecked_expectations`).
- The pages run in order (README.md, then the site's navigation) in one working folder holding a copy of
  ``upstream/configs/`` (commands name ``upstream/configs/digits_het.yaml`` as from the checkout's root), so
  ``runs/`` and ``results/`` go there and a tutorial can use the runs of the Quickstart's ``harness run``.
- ``harness ...`` commands run in this process through the click entry point (torch is imported once per
  page); :data:`SMALL` appends small settings to the few commands whose documented form is the full job
  (``harness run``), so the page's paths and flags are exercised as written. Other commands (``python
  script.py``, ``ls``, ...) run through bash in the working folder.

Usage: ``python tests/docs/examples.py [PAGE.md ...] --workdir DIR`` runs the pages given (default: README.md and
the site's pages in the order of its navigation, in one working folder), printing each block as it goes; the exit
status is 0 when every block ran. ``tests/docs/test_examples.py`` calls it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[2]
RUN = ("python", "bash")
SHOWN = ("text", "yaml", "json", "toml", "bibtex", "markdown", "console")
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.*?)\s*-->\s*$")
EXPECT = re.compile(r"^<!--\s*expect:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")

#: small settings appended to a documented command (matched on its first words) so the whole docs test
#: stays short: the command's own paths, names and flags are still the ones the page shows. ``harness run``
#: keeps the digits experiment's methods, its three seeds and ensembles of 3 (so the folders later blocks name
#: exist) at one epoch on 256 training images, fewer MC samples for het, no second condition, one transfer task
#: of 4 steps and one corruption at one severity.
SMALL = {
    ("harness", "run"): [
        "upstream_overrides=[train.epochs=1,train.eval_every=1,data.limit_train=256,data.limit_eval=128]",
        "methods={hom: {covariance: none}, het: {covariance: low_rank, num_factors: 4, train_mc_samples: 10, "
        "eval_mc_samples: 10}}",
        "conditions={}",
        "downstream.tasks=[demo_count]",
        "downstream.settings.steps=[4]",
        "shift.corruptions=[fog]",
        "shift.severities=[1]",
        "shift.ood=[gaussian]",
    ],
}


@dataclass
class Block:
    """One fenced block: its language, source, first line (1-based) and why it is not run (None: it runs)."""

    lang: str
    code: str
    line: int
    not_run: Optional[str] = None
    expect: "tuple[str, ...]" = ()  # the regular expressions its output must match (``<!-- expect: ... -->``)
    after: str = ""  # the first line of prose after the block (and its markers)

    @property
    def runs(self) -> bool:
        return self.lang in RUN and self.not_run is None


def blocks(text: str) -> "list[Block]":
    """The fenced blocks of a Markdown text, with the ``not-run`` marker of the line before each fence.

    Raises:
        ValueError: a block without a language, in a language neither run nor shown, or a fence left open.
    """
    out: "list[Block]" = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        prev = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.match(prev)
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"line {start + 1}: a {fence} fence is never closed")
        if not lang:
            raise ValueError(f"line {start + 1}: a block without a language: write ```python, ```bash or ```text")
        if lang in ("sh", "shell"):
            lang = "bash"
        if lang not in RUN + SHOWN:
            raise ValueError(
                f"line {start + 1}: language {lang!r} is neither run ({', '.join(RUN)}) nor shown ({', '.join(SHOWN)})"
            )
        expect, j = [], i + 1
        while j < len(lines) and (not lines[j].strip() or EXPECT.match(lines[j].strip())):
            if lines[j].strip():
                expect.append(EXPECT.match(lines[j].strip()).group(1))
            j += 1
        after = lines[j].strip() if j < len(lines) else ""
        code = "\n".join(body) + "\n"
        out.append(Block(lang, code, start + 1, marker.group(1) if marker else None, tuple(expect), after))
        i += 1
    return out


def unchecked_expectations(text: str) -> "list[int]":
    """The first lines of the run blocks followed by a paragraph starting "Expect" but by no expect marker."""
    return [b.line for b in blocks(text) if b.runs and b.after.startswith("Expect") and not b.expect]


class _Tee:
    """A stream that writes to ``stream`` and keeps a copy (a block's output, for its expect markers)."""

    def __init__(self, stream) -> None:
        self.stream, self.parts = stream, []

    def write(self, text: "str | bytes") -> int:
        if isinstance(text, bytes):  # click writes bytes to a stream it takes for binary
            text = text.decode(errors="replace")
        self.parts.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name):
        return getattr(self.stream, name)


def command_lines(code: str) -> "list[str]":
    """The commands of a bash block: continuation lines joined, blank and comment lines dropped."""
    out, current = [], ""
    for raw in code.splitlines():
        line = raw.rstrip()
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1].strip() + " "
            continue
        out.append((current + line.strip()).strip())
        current = ""
    if current.strip():
        out.append(current.strip())
    return out


def expand(line: str, cwd: Path) -> "list[str]":
    """The words bash makes of one command line (quotes, braces, ``~``, ``$VAR``, globs, comments), without
    running it."""
    done = subprocess.run(
        ["bash", "-c", f'printf "%s\\0" {line}'], cwd=cwd, capture_output=True, text=True, check=False
    )
    if done.returncode:
        raise ValueError(f"bash cannot parse {line!r}: {done.stderr.strip()}")
    return done.stdout.split("\0")[:-1]


SHELL_OPERATORS = re.compile(r"&&|\|\||[|;<>`]|\$\(")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def run_command(line: str, cwd: Path) -> None:
    """Run one command line: ``harness ...`` in this process (with :data:`SMALL` settings), the rest in bash.

    Raises:
        RuntimeError: the command failed (its exit status and the end of its output).
    """
    words = expand(line, cwd) if not SHELL_OPERATORS.search(line) else None
    env = {}
    while words and ENV_ASSIGNMENT.match(words[0]) and len(words) > 1:  # VAR=value harness ...
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if words and words[0] == "harness":
        argv = words[1:] + next((extra for key, extra in SMALL.items() if tuple(words[: len(key)]) == key), [])
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            _harness(argv)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        return
    done = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + line],
        cwd=cwd,
        text=True,
        capture_output=True,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )
    sys.stdout.write(done.stdout[-4000:])
    sys.stdout.write(done.stderr[-4000:])
    if done.returncode:
        raise RuntimeError(f"exit status {done.returncode}")


def _harness(argv: "list[str]") -> None:
    """``harness ARGV`` through the click entry point, in this process."""
    import click

    from harness.cli import main

    try:
        main.main(args=argv, prog_name="harness", standalone_mode=False)
    except click.exceptions.Exit as e:
        if e.exit_code:
            raise RuntimeError(f"exit status {e.exit_code}") from e
    except click.ClickException as e:
        e.show()
        raise RuntimeError(f"harness {' '.join(map(shlex.quote, argv))}: {e.format_message()}") from e
    except SystemExit as e:
        if e.code not in (0, None):
            raise RuntimeError(f"harness {' '.join(map(shlex.quote, argv))}: exit status {e.code}") from e


def prepare(workdir: Path) -> None:
    """A working folder as the checkout's root looks to a reader: ``upstream/configs/`` copied in."""
    workdir.mkdir(parents=True, exist_ok=True)
    configs = workdir / "upstream" / "configs"
    if not configs.exists():
        shutil.copytree(ROOT / "upstream" / "configs", configs)


def pages() -> "list[Path]":
    """README.md, then the site's pages in the order of mkdocs.yml's navigation (a tutorial may use what the
    Quickstart made)."""
    import yaml

    def walk(node) -> "list[str]":
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [p for item in node for p in walk(item)]
        return [p for value in node.values() for p in walk(value)]

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return [ROOT / "README.md"] + [ROOT / "docs" / p for p in walk(nav)]


def run_page(page: Path, workdir: Path) -> "list[str]":
    """Run every block of ``page`` that runs, in order, in ``workdir``; the failures as messages."""
    prepare(workdir)
    os.chdir(workdir)
    namespace: dict = {"__name__": "__docs__"}
    failures = []
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
    for b in blocks(page.read_text()):
        if not b.runs:
            continue
        t0 = time.perf_counter()
        print(f"--- {name}:{b.line} ({b.lang})", flush=True)
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(out), _Tee(err)
        try:
            if b.lang == "python":
                exec(compile(b.code, f"{name}:{b.line}", "exec"), namespace)
            else:
                for line in command_lines(b.code):
                    print(f"$ {line}", flush=True)
                    try:
                        run_command(line, workdir)
                    except Exception as e:
                        raise RuntimeError(f"{line}\n    -> {e}") from e
            printed = "".join(sys.stdout.parts + sys.stderr.parts)
            printed = "\n".join(x for x in printed.splitlines() if not x.startswith("$ "))  # not the commands
            missed = [x for x in b.expect if not re.search(x, printed, flags=re.M)]
            if missed:
                raise AssertionError(f"the output does not show what the page states: {missed}")
        except Exception as e:  # noqa: BLE001 -- every failure is reported with its block
            traceback.print_exc()
            failures.append(f"{name}:{b.line} ({b.lang}): {type(e).__name__}: {str(e)[:600]}")
        finally:
            sys.stdout, sys.stderr = out, err
        print(f"    {time.perf_counter() - t0:.1f} s", flush=True)
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", type=Path, nargs="*", help="Markdown pages (default: README.md and the site's)")
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # timm never downloads in the examples
    os.environ.setdefault("MPLBACKEND", "Agg")
    import torch

    # the examples in this process run beside other work on a 2-core CI machine: one thread, since two threads
    # contending with other processes spin-wait (measured at load 24: the Quickstart's loop 69 s on one thread,
    # 336 s on two); harness run's workers set their own threads
    torch.set_num_threads(1)
    t0, failures = time.perf_counter(), []
    for page in [p.resolve() for p in args.pages] or pages():
        failures += run_page(page, args.workdir.resolve())
    print(f"\n{time.perf_counter() - t0:.0f} s", flush=True)
    print("FAILED BLOCKS:\n" + "\n".join(failures) if failures else "all blocks ran", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
