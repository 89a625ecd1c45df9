"""Reading run folders: the one place that knows their layout.

A run folder is what ``harness upstream`` (or a downstream fine-tune) writes: ``config.yaml``,
``model.pt``, ``predictions.npz`` (and ``heldout_predictions.npz`` with ``data.heldout_split``),
``metrics.json``. An ensemble folder (``harness ensemble``) holds ``predictions.npz`` too.

Layering: :mod:`harness.uncertainty.predictions` <- this module <- :mod:`harness.uncertainty.ensembles`,
:mod:`harness.report`; it imports neither of the last two. Model and loader modules (timm, torchvision) are
imported inside the functions that re-predict, so reading predictions stays light.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Optional

import numpy as np
import torch
from omegaconf import OmegaConf

from harness.config import load_config
from harness.data.config import DataConfig
from harness.data.dataset import ImageDataset, LabelSets
from harness.data.sources import build_split
from harness.io import atomic_write_bytes, atomic_write_text
from harness.uncertainty.predictions import Predictions

if TYPE_CHECKING:
    from harness.models import Classifier

METHOD_NAMES = {"none": "hom", "diagonal": "diag", "low_rank": "het", "parameter_efficient": "pe"}


#: what a finished run's compact record keeps: enough to report on it and to count it as done (no
#: checkpoints; the final model.pt is kept because the covariance analysis and shift predictions need it)
RECORD_FILES = ("config.yaml", "run.json", "metrics.json", "predictions.npz", "heldout_predictions.npz", "model.pt")


def save_record(run_dir: "str | Path", dest: "str | Path") -> bool:
    """Copy a finished run's :data:`RECORD_FILES` to ``dest`` (predictions recompressed with
    ``np.savez_compressed``), atomically file by file; a record whose ``metrics.json`` is already
    identical is left alone. Returns whether anything was written (False also for an unfinished run)."""
    run_dir, dest = Path(run_dir), Path(dest)
    if not ((run_dir / "metrics.json").is_file() and (run_dir / "model.pt").is_file()):
        return False
    if (dest / "metrics.json").is_file() and (dest / "metrics.json").read_bytes() == (run_dir / "metrics.json").read_bytes():
        return False
    dest.mkdir(parents=True, exist_ok=True)
    for name in RECORD_FILES:
        src = run_dir / name
        if not src.is_file():
            continue
        if name.endswith(".npz"):
            buf = io.BytesIO()
            with np.load(src, allow_pickle=False) as z:
                np.savez_compressed(buf, **{k: z[k] for k in z.files})
            atomic_write_bytes(dest / name, buf.getvalue())
        elif name != "metrics.json":
            atomic_write_bytes(dest / name, src.read_bytes())
    atomic_write_bytes(dest / "metrics.json", (run_dir / "metrics.json").read_bytes())  # last: marks it complete
    return True


def restore_record(record: "str | Path", run_dir: "str | Path") -> bool:
    """Recreate a finished run folder from its record (:func:`save_record`) when the folder holds no
    finished run; returns whether it did. The run then counts as done (``upstream.train``)."""
    record, run_dir = Path(record), Path(run_dir)
    if (run_dir / "metrics.json").is_file() or not (record / "metrics.json").is_file():
        return False
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in RECORD_FILES:
        if (record / name).is_file() and name != "metrics.json":
            atomic_write_bytes(run_dir / name, (record / name).read_bytes())
    atomic_write_bytes(run_dir / "metrics.json", (record / "metrics.json").read_bytes())
    return True


def load_heldout(run_dir: "str | Path") -> Optional[Predictions]:
    """A run's (or ensemble's) ``heldout_predictions.npz`` if it saved one (``data.heldout_split``), else None."""
    path = Path(run_dir) / "heldout_predictions.npz"
    return Predictions.load(path) if path.is_file() else None


def save_ensemble(out: "str | Path", preds: Predictions, heldout: Optional[Predictions], spec: str) -> None:
    """Write an ensemble folder: ``predictions.npz``, ``heldout_predictions.npz`` (or remove a previous
    ensemble's), remove a previous ensemble's ``shift/`` sets, and last ``ensemble.json`` (``spec``, the
    completion marker), each file atomically."""
    out = Path(out)
    preds.save(out / "predictions.npz")
    if heldout is not None:
        heldout.save(out / "heldout_predictions.npz")
    elif (out / "heldout_predictions.npz").is_file():
        (out / "heldout_predictions.npz").unlink()  # a previous ensemble's, not this one's
    if (out / "shift").exists():  # a previous ensemble's shift sets (harness.shift.predict.average_ensemble redoes them)
        shutil.rmtree(out / "shift")
    atomic_write_text(out / "ensemble.json", spec)


def ensemble_spec(ens_dir: "str | Path") -> Optional[dict]:
    """An ensemble folder's ``ensemble.json`` (members, method, summary, ...), or None if it has no readable one."""
    path = Path(ens_dir) / "ensemble.json"
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def ensemble_members(ens_dir: "str | Path") -> "list[Path]":
    """The member run folders an ensemble folder's ``ensemble.json`` lists.

    Raises:
        FileNotFoundError: not an ensemble folder (no readable ``ensemble.json`` listing members).
    """
    spec = ensemble_spec(ens_dir)
    if not spec or not spec.get("members"):
        raise FileNotFoundError(f"{str(ens_dir)!r} is not an ensemble folder (no ensemble.json listing members); "
                                "build it with harness ensemble")
    return [Path(m) for m in spec["members"]]


def run_config(run_dir: "str | Path") -> dict:
    """The resolved ``config.yaml`` of a run as a dict.

    Raises:
        FileNotFoundError: the folder has no config.yaml (not a run folder).
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{str(run_dir)!r} is not a run folder (no config.yaml); pass the folder that "
                                "harness upstream wrote")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


def run_head(run_dir: "str | Path") -> dict:
    """The ``model.head`` section of a run's config (``{}`` if absent)."""
    return run_config(run_dir).get("model", {}).get("head", {}) or {}


def run_summary(run_dir: "str | Path") -> dict:
    """A run's ``metrics.json`` (final metrics, ``command``, ``eval_data``, ...), or ``{}`` if it has none."""
    path = Path(run_dir) / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def method_name(head: dict) -> str:
    """``hom``, ``diag``, ``het``, ``pe``; ``hetxl``/``hetxl-pe`` for pre-logit noise; ``-sigmoid`` suffix."""
    cov = head.get("covariance", "low_rank")
    name = METHOD_NAMES.get(cov, cov)
    if head.get("noise_space") == "pre_logits" and cov != "none":
        name = "hetxl" if cov == "low_rank" else f"hetxl-{name}"
    return name + ("-sigmoid" if head.get("link") == "sigmoid" else "")


def clean_data(data: DataConfig) -> DataConfig:
    """The same data with the clean labels: cifar10n's ``clean`` label set, no synthetic label noise
    (synthetic noise is applied to the training split only; see ``upstream.train``)."""
    from dataclasses import replace

    return replace(data, label_set="clean", label_noise={})


def noise_transition(run_dir: "str | Path") -> Optional[np.ndarray]:
    """The empirical label-noise transition T ``[K, K]`` (T[c, j] = P(noisy j | clean c)) of a run's
    training split: the one its synthetic noise recorded in ``run.json``, or, for a cifar10n run on
    human labels, clean against the run's label set on the training images; None for clean labels.
    """
    meta = json.loads((Path(run_dir) / "run.json").read_text()) if (Path(run_dir) / "run.json").is_file() else {}
    noise = meta.get("label_noise") or {}
    if noise.get("transition") and noise.get("kind", "none") != "none":
        return np.asarray(noise["transition"], dtype=np.float64)
    data = data_config(run_dir)
    if data.source != "cifar10n" or data.label_set == "clean" or data.multilabel:
        return None
    from harness.data.noise import empirical_transition

    noisy = build_split(data, data.train_split)
    clean = build_split(clean_data(data), data.train_split)
    return empirical_transition(clean.labels, noisy.labels, len(noisy.class_names))


#: suffix of a method name by training loss (``train.loss``; ``nll`` has none)
LOSS_SUFFIX = {"forward": "-fwd", "label_smoothing": "-ls"}


def run_method(run_dir: "str | Path") -> str:
    """A run's method name: :func:`method_name` of its head, with the training loss's suffix
    (``hom-fwd``: forward-corrected loss, ``hom-ls``: label smoothing)."""
    cfg = run_config(run_dir)
    loss = (cfg.get("train") or {}).get("loss", "nll")
    return method_name((cfg.get("model") or {}).get("head") or {}) + LOSS_SUFFIX.get(loss, "")


def data_config(run_dir: "str | Path", overrides: "tuple[str, ...]" = ()) -> DataConfig:
    """The run's data section as a :class:`DataConfig`, with ``key=value`` overrides (data keys)."""
    return load_config(DataConfig, None, list(overrides), base=run_config(run_dir).get("data", {}))


def eval_batches(model: "Classifier", data: DataConfig, split: Optional[str] = None, device: str = "cpu",
                 base: Optional[ImageDataset] = None) -> "Iterator[tuple[torch.Tensor, np.ndarray, np.ndarray]]":
    """Pre-logit features ``[B, D]``, targets and indices of ``split`` (default: the eval split; or
    the already-read ``base``), computed by ``model.backbone`` in eval mode, batch by batch, through
    the evaluation loader upstream training uses (:func:`harness.data.batched.make_loader`), so
    re-predicting a run reproduces its saved predictions."""
    from harness.data.batched import make_loader

    base = base if base is not None else build_split(data, split or data.eval_split)
    if model.head.link == "sigmoid" and not base.multilabel:
        base = base.with_labels(LabelSets.from_labels(base.labels))
    loader = make_loader(data, base, train=False)[0]
    model.eval().to(device)
    with torch.no_grad():
        for x, y, idx in loader:
            yield model.pre_logits(x.to(device)), np.asarray(y), np.asarray(idx)


def predict_checkpoint(run_dir: "str | Path", data: Optional[DataConfig] = None, split: Optional[str] = None,
                        device: str = "cpu") -> Predictions:
    """Load ``run_dir/model.pt`` and predict on a split (default: the run's own evaluation split).

    Only this one model is in memory; its predictions are returned.
    """
    from harness.models import load_model

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
