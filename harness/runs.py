"""Reading a finished run folder: its config, method, evaluation data and model.

A run folder is what ``harness upstream`` (or a downstream fine-tune) writes: ``config.yaml``,
``model.pt``, ``predictions.npz``, ``metrics.json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import torch
from omegaconf import OmegaConf

from harness.config import load_config
from harness.data.loading import TransformedDataset
from harness.data.sources import DataConfig, ImageDataset, LabelSets, build_split
from harness.data.transforms import eval_transform
from harness.ensembles import Predictions
from harness.models import Classifier, load_model

METHOD_NAMES = {"none": "hom", "diagonal": "diag", "low_rank": "het", "parameter_efficient": "pe"}


def run_config(run_dir: "str | Path") -> dict:
    """The resolved ``config.yaml`` of a run as a dict.

    Raises:
        FileNotFoundError: the folder has no config.yaml (not a run folder).
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{str(run_dir)!r} is not a run folder (no config.yaml)")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def method_name(head: dict) -> str:
    """``hom``, ``diag``, ``het``, ``pe``; ``hetxl``/``hetxl-pe`` for pre-logit noise; ``-sigmoid`` suffix."""
    cov = head.get("covariance", "low_rank")
    name = METHOD_NAMES.get(cov, cov)
    if head.get("noise_space") == "pre_logits" and cov != "none":
        name = "hetxl" if cov == "low_rank" else f"hetxl-{name}"
    return name + ("-sigmoid" if head.get("link") == "sigmoid" else "")


def data_config(run_dir: "str | Path", overrides: "tuple[str, ...]" = ()) -> DataConfig:
    """The run's data section as a :class:`DataConfig`, with ``key=value`` overrides (data keys)."""
    return load_config(DataConfig, None, list(overrides), base=run_config(run_dir).get("data", {}))


def eval_batches(model: Classifier, data: DataConfig, split: Optional[str] = None, device: str = "cpu",
                 base: Optional[ImageDataset] = None) -> "Iterator[tuple[torch.Tensor, np.ndarray, np.ndarray]]":
    """Pre-logit features ``[B, D]``, targets and indices of ``split`` (default: the eval split; or
    the already-read ``base``), computed by ``model.backbone`` in eval mode, batch by batch."""
    base = base if base is not None else build_split(data, split or data.eval_split)
    if model.head.link == "sigmoid" and not base.multilabel:
        base = base.with_labels(LabelSets.from_labels(base.labels))
    ds = TransformedDataset(base, eval_transform(data.image_size, data.eval_resize))
    loader = torch.utils.data.DataLoader(ds, data.eval_batch_size, shuffle=False, num_workers=data.num_workers)
    model.eval().to(device)
    with torch.no_grad():
        for x, y, idx in loader:
            yield model.pre_logits(x.to(device)), np.asarray(y), np.asarray(idx)


def evaluate_checkpoint(run_dir: "str | Path", data: Optional[DataConfig] = None, split: Optional[str] = None,
                        device: str = "cpu") -> Predictions:
    """Load ``run_dir/model.pt`` and predict on a split (default: the run's own evaluation split).

    Only this one model is in memory; its predictions are returned.
    """
    model = load_model(Path(run_dir) / "model.pt")
    data = data or data_config(run_dir)
    base = build_split(data, split or data.eval_split)
    logits, targets, index = [], [], []
    for feats, y, idx in eval_batches(model, data, device=device, base=base):
        logits.append(model.head(feats).float().cpu().numpy())
        targets.append(y)
        index.append(idx)
    return Predictions(np.concatenate(logits).astype(np.float64), np.concatenate(targets), np.concatenate(index),
                       base.class_names, model.head.link, str(run_dir))
