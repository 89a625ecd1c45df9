"""Backbones named by a source, with their weights: ``timm:NAME`` (a weights file, or timm's own sources: downloaded
as timm does unless offline mode is asked for, ``HF_HUB_OFFLINE=1`` or ``offline=True``, then only from the local timm /
Hugging Face cache), timm's ``hf-hub:ORG/NAME`` and ``local-dir:PATH``, and ``torchvision:NAME``.

The weights are read and checked by :mod:`harness.weights` (safely, strictly, every failure a ``ValueError`` naming the
file and the fix); :mod:`harness.models` and :mod:`harness.sources` put a head on these backbones.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from harness.io import quote
from harness.weights import (
    _SAFETENSORS_DTYPES,
    _TORCHVISION_HEADS,
    HF_HUB_PREFIX,
    LOCAL_DIR_PREFIX,
    TIMM_PREFIX,
    TORCHVISION_PREFIX,
    TORCHVISION_PREPROCESSING,
    WEIGHTS_FIX,
    _drop_classifier,
    _torchvision_backbone,
    check_dtypes,
    check_finite,
    check_timm_name,
    load_weights,
    local_dir,
    read_config_json,
    read_state,
    timm_preprocessing,
)


def create_backbone(name: str, pretrained_file: Optional[str] = None, **kwargs: Any) -> nn.Module:
    """``timm.create_model(name, num_classes=0, ...)`` (random weights) with a clear error for unknown names; with
    ``pretrained_file`` the weights of that file, loaded as :func:`source_backbone` loads them.

    Raises:
        ValueError: the name is not a timm model (the message lists close matches); options timm refuses
            (``backbone_kwargs.<option> = <value>: timm cannot build <name> with it (<timm's message>)``, the fix);
            see :func:`read_state`.
    """
    name = name[len(TIMM_PREFIX) :] if name.startswith(TIMM_PREFIX) else name
    if name.startswith(TORCHVISION_PREFIX):
        if pretrained_file is not None or kwargs:
            raise ValueError(
                f"{name}: torchvision backbones take no pretrained_file or backbone_kwargs; load weights "
                "with harness.sources.load_source(name, weights)"
            )
        return _torchvision_backbone(name[len(TORCHVISION_PREFIX) :])
    if pretrained_file is not None:
        if not Path(pretrained_file).is_file():
            raise ValueError(f"pretrained_file {pretrained_file!r} does not exist; give a local weights file")
        return _timm_with_weights(name, Path(pretrained_file), **kwargs)
    check_timm_name(name)
    return _timm_create(name, kwargs)


def _timm_create(name: str, kwargs: dict, key: str = "backbone_kwargs") -> nn.Module:
    """``timm.create_model(name, num_classes=0, **kwargs)`` (random weights); timm's error for options it refuses as
    a ValueError naming them (``key``), timm's message and the fix."""
    import timm  # imported lazily: it pulls in torchvision

    try:
        return timm.create_model(name, pretrained=False, num_classes=0, **kwargs)
    except Exception as e:  # noqa: BLE001 -- timm's AssertionError, TypeError, RuntimeError... for an option
        if not kwargs:
            raise
        said = " ".join(str(e).split()) or type(e).__name__
        named = [k for k, v in kwargs.items() if k in said or (isinstance(v, str) and v and v in said)]
        named = list(kwargs) if len(kwargs) == 1 else named
        which = f"{key}.{named[0]}" if len(named) == 1 else key
        value = kwargs[named[0]] if len(named) == 1 else kwargs
        raise ValueError(
            f"{which} = {quote(repr(value), 120)}: timm cannot build {name} with it ({type(e).__name__}: "
            f"{quote(said, 200)}); drop {which if len(named) == 1 else 'the option timm names'} or correct it to "
            f"what timm's {name} takes"
        ) from None


def check_backbone_builds(backbone: str, kwargs: dict, key: str) -> None:
    """Whether timm builds ``backbone`` (a timm name, ``timm:`` prefix allowed) with the options ``kwargs``: built on
    PyTorch's meta device (nothing allocated, no weights initialised), on the CPU when the model cannot be built
    there; nothing is checked for ``hf-hub:`` / ``local-dir:`` sources (their options come with their config).

    Raises:
        ValueError: ``<key>.<option> = <value>: timm cannot build <name> with it (<timm's message>)`` and the fix; an
            unknown backbone (:func:`create_backbone`'s message); options for a ``torchvision:`` backbone.
    """
    name = backbone[len(TIMM_PREFIX) :] if backbone.startswith(TIMM_PREFIX) else backbone
    if name.startswith(TORCHVISION_PREFIX):
        if kwargs:
            raise ValueError(
                f"{key} = {quote(repr(kwargs), 120)}: torchvision backbones ({name}) take no timm options; drop {key}"
            )
        return
    if not kwargs or name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        return
    check_timm_name(name)
    try:
        with torch.device("meta"):
            _timm_create(name, kwargs, key)
    except ValueError:  # refused by timm, or a model whose construction needs real tensors: built for real
        _timm_create(name, kwargs, key)


#: ``HF_HUB_OFFLINE``'s spellings, any case: on as huggingface_hub reads it (``constants.ENV_VARS_TRUE_VALUES``), and
#: off (unset or empty too); huggingface_hub takes any other value as off, so a typo would download
OFFLINE_ON = ("1", "ON", "YES", "TRUE")
OFFLINE_OFF = ("0", "OFF", "NO", "FALSE")


def offline_mode(offline: Optional[bool] = None) -> bool:
    """Whether weights by name come only from the local cache: ``offline`` when given (the user's flag), else the
    environment's ``HF_HUB_OFFLINE`` (:data:`OFFLINE_ON`), read now and as ``huggingface_hub.constants.HF_HUB_OFFLINE``
    (read when huggingface_hub was imported).

    Raises:
        ValueError: ``HF_HUB_OFFLINE`` set to a value neither on nor off (:data:`OFFLINE_OFF`), before any download.
    """
    if offline is not None:
        return bool(offline)
    import huggingface_hub.constants as hub

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    if env and env not in OFFLINE_ON + OFFLINE_OFF:
        raise ValueError(
            f"HF_HUB_OFFLINE={quote(os.environ['HF_HUB_OFFLINE'], 40)!r} is neither on nor off: set it to 1 (also "
            f"on, yes, true) to use only the local cache, or 0 (also off, no, false; or unset it) to download"
        )
    return bool(hub.HF_HUB_OFFLINE) or env in OFFLINE_ON


def source_backbone(
    source: str,
    weights: "Optional[str | os.PathLike]" = None,
    random_init: bool = False,
    offline: Optional[bool] = None,
    **kwargs: Any,
) -> "tuple[nn.Module, dict]":
    """The backbone (pooled features ``[B, D]``) of a ``timm:NAME`` (or bare timm name), ``hf-hub:ORG/NAME``,
    ``local-dir:PATH`` or ``torchvision:NAME`` source with its weights, and its preprocessing
    (:func:`timm_preprocessing`); see :func:`harness.sources.load_source`. ``kwargs`` go to ``timm.create_model``.

    Raises:
        FileNotFoundError: no such weights file.
        ValueError: see :func:`harness.sources.load_source`.
    """
    if weights is not None and not Path(weights).is_file():
        raise FileNotFoundError(f"no weights file at {str(weights)!r} (--weights)")
    if str(source).startswith(TORCHVISION_PREFIX):
        return _torchvision_backbone_with_weights(str(source), weights, random_init), dict(TORCHVISION_PREPROCESSING)
    name = str(source)[len(TIMM_PREFIX) :] if str(source).startswith(TIMM_PREFIX) else str(source)
    if name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        if weights is not None:
            raise ValueError(f"{source} holds its own weights: give no --weights (or give timm:NAME with --weights)")
        backbone = _timm_hub_source(name, random_init, offline, **kwargs)
    elif weights is not None:
        backbone = _timm_with_weights(name, Path(weights), **kwargs)
    elif random_init:
        backbone = create_backbone(name, **kwargs)
    else:
        backbone = _timm_pretrained(name, offline, **kwargs)
    return backbone, timm_preprocessing(backbone)


def source_spec(source: str, backbone: nn.Module) -> "tuple[str, dict]":
    """``(name, backbone_kwargs)`` that rebuild ``backbone`` of ``source`` (:class:`harness.models.ModelConfig`'s
    ``backbone`` and ``backbone_kwargs``): for an ``hf-hub:`` / ``local-dir:`` source the timm architecture and the
    ``model_args`` of its ``config.json`` (timm keeps them as ``pretrained_model_args``; its weights are loaded into
    the rebuilt model afterwards); else the ``timm:`` name without its prefix, or the ``torchvision:NAME`` source."""
    name = str(source)[len(TIMM_PREFIX) :] if str(source).startswith(TIMM_PREFIX) else str(source)
    if name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        args = getattr(backbone, "pretrained_model_args", None) or {}
        return str(backbone.pretrained_cfg["architecture"]), dict(args)
    return name, {}


def _torchvision_backbone_with_weights(
    source: str, weights: "Optional[str | os.PathLike]", random_init: bool
) -> nn.Module:
    """``torchvision:NAME`` with a state dict file (:func:`read_state`), loaded strictly with only the classifier
    left out; see :func:`harness.sources.load_source`."""
    backbone = create_backbone(source)
    if weights is None and not random_init:
        raise ValueError(
            f"{source} needs its weights: give --weights FILE (a torchvision state dict, .pth or "
            ".safetensors), or --random-init to start from random weights on purpose"
        )
    if weights is not None:
        state = read_state(weights)
        own = backbone.state_dict()
        kept = {k: v for k, v in state.items() if k in own or k.split(".")[0] not in _TORCHVISION_HEADS}
        load_weights(backbone, kept, source=f"{weights} ({source})")
    return backbone


def _timm_with_weights(name: str, weights: Path, **kwargs: Any) -> nn.Module:
    """``timm:NAME`` with ``weights`` loaded strictly: a state dict (:func:`read_state`: ``.safetensors``,
    ``.pth``, ``.pt``) with only the file's classifier left out (:func:`_drop_classifier`), our key / shape report
    when it does not fit; an original ``.npz`` (BiT, ViT) through timm's ``load_checkpoint``, which hands it to the
    model's own reader."""
    backbone = create_backbone(name, **kwargs)
    if weights.suffix.lower() == ".npz":
        import timm.models

        try:
            timm.models.load_checkpoint(backbone, str(weights))
        except Exception as e:  # noqa: BLE001 -- a model without an .npz reader, or an archive it cannot read
            raise ValueError(
                f"{str(weights)!r} cannot be read as the .npz weights of timm:{name} "
                f"({type(e).__name__}); {WEIGHTS_FIX}"
            ) from e
        check_finite(backbone.state_dict(), str(weights))
        return backbone
    load_weights(backbone, _drop_classifier(read_state(weights), backbone), source=f"{weights} (timm:{name})")
    return backbone


def cached_weights(name: str) -> "Optional[dict]":
    """The ``pretrained_cfg_overlay`` pointing timm at the cached weights of registry name ``name`` (from the Hugging
    Face cache, ``huggingface_hub.try_to_load_from_cache``, or timm's download folder under ``torch.hub.get_dir()``),
    or None when they are not on this machine. Nothing is downloaded."""
    import timm.models
    from huggingface_hub import try_to_load_from_cache

    cfg = timm.models.get_pretrained_cfg(name)
    if cfg is None:
        return None
    found = None
    if cfg.hf_hub_id:
        for file in [cfg.hf_hub_filename] if cfg.hf_hub_filename else ["model.safetensors", "pytorch_model.bin"]:
            hit = try_to_load_from_cache(cfg.hf_hub_id, file)
            if isinstance(hit, str):
                found = hit
                break
    if found is None and cfg.url:
        candidate = Path(torch.hub.get_dir()) / "checkpoints" / Path(cfg.url.split("?")[0]).name
        found = str(candidate) if candidate.is_file() else None
    return None if found is None else dict(file=found, custom_load=bool(cfg.custom_load) and found.endswith(".npz"))


def _timm_pretrained(name: str, offline: Optional[bool] = None, **kwargs: Any) -> nn.Module:
    """``timm:NAME`` with its published weights, as timm gets them: downloaded (or found in the cache) by
    ``timm.create_model(pretrained=True)``; in offline mode (:func:`offline_mode`) only from the local cache."""
    import timm

    check_timm_name(name)  # an unknown name is refused first, with close matches
    options = (
        "give a weights file with --weights FILE (.safetensors, .pth or a BiT .npz), or --random-init to start "
        "from random weights on purpose"
    )
    if offline_mode(offline):
        overlay = cached_weights(name)
        if overlay is None:
            raise ValueError(
                f"no weights for timm:{name} on this machine (offline mode: HF_HUB_OFFLINE or "
                "offline=True; not in the timm / Hugging Face cache): unset HF_HUB_OFFLINE to let timm "
                f"download them, or {options}"
            )
        kwargs["pretrained_cfg_overlay"] = overlay
    try:
        return timm.create_model(name, pretrained=True, num_classes=0, **kwargs)
    except Exception as e:  # noqa: BLE001 -- a failed download or an unreadable cache entry: say what to do
        raise ValueError(
            f"no weights for timm:{name}: timm could not get them ({type(e).__name__}: no network, or "
            f"no published weights); {options}"
        ) from e


def hub_config(source: str, offline: Optional[bool] = None) -> "tuple[dict, Optional[Path]]":
    """``(config.json, its folder)`` of an ``hf-hub:ORG/NAME`` or ``local-dir:PATH`` source (the hub's file through
    ``huggingface_hub.hf_hub_download``: downloaded, or from the cache only in offline mode).

    Raises:
        ValueError: no such folder or repository, an empty ``local-dir:`` path or ``hf-hub:`` name, or no config.json
            (the message names the fix).
    """
    name = str(source)[len(TIMM_PREFIX) :] if str(source).startswith(TIMM_PREFIX) else str(source)
    if name.startswith(LOCAL_DIR_PREFIX):
        folder = local_dir(name)
        if not folder.is_dir():
            raise ValueError(
                f"{source}: no folder {str(folder)!r}; give local-dir:PATH of a folder holding "
                "config.json and the weights"
            )
        try:
            return read_config_json(folder / "config.json"), folder
        except FileNotFoundError as e:
            raise ValueError(str(e)) from e
    from huggingface_hub import hf_hub_download

    repo = name[len(HF_HUB_PREFIX) :]
    if not repo.strip():
        raise ValueError(
            f"{source}: the repository name is empty; give hf-hub:ORG/NAME, e.g. hf-hub:timm/resnet18.a1_in1k"
        )
    try:
        path = Path(hf_hub_download(repo, "config.json", local_files_only=offline_mode(offline)))
    except Exception as e:  # noqa: BLE001 -- not found, no network, not in the cache (offline): say what to do
        raise hub_error(str(source), e, offline_mode(offline)) from e
    return read_config_json(path), path.parent


def hub_error(source: str, error: Exception, offline: bool) -> ValueError:
    """The one message for a repository the Hugging Face hub did not give (:func:`hub_config`,
    :meth:`harness.models.Classifier.from_pretrained`): ``source`` as the user spelled it, ``error`` what
    huggingface_hub raised, ``offline`` whether offline mode was on (:func:`offline_mode`), which decides the advice."""
    where = (
        "offline mode (HF_HUB_OFFLINE) and not in the Hugging Face cache: unset HF_HUB_OFFLINE to download it"
        if offline
        else "check the name and the network"
    )
    return ValueError(
        f"{source}: no config.json from the Hugging Face hub ({type(error).__name__}; {where}), or "
        "download the repository and give local-dir:PATH"
    )


def hub_classifier(source: str, offline: Optional[bool] = None) -> nn.Module:
    """The timm model of an ``hf-hub:ORG/NAME`` or ``local-dir:PATH`` source (``timm:`` before it taken) with its
    weights and its own classifier (the number of classes its ``config.json`` gives): ``harness import`` of a model
    trained elsewhere.

    Raises:
        ValueError: see :func:`hub_config`; weights timm cannot load (naming the source and the fix).
    """
    name = str(source)[len(TIMM_PREFIX) :] if str(source).startswith(TIMM_PREFIX) else str(source)
    return _timm_hub_source(name, False, offline, classifier=True)


def _timm_hub_source(
    name: str, random_init: bool, offline: Optional[bool], classifier: bool = False, **kwargs: Any
) -> nn.Module:
    """A backbone from timm's ``hf-hub:`` / ``local-dir:`` source (``timm.create_model(source, pretrained=True,
    num_classes=0)``; with ``classifier``, the model with its own classifier); in offline mode an ``hf-hub:``
    repository is read from its cached folder as ``local-dir:``."""
    import timm

    kwargs = kwargs if classifier else {"num_classes": 0, **kwargs}

    _, folder = hub_config(name, offline)
    source = name
    if name.startswith(HF_HUB_PREFIX) and offline_mode(offline):
        source = LOCAL_DIR_PREFIX + str(folder)
    weights = None if folder is None else Path(folder) / "model.safetensors"
    if not random_init and weights is not None and weights.is_file():  # timm casts what it loads: check first
        from safetensors import safe_open

        with safe_open(str(weights), framework="pt") as f:
            given = {
                k: _SAFETENSORS_DTYPES.get(f.get_slice(k).get_dtype(), f.get_slice(k).get_dtype()) for k in f.keys()
            }
        try:
            skeleton = timm.create_model(source, pretrained=False, **kwargs)
        except Exception:  # noqa: BLE001 -- reported with its fix by the call below
            skeleton = None
        if skeleton is not None:
            check_dtypes(skeleton.state_dict(), given, str(weights))
    try:
        return timm.create_model(source, pretrained=not random_init, **kwargs)
    except Exception as e:  # noqa: BLE001 -- an unknown architecture, missing or unreadable weights
        raise ValueError(
            f"{name}: timm could not build the model with its weights ({type(e).__name__}); give a "
            "folder with a timm config.json and model.safetensors, or timm:NAME with --weights FILE"
        ) from e
