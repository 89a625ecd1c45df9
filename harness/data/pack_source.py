"""What ``harness data pack`` packs: the data config of its SOURCE (a source name, a run config's data section, or a
data section alone) with its overrides (:func:`source_config`), every key it does not read refused before any image is
read, and the keys it records in ``index.json`` (:data:`PACK_KEYS`). The packing itself is :mod:`harness.data.pack`.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Optional, Sequence

from harness.data.config import (
    ARRAY_SOURCES,
    SOURCE_KEYS,
    SOURCES,
    STREAM_SOURCES,
    WHICH_DATA_KEYS,
    DataConfig,
    check_noise_models,
)
from harness.data.noise import check_noise_spec

#: the data keys ``harness data pack`` reads: which source and where (:func:`harness.data.sources.build_split`), which
#: split's examples and how many (``train_split`` is the default ``--split``; ``limit_train`` / ``limit_eval``), and
#: the labels (``label_noise``, drawn as a run draws it on ``train_split`` / ``heldout_split``, :func:`noisy_split`;
#: ``cache_dir`` for its input-dependent kind). A pack stores each image as the source holds it, so every other data
#: key (``image_size``, ``eval_resize``, ``crop_*``, ``hflip``, ``loader``, batch sizes, ``num_workers``,
#: ``shuffle_buffer``; ``eval_split``, which ``--split`` replaces) given as an override is refused
#: (:func:`source_config`); in a run config given as SOURCE they are the run's settings, left for the run that reads
#: the shards
PACK_KEYS = WHICH_DATA_KEYS + ("train_split", "label_noise", "limit_train", "limit_eval")


def noise_splits(cfg: DataConfig) -> "tuple[str, ...]":
    """The splits a run draws ``label_noise`` on: ``train_split`` (stream 0), ``heldout_split`` if set (stream 1)."""
    return (cfg.train_split,) + ((cfg.heldout_split,) if cfg.heldout_split else ())


def _check_noise_split(cfg: DataConfig, split: str, inherited: bool) -> None:
    """Refuse a ``label_noise`` asked of a ``split`` a run draws none on (:func:`noise_splits`; audit15 A15-04). A
    run config's noise (``inherited``: not in the overrides) on its eval_split packs the clean labels it scores."""
    kind = (cfg.label_noise or {}).get("kind", "none")
    if kind == "none" or split in noise_splits(cfg) or (inherited and split == cfg.eval_split):
        return
    held = f"heldout_split={cfg.heldout_split}" if cfg.heldout_split else "none: heldout_split=null"
    raise ValueError(
        f"label_noise.kind={kind} is drawn only on the training split (train_split={cfg.train_split}) and the held-out "
        f"split ({held}), as a run draws it, and --split {split} is neither: the pack would hold {split}'s clean "
        f"labels while index.json records the noise; give heldout_split={split} to pack {split} with the noise a run "
        "draws on its held-out split, or label_noise=null to pack the clean labels"
    )


def _check_data_section(path: str, settings: dict) -> None:
    """Refuse (ValueError) a YAML file holding neither ``data:`` nor any data setting (only ``model:``), naming it."""
    fields = set(DataConfig.__dataclass_fields__)
    if "data" in settings or not settings or fields & set(settings):
        return
    raise ValueError(
        f"{path} has no data section (it holds {', '.join(map(str, settings))}): give a run config with a data: "
        "section, a data section alone (e.g. source: digits), or a source name such as digits"
    )


def source_config(
    source: str, overrides: Sequence[str] = (), multilabel: bool = False, split: Optional[str] = None
) -> DataConfig:
    """The data config of the source to pack: ``source`` is a YAML file (a run config, whose ``data`` section is
    taken, following ``base:``; or a data section alone) or a source name (``cifar10n``, ``image_folder``...),
    with ``key=value`` overrides of data settings (``path=...``, ``label_set=worse``, ``data.limit_train=200``) among
    :data:`PACK_KEYS`; ``multilabel`` (``--multilabel``) packs label sets, one-label sets for a source of single labels;
    ``split`` (``--split``; None: ``train_split``) the split to pack.

    Raises:
        ValueError: an unknown source name, a stream source, a bad override or setting, a key set twice in
            ``overrides`` (``data.limit_train=50 limit_train=60``), a YAML file with no data section (neither
            ``data:`` nor any data setting); an override ``source=`` naming another source than ``source``; an
            override of a key pack does not read (not in :data:`PACK_KEYS`: ``image_size=64``, ``batch_size=8``...);
            a key of another source than the one packed (:data:`harness.data.config.SOURCE_KEYS`: ``label_set`` on
            digits); in a YAML file holding a data section alone, a key pack does not read (``image_size: 64``);
            label noise over CIFAR-10N's human labels or of a kind, rate or seed a run refuses (its two checks);
            label noise asked of a split a run draws none on (:func:`noise_splits`; a run config's on its eval_split
            packs the clean labels the run scores); a value out of its rule's range (``limit_eval=-5``: audit21
            A21-09). Each message names the key, its value, the rule and the fix.
        FileNotFoundError: a YAML path that does not exist.
    """
    from harness.config import check_distinct_keys, load_config, read_settings
    from harness.data.eval_keys import load_eval_data
    from harness.rules import check_rules, check_unread_keys

    from_file = source.endswith((".yaml", ".yml")) or os.sep in source or Path(source).is_file()
    if from_file:
        settings = read_settings(source)
        _check_data_section(source, settings)
        base = settings.get("data", settings) if isinstance(settings.get("data"), dict) else settings
        run_config = base is not settings
        if base is settings:  # a data section alone is the pack's own input: a key it does not read was meant for it
            _check_file_keys(source, settings)
    elif source in SOURCES:
        base, run_config = {"source": source}, False
    else:
        raise ValueError(f"unknown source {source!r}: give a data config YAML or one of {', '.join(SOURCES)}")
    items = [o[len("data.") :] if o.startswith("data.") else o for o in overrides]
    check_distinct_keys(items, "the data overrides")  # data.limit_train=50 limit_train=60: the last would win
    if from_file:  # a type error in the file's data section names the file, not "the defaults" (audit22 A22-06)
        cfg = load_eval_data(dict(base), items, source)
    else:
        cfg = load_config(DataConfig, None, items, base=dict(base))
    check_rules(cfg)  # the ranges a run holds its data section to (a negative limit_eval packed all but the last N)
    given = {str(o).split("=", 1)[0].strip().split(".")[0] for o in items}
    _check_overrides(source, str(base.get("source", DataConfig.__dataclass_fields__["source"].default)), cfg, given)
    if cfg.source in STREAM_SOURCES:
        raise ValueError(f"data.source={cfg.source!r} is already shards: pack the source they came from")
    check_unread_keys(cfg, "data", "source", SOURCE_KEYS, "source")  # as a run checks them (label_set on digits)
    check_noise_models(cfg)  # the shards would keep two noise models stacked
    check_noise_spec(cfg.label_noise or {}, cfg.source, ARRAY_SOURCES)  # its kind, rate and seed, as a run's (A17-10)
    # a run config's label_noise is the run's (on its evaluation split, the clean labels): not asked of the pack
    _check_noise_split(cfg, split or cfg.train_split, run_config and "label_noise" not in given)
    _check_limit(cfg, split or cfg.train_split, given | (set() if run_config else set(base)))
    return dataclasses.replace(cfg, multilabel=True) if multilabel else cfg


def _check_limit(cfg: DataConfig, split: str, asked: "set[str]") -> None:
    """Refuse a limit asked of the pack (an override, or a data section alone) that the packed ``split`` does not read
    (:func:`harness.data.sources.limit_key`: ``limit_train`` with ``--split test``), which would pack the whole split.

    Raises:
        ValueError: naming the key, its value, the split and the key that limits it.
    """
    from harness.data.sources import limit_key

    read = limit_key(cfg, split)
    for key in sorted({"limit_train", "limit_eval"} & asked - {read}):
        value = getattr(cfg, key)
        if value is None:
            continue
        raise ValueError(
            f"{key}={value} limits {'the training split' if key == 'limit_train' else 'the evaluation split'}, and "
            f"--split {split} is read with {read}, so the whole split would be packed: give {read}={value} instead"
        )


def _check_file_keys(path: str, settings: dict) -> None:
    """Refuse a key pack does not read (not in :data:`PACK_KEYS`) in a YAML file holding a data section alone (no
    ``data:`` mapping, so not a run config whose other keys are the run's settings): it would be recorded in
    index.json as if it had been applied (``image_size: 64`` over 8x8 digits).

    Raises:
        ValueError: naming the file, the key, its value, the rule and the fix.
    """
    for key in sorted(set(settings) - set(PACK_KEYS) - {"base"}):
        raise ValueError(
            f"{key}: {settings[key]} in {path} is not read by harness data pack: a pack stores each image as the source "
            f"holds it (no resize, augmentation or loader), and {key} is a setting of the run that reads the shards "
            f"(data.source=shards data.{key}=...); remove {key} from {path}, or give a run config with a data: section "
            "(its other settings are the run's)"
        )


def read_settings_of(cfg: DataConfig) -> dict:
    """The settings of ``cfg`` that ``harness data pack`` reads (:data:`PACK_KEYS`), for index.json's record of the
    source: the others (``image_size``, batch sizes...) are a run's and were not applied to the packed images; ``path``
    made absolute (:func:`harness.data.splits.absolute_path`), so the split rules compare the folder packed from
    wherever the pack is read (audit22 A22-02)."""
    from harness.config import to_dict
    from harness.data.splits import absolute_path

    settings = {k: v for k, v in to_dict(cfg).items() if k in PACK_KEYS}
    if settings.get("path"):  # the folder packed, from any working folder (audit22 A22-02: 'imf' was the reader's)
        settings["path"] = absolute_path(cfg.source, settings["path"])
    return settings


def _check_overrides(source: str, named: str, cfg: DataConfig, given: "set[str]") -> None:
    """Refuse an override ``source=`` naming another source than SOURCE does (``named``: the source name, or the
    YAML's ``data.source``), and an override of a data key pack does not read (not in :data:`PACK_KEYS`).

    Raises:
        ValueError: naming the key, its value, the rule and the fix.
    """
    if "source" in given and cfg.source != named:
        where = f"SOURCE {source}" if source == named else f"data.source={named} of SOURCE {source}"
        fix = f"give it as SOURCE (harness data pack {cfg.source} OUT ...)"
        if source != named:
            fix = f"set data.source in {source}"
        raise ValueError(
            f"source={cfg.source} in the overrides differs from {where}: one source is packed, and the override "
            f"would win without a word; remove source={cfg.source} to pack {named}, or {fix}"
        )
    for key in sorted(given - set(PACK_KEYS)):
        value = getattr(cfg, key, None)
        shown = str(value).lower() if isinstance(value, bool) else value
        if key == "eval_split":
            raise ValueError(
                f"eval_split={shown} is not read by harness data pack, which packs the split --split names (default "
                f"data.train_split={cfg.train_split}): remove eval_split={shown}, and give --split {shown}"
            )
        raise ValueError(
            f"{key}={shown} is not read by harness data pack: a pack stores each image as the source holds it (no "
            f"resize, augmentation or loader), and {key} is a setting of the run that reads the shards "
            f"(data.source=shards data.{key}={shown}); remove {key}={shown} from the overrides"
        )
