"""Models out of the harness the way timm users share them: a folder (or Hugging Face hub repository) holding
``model.safetensors``, ``config.json`` and a model card ``README.md``, written by
:meth:`harness.models.Classifier.save_pretrained` and read by ``Classifier.from_pretrained`` (both through
huggingface_hub's ``ModelHubMixin``, which also gives ``push_to_hub``).

Layout (``config.json``): timm's keys (``architecture``, ``num_classes``, ``num_features``, ``pretrained_cfg``,
``model_args``, ``label_names``) and a ``harness`` section: the format, the weights' layout, the
:class:`~harness.model_config.ModelConfig` (head options and τ, preprocessing), ``trained_on`` (the data), ``metrics``
and ``measured`` (the weights' digests and head evaluation options those facts were measured with).
``pretrained_cfg`` states one normalisation, the input the exported model expects, so transforms built from it
alone (timm's ``resolve_data_config(pretrained_cfg=...)`` and ``create_transform``) feed it correctly: for the
``timm`` layout, the plain timm model's (the backbone's own mean and std); for ``het_head``, the
:class:`~harness.models.Classifier`'s that ``from_pretrained`` builds (mean = std = 0.5: pixels to [-1, 1]; the
backbone's own statistics stay in the model config's ``preprocessing``, applied inside the model). Its ``classifier``
names the classifier's weights in the file (the timm layout), and is left out where no such weights exist.
Weights (``model.safetensors``), one of two layouts:

- ``timm``, for a homoscedastic head on a timm backbone: exactly the plain timm model's state dict (the backbone, and
  the head's linear layer, divided by τ, as timm's classifier, under every name of ``pretrained_cfg['classifier']``),
  checked at export to give the same logits in plain timm, so ``timm.create_model("local-dir:DIR", pretrained=True)``
  or ``timm.create_model(NAME, pretrained=True, num_classes=K, pretrained_cfg_overlay=dict(file=".../model.safetensors",
  num_classes=K))`` loads it;
- ``het_head``, for every other model (HET heads, torchvision backbones, timm models whose plain form differs): the
  backbone's state dict and the head's under ``het_head.``; timm refuses it (unexpected keys), the harness reads it.

This module is the format, as timm's ``_hub.py`` is: it writes a model's tensors and ``config.json`` and reads them
back (:func:`read_export`: the config checked whole by :func:`~harness.export_rules.check_export_config` before any
weights are read; the state dict, safetensors only, finite values); it never imports the model class, which builds
itself from what was read (``Classifier.from_pretrained``). It keeps the card's digest line (:data:`CARD_MARK`: an
edited card is never replaced); the card is :func:`harness.card.model_card`'s; :func:`harness.runs.export_run`
exports a run folder with its data and metrics.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from harness.export_rules import check_export_config, timm_name
from harness.io import LOCK_FILES, atomic_write_bytes, atomic_write_text, json_dumps, quote

EXPORT_FORMAT = "harness.export/1"
WEIGHTS_FILE, CONFIG_FILE, CARD_FILE = "model.safetensors", "config.json", "README.md"
LAYOUTS = ("timm", "het_head")
HEAD_PREFIX = "het_head."


@dataclass(frozen=True)
class ExportWriter:
    """Who writes an export, for :func:`check_export_place`: ``option`` and ``writer`` as its message names them, and
    ``own``: the one folder inside a harness output folder it may write (a run's own export ``<run>/pretrained``,
    :data:`harness.runs.RUN_EXPORT`, given as the run's resolved folder / the name), or None."""

    option: str = "save_directory"
    writer: str = "save_pretrained"
    own: Optional[Path] = None


def check_export_place(
    folder: "str | os.PathLike", by: Optional[ExportWriter] = None, inputs: "Optional[dict[Path, str]]" = None
) -> None:
    """An export's folder lies outside every run, shift, ensemble, export and other harness output folder
    (:func:`harness.folder_paths.check_outside_outputs`), but for ``by.own``: the rule of ``save_pretrained``, the one
    writer of exports (``harness.runs.export_run`` goes through it), checked before its lock is taken (audit15 A15-05);
    nor inside ``inputs`` (resolved folders -> how the message names them: the split folders of the exported run's
    data, :func:`harness.data.read_folders.data_read_folders`, audit25 A25-01).

    Raises:
        ValueError: naming ``by.option``, the folder, the output folder it is inside and the fix.
    """
    from harness.folder_paths import check_outside_outputs

    by = by or ExportWriter()
    if by.own is None or Path(folder).resolve() != Path(by.own):
        check_outside_outputs(folder, by.option, by.writer, inputs)


def prepare_folder(
    folder: "str | os.PathLike", model: Optional[torch.nn.Module] = None, overwrite: bool = False
) -> Path:
    """Check that ``folder`` may take an export of ``model``: new, empty (a lock's files, :data:`LOCK_FILES`, count as
    none), or an earlier export (only ``model.safetensors``, ``config.json`` with a ``harness`` section, ``README.md``;
    its card is removed to be written again) of the same weights (:func:`check_same_export`; any weights with
    ``overwrite``). The one check of ``save_pretrained`` (run again under the folder's lock) and of every path through
    it (``harness.runs.export_run``; huggingface_hub's ``push_to_hub`` saves into a new temporary folder).

    Raises:
        ValueError: a file, a broken symbolic link, a folder that cannot be written, or one holding files an export
            did not write (they are never replaced); an export of another model without ``overwrite``.
    """
    from harness.folder_paths import check_folder_path
    from harness.io import check_writable
    from harness.weights import read_config_json

    folder = check_folder_path(folder, "save_pretrained")
    check_writable(folder, f"save_pretrained's folder {folder}", "save into another folder")
    if not folder.is_dir():
        return folder
    names = {p.name for p in folder.iterdir()} - set(LOCK_FILES)  # save_pretrained holds its RunLock there
    others = sorted(names - {WEIGHTS_FILE, CONFIG_FILE, CARD_FILE})
    earlier = CONFIG_FILE in names and "harness" in _config_or_empty(folder / CONFIG_FILE, read_config_json)
    if others or (names and not earlier):
        listed = quote(", ".join(others or sorted(names)), 120)
        raise ValueError(
            f"{folder} holds files save_pretrained did not write ({listed}): give a new or empty folder "
            "(an export never replaces other files)"
        )
    if model is not None and not overwrite:
        check_same_export(model, folder, "the model being saved")
    card = folder / CARD_FILE
    if card.is_file() and not _card_is_ours_unedited(card):
        raise ValueError(
            f"{card} was edited after save_pretrained wrote it (or another tool wrote it): it is never "
            "replaced; move it aside (and copy your edits into the new card afterwards), or save into a "
            "new folder"
        )
    card.unlink(missing_ok=True)
    return folder


def check_same_export(model: torch.nn.Module, folder: "str | os.PathLike", source: str) -> None:
    """An export already in ``folder`` holds the weights ``model`` would be exported with (:func:`export_state`):
    writing it again is a rerun, not the replacement of another model's export. A folder without
    ``model.safetensors`` passes (:func:`prepare_folder` judges its other files).

    Raises:
        ValueError: an export of other weights (another run, or this run trained further since), naming the folder,
            the model it holds, ``source`` and the fix.
    """
    from safetensors.torch import load_file

    from harness.weights import read_config_json

    weights = Path(folder) / WEIGHTS_FILE
    if not weights.is_file() or weights.is_symlink():
        return
    new = export_state(model)[0]
    try:
        old = load_file(str(weights))
    except Exception:  # noqa: BLE001 -- unreadable weights: not known to be this model's
        old = {}
    same = old.keys() == new.keys() and all(
        old[k].dtype == new[k].dtype and old[k].shape == new[k].shape and torch.equal(old[k], new[k]) for k in new
    )
    if not same:
        info = _config_or_empty(Path(folder) / CONFIG_FILE, read_config_json).get("harness") or {}
        head = ((info.get("model") or {}).get("head") or {}) if isinstance(info, dict) else {}
        held = f"a {head.get('covariance', '?')} head, metrics {quote(repr(info.get('metrics')), 120)}"
        raise ValueError(
            f"{folder} holds an export of another model ({held}): its {WEIGHTS_FILE} is not the export of {source}, "
            "and exporting there would replace it; give another folder, or pass overwrite=True to replace it"
        )


def _config_or_empty(path: Path, read) -> dict:
    try:
        return read(path)
    except (OSError, ValueError):
        return {}


def export_state(model: torch.nn.Module) -> "tuple[dict[str, torch.Tensor], str, Optional[float]]":
    """``(tensors, layout, folded τ)`` of ``model`` (module docstring): the ``timm`` layout when the head is
    homoscedastic on a timm backbone and the plain timm model with those weights gives the same logits (checked on a
    random input in eval mode), else ``het_head``."""
    head = model.head
    backbone = {k: v.detach().contiguous() for k, v in model.backbone.state_dict().items()}
    if head.covariance_type == "none" and not model.config.backbone.startswith("torchvision:"):
        from harness.weights import classifier_names

        tau = float(head.temperature)
        weight, bias = (
            (head.loc.weight.detach() / tau, head.loc.bias.detach() / tau)
            if tau != 1.0
            else (head.loc.weight.detach(), head.loc.bias.detach())
        )
        names = classifier_names(model.backbone)
        state = {
            **backbone,
            **{f"{n}.{p}": t.clone().contiguous() for n in names for p, t in (("weight", weight), ("bias", bias))},
        }
        if names and _same_in_timm(model, state):
            return state, "timm", (tau if tau != 1.0 or head.learn_temperature else None)
    state = {**backbone, **{HEAD_PREFIX + k: v.detach().contiguous() for k, v in head.state_dict().items()}}
    return state, "het_head", None


def _architecture(model: torch.nn.Module) -> str:
    """The model's backbone name as timm's registry spells it (``timm:resnet18`` -> ``resnet18``)."""
    return timm_name(model.config.backbone)


def _same_in_timm(model: torch.nn.Module, state: dict) -> bool:
    """Whether ``timm.create_model(architecture, num_classes=K)`` takes ``state`` strictly and gives ``model``'s
    logits (softmax link) on a random input of the backbone's size, both in eval mode."""
    import timm

    net = timm.create_model(
        _architecture(model), pretrained=False, num_classes=model.num_classes, **model.config.backbone_kwargs
    )
    own = net.state_dict()
    if set(own) != set(state) or any(own[k].shape != v.shape for k, v in state.items()):
        return False
    net.load_state_dict(state, strict=True)
    size = tuple((getattr(model.backbone, "pretrained_cfg", None) or {}).get("input_size") or (3, 224, 224))
    x = torch.randn(2, *size, generator=torch.Generator().manual_seed(0))
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        with torch.no_grad():
            ours = model.head(model.backbone(x))
            theirs = net.eval()(x)
    finally:
        for m, mode in modes.items():
            m.training = mode
    if model.head.link != "softmax":
        return bool(torch.allclose(ours, theirs, rtol=1e-4, atol=1e-4))
    return bool(torch.allclose(ours.log_softmax(-1), theirs.log_softmax(-1), rtol=1e-4, atol=1e-4))


def input_normalisation(model: torch.nn.Module, layout: str) -> "tuple[list[float], list[float]]":
    """``(mean, std)`` (per channel, of [0, 1] pixels) of the input the export of ``model`` in ``layout`` expects:
    the plain timm model's for ``timm`` (the backbone's own, from the model config's ``preprocessing``), the
    :class:`~harness.models.Classifier`'s for ``het_head`` (the harness's [-1, 1]; the model renormalises to its
    backbone's own statistics inside)."""
    from harness.data.transforms import HARNESS_NORMALISATION

    prep = model.config.preprocessing if layout == "timm" else {}
    return list(prep.get("mean", HARNESS_NORMALISATION)), list(prep.get("std", HARNESS_NORMALISATION))


def export_config(model: torch.nn.Module, layout: str, folded: Optional[float], measured: dict) -> dict:
    """``config.json`` of an export (module docstring): ``pretrained_cfg`` with the one normalisation the exported
    model expects (:func:`input_normalisation`), the backbone's ``classifier`` key dropped unless the file holds
    those weights (the timm layout); ``measured``: what its card facts were measured with
    (:func:`harness.card_facts.export_state_facts`)."""
    from timm.models import filter_pretrained_cfg

    from harness.export_rules import evaluation_view
    from harness.weights import classifier_names

    prep = model.config.preprocessing
    cfg = filter_pretrained_cfg(dict(getattr(model.backbone, "pretrained_cfg", None) or {}), remove_source=True)
    for key in ("architecture", "tag", "label_names", "label_descriptions", "label_offset", "classifier"):
        cfg.pop(key, None)
    mean, std = input_normalisation(model, layout)
    cfg.update(
        mean=mean,
        std=std,
        interpolation=prep.get("interpolation", cfg.get("interpolation", "bilinear")),
        crop_pct=prep.get("crop_pct", cfg.get("crop_pct", 1.0)),
        num_classes=model.num_classes,
        custom_load=False,
    )
    names = classifier_names(model.backbone) if layout == "timm" else ()
    if names:
        cfg["classifier"] = names[0] if len(names) == 1 else list(names)
    view = evaluation_view(model.card_info)  # the view the metrics of its card were measured on
    if view and not cfg.get("fixed_input_size"):
        cfg.update(view, input_size=[int((cfg.get("input_size") or (3,))[0]), *view["input_size"][1:]])
        cfg.pop("test_input_size", None)
        cfg["pool_size"] = None
    config = {
        "architecture": _architecture(model),
        "num_classes": model.num_classes,
        "num_features": model.num_features,
        "pretrained_cfg": cfg,
    }
    if model.config.backbone_kwargs:
        config["model_args"] = dict(model.config.backbone_kwargs)
    if model.card_info.get("label_names"):
        config["label_names"] = list(model.card_info["label_names"])
    config["harness"] = {
        "format": EXPORT_FORMAT,
        "layout": layout,
        "folded_temperature": folded,
        "model": model.config.to_dict(),
        "trained_on": model.card_info.get("trained_on"),
        "metrics": model.card_info.get("metrics"),
        "measured": measured,
    }
    return config


def write_export(model: torch.nn.Module, folder: Path) -> None:
    """``model.safetensors`` and ``config.json`` of ``model`` in ``folder``, each written atomically.

    Raises:
        ValueError: a feature extractor (``reset_classifier(0)``: no head).
    """
    from safetensors.torch import save

    from harness.card_facts import export_state_facts
    from harness.model_config import require_head
    from harness.weights import classifier_names

    require_head(model)  # before any file is written
    state, layout, folded = export_state(model)
    model.card_info["layout"] = layout
    body, head = split_tensors(state, layout, classifier_names(model.backbone), str(folder))
    measured = export_state_facts(body, head, model)  # what the card's facts describe (audit23 A23-05/16)
    atomic_write_bytes(folder / WEIGHTS_FILE, save(state, metadata={"format": "pt"}))
    atomic_write_text(folder / CONFIG_FILE, json_dumps(export_config(model, layout, folded, measured), indent=2) + "\n")


def _files(model_id: str, **download: Any) -> "tuple[Path, Path]":
    """``(config.json, model.safetensors)`` of a folder, or of a hub repository through
    ``huggingface_hub.hf_hub_download`` (``download``: its revision, cache and token options)."""
    folder = Path(model_id).expanduser()
    if folder.is_dir():
        return folder / CONFIG_FILE, folder / WEIGHTS_FILE
    if folder.exists():
        raise ValueError(f"{model_id} is a file: give from_pretrained the folder written by save_pretrained")
    from huggingface_hub import hf_hub_download

    try:
        return tuple(Path(hf_hub_download(model_id, f, **download)) for f in (CONFIG_FILE, WEIGHTS_FILE))
    except Exception as e:  # noqa: BLE001 -- not a folder, not found on the hub, offline: say what to do
        raise ValueError(
            f"{model_id!r}: no such folder, and no {CONFIG_FILE} + {WEIGHTS_FILE} from the Hugging Face "
            f"hub ({type(e).__name__}): give a folder written by save_pretrained, or a hub repository "
            "id (ORG/NAME) reachable from here or in the local cache"
        ) from e


@dataclass
class Export:
    """What an export folder (or hub repository) holds, read and checked as a format: ``config.json`` (its
    ``harness`` section of :data:`EXPORT_FORMAT` and a known layout) and the safetensors weights. The model class
    builds itself from them (:meth:`harness.models.Classifier.from_pretrained`); this module never imports it."""

    config: dict
    state: "dict[str, torch.Tensor]"
    config_path: Path
    source: str

    @property
    def info(self) -> dict:
        return self.config["harness"]

    @property
    def layout(self) -> str:
        return self.info["layout"]

    @property
    def folded(self) -> Optional[float]:
        """τ folded into the classifier's weights (the timm layout), or None."""
        return self.info.get("folded_temperature") if self.layout == "timm" else None

    def card_info(self) -> dict:
        """The model's ``card_info``: what it was trained on, its metrics, the folded τ and the class names."""
        out = {k: self.info[k] for k in ("trained_on", "metrics") if self.info.get(k) is not None}
        if self.folded is not None:
            out["folded_temperature"] = self.folded
        if self.config.get("label_names"):
            out["label_names"] = list(self.config["label_names"])
        return out


def check_harness_section(config: dict, model_id: str) -> None:
    """Check ``config.json``'s ``harness`` section, format and layout, each with its own message.

    Raises:
        ValueError: no ``harness`` mapping (not an export: a plain timm folder); ``harness.format`` or
            ``harness.layout`` other than :data:`EXPORT_FORMAT` / one of :data:`LAYOUTS` (key, value, accepted ones).
    """
    info = config.get("harness")
    if not isinstance(info, dict):
        raise ValueError(
            f"{model_id}: {CONFIG_FILE} has no harness section (a mapping; got {quote(repr(info), 40)}): not written "
            "by Classifier.save_pretrained (a plain timm folder loads with harness.sources.load_source("
            "'local-dir:PATH'))"
        )
    for key, accepted in (("format", (EXPORT_FORMAT,)), ("layout", LAYOUTS)):
        if info.get(key) not in accepted:
            raise ValueError(
                f"{model_id}: {CONFIG_FILE} harness.{key} = {quote(repr(info.get(key)), 60)} is not "
                f"{' or '.join(map(repr, accepted))}: give the folder save_pretrained wrote, unchanged"
            )


def read_export(model_id: str, **download: Any) -> Export:
    """The files of an export folder or hub repository (module docstring), as an :class:`Export`.

    Raises:
        FileNotFoundError: no config.json or weights in the folder.
        ValueError: not an export of this format; a config.json that breaks the rules of
            :func:`~harness.export_rules.check_export_config`; unreadable or non-finite weights.
    """
    from harness.weights import read_config_json, read_state

    config_path, weights_path = _files(model_id, **download)
    config = read_config_json(config_path)
    check_harness_section(config, model_id)
    check_export_config(config, config_path)
    state = read_state(weights_path, what=str(model_id))
    return Export(config, state, config_path, f"{weights_path} ({model_id})")


def split_tensors(
    state: "dict[str, torch.Tensor]", layout: str, classifier: "Sequence[str]", source: str
) -> "tuple[dict, dict]":
    """``(backbone tensors, head tensors)`` of an export's weights ``state`` in ``layout``: the ``het_head`` layout's
    head under :data:`HEAD_PREFIX`; the ``timm`` layout's classifier (the first of the backbone's ``classifier``
    names, the others dropped) as the head's mean layer ``loc``.

    Raises:
        ValueError: a timm-layout export without its classifier's weight and bias (naming ``source``).
    """
    if layout == "timm":
        drop = {f"{n}.{p}" for n in classifier for p in ("weight", "bias")}
        if not classifier or not all(f"{classifier[0]}.{p}" in state for p in ("weight", "bias")):
            raise ValueError(
                f"{source}: no classifier {classifier[0] if classifier else ''}.weight / .bias for "
                "the timm layout; give the folder save_pretrained wrote, unchanged"
            )
        return (
            {k: v for k, v in state.items() if k not in drop},
            {f"loc.{p}": state[f"{classifier[0]}.{p}"] for p in ("weight", "bias")},
        )
    return (
        {k: v for k, v in state.items() if not k.startswith(HEAD_PREFIX)},
        {k[len(HEAD_PREFIX) :]: v for k, v in state.items() if k.startswith(HEAD_PREFIX)},
    )


#: the last line of a card save_pretrained wrote: the SHA-256 of the text above it, so that a card edited since (the
#: digest no longer matches) is told from one that may be written again
CARD_MARK = "<!-- het-harness card sha256: {} -->"


def _signed(text: str) -> str:
    body = text.rstrip("\n") + "\n"
    return body + CARD_MARK.format(hashlib.sha256(body.encode()).hexdigest()) + "\n"


def _card_is_ours_unedited(path: Path) -> bool:
    """Whether ``path`` is a card save_pretrained wrote and nobody edited since (its last line's digest matches)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    body, _, last = text.rstrip("\n").rpartition("\n")
    return _signed(body) == text.rstrip("\n") + "\n" and last.startswith(CARD_MARK.split("{")[0])
