"""``--slurm key=value`` options, read once for both stages (``harness upstream`` and ``harness downstream``) into
submitit's parameters (``submitit.AutoExecutor.update_parameters``), and the rules both stages check them by before any
work: which keys each executor reads (:data:`EXECUTOR_KEYS`, :func:`check_slurm_keys`) and whether this machine can
submit SLURM jobs (:func:`check_slurm_available`)."""

from __future__ import annotations

import difflib
import shutil
from typing import Any, Mapping, Sequence

import click


def slurm_parameters(options: Sequence[str]) -> dict:
    """``--slurm key=value`` pairs as submitit parameters: whole numbers and decimals become numbers
    (``mem_gb=1.5`` is 1.5, ``timeout_min=60`` is 60), ``true`` and ``false`` switches (``slurm_use_srun=false``),
    anything else stays text (``slurm_partition=gpu``).

    Raises:
        click.BadParameter: a pair without ``=`` or without a key (the message shows the form).
    """
    out: dict = {}
    for opt in options:
        key, eq, value = opt.partition("=")
        if not (key and eq):
            raise click.BadParameter(
                f"--slurm {opt!r}: expected key=value, e.g. --slurm slurm_partition=gpu", param_hint="--slurm"
            )
        out[key] = value
        if value.strip().lower() in ("true", "false"):  # a switch (slurm_use_srun=false): the text "false" is truthy
            out[key] = value.strip().lower() == "true"
            continue
        for kind in (int, float):
            try:
                out[key] = kind(value)
                break
            except ValueError:
                continue
    return out


#: submitit's shared parameters (``submitit.AutoExecutor.update_parameters``' generic ones, submitit 1.5): every
#: cluster translates them (``timeout_min`` is SLURM's ``--time``); given without a prefix
GENERIC_PARAMETERS = (
    "name",
    "timeout_min",
    "mem_gb",
    "nodes",
    "cpus_per_task",
    "gpus_per_node",
    "tasks_per_node",
    "stderr_to_stdout",
)
#: submitit's SLURM parameters (``submitit.SlurmExecutor.update_parameters``, from its sbatch file's keyword arguments,
#: submitit 1.5), given with the ``slurm_`` prefix through ``AutoExecutor`` (``slurm_partition=gpu``); the prefix
#: takes a generic parameter too (``slurm_timeout_min``)
SLURM_PARAMETERS = (
    "job_name",
    "partition",
    "time",
    "nodes",
    "ntasks_per_node",
    "cpus_per_task",
    "cpus_per_gpu",
    "num_gpus",
    "gpus_per_node",
    "gpus_per_task",
    "qos",
    "setup",
    "teardown",
    "mem",
    "mem_per_gpu",
    "mem_per_cpu",
    "signal_delay_s",
    "comment",
    "constraint",
    "exclude",
    "account",
    "gres",
    "mail_type",
    "mail_user",
    "nodelist",
    "dependency",
    "exclusive",
    "array_parallelism",
    "wckey",
    "stderr_to_stdout",
    "additional_parameters",
    "srun_args",
    "use_srun",
)
#: the ``--slurm`` keys each executor reads, for both stages: ``submitit-local`` reads only the time limit (its
#: processes and GPUs come from their own options: ``--tasks-per-node``/``--gpus-per-node`` upstream, ``--gpus``
#: downstream; submitit's local executor ignores the rest: partition, memory, CPUs, the job's name); ``slurm`` reads
#: submitit's generic and SLURM parameters; ``local`` (in this process) submits nothing and reads none
EXECUTOR_KEYS: "dict[str, tuple[str, ...]]" = {
    "local": (),
    "submitit-local": ("timeout_min",),
    "slurm": GENERIC_PARAMETERS + tuple(f"slurm_{p}" for p in dict.fromkeys(SLURM_PARAMETERS + GENERIC_PARAMETERS)),
}
#: the programs a SLURM submission needs on this machine: submitit submits with ``sbatch`` and its jobs start their
#: tasks with ``srun`` (submitit looks for ``srun`` to tell a SLURM cluster)
SLURM_PROGRAMS = ("sbatch", "srun")


def check_slurm_keys(executor: str, parameters: Mapping[str, Any]) -> None:
    """Refuse, before any work (no submitit folder, no executor), the ``--slurm`` keys ``executor`` does not read
    (:data:`EXECUTOR_KEYS`): under ``submitit-local`` all but ``timeout_min``; under ``slurm`` a key that is no
    submitit parameter (a typo such as ``bogus_key``, or ``partition`` without its ``slurm_`` prefix).

    Args:
        executor: ``local``, ``submitit-local`` or ``slurm`` (another: nothing is checked, the caller refuses it).
        parameters: the ``--slurm`` options as :func:`slurm_parameters` reads them (key -> value).

    Raises:
        ValueError: naming each key refused, its value, what the executor reads, and the fix.
    """
    known = EXECUTOR_KEYS.get(executor)
    bad = [k for k in parameters if known is not None and k not in known]
    if not bad:
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
