"""The tasks a sweep, ``harness fewshot`` and the upstream few-shot monitor take: VTAB-1k names and groups, the demo
suite, custom task lines ``NAME=FOLDER:K``; where their data is read from (:class:`TaskData`); their splits, read
from that source; and the checks of the data made before any run."""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from harness.folder_paths import expand_home
from harness.io import check_name
from harness.tasks.catalogue import GROUPS, SPLITS, Task, get_task, resolve_tasks
from harness.tasks.demo import DEMO_TASKS, demo_split

CUSTOM_FLAGS = ("no-flip", "no-crop")
DATA_FORMATS = ("tfds", "folder")


@dataclass
class TaskData:
    """Where the tasks' data is read from: the settings every task reader takes (the sweep's
    :class:`harness.downstream.config.SweepSettings` extends them).

    Attributes:
        data_format: ``tfds`` or ``folder`` for VTAB tasks (demo tasks are generated; custom tasks are folders).
        data_dir: TFDS data_dir or the folder-format root (one folder per task).
        check_test_size: refuse a test split whose size differs from the task's (train800, val200 and
            train800val200 are always checked).
        allow_outside_paths: accept folder-format list paths outside their task folder (``../``, absolute paths, a link out);
            off by default, so a list cannot make the harness read other files.

    Raises:
        ValueError: an unknown ``data_format`` (the message names ``--data-format`` and the choices).
    """

    data_format: str = "tfds"
    data_dir: Optional[str] = None
    check_test_size: bool = True
    allow_outside_paths: bool = False

    def __post_init__(self) -> None:
        if self.data_format not in DATA_FORMATS:
            raise ValueError(
                f"unknown data format {self.data_format!r} (--data-format): use one of {', '.join(DATA_FORMATS)}"
            )


_RESERVED = {"vtab1k", "vtab", "all", "demo", *GROUPS}


def custom_task(spec: str) -> Task:
    """A user-defined task from one line ``NAME=FOLDER:NUM_CLASSES[:no-flip][:no-crop]``: a folder in
    the VTAB-1k folder format (``train800.txt``, ``val200.txt``, ``train800val200.txt``, ``test.txt``
    with ``relative/path label`` lines). Its split sizes are not checked; random flips and crops are
    on unless ``no-flip`` / ``no-crop`` turn them off (for labels that a flip or crop would change:
    positions, orientations, counts).

    FOLDER's leading ``~`` is the home folder (:func:`harness.folder_paths.expand_home`, as for every path a user
    gives).

    Raises:
        ValueError: a malformed line; a name that is not a plain file name, or that a VTAB-1k task,
            alias, group or demo task already uses; a ``$`` in FOLDER (nothing expands it), naming the line.
    """
    name, _, rest = spec.partition("=")
    flags = set()
    while rest.rpartition(":")[2] in CUSTOM_FLAGS:
        rest, _, flag = rest.rpartition(":")
        flags.add(flag)
    folder, _, k = rest.rpartition(":")
    if name and folder and re.fullmatch(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?", k) and not (k.isdigit() and int(k) >= 1):
        raise ValueError(
            f"custom task {spec!r}: NUM_CLASSES must be a whole number >= 1 (the task's class count), got {k}; "
            f"e.g. {name}={folder}:10"
        )
    if not (name and folder and k.isdigit()):
        raise ValueError(
            f"custom task {spec!r} must look like NAME=FOLDER:NUM_CLASSES[:no-flip][:no-crop], e.g. "
            "birds=/data/birds:200"
        )
    check_name(name, "custom task name")  # it names result files
    folder = expand_home(folder, f"custom task {spec!r}: FOLDER")  # a leading ~ is the home folder; a $ refused
    try:
        taken = f"the VTAB-1k task {get_task(name).name}"
    except ValueError:
        taken = "a task group" if name.lower() in _RESERVED else ("a demo task" if name in DEMO_TASKS else None)
    if taken:
        raise ValueError(
            f"custom task name {name!r} is already {taken}: give the custom task another name, e.g. my_{name}={rest}"
        )
    return Task(
        name,
        "custom",
        f"folder:{folder}",
        "-",
        int(k),
        _no_tfds_label,
        "val200",
        "test",
        None,
        train="train800",
        flip="no-flip" not in flags,
        crop="no-crop" not in flags,
    )


def custom_spec(task: Task) -> str:
    """The task line of a custom task (inverse of :func:`custom_task`)."""
    flags = ("" if task.flip else ":no-flip") + ("" if task.crop else ":no-crop")
    return f"{task.name}={task.tfds.removeprefix('folder:')}:{task.num_classes}{flags}"


def _no_tfds_label(example) -> int:
    raise ValueError("custom tasks are read from their folder, not from TFDS")


def unknown_task_message(name: str) -> str:
    """What an unknown task name is told: the closest names of every kind (VTAB-1k tasks and aliases, groups, the
    demo tasks) and the forms a task can take."""
    import difflib

    from harness.tasks.catalogue import _ALIASES, TASKS

    known = [*TASKS, *_ALIASES, *GROUPS, "vtab1k", "demo", *DEMO_TASKS]
    close = difflib.get_close_matches(name.lower(), list(dict.fromkeys(k.lower() for k in known)), n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return (
        f"unknown task {name!r}: {hint}a task is a VTAB-1k task ({', '.join(TASKS)}), a group ("
        f"{', '.join(GROUPS)}, vtab1k), a demo task ({', '.join(DEMO_TASKS)}, or demo for all four), or your own "
        "folder as NAME=FOLDER:NUM_CLASSES (the VTAB tutorial, section Tasks)"
    )


def find_task(name: str) -> Task:
    """A VTAB-1k task, a demo task, or a custom task line (``NAME=FOLDER:NUM_CLASSES``)."""
    if "=" in name:
        return custom_task(name)
    return DEMO_TASKS[name] if name in DEMO_TASKS else get_task(name)


def expand_tasks(names: Sequence[str]) -> "list[Task]":
    """``vtab1k``, group names, task names/aliases, ``demo`` (the 4 demo tasks) and custom task lines.

    Raises:
        ValueError: an unknown name; a bad custom task line; two different custom tasks of one name, or of one folder.
    """
    out: "list[Task]" = []
    custom: "dict[str, Task]" = {}
    folders: "dict[str, Task]" = {}  # a custom task's folder, resolved -> the task that names it
    for n in names:
        if n == "demo":
            picks = list(DEMO_TASKS.values())
        elif "=" in n or n in DEMO_TASKS:
            picks = [find_task(n)]
        else:
            try:
                picks = resolve_tasks([n])
            except ValueError:
                raise ValueError(unknown_task_message(n)) from None
        for t in picks:
            if t.group == "custom" and custom.setdefault(t.name.lower(), t) != t:
                raise ValueError(
                    f"two custom tasks are named {t.name!r} ({custom_spec(custom[t.name.lower()])} and "
                    f"{custom_spec(t)}): give each its own name"
                )
            folder = os.path.realpath(t.tfds.removeprefix("folder:")) if t.group == "custom" else None
            if folder is not None and folders.setdefault(folder, t).name != t.name:
                raise ValueError(
                    f"custom tasks {folders[folder].name!r} ({custom_spec(folders[folder])}) and {t.name!r} "
                    f"({custom_spec(t)}) are one task folder ({folder}): it would be trained and scored twice and "
                    "counted twice in the mean over tasks (audit17 A17-12); give it once"
                )
        out += [t for t in picks if t not in out]
    return out


def load_split(task: Task, split: str, settings: TaskData):
    """The task's split from the configured reader (demo tasks: generated); ``dataset.source`` says
    what was read."""
    from harness.tasks.folder_format import folder_split
    from harness.tasks.readers import tfds_split

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


def check_tasks(
    tasks: Sequence[Task], settings: TaskData, progress: Optional[Callable[[str], None]] = None
) -> "dict[str, dict[str, int]]":
    """Check all four splits of every task before any run: folder lists (two columns, integer labels
    in [0, K), paths inside the task folder, VTAB-1k sizes including the test split unless
    ``check_test_size`` is off), that every listed image exists and a sample decode, that the test split shares no
    image with train800, val200 or train800val200 nor val200 with train800 (paths compared:
    :func:`harness.tasks.folder_format.check_disjoint`); TFDS splits (prepared, sizes, a sample of examples decode with
    labels in range). Demo tasks are generated. ``progress`` gets a line per task checked.

    Returns:
        the examples of each split read from a folder list, by task name and split (TFDS and demo tasks are left
        out: their sizes are the catalogue's).

    Raises:
        ValueError / FileNotFoundError: the first problem found, naming the file (and line) and the fix.
    """
    from harness.tasks.folder_format import check_disjoint, check_split
    from harness.tasks.readers import check_tfds_split

    sizes: "dict[str, dict[str, int]]" = {}
    for i, t in enumerate(tasks, 1):
        if t.group == "demo":
            continue
        if progress:
            progress(f"checking the data of {t.name} (task {i}/{len(tasks)})")
        read = {}
        for split in SPLITS:
            if t.group != "custom" and settings.data_format == "tfds":
                check_tfds_split(t, split, settings.data_dir, settings.check_test_size or split != "test")
            else:
                read[split] = load_split(t, split, settings)
                check_split(read[split])
        check_disjoint(read)  # folder lists: the held-out images apart from those trained on
        check_classes_seen(t, read)
        if read:
            sizes[t.name] = {split: len(ds) for split, ds in read.items()}
    return sizes


def check_classes_seen(task: Task, read: "dict[str, object]") -> None:
    """A custom task's K (``NAME=FOLDER:K``) is the largest label its lists hold, plus one (audit26 A26-18 / A26-19):
    a larger K adds classes above every label, which no split has an example of (a typo in K), and a K-way head
    fine-tuned and scored on them gives other NLL, ECE, Brier and temperature than the task's own classes (the
    accuracy hardly moves). A class missing below the largest label is the data's (a subset of a labelled set), not
    refused here; a K too small is refused by the label check (:func:`harness.tasks.readers.check_labels`). ``read``:
    the task's splits read from its lists (:func:`check_tasks`), each with ``labels``. The rule of the sweep, of
    ``harness fewshot`` and of the upstream few-shot monitor (all read :func:`check_tasks`).

    Raises:
        ValueError: naming the task line, K, the labels the lists hold, the classes none has and the fix.
    """
    labels = [int(ds.labels.max()) for ds in read.values() if len(getattr(ds, "labels", ()))]
    if task.group != "custom" or not labels or max(labels) + 1 >= task.num_classes:
        return
    top, k = max(labels), task.num_classes
    unseen = f"class {top + 1} has" if top + 2 == k else f"classes {top + 1} to {k - 1} have"
    line = custom_spec(task)
    fixed = custom_spec(dataclasses.replace(task, num_classes=top + 1))
    raise ValueError(
        f"custom task {line!r} says K={k} classes, but the labels of its lists ({', '.join(f'{s}.txt' for s in read)}) "
        f"run only up to {top}: {unseen} no example in any split, and a {k}-way head (or probe) would be fit and "
        f"scored with them (other NLL, ECE, Brier and temperature than the task's {top + 1} classes); K is the largest "
        f"label + 1: give {fixed}"
    )


def task_read_folders(tasks: Sequence[Task], settings: TaskData) -> "dict[Path, str]":
    """The folders the tasks' images are read from, resolved -> how a message names them: a custom task's
    ``FOLDER`` and a folder-format task's folder under ``--data-dir`` (one that does not exist yet is left out: the
    task check names it); with ``settings.allow_outside_paths``, the folders outside it holding the images its lists
    name (:func:`_outside_folders`: the option lets a list read images elsewhere, never an output be written among
    them, audit25 A25-14). TFDS and DEMO tasks read none here. An output folder inside one of them is refused
    (:func:`harness.folder_paths.check_outside_outputs`' ``inputs``): its files would land among the task's images."""
    from harness.tasks.folder_format import task_folder

    read = {}
    for t in tasks:
        try:
            if t.group == "custom":
                folder, said = Path(t.tfds.removeprefix("folder:")).expanduser().resolve(), f"task {t.name}'s folder"
            elif t.group != "demo" and settings.data_format == "folder" and settings.data_dir:
                folder, said = task_folder(t, settings.data_dir).resolve(), f"task {t.name}'s folder (--data-dir)"
            else:
                continue
        except (OSError, ValueError):  # no folder: the task check names it
            continue
        read[folder] = said
        if settings.allow_outside_paths:  # the images it reads outside it too (audit25 A25-14)
            read.update({Path(f): how for f, how in _outside_folders(folder, t.name).items() if Path(f) not in read})
    return read


def _outside_folders(folder: Path, name: str) -> "dict[str, str]":
    """The resolved folders outside the task ``folder`` holding images its lists name (``--allow-outside-paths``:
    ``../imf/val/a/0.png``, an absolute path, a link out), and each folder holding two or more of those
    (:func:`harness.data.manifest.with_shared_parents`) -> how a message names it (task ``name``'s list and line).
    Lists that cannot be read add none (the task check names them); no image is opened."""
    from harness.data.folders import inside
    from harness.data.manifest import with_shared_parents
    from harness.tasks.folder_format import read_list

    found: "dict[str, str]" = {}
    for split in SPLITS:
        listing = folder / f"{split}.txt"
        try:
            paths, _, lines = read_list(listing, True) if listing.is_file() else ([], None, [])
        except (OSError, ValueError):
            continue
        for p, n in zip(paths, lines):
            real = os.path.dirname(os.path.realpath(p))
            if real not in found and not inside(real, str(folder)):
                found[real] = (
                    f"a folder of the images task {name} reads with --allow-outside-paths ({listing} line {n} names an "
                    "image in it)"
                )
    return with_shared_parents(found)


def task_record(tasks: Sequence[Task]) -> "list[str]":
    """The tasks as a study records them: each name, a custom task as its task line with its folder resolved
    (:func:`custom_spec`: the same spelling from another working folder names another folder)."""
    out = []
    for t in tasks:
        if t.group == "custom":
            folder = Path(t.tfds.removeprefix("folder:")).expanduser().resolve()
            out.append(custom_spec(dataclasses.replace(t, tfds=f"folder:{folder}")))
        else:
            out.append(t.name)
    return out


def task_data(tasks: Sequence[Task], settings: TaskData) -> "dict[str, dict]":
    """What each task reads, as a study records it (a sweep's ``sweep.json`` and a few-shot study's ``fewshot.json``
    ``task_data``, an upstream run's few-shot monitor in ``run.json``; audit24 A24-03, audit25 A25-08 / A25-12): by
    task name, the task folder resolved (a custom task's ``FOLDER``, a folder-format task's folder under
    ``--data-dir``) and the SHA-256 (hex) of each of its list files (:data:`harness.tasks.catalogue.SPLITS`: train800,
    val200, train800val200, test) that exists; a custom task also its task line, folder resolved (``spec``,
    :func:`task_record`: its K and ``no-flip`` / ``no-crop`` are how its runs train and score, audit26 A26-06). TFDS
    and DEMO tasks, and a folder that does not exist (the task check names it), are left out."""
    import hashlib

    from harness.tasks.folder_format import task_folder

    out = {}
    for t in tasks:
        try:
            if t.group == "custom":
                folder = Path(t.tfds.removeprefix("folder:")).expanduser().resolve()
            elif t.group != "demo" and settings.data_format == "folder" and settings.data_dir:
                folder = task_folder(t, Path(settings.data_dir).expanduser()).resolve()
            else:
                continue
        except (OSError, ValueError):
            continue
        lists = {s: folder / f"{s}.txt" for s in SPLITS}
        digests = {s: hashlib.sha256(f.read_bytes()).hexdigest() for s, f in lists.items() if f.is_file()}
        out[t.name] = {"folder": str(folder), "lists": digests}
        if t.group == "custom":
            out[t.name]["spec"] = task_record([t])[0]
    return out


def changed_task_data(recorded: object, now: "dict[str, dict]", record: str, since: str) -> Optional[str]:
    """How the tasks' data ``now`` (:func:`task_data`) differs from an earlier record of it (``recorded``; ``record``
    names where it is kept, ``the sweep's sweep.json``; ``since`` when it was read, ``the sweep ran``): a task's folder
    resolved is another (a relative ``FOLDER`` or ``--data-dir`` from another working folder), a custom task's line
    another (``spec``: its K, ``no-flip`` or ``no-crop``; audit26 A26-06), or one of its list files has another
    digest. Compared only for the tasks and lists both record (:func:`harness.provenance.changed_since`: a
    record of an earlier version records none). A phrase naming the task, the file and both values, or None."""
    from harness.provenance import changed_since

    before = recorded if isinstance(recorded, dict) else {}
    for name, rec in now.items():
        was = before.get(name)
        for _, folder_was, folder in changed_since(was, {"folder": rec["folder"]}):
            return f"task {name}'s folder is now {folder}, {record} records {folder_was}"
        for _, spec_was, spec in changed_since(was, {"spec": rec.get("spec")}):
            return (
                f"task {name}'s line is now {spec}, {record} records {spec_was} (its K and no-flip / no-crop are how "
                "its runs train and score)"
            )
        for split, earlier, digest in changed_since((was or {}).get("lists"), rec["lists"]):
            return (
                f"task {name}'s {Path(rec['folder']) / f'{split}.txt'} changed since {since} (its digest is "
                f"now {digest[:12]}..., {record} records {str(earlier)[:12]}...)"
            )
    return None
