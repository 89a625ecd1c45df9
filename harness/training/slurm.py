"""``--slurm key=value`` options, read once for both stages (``harness upstream`` and ``harness downstream``) into
submitit's parameters (``submitit.AutoExecutor.update_parameters``), and the rules both stages check them by before any
work: which keys each executor reads (:data:`EXECUTOR_KEYS`, :func:`check_slurm_keys`), the type and range of each
key's value (:data:`PARAMETERS`, the one table both the parsing and the check read), and whether this machine can
submit SLURM jobs (:func:`check_slurm_available`)."""

from __future__ import annotations

import difflib
import re
import shutil
import unicodedata
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import click

from harness.rules import Rule


def slurm_parameters(options: Sequence[str]) -> dict:
    """``--slurm key=value`` pairs as submitit parameters, each value parsed as the type its key takes
    (:data:`PARAMETERS`): ``timeout_min=60`` the whole number 60, ``mem_gb=1.5`` the number 1.5,
    ``slurm_use_srun=false`` the switch False, ``slurm_partition=gpu`` the text; a key of lines
    (``slurm_setup``, ``slurm_srun_args``) takes one line an option (repeat it for more), and
    ``slurm_additional_parameters=NAME=VALUE`` one sbatch option an option. A value that does not parse as its type
    (``timeout_min=abc``), and a key no executor reads, stay text for :func:`check_slurm_keys` to refuse by name.

    Raises:
        click.BadParameter: a pair without ``=`` or without a key (the message shows the form); a key of one value
            given twice.
    """
    out: dict = {}
    for opt in options:
        key, eq, value = opt.partition("=")
        if not (key and eq):
            raise click.BadParameter(
                f"--slurm {opt!r}: expected key=value, e.g. --slurm slurm_partition=gpu", param_hint="--slurm"
            )
        spec = PARAMETERS.get(key)
        kind = spec.kind if spec else "text"
        if kind in ("lines", "options"):
            out.setdefault(key, [] if kind == "lines" else {})
            if kind == "lines":
                out[key].append(value)
            else:
                name, _, setting = value.partition("=")
                out[key][name] = setting
            continue
        if key in out:
            raise click.BadParameter(
                f"--slurm {key} is given twice ({key}={out[key]} and {opt}): a job has one {key}, give it once",
                param_hint="--slurm",
            )
        out[key] = spec.parse(value) if spec else value
    return out


@dataclass(frozen=True)
class Parameter:
    """What one ``--slurm`` key takes (a row of :data:`PARAMETERS`): ``kind`` is ``whole`` or ``number`` (held to
    ``rule``), ``switch`` (true or false), ``name`` (text without spaces or control characters: a partition, an
    account, a job name), ``text`` (a comment: spaces allowed), ``memory`` (SLURM's size, e.g. 16G), ``lines``
    (a list of text lines, one a ``--slurm`` option), ``options`` (sbatch options NAME=VALUE) or ``exclusive``
    (a switch or a name); ``meaning`` says what it sets, ``example`` a value that holds."""

    kind: str
    meaning: str
    example: str
    rule: Optional[Rule] = None

    def parse(self, text: str) -> Any:
        """``text`` as this kind's value; text that does not parse stays text (refused by :meth:`holds`)."""
        word = text.strip().lower()
        if self.kind in ("switch", "exclusive") and word in ("true", "false"):
            return word == "true"
        if self.kind in ("whole", "number"):
            for kind in (int, float):  # int first: timeout_min=60 is 60, not 60.0; 1.5 and nan are refused by name
                try:
                    return kind(text)
                except ValueError:
                    continue
        return text

    def describe(self) -> str:
        """The rule in words, e.g. ``a whole number >= 1``."""
        if self.rule is not None:
            return self.rule.describe()
        return {
            "switch": "true or false",
            "name": "a name: text without spaces or control characters",
            "text": "text without control characters (a line)",
            "memory": "a SLURM memory size: a whole number with an optional unit K, M, G or T (e.g. 16G; MB without "
            "a unit)",
            "lines": "lines of text without control characters (one a --slurm option; repeat it for more)",
            "options": "sbatch options NAME=VALUE (one a --slurm option), NAME a name and VALUE a line",
            "exclusive": "true, false or a name (user, mcs)",
        }[self.kind]

    def holds(self, value: Any) -> bool:
        """Whether ``value`` (parsed by :meth:`parse`, or given to the Python API) is one this key takes."""
        if self.rule is not None:
            return self.rule.holds(value)
        if self.kind == "switch":
            return isinstance(value, bool)
        if self.kind == "exclusive":
            return isinstance(value, bool) or _name(value)
        if self.kind == "name":
            return _name(value)
        if self.kind == "text":
            return _line(value)
        if self.kind == "memory":
            return isinstance(value, str) and re.fullmatch(r"[0-9]+([KMGT]B?)?", value.strip(), re.I) is not None
        if self.kind == "lines":
            return isinstance(value, (list, tuple)) and bool(value) and all(_line(v) for v in value)
        return isinstance(value, Mapping) and bool(value) and all(_name(k) and _line(v) for k, v in value.items())


def _line(value: Any) -> bool:
    """Non-empty text without control characters (a newline would start another sbatch line)."""
    return isinstance(value, str) and bool(value.strip()) and not any(unicodedata.category(c) == "Cc" for c in value)


def _name(value: Any) -> bool:
    """A line without spaces (a partition, an account, a job name...)."""
    return _line(value) and not any(c.isspace() for c in value)


def _whole(low: int, meaning: str, example: str) -> Parameter:
    return Parameter("whole", meaning, example, Rule(low=low, whole=True))


#: the time limit, in both spellings (submitit's generic and SLURM's own ``time``)
_MINUTES = _whole(1, "the job's time limit, in minutes", "60")
#: submitit's shared parameters (``submitit.AutoExecutor.update_parameters``' generic ones, submitit 1.5, with the
#: types it asserts: whole numbers, ``mem_gb`` a number, ``name`` text): every cluster translates them
#: (``timeout_min`` is SLURM's ``--time``); given without a prefix
GENERIC: "dict[str, Parameter]" = {
    "name": Parameter("name", "the job's name", "pretrain"),
    "timeout_min": _MINUTES,
    "mem_gb": Parameter("number", "the memory of a node, in GB", "32", Rule(low=0, low_open=True)),
    "nodes": _whole(1, "the number of nodes", "2"),
    "cpus_per_task": _whole(1, "the CPUs of each task", "10"),
    "gpus_per_node": _whole(0, "the GPUs of each node", "8"),
    "tasks_per_node": _whole(1, "the tasks (processes) of each node", "8"),
    "stderr_to_stdout": Parameter("switch", "stderr written into the stdout log", "true"),
}
#: submitit's SLURM parameters (``submitit.SlurmExecutor.update_parameters``, from its sbatch file's keyword arguments
#: and their types, submitit 1.5), given with the ``slurm_`` prefix through ``AutoExecutor`` (``slurm_partition=gpu``);
#: the prefix takes a generic parameter too (``slurm_timeout_min``)
SLURM: "dict[str, Parameter]" = {
    "job_name": Parameter("name", "the job's name", "pretrain"),
    "partition": Parameter("name", "the SLURM partition", "gpu"),
    "time": _MINUTES,
    "nodes": _whole(1, "the number of nodes", "2"),
    "ntasks_per_node": _whole(1, "the tasks (processes) of each node", "8"),
    "cpus_per_task": _whole(1, "the CPUs of each task", "10"),
    "cpus_per_gpu": _whole(1, "the CPUs of each GPU", "10"),
    "num_gpus": _whole(0, "the GPUs of the job", "8"),
    "gpus_per_node": _whole(0, "the GPUs of each node", "8"),
    "gpus_per_task": _whole(0, "the GPUs of each task", "1"),
    "qos": Parameter("name", "the quality of service", "normal"),
    "setup": Parameter("lines", "shell lines run before the job", "'module load cuda'"),
    "teardown": Parameter("lines", "shell lines run after the job", "'echo done'"),
    "mem": Parameter("memory", "the memory of a node", "64G"),
    "mem_per_gpu": Parameter("memory", "the memory of each GPU", "16G"),
    "mem_per_cpu": Parameter("memory", "the memory of each CPU", "4G"),
    "signal_delay_s": _whole(0, "seconds before the time limit at which the job is signalled to checkpoint", "120"),
    "comment": Parameter("text", "the job's comment", "'paper run'"),
    "constraint": Parameter("name", "the nodes' features", "volta32gb"),
    "exclude": Parameter("name", "nodes not to run on", "node[1-2]"),
    "account": Parameter("name", "the account charged", "myproject"),
    "gres": Parameter("name", "generic resources", "gpu:2"),
    "mail_type": Parameter("name", "when to send mail", "END,FAIL"),
    "mail_user": Parameter("name", "whom to send mail", "me@example.org"),
    "nodelist": Parameter("name", "the nodes to run on", "node[3-4]"),
    "dependency": Parameter("name", "jobs to wait for", "afterok:1234"),
    "exclusive": Parameter("exclusive", "nodes not shared with other jobs", "true"),
    "array_parallelism": _whole(1, "the array tasks run at once", "64"),
    "wckey": Parameter("name", "the workload characterization key", "submitit"),
    "stderr_to_stdout": Parameter("switch", "stderr written into the stdout log", "true"),
    "additional_parameters": Parameter("options", "further sbatch options", "reservation=myres"),
    "srun_args": Parameter("lines", "arguments of srun (one an option)", "--cpu-bind=none"),
    "use_srun": Parameter("switch", "the job started through srun", "false"),
}
#: every ``--slurm`` key, the type and range of its value and what it sets: the one table both stages parse
#: (:func:`slurm_parameters`) and check (:func:`check_slurm_keys`) the values by, before any work
PARAMETERS: "dict[str, Parameter]" = {**GENERIC, **{f"slurm_{k}": v for k, v in {**SLURM, **GENERIC}.items()}}
GENERIC_PARAMETERS = tuple(GENERIC)
SLURM_PARAMETERS = tuple(SLURM)
#: the ``--slurm`` keys each executor reads, for both stages: ``submitit-local`` reads only the time limit (its
#: processes and GPUs come from their own options: ``--tasks-per-node``/``--gpus-per-node`` upstream, ``--gpus``
#: downstream; submitit's local executor ignores the rest: partition, memory, CPUs, the job's name); ``slurm`` reads
#: submitit's generic and SLURM parameters; ``local`` (in this process) submits nothing and reads none
EXECUTOR_KEYS: "dict[str, tuple[str, ...]]" = {
    "local": (),
    "submitit-local": ("timeout_min",),
    "slurm": tuple(PARAMETERS),
}
#: the programs a SLURM submission needs on this machine: submitit submits with ``sbatch`` and its jobs start their
#: tasks with ``srun`` (submitit looks for ``srun`` to tell a SLURM cluster)
SLURM_PROGRAMS = ("sbatch", "srun")


def check_slurm_keys(executor: str, parameters: Mapping[str, Any]) -> None:
    """Refuse, before any work (no submitit folder, no executor), the ``--slurm`` keys ``executor`` does not read
    (:data:`EXECUTOR_KEYS`): under ``submitit-local`` all but ``timeout_min``; under ``slurm`` a key that is no
    submitit parameter (a typo such as ``bogus_key``, or ``partition`` without its ``slurm_`` prefix); then each
    value that breaks its key's type and range (:data:`PARAMETERS`: ``timeout_min=0``, ``-5``, ``nan`` or ``abc``
    is no whole number >= 1 of minutes), which submitit would take and fail on only once the job runs.

    Args:
        executor: ``local``, ``submitit-local`` or ``slurm`` (another: nothing is checked, the caller refuses it).
        parameters: the ``--slurm`` options as :func:`slurm_parameters` reads them (key -> value).

    Raises:
        ValueError: naming each key refused, its value, what the executor reads, and the fix; or the first value
            refused, naming its key, the value, the rule and an example.
    """
    known = EXECUTOR_KEYS.get(executor)
    bad = [k for k in parameters if known is not None and k not in known]
    if not bad:
        _check_values(parameters)
        return
    given = " ".join(f"{k}={parameters[k]}" for k in bad)
    if executor == "slurm":
        near = sorted({m for k in bad for m in difflib.get_close_matches(k, known, n=1, cutoff=0.6)})
        hint = f" (did you mean {', '.join(near)}?)" if near else ""
        raise ValueError(
            f"--slurm {given}: {', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not among the submitit parameters "
            f"--executor slurm reads{hint}: the generic {', '.join(GENERIC_PARAMETERS)}, and slurm_<sbatch option> "
            f"({', '.join('slurm_' + p for p in SLURM_PARAMETERS)}): fix the key (e.g. slurm_partition=gpu), or "
            "leave it out"
        )
    reads = f"reads only {', '.join(known)} of --slurm" if known else "reads no --slurm key"
    where = {"submitit-local": "runs the jobs on this machine", "local": "runs in this process"}.get(executor, "")
    raise ValueError(
        f"--slurm {given}: --executor {executor} {where} and {reads} (its processes and GPUs come from their own "
        f"options), so {'it' if len(bad) == 1 else 'they'} would be ignored: leave {' '.join(bad)} out, or use "
        "--executor slurm to submit SLURM jobs"
    )


def _check_values(parameters: Mapping[str, Any]) -> None:
    """Refuse the first value that breaks its key's row of :data:`PARAMETERS` (keys outside it: not checked here)."""
    for key, value in parameters.items():
        spec = PARAMETERS.get(key)
        if spec is None or spec.holds(value):
            continue
        if isinstance(value, (list, tuple)):
            shown = " ".join(f"{key}={v}" for v in value) or f"{key}=[]"
        elif isinstance(value, Mapping):
            shown = " ".join(f"{key}={k}={v}" for k, v in value.items()) or f"{key}={{}}"
        else:
            shown = f"{key}={value}"
        raise ValueError(
            f"--slurm {shown}: {key} ({spec.meaning}) must be {spec.describe()}, got {value!r}: give e.g. "
            f"--slurm {key}={spec.example}, or leave {key} out"
        )


def check_slurm_available(executor: str) -> None:
    """Refuse ``--executor slurm`` on a machine without SLURM's programs (:data:`SLURM_PROGRAMS` on the ``PATH``),
    before any work: submitit would otherwise fail to submit, or (``AutoExecutor`` without ``cluster``) run the jobs
    on this machine instead. Other executors: nothing is checked.

    Raises:
        ValueError: naming the programs missing and the fix (a login node of the cluster, or ``submitit-local``).
    """
    missing = [p for p in SLURM_PROGRAMS if executor == "slurm" and shutil.which(p) is None]
    if missing:
        raise ValueError(
            f"--executor slurm submits SLURM jobs with {' and '.join(SLURM_PROGRAMS)}, and this machine has no "
            f"{' and no '.join(missing)} on its PATH (not a SLURM cluster): submit from a machine of the cluster (a "
            "login node), or use --executor submitit-local to run the jobs on this machine"
        )


def update_parameters(executor: Any, parameters: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """``executor.update_parameters(**parameters)`` (a submitit executor), submitit's refusal of a key or a value
    (a ValueError, TypeError, NameError or AssertionError of its own) made one message naming the ``--slurm`` options
    the user gave (``given``).

    Raises:
        ValueError: ``--slurm <given>: <submitit's first line>``.
    """
    try:
        executor.update_parameters(**parameters)
    except (ValueError, TypeError, NameError, AssertionError) as e:  # submitit's errors for unknown or bad values
        shown = " ".join(f"{k}={v}" for k, v in given.items())
        raise ValueError(f"--slurm {shown}: {str(e).splitlines()[0]}") from e
