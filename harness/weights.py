"""Backbones by name and their weights: timm (any registry name, with the 32 px ResNets of :mod:`harness.backbones`;
timm's ``hf-hub:ORG/NAME`` and ``local-dir:PATH`` sources) or torchvision (``torchvision:NAME``), built without their
classifier so they return pooled features ``[B, D]``; their weights read from a file (safely: no pickled code, every
failure a ``ValueError`` naming the file and the fix; the file's classifier, as timm's ``pretrained_cfg['classifier']``
names it, left out) or by timm from its usual sources (downloaded as timm does, unless the user or the environment asks
for offline mode, ``HF_HUB_OFFLINE=1`` or ``offline=True``: then only from the local timm / Hugging Face cache); and the
input preprocessing their weights expect.

:mod:`harness.models` puts a head on these backbones (``build_model``, ``load_source``, ``load_classifier``).
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

TIMM_PREFIX = "timm:"
TORCHVISION_PREFIX = "torchvision:"
#: timm's spellings of a Hugging Face hub repository and of a local folder holding ``config.json`` + weights
HF_HUB_PREFIX, LOCAL_DIR_PREFIX = "hf-hub:", "local-dir:"
#: what a weights file must be, said in every error about one
WEIGHTS_FIX = ("give a state dict (a dict of tensors) saved by torch.save (.pth, .pt) or safetensors.torch.save_file "
               "(.safetensors), or, for timm models that read one (BiT, ViT), their original .npz")
#: the largest ``config.json`` read (a model's config is a few kB)
CONFIG_LIMIT = 1 << 20


def check_timm_name(name: str) -> None:
    """Refuse a name that is not in timm's registry (with the 32 px ResNets of :mod:`harness.backbones`), listing
    close matches."""
    import timm

    import harness.backbones  # noqa: F401  (registers the 32 px ResNets with timm)

    base = name.split(".")[0]
    if not timm.is_model(base):
        close = difflib.get_close_matches(base, timm.list_models(), n=5, cutoff=0.6)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown backbone {name!r}: not a timm model (see timm.list_models()).{hint}")


def create_backbone(name: str, pretrained_file: Optional[str] = None, **kwargs: Any) -> nn.Module:
    """``timm.create_model(name, num_classes=0, ...)`` (random weights) with a clear error for unknown names; with
    ``pretrained_file`` the weights of that file, loaded as :func:`source_backbone` loads them.

    Raises:
        ValueError: the name is not a timm model (the message lists close matches); see :func:`read_state`.
    """
    name = name[len(TIMM_PREFIX):] if name.startswith(TIMM_PREFIX) else name
    if name.startswith(TORCHVISION_PREFIX):
        if pretrained_file is not None or kwargs:
            raise ValueError(f"{name}: torchvision backbones take no pretrained_file or backbone_kwargs; load weights "
                             "with harness.sources.load_source(name, weights)")
        return _torchvision_backbone(name[len(TORCHVISION_PREFIX):])
    if pretrained_file is not None:
        if not Path(pretrained_file).is_file():
            raise ValueError(f"pretrained_file {pretrained_file!r} does not exist; give a local weights file")
        return _timm_with_weights(name, Path(pretrained_file), **kwargs)
    import timm  # imported lazily: it pulls in torchvision

    check_timm_name(name)
    return timm.create_model(name, pretrained=False, num_classes=0, **kwargs)


#: safetensors' dtype codes by torch's names (the header of a file, read without loading its tensors)
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64",
                       "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def _kind(dtype: "torch.dtype | str") -> str:
    """``float``, ``int`` or ``bool``: a tensor dtype's kind (a torch dtype, or its name such as ``float16``)."""
    if isinstance(dtype, str):
        return "float" if dtype.startswith(("float", "bfloat")) else ("bool" if dtype == "bool" else "int")
    return "bool" if dtype == torch.bool else ("float" if dtype.is_floating_point or dtype.is_complex else "int")


def check_dtypes(own: "dict[str, torch.Tensor]", given: "dict[str, torch.dtype | str]", source: str) -> None:
    """The one rule for casting weights into a model: a tensor may change precision within its kind (fp16/bf16/fp64
    into fp32 parameters is fine) but never its kind (integer weights into floating-point parameters would be
    truncated numbers read as weights; floating values into an integer buffer would be truncated).

    Args: ``own`` the model's state dict; ``given`` key -> dtype of the weights (torch dtypes or safetensors codes).
    Raises: ValueError naming ``source``, the first tensors, their dtypes and the fix.
    """
    from harness.io import quote

    bad = [(k, given[k], v.dtype) for k, v in own.items() if k in given and _kind(given[k]) != _kind(v.dtype)]
    if bad:
        shown = ", ".join(f"{k} is {str(g).removeprefix('torch.')}, the model's is {str(o).removeprefix('torch.')}"
                          for k, g, o in bad[:3])
        raise ValueError(f"weights in {source}: {len(bad)} tensor(s) of another kind than the model's ({quote(shown, 200)}"
                         "): they would be cast silently; give the weights as saved by the training (floating-point "
                         "parameters), not an integer or quantised copy")


def load_weights(model: nn.Module, state_dict: dict, source: str = "state_dict",
                 fix: str = "build the model with the config the checkpoint was written with "
                            "(harness.models.load_model does)") -> None:
    """``load_state_dict(strict=True)`` with an error that says what does not match (the first missing and
    unexpected keys, the shapes that differ) and ``fix``.

    Raises:
        ValueError: the state dict does not fit ``model``.
    """
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    shapes = sorted(k for k in set(own) & set(state_dict) if own[k].shape != state_dict[k].shape)
    if missing or unexpected or shapes:
        parts = []
        if missing:
            parts.append(f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}")
        if unexpected:
            parts.append(f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")
        if shapes:
            parts.append("shape mismatch " + ", ".join(f"{k}: {tuple(state_dict[k].shape)} vs {tuple(own[k].shape)}"
                                                       for k in shapes[:5]))
        raise ValueError(f"weights in {source} do not fit the model ({'; '.join(parts)}); {fix}")
    check_dtypes(own, {k: v.dtype for k, v in state_dict.items()}, source)
    model.load_state_dict(state_dict, strict=True)


#: the normalisation of torchvision's ImageNet weights (their ``transforms()``: ImageNet mean and std, bilinear
#: resize, centre crop 224 of 256)
TORCHVISION_PREPROCESSING = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "interpolation": "bilinear",
                             "crop_pct": 0.875}


#: the attribute holding a torchvision classifier's output layer, by family
_TORCHVISION_HEADS = ("fc", "classifier", "heads", "head")


def torchvision_model(name: str, **kwargs: Any) -> nn.Module:
    """``torchvision.models.get_model(name, weights=None, **kwargs)``, or a ValueError listing close names."""
    import torchvision

    if name not in torchvision.models.list_models():
        close = difflib.get_close_matches(name, torchvision.models.list_models(), n=5, cutoff=0.6)
        raise ValueError(f"unknown torchvision model {name!r} (see torchvision.models.list_models())."
                         + (f" Did you mean {', '.join(close)}?" if close else ""))
    return torchvision.models.get_model(name, weights=None, **kwargs)


def split_torchvision(model: nn.Module, name: str) -> "tuple[nn.Module, nn.Linear]":
    """The last ``nn.Linear`` of a torchvision classifier's output layer (:data:`_TORCHVISION_HEADS`) taken out and
    replaced by the identity (norms and pooling kept), so ``model`` returns pooled features ``[B, D]`` and
    ``model.num_features`` is D; returns ``(model, that linear layer)``.

    Raises:
        ValueError: no such layer.
    """
    for attr in _TORCHVISION_HEADS:
        linears = [n for n, m in model.named_modules() if (n == attr or n.startswith(attr + "."))
                   and isinstance(m, nn.Linear)]
        if linears:
            parent, _, child = linears[-1].rpartition(".")
            owner = model.get_submodule(parent) if parent else model
            linear = getattr(owner, child)
            model.num_features = linear.in_features
            setattr(owner, child, nn.Identity())
            return model, linear
    raise ValueError(f"torchvision:{name}: no output layer among {', '.join(_TORCHVISION_HEADS)}; use timm:NAME")


def _torchvision_backbone(name: str) -> nn.Module:
    """``torchvision.models.get_model(name)`` (no weights) with its output layer replaced by the identity, so it
    returns pooled features ``[B, D]``; ``num_features`` is D.

    Raises:
        ValueError: an unknown name (close matches listed), or a model whose output layer is not one of
            :data:`_TORCHVISION_HEADS` ending in an ``nn.Linear``.
    """
    return split_torchvision(torchvision_model(name), name)[0]


def offline_mode(offline: Optional[bool] = None) -> bool:
    """Whether weights by name come only from the local cache: ``offline`` when given (the user's flag), else the
    environment's ``HF_HUB_OFFLINE`` (as huggingface_hub reads it: 1, ON, YES or TRUE), read now and as
    ``huggingface_hub.constants.HF_HUB_OFFLINE`` (read when huggingface_hub was imported)."""
    if offline is not None:
        return bool(offline)
    import huggingface_hub.constants as hub

    env = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return bool(hub.HF_HUB_OFFLINE) or env in ("1", "ON", "YES", "TRUE")


def read_state(weights: "str | os.PathLike", what: str = "--weights") -> "dict[str, torch.Tensor]":
    """A state dict file read without running code: ``.safetensors``, or ``.pth``/``.pt``/``.bin`` through
    ``torch.load(weights_only=True)``; the EMA weights first and DDP / ``torch.compile`` prefixes removed, as timm's
    ``load_state_dict`` (which reads it) does; checked to be a non-empty dict of tensors, every floating-point value
    finite. Every failure (truncated, empty, a pickle of objects, a text file, NaN weights) is one ``ValueError`` naming
    the file and the fix, without quoting the file.

    Raises:
        FileNotFoundError: no file at ``weights`` (``what`` names the option).
        ValueError: an ``.npz`` (only timm's BiT / ViT readers take one: :func:`source_backbone`), an unreadable
            file, not a dict of tensors, or non-finite values (:func:`check_finite`).
    """
    import timm.models

    path = Path(weights)
    if not path.is_file():
        raise FileNotFoundError(f"no weights file at {str(path)!r} ({what})")
    if path.suffix.lower() == ".npz":
        raise ValueError(f"{str(path)!r} is a NumPy .npz archive: only the backbone of a timm model with its own .npz "
                         "reader (BiT, ViT) takes one (harness downstream / fewshot --weights); give a state dict (a "
                         "dict of tensors) saved by torch.save (.pth, .pt) or safetensors.torch.save_file "
                         "(.safetensors)")
    try:
        state = timm.models.load_state_dict(str(path), use_ema=True, weights_only=True)
    except Exception as e:  # noqa: BLE001 -- any failure to read means: not a weights file (never a traceback)
        raise ValueError(f"{str(path)!r} cannot be read as a weights file ({type(e).__name__}); {WEIGHTS_FIX}") from e
    if not state or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise ValueError(f"{str(path)!r} holds no state dict (a non-empty dict of tensors); {WEIGHTS_FIX}")
    check_finite(state, str(path))
    return state


def check_finite(state: "dict[str, torch.Tensor]", source: str) -> None:
    """Refuse a state dict with NaN or infinite floating-point values (a diverged training), before any work.

    Raises:
        ValueError: naming ``source``, how many tensors, the first few keys, and the fix.
    """
    from harness.io import quote

    def finite(v: torch.Tensor) -> bool:  # a NaN or inf makes the sum non-finite; an overflowing sum is checked whole
        return bool(torch.isfinite(v.sum())) or bool(torch.isfinite(v).all())

    bad = [k for k, v in state.items() if v.is_floating_point() and not finite(v)]
    if bad:
        raise ValueError(f"{source}: {len(bad)} weight tensor(s) hold NaN or infinite values (first: "
                         f"{quote(', '.join(bad[:3]), 120)}): a diverged training; give the weights of a finished "
                         "training with finite values")


def source_backbone(source: str, weights: "Optional[str | os.PathLike]" = None, random_init: bool = False,
                    offline: Optional[bool] = None, **kwargs: Any) -> "tuple[nn.Module, dict]":
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
    name = str(source)[len(TIMM_PREFIX):] if str(source).startswith(TIMM_PREFIX) else str(source)
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
    name = str(source)[len(TIMM_PREFIX):] if str(source).startswith(TIMM_PREFIX) else str(source)
    if name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        args = getattr(backbone, "pretrained_model_args", None) or {}
        return str(backbone.pretrained_cfg["architecture"]), dict(args)
    return name, {}


def _torchvision_backbone_with_weights(source: str, weights: "Optional[str | os.PathLike]",
                                       random_init: bool) -> nn.Module:
    """``torchvision:NAME`` with a state dict file (:func:`read_state`), loaded strictly with only the classifier
    left out; see :func:`harness.sources.load_source`."""
    backbone = create_backbone(source)
    if weights is None and not random_init:
        raise ValueError(f"{source} needs its weights: give --weights FILE (a torchvision state dict, .pth or "
                         ".safetensors), or --random-init to start from random weights on purpose")
    if weights is not None:
        state = read_state(weights)
        own = backbone.state_dict()
        kept = {k: v for k, v in state.items() if k in own or k.split(".")[0] not in _TORCHVISION_HEADS}
        load_weights(backbone, kept, source=f"{weights} ({source})")
    return backbone


def classifier_names(model: nn.Module) -> "tuple[str, ...]":
    """The classifier module name(s) of a timm model, from its ``pretrained_cfg['classifier']`` (a string, or a
    tuple for models with two heads: ``('head', 'head_dist')`` of distilled DeiT, ``('head.linear',
    'head_dist.linear')`` of LeViT); for a model without one, the module ``get_classifier()`` returns."""
    names = (getattr(model, "pretrained_cfg", None) or {}).get("classifier")
    if names:
        return (names,) if isinstance(names, str) else tuple(names)
    found = model.get_classifier() if hasattr(model, "get_classifier") else None
    return tuple(n for n, m in model.named_modules() if n and m is found)


def _drop_classifier(state: dict, model: nn.Module) -> dict:
    """``state`` without the keys of the classifier(s) that ``model`` (built with ``num_classes=0``) lacks: those
    under a :func:`classifier_names` module, or under its parent (timm replaces ``head`` of ``head.linear``, LeViT's
    norm + linear head, by the identity)."""
    names = classifier_names(model)
    prefixes = tuple(n + "." for n in names) + tuple(n.rsplit(".", 1)[0] + "." for n in names if "." in n)
    own = model.state_dict()
    return {k: v for k, v in state.items() if k in own or not (prefixes and k.startswith(prefixes))}


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
            raise ValueError(f"{str(weights)!r} cannot be read as the .npz weights of timm:{name} "
                             f"({type(e).__name__}); {WEIGHTS_FIX}") from e
        check_finite(backbone.state_dict(), str(weights))
        return backbone
    load_weights(backbone, _drop_classifier(read_state(weights), backbone), source=f"{weights} (timm:{name})")
    return backbone


def _cached_weights(name: str) -> "Optional[dict]":
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
        for file in ([cfg.hf_hub_filename] if cfg.hf_hub_filename else ["model.safetensors", "pytorch_model.bin"]):
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
    options = ("give a weights file with --weights FILE (.safetensors, .pth or a BiT .npz), or --random-init to start "
               "from random weights on purpose")
    if offline_mode(offline):
        overlay = _cached_weights(name)
        if overlay is None:
            raise ValueError(f"no weights for timm:{name} on this machine (offline mode: HF_HUB_OFFLINE or "
                             "offline=True; not in the timm / Hugging Face cache): unset HF_HUB_OFFLINE to let timm "
                             f"download them, or {options}")
        kwargs["pretrained_cfg_overlay"] = overlay
    try:
        return timm.create_model(name, pretrained=True, num_classes=0, **kwargs)
    except Exception as e:  # noqa: BLE001 -- a failed download or an unreadable cache entry: say what to do
        raise ValueError(f"no weights for timm:{name}: timm could not get them ({type(e).__name__}: no network, or "
                         f"no published weights); {options}") from e


def read_config_json(path: "str | os.PathLike") -> dict:
    """A model folder's ``config.json`` (at most :data:`CONFIG_LIMIT` bytes), as a dict.

    Raises:
        FileNotFoundError: no such file. ValueError: too large, not JSON, or not an object.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no config.json at {str(path)!r}: give a folder written by save_pretrained, or a timm "
                                "model folder (config.json with its weights)")
    if path.stat().st_size > CONFIG_LIMIT:
        raise ValueError(f"{str(path)!r} is over {CONFIG_LIMIT} bytes: not a model's config.json")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{str(path)!r} is not valid JSON ({type(e).__name__}): give the config.json written with "
                         "the model") from e
    if not isinstance(config, dict):
        raise ValueError(f"{str(path)!r} is not a JSON object: give the config.json written with the model")
    return config


def hub_config(source: str, offline: Optional[bool] = None) -> "tuple[dict, Optional[Path]]":
    """``(config.json, its folder)`` of an ``hf-hub:ORG/NAME`` or ``local-dir:PATH`` source (the hub's file through
    ``huggingface_hub.hf_hub_download``: downloaded, or from the cache only in offline mode).

    Raises:
        ValueError: no such folder or repository, or no config.json (the message names the fix).
    """
    name = str(source)[len(TIMM_PREFIX):] if str(source).startswith(TIMM_PREFIX) else str(source)
    if name.startswith(LOCAL_DIR_PREFIX):
        folder = Path(name[len(LOCAL_DIR_PREFIX):]).expanduser()
        if not folder.is_dir():
            raise ValueError(f"{source}: no folder {str(folder)!r}; give local-dir:PATH of a folder holding "
                             "config.json and the weights")
        try:
            return read_config_json(folder / "config.json"), folder
        except FileNotFoundError as e:
            raise ValueError(str(e)) from e
    from huggingface_hub import hf_hub_download

    repo = name[len(HF_HUB_PREFIX):]
    try:
        path = Path(hf_hub_download(repo, "config.json", local_files_only=offline_mode(offline)))
    except Exception as e:  # noqa: BLE001 -- not found, no network, not in the cache (offline): say what to do
        where = ("offline mode and not in the Hugging Face cache: unset HF_HUB_OFFLINE to download it"
                 if offline_mode(offline) else "check the name and the network")
        raise ValueError(f"{source}: no config.json from the Hugging Face hub ({type(e).__name__}; {where}), or "
                         "download the repository and give local-dir:PATH") from e
    return read_config_json(path), path.parent


def _timm_hub_source(name: str, random_init: bool, offline: Optional[bool], **kwargs: Any) -> nn.Module:
    """A backbone from timm's ``hf-hub:`` / ``local-dir:`` source (``timm.create_model(source, pretrained=True,
    num_classes=0)``); in offline mode an ``hf-hub:`` repository is read from its cached folder as ``local-dir:``."""
    import timm

    _, folder = hub_config(name, offline)
    source = name
    if name.startswith(HF_HUB_PREFIX) and offline_mode(offline):
        source = LOCAL_DIR_PREFIX + str(folder)
    weights = None if folder is None else Path(folder) / "model.safetensors"
    if not random_init and weights is not None and weights.is_file():  # timm casts what it loads: check first
        from safetensors import safe_open

        with safe_open(str(weights), framework="pt") as f:
            given = {k: _SAFETENSORS_DTYPES.get(f.get_slice(k).get_dtype(), f.get_slice(k).get_dtype())
                     for k in f.keys()}
        try:
            skeleton = timm.create_model(source, pretrained=False, num_classes=0, **kwargs)
        except Exception:  # noqa: BLE001 -- reported with its fix by the call below
            skeleton = None
        if skeleton is not None:
            check_dtypes(skeleton.state_dict(), given, str(weights))
    try:
        return timm.create_model(source, pretrained=not random_init, num_classes=0, **kwargs)
    except Exception as e:  # noqa: BLE001 -- an unknown architecture, missing or unreadable weights
        raise ValueError(f"{name}: timm could not build the model with its weights ({type(e).__name__}); give a "
                         "folder with a timm config.json and model.safetensors, or timm:NAME with --weights FILE"
                         ) from e


def timm_preprocessing(model: nn.Module) -> dict:
    """The preprocessing a timm model's weights expect, from its ``pretrained_cfg``
    (``timm.data.resolve_model_data_config``): ``mean`` and ``std`` (3 floats each, of [0, 1] pixels),
    ``interpolation`` and ``crop_pct``."""
    import timm.data

    data = timm.data.resolve_model_data_config(model)
    return {"mean": [float(v) for v in data["mean"]], "std": [float(v) for v in data["std"]],
            "interpolation": str(data.get("interpolation", "bilinear")), "crop_pct": float(data.get("crop_pct", 1.0))}
