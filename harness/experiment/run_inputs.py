"""What every planned upstream run of an experiment reads, checked before any work and alike for every run: the main
and multi-label studies' runs (each seed, each value of a grid), every condition's, frontier schedule's and budget
curve's (:func:`harness.experiment.variants.check_variant_configs`). Each run's backbone is a model its registry
knows, its ``model.pretrained_file`` a file, the evaluation split of its data reads (``data.path`` given and
present, the split there, a pack's index for shards: :func:`harness.run_streams.read_split`), and the settings that need the data's number of
classes fit it; so a typo in a condition's or a schedule's overrides is refused before the main study trains, not
when that run's turn comes (audit16 A16-04)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.data.eval_keys import EVAL_KEYS
from harness.experiment.plan import _Plan
from harness.heads.variants import has_factors


def planned_configs(plans: "dict[str, _Plan]", variants: "dict[str, Any]") -> "dict[str, Any]":
    """Every planned config by the run it is: ``run <folder>`` of each study's plan (``run multilabel_<folder>`` for
    the multi-label study), the main study's first, then ``variants`` (the later runs'
    :func:`~harness.experiment.variants.check_variant_configs` built, by the section they come from)."""
    runs = {
        f"run {'' if study == 'main' else study + '_'}{folder}": cfg
        for study, plan in plans.items()
        for folder, cfg in plan.configs.items()
    }
    return {**runs, **variants}


def check_run_inputs(configs: "dict[str, Any]", pairs: "dict[str, list[list[str]]]") -> None:
    """What each planned run reads, one rule for every run (the main study's, a condition's, a frontier schedule's...):
    its backbone and weights file (:func:`check_backbone`, once per distinct pair), the evaluation split of its data
    (read once per distinct evaluation, :data:`harness.data.eval_keys.EVAL_KEYS`: a missing or absent ``data.path``, an unknown split or source, a stream
    source; the split's K classes), ``model.num_classes`` (unset or K) and the head's ``num_factors`` (at most K for
    noise on the logits); and the class names ``pairs`` gives (``confusable_pairs``, ``single_pair.pairs``) are
    classes of the first run's data (the main study's).

    Args:
        configs: the upstream configs by the run they are (:func:`planned_configs`), the main study's first.
        pairs: lists of class-name pairs by their key.

    Raises:
        ValueError: ``<the run>: <the problem>``, the problem naming the setting and the fix; FileNotFoundError
            the same for data that is not where ``data.path`` says (as :func:`harness.run_streams.read_split`
            raises it).
    """
    from harness.run_streams import read_split

    seen: "set[tuple]" = set()
    classes: "dict[str, list[str]]" = {}  # repr of a data section -> the class names of its evaluation split
    for where, cfg in configs.items():
        weights = (cfg.model.backbone, cfg.model.pretrained_file)
        if weights not in seen:
            seen.add(weights)
            _prefixed(where, check_backbone, *weights)
        data = repr([getattr(cfg.data, k) for k in EVAL_KEYS])  # what the evaluation split depends on
        if data not in classes:
            split = _prefixed(where, read_split, cfg.data, cfg.data.eval_split)
            classes[data] = [str(c) for c in split.class_names]
        _check_k(where, cfg, len(classes[data]))
    names = next(iter(classes.values()), [])
    for key, given in pairs.items():
        unknown = sorted({str(c) for pair in given for c in pair} - set(names))
        if unknown:
            raise ValueError(
                f"{key} names {', '.join(map(repr, unknown))}, not classes of the data (its classes: "
                f"{', '.join(names[:20])}{' ...' if len(names) > 20 else ''}): name pairs of its classes, e.g. "
                f"[[{names[0]}, {names[-1]}]]"
            )


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


def _prefixed(where: str, check: Any, *args: Any) -> Any:
    """``check(*args)``, its ValueError or FileNotFoundError prefixed with the run it was raised for."""
    try:
        return check(*args)
    except (ValueError, FileNotFoundError) as e:
        raise type(e)(f"{where}: {e}") from None


def _check_k(where: str, cfg: Any, k: int) -> None:
    """``model.num_classes`` (unset, or the data's ``k``) and the head's ``num_factors`` (at most ``k`` for noise on the
    logits: rank at most K) of the run ``where``.

    Raises:
        ValueError: naming the run, the key, the value, the data's K and the fix.
    """
    if cfg.model.num_classes and cfg.model.num_classes != k:
        raise ValueError(
            f"{where}: model.num_classes={cfg.model.num_classes} but the data has {k} classes; leave "
            "model.num_classes unset"
        )
    head = cfg.model.head
    r = head.get("num_factors")
    if (
        r is not None
        and has_factors(head.get("covariance", "low_rank"))
        and head.get("noise_space", "logits") == "logits"
        and int(r) > k
    ):
        raise ValueError(
            f"{where}: model.head.num_factors={r} exceeds the {k} classes of the data (noise on the logits has rank "
            f"at most K): use num_factors <= {k}"
        )
