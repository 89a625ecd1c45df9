"""Classifiers = a timm backbone (``num_classes=0``) + a :class:`~harness.heads.HeteroscedasticHead`.

A model carries its :class:`ModelConfig` (:mod:`harness.model_config`, with the check of one read from a file), and
a checkpoint stores that config beside the weights, so :func:`load_model` rebuilds the exact architecture with no other
input. The config also records the input normalisation the backbone was trained with (its ``preprocessing``); the
model applies it to the harness's images, so a backbone trained on ImageNet statistics sees them whatever loader fed it.
:func:`harness.sources.load_source` gives a model from any source: a ``model.pt``, a folder written by
:meth:`Classifier.save_pretrained` (or its hub repository), ``timm:NAME`` with a weights file or timm's own sources. A
:class:`Classifier` has timm's model interface (``forward_features``, ``forward_head``, ``reset_classifier``,
``num_features``, ``pretrained_cfg``, ``get_classifier``) and huggingface_hub's (``save_pretrained``,
``from_pretrained``, ``push_to_hub``: :mod:`harness.hub`).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any, Optional

import torch
from huggingface_hub import ModelHubMixin, errors
from torch import Tensor, nn

from harness import card, card_facts, export_rules, hub, hub_options, model_config
from harness.backbone_sources import create_backbone, hub_error, offline_mode, source_backbone
from harness.checkpoint_files import CHECKPOINT_FORMAT, not_a_model
from harness.data.transforms import HARNESS_NORMALISATION
from harness.heads import HeteroscedasticHead
from harness.io import LOCK_FILES, RunLock, atomic_torch_save
from harness.model_config import ModelConfig, check_backbone_kwargs, check_stored_config, live_head_options
from harness.weights import (  # noqa: F401 -- TIMM_PREFIX, TORCHVISION_PREFIX: part of this module's API
    TIMM_PREFIX,
    TORCHVISION_PREFIX,
    TORCHVISION_PREPROCESSING,
    check_timm_name,
    classifier_names,
    load_weights,
    read_state,
    split_torchvision,
    timm_preprocessing,
    torchvision_model,
)


class Classifier(
    nn.Module,
    ModelHubMixin,
    library_name="het-harness",
    license="apache-2.0",
    pipeline_tag="image-classification",
    tags=["image-classification", "heteroscedastic", "het-harness"],
    paper_url="https://arxiv.org/abs/2105.10305",
):
    """``head(backbone(x))``: timm backbone returning pooled pre-logits ``[B, D]``, then a head.

    timm's model interface: :meth:`forward_features`, :meth:`forward_head`, :meth:`reset_classifier`,
    :meth:`get_classifier`, ``num_classes``, ``num_features``, ``head_hidden_size``, ``pretrained_cfg``; and
    huggingface_hub's ``ModelHubMixin``: :meth:`save_pretrained` (``model.safetensors``, ``config.json``, a model card),
    ``Classifier.from_pretrained(folder_or_hub_id)`` and ``push_to_hub(repo_id)`` (:mod:`harness.hub`).

    Attributes:
        backbone: the timm model built with ``num_classes=0``.
        head: a :class:`HeteroscedasticHead` on ``D = backbone.head_hidden_size`` (``nn.Identity`` after
            ``reset_classifier(0)``: a feature extractor).
        config: the :class:`ModelConfig` that rebuilds this model.
        card_info: ``trained_on``, ``metrics``, ``label_names`` of the weights and evaluation options ``card_weights``
            records (:mod:`harness.card_facts`: what no longer holds is left out of a save, with a warning).
    """

    def __init__(self, backbone: nn.Module, head: HeteroscedasticHead, config: ModelConfig) -> None:
        super().__init__()
        self.backbone, self.head, self.config = backbone, head, config
        self.card_info, self.card_weights = {}, None  # card_weights: Optional[dict]
        self.head_hidden_size = int(head.in_features)
        self.num_features = int(getattr(backbone, "num_features", None) or head.in_features)
        mean, std = (config.preprocessing.get(k, HARNESS_NORMALISATION) for k in ("mean", "std"))
        self.renormalise = list(mean) != list(HARNESS_NORMALISATION) or list(std) != list(HARNESS_NORMALISATION)
        if self.renormalise:  # harness images are (p - 0.5) / 0.5; the backbone wants (p - mean) / std
            std_t, mean_t = torch.tensor(std).view(1, -1, 1, 1), torch.tensor(mean).view(1, -1, 1, 1)
            self.register_buffer("input_scale", 0.5 / std_t, persistent=False)
            self.register_buffer("input_shift", (0.5 - mean_t) / std_t, persistent=False)

    @property
    def num_classes(self) -> int:
        """K (0 for a feature extractor, after ``reset_classifier(0)``)."""
        return int(self.config.num_classes)

    @property
    def pretrained_cfg(self) -> dict:
        """timm's data config of this model (``timm.data.resolve_data_config(model=...)`` reads it): the backbone's
        ``pretrained_cfg`` with the input normalisation of the harness's loaders (mean = std = 0.5, since the model
        renormalises to its backbone's own statistics inside), the backbone's interpolation and crop, K classes and
        the classifier ``head``; for a model the harness trained, the input size and crop it was evaluated at
        (:func:`harness.export_rules.evaluation_view`)."""
        cfg = dict(getattr(self.backbone, "pretrained_cfg", None) or {})
        prep = self.config.preprocessing
        cfg.update(
            mean=HARNESS_NORMALISATION,
            std=HARNESS_NORMALISATION,
            num_classes=self.num_classes,
            classifier="head",
            interpolation=prep.get("interpolation", cfg.get("interpolation", "bilinear")),
            crop_pct=prep.get("crop_pct", cfg.get("crop_pct", 1.0)),
        )
        if not cfg.get("fixed_input_size"):  # the view it was evaluated on, for a model the harness trained
            cfg.update(export_rules.evaluation_view(self.card_info))
        return cfg

    default_cfg = pretrained_cfg

    def _renormalised(self, x: Tensor) -> Tensor:
        if self.renormalise:
            x = x * self.input_scale.to(x.dtype) + self.input_shift.to(x.dtype)
        return x

    def pre_logits(self, x: Tensor) -> Tensor:
        """Pooled features ``[B, D]`` for images ``[B, C, H, W]`` normalised as the harness's loaders do
        (pixels in [0, 1] mapped by (p - 0.5) / 0.5), renormalised to the backbone's own mean and std."""
        return self.backbone(self._renormalised(x))

    def forward_features(self, x: Tensor) -> Tensor:
        """timm's ``forward_features``: the backbone's unpooled features (e.g. ``[B, C, H', W']`` for a CNN,
        ``[B, tokens, C]`` for a ViT) for images ``[B, C, H, W]`` normalised as :meth:`pre_logits` takes them; for a
        torchvision backbone, which has no such method, the pooled features ``[B, D]``."""
        x = self._renormalised(x)
        return self.backbone.forward_features(x) if hasattr(self.backbone, "forward_features") else self.backbone(x)

    def forward_head(self, x: Tensor, pre_logits: bool = False, **head_kwargs: Any) -> Tensor:
        """timm's ``forward_head``: from :meth:`forward_features`' output, the pooled pre-logits ``[B, D]``
        (``pre_logits=True``) or the logits ``[B, K]`` of the head (``head_kwargs`` as in :meth:`forward`)."""
        if hasattr(self.backbone, "forward_head"):
            x = self.backbone.forward_head(x, pre_logits=True)
        return x if pre_logits else self.head(x, **head_kwargs)

    def forward(self, x: Tensor, **head_kwargs: Any) -> Tensor:
        """Logits ``[B, K]`` (see :meth:`HeteroscedasticHead.forward`) for images ``[B, C, H, W]``."""
        return self.head(self.pre_logits(x), **head_kwargs)

    def get_classifier(self) -> nn.Module:
        """timm's ``get_classifier``: the head."""
        return self.head

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None, **head_options: Any) -> None:
        """timm's ``reset_classifier``: a fresh head for ``num_classes`` classes, in place (the backbone kept): a
        zero-initialised homoscedastic linear layer unless ``head_options`` (:class:`HeteroscedasticHead` options,
        e.g. ``covariance="low_rank"``) say otherwise, as :func:`replace_head`; ``num_classes=0`` leaves the
        pooled features ``[B, D]`` as the output (a feature extractor; it cannot be saved). ``global_pool`` goes to
        the backbone's own ``reset_classifier``. The old head's metrics and class names leave :attr:`card_info`.

        Raises:
            ValueError: ``num_classes`` < 0, or bad head options.
        """
        if num_classes < 0:
            raise ValueError(f"num_classes must be >= 0 (0: features only), got {num_classes}")
        card_facts.keep_backbone_facts(self, self)  # the old head's metrics and class names go
        if global_pool is not None:
            self.backbone.reset_classifier(0, global_pool)
            self.num_features = int(getattr(self.backbone, "num_features", self.num_features))
            self.head_hidden_size = int(getattr(self.backbone, "head_hidden_size", None) or self.num_features)
        if num_classes == 0:
            self.head, self.config = nn.Identity(), dataclasses.replace(self.config, num_classes=0, head={})
            return
        head_cfg = {"covariance": "none", "link": "softmax", **head_options}
        self.head = fresh_head(self.head_hidden_size, num_classes, head_cfg)
        self.config = dataclasses.replace(self.config, num_classes=num_classes, head=head_cfg)

    def save_pretrained(
        self,
        save_directory: "str | os.PathLike",
        *,
        trained_on: Optional[dict] = None,
        metrics: Optional[dict] = None,
        overwrite: bool = False,
        _by: Optional[hub.ExportWriter] = None,
        **kwargs: Any,
    ) -> Optional[str]:
        """Write ``model.safetensors``, ``config.json`` (timm's layout, with the head options as the head has them now
        (:func:`harness.model_config.live_head_options`), τ, preprocessing, the data it was trained on and its
        metrics) and a model card ``README.md`` to ``save_directory`` (:func:`harness.hub.write_export`); ``kwargs``
        as huggingface_hub's ``ModelHubMixin.save_pretrained`` (``push_to_hub=True, repo_id=...``). A homoscedastic
        timm model is written as the plain timm model, so ``timm.create_model("local-dir:DIR", pretrained=True)`` loads
        it. One export writes a folder at a time: the write holds the folder's :class:`harness.io.RunLock` and checks
        the folder again under it; a folder only the lock made is removed again when the write fails. The lock's
        ``.lock`` file stays (never removed while another process may open it); it is no file of the export
        (:func:`harness.hub.prepare_folder`, ``from_pretrained``) and :meth:`push_to_hub` does not upload it.

        Args:
            trained_on: the training data (e.g. ``{"source": "digits", "image_size": 32}``), kept in
                :attr:`card_info`; ``metrics``: its evaluation metrics (``{"top1": 0.91, ...}``; a NaN or infinity is
                written as null, not measured, and left out of the card, with a warning:
                :func:`harness.export_rules.finite_metrics`); ``overwrite``: replace an export of other weights in
                ``save_directory`` (:func:`harness.hub.prepare_folder`). Facts of :attr:`card_info` measured with
                other weights or head evaluation options are left out, with a warning (:mod:`harness.card_facts`).

        Raises:
            ValueError: a folder inside a run's, shift's, ensemble's or other output folder (``_by``: export_run's
                own, :func:`harness.hub.check_export_place`); a folder holding files other than an earlier export's
                (without ``overwrite``); another process writing the folder (naming its PID and command); a feature
                extractor (no head); a head option set to a value it refuses; ``trained_on``, ``metrics`` or
                ``card_info['label_names']`` that break their rules (:func:`harness.export_rules.check_card_info`),
                before anything is written; a keyword argument huggingface_hub would drop
                (:func:`harness.hub_options.check_save_options`).
        """
        # huggingface_hub's push_to_hub calls this with its own config: every other name is checked
        hub_options.check_save_options({k: v for k, v in kwargs.items() if k != "config"}, "save_pretrained")
        config = dataclasses.replace(self.config, head=live_head_options(self.head, self.config.head))
        given = {k: v for k, v in (("trained_on", trained_on), ("metrics", metrics)) if v is not None}
        current, digests, note = card_facts.card_for_weights(self, tuple(given))  # facts of this model only
        info = {**current, **given}
        info["metrics"], nan_note = export_rules.finite_metrics(info.get("metrics"), "save_pretrained: metrics.")
        fix = "give the data's settings and the metrics measured"
        export_rules.check_card_info(info, self.num_classes, "save_pretrained", fix=fix)
        hub.check_export_place(save_directory, _by)  # not inside a run, shift or ensemble folder (audit15 A15-05)
        hub.prepare_folder(save_directory, self, overwrite)  # before anything changes (and the lock makes the folder)
        folder, made = Path(save_directory), not Path(save_directory).exists()
        busy = "another export is being written there; wait for it to finish, or save into another folder than "
        with RunLock(folder, what=busy + str(folder)):  # one export writes a folder at a time
            try:
                hub.prepare_folder(folder, self, overwrite)  # again: another export may have finished since
                for said in (note, nan_note):  # facts of other weights or options; NaN metrics (A19-03, A21-14)
                    if said:
                        warnings.warn(said, stacklevel=2)
                info = {k: dict(v) if k in given else v for k, v in info.items() if v is not None}
                self.card_info, self.card_weights = info, digests
                self.config = config  # the head's settings now (head.eval_mc_samples = 5 since it was built)
                return super().save_pretrained(folder, **kwargs)
            except BaseException:
                if made and folder.is_dir() and all(p.name in LOCK_FILES for p in folder.iterdir()):
                    for p in folder.iterdir():  # a folder only the lock made: removed, the lock still held
                        p.unlink(missing_ok=True)
                    folder.rmdir()
                raise

    def push_to_hub(self, repo_id: str, *, ignore_patterns: "list[str] | str | None" = None, **kwargs: Any) -> str:
        """huggingface_hub's ``push_to_hub`` (``save_pretrained`` into a new temporary folder, uploaded) with the
        lock files of that save (:data:`harness.io.LOCK_FILES`) never uploaded, whatever ``ignore_patterns`` says."""
        ignore = [ignore_patterns] if isinstance(ignore_patterns, str) else list(ignore_patterns or ())
        return super().push_to_hub(repo_id, ignore_patterns=[*ignore, *LOCK_FILES], **kwargs)

    def _save_pretrained(self, save_directory: Path) -> None:
        """huggingface_hub's hook: the weights and ``config.json`` (:func:`harness.hub.write_export`)."""
        hub.write_export(self, Path(save_directory))

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: "str | Path", **kwargs: Any) -> "Classifier":
        """huggingface_hub's ``from_pretrained`` (its keyword arguments pass through) with the harness's spellings of
        an export: a folder, bare or ``local-dir:PATH``, or a hub repository, ``ORG/NAME`` or ``hf-hub:ORG/NAME``.

        Raises:
            ValueError: a spelling that names no export (:func:`harness.weights.export_location`); a folder whose
                config.json is not a JSON object (before huggingface_hub reads it); a hub repository huggingface_hub
                did not give (:func:`harness.backbone_sources.hub_error`, the commands' message); see also
                :meth:`_from_pretrained`.
        """
        from harness.weights import export_location, read_config_json

        folder, name = export_location(str(pretrained_model_name_or_path))
        if folder is not None:  # read here (huggingface_hub's reader takes neither a BOM nor anything but an object)
            read_config_json(folder / hub.CONFIG_FILE, loader="Classifier.from_pretrained")
            options = {"revision": None, "cache_dir": None, "force_download": False, "local_files_only": False}
            return cls._from_pretrained(model_id=str(folder), **{"token": None, **options, **kwargs})
        try:
            return super().from_pretrained(name, **kwargs)
        except (errors.EntryNotFoundError, errors.RepositoryNotFoundError, errors.HfHubHTTPError) as e:
            offline = offline_mode(None) or bool(kwargs.get("local_files_only"))
            raise hub_error(str(pretrained_model_name_or_path), e, offline) from e

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision: Optional[str],
        cache_dir: "Optional[str | Path]",
        force_download: bool,
        local_files_only: bool,
        token: "Optional[str | bool]",
        map_location: str = "cpu",
        **others: Any,
    ) -> "Classifier":
        """huggingface_hub's hook behind ``Classifier.from_pretrained(folder_or_hub_id)``: the files of
        :func:`harness.hub.read_export` (``config.json`` checked by :func:`harness.hub.check_export_config`, its model
        config as a ``model.pt``'s is; the safetensors weights), built by :func:`build_model` (its ``num_features``
        checked against the model's) and loaded strictly, in eval mode on ``map_location``; card facts of other
        weights or head options are dropped, with a warning (:func:`card_facts.loaded_card`).

        Raises:
            FileNotFoundError: no config.json or weights in the folder.
            ValueError: a keyword argument it does not read (``num_classes=5``:
                :func:`harness.hub_options.check_load_options`); not an export of this format; a stored config that
                could open other files; a config.json whose keys break their rules or disagree with its harness
                section; unreadable or non-finite weights; weights that do not fit (keys and shapes listed).
        """
        hub_options.check_load_options(others)
        export = hub.read_export(
            model_id,
            revision=revision,
            cache_dir=cache_dir,
            force_download=force_download,
            local_files_only=local_files_only,
            token=token,
        )
        spec = ModelConfig.from_dict(export.info["model"])  # checked by read_export (check_stored_config)
        if export.folded is not None:  # the timm layout: τ is in the classifier's weights
            spec.head = {**spec.head, "temperature": 1.0, "learn_temperature": False}
        model = _build_stored(spec, export.config_path)
        export_rules.check_num_features(export, model.num_features)
        body, head = hub.split_tensors(export.state, export.layout, classifier_names(model.backbone), export.source)
        now = card_facts.export_state_facts(body, head, model)  # the file's tensors, as save_pretrained's
        fix = "give the folder save_pretrained wrote, unchanged"
        load_weights(model.backbone, body, source=export.source, fix=fix)

        if export.layout == "timm":  # the stored classifier is the head's mean layer; its other tensors are fresh
            head = {**model.head.state_dict(), **head}
        load_weights(model.head, head, source=export.source, fix=fix, config=str(export.config_path))
        model.card_info = card_facts.loaded_card(export.card_info(), export.info.get("measured"), now, model_id)
        model.card_weights = card_facts.card_state(model)
        return model.to(map_location).eval()

    def generate_model_card(self, *args: Any, **kwargs: Any):
        """The model card (``README.md``): huggingface_hub's ``ModelCard`` from :data:`harness.card.CARD_TEMPLATE`."""
        return card.model_card(self, **kwargs)


def fresh_head(width: int, num_classes: int, head_cfg: dict) -> HeteroscedasticHead:
    """A new head; a homoscedastic one zero-initialised (logits exactly 0: the paper's transfer rule, Sec. 4.2)."""
    head = HeteroscedasticHead(width, num_classes, **head_cfg)
    if head_cfg.get("covariance") == "none":
        nn.init.zeros_(head.loc.weight)
        nn.init.zeros_(head.loc.bias)
    return head


def build_model(config: "ModelConfig | dict", pretrained_file: Optional[str] = None) -> Classifier:
    """Build a :class:`Classifier` from a config (timm or torchvision backbone + our head on its pre-logits).

    With ``pretrained_file`` the backbone starts from those weights, loaded as :func:`harness.sources.load_source`
    loads a ``timm:NAME`` / ``torchvision:NAME`` source (strictly, the file's classifier left out), and the model's
    ``preprocessing`` becomes the backbone's own (unless the config gives one): pretraining a HET head on a
    pretrained backbone feeds it the normalisation its weights were trained with.

    Raises:
        ValueError: unknown backbone, backbone options the harness sets itself, cannot use or out of their rules
            (:func:`harness.model_config.check_backbone_kwargs`) or that timm refuses (its message, named:
            :func:`harness.backbone_sources.create_backbone`), a missing ``pretrained_file``, weights that do not
            fit (keys and shapes listed), or invalid head options (see :class:`HeteroscedasticHead`).
    """
    if isinstance(config, dict):
        config = ModelConfig.from_dict(config)
    check_backbone_kwargs(config.backbone_kwargs, "backbone_kwargs")
    if pretrained_file is not None:
        if not Path(pretrained_file).is_file():
            raise ValueError(f"pretrained_file {pretrained_file!r} does not exist; give a local weights file")
        backbone, prep = source_backbone(config.backbone, pretrained_file, **config.backbone_kwargs)
        config = dataclasses.replace(config, preprocessing=dict(config.preprocessing or prep))
    else:
        backbone = create_backbone(config.backbone, None, **config.backbone_kwargs)
    width = int(getattr(backbone, "head_hidden_size", None) or backbone.num_features)
    head = HeteroscedasticHead(width, config.num_classes, **config.head)
    return Classifier(backbone, head, config)


def _build_stored(spec: ModelConfig, source: "str | os.PathLike") -> Classifier:
    """:func:`build_model` of a config read from ``source``; a value the head or backbone refuses names the file."""
    try:
        return build_model(spec)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"{source}: its stored model config does not build a model ({e}); give the file the model was saved with"
        ) from None


def replace_head(model: Classifier, num_classes: int, **head_kwargs: Any) -> Classifier:
    """Drop the whole head (mean, covariance layers, temperature); attach a fresh one for transfer.

    The new head defaults to a zero-initialised homoscedastic linear softmax layer (the transfer rule of the paper's
    Sec. 4.2: logits are exactly zero before fine-tuning). The backbone is shared with ``model``, not copied.

    Returns:
        A new :class:`Classifier` with an updated config; of ``model``'s :attr:`~Classifier.card_info`, the
        backbone's ``trained_on`` alone (:func:`harness.card_facts.backbone_card`: no metrics, no class names).
    """
    head_cfg = {"covariance": "none", "link": "softmax", **head_kwargs}
    head = fresh_head(model.head_hidden_size, num_classes, head_cfg)
    new = Classifier(model.backbone, head, dataclasses.replace(model.config, num_classes=num_classes, head=head_cfg))
    card_facts.keep_backbone_facts(model, new)
    return new


def save_model(model: Classifier, path: "str | os.PathLike", extra: Optional[dict] = None) -> Path:
    """Write ``{format, config, state_dict, extra}`` atomically (the config with the head's options as the head has
    them now: :func:`harness.model_config.live_head_options`); :func:`load_model` reads it back.

    Raises:
        ValueError: a feature extractor (``reset_classifier(0)``), which has no head to rebuild; a head option set on
            the head to a value it refuses.
    """
    model_config.require_head(model)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "config": dataclasses.replace(model.config, head=live_head_options(model.head, model.config.head)).to_dict(),
        "state_dict": model.state_dict(),
        "extra": extra or {},
    }
    return atomic_torch_save(payload, path)


def read_checkpoint(path: "str | os.PathLike", mmap: bool = False) -> dict:
    """Load a checkpoint written by :func:`save_model` (tensors on CPU, no code execution), its stored config
    checked by :func:`check_stored_config`. ``mmap``: map the tensors rather than read them (a reader of the record
    alone, e.g. ``extra``, then reads little of a large file).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: not a harness model checkpoint, or a stored config that could open other files.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}; pass the model.pt written by a harness run")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as e:  # not a torch file, or one holding arbitrary objects
        raise ValueError(
            f"{str(path)!r} cannot be read as a harness model checkpoint ({type(e).__name__}); pass the "
            "model.pt written by a harness run"
        ) from e
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise not_a_model(path, payload.get("format") if isinstance(payload, dict) else None)
    check_stored_config(payload.get("config"), str(path))
    return payload


def load_model(path: "str | os.PathLike", map_location: "str | torch.device" = "cpu") -> Classifier:
    """Rebuild the model recorded in a checkpoint and load its weights (strict); its ``extra['trained_on']`` (the data
    it was trained on, as the run recorded it) as :attr:`Classifier.card_info`'s. Raises FileNotFoundError, ValueError:
    see :func:`read_checkpoint`; ValueError: weights that do not match the recorded architecture (keys named)."""
    payload = read_checkpoint(path)
    model = _build_stored(ModelConfig.from_dict(payload["config"]), path)
    load_weights(model, payload["state_dict"], source=str(path), config=f"the model config stored in {path}")
    model.card_info.update({k: v for k, v in (payload.get("extra") or {}).items() if k == "trained_on"})
    model.card_weights = card_facts.card_state(model)
    return model.to(map_location)


def count_parameters(module: nn.Module) -> int:
    """Number of parameters (trainable or not) of ``module``."""
    return sum(p.numel() for p in module.parameters())
