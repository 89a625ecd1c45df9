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
import math
import os
import re
from pathlib import Path
from typing import Any

import torch
from torch import nn

TIMM_PREFIX = "timm:"
TORCHVISION_PREFIX = "torchvision:"
#: timm's spellings of a Hugging Face hub repository and of a local folder holding ``config.json`` + weights
HF_HUB_PREFIX, LOCAL_DIR_PREFIX = "hf-hub:", "local-dir:"
#: what a weights file must be, said in every error about one
WEIGHTS_FIX = (
    "give a state dict (a dict of tensors) saved by torch.save (.pth, .pt) or safetensors.torch.save_file "
    "(.safetensors), or, for timm models that read one (BiT, ViT), their original .npz"
)
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


#: safetensors' dtype codes by torch's names (the header of a file, read without loading its tensors)
_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "C64": "complex64",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}


def _kind(dtype: "torch.dtype | str") -> str:
    """``float``, ``complex``, ``int`` or ``bool``: a tensor dtype's kind (a torch dtype, or its name such as
    ``float16``; float8 is a float)."""
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    if name.startswith(("float", "bfloat")):
        return "float"
    return "complex" if name.startswith("complex") else ("bool" if name == "bool" else "int")


def check_dtypes(own: "dict[str, torch.Tensor]", given: "dict[str, torch.dtype | str]", source: str) -> None:
    """The one rule for casting weights into a model: a tensor may change precision within its kind (fp8/fp16/bf16/
    fp64 into fp32 parameters is fine) but never its kind (integer weights into floating-point parameters would be
    truncated numbers read as weights; floating values into an integer buffer would be truncated; complex values
    into real parameters would lose their imaginary part).

    Args: ``own`` the model's state dict; ``given`` key -> dtype of the weights (torch dtypes or safetensors codes).
    Raises: ValueError naming ``source``, the first tensors, their dtypes and the fix.
    """
    from harness.io import quote

    bad = [(k, given[k], v.dtype) for k, v in own.items() if k in given and _kind(given[k]) != _kind(v.dtype)]
    if bad:
        shown = ", ".join(
            f"{k} is {str(g).removeprefix('torch.')}, the model's is {str(o).removeprefix('torch.')}"
            for k, g, o in bad[:3]
        )
        raise ValueError(
            f"weights in {source}: {len(bad)} tensor(s) of another kind than the model's ({quote(shown, 200)}"
            "): they would be cast silently; give the weights as saved by the training (floating-point "
            "parameters), not an integer or quantised copy (nor complex values)"
        )


def load_weights(
    model: nn.Module,
    state_dict: dict,
    source: str = "state_dict",
    fix: str = "build the model with the config the checkpoint was written with (harness.models.load_model does)",
    config: str = "its stored config",
) -> None:
    """``load_state_dict(strict=True)`` with an error that says what does not match (the first missing and
    unexpected keys, the shapes that differ) and ``fix``; a head's fixed τ checked by :func:`check_temperatures`
    against the model's (the one of ``config``, the file holding the model config it was built from).

    Raises:
        ValueError: the state dict does not fit ``model``; a fixed τ outside the head's rule or other than the
            config's (:func:`check_temperatures`).
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
            parts.append(
                "shape mismatch "
                + ", ".join(f"{k}: {tuple(state_dict[k].shape)} vs {tuple(own[k].shape)}" for k in shapes[:5])
            )
        raise ValueError(f"weights in {source} do not fit the model ({'; '.join(parts)}); {fix}")
    check_dtypes(own, {k: v.dtype for k, v in state_dict.items()}, source)
    check_temperatures(own, state_dict, source, config)
    model.load_state_dict(state_dict, strict=True)


#: the name of a head's fixed τ buffer (:class:`~harness.heads.HeteroscedasticHead`), at any depth of a state dict
TEMPERATURE_BUFFER = "fixed_temperature"


def check_temperatures(
    own: "dict[str, torch.Tensor]", given: "dict[str, torch.Tensor]", source: str, config: str = "its stored config"
) -> None:
    """Refuse a head's fixed τ in ``given`` (:data:`TEMPERATURE_BUFFER`) outside the head's rule
    (:func:`harness.heads.options.temperature_in_range`) or that differs, beyond float32 rounding, from the model's own
    (built from the stored config's ``temperature``, the one definition of τ, in ``config``).

    Raises:
        ValueError: naming ``source``, the key, the value, the config's τ and the fix.
    """
    from harness.heads.options import TEMPERATURE_RULE, temperature_in_range

    fix = f"give the weights saved with {config}, unchanged (τ is set by the config's temperature)"
    for key in sorted(k for k in given if k.split(".")[-1] == TEMPERATURE_BUFFER and k in own):
        value, mine = given[key].double(), own[key].double()
        if value.numel() != 1 or mine.numel() != 1:
            continue
        tau, expected = float(value), float(mine)
        if not temperature_in_range(tau):
            raise ValueError(
                f"{source}: {key} = {tau!r} (the head's fixed temperature τ) must be {TEMPERATURE_RULE} (0 gives NaN "
                f"logits, a negative τ flips them, a huge one makes every prediction uniform); {fix}"
            )
        if not math.isclose(float(value.float()), expected, rel_tol=1e-6):
            raise ValueError(
                f"{source}: {key} = {tau!r} contradicts the temperature {float(f'{expected:.7g}')!r} of {config} (the one definition "
                f"of τ); {fix}, or save the model again with save_pretrained / save_model"
            )


#: the normalisation of torchvision's ImageNet weights (their ``transforms()``: ImageNet mean and std, bilinear
#: resize, centre crop 224 of 256)
TORCHVISION_PREPROCESSING = {
    "mean": [0.485, 0.456, 0.406],
    "std": [0.229, 0.224, 0.225],
    "interpolation": "bilinear",
    "crop_pct": 0.875,
}


#: the attribute holding a torchvision classifier's output layer, by family
_TORCHVISION_HEADS = ("fc", "classifier", "heads", "head")


def check_torchvision_name(name: str) -> None:
    """Refuse a name that is not in torchvision's registry (``torchvision.models.list_models()``), listing close
    matches."""
    import torchvision

    if name not in torchvision.models.list_models():
        close = difflib.get_close_matches(name, torchvision.models.list_models(), n=5, cutoff=0.6)
        raise ValueError(
            f"unknown torchvision model {name!r} (see torchvision.models.list_models())."
            + (f" Did you mean {', '.join(close)}?" if close else "")
        )


def torchvision_model(name: str, **kwargs: Any) -> nn.Module:
    """``torchvision.models.get_model(name, weights=None, **kwargs)``, or a ValueError listing close names."""
    import torchvision

    check_torchvision_name(name)
    return torchvision.models.get_model(name, weights=None, **kwargs)


def split_torchvision(model: nn.Module, name: str) -> "tuple[nn.Module, nn.Linear]":
    """The last ``nn.Linear`` of a torchvision classifier's output layer (:data:`_TORCHVISION_HEADS`) taken out and
    replaced by the identity (norms and pooling kept), so ``model`` returns pooled features ``[B, D]`` and
    ``model.num_features`` is D; returns ``(model, that linear layer)``.

    Raises:
        ValueError: no such layer.
    """
    for attr in _TORCHVISION_HEADS:
        linears = [
            n for n, m in model.named_modules() if (n == attr or n.startswith(attr + ".")) and isinstance(m, nn.Linear)
        ]
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
        raise ValueError(
            f"{str(path)!r} is a NumPy .npz archive: only the backbone of a timm model with its own .npz "
            "reader (BiT, ViT) takes one (harness downstream / fewshot --weights); give a state dict (a "
            "dict of tensors) saved by torch.save (.pth, .pt) or safetensors.torch.save_file "
            "(.safetensors)"
        )
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
        v = v.float() if v.element_size() == 1 else v  # float8 has no sum on the CPU; float32 holds it exactly
        return bool(torch.isfinite(v.sum())) or bool(torch.isfinite(v).all())

    bad = [k for k, v in state.items() if v.is_floating_point() and not finite(v)]
    if bad:
        raise ValueError(
            f"{source}: {len(bad)} weight tensor(s) hold NaN or infinite values (first: "
            f"{quote(', '.join(bad[:3]), 120)}): a diverged training; give the weights of a finished "
            "training with finite values"
        )


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


def local_dir(source: str) -> Path:
    """The folder of a ``local-dir:PATH`` source (``~`` expanded).

    Raises:
        ValueError: nothing after ``local-dir:`` (the folder would be the working folder, by accident).
    """
    path = str(source).split(LOCAL_DIR_PREFIX, 1)[-1]
    if not path.strip():
        raise ValueError(
            f"{source!r}: the path after {LOCAL_DIR_PREFIX} is empty: give the folder, e.g. "
            f"{LOCAL_DIR_PREFIX}runs/digits/pretrained (a folder written by save_pretrained, or a timm model folder "
            "holding config.json and its weights)"
        )
    return Path(path).expanduser()


def export_location(spelled: str) -> "tuple[Path | None, str]":
    """Where the harness's spellings of an export point (:meth:`harness.models.Classifier.from_pretrained`): a
    folder, bare or ``local-dir:PATH`` (``~`` expanded), as ``(folder, name)``; a hub repository, ``ORG/NAME`` or
    ``hf-hub:ORG/NAME``, as ``(None, "ORG/NAME")``.

    Raises:
        ValueError: a backbone (``timm:NAME``, ``torchvision:NAME``) or a file (``model.pt``), naming the loader that
            takes it; an empty ``local-dir:`` path; a local path (``local-dir:``, absolute, starting with ``.`` or
            ``~``, or holding a separator without the form ORG/NAME) where there is no folder.
    """
    if spelled.startswith((TIMM_PREFIX, TORCHVISION_PREFIX)):
        raise ValueError(
            f"{spelled!r} names a backbone, not a harness export: load it with "
            f"harness.sources.load_source({spelled!r}); Classifier.from_pretrained takes a save_pretrained folder"
        )
    if spelled.startswith(LOCAL_DIR_PREFIX):
        local_dir(spelled)  # refuses an empty path
    name = spelled
    for prefix in (LOCAL_DIR_PREFIX, HF_HUB_PREFIX):
        name = name[len(prefix) :] if name.startswith(prefix) else name
    folder = Path(name).expanduser()
    local = spelled.startswith(LOCAL_DIR_PREFIX) or os.path.isabs(name) or name.startswith((".", "/", "~"))
    if local or (os.sep in name and not re.fullmatch(r"[\w.-]+/[\w.-]+", name)):
        if not folder.exists():
            raise ValueError(
                f"no folder {name!r}: give the folder save_pretrained wrote (check the path), or a hub "
                "repository id ORG/NAME"
            )
    if folder.is_file():
        raise ValueError(
            f"{name!r} is a file: Classifier.from_pretrained takes the folder save_pretrained wrote"
            + ("; a harness model.pt loads with harness.models.load_model(path)" if name.endswith(".pt") else "")
        )
    return (folder, name) if folder.is_dir() else (None, name)


def read_config_json(path: "str | os.PathLike", loader: "str | None" = None) -> dict:
    """A model folder's ``config.json`` (UTF-8, a byte-order mark taken; at most :data:`CONFIG_LIMIT` bytes), as a
    dict. ``loader``: the reader that takes only export folders (``"Classifier.from_pretrained"``), for the advice
    on a run folder (holding ``model.pt``): without it, give the file itself (``--model``, ``load_source`` take it).

    Raises:
        FileNotFoundError: no such file. ValueError: too large, not JSON, or not an object; a folder without the file
            that is an ensemble or unfinished run folder (:func:`harness.model_folders.check_model_folder`).
    """
    from harness.io import quote
    from harness.model_folders import check_model_folder

    path = Path(path)
    if not path.is_file():
        check_model_folder(path.parent, str(path.parent))  # an ensemble or unfinished run folder is named as such
        run = path.parent / "model.pt"  # a harness run folder: its model is the file
        if loader is None:
            advice = f"give {str(run)!r} itself"
        else:
            advice = (
                f"{loader} takes only export folders: load it with harness.models.load_model({str(run)!r}), or "
                f"export the run first with harness.runs.export_run({str(path.parent)!r}, out) and pass out to it"
            )
        raise FileNotFoundError(
            f"no config.json at {str(path)!r}: give a folder written by save_pretrained, or a timm "
            "model folder (config.json with its weights)"
            + (f"; this folder holds a harness model.pt: {advice}" if run.is_file() else "")
        )
    if path.stat().st_size > CONFIG_LIMIT:
        raise ValueError(f"{str(path)!r} is over {CONFIG_LIMIT} bytes: not a model's config.json")
    try:
        config = json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM (as Windows editors write) is taken
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(
            f"{str(path)!r} is not valid JSON ({type(e).__name__}): give the config.json written with the model"
        ) from e
    if not isinstance(config, dict):
        raise ValueError(
            f"{str(path)!r} must be a JSON object (keys and values), got {quote(json.dumps(config), 40)}: give the "
            "config.json written with the model"
        )
    return config


def timm_preprocessing(model: nn.Module) -> dict:
    """The preprocessing a timm model's weights expect, from its ``pretrained_cfg``
    (``timm.data.resolve_model_data_config``): ``mean`` and ``std`` (3 floats each, of [0, 1] pixels),
    ``interpolation`` and ``crop_pct``."""
    import timm.data

    data = timm.data.resolve_model_data_config(model)
    return {
        "mean": [float(v) for v in data["mean"]],
        "std": [float(v) for v in data["std"]],
        "interpolation": str(data.get("interpolation", "bilinear")),
        "crop_pct": float(data.get("crop_pct", 1.0)),
    }
