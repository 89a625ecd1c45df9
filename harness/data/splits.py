"""Which images each split of a source holds, and which splits share images: the one definition the split rules read
(:func:`harness.data.config.check_splits`, :func:`harness.model_identity.check_not_trained_on`, an OOD set's
"own data" rule) and the readers use (:func:`harness.data.sources.build_split`).

- ``digits``: fractions of one fixed permutation of scikit-learn's 1,797 images (:data:`DIGITS_SPLITS`): ``train``,
  ``val`` and ``test`` are disjoint, ``all`` holds every one of them;
- ``cifar10n``: rows of the 50,000 training images (:func:`cifar10n_rows`): ``train`` holds ``train45k`` and
  ``val5k`` (disjoint); ``test`` is the 10,000 test images;
- ``tfds``: a split spec ``name[slice]`` (``+`` between parts): the ranges of one split are compared (a whole split,
  or ``all``, holds every slice of it; ``train[:80%]`` shares images with ``train[70%:]``; percent against index
  bounds may share images: :func:`_tfds_relation`);
- any other source (an image folder's sub-folders, a manifest's files, a pack's folders): splits by the folder or file
  actually read, ``(data.path / split).resolve()`` (an absolute split replaces data.path; :func:`split_location`); an
  image folder's ``train`` holds ``train/cat``; two folders or lists at other places by the images they read,
  resolved (a copied list, class folders linked into another split: :func:`images_relation`); a pack by the source
  split its index.json records it was packed from (:func:`images_of`); without a path, by their names (``train/``,
  ``./train`` and ``train/../train`` are ``train``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

import numpy as np

#: digits: each split's ``[lo, hi)`` fraction of one fixed permutation of the 1,797 images
DIGITS_SPLITS = {"train": (0.0, 0.6), "val": (0.6, 0.8), "test": (0.8, 1.0), "all": (0.0, 1.0)}
#: cifar10n: the splits of its 50,000 training images (:func:`cifar10n_rows`); ``test`` is the other file
CIFAR10N_TRAIN_SPLITS = ("train", "train45k", "val5k")


def cifar10n_rows(split: str) -> np.ndarray:
    """Rows of the 50,000 CIFAR-10N training images in a split: ``train`` all of them in the original
    order; ``val5k`` 5,000 held out at random (a fixed permutation, seed 0), with their noisy labels
    (what a user has for choosing hyper-parameters and post-hoc calibration); ``train45k`` the other
    45,000, in the original order."""
    if split == "train":
        return np.arange(50_000)
    held = np.sort(np.random.default_rng(0).permutation(50_000)[:5_000])
    return held if split == "val5k" else np.setdiff1d(np.arange(50_000), held)


#: a TFDS sub-split ``name[selector]`` and one bound of a slice (``-10%``, ``200``, ``3shard``), as
#: ``tfds.core.ReadInstruction.from_spec`` reads them (tensorflow_datasets.core.splits: _SUB_SPEC_RE, _SLICE_RE)
_TFDS_SUB = re.compile(r"^(?P<name>[\w-]+)(\[(?P<sel>[\d\w%:.-]+)\])?$")
_TFDS_BOUND = re.compile(r"^((?P<val>-?[\d_.]+)(?P<unit>%|shard)?)?$")


def _tfds_parts(spec: str) -> Optional[list]:
    """A TFDS split spec (``train``, ``train[:90%]``, ``train[10:200]``, ``train[-10%:]+test``, ``train[3shard]``) as
    its parts ``(name, unit, lo, hi)``: ``unit`` ``"%"`` (``lo``/``hi`` in [0, 100], negative bounds counted from the
    end), ``"abs"`` or ``"shard"`` (each bound ``(frame, n)``: frame 0 from the start, 1 from the end), or None (the
    whole split); None when the spec is not one TFDS reads."""
    parts = []
    for sub in re.split(r"\s*\+\s*", re.sub(r"\s+(?=[^\[]*\])", "", spec.strip())):
        m = _TFDS_SUB.match(sub)
        if not m:
            return None
        if m["sel"] is None:
            parts.append((m["name"], None, None, None))
            continue
        bounds = [_TFDS_BOUND.match(x) for x in m["sel"].split(":")]
        if not all(bounds) or len(bounds) > 2 or not any(b.group(0) for b in bounds):
            return None
        units = {b["unit"] for b in bounds if b["unit"]}
        if len(bounds) == 1:  # train[3shard]: one shard
            if units != {"shard"}:
                return None
            bounds = [bounds[0], None]
        unit = units.pop() if len(units) == 1 else "abs" if not units else None
        if unit is None:
            return None
        try:
            vals = [None if b is None or b["val"] is None else float(b["val"].replace("_", "")) for b in bounds]
        except ValueError:
            return None
        if len(m["sel"].split(":")) == 1:
            vals[1] = vals[0] + 1 if vals[0] != -1 else None  # train[-1shard]: the last one
        lo, hi = vals
        if unit == "%":
            lo, hi = (
                (0.0 if lo is None else lo % 100 if lo < 0 else min(lo, 100.0)),
                (100.0 if hi is None else max(hi + 100, 0.0) if hi < 0 else min(hi, 100.0)),
            )
        else:
            lo = (0, 0.0) if lo is None else (1, lo) if lo < 0 else (0, lo)
            hi = (1, 0.0) if hi is None else (1, hi) if hi < 0 else (0, hi)
        parts.append((m["name"], unit, lo, hi))
    return parts


def _tfds_part_relation(a: tuple, b: tuple) -> str:
    """How one part of a TFDS spec relates to another: ``"holds"`` (every image of ``b`` is in ``a``; equal ranges
    hold each other), ``"meets"`` (they share an image), ``"apart"`` (no image in common), ``"unknown"`` (ranges
    in units that cannot be compared without the split's length: percent against an index, an index from the start
    against one from the end)."""
    (an, au, alo, ahi), (bn, bu, blo, bhi) = a, b
    if an != bn and "all" not in (an, bn):
        return "apart"  # two splits of one dataset share no example
    if au is None and (an == bn or an == "all"):
        return "holds"  # the whole split (or "all") holds every slice of it
    if au is None or bu is None or au != bu:
        return "unknown"

    def cmp(x, y):  # x <= y, or None when it depends on the split's length
        if au == "%":
            return x <= y
        return x[1] <= y[1] if x[0] == y[0] else None

    if blo == bhi or (au == "%" and bhi <= blo):
        return "apart"  # an empty slice
    if cmp(alo, blo) and cmp(bhi, ahi):
        return "holds"
    apart = [cmp(ahi, blo), cmp(bhi, alo)]
    if any(apart):
        return "apart"
    return "unknown" if None in apart else "meets"


def _tfds_relation(a: str, b: str) -> Optional[str]:
    """:func:`split_relation` of two TFDS split specs, by the ranges of the splits they slice (audit20 A20-01:
    ``train[:80%]`` shares images with ``train[70%:]``; ``train[0:90%]`` is ``train[:90%]``); ``"may share images
    with"`` where that cannot be told without the split's length (percent against index bounds) or a spec is not one
    TFDS reads."""
    pa, pb = _tfds_parts(a), _tfds_parts(b)
    if pa is None or pb is None:
        names = [{re.split(r"\[", x)[0].strip() for x in s.split("+")} for s in (a, b)]
        return "may share images with" if names[0] & names[1] or "all" in names[0] | names[1] else None
    rel = {(i, j): _tfds_part_relation(x, y) for i, x in enumerate(pa) for j, y in enumerate(pb)}
    rev = {(i, j): _tfds_part_relation(pb[j], pa[i]) for (i, j) in rel}
    a_holds = all(any(rel[i, j] == "holds" for i in range(len(pa))) for j in range(len(pb)))
    b_holds = all(any(rev[i, j] == "holds" for j in range(len(pb))) for i in range(len(pa)))
    if a_holds and b_holds:
        return "is"
    if a_holds or b_holds:
        return "holds" if a_holds else "is part of"
    if any(r in ("holds", "meets") for r in [*rel.values(), *rev.values()]):
        return "shares images with"
    return "may share images with" if "unknown" in rel.values() else None


def _holds(source: str, a: str, b: str) -> bool:
    """Whether split ``a`` of ``source`` holds every image of another split ``b`` (``a != b``)."""
    if source == "digits" and a in DIGITS_SPLITS and b in DIGITS_SPLITS:
        (alo, ahi), (blo, bhi) = DIGITS_SPLITS[a], DIGITS_SPLITS[b]
        return alo <= blo and bhi <= ahi
    if source == "cifar10n":
        return a == "train" and b in CIFAR10N_TRAIN_SPLITS
    return False


def _meet(source: str, a: str, b: str) -> bool:
    """Whether two splits, neither holding the other, still share images (digits' fractions overlap)."""
    if source == "digits" and a in DIGITS_SPLITS and b in DIGITS_SPLITS:
        (alo, ahi), (blo, bhi) = DIGITS_SPLITS[a], DIGITS_SPLITS[b]
        return alo < bhi and blo < ahi
    return False


def split_relation(source: str, a: Optional[str], b: Optional[str], path: Optional[str] = None) -> Optional[str]:
    """How split ``a`` of ``source`` relates to split ``b``: ``"is"`` (the same split), ``"holds"`` (every image of
    ``b`` is in ``a``: digits' ``all`` holds ``train``; cifar10n's ``train`` holds ``val5k``), ``"is part of"`` (the
    converse), ``"shares images with"`` (an overlap, neither holding the other), ``"may share images with"`` (TFDS
    slices whose ranges cannot be compared without the split's length: :func:`_tfds_relation`), or None (no image in
    common, or either split None). With the data's ``path`` (``data.path``), the splits of a folder, manifest or pack
    are compared as the images they read (:func:`images_of`: the folder or file actually read, resolved, audit21
    A21-05; a pack as the source split its index.json records, A21-07); without it by their names under the path.
    """
    if a is None or b is None:
        return None
    if path and source in PATH_SOURCES:
        return images_relation(images_of(source, None, path, a), images_of(source, None, path, b))
    if source not in ("digits", "cifar10n", "tfds"):  # a folder under data.path: by its path (audit20 A20-13)
        a, b = os.path.normpath(str(a)), os.path.normpath(str(b))  # train/, ./train and train/../train are train
        if source == "image_folder" and a != b and (b.startswith(a + os.sep) or a.startswith(b + os.sep)):
            return "holds" if b.startswith(a + os.sep) else "is part of"  # train holds train/cat's images
    if a == b:
        return "is"
    if source == "tfds":
        return _tfds_relation(a, b)
    if _holds(source, a, b):
        return "holds"
    if _holds(source, b, a):
        return "is part of"
    return "shares images with" if _meet(source, a, b) else None


def splits_overlap(source: str, a: Optional[str], b: Optional[str]) -> bool:
    """Whether splits ``a`` and ``b`` of ``source`` have an image in common (the same split, one holding the other,
    or an overlap: :func:`split_relation`); False when either is None."""
    return split_relation(source, a, b) is not None


# ---------------------------------------------------------------------------- the images a split of some data reads
#: the sources whose data is its ``data.path`` (a split is a folder or file under it, :func:`split_location`)
PATH_SOURCES = ("image_folder", "manifest", "shards")


def _local_root(source: Optional[str], path: Optional[str]) -> Optional[Path]:
    """``data.path`` as the local folder it names (``~`` expanded), or None: no path, a URL, or a shard pattern
    (:func:`harness.data.shard_index.shard_files` reads those; their splits are compared by name)."""
    text = str(path or "")
    if source == "shards":
        text = text.removeprefix("file:") if not text.startswith("file://") else text
        if any(s in text for s in ("{", "::")) or text.endswith(".tar"):
            return None
    if not text or "://" in text:
        return None
    return Path(text).expanduser()


def absolute_path(source: Optional[str], path: Optional[str]) -> Optional[str]:
    """``data.path`` of a source in :data:`PATH_SOURCES` as an absolute path (a relative one joined to the current
    working folder, ``~`` expanded, links kept), as a run's ``run.json`` (``data_path``) and a pack's index.json record
    it, so the folder a run or pack read is known from any working folder (audit22 A22-02); ``path`` unchanged for
    another source, no path, a URL or a shard pattern."""
    if source not in PATH_SOURCES or _local_root(source, path) is None or str(path).startswith("file:"):
        return path
    return os.path.abspath(os.path.expanduser(str(path)))


def recorded_path(source: Optional[str], path: Optional[str], recorded: Optional[dict]) -> Optional[str]:
    """A run's ``data.path`` as the run read it: ``recorded["absolute"]`` (its run.json's ``data_path``, written at
    training time: ``{"path": as given, "absolute": absolute_path(...)}``) where ``path`` is relative and is the one
    recorded (audit22 A22-02: a run's ``imf``, read from another working folder, was another folder); else ``path``
    (an absolute one; a run that recorded none, read from the current folder as before)."""
    if not isinstance(recorded, dict) or not path or source not in PATH_SOURCES:
        return path
    absolute, given = recorded.get("absolute"), recorded.get("path")
    if not isinstance(absolute, str) or str(given) != str(path) or _local_root(source, path) is None:
        return path
    return path if os.path.isabs(os.path.expanduser(str(path))) else absolute


def split_location(source: Optional[str], path: Optional[str], split: Optional[str]) -> Optional[str]:
    """The folder (image folder, pack) or file (manifest: ``<split>.jsonl`` / ``<split>.csv``, the one that exists)
    that ``split`` of the data at ``path`` is read from, resolved: ``(Path(path) / split).resolve()`` (an absolute
    ``split`` replaces ``path``; ``../imf/train`` under ``imf`` is ``imf/train``; links followed); a pack's split the
    folder holding its ``index.json`` (``<path>/<split>``, else ``<path>`` itself, as the reader looks). None for a
    source not in :data:`PATH_SOURCES`, no path or split, a URL or a shard pattern (audit21 A21-05)."""
    root = _local_root(source, path) if source in PATH_SOURCES and split else None
    if root is None:
        return None
    where = root / str(split)
    if source == "shards":
        from harness.data.shard_index import INDEX_NAME

        where = where if (where / INDEX_NAME).is_file() else root
    elif source == "manifest":
        where = next((Path(f"{where}{s}") for s in (".jsonl", ".csv") if Path(f"{where}{s}").is_file()), where)
    try:
        return str(where.resolve())
    except (OSError, RuntimeError):  # a loop of links: the reader names it
        return None


def read_folders(
    source: Optional[str], path: Optional[str], splits: "tuple[Optional[str], ...]", root: bool = False
) -> "dict[Path, str]":
    """The folders ``splits`` of an image folder or pack read (:func:`split_location`, resolved) -> how a message
    names each (``the data's test split (data.path=imf)``), for a writer's ``inputs``
    (:func:`harness.folder_paths.check_outside_outputs`): an output folder inside one would become a class of it, or
    files of the pack (audit22 A22-11); with ``root``, ``data.path`` itself too (``harness data pack``: the folder
    it packs, audit23 A23-06); for a manifest, the folders holding the images its splits' lists name and the split
    folders holding those (:func:`harness.data.manifest.image_folders`, a read of the lists: audit24 A24-08). Empty
    for other sources."""
    if source == "manifest" and _local_root(source, path) is not None:
        from harness.data.manifest import image_folders

        lists = (image_folders(_local_root(source, path), s).items() for s in dict.fromkeys(s for s in splits if s))
        return {
            Path(d): f"a folder of the images the data lists (data.path={path}: {at})" for f in lists for d, at in f
        }
    if source not in ("image_folder", "shards"):
        return {}
    found = {}
    for split in dict.fromkeys(s for s in splits if s):
        where = split_location(source, path, split)
        if where:
            found.setdefault(Path(where), f"the data's {split} split (data.path={path})")
    top = _local_root(source, path) if root else None
    if top is not None:
        try:
            found.setdefault(top.resolve(), f"the data's folder (data.path={path})")
        except (OSError, RuntimeError):  # a loop of links: the reader names it
            pass
    return found


def pack_record(path: Optional[str], split: Optional[str]) -> Optional[tuple]:
    """``(source config, split)`` that a pack's split was packed from, as its index.json records them (``harness data
    pack``: ``source.config`` and ``source.split``), for a local pack folder ``path`` (``<path>/<split>/index.json`` or
    ``<path>/index.json``); None without a readable record (a shard pattern, a URL, an older pack: the reader's own
    checks speak for it). The one reader of a pack's source for the split rules (:func:`images_of`)."""
    from harness.data.shard_index import INDEX_NAME, read_index

    folder = split_location("shards", path, split)
    if folder is None or not (Path(folder) / INDEX_NAME).is_file():
        return None
    try:
        src = read_index(Path(folder) / INDEX_NAME).get("source") or {}
    except (OSError, ValueError):
        return None
    config, packed = src.get("config"), src.get("split")
    if not isinstance(config, dict) or not config.get("source") or not isinstance(packed, str):
        return None
    return config, packed


def images_of(source: Optional[str], name: Optional[str], path: Optional[str], split: Optional[str]) -> Optional[tuple]:
    """Which images ``split`` of the data ``(source, name, path)`` reads, as ``(source, name, (how, which))``: a pack
    (``shards``) as the source and split its index.json records it was packed from (:func:`pack_record`; audit21
    A21-07), a folder or manifest by the folder or file read (``("at", resolved)``: :func:`split_location`, audit21
    A21-05), any other split by its name (``("name", split)``; ``name`` kept for tfds only: cifar10n and digits are one
    dataset wherever their files lie). None for no split or source."""
    if not source or not split:
        return None
    if source == "shards" and (got := pack_record(path, split)) and got[0].get("source") != "shards":
        return images_of(got[0].get("source"), got[0].get("name"), got[0].get("path"), got[1])
    if source in PATH_SOURCES:
        where = split_location(source, path, split)
        if where and source == "manifest":  # its images: the list's lines, relative to data.path (A23-09)
            return (source, None, ("at", where, os.path.abspath(os.path.expanduser(str(path))), str(split)))
        return (source, None, ("at", where) if where else ("name", os.path.normpath(str(split))))
    return (source, tfds_dataset(name) if source == "tfds" else None, ("name", str(split)))


def tfds_dataset(name: Optional[str]) -> Optional[str]:
    """A TFDS ``data.name`` without its version (``cifar10:3.0.2``, ``cifar10:3.*.*`` are ``cifar10``; a builder
    config, ``name/config``, is kept): one dataset in every version pinned (audit21 A21-13: a version pinned was
    "other data", so a model was scored on its training split)."""
    return None if name is None else str(name).split(":", 1)[0].strip()


def images_relation(a: Optional[tuple], b: Optional[tuple]) -> Optional[str]:
    """:func:`split_relation` of two :func:`images_of`: ``"is"``, ``"holds"``, ``"is part of"``, ``"shares images
    with"``, ``"may share images with"``, or None (other data, no image in common, or one known by its location and
    the other only by its name: not known to be the same data). Two image folder or manifest splits at other places
    (either source against either) are compared by the images they read, resolved (:func:`split_regions`): a copied list,
    or class folders or images linked into another split, share its images (audit23 A23-09, A23-19)."""
    if a is None or b is None or a[2][0] != b[2][0]:
        return None
    if a[:2] != b[:2]:
        return _shared(a, b) if a[2][0] == "at" and {a[0], b[0]} <= set(_LISTED) else None
    source, (how, x), (_, y) = a[0], a[2][:2], b[2][:2]
    if how == "name":
        return split_relation(source, x, y)
    if x == y:
        return "is"
    if source == "image_folder" and (
        y.startswith(x.rstrip(os.sep) + os.sep) or x.startswith(y.rstrip(os.sep) + os.sep)
    ):
        return "holds" if y.startswith(x.rstrip(os.sep) + os.sep) else "is part of"  # train holds train/cat
    return _shared(a, b) if source in _LISTED else None


#: the sources whose split's images are files it lists or holds (compared by :func:`split_regions`)
_LISTED = ("image_folder", "manifest")


def _shared(a: tuple, b: tuple) -> Optional[str]:
    """``"shares images with"`` when an image read by one of two located splits (:func:`images_of`, ``"at"``) is
    read by the other (a region of one, :func:`split_regions`, is a region of the other or lies inside one, or a file
    of one is a file of the other by another name: :func:`harness.data.file_identity.shared_file`), else None (either
    unreadable: the reader names it)."""
    ra, rb = split_regions(a), split_regions(b)
    if not ra or not rb:
        return None

    def meets(xs: "frozenset[str]", ys: "frozenset[str]") -> bool:
        for x in xs:
            while True:
                if x in ys:
                    return True
                up = os.path.dirname(x)
                if up == x:
                    break
                x = up
        return False

    from harness.data.file_identity import shared_file  # one file by two names: a hard link (audit25 A25-09)

    return "shares images with" if meets(ra, rb) or meets(rb, ra) or shared_file(ra, rb) else None


def split_regions(item: tuple) -> "Optional[frozenset[str]]":
    """Where a located split's images lie, resolved: a manifest's listed images (relative to data.path, links
    followed; the lists are read, no image); an image folder's split folder, and the target of every link under it
    (a class folder or an image linked from elsewhere: the links are followed, each target scanned once). None when
    the split cannot be read (its reader names why)."""
    from harness.data.folders import resolver

    source, where = item[0], item[2][1]
    try:
        if source == "manifest":
            from harness.data.manifest import manifest_rows

            resolve = resolver(item[2][2])
            return frozenset(resolve(p) for _, p, _ in manifest_rows(Path(item[2][2]), item[2][3]))
        found, todo = {where}, [where]
        while todo:
            with os.scandir(todo.pop()) as entries:
                for e in entries:
                    if e.is_symlink():
                        real = os.path.realpath(e.path)
                        if real not in found and os.path.isdir(real):
                            todo.append(real)
                        found.add(real)
                    elif e.is_dir():
                        todo.append(e.path)
        return frozenset(found)
    except (OSError, ValueError):
        return None


def read_as(source: Optional[str], path: Optional[str], split: Optional[str]) -> Optional[str]:
    """What a message says ``split`` reads where its name does not say it: ``"a pack of digits' test split"`` (as the
    pack's index.json records), ``"/abs/imf/train"`` (the folder or file read), or None (a split read by name)."""
    if source == "shards" and (got := pack_record(path, split)):
        return f"a pack of the {got[1]} split of {got[0].get('source')}, as its index.json records"
    return split_location(source, path, split)


def unpacked(data: dict) -> dict:
    """A run's data section (a dict, :class:`harness.data.config.DataConfig`'s keys) over a pack (``source:
    shards``) as the data the pack holds, for a model's record of its training data (``trained_on``): ``source``,
    ``name`` and ``label_set`` of the pack's recorded source config and each split the source split it was packed from
    (:func:`pack_record`; a split packed from other data, or with no record, None), without ``path`` (cards never
    publish paths), so :func:`harness.model_identity.check_not_trained_on` compares a moved model.pt or an export with
    the source split it was trained on (audit22 A22-08); ``data`` itself for any other source, or a pack whose
    training split records no source."""
    if data.get("source") != "shards" or not (got := pack_record(data.get("path"), data.get("train_split"))):
        return data
    config, packed = got
    if config.get("source") in (None, "shards"):
        return data
    held = {"source": config.get("source"), "name": config.get("name")}
    out = {k: v for k, v in data.items() if k != "path"}
    out.update(held, train_split=packed, label_set=config.get("label_set", data.get("label_set")))
    for key in ("eval_split", "heldout_split"):
        rec = pack_record(data.get("path"), data.get(key)) if data.get(key) else None
        same = rec is not None and {"source": rec[0].get("source"), "name": rec[0].get("name")} == held
        out[key] = rec[1] if same else None
    return out
