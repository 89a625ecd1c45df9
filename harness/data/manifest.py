"""Reading a JFT-style manifest (``<split>.jsonl`` or ``<split>.csv``) entry by entry, for
:func:`harness.data.sources._manifest`: UTF-8 text (a UTF-8 byte-order mark is accepted), integer label ids, each
label once in an entry.

Which kind of labels a manifest holds is said by ``data.multilabel`` (audit14 A14-10), never guessed from the lines:
false (the default, as for every source) reads it as single-label data, each line's one label id its class (an
integer target, a softmax model's); true reads each line's list as a label set (multi-hot targets, a sigmoid
model's), in which an empty list (``"labels": []``) is an image of no class, all K targets 0 (a deliberate negative,
as in JFT). A single-label manifest whose line lists no label or several is refused (:func:`manifest_rows` with
``single``), naming the file, the line and both fixes; guessing the kind from the data instead would read a split of
label sets that happens to hold one label a line (a small evaluation split) as single labels, and its training split
as sets."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import Any, Iterator, TextIO


def manifest_file(root: Path, split: str) -> Path:
    """``<root>/<split>.jsonl`` or ``<root>/<split>.csv``, the one of them that exists.

    Raises:
        FileNotFoundError: neither file exists.
        ValueError: both exist (which one holds the labels meant is not known: audit13 A13-17), naming both.
    """
    found = [root / name for name in (f"{split}.jsonl", f"{split}.csv") if (root / name).is_file()]
    if len(found) == 2:
        raise ValueError(
            f"split {split!r} of the manifest folder {str(root)!r} has two lists, {found[0].name} and "
            f"{found[1].name}: which one holds the labels meant is not known; remove (or rename) the one that is not"
        )
    if not found:
        raise FileNotFoundError(f"no {split}.csv or {split}.jsonl in {str(root)!r}")
    return found[0]


def label_id(value: Any, where: str, text: bool = False) -> int:
    """One label id of a manifest entry: a JSON integer (``2``), or with ``text`` (a CSV field) a string of an integer.

    Raises:
        ValueError: a float (``1.7``, ``2.0``), a boolean, a JSON string (``"2"``), or a text that is not an integer
            (names ``where``, the value and the fix).
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    is_int = isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value)
    if is_int and text:
        return int(value)
    shown = repr(value) if isinstance(value, str) else json.dumps(value)
    integral = isinstance(value, float) and value.is_integer()
    fix = f"write {int(value)}" if integral or is_int else "write the class id (0, 1, 2, ...) it stands for"
    kind = " (a JSON string): JSON label ids must be JSON integers" if is_int else ": label ids must be integers"
    raise ValueError(f"{where}: label {shown} is not a class id{kind}; {fix}")


def manifest_rows(root: Path, split: str, single: bool = False) -> "Iterator[tuple[int, str, list[int]]]":
    """``(line number, image path, label ids)`` of each entry of ``<root>/<split>.jsonl`` or ``.csv``, read line by
    line (the file is never held whole) as UTF-8 (a byte-order mark is dropped). A label id is an integer (JSON ``2``;
    CSV ``2``), each given once in an entry; with ``single`` (``data.multilabel=false``: single-label data) exactly
    one in every entry.

    Raises:
        ValueError: a file that is not UTF-8, a line that is not an entry, a label that is not an integer (``1.7``,
            ``2.0``, ``true``, JSON ``"2"``, ``"x"``) or one repeated in an entry; with ``single``, an entry of no
            label or of several (the message names the file, line, value and fix).
        FileNotFoundError: neither file exists.
    """
    path = manifest_file(root, split)
    with open(path, newline="" if path.suffix == ".csv" else None, encoding="utf-8-sig") as f:
        try:
            for n, image, ids in _entries(path, f):
                if single and len(ids) != 1:
                    _refuse_count(path, n, ids)
                yield n, image, ids
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path} is not UTF-8 text ({e.reason}, byte {e.object[e.start : e.start + 1]!r}): a manifest must be "
                "UTF-8; save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)"
            ) from None


def image_folders(root: Path, split: str) -> "dict[str, str]":
    """The resolved folders holding the images ``<root>/<split>.jsonl`` (or ``.csv``) lists, and each folder holding
    two or more of those (the split folder of class folders, ``imf/train`` of ``imf/train/{a,b}``: a folder written
    beside them would be read as a class) -> where the list names an image in it (``man/train.jsonl line 3``), for a
    writer's ``inputs`` (:func:`harness.data.splits.read_folders`: an output folder inside one would lie among the
    images; audit24 A24-08). The list is read (once per version of the file) line by line as :func:`manifest_rows`
    reads it, each image's folder
    joined to ``root`` (an absolute image path as it is) and resolved once (links followed); no image is opened or
    looked up. Empty where the list cannot be read, and what was read up to a line that is no entry (the readers
    name it)."""
    try:
        file = manifest_file(root, split)
        stat = file.stat()
    except (OSError, ValueError):
        return {}
    key = (str(file.resolve()), stat.st_mtime_ns, stat.st_size)  # an experiment checks each planned run's: read once
    if key not in _FOLDERS:
        _FOLDERS[key] = _image_folders(root, split, file)
    return dict(_FOLDERS[key])


#: :func:`image_folders` by (list file, modification time, size)
_FOLDERS: "dict[tuple[str, int, int], dict[str, str]]" = {}


def _image_folders(root: Path, split: str, file: Path) -> "dict[str, str]":
    """:func:`image_folders` read from ``file``, the list of ``split`` under ``root``."""
    found: "dict[str, str]" = {}
    seen: "set[str]" = set()
    try:
        for n, image, _ in manifest_rows(root, split):
            folder = image.rpartition("/")[0]  # the folder as listed: each one resolved once
            if folder not in seen:
                seen.add(folder)
                real = os.path.realpath(os.path.join(root, folder))
                found.setdefault(real, f"{file} line {n} names an image in it")
    except (OSError, ValueError):
        pass
    return with_shared_parents(found)


def with_shared_parents(found: "dict[str, str]") -> "dict[str, str]":
    """``found`` (resolved image folders -> ``"... names an image in it"``) with each folder holding two or more of
    them (the split folder of class folders: a folder written beside them would be read as a class), named after
    the first: the rule of :func:`image_folders`, which a task list's images outside its folder share
    (:func:`harness.tasks.taskset.task_read_folders`, audit25 A25-14)."""
    above: "dict[str, list[str]]" = {}
    for folder in list(found):
        above.setdefault(os.path.dirname(folder), []).append(folder)
    for parent, folders in above.items():
        if len(folders) > 1 and parent != os.path.dirname(parent):  # never the file system's root
            found.setdefault(
                parent, found[folders[0]].replace("in it", f"in its folder {os.path.basename(folders[0])}")
            )
    return found


def _refuse_count(path: Path, n: int, ids: "list[int]") -> None:
    """Refuse line ``n`` of a single-label manifest (``data.multilabel=false``), whose label list ``ids`` holds no
    label or several.

    Raises:
        ValueError: naming the file, the line, its labels, the rule and both fixes.
    """
    what = "lists no label" if not ids else f"lists {len(ids)} labels {ids}"
    keep = "give the image's class (one label id)" if not ids else "keep the one label that is its class"
    sets = "an empty list: an image of no class" if not ids else "several labels a line"
    raise ValueError(
        f"{path} line {n} {what}: data.multilabel=false (the default) reads a manifest as single-label data, exactly "
        f"one label id a line, the image's class; {keep}, or set data.multilabel=true if the list holds label sets "
        f"({sets}; multi-hot targets, trained with model.head.link=sigmoid)"
    )


def _entries(path: Path, f: TextIO) -> "Iterator[tuple[int, str, list[int]]]":
    """The entries of an open manifest (see :func:`manifest_rows`)."""
    if path.suffix == ".jsonl":
        rows = (
            (n, _json_entry(path, n, line), False) for n, line in enumerate(f, 1) if line.strip()
        )  # (line, (path, labels), labels are text)
    else:
        rows = (
            (n, (rec[0], rec[1].replace(";", " ").split() if len(rec) > 1 else []), True)
            for n, rec in enumerate(csv.reader(f), 1)
            if rec and not (n == 1 and rec[0] in ("path", "image", "image_path"))
        )
    for n, (image, labels), text in rows:
        ids = [label_id(v, f"{path} line {n}", text) for v in labels]
        if len(set(ids)) < len(ids):
            twice = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(
                f"{path} line {n}: label {twice} is listed twice in one entry ({ids}); list each label once"
            )
        yield n, image, ids


def _json_entry(path: Path, n: int, line: str) -> "tuple[str, list]":
    """(image path, labels) of JSONL line ``n``.

    Raises:
        ValueError: not ``{"path": ..., "labels": [ids]}``.
    """
    try:
        rec = json.loads(line)
        image, labels = str(rec["path"]), rec["labels"]
        if not isinstance(labels, list):
            raise TypeError(f"labels is {json.dumps(labels)}, not a list")
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f'{path} line {n}: expected {{"path": ..., "labels": [ids]}} ({e})') from e
    return image, labels
