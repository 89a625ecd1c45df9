"""The index of a pack of WebDataset shards (``index.json``, written by :mod:`harness.data.pack`) and the shards it
lists: reading and checking it, confining its shard names to the pack folder, opening shard locations without a
shell, and the per-shard label digest the reader compares with what it reads (:mod:`harness.data.shards`).

Locations (``data.path``, a shard pattern, an index) are local paths or ``file:``/``http(s):`` URLs, opened by
:func:`open_location` with Python's own file and ``urllib`` readers; every other URL scheme (webdataset's ``pipe:``,
which runs a shell command, ``gs:``, ``s3:``...) is refused by name before anything is opened
(:func:`harness.io.check_location`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import IO, Any, Optional, Sequence
from urllib.parse import urlparse
from urllib.request import url2pathname

import numpy as np

from harness.folder_paths import PACK_INDEX
from harness.io import check_location, check_name, quote

#: the index file beside the shards, and what it says it describes (a reader refuses other files); the marks of a
#: pack's split folder among the harness's output folders (:data:`harness.folder_paths.PACK_INDEX`)
INDEX_NAME, INDEX_FORMAT = PACK_INDEX


def shard_name(prefix: str, number: int) -> str:
    """``{prefix}-{number:06d}.tar``, the name of shard ``number``."""
    return f"{prefix}-{number:06d}.tar"


def labels_digest(label_sets: "Sequence[Sequence[int]]") -> str:
    """SHA-256 of a shard's labels in the shard's order: the int64 bytes of every example's label count, then of
    all the label ids (a single-label example is a set of one). :mod:`harness.data.pack` records it per shard as
    ``labels_sha256``; the reader recomputes it from the labels it reads."""
    sizes = np.asarray([len(s) for s in label_sets], dtype=np.int64)
    ids = np.asarray([int(c) for s in label_sets for c in s], dtype=np.int64)
    h = hashlib.sha256()
    h.update(sizes.tobytes())
    h.update(ids.tobytes())
    return h.hexdigest()


def _is_url(location: str) -> bool:
    return urlparse(location).scheme in ("file", "http", "https")


def open_location(location: str, what: str = "shard") -> IO[bytes]:
    """A binary stream of a local path or a ``file:``/``http(s):`` URL, opened by Python itself (no shell, no
    command-line tool).

    Raises:
        ValueError: another URL scheme (:func:`harness.io.check_location`).
        OSError: the file or URL cannot be opened.
    """
    check_location(location, what)
    parsed = urlparse(location)
    if parsed.scheme in ("http", "https"):
        from urllib.request import urlopen

        return urlopen(location, timeout=60)  # noqa: S310 (the scheme is checked just above)
    return open(url2pathname(parsed.path) if parsed.scheme == "file" else location, "rb")


def read_index(location: "str | Path") -> dict:
    """The shard index at ``location`` (a path or a ``file:``/``http(s):`` URL), checked to be one this harness
    wrote.

    Raises:
        ValueError: another URL scheme; not JSON, or not a shard index of this harness (its ``format`` is not
            :data:`INDEX_FORMAT`).
        OSError: it cannot be read.
    """
    with open_location(str(location), "shard index") as f:
        text = f.read().decode("utf-8", errors="replace")
    try:
        index = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{location} is not valid JSON ({e}); pack the data again with harness data pack") from e
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise ValueError(
            f"{location} is not a shard index of this harness (format {INDEX_FORMAT!r}); pack the data "
            "with harness data pack"
        )
    return index


def _is_pattern(path: str) -> bool:
    return any(s in path for s in ("{", "::")) or _is_url(path) or path.endswith(".tar")


def _check_names(index: dict, location: Any, folder: Optional[Path] = None) -> None:
    """Every shard the index lists is a plain ``.tar`` file name; in a local pack folder, the file it names (links
    resolved) lies inside that folder."""
    for s in index["shards"]:
        name = s.get("name") if isinstance(s, dict) else None
        try:
            check_name(name, "shard name")
            if not name.endswith(".tar"):
                raise ValueError("not a .tar file")
            if folder is not None and not (folder / name).resolve().is_relative_to(folder.resolve()):
                raise ValueError("a link that leads out of the pack folder")
        except ValueError:
            raise ValueError(
                f"{location} lists a shard named {quote(str(name), 80)!r}: a pack lists only plain .tar "
                f"file names inside its own folder ({folder or 'beside the index'}); pack the data again "
                "with harness data pack"
            ) from None


def _check_index(index: dict, location: Any, folder: Optional[Path] = None) -> dict:
    """A complete index whose counts agree with each other and whose shard names stay in the pack folder."""
    if not index.get("complete"):
        raise ValueError(
            f"packing into {location} was interrupted: run the same harness data pack command again "
            "(it writes only the missing shards)"
        )
    for key in ("shards", "class_names", "multilabel", "num_examples"):
        if key not in index:
            raise ValueError(f"{location} lacks {key!r}; pack the data again with harness data pack")
    try:
        counts = [int(s["examples"]) for s in index["shards"]]
        k, n = len(index["class_names"]), int(index["num_examples"])
        problems = [
            what
            for what, bad in (
                (f"num_examples {n} is not the sum of the shards' {sum(counts)}", n != sum(counts)),
                (f"num_classes {index.get('num_classes')} but {k} class names", index.get("num_classes", k) != k),
                (
                    f"{len(index.get('label_counts') or [])} label counts for {k} classes",
                    "label_counts" in index and len(index["label_counts"]) != k,
                ),
                ("a shard with a negative count", any(c < 0 for c in counts)),
                ("no shards", not counts),
            )
            if bad
        ]
    except (TypeError, ValueError, KeyError):
        problems = ["its shard list or counts are malformed"]
    if problems:
        raise ValueError(
            f"{location} is inconsistent ({'; '.join(problems)}): it was changed after packing; pack the "
            "data again with harness data pack"
        )
    _check_names(index, location, folder)
    return index


def shard_files(path: str, split: Optional[str] = None) -> "tuple[list[str], list[int], dict]":
    """The shards of a split, their example counts and the index.

    Args:
        path: a folder holding ``<split>/index.json`` or ``index.json`` (as :func:`harness.data.pack.pack` and
            ``harness data pack`` write them); or a shard pattern, a local path or ``file:``/``http(s):`` URL with
            webdataset's brace expansion (``/data/in21k/{split}-{000000..000999}.tar``, ``{split}`` replaced by
            ``split``; several patterns joined by ``::``), whose ``index.json`` lies beside the first shard.
        split: the split's name (the folder under ``path``, or ``{split}`` in a pattern).

    Returns:
        ``(urls, counts, index)``: shard paths or URLs in the index's order, examples per shard, the index.

    Raises:
        FileNotFoundError: no such folder, no index, a shard the index lists is missing.
        ValueError: a URL scheme other than file/http(s); an interrupted pack; a pattern naming a shard the index
            does not list; an index that is malformed, inconsistent, or names a shard outside its folder.
    """
    from harness.extras import require

    wds = require("webdataset", "reading WebDataset shards (data.source=shards)")
    check_location(str(path), "data.path")
    if _is_pattern(str(path)):
        urls = wds.shardlists.expand_urls(str(path).replace("{split}", split or ""))
        for u in urls:
            check_location(u, "shard")
        first = urls[0]
        where = first.rsplit("/", 1)[0] if "/" in first else "."
        location = f"{where}/{INDEX_NAME}"
        if not _is_url(location) and not Path(location).is_file():
            raise FileNotFoundError(
                f"no {INDEX_NAME} beside the shards of {path!r} (looked for {location}): pack them "
                "with harness data pack, which writes it"
            )
        index = _check_index(read_index(location), location)
        counts_by_name = {s["name"]: int(s["examples"]) for s in index["shards"]}
        unknown = [u for u in urls if u.rsplit("/", 1)[-1] not in counts_by_name]
        if unknown:
            raise ValueError(
                f"shard {unknown[0]} is not listed in {location}; the pattern must name shards of that pack"
            )
        return urls, [counts_by_name[u.rsplit("/", 1)[-1]] for u in urls], index
    root = Path(path).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(
            f"shard folder {str(root)!r} does not exist; set data.path to the folder that harness data pack wrote"
        )
    folder = root / split if split and (root / split / INDEX_NAME).is_file() else root
    if not (folder / INDEX_NAME).is_file():
        where = f"{root / split} or {root}" if split else str(root)
        raise FileNotFoundError(
            f"no {INDEX_NAME} in {where}: pack the data there first (harness data pack SOURCE "
            f"{root}{' --split ' + split if split else ''})"
        )
    index = _check_index(read_index(folder / INDEX_NAME), folder / INDEX_NAME, folder)
    urls = [str(folder / s["name"]) for s in index["shards"]]
    for u, s in zip(urls, index["shards"]):
        if not Path(u).is_file():
            raise FileNotFoundError(
                f"shard {u} listed in {folder / INDEX_NAME} is missing; run the same harness data "
                "pack command again to write it"
            )
        size = s.get("bytes")
        if isinstance(size, int) and Path(u).stat().st_size != size:
            raise ValueError(
                f"shard {u} is {Path(u).stat().st_size} bytes, and {folder / INDEX_NAME} records {size}: it is damaged "
                "(cut short, or replaced); run the same harness data pack command again, which writes it anew"
            )
    return urls, [int(s["examples"]) for s in index["shards"]], index


def _label_set(sample: dict) -> Optional["list[int]"]:
    """The label ids of an undecoded example (its ``.cls`` or ``.json`` member), or None if it has none readable."""
    try:
        if "cls" in sample:
            return [int(bytes(sample["cls"]).decode("ascii").strip())]
        if "json" in sample:
            label = json.loads(sample["json"])
            return [int(c) for c in (label["labels"] if "labels" in label else [label["label"]])]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
    return None


class _Hashing:
    """A binary stream read through, its bytes hashed (SHA-256) as they are read: a shard's content digest without a
    second read of it."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream, self.hash = stream, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        block = self.stream.read(size)
        self.hash.update(block)
        return block

    def digest(self) -> str:
        """The SHA-256 of the whole stream: what is left of it read (tar's end blocks, its padding) first."""
        while self.read(1 << 20):
            pass
        return self.hash.hexdigest()


def read_shards(src: Any, expected: "dict[str, tuple[Optional[int], ...]]") -> Any:
    """A webdataset stage: for every ``{"url": ...}`` of ``src``, the shard's examples (its tar members grouped by
    key with webdataset's ``tar_file_expander`` and ``group_by_keys``, undecoded), the shard opened by
    :func:`open_location`. A shard read to its end is compared with its index entry ``expected[url]`` =
    ``(examples, labels_sha256[, sha256])`` (any may be None: not checked; the digests are recorded by packs written
    since each was added; ``sha256``, of the shard's bytes, since audit26 A26-03: a shard replaced by another split's
    of the same size and labels was read as this one).

    Raises:
        ValueError: a member name with ``/`` or ``..``; a shard that cannot be read as a tar file; a shard read to
            its end holding another number of examples, other labels or other bytes than its index entry says (each
            names the shard).
    """
    import tarfile
    import zlib

    from harness.extras import require

    tariterators = require("webdataset.tariterators", "reading WebDataset shards (data.source=shards)")
    group_by_keys, tar_file_expander = tariterators.group_by_keys, tariterators.tar_file_expander

    for item in src:
        url = item["url"]
        n, labels, content = 0, [], None
        count, digest, *more = expected.get(url, (None, None))
        try:
            with open_location(url) as opened:
                stream = _Hashing(opened) if more and more[0] else opened
                for sample in group_by_keys(tar_file_expander([{"url": url, "stream": stream}])):
                    key = str(sample.get("__key__", ""))
                    if "/" in key or ".." in key:
                        raise ValueError(
                            f"shard {url} has a member named {quote(key, 80)!r}.*: member names with '/' "
                            "or '..' are refused (a shard's members are KEY.EXT, e.g. 000123.png); pack "
                            "the data again with harness data pack"
                        )
                    n += 1
                    labels.append(_label_set(sample))
                    yield sample
                content = stream.digest() if isinstance(stream, _Hashing) else None
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise ValueError(
                f"shard {url} cannot be read as a tar file ({type(e).__name__}): it is damaged or is "
                "not a shard; pack the data again with harness data pack"
            ) from None
        if count is not None and n != count:
            raise ValueError(
                f"shard {url} holds {n} examples where its index says {count}: the shard or its index "
                "was changed after packing; pack the data again with harness data pack"
            )
        if digest is not None and None not in labels and labels_digest(labels) != digest:
            raise ValueError(
                f"the labels of shard {url} do not match the labels_sha256 its index records: the shard "
                "or its index was changed after packing; pack the data again with harness data pack"
            )
        if content is not None and content != more[0]:
            raise ValueError(
                f"shard {url} is not the shard its index packed (the SHA-256 of its bytes is {content[:12]}..., the "
                f"sha256 its index records {str(more[0])[:12]}...): it was replaced since packing (by another shard of "
                "the same size and labels, e.g. another split's; audit26 A26-03); run the same harness data pack "
                "command again, which writes it anew"
            )
