"""The data keys an evaluation of a trained model reads (``harness import``, an OOD set of ``harness shift``), and the
refusal of the others: a training-only key (augmentation, label noise, ``limit_train``, ``batch_size``...) given to a
command that only evaluates would be accepted and ignored, its value recorded beside results it did not change."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from harness.data.config import WHICH_DATA_KEYS, DataConfig

#: the data keys an evaluation reads (one list for every evaluating command): where the data is and which of it
#: (``source``, ``path``, ``name``, ``eval_split``, ``heldout_split``, ``num_classes``, ``image_key``, ``label_key``,
#: ``limit_eval``; ``label_set`` and ``multilabel``: cifar10n's labels on its training splits, of which a held-out
#: split such as ``val5k`` is one, and whether a manifest's lines are label sets), how it is read (``loader``, ``cache_dir``, ``allow_outside_root``,
#: ``eval_batch_size``, ``num_workers``) and how it is shown to the model (``image_size``, ``eval_resize``: the
#: centre crop). Each of the others is in :data:`TRAINING_KEYS`.
EVAL_KEYS = WHICH_DATA_KEYS + (
    "eval_split",
    "image_size",
    "eval_resize",
    "loader",
    "eval_batch_size",
    "num_workers",
    "limit_eval",
)

_VIEW = "an evaluation shows each image's centre crop (image_size, from the short side resized to eval_resize)"
#: the data keys only training reads: what each sets, and the key an evaluation reads instead (or None)
TRAINING_KEYS = {
    "train_split": ("the training split", "eval_split"),
    "label_noise": ("noise added to the training labels; an evaluation scores the data's own labels", None),
    "limit_train": ("the number of training examples", "limit_eval"),
    "batch_size": ("the training batch", "eval_batch_size"),
    "crop_scale": (f"training augmentation (the random resized crop), and {_VIEW}", None),
    "crop_padding": (f"training augmentation (the random translation), and {_VIEW}", None),
    "hflip": (f"training augmentation (the random flip), and {_VIEW}", None),
    "shuffle_buffer": ("the shuffling of training shards", None),
}


def override_items(overrides: Sequence[str]) -> "list[tuple[str, str, str]]":
    """``key=value`` data overrides (with or without the ``data.`` prefix) as ``(key, value, top-level key)``:
    ``label_noise.rate=0.5`` -> ``("label_noise.rate", "0.5", "label_noise")``."""
    out = []
    for o in overrides:
        key, _, value = str(o).partition("=")
        key = key.strip()
        key = key[len("data.") :] if key.startswith("data.") else key
        out.append((key, value.strip(), key.split(".")[0]))
    return out


def check_eval_keys(
    overrides: Sequence[str],
    cfg: Any,
    reader: str,
    splits: Sequence[Optional[str]],
    read: Sequence[str] = EVAL_KEYS,
    unread: Optional[Mapping[str, str]] = None,
) -> None:
    """The data keys a user gave a command that only evaluates (``overrides``: ``key=value``, an OOD spec's pairs)
    are keys it reads (``read``: :data:`EVAL_KEYS`, or a subset); the data ``cfg`` they made
    (:class:`harness.data.config.DataConfig`) sets no key its source does not read
    (:data:`harness.data.config.SOURCE_KEYS`, as a run checks it); a ``label_set`` given for cifar10n is read by one
    of ``splits`` (the splits evaluated), a training split. ``reader`` names the command in the messages
    (``harness import``); ``unread`` maps other keys ``read`` leaves out to why.

    Raises:
        ValueError: naming the key, its value, the rule and the fix.
    """
    from dataclasses import fields

    from harness.data.config import SOURCE_KEYS
    from harness.rules import check_unread_keys

    known = {f.name for f in fields(cfg)}
    for key, value, top in override_items(overrides):
        if top in read or top not in known:  # an unknown key is named by the config's own check
            continue
        why, instead = TRAINING_KEYS.get(top, (None, None))
        if top in (unread or {}):
            why, instead = unread[top], None
        fix = f" (give {instead}={value} for the evaluated split)" if instead in read else ""
        raise ValueError(
            f"{key}={value} is not read by {reader}, which only evaluates: {top} sets {why}; remove {key}={value}{fix}"
        )
    check_unread_keys(cfg, "data", "source", SOURCE_KEYS, "source")
    given = {top for _, _, top in override_items(overrides)}
    if "label_set" in given and cfg.source == "cifar10n":
        from harness.data.sources import CIFAR10N_TRAIN_SPLITS

        if not any(s in CIFAR10N_TRAIN_SPLITS for s in splits):
            raise ValueError(
                f"label_set={cfg.label_set} is read only on cifar10n's training splits "
                f"({', '.join(CIFAR10N_TRAIN_SPLITS)}), and {reader} evaluates {', '.join(s for s in splits if s)} "
                f"(clean CIFAR-10 labels): remove label_set={cfg.label_set}, or evaluate a training split "
                "(e.g. heldout_split=val5k)"
            )


def load_eval_data(section: dict, overrides: Sequence[str], where: str) -> Any:
    """A file's ``data`` section with ``key=value`` overrides as a :class:`harness.data.config.DataConfig`
    (:func:`harness.config.load_config`); ``where`` names the file (``--data FILE``) in a type error, which
    load_config, given the section as a base layer, would blame on "the defaults" (audit20 A20-07).

    Raises:
        ValueError: load_config's, naming ``where`` as the value's origin.
    """
    from harness.config import load_config
    from harness.data.config import DataConfig

    try:
        return load_config(DataConfig, None, list(overrides), base=section)
    except ValueError as e:
        raise ValueError(str(e).replace("(the defaults)", f"(the data section of {where})")) from None


def evaluation_only(cfg: Any, where: str) -> Any:
    """``cfg`` (a :class:`harness.data.config.DataConfig` read from a file an evaluation was given: ``harness import
    --data``, ``harness ensemble --eval-data``) with its :data:`TRAINING_KEYS` at their defaults, in place (the marks
    of the keys a user named kept): an upstream config or a run's ``config.yaml`` holds the training's settings, which
    an evaluation accepts and does not read, so what it records (an import's ``config.yaml``) is the data it evaluated,
    never a label noise it did not draw (audit20 A20-07: it scores the data's own labels, the held-out split's too). A
    ``label_noise`` set away from none is named in a :class:`UserWarning` (``where``: the flag and file), the one such
    key a user may expect to apply to the held-out split (as a run draws it there)."""
    import warnings
    from dataclasses import MISSING, fields

    noise = cfg.label_noise if (cfg.label_noise or {}).get("kind", "none") != "none" else None
    for f in fields(cfg):
        if f.name in TRAINING_KEYS:
            setattr(cfg, f.name, f.default_factory() if f.default is MISSING else f.default)
    if noise:
        warnings.warn(
            f"{where}: data.label_noise={dict(noise)} is not applied: an evaluation scores the data's own labels (the "
            "held-out split's too), and records no noise; to score noisy held-out labels, pack that split with the "
            "noise drawn (harness data pack SOURCE OUT --split SPLIT label_noise.kind=...) and evaluate the pack",
            UserWarning,
            stacklevel=3,
        )
    return cfg


def data_from_file(path: "str | Path", overrides: "tuple[str, ...]" = (), flag: str = "--data") -> DataConfig:
    """The ``data`` section of a config file (an upstream config, with its ``base:`` chain) as a
    :class:`DataConfig` for an evaluation (``harness import``, ``harness ensemble --eval-data``), with ``key=value``
    overrides (data keys, with or without the ``data.`` prefix), checked by the rules declared on its fields, with no
    key its source does not read (:data:`harness.data.config.SOURCE_KEYS`); the overrides only keys an evaluation
    reads (:func:`harness.data.eval_keys.check_eval_keys`); the file's training-only keys (a run's) at their defaults
    (:func:`harness.data.eval_keys.evaluation_only`, audit20 A20-07). ``flag``: the option that named the file.

    Raises:
        FileNotFoundError: no such file. ValueError: bad YAML; no ``data`` section (a file that is no config of data,
            which would otherwise evaluate the default data: the message never quotes the file's content); bad data
            settings (a wrong type named as the file's); a key set twice in ``overrides``; an override of a training-
            only key (``limit_train``, ``hflip``, ``label_noise``...); a key of another source (``label_set`` on
            digits), or ``label_set`` for cifar10n splits that do not read it; a held-out split that is the evaluation
            split (:func:`harness.data.config.check_splits`).
    """
    from harness.config import check_distinct_keys, read_settings
    from harness.data.config import check_splits
    from harness.rules import check_rules

    section = read_settings(path).get("data")
    if not isinstance(section, dict) or not section:
        raise ValueError(
            f"{flag} {path}: the file holds no data section (a 'data:' mapping naming the evaluation data, e.g. "
            f"data: {{source: digits}}), so it says nothing about what to evaluate on; give a config with one, e.g. "
            f"{flag} upstream/configs/digits_base.yaml"
        )
    overrides = tuple(o[len("data.") :] if o.startswith("data.") else o for o in overrides)
    check_distinct_keys(overrides, "the data overrides")  # data.limit_eval=50 limit_eval=60: the last would win
    cfg = load_eval_data(section, overrides, f"{flag} {path}")  # a wrong type named as the file's
    check_rules(cfg)
    check_splits(cfg, training=False)  # the held-out split not the evaluation split
    check_eval_keys(overrides, cfg, "harness import", (cfg.eval_split, cfg.heldout_split))  # and the source's keys
    return evaluation_only(cfg, f"{flag} {path}")
