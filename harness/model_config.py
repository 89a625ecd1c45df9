"""The config that rebuilds a classifier (:class:`ModelConfig`: backbone, K, head options, backbone options,
input normalisation) and the check of one read from a file (:func:`check_stored_config`): what a ``model.pt``
(:func:`harness.models.read_checkpoint`) or an export's ``config.json`` (``Classifier.from_pretrained``) stores may
name layers and give numbers, never a path or an option that opens one. :mod:`harness.models` builds from it and
imports both names.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, List, Optional

from torchvision.transforms import InterpolationMode

from harness.heads import HeteroscedasticHead
from harness.heads.checks import LIVE_OPTIONS
from harness.rules import Rule, check_rules, setting

#: what a model's ``preprocessing`` records (from timm's ``resolve_model_data_config``)
PREPROCESSING_KEYS = ("mean", "std", "interpolation", "crop_pct")
#: the only string-valued ``backbone_kwargs`` a checkpoint may store (names of timm layers and pooling, never a
#: path); every other stored backbone option must be a number, a boolean, None or a list of numbers
STORED_STRING_KWARGS = ("global_pool", "act_layer", "norm_layer", "stem_type", "block_type", "conv_layer")
_SAVED_WITH = "give the config the model was saved with"
#: the rules of the timm backbone options whose values matter to the model (every other number must be finite)
BACKBONE_RULES = {
    **{
        k: Rule(low=0, high=1, high_open=True)
        for k in ("drop_rate", "drop_path_rate", "drop_block_rate", "proj_drop_rate", "attn_drop_rate", "pos_drop_rate")
    },
    "img_size": Rule(low=1, whole=True),
}
#: ``timm.create_model`` arguments the harness sets itself (a backbone is built with ``num_classes=0`` and its weights
#: loaded from a source), each with what to give instead: as backbone options they would reach timm twice
HARNESS_KWARGS = {
    "model_name": "the backbone is named by the model's backbone",
    "pretrained": "give pretrained weights with model.pretrained_file=FILE (harness upstream) or a source such as "
    "timm:NAME with --weights FILE (harness downstream)",
    "num_classes": "the classes are the model's num_classes (data.num_classes for harness upstream)",
    "checkpoint_path": "the harness loads weights itself (strictly, checked): give model.pretrained_file=FILE "
    "(harness upstream) or a source such as timm:NAME with --weights FILE (harness downstream)",
    "cache_dir": "the harness downloads no weights when it builds a backbone: give a local weights file with "
    "model.pretrained_file=FILE",
}
#: ``timm.create_model`` options whose values make a backbone the harness cannot use (it feeds 3-channel RGB images and
#: puts its head on the pooled features ``[B, D]``): each with the test of a value it can use, why, and what else to give
UNUSABLE_KWARGS = {
    "in_chans": (lambda v: v == 3, "the harness feeds 3-channel (RGB) images", " (or give 3)"),
    "features_only": (
        lambda v: not v,
        "a features_only model gives feature maps, and the head takes the pooled features [B, D]",
        "",
    ),
    "global_pool": (
        lambda v: v != "",
        "no pooling leaves the features unpooled, and the head takes the pooled features [B, D]",
        " (or give a pooling such as 'avg')",
    ),
}


def check_backbone_kwargs(kwargs: Any, key: str, backbone: Optional[str] = None) -> None:
    """``timm.create_model`` options: a mapping without the arguments the harness sets itself
    (:data:`HARNESS_KWARGS`), whose numbers are finite, those of :data:`BACKBONE_RULES` within their rule (a drop rate
    of NaN or 5, or 0 input channels, would fail inside torch after work started), none of a value the harness cannot
    use (:data:`UNUSABLE_KWARGS`: ``in_chans`` other than 3, ``features_only``, unpooled features); with ``backbone``
    (its name) and options given, also options timm builds that backbone with
    (:func:`harness.backbone_sources.check_backbone_builds`, nothing allocated), so that a pooling timm does not know
    is refused before any work.

    Raises:
        ValueError: ``<key>.<option> must be <rule>, got <value>``; ``<key>.<option>`` set by the harness itself
            (with what to give instead), or of a value it cannot use (why, and the fix); options timm refuses (its
            message, and the fix).
    """
    import math

    from harness.io import quote

    if not isinstance(kwargs, dict):
        raise ValueError(f"{key} must be a mapping of timm.create_model options, got {type(kwargs).__name__}")
    for name, value in kwargs.items():
        if name in HARNESS_KWARGS:
            raise ValueError(
                f"{key}.{name} = {quote(repr(value), 60)}: the harness sets {name} itself when it builds the "
                f"backbone; drop {key}.{name}: {HARNESS_KWARGS[name]}"
            )
        rule = BACKBONE_RULES.get(name)
        values = value if isinstance(value, (list, tuple)) else [value]
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if (rule is not None and value is not None and not all(rule.holds(v) for v in values)) or not all(
            math.isfinite(v) for v in numbers
        ):
            what = rule.describe() if rule is not None else "finite"
            raise ValueError(f"{key}.{name} must be {what}, got {value!r}")
        usable, why, other = UNUSABLE_KWARGS.get(name, (lambda v: True, "", ""))
        if not usable(value):
            raise ValueError(
                f"{key}.{name} = {quote(repr(value), 60)}: the harness cannot use it: {why}; drop {key}.{name}{other}"
            )
    if backbone is not None and kwargs:
        from harness.backbone_sources import check_backbone_builds

        check_backbone_builds(backbone, kwargs, key)


#: the head options a built head keeps as attributes of the same name that a user may change on it (the Monte Carlo
#: settings: ``model.head.eval_mc_samples = 5``; the one list, :data:`harness.heads.checks.LIVE_OPTIONS`): a saved
#: model records them as they are when it is saved
LIVE_HEAD_OPTIONS = LIVE_OPTIONS


def live_temperature(head: HeteroscedasticHead, options: dict) -> dict:
    """``options`` with ``temperature`` the head's fixed τ now (``model.head.fixed_temperature.fill_(2.0)``) where it
    differs from theirs beyond float32 rounding (written as the shortest decimal of the float32); as they are for a
    learned τ (its weights hold it).

    Raises:
        ValueError: ``model.head: fixed_temperature = <τ> must be <TEMPERATURE_RULE>`` with the fix.
    """
    import numpy as np

    from harness.heads.options import TEMPERATURE_RULE, temperature_in_range

    if head.learn_temperature:
        return dict(options)
    tau = float(head.fixed_temperature)
    if not temperature_in_range(tau):
        raise ValueError(
            f"model.head: fixed_temperature = {tau!r} must be {TEMPERATURE_RULE}; set the head's temperature to a "
            "value it takes before saving"
        )
    given = options.get("temperature")
    if given is not None and math.isclose(tau, float(given), rel_tol=1e-6):
        return dict(options)
    if given is None and tau == 1.0:
        return dict(options)
    return {**options, "temperature": float(str(np.float32(tau)))}


def require_head(model: Any) -> None:
    """A model written (an export, a ``model.pt``) has a head to rebuild.

    Raises:
        ValueError: a feature extractor (``reset_classifier(0)``: no head), with the fix.
    """
    if not isinstance(model.head, HeteroscedasticHead):
        raise ValueError(
            "this model has no head (reset_classifier(0) made it a feature extractor): give it one with "
            "model.reset_classifier(num_classes) before saving"
        )


def live_head_options(head: Any, options: dict) -> dict:
    """``options`` (a model config's head options) with the head's fixed τ as it is now (:func:`live_temperature`)
    and the current values of the head's :data:`LIVE_HEAD_OPTIONS`,
    read from the module, where they differ from what ``options`` give (or the head's defaults); ``options`` as they
    are for a head without noise (``covariance='none'``, which uses none of them) or no head.

    Raises:
        ValueError: ``model.head: <the head's own message>`` for a value the head would refuse, with the fix.
    """
    import inspect

    from harness.heads.checks import check_sampling_options
    from harness.heads.options import check_option_types

    if not isinstance(head, HeteroscedasticHead):
        return dict(options)
    options = live_temperature(head, options)
    if head.noise_form is None:
        return dict(options)
    now = {k: getattr(head, k) for k in LIVE_HEAD_OPTIONS}
    try:
        check_option_types(HeteroscedasticHead.__init__, now)
        check_sampling_options(
            *(now[k] for k in ("train_mc_samples", "eval_mc_samples", "mc_chunk_size")),
            now["clip_eps"],
            now["eval_seed"],
        )
    except ValueError as e:
        raise ValueError(f"model.head: {e}; set the head's option to a value it takes before saving") from None
    defaults = inspect.signature(HeteroscedasticHead.__init__).parameters
    return {**options, **{k: v for k, v in now.items() if v != options.get(k, defaults[k].default)}}


@dataclass
class Preprocessing:
    """The values of a stored ``preprocessing`` (:data:`PREPROCESSING_KEYS`, each optional), with their rules: a std
    of 0 would make every logit non-finite."""

    mean: Optional[List[float]] = setting(None, size=3, note="one per channel, of [0, 1] pixels", fix=_SAVED_WITH)
    std: Optional[List[float]] = setting(
        None, size=3, low=0, low_open=True, note="one per channel, of [0, 1] pixels", fix=_SAVED_WITH
    )
    interpolation: Optional[str] = setting(
        None, choices=tuple(m.value for m in InterpolationMode), fix=_SAVED_WITH
    )  # torchvision's names, which the evaluation views take
    crop_pct: Optional[float] = setting(None, low=0, low_open=True, high=1, fix=_SAVED_WITH)


@dataclass
class ModelConfig:
    """Everything needed to rebuild a classifier.

    Attributes:
        backbone: a timm model name (``timm.list_models()``), e.g. ``"resnetv2_50x1_bit"``.
        num_classes: K.
        head: keyword arguments of :class:`HeteroscedasticHead` (``covariance``, ``link``,
            ``num_factors``, ``temperature``, ...). Empty means the default HET head.
        backbone_kwargs: extra keyword arguments of ``timm.create_model`` (``in_chans``,
            ``drop_rate``, ``img_size``, ...).
        preprocessing: the backbone's input normalisation, from its timm ``pretrained_cfg``
            (``timm.data.resolve_model_data_config``): ``mean`` and ``std`` (3 floats each, of [0, 1] pixels),
            ``interpolation`` and ``crop_pct`` as recorded there. Empty for models the harness trained
            (pixels mapped to [-1, 1]: mean = std = 0.5).
    """

    backbone: str
    num_classes: int = setting(low=1, whole=True, fix=_SAVED_WITH)
    head: dict = field(default_factory=dict)
    backbone_kwargs: dict = field(default_factory=dict)
    preprocessing: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(
                f"unknown model config keys {sorted(unknown)}; expected backbone, num_classes, head, backbone_kwargs"
            )
        return cls(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()})


def check_stored_config(config: Any, source: str) -> dict:
    """A model config read from a file, checked so that it cannot make loading open another file: only the
    keys of :class:`ModelConfig`, a backbone name, an integer K, head options of :class:`HeteroscedasticHead`, and
    backbone options that are numbers, booleans, None, lists of numbers, or for :data:`STORED_STRING_KWARGS` a short
    name (no ``checkpoint_path``, ``pretrained_cfg_overlay``, ``file`` or other path); then the values by the rules
    declared on :class:`ModelConfig` and :class:`Preprocessing`, and the backbone options by
    :func:`check_backbone_kwargs` (timm building the backbone with them; the head's options are checked by the head
    itself when it is built).

    Raises:
        ValueError: naming the offending key (its value quoted briefly) and ``source``.
    """
    import inspect

    from harness.io import quote

    def bad(what: str) -> ValueError:
        return ValueError(
            f"{source}: the stored model config {what}; a checkpoint may not name files or options "
            "that load them. Rebuild it with harness.models.save_model"
        )

    if not isinstance(config, dict) or set(config) - {f.name for f in dataclasses.fields(ModelConfig)}:
        raise bad(f"has keys {quote(str(sorted(config) if isinstance(config, dict) else type(config).__name__))}")
    if not isinstance(config.get("backbone"), str) or not isinstance(config.get("num_classes"), int):
        raise bad("needs a backbone name and an integer num_classes")
    for key in ("head", "backbone_kwargs", "preprocessing"):
        if config.get(key) is not None and not isinstance(config[key], dict):
            raise bad(f"has {key} = {quote(repr(config.get(key)), 60)}, not a mapping of options")
    head_keys = set(inspect.signature(HeteroscedasticHead.__init__).parameters) - {"self", "in_features", "num_classes"}
    unknown = sorted(set(config.get("head") or {}) - head_keys)
    if unknown:
        raise bad(f"has unknown head options {quote(str(unknown))}")
    prep = config.get("preprocessing") or {}
    if set(prep) - set(PREPROCESSING_KEYS) or not all(
        isinstance(v, (int, float))
        or (isinstance(v, str) and v.isidentifier() and len(v) < 32)
        or (isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v))
        for v in prep.values()
    ):
        raise bad(f"has preprocessing {quote(repr(prep), 120)}")
    for key, value in (config.get("backbone_kwargs") or {}).items():  # first: no option that opens a file
        plain = (
            value is None
            or isinstance(value, (bool, int, float))
            or (isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value))
        )
        named = key in STORED_STRING_KWARGS and isinstance(value, str) and (value == "" or value.isidentifier())
        named = named and len(value) < 64
        if not (plain or named):
            raise bad(f"sets backbone_kwargs.{key} = {quote(repr(value), 80)}")
    try:
        check_rules(ModelConfig(config["backbone"], config["num_classes"]))
        check_rules(Preprocessing(**prep), "preprocessing.")
        check_backbone_kwargs(config.get("backbone_kwargs") or {}, "backbone_kwargs", config["backbone"])
    except ValueError as e:
        raise ValueError(f"{source}: {quote(str(e), 400)}") from None
    return config


def check_backbone(backbone: str, pretrained_file: "str | None") -> None:
    """``model.backbone`` names a model of its registry (a timm name, ``timm:NAME``, or ``torchvision:NAME``: looked
    up, nothing built; an ``hf-hub:`` / ``local-dir:`` source is left to the build) and ``model.pretrained_file``, when
    set, is a file, as :func:`harness.models.build_model` needs them at the run's start.

    Raises:
        ValueError: naming the key, the value and the fix.
    """
    from harness.weights import (
        HF_HUB_PREFIX,
        LOCAL_DIR_PREFIX,
        TIMM_PREFIX,
        TORCHVISION_PREFIX,
        check_timm_name,
        check_torchvision_name,
    )

    name = backbone.removeprefix(TIMM_PREFIX)
    try:
        if name.startswith(TORCHVISION_PREFIX):
            check_torchvision_name(name.removeprefix(TORCHVISION_PREFIX))
        elif not name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
            check_timm_name(name)
    except ValueError as e:
        raise ValueError(f"model.backbone={backbone}: {e} Give the name of a timm model, or torchvision:NAME") from None
    if pretrained_file is not None and not Path(pretrained_file).is_file():
        raise ValueError(
            f"model.pretrained_file={pretrained_file} is not a file: give a local file of the backbone's weights (a "
            "state dict .safetensors or .pth, an export's model.safetensors), or unset model.pretrained_file"
        )
