"""Is this the right model? Two checks every path that scores a model reads: :func:`check_distinct_predictions` (the
same model counted twice, by ``harness report`` and ``harness ensemble``; :func:`check_distinct_weights`, the same
weights by ``harness ensemble``) and :func:`check_classes_match` (a model
scored on data of other classes, by ``harness import`` and ``harness ensemble --from-checkpoints --eval-data``).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional, Sequence

import numpy as np

from harness.io import read_json_object
from harness.uncertainty.predictions import Predictions

if TYPE_CHECKING:
    import torch

    from harness.data.config import DataConfig

#: two predictions are "the same model twice" when, on the same examples (index) with the same targets and link,
#: every predicted log-probability differs by at most this (nats); float32 re-saves and logits shifted by a constant
#: stay far below it, two independently trained models (other seeds, other settings) are far above it
SAME_MODEL_TOL = 1e-5


def _log_probs(p: Predictions) -> np.ndarray:
    """``p``'s log-probabilities ``[N, K]`` in the order of its example index."""
    return p.log_probs()[np.argsort(p.index, kind="stable")]


def _largest_difference(p: Predictions, lp: np.ndarray, q: Predictions, lq: np.ndarray) -> Optional[float]:
    """max |Δ log p| over every row and class, or None when the two are not of the same examples, targets and link."""
    if p.link != q.link or lp.shape != lq.shape:
        return None
    if not np.array_equal(np.sort(p.index), np.sort(q.index)):
        return None
    tp, tq = (np.asarray(x.targets)[np.argsort(x.index, kind="stable")] for x in (p, q))
    if tp.shape != tq.shape or not np.array_equal(tp, tq):
        return None
    with np.errstate(invalid="ignore"):
        diff = np.where(lp == lq, 0.0, np.abs(lp - lq))  # equal -inf entries are no difference
    return float(diff.max()) if diff.size else 0.0


def check_distinct_predictions(preds: "Iterable[Predictions]", what: str, why: str) -> None:
    """No two of ``preds`` are the same model: on the same examples (index), targets and link, every predicted
    log-probability (log-softmax, or log-sigmoid) within :data:`SAME_MODEL_TOL` = 1e-5 nats of the other's (a copied
    folder, re-saved in another dtype, or with every logit shifted by a constant). The one check of
    ``harness report`` and ``harness ensemble`` that a model is not counted twice. Each is named by its ``source``;
    ``what`` names an item (``member``), ``why`` says why each counts once (``an ensemble counts each model once``).
    ``preds`` may be a generator; each one's log-probabilities ``[N, K]`` are kept and compared pairwise (a handful of
    folders).

    Raises:
        ValueError: two predictions of the same model, naming both sources, the tolerance and the fix.
    """
    seen: "list[tuple[Predictions, np.ndarray]]" = []
    for p in preds:
        lp = _log_probs(p)
        for q, lq in seen:
            diff = _largest_difference(p, lp, q, lq)
            if diff is not None and diff <= SAME_MODEL_TOL:
                raise ValueError(
                    f"{what}s {q.source!r} and {p.source!r} have identical predictions: the same model twice (a "
                    f"copied folder, or two methods or seeds with the same settings); {why}: keep one of them "
                    f"(identical: on the same examples and targets every predicted log-probability differs by at "
                    f"most {SAME_MODEL_TOL:g}, here by {diff:.3g}; two independently trained models never agree "
                    "this closely)"
                )
        seen.append((p, lp))


def weights_digest(path: "str | Path") -> Optional[str]:
    """SHA-256 of a harness ``model.pt``'s weights (its ``state_dict``: every tensor's name, dtype, shape and bytes,
    in name order), leaving out what the file records beside them (an import's record, the config): two files of the
    same weights have the same digest. Read memory-mapped, one tensor at a time, once per file per process while the
    file is unchanged (the same resolved path, inode, size and modification time: the checks of one command that
    each compare it read it once). None for a file that is not a harness checkpoint
    (:func:`harness.models.save_model`) or cannot be read (its readers name that)."""
    try:
        real = Path(path).expanduser().resolve()
        st = real.stat()
    except OSError:
        return None
    return _file_digest(str(real), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, dev: int, inode: int, size: int, mtime_ns: int) -> Optional[str]:
    """:func:`weights_digest` of the file as it is (the key: its identity now)."""
    import hashlib

    import torch

    try:
        payload = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # unreadable, or not a zip checkpoint: the member's reader says so
        return None
    state = payload.get("state_dict") if isinstance(payload, dict) else None
    if not isinstance(state, dict):
        return None
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name]
        if not isinstance(t, torch.Tensor):
            continue
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.detach().reshape(-1).contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_distinct_weights(folders: "Sequence[str | Path]", what: str, why: str) -> None:
    """No two of ``folders`` (run folders) hold a ``model.pt`` of the same weights (:func:`weights_digest`): a run and
    an import of its own model.pt, or a copied model, scored at two views of the data have predictions that differ,
    yet are one model (audit19 A19-11: "an ensemble of 2" that was one model at two input resizes). Folders without
    a readable model.pt are not compared. ``what`` names an item (``member``), ``why`` says why each counts once.

    Raises:
        ValueError: naming both folders, the rule and the fix.
    """
    seen: "dict[str, str]" = {}
    for folder in folders:
        file = Path(folder) / "model.pt"
        digest = weights_digest(file) if file.is_file() else None
        if digest is None:
            continue
        if digest in seen:
            raise ValueError(
                f"{what}s {seen[digest]!r} and {str(folder)!r} hold the same weights (their model.pt files' "
                f"state dicts are equal: a run and an import of its model.pt, or a copied model; scored at other "
                f"views or data their predictions differ, yet they are one model); {why}: keep one of them"
            )
        seen[digest] = str(folder)


def model_class_names(source: str, model: "torch.nn.Module") -> "Optional[list[str]]":
    """The class names a model (a :class:`harness.models.Classifier`) was trained on, where recorded: an export's ``label_names`` (``model.card_info``), or
    the ``class_names`` of the ``run.json`` beside a run's ``model.pt`` (``source`` the file or the run folder);
    None when neither records them (a timm / torchvision model)."""
    names = (getattr(model, "card_info", None) or {}).get("label_names")
    if not names:
        path = Path(str(source)).expanduser()
        folder = Path(os.path.realpath(path)).parent if path.suffix == ".pt" else path  # links followed (A23-10)
        names = (read_json_object(folder / "run.json") or {}).get("class_names") if folder.is_dir() else None
    return [str(n) for n in names] if names else None


def _abbreviated(names: Sequence[str], most: int = 6) -> str:
    shown = ", ".join(str(n) for n in names[:most])
    return f"[{shown}{', ...' if len(names) > most else ''}] ({len(names)})"


def check_classes_match(
    source: str, num_classes: int, names: "Optional[Sequence[str]]", data_names: Sequence[str], data: str
) -> None:
    """Before predicting: a model of ``num_classes`` classes (named ``names`` where recorded,
    :func:`model_class_names`) is scored on data whose classes are ``data_names`` (described by ``data``) only if
    the counts agree and, when both sides name their classes, the names agree in order. The one check of
    ``harness import`` and ``harness ensemble --from-checkpoints --eval-data``.

    Raises:
        ValueError: another class count or other class names, naming the model, both class lists (abbreviated) and
            the fix.
    """
    fix = "give the data the model was trained on (or a model trained on this data's classes)"
    if num_classes != len(data_names):
        raise ValueError(
            f"{source} has {num_classes} classes but the data ({data}) has {len(data_names)}: the model is not one of "
            f"this data's (its classes: {_abbreviated(names) if names else 'not recorded'}; the data's: "
            f"{_abbreviated(list(data_names))}); {fix}"
        )
    if names and [str(n) for n in names] != [str(n) for n in data_names]:
        raise ValueError(
            f"{source} was trained on the classes {_abbreviated(list(names))} but the data ({data}) has the classes "
            f"{_abbreviated(list(data_names))}: its predictions would be scored against other classes; {fix}"
        )


def check_not_trained_on(trained: Optional[dict], data: "DataConfig", who: str, whence: str = "as it records") -> None:
    """``data``'s evaluation and held-out splits are not the split the model was trained on, as ``trained`` records it
    (a model.pt's or an export's ``trained_on``, a run's data section: :func:`harness.importing.trained_data`), and the held-out split
    is not the evaluation split: upstream's own rule (:func:`harness.data.config.check_splits`, audit18 A18-12) for
    ``harness import`` and ``harness ensemble --from-checkpoints --eval-data``. Compared as the images each split reads
    (:func:`harness.data.splits.images_of`): the same ``source`` (and TFDS ``name``); a folder, manifest or pack (data
    that is its ``path``) by the folder or file read, ``(path / split).resolve()`` on either side (audit21 A21-05: the
    model's ``imf`` + ``train`` is the data's ``.`` + ``imf/train``; a record without a path, as a model.pt's, is
    not known to be that data); a pack (``data.source=shards``, on either side) as the source and split its
    index.json records it was packed from (audit20 A20-02; audit21 A21-07); a model without a record (a timm or
    torchvision one) passes. ``who`` names the model (its file or run folder), ``whence`` where ``trained`` is
    recorded.

    Raises:
        ValueError: ``who`` and its recorded training split (and the pack or folder read), then upstream's message
            (the key, the split, the fix: :func:`harness.data.config.split_refusal`).
    """
    from harness.data.config import check_splits, split_refusal
    from harness.data.splits import images_of, images_relation, pack_record, split_location

    check_splits(data, training=False)
    split = (trained or {}).get("train_split")
    if not split or not trained.get("source"):
        return
    source, path = trained["source"], trained.get("path")
    mine = images_of(source, trained.get("name"), path, split)
    shown, of = split, source
    if source == "shards" and (got := pack_record(path, split)):
        shown, of = got[1], got[0].get("source")
    at = split_location(source, path, split) if source != "shards" else None
    for key in ("eval_split", "heldout_split"):
        value = getattr(data, key)
        how = images_relation(images_of(data.source, data.name, data.path, value), mine)
        if how is None:
            continue
        unpacked = pack_record(data.path, value) if data.source == "shards" else None
        packed = (
            f" (data.path={data.path} is a pack of {unpacked[0].get('source')}, as its index.json records)"
            if unpacked and unpacked[0].get("source") != "shards"
            else ""
        )
        named = os.path.normpath(str(value)) != os.path.normpath(str(shown))  # names that do not tell it
        reads = split_location(data.source, data.path, value) if named else None
        note = f"data.{key} reads {reads}" + (", the folder the model was trained on" if reads == at else "")
        note = note if reads else ""
        raise ValueError(
            f"{who} was trained on the {shown} split of {of}{f' at {at}' if at else ''} ({whence}){packed}: "
            f"{split_refusal(key, value, 'train_split', shown, how, note)}"
        ) from None


#: settings that say where a run's files and curves go, not what it trains: left out when two run configs are compared
#: (a run resumes, or counts as done, whichever trackers log it and however its folder is spelled: audit13 A13-21;
#: :func:`harness.upstream.train.same_config`), as ``seed`` and ``name`` are between replicates (:func:`check_replicates`)
NOT_IDENTITY = ("output_dir", "train.log_with", "train.log_model")
#: settings of how often a run is evaluated, logged, checkpointed or probed (``train.*``), not of what it trains
MONITORING = (
    "eval_every",
    "eval_every_steps",
    "log_every",
    "checkpoint_every",
    "fewshot_every",
    "fewshot_every_steps",
    "fewshot_tasks",
    "fewshot_shots",
)
#: settings of how a run's data is read (``data.*``), not of which data or view: batch of the evaluation, worker
#: processes, cache, the outside-path switch
READING = ("eval_batch_size", "num_workers", "cache_dir", "allow_outside_root")


def flat_settings(config: dict, prefix: str = "") -> dict:
    """``{"train": {"epochs": 2}}`` as ``{"train.epochs": 2}``."""
    out: dict = {}
    for k, v in config.items():
        if isinstance(v, dict) and v:
            out.update(flat_settings(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_replicates(runs: "Sequence[tuple[str, dict]]", method: str) -> None:
    """The runs ``(folder, its config.yaml as a dict)`` averaged as seeds of ``method`` are replicates: their settings
    differ at most in ``seed``, ``name``, :data:`NOT_IDENTITY`, :data:`MONITORING` and :data:`READING` (settings that
    change no training: audit18 A18-01) (a setting one config lacks, written before it existed, is not compared). Seeds' spread is read as training randomness (audit17 A17-02: runs of 1 and 2 epochs,
    100 and 200 examples, two learning rates were averaged as one method's seeds).

    Raises:
        ValueError: naming both folders, the first setting that differs with both values, and the fix.
    """
    skip = {"seed", "name", *NOT_IDENTITY, *(f"train.{k}" for k in MONITORING), *(f"data.{k}" for k in READING)}
    (first, a), *others = [(folder, flat_settings(cfg)) for folder, cfg in runs] or [("", {})]
    for folder, b in others:
        key = next((k for k in a if k in b and k not in skip and a[k] != b[k]), None)
        if key is not None:
            raise ValueError(
                f"{first} and {folder} are both {method!r} runs, which the report averages as the method's seeds, but "
                f"they train differently: {key}={a[key]!r} in {first}, {b[key]!r} in {folder} (replicates differ only "
                f"in seed); report them apart (harness report {folder} --name <another name>), or give runs of one "
                "setting"
            )
