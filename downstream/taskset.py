"""The tasks a sweep (and ``harness fewshot``) takes: VTAB-1k names and groups, the demo suite, custom task lines
``NAME=FOLDER:K``; their splits, read from the configured source; and the checks of the data and the device made
before any run. Re-exported by :mod:`harness.downstream.sweep`."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

from harness.downstream.config import SweepSettings
from harness.downstream.demo import DEMO_TASKS, demo_split
from harness.downstream.tasks import GROUPS, SPLITS, Task, get_task, resolve_tasks
from harness.io import check_name


CUSTOM_FLAGS = ("no-flip", "no-crop")
_RESERVED = {"vtab1k", "vtab", "all", "demo", *GROUPS}


def custom_task(spec: str) -> Task:
    """A user-defined task from one line ``NAME=FOLDER:NUM_CLASSES[:no-flip][:no-crop]``: a folder in
    the VTAB-1k folder format (``train800.txt``, ``val200.txt``, ``train800val200.txt``, ``test.txt``
    with ``relative/path label`` lines). Its split sizes are not checked; random flips and crops are
    on unless ``no-flip`` / ``no-crop`` turn them off (for labels that a flip or crop would change:
    positions, orientations, counts).

    Raises:
        ValueError: a malformed line; a name that is not a plain file name, or that a VTAB-1k task,
            alias, group or demo task already uses.
    """
    name, _, rest = spec.partition("=")
    flags = set()
    while rest.rpartition(":")[2] in CUSTOM_FLAGS:
        rest, _, flag = rest.rpartition(":")
        flags.add(flag)
    folder, _, k = rest.rpartition(":")
    if not (name and folder and k.isdigit() and int(k) > 0):
        raise ValueError(f"custom task {spec!r} must look like NAME=FOLDER:NUM_CLASSES[:no-flip][:no-crop], e.g. "
                         "birds=/data/birds:200")
    check_name(name, "custom task name")  # it names result files
    try:
        taken = f"the VTAB-1k task {get_task(name).name}"
    except ValueError:
        taken = "a task group" if name.lower() in _RESERVED else ("a demo task" if name in DEMO_TASKS else None)
    if taken:
        raise ValueError(f"custom task name {name!r} is already {taken}: give the custom task another name, e.g. "
                         f"my_{name}={rest}")
    return Task(name, "custom", f"folder:{folder}", "-", int(k), _no_tfds_label, "val200", "test", None,
                train="train800", flip="no-flip" not in flags, crop="no-crop" not in flags)


def custom_spec(task: Task) -> str:
    """The task line of a custom task (inverse of :func:`custom_task`)."""
    flags = ("" if task.flip else ":no-flip") + ("" if task.crop else ":no-crop")
    return f"{task.name}={task.tfds.removeprefix('folder:')}:{task.num_classes}{flags}"


def _no_tfds_label(example) -> int:
    raise ValueError("custom tasks are read from their folder, not from TFDS")


def find_task(name: str) -> Task:
    """A VTAB-1k task, a demo task, or a custom task line (``NAME=FOLDER:NUM_CLASSES``)."""
    if "=" in name:
        return custom_task(name)
    return DEMO_TASKS[name] if name in DEMO_TASKS else get_task(name)


def expand_tasks(names: Sequence[str]) -> "list[Task]":
    """``vtab1k``, group names, task names/aliases, ``demo`` (the 4 demo tasks) and custom task lines.

    Raises:
        ValueError: an unknown name; a bad custom task line; two different custom tasks of one name.
    """
    out: "list[Task]" = []
    custom: "dict[str, Task]" = {}
    for n in names:
        if n == "demo":
            picks = list(DEMO_TASKS.values())
        elif "=" in n or n in DEMO_TASKS:
            picks = [find_task(n)]
        else:
            picks = resolve_tasks([n])
        for t in picks:
            if t.group == "custom" and custom.setdefault(t.name.lower(), t) != t:
                raise ValueError(f"two custom tasks are named {t.name!r} ({custom_spec(custom[t.name.lower()])} and "
                                 f"{custom_spec(t)}): give each its own name")
        out += [t for t in picks if t not in out]
    return out


def load_split(task: Task, split: str, settings: SweepSettings):
    """The task's split from the configured reader (demo tasks: generated); ``dataset.source`` says
    what was read."""
    from harness.downstream.data import folder_split, tfds_split

    if task.group == "demo":
        ds = demo_split(task, split)
        ds.source = {"format": "demo"}
        return ds
    allow = settings.allow_outside_paths
    if task.group == "custom":
        folder = Path(task.tfds.removeprefix("folder:"))
        return folder_split(task, split, folder.parent, validate=False, folder=folder, allow_outside=allow)
    validate = settings.check_test_size or split != "test"
    if settings.data_format == "folder":
        if not settings.data_dir:
            raise ValueError("the folder format needs --data-dir <root with one folder per task>")
        return folder_split(task, split, settings.data_dir, validate, allow_outside=allow)
    return tfds_split(task, split, settings.data_dir, validate)


def check_tasks(tasks: Sequence[Task], settings: SweepSettings,
                progress: Optional[Callable[[str], None]] = None) -> None:
    """Check all four splits of every task before any run: folder lists (two columns, integer labels
    in [0, K), paths inside the task folder, VTAB-1k sizes including the test split unless
    ``check_test_size`` is off), that every listed image exists and a sample decode; TFDS splits
    (prepared, sizes, a sample of examples decode with labels in range). Demo tasks are generated. ``progress``
    gets a line per task checked.

    Raises:
        ValueError / FileNotFoundError: the first problem found, naming the file (and line) and the fix.
    """
    from harness.downstream.data import check_split, check_tfds_split

    for i, t in enumerate(tasks, 1):
        if t.group == "demo":
            continue
        if progress:
            progress(f"checking the data of {t.name} (task {i}/{len(tasks)})")
        for split in SPLITS:
            if t.group != "custom" and settings.data_format == "tfds":
                check_tfds_split(t, split, settings.data_dir, settings.check_test_size or split != "test")
            else:
                check_split(load_split(t, split, settings))


def check_device(device: str) -> None:
    """Refuse a device this machine cannot run on (before any work).

    Raises:
        ValueError: not ``cpu`` / ``cuda`` / ``cuda:N``; CUDA asked for without a usable GPU, or a GPU
            index beyond the GPUs visible (the message names the fix).
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"unknown device {device!r} (--device): use cpu, cuda or cuda:N") from e
    if dev.type == "cpu":
        return
    if dev.type != "cuda":
        raise ValueError(f"device {device!r} (--device): fine-tuning runs on cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        build = f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU-only build"
        raise ValueError(f"--device {device}: no CUDA GPU is usable on this machine (torch.cuda.is_available() is "
                         f"False; torch {torch.__version__} is {build}); use --device cpu, or run where nvidia-smi "
                         "shows a GPU (and CUDA_VISIBLE_DEVICES does not hide it)")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) are visible; use cuda:0 .. "
                         f"cuda:{torch.cuda.device_count() - 1}")

