"""The rules of an export's ``config.json`` (:mod:`harness.hub`'s format): what ``save_pretrained`` records beside
the model (:func:`check_card_info`: ``trained_on``, ``metrics``, ``label_names``), timm's keys agreeing with the harness
section, and ``pretrained_cfg`` by the rules timm's transforms need (:func:`check_export_config`), each refused with
the file, the key, the value and the fix before any weights are read.
"""

from __future__ import annotations

import collections
import dataclasses
import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional

from harness.io import quote
from harness.model_config import Preprocessing
from harness.rules import Rule, check_rules, setting

#: what to do about an export's config.json that breaks a rule
UNCHANGED = "give the folder save_pretrained wrote, unchanged"


#: the largest ``trained_on.image_size`` an export records (a side of 10^5 px is 10^10 pixels an image: a typo)
MAX_IMAGE_SIZE = 100_000


@dataclass
class TrainedOn:
    """An export's ``trained_on``: the data settings it was trained with (those of
    :class:`harness.data.config.DataConfig`, each optional; never paths: an export may be pushed to a public hub)."""

    source: Optional[str] = None
    name: Optional[str] = None
    train_split: Optional[str] = None
    eval_split: Optional[str] = None
    heldout_split: Optional[str] = None
    label_set: Optional[str] = None
    multilabel: Optional[bool] = None
    num_classes: Optional[int] = setting(None, low=1, whole=True)
    label_noise: Optional[dict] = None
    image_size: Optional[int] = setting(
        None,
        low=1,
        high=MAX_IMAGE_SIZE,
        whole=True,
        note="pixels",
    )
    eval_resize: Optional[int] = setting(None, low=1, high=MAX_IMAGE_SIZE, whole=True, note="pixels")
    limit_train: Optional[int] = setting(None, low=1, whole=True, note="the first N training examples; null: all")
    limit_eval: Optional[int] = setting(None, low=1, whole=True, note="the first N evaluated examples; null: all")


#: data settings recorded as ``trained_on`` (:class:`TrainedOn`)
DATA_KEYS = tuple(f.name for f in dataclasses.fields(TrainedOn))
#: ``trained_on``'s limits of a split to its first N examples (``DataConfig``'s 0, all, is recorded as no key; which
#: split each limits: :func:`harness.data.sources.limit_key`)
LIMITS = ("limit_train", "limit_eval")
#: the kind of each ``trained_on`` setting without a rule of its own that is not a name (a string)
_TRAINED_ON_KINDS = {"multilabel": bool, "label_noise": dict}
_SHARE, _NUMBER = Rule(low=0, high=1, note="a share of examples"), Rule(text="a finite number")
#: the keys of an export's ``harness`` section (:func:`harness.hub.export_config` writes them all)
HARNESS_KEYS = ("format", "layout", "folded_temperature", "model", "trained_on", "metrics", "measured")
#: the interpolations timm's transforms take (the names of ``timm.data.transforms.str_to_interp_mode``; torchvision's
#: ``nearest-exact`` is not among them)
TIMM_INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "hamming", "lanczos")
#: the crop modes of timm's evaluation transform (``timm.data.transforms_factory.transforms_imagenet_eval``, which
#: takes any other value as 'center')
TIMM_CROP_MODES = ("center", "squash", "border")


@dataclass
class InputConfig(Preprocessing):
    """The settings of an export's ``pretrained_cfg`` that timm's transforms read (``resolve_data_config``): the
    normalisation and crop of :class:`~harness.model_config.Preprocessing`, and the input size."""

    input_size: Optional[List[int]] = setting(
        None, size=3, low=1, whole=True, note="channels, height, width", fix=UNCHANGED
    )
    interpolation: Optional[str] = setting(None, choices=TIMM_INTERPOLATIONS, note="timm's names", fix=UNCHANGED)
    crop_mode: Optional[str] = setting(None, choices=TIMM_CROP_MODES, note="timm's crop modes", fix=UNCHANGED)


#: the settings of ``pretrained_cfg`` that :class:`InputConfig` checks
INPUT_KEYS = tuple(f.name for f in dataclasses.fields(InputConfig))


def metric_rule(key: str) -> "tuple[Rule, bool]":
    """``(rule, share)`` of an export's metric ``key`` (``heldout_<name>`` as ``<name>``), by the registry of the
    metrics the harness computes (:data:`harness.uncertainty.metrics.METRICS`): one shown in percent (accuracies,
    precision, AP; and ``accuracy``) is a share of examples in [0, 1]; every other one there (NLL, Brier, the
    calibration errors) a number in its range (``Metric.high``: Brier <= 2, calibration errors <= 1); a metric not there
    a finite number."""
    from harness.uncertainty.metrics import METRICS

    name = str(key).removeprefix("heldout_")
    metric = METRICS.get(name)
    if name == "accuracy" or (metric is not None and metric.percent):
        return _SHARE, True
    if metric is None:
        return _NUMBER, False
    bound = f"lies in [0, {metric.high:g}]" if metric.high is not None else "is never negative"
    return Rule(low=0, high=metric.high, note=f"{metric.label} {bound}"), False


def check_card_info(info: dict, num_classes: int, where: str, section: str = "", fix: str = UNCHANGED) -> None:
    """The rules of what an export records beside the model (``card_info``, written by ``save_pretrained`` and read
    back from config.json): ``trained_on`` a mapping of :data:`DATA_KEYS` (:class:`TrainedOn`: a whole
    ``image_size`` >= 1, ``limit_train`` / ``limit_eval`` whole numbers >= 1 or null, names as strings; every key
    optional, as in an export written before a key was recorded), ``metrics`` a mapping whose values are finite
    numbers (null: not measured, as :func:`harness.io.json_dumps` writes NaN; text: a note) within their metric's
    range (:func:`metric_rule`: shares in [0, 1], losses and calibration errors >= 0), and ``label_names``
    ``num_classes`` distinct, non-empty strings.
    ``section`` prefixes the keys of the first two (``harness.`` in config.json); ``fix`` follows their messages.
    ``trained_on``'s training, evaluation and held-out splits share no image (:func:`harness.data.config.check_splits`;
    audit21 A21-08, audit22 A22-04: a card published, and an export read back carried, training-split metrics as the
    model's evaluation).

    Raises:
        ValueError: ``<where>: <key> ...`` naming the value, what it must be and the fix.
    """

    def bad(what: str, value: Any) -> ValueError:
        return ValueError(f"{where}: {section}{what}, got {quote(repr(value), 80)}; {fix}")

    data, metrics, names = (info.get(k) for k in ("trained_on", "metrics", "label_names"))
    if data is not None:
        if not isinstance(data, dict):
            raise bad(f"trained_on must be a mapping of {', '.join(DATA_KEYS)} (the data settings)", data)
        if set(data) - set(DATA_KEYS):
            unknown = sorted(set(data) - set(DATA_KEYS))
            raise bad(f"trained_on takes only {', '.join(DATA_KEYS)} (the data settings): unknown key(s)", unknown)
        for key, value in data.items():  # the settings without a rule of their own: by their kind
            kind = _TRAINED_ON_KINDS.get(key, str)
            ruled = "rule" in TrainedOn.__dataclass_fields__[key].metadata
            if not (value is None or ruled or isinstance(value, kind)):
                what = {bool: "true or false", dict: "a mapping"}.get(kind, "a name")
                raise bad(f"trained_on.{key} must be {what}", value)
        try:
            check_rules(TrainedOn(**data), f"{section}trained_on.")
        except ValueError as e:
            raise ValueError(f"{where}: {e}; {fix}") from None
        _check_card_splits(data, where, section, fix)
    if metrics is not None:
        if not isinstance(metrics, dict):
            raise bad("metrics must be a mapping of metric names to values", metrics)
        for key, value in metrics.items():
            rule, share = metric_rule(key)
            if value is None or (isinstance(value, str) and not share):
                continue
            if not (share or _NUMBER.holds(value)):
                raise bad(f"metrics.{key} must be a finite number (null: not measured; a string: a note)", value)
            if not rule.holds(value):
                raise bad(f"metrics.{key} must be {rule.describe()}", value)
    if names not in (None, []):  # save_pretrained writes no empty list
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise ValueError(f"{where}: label_names must be a list of class names (strings), got {names!r:.80}")
        blank = [i for i, n in enumerate(names) if not n.strip()]
        if blank:
            raise ValueError(
                f"{where}: label_names[{blank[0]}] = {names[blank[0]]!r} is an empty class name: give each class "
                "a name, or drop label_names"
            )
        if len(names) != num_classes:
            raise ValueError(
                f"{where}: label_names holds {len(names)} name(s) for a model of {num_classes} classes; give one "
                "name per class, or drop label_names"
            )
        twice = sorted(n for n, count in collections.Counter(names).items() if count > 1)
        if twice:
            raise ValueError(
                f"{where}: label_names names {quote(', '.join(map(repr, twice)), 80)} more than once: give each "
                "class its own name, or drop label_names"
            )


def finite_metrics(metrics: Any, where: str) -> "tuple[Any, Optional[str]]":
    """``(metrics, warning or None)``: a mapping of metrics with each NaN or infinity as None (null: not measured, as
    :func:`harness.io.json_dumps` writes one), so config.json, the card's table and its model-index all leave it out
    (audit21 A21-14: the model-index published ``.nan`` / ``.inf`` beside config.json's null); the warning names each
    one, prefixed by ``where`` (``save_pretrained: metrics.``, ``runs/a/metrics.json: heldout_metrics.``). Anything
    else is returned as it is (:func:`check_card_info` judges it)."""
    import math

    if not isinstance(metrics, dict):
        return metrics, None
    bad = [k for k, v in metrics.items() if isinstance(v, float) and not math.isfinite(v)]
    if not bad:
        return metrics, None
    note = (
        f"{', '.join(f'{where}{k} = {metrics[k]!r}' for k in bad)}: not a finite number, so not a measured value: "
        "written as null (not measured) in config.json and left out of the model card and its model-index; pass "
        "the finite value measured to state it"
    )
    return {k: None if k in bad else v for k, v in metrics.items()}, note


def run_card_metrics(recorded: dict, path: Any) -> dict:
    """The metrics an export of a run states, from its ``metrics.json`` (``recorded``, read from ``path``):
    ``metrics`` by their names, ``heldout_metrics`` as ``heldout_<name>``; a NaN or infinity as None, with a warning
    naming the file and key (:func:`finite_metrics`)."""
    import warnings

    out = {}
    for section, prefix in (("metrics", ""), ("heldout_metrics", "heldout_")):
        values, note = finite_metrics(dict(recorded.get(section) or {}), f"{path}: {section}.")
        out.update({f"{prefix}{k}": v for k, v in values.items()})
        if note:
            warnings.warn(note, stacklevel=3)
    return out


def timm_name(backbone: str) -> str:
    """A backbone name as timm's registry spells it (``timm:resnet18`` -> ``resnet18``)."""
    from harness.weights import TIMM_PREFIX

    return backbone[len(TIMM_PREFIX) :] if backbone.startswith(TIMM_PREFIX) else backbone


def _check_card_splits(data: dict, where: str, section: str, fix: str) -> None:
    """``trained_on``'s splits by upstream's rule (:func:`harness.data.config.check_splits`; raises its ValueError
    naming ``<section>trained_on.`` keys, then ``fix``)."""
    from types import SimpleNamespace

    from harness.data.config import check_splits

    splits = {k: data.get(k) for k in ("train_split", "eval_split", "heldout_split")}
    try:
        check_splits(SimpleNamespace(source=data.get("source"), **splits))
    except ValueError as e:
        said = str(e).replace("data.", f"{section}trained_on.")
        raise ValueError(
            f"{where}: {said}; a card's metrics are those of {section}trained_on.eval_split; {fix}"
        ) from None


def check_export_config(config: dict, path: Path) -> None:
    """The rules of an export's ``config.json`` (module docstring), checked before any weights are read: the stored
    model config (:func:`harness.model_config.check_stored_config`), the folded τ, what :func:`check_card_info`
    checks, no key in the harness section but :data:`HARNESS_KEYS`, and timm's keys agreeing with the harness section: ``num_classes`` its class count, ``architecture`` its
    backbone, ``pretrained_cfg`` (what timm's transforms read) by the rules of :class:`InputConfig` (``num_features``
    is known once the backbone is built: :func:`check_num_features`).

    Raises:
        ValueError: ``<path>: <key> = <value> ...``, with what it must be and the fix.
    """
    from harness.model_config import check_stored_config

    info = config["harness"]
    unknown = sorted(set(info) - set(HARNESS_KEYS), key=str)
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), HARNESS_KEYS, n=1)
        raise ValueError(
            f"{path}: harness.{unknown[0]} is not a key of the harness section"
            + (f" (did you mean harness.{close[0]}?)" if close else "")
            + f"; it takes {', '.join(HARNESS_KEYS)}: {UNCHANGED}"
        )
    model = check_stored_config(info.get("model"), str(path))
    covariance = (model.get("head") or {}).get("covariance", _default_covariance())
    if info.get("layout") == "timm" and covariance != "none":
        raise ValueError(
            f"{path}: harness.model.head.covariance = {quote(repr(covariance), 40)} with harness.layout = 'timm': the "
            "timm layout holds a homoscedastic head's classifier alone (covariance 'none'), so a noisy head would be "
            f"built with untrained noise parameters; {UNCHANGED}"
        )
    folded, k = info.get("folded_temperature"), model["num_classes"]
    if folded is not None and not Rule(low=0, low_open=True).holds(folded):
        raise ValueError(
            f"{path}: harness.folded_temperature = {folded!r} must be null or a finite number > 0 (the τ "
            f"folded into the classifier); {UNCHANGED}"
        )
    check_card_info({**info, "label_names": config.get("label_names")}, k, str(path), "harness.")
    _check_measured(info.get("measured"), path)
    count, arch = config.get("num_classes", k), config.get("architecture", timm_name(model["backbone"]))
    if isinstance(count, bool) or not isinstance(count, int) or count != k:
        raise ValueError(
            f"{path}: num_classes = {quote(repr(count), 40)} must be the whole number {k}, the class count of "
            f"harness.model.num_classes; {UNCHANGED}"
        )
    if arch != timm_name(model["backbone"]):
        raise ValueError(
            f"{path}: architecture = {quote(repr(arch), 60)} must be {timm_name(model['backbone'])!r}, the backbone "
            f"of harness.model.backbone; {UNCHANGED}"
        )
    cfg = config.get("pretrained_cfg", {})
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: pretrained_cfg must be a mapping (timm's data config), got {quote(repr(cfg), 60)}")
    try:
        check_rules(InputConfig(**{f: cfg.get(f) for f in INPUT_KEYS}), "pretrained_cfg.")
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


def _check_measured(measured: Any, path: Path) -> None:
    """``harness.measured`` (:func:`harness.card_facts.export_state_facts`): null (an older export) or a mapping of
    the ``backbone`` and ``head`` weights' SHA-256 (64 hex digits) and the head's ``evaluation`` options (a mapping).

    Raises:
        ValueError: naming config.json, the key and the value.
    """
    if measured is None:
        return
    digest = re.compile(r"[0-9a-f]{64}")
    keys = {"backbone", "head", "evaluation"}
    ok = isinstance(measured, dict) and keys <= set(measured) <= keys | {"preprocessing"}
    ok = ok and all(isinstance(measured[k], str) and digest.fullmatch(measured[k]) for k in ("backbone", "head"))
    if not (ok and isinstance(measured["evaluation"], dict) and isinstance(measured.get("preprocessing", {}), dict)):
        raise ValueError(
            f"{path}: harness.measured = {quote(repr(measured), 80)} must be null or a mapping of backbone and head "
            f"(each a SHA-256, 64 hex digits), evaluation (a mapping of the head's options) and preprocessing (a "
            f"mapping, the input normalisation); {UNCHANGED}"
        )


def check_num_features(export: Any, num_features: int) -> None:
    """An export's ``num_features`` (when given) against the built model's.

    Raises:
        ValueError: naming config.json, the value and the model's.
    """
    given = export.config.get("num_features", num_features)
    if isinstance(given, bool) or not isinstance(given, int) or given != num_features:
        raise ValueError(
            f"{export.config_path}: num_features = {quote(repr(given), 40)} must be {num_features}, the feature "
            f"width of the backbone harness.model builds; {UNCHANGED}"
        )


def _default_covariance() -> str:
    """The head's ``covariance`` when a stored head config leaves it out (:class:`HeteroscedasticHead`'s default)."""
    import inspect

    from harness.heads import HeteroscedasticHead

    return inspect.signature(HeteroscedasticHead.__init__).parameters["covariance"].default


def evaluation_view(card_info: dict) -> dict:
    """timm's data-config keys of the view a model the harness trained was evaluated on (its ``trained_on``:
    ``image_size``, and ``eval_resize``, null for image_size / 0.875, :func:`harness.data.transforms.eval_transform`):
    ``input_size`` ``[3, S, S]`` and ``crop_pct`` such that timm's eval transform (resize the short side to
    ``floor(S / crop_pct)``, centre-crop S) is the harness's (audit17 A17-08: the backbone's own 0.95 or 0.875 was
    stated for a model scored at crop 1.0); ``{}`` when the export does not record them (a model trained elsewhere).
    """
    import math

    data = card_info.get("trained_on") or {}
    size = data.get("image_size")
    if not isinstance(size, int) or "eval_resize" not in data:
        return {"input_size": [3, size, size]} if isinstance(size, int) else {}
    resize = data["eval_resize"] or int(round(size / 0.875))
    crop = size / resize
    if math.floor(size / crop) != resize:  # float rounding below the whole side: state a crop just under it
        crop = size / (resize + 0.5)
    return {"input_size": [3, size, size], "crop_pct": crop}


def trained_on(data: dict, read: "Optional[dict]" = None) -> dict:
    """An export's ``trained_on`` from a run's ``data`` section (:data:`DATA_KEYS`: never paths; ``image_size`` 32,
    the data config's default, where the section leaves it out; ``limit_train`` / ``limit_eval`` only where they limit
    a split, :data:`LIMITS`: the data config's 0 is every example, and a limit is at most that many, so where ``read``
    (the examples the run read, by limit key: ``{"limit_train": num_train, "limit_eval": num_eval}``) says the split
    held fewer, it cut nothing and is left out: audit19 A19-12)."""
    from harness.data.splits import unpacked

    data, read = unpacked(data), read or {}  # a pack: the source split it holds (audit22 A22-08), never its path
    cut = {k: data.get(k) and (read.get(k) is None or read[k] >= data[k]) for k in LIMITS}
    kept = {k: data[k] for k in DATA_KEYS if k in data and not (k in LIMITS and not cut[k])}
    return {"image_size": 32, **kept}


#: the ``trained_on`` keys that say where an export's metrics were measured (an import's: its evaluation data's)
MEASURED_KEYS = ("eval_split", "heldout_split", "eval_resize", "limit_eval")


def imported_card(trained: Optional[dict], evaluated: dict) -> "tuple[Optional[dict], bool]":
    """``(trained_on, keep_metrics)`` of the export of an imported run (``harness import``): the model's own record
    ``trained`` (None: a model trained elsewhere), with the evaluation keys (:data:`MEASURED_KEYS`) of ``evaluated``
    (:func:`trained_on` of the import's ``--data``) where both are of one dataset, so the card's metrics name the split
    they were measured on. Where they are of two datasets, the import's metrics are not kept: the card's model-index
    would file them under the training dataset (audit18 A18-05)."""
    if not trained:
        return None, True  # the card says the data is not recorded: nothing false
    same = all(trained.get(k) == evaluated.get(k) for k in ("source", "name"))
    if not same:
        return dict(trained), False
    kept = {k: v for k, v in trained.items() if k not in MEASURED_KEYS}
    return {**kept, **{k: evaluated[k] for k in MEASURED_KEYS if k in evaluated}}, True


def split_limit(data: dict, split_key: str) -> "tuple[Optional[str], Optional[str], Optional[int]]":
    """``(split, limit key, N)`` of a ``trained_on``'s ``split_key`` (``train_split``, ``eval_split``,
    ``heldout_split``): the split's name (None where not recorded), the key that limits it and the first N examples it
    was cut to (None, None: every example), by the rule the data is read with (:func:`harness.data.sources.limit_key`:
    ``limit_eval`` for every split but the training one; the data config's default splits where ``trained_on`` leaves
    them out)."""
    from types import SimpleNamespace

    from harness.data.sources import limit_key

    split = data.get(split_key)
    if not split:
        return None, None, None
    roles = SimpleNamespace(train_split=data.get("train_split", "train"), eval_split=data.get("eval_split", "test"))
    key = limit_key(roles, split)
    return (str(split), key, data[key]) if data.get(key) else (str(split), None, None)


def split_slice(data: dict, split_key: str) -> Optional[str]:
    """:func:`split_limit` in the Hugging Face datasets' slice spelling: ``test[:50]`` for the first 50 examples of
    ``test``, ``test`` for all of it; None where the split is not recorded."""
    split, _, limit = split_limit(data, split_key)
    return f"{split}[:{limit}]" if limit else split


def noisy_labels(data: dict, split_key: str) -> Optional[str]:
    """What makes the labels of ``trained_on``'s ``split_key`` split (``eval_split``, ``heldout_split``) noisy, as the
    run read them, or None for its clean labels: ``label_noise`` (kind other than ``none``) where a run draws it,
    :func:`harness.data.pack_source.noise_splits` (the training and held-out splits: ``"pair_flip 0.3 noisy labels
    (drawn by the run)"``), or CIFAR-10N's human label set other than ``clean`` on one of its training splits
    (``"the worse human labels of cifar10n"``). A held-out metric of such a split is against those labels (audit19
    A19-02), not the split's own."""
    from types import SimpleNamespace

    from harness.data.pack_source import noise_splits
    from harness.data.splits import CIFAR10N_TRAIN_SPLITS

    split = data.get(split_key)
    if not split:
        return None
    noise = data.get("label_noise") or {}
    roles = SimpleNamespace(train_split=data.get("train_split", "train"), heldout_split=data.get("heldout_split"))
    if noise.get("kind", "none") != "none" and split in noise_splits(roles):
        rate = f" {noise['rate']}" if noise.get("rate") is not None else ""
        return f"{noise['kind']}{rate} noisy labels (drawn by the run)"
    label_set = data.get("label_set")
    human = data.get("source") == "cifar10n" and not data.get("multilabel")
    if human and label_set not in (None, "clean") and split in CIFAR10N_TRAIN_SPLITS:
        return f"the {label_set} human labels of cifar10n"
    return None
