"""Where a result came from: command line, machine and package versions, for every file in results/."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence

from harness.io import check_writable, read_json

PACKAGES = ("het-harness", "torch", "torchvision", "timm", "accelerate", "numpy", "scikit-learn", "netcal")


def command_line(argv: "Optional[Sequence[str]]" = None) -> str:
    """A command as a shell could retype it (``harness ...`` for the console script): ``argv``, by default
    the one that is running (``sys.argv``)."""
    argv = list(sys.argv if argv is None else argv)
    main = Path(argv[0]).parts[-3:] if argv else ()
    if argv and (
        Path(argv[0]).name == "harness"
        or main[-2:] == ("harness", "__main__.py")
        or main == ("harness", "cli", "__main__.py")
    ):
        argv[0] = "harness"  # the console script, or python -m harness (or harness.cli)
    return " ".join(shlex.quote(a) for a in argv)


def package_versions(names: "tuple[str, ...]" = PACKAGES) -> "dict[str, str]":
    """Installed versions of ``names`` (``"not installed"`` when absent)."""
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def lscpu() -> "dict[str, str]":
    """The fields ``lscpu`` prints (``Model name``, ``CPU family``, ``Flags``, ...); {} without lscpu."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in fields.items()}


def cpu_details() -> str:
    """The CPU as ``lscpu`` names it: model name, family, model and stepping, bf16 support; '' without lscpu."""
    fields = lscpu()
    if not fields:
        return ""
    flags = set(fields.get("Flags", "").split())
    return (
        f"{fields.get('Model name', '?')} (family {fields.get('CPU family', '?')}, "
        f"model {fields.get('Model', '?')}, "
        f"stepping {fields.get('Stepping', '?')}; {fields.get('CPU(s)', '?')} CPUs; avx512_bf16: "
        f"{'yes' if 'avx512_bf16' in flags else 'no'})"
    )


def machine_load() -> dict:
    """This process's niceness and the 1-, 5- and 15-minute load averages (Unix), for the record of a measurement
    on a shared machine."""
    return {"nice": os.nice(0), "load_average": list(os.getloadavg())}


def load_note(start: dict, end: dict) -> str:
    """One sentence on the conditions of a measurement: niceness, load average at its start and end."""
    return (
        f"Measured at niceness {start['nice']}, the 1-minute load average {start['load_average'][0]:.1f} at the "
        f"start and {end['load_average'][0]:.1f} at the end on {os.cpu_count()} cores: other work on the machine "
        "takes its share, so wall-clock rates vary between runs; memory does not, and CPU time per image varies "
        "less, except for multi-threaded work (the training step), whose threads also spend CPU time waiting "
        "for each other when the machine is busy."
    )


def machine() -> "dict[str, str]":
    """CPU, core count, memory and GPU (if torch sees one) of this machine."""
    info = {"platform": platform.platform(), "cpu": cpu_model(), "cores": str(os.cpu_count())}
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["memory"] = f"{pages * size / 2**30:.1f} GiB"
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    except ImportError:
        pass
    return info


def provenance() -> dict:
    """``{command, date, machine, cpu_details, versions}`` to store beside a result (``cpu_details``: ``lscpu``'s
    model, family and bf16 support, :func:`cpu_details`, so that two results say whether one CPU made both)."""
    return {
        "command": command_line(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "cpu_details": cpu_details(),
        "versions": package_versions(),
    }


def markdown_header(title: str, prov: dict) -> str:
    """A Markdown preamble recording the command, machine and versions of ``prov``."""
    m = prov["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in prov["versions"].items())
    lines = [
        f"# {title}",
        "",
        f"Written by `{prov['command']}` on {prov['date']}.",
        "",
        f"- Machine: {m.get('cpu')}, {m.get('cores')} cores, {m.get('memory', '?')}"
        + (f", GPU {m['gpu']}" if "gpu" in m else ", no GPU")
        + f" ({m.get('platform')})",
        f"- Versions: {versions}",
        "",
    ]
    return "\n".join(lines)


#: the line that records the command in a Markdown file the harness wrote (harness.provenance.markdown_header's, or
#: the "Command:" line of older results)
_WRITTEN_BY = re.compile(r"^(Written by `|Command: `harness )", re.M)
#: the largest file read to tell whether the harness wrote it (its own are a few hundred kB)
_OWN_LIMIT = 1 << 24


def check_replaceable(markdown: "str | os.PathLike", title: str, key: str, what: str, flag: str = "--out") -> Path:
    """Refuse, before any work, to replace an existing ``markdown`` file or its ``.json`` twin that ``what`` did not
    write (no command replaces a file it did not write). The Markdown file is its own when it begins with
    ``# <title>`` and records the command that wrote it (the ``Written by `...``` line of
    :func:`harness.provenance.markdown_header`); the JSON twin when it is an object with a ``provenance`` record and
    ``key``. Files that do not exist pass: a rerun replaces the writer's own files.

    The folder ``markdown`` goes in must take new files (:func:`check_writable`), so a read-only ``flag`` is refused
    before the work rather than after it.

    Raises:
        ValueError: a ``.json`` ``markdown`` (the twin would replace it), a folder that cannot be written, something
            that is not a file, or a file ``what`` did not write, naming it, the rule and the fix (another ``flag``).
    """
    markdown = Path(markdown)
    if markdown.suffix == ".json":
        raise ValueError(f"{flag} {markdown} ends in .json, the name of its JSON twin: give a .md name")
    check_writable(markdown.parent, f"{flag} {markdown} (its folder {markdown.parent})", f"give another {flag}")
    for path in (markdown, markdown.with_suffix(".json")):
        if not os.path.lexists(path):
            continue
        why = _not_own(path, title, key)
        if why:
            raise ValueError(
                f"{path} exists and {what} did not write it ({why}): a file the harness did not write is never "
                f"replaced; move it, or choose another {flag}"
            )
    return markdown


def _not_own(path: Path, title: str, key: str) -> str:
    """Why ``path`` is not a file its writer (:func:`check_replaceable`'s ``title`` and ``key``) wrote; '' if it is."""
    if path.is_symlink() or not path.is_file():
        return "not a plain file"
    if path.stat().st_size > _OWN_LIMIT:
        return "larger than any file it writes"
    if path.suffix == ".json":
        data = read_json(path)
        own = isinstance(data, dict) and isinstance(data.get("provenance"), dict) and key in data
        return "" if own else f"not a JSON object with its 'provenance' and {key!r}"
    text = path.read_text(encoding="utf-8", errors="replace")[:4000]
    own = text.startswith(f"# {title}") and _WRITTEN_BY.search(text)
    return "" if own else f"it does not begin with '# {title}' and a 'Written by' line"


def changed_since(recorded: object, now: "dict[str, object]", always: "Sequence[str]" = ()) -> "list[tuple]":
    """What differs between an earlier record and the same facts measured now: ``(key, recorded value, value now)``
    for each key of ``now``, in its order, compared only where ``recorded`` (a record's dict; anything else: none)
    holds it (a recorded None counts: a default is a value), so a record written before a fact was recorded is compared
    by the rest; a key in ``always`` is compared whether or not the record holds it. The one rule of every "is this still what it recorded" check
    (a sweep's ``sweep.json``, a few-shot study's ``fewshot.json``, an ``ensemble.json``, a ``report.json``)."""
    was = recorded if isinstance(recorded, dict) else {}
    return [(k, was.get(k), v) for k, v in now.items() if (k in always or k in was) and was.get(k) != v]
