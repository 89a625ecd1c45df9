"""Models from any source, checked before any work: :func:`load_source` (a backbone to transfer or fine-tune, or a
whole harness model) and :func:`load_classifier` (a model trained elsewhere on the evaluation data's classes, for
``harness import``). Both are also :mod:`harness.models`' API.

Sources: a harness ``model.pt``; a folder written by :meth:`harness.models.Classifier.save_pretrained` (also as
``local-dir:PATH``, or its hub repository ``hf-hub:ORG/NAME``); ``timm:NAME`` with a weights file, or with timm's own
weights (downloaded as timm does unless ``HF_HUB_OFFLINE`` / ``offline=True``); timm's ``hf-hub:ORG/NAME`` and
``local-dir:PATH``; ``torchvision:NAME`` with a weights file. Weights files are read by
:func:`harness.weights.read_state` (no code runs; every failure a ``ValueError`` naming the file and the fix).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

from harness.backbone_sources import (
    cached_weights,
    hub_classifier,
    hub_config,
    offline_mode,
    source_backbone,
    source_spec,
)
from harness.checkpoint_files import check_weights_file, checkpoint_kind
from harness.model_folders import check_model_folder
from harness.weights import (
    HF_HUB_PREFIX,
    LOCAL_DIR_PREFIX,
    TIMM_PREFIX,
    TORCHVISION_PREFIX,
    TORCHVISION_PREPROCESSING,
    check_finite,
    check_timm_name,
    check_torchvision_name,
    load_weights,
    local_dir,
    read_config_json,
    read_state,
    split_torchvision,
    timm_preprocessing,
    torchvision_model,
)

if TYPE_CHECKING:
    from harness.models import Classifier


def _named(source: str) -> bool:
    """A source given by name (timm, torchvision, hub, local-dir), not a harness file or folder."""
    return str(source).startswith((TIMM_PREFIX, TORCHVISION_PREFIX, HF_HUB_PREFIX, LOCAL_DIR_PREFIX))


def check_local_dir(name: str, source: str) -> None:
    """A ``local-dir:`` spelling (``name``, as given in ``source``) must not name a file.

    Raises:
        ValueError: ``local-dir:<a file>``, naming the file and its folder to give instead (a harness model.pt: the
            file itself, without the prefix).
    """
    if name.startswith(LOCAL_DIR_PREFIX) and local_dir(name).is_file():
        path = local_dir(name)
        if checkpoint_kind(path) == "model":  # audit21 A21-02: its folder was refused in turn, naming this file
            raise ValueError(
                f"{source}: {str(path)!r} is a harness model checkpoint, and local-dir: takes a folder written by "
                f"save_pretrained or a timm model folder: give the checkpoint as it is, {str(path)!r} (no prefix)"
            )
        raise ValueError(
            f"{source}: {str(path)!r} is a file, and local-dir: takes a folder: give its folder, "
            f"{LOCAL_DIR_PREFIX}{path.parent} (the folder holding config.json and the weights)"
        )


def export_source(source: str, offline: Optional[bool] = None) -> Optional[str]:
    """The folder or hub repository id to give ``Classifier.from_pretrained`` when ``source`` is a harness export
    (a folder whose ``config.json`` has a ``harness`` section; ``local-dir:`` / ``hf-hub:`` spellings too), else None.

    Raises:
        ValueError: a folder that holds no ``config.json``; an unreadable one (see :func:`harness.backbone_sources.hub_config`);
            a ``local-dir:`` path that is a file (the message names its folder).
    """
    name = str(source)[len(TIMM_PREFIX) :] if str(source).startswith(TIMM_PREFIX) else str(source)
    check_local_dir(name, source)
    if not _named(name):
        if not Path(name).is_dir():
            return None
        name = LOCAL_DIR_PREFIX + name
    if name.startswith(LOCAL_DIR_PREFIX):
        check_model_folder(local_dir(name), str(source))
    if not name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX)):
        return None
    config, folder = hub_config(name, offline)
    if "harness" not in config:
        return None
    return str(folder) if name.startswith(LOCAL_DIR_PREFIX) else name[len(HF_HUB_PREFIX) :]


def _load_model(source: str) -> "Classifier":
    """:func:`harness.models.load_model` of a harness ``model.pt``.

    Raises:
        ValueError: a file of an export folder (its ``model.safetensors``, ``config.json`` or ``README.md``): the
            export is the folder; a timm model folder given bare (audit22 A22-05: its ``local-dir:`` spelling named);
            see also :func:`harness.models.load_model`.
    """
    from harness.hub import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE
    from harness.models import load_model

    path = Path(source)
    if path.is_dir() and (path / CONFIG_FILE).is_file():  # not an export (export_source took those): timm's own
        raise ValueError(
            f"{str(source)!r} is a model folder whose config.json is not a harness export's (a timm folder): give it "
            f"as local-dir:{source} (or timm:local-dir:{source})"
        )
    if path.is_file() and path.name in (WEIGHTS_FILE, CONFIG_FILE, CARD_FILE):
        try:
            export = "harness" in read_config_json(path.parent / CONFIG_FILE)
        except (OSError, ValueError):
            export = False
        if export:
            raise ValueError(
                f"{str(source)!r} is the {path.name} of a folder written by save_pretrained: give the folder "
                f"itself, {str(path.parent)!r} (or local-dir:{path.parent})"
            )
    return load_model(source)


def load_classifier(source: str, num_classes: int, weights: "Optional[str | os.PathLike]" = None) -> "Classifier":
    """A trained classifier for ``num_classes`` classes, its own output layer kept: a harness ``model.pt`` (or
    ``save_pretrained`` folder), or ``timm:NAME`` / ``torchvision:NAME`` built with ``num_classes`` outputs and loaded
    strictly from ``weights`` (classifier included; :func:`harness.weights.read_state`); the output ``nn.Linear``
    becomes the mean layer of a homoscedastic :class:`HeteroscedasticHead` (the same logits), and the model records
    the backbone's preprocessing. This is how a model trained elsewhere on the evaluation data's classes enters
    ``harness ensemble``, ``harness shift`` and ``harness report`` (``harness import``).

    Raises:
        FileNotFoundError: no such ``model.pt`` or weights file.
        ValueError: no ``weights`` for a timm / torchvision source; a file of a ``save_pretrained`` folder given for
            the folder; an unreadable weights file or one with NaN or infinite values; weights that do not fit (the
            first missing and unexpected keys and the shapes that differ); a model whose output layer is not a
            linear layer, or whose number of classes is not ``num_classes``.
    """
    from harness.heads import HeteroscedasticHead
    from harness.models import Classifier, ModelConfig

    check_weights_file(weights)  # a harness checkpoint: the model itself (--model), before any is built
    name = str(source)[len(TIMM_PREFIX) :] if str(source).startswith(TIMM_PREFIX) else str(source)
    hub = name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX))  # an export, or timm's folder or hub model
    if hub or not str(source).startswith((TIMM_PREFIX, TORCHVISION_PREFIX)):
        if weights is not None:
            raise ValueError(
                f"--weights goes with a timm:NAME or torchvision:NAME source; {source!r} "
                + ("holds its own weights" if hub else "is a harness model, which holds its own weights")
            )
        export = export_source(source)
        if export or not hub:
            return _harness_classifier(source, export, num_classes)
        net = hub_classifier(source)  # audit21 A21-03: timm's own folder or hub model, its classifier kept
        if getattr(net, "num_classes", num_classes) != num_classes:
            raise ValueError(
                f"{source} predicts {net.num_classes} classes (its config.json's) and the data has {num_classes}: "
                "give the data the model was trained on"
            )
        (backbone, linear, prep), (spec, kwargs) = _timm_parts(net, source), source_spec(source, net)
    else:
        backbone, linear, prep = _named_parts(source, weights, num_classes)
        spec, kwargs = (str(source) if str(source).startswith(TORCHVISION_PREFIX) else name), {}
    head = HeteroscedasticHead(linear.in_features, num_classes, covariance="none")
    with torch.no_grad():
        head.loc.weight.copy_(linear.weight)
        head.loc.bias.copy_(linear.bias if linear.bias is not None else torch.zeros(num_classes))
    return Classifier(backbone, head, ModelConfig(spec, num_classes, {"covariance": "none"}, kwargs, prep))


def _harness_classifier(source: str, export: Optional[str], num_classes: int) -> "Classifier":
    """A harness ``model.pt`` (``export`` None) or export (``export``: its folder or hub id) for ``num_classes``.

    Raises:
        ValueError: non-finite weights, or a model of another number of classes.
    """
    from harness.models import Classifier

    model = Classifier.from_pretrained(export) if export else _load_model(source)
    check_finite(model.state_dict(), str(source))
    if model.config.num_classes != num_classes:
        raise ValueError(
            f"{source} predicts {model.config.num_classes} classes and the data has {num_classes}: "
            "give the data the model was trained on"
        )
    return model


def _named_parts(
    source: str, weights: "Optional[str | os.PathLike]", num_classes: int
) -> "tuple[nn.Module, nn.Linear, dict]":
    """``(backbone, output layer, preprocessing)`` of ``timm:NAME`` / ``torchvision:NAME`` built for ``num_classes``
    and loaded strictly from ``weights``.

    Raises:
        ValueError: an unknown name; no ``weights``; weights that do not fit (see :func:`load_classifier`).
    """
    name = str(source).split(":", 1)[1]
    if str(source).startswith(TORCHVISION_PREFIX):  # a name neither registry knows, before asking for its weights
        check_torchvision_name(name)
    else:
        check_timm_name(name)
    if weights is None:
        raise ValueError(
            f"{source} needs --weights FILE: a state dict with its classifier trained on the data's "
            f"{num_classes} classes"
        )
    state = read_state(weights)
    what = f"{weights} ({source} with {num_classes} classes)"
    fix = (
        f"give weights whose classifier has the data's {num_classes} classes, or the data the model was trained "
        "on (--data, or data overrides)"
    )
    if str(source).startswith(TORCHVISION_PREFIX):
        net = torchvision_model(name, num_classes=num_classes)
        load_weights(net, state, source=what, fix=fix)
        return (*split_torchvision(net, name), dict(TORCHVISION_PREPROCESSING))
    import timm

    net = timm.create_model(name, pretrained=False, num_classes=num_classes)
    load_weights(net, state, source=what, fix=fix)
    return _timm_parts(net, source)


def _timm_parts(net: nn.Module, source: str) -> "tuple[nn.Module, nn.Linear, dict]":
    """``(backbone, output layer, preprocessing)`` of a timm classifier ``net``; its classifier is taken off (the
    backbone gives pooled features).

    Raises:
        ValueError: an output layer that is not a linear layer, naming ``source`` and the fix.
    """
    linear = net.get_classifier()
    if not isinstance(linear, nn.Linear):
        raise ValueError(
            f"{source}'s output layer is a {type(linear).__name__}, not a linear layer: this model "
            "cannot become a harness classifier; fine-tune it with harness downstream instead"
        )
    prep = timm_preprocessing(net)
    net.reset_classifier(0)
    return net, linear, prep


def hub_reachable_or_cached(
    source: str, weights: "Optional[str | os.PathLike]", random_init: bool, offline: Optional[bool]
) -> Optional[bool]:
    """The ``offline`` to load ``source`` with, after one quick look (:func:`harness.network.unreachable`) at the
    Hugging Face Hub when ``timm:NAME``'s published weights would be downloaded from it (no ``weights``, no
    ``random_init``, not in offline mode, weights on the hub): ``offline`` itself when the hub answers (or no
    download is due); True when it does not but the weights are in the local cache (read from there, as
    ``HF_HUB_OFFLINE=1`` would). Without this look a machine without a network spends a minute in
    huggingface_hub's retries before the same refusal.

    Raises:
        ValueError: the hub cannot be reached and the weights are not cached (naming the hub, the reason and the
            fixes: ``--weights``, ``--random-init``, a network, ``HF_HUB_OFFLINE=1`` once they are cached); an unknown
            timm name; an ``HF_HUB_OFFLINE`` value neither on nor off.
    """
    name = str(source)[len(TIMM_PREFIX) :]
    if (
        not str(source).startswith(TIMM_PREFIX)
        or name.startswith((HF_HUB_PREFIX, LOCAL_DIR_PREFIX))
        or weights is not None
        or random_init
        or offline_mode(offline)
    ):
        return offline
    import timm.models
    from huggingface_hub import constants

    from harness.network import unreachable

    check_timm_name(name)
    cfg = timm.models.get_pretrained_cfg(name)
    if cfg is None or not cfg.hf_hub_id:
        return offline  # timm downloads from a URL (torch.hub, no retries) or has no weights: it says so itself
    reason = unreachable(constants.ENDPOINT)
    if reason is None:
        return offline
    if cached_weights(name) is not None:
        return True
    raise ValueError(
        f"no weights for timm:{name}: they are downloaded from the Hugging Face Hub ({constants.ENDPOINT}), which "
        f"cannot be reached from this machine ({reason}), and they are not in the local timm / Hugging Face cache: "
        "give a weights file with --weights FILE (.safetensors, .pth or a BiT .npz), or --random-init to start from "
        "random weights on purpose, or run where the hub can be reached (HF_ENDPOINT names a mirror; once the "
        "weights are cached, HF_HUB_OFFLINE=1 reads them without a network)"
    )


def load_source(
    source: str,
    weights: "Optional[str | os.PathLike]" = None,
    random_init: bool = False,
    num_classes: Optional[int] = None,
    head: Optional[dict] = None,
    offline: Optional[bool] = None,
) -> "Classifier":
    """A model from any source, checked before any work:

    - a harness ``model.pt``, or a folder written by ``Classifier.save_pretrained`` (also spelled
      ``local-dir:PATH``; ``hf-hub:ORG/NAME`` for its hub repository): the whole model, its own head and
      preprocessing (``weights`` must be None);
    - ``torchvision:NAME`` (``torchvision.models.list_models()``) with ``weights``, a torchvision state dict
      (``.pth``/``.pt``, or ``.safetensors``) loaded strictly, its classifier left out; torchvision's ImageNet
      normalisation; or ``random_init``;
    - ``timm:NAME`` (any timm registry name, optionally with a tag, e.g. ``timm:resnet50.a1_in1k``): the backbone
      built by timm, loaded from ``weights`` (``.safetensors``, a ``.pth``/``.pt`` state dict with or without its
      classifier, which ``pretrained_cfg['classifier']`` names; or a BiT / ViT ``.npz``), else with timm's published
      weights: downloaded by timm as usual, or only from the local timm / Hugging Face cache in offline mode
      (``offline=True``, or ``HF_HUB_OFFLINE=1`` in the environment), else, only with ``random_init``, randomly
      initialised;
    - timm's ``hf-hub:ORG/NAME`` and ``local-dir:PATH`` (a folder with timm's ``config.json`` and weights), also after
      ``timm:``: built and loaded by ``timm.create_model`` (offline: the repository's cached folder).

    A timm / torchvision source gets a new head on the backbone's pooled features: for ``num_classes`` classes when
    given (a zero-initialised homoscedastic layer, or ``head``: :class:`HeteroscedasticHead` options such as
    ``{"covariance": "low_rank"}``), ready to train; without ``num_classes`` a 1-output placeholder (one sigmoid
    output, ``[B, 1]``) for ``harness downstream`` to replace. A harness model keeps its own head unless ``num_classes``
    differs from its own (then a new head as above). Its ``preprocessing`` comes from the backbone's
    ``pretrained_cfg``.

    Raises:
        FileNotFoundError: no such ``model.pt`` or weights file.
        ValueError: an unknown timm name; no weights offline or none downloadable, or a Hugging Face Hub that does
            not answer and no cached weights (:func:`hub_reachable_or_cached`; the message names ``--weights``);
            an unreadable weights file or one with NaN values; weights that do not fit the architecture (the first
            missing and unexpected keys and the shapes that differ); ``weights`` given with a harness model or a
            source that holds its own; a file of a ``save_pretrained`` folder given for the folder; an empty
            ``local-dir:`` path, or one that is a file; ``num_classes`` < 1; ``random_init`` with ``weights``, or with
            a harness model (which holds trained weights): each pair contradicts itself.
    """
    from harness.models import Classifier, ModelConfig, fresh_head, replace_head

    check_weights_file(weights)  # a harness checkpoint: the model itself (--model), before any is built
    if random_init and weights is not None:
        raise ValueError(
            f"--random-init and --weights {weights} contradict each other: one starts {source} from random weights, "
            "the other loads them; give only one"
        )
    if num_classes is not None and (
        isinstance(num_classes, bool) or int(num_classes) != num_classes or num_classes < 1
    ):
        raise ValueError(
            f"num_classes must be a whole number >= 1 (the classes of the head to train), got {num_classes!r}"
        )
    export = export_source(source, offline)
    if export or not _named(source):
        if random_init and (export or Path(source).is_file()):
            raise ValueError(
                f"--random-init asks for untrained weights but {source} holds trained ones (a harness model): drop "
                "--random-init, or use timm:NAME for a randomly initialised backbone"
            )
        if weights is not None:
            raise ValueError(
                f"--weights goes with a timm:NAME or torchvision:NAME source; {source!r} is a harness "
                "model, which holds its own weights"
            )
        model = (
            Classifier.from_pretrained(export, local_files_only=offline_mode(offline))
            if export
            else _load_model(source)
        )
        if num_classes is None or num_classes == model.config.num_classes:
            return model
        return replace_head(model, num_classes, **(head or {}))
    offline = hub_reachable_or_cached(str(source), weights, random_init, offline)  # seconds, not a minute of retries
    backbone, prep = source_backbone(str(source), weights, random_init, offline)
    width = int(getattr(backbone, "head_hidden_size", None) or backbone.num_features)
    # the placeholder is one sigmoid output: a softmax over one class is refused (harness.heads.checks.check_sizes)
    head_cfg = {"covariance": "none", "link": "softmax" if num_classes else "sigmoid", **(head or {})}
    name, kwargs = source_spec(source, backbone)
    return Classifier(
        backbone,
        fresh_head(width, num_classes or 1, head_cfg),
        ModelConfig(name, num_classes or 1, head_cfg, kwargs, prep),
    )
