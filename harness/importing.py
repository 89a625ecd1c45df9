"""``harness import``: a run folder for a model trained elsewhere (:func:`import_run`), which ``harness ensemble``,
``harness shift`` and ``harness report`` then take like an upstream run. Run folders themselves: :mod:`harness.runs`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional, Sequence

from omegaconf import OmegaConf

from harness.data.config import DataConfig
from harness.io import atomic_write_text
from harness.provenance import provenance

#: what harness import writes in its --out folder
IMPORT_FILES = ("model.pt", "config.yaml", "predictions.npz", "heldout_predictions.npz", "run.json", "metrics.json")


def import_run(
    source: str,
    data: DataConfig,
    out: "str | Path",
    weights: "Optional[str | Path]" = None,
    device: str = "cpu",
    progress: Optional[Callable[[str], None]] = None,
    overwrite: bool = False,
) -> Path:
    """A run folder for a model trained elsewhere, so ``harness ensemble``, ``harness shift`` and ``harness report``
    take it like an upstream run: ``model.pt`` (:func:`harness.sources.load_classifier`: the model with its own
    output layer for the data's classes), ``predictions.npz`` on ``data``'s evaluation split (and
    ``heldout_predictions.npz`` on its held-out split when it has one), ``config.yaml`` (``data``: the evaluation
    data; ``trained_on``: the data the model records it was trained on, a model.pt's or an export's, None when not
    recorded; the model's own head options; the source, under ``imported`` (as typed, and ``source_absolute``:
    :func:`source_absolute`, audit24 A24-07), which gives the run a method name of its
    own: :func:`harness.runs.run_method`), ``run.json`` (with ``data_path``: data.path as given and made absolute,
    :func:`harness.data.splits.absolute_path`, so :func:`harness.runs.data_config` reads a relative one as the import
    read it from any working folder, as an upstream run's: audit23 A23-17) and ``metrics.json`` (provenance, the
    --weights file's sha256, and ``weights_sha256``, the digest of the
    model.pt written, :func:`harness.model_identity.weights_digest`, which :func:`harness.checkpoint_files.check_run_model`
    compares, as an upstream run's: audit22 A22-03).
    ``progress`` gets a line per step and, while predicting, the images done and the time left
    (:class:`harness.progress.Steps`). With ``overwrite`` an ``out`` holding other files is written beside them
    (never over one of them).

    Raises:
        FileNotFoundError: no model or weights file, or missing data.
        ValueError: weights that do not fit, a model for other classes (another number of them, or other class
            names where the model records its own: :func:`harness.model_identity.check_classes_match`, before
            predicting), an evaluation or held-out split that is the split the model records it was trained on, or
            the split its run's config.yaml records for a run's own model.pt
            (:func:`harness.model_identity.check_not_trained_on` with :func:`trained_data`,
            before predicting), an ``out`` holding files of the
            names an import writes (even with ``overwrite``, which the message then does not offer) or other files
            (without ``overwrite``), one inside another run, export or harness output folder,
            or inside a split folder it reads or the model was trained with (:func:`_check_new_out`), or one that
            cannot be written
            (:func:`harness.io.check_writable`, before any work); a ``device`` this machine cannot run on
            (:func:`harness.training.precision.check_device`); predictions holding NaN (nothing is written: every
            prediction and its metrics are computed before the folder is made).
    """
    from harness.checkpoint_files import check_weights_file, measured_model
    from harness.data.splits import absolute_path
    from harness.heldout import RECORD_KEY, heldout_record
    from harness.io import RunLock
    from harness.model_identity import check_classes_match, check_not_trained_on, model_class_names
    from harness.models import save_model
    from harness.progress import Steps
    from harness.run_streams import read_split
    from harness.runs import predict_model
    from harness.sources import load_classifier
    from harness.training.precision import check_device

    check_device(device)
    check_weights_file(weights)  # a harness run's model.pt as --weights, before the data is read
    out = _check_new_out(Path(out), source, data, overwrite)
    steps = Steps(progress, "import", 4 + bool(data.heldout_split))
    steps.step(f"reading the evaluation split ({data.eval_split})")
    base = read_split(data, data.eval_split)  # a pack's index for shards, streamed by predict_model
    steps.step(f"loading the model {source}" + (f" with {weights}" if weights else ""))
    model = load_classifier(str(source), base.num_classes, weights)
    names = model_class_names(str(source), model)
    check_classes_match(str(source), model.head.num_classes, names, base.class_names, base.description)
    trained = dict(model.card_info.get("trained_on") or {}) or None  # a model.pt's or an export's own record
    # audit18 A18-12; a run's own model.pt by the run's data section, with its path (audit21 A21-04)
    ran_on, whence = trained_data(str(source), trained)
    check_not_trained_on(ran_on, data, str(source), whence)
    # every prediction and its metrics before anything is written: weights that give NaN leave no folder behind
    steps.step(f"predicting {data.eval_split}")
    preds = predict_model(model, data, device=device, source=str(out), base=base, steps=steps)
    if data.heldout_split:
        steps.step(f"predicting {data.heldout_split} (the held-out split)")
    held_base = read_split(data, data.heldout_split) if data.heldout_split else None
    held = (
        None
        if held_base is None
        else predict_model(model, data, device=device, source=str(out), base=held_base, steps=steps)
    )
    steps.step(f"writing {out}")
    metrics = {"metrics": preds.metrics(), "heldout_metrics": held.metrics() if held is not None else None}
    metrics[RECORD_KEY] = heldout_record(data.heldout_split, held_base)  # what it was evaluated on (audit25 A25-03)
    record = _source_record(source, weights)
    config = _import_config(out, record, model, data, trained)
    out.mkdir(parents=True, exist_ok=True)
    with RunLock(out, what="another harness import is writing there; wait for it, or give --out a folder of its own"):
        _check_out(out, overwrite)  # again: another import may have written it since (audit17 A17-09)
        save_model(model, out / "model.pt", extra={"imported": record, **({"trained_on": trained} if trained else {})})
        measured = measured_model(out / "model.pt")  # what metrics.json measured (check_run_model; audit22 A22-03)
        atomic_write_text(out / "config.yaml", OmegaConf.to_yaml(OmegaConf.create(config)))
        preds.save(out / "predictions.npz")
        if held is not None:
            held.save(out / "heldout_predictions.npz")
        meta = {**provenance(), "config": config, "eval_data": base.description, "class_names": base.class_names}
        meta["data_path"] = {"path": data.path, "absolute": absolute_path(data.source, data.path)}  # audit23 A23-17
        atomic_write_text(out / "run.json", json.dumps(meta, indent=1))
        summary = {**provenance(), "name": out.name, **metrics, "eval_data": base.description, "imported": record}
        atomic_write_text(out / "metrics.json", json.dumps({**summary, **measured}, indent=1))
    return out


def _check_new_out(out: Path, source: "str | Path", data: DataConfig, overwrite: bool) -> Path:
    """``out`` lies outside every other harness output folder, the split folders ``data`` reads (audit22 A22-11) and
    those of the data the model ``source`` was trained with (:func:`trained_read_folders`, audit25 A25-01)
    (:func:`harness.folder_paths.check_outside_outputs`), passes :func:`_check_out` and can be written.

    Raises:
        ValueError: naming --out, the folder it is inside or what it holds, and the fix.
    """
    from harness.data.splits import read_folders
    from harness.folder_paths import check_outside_outputs
    from harness.io import check_writable

    reads = read_folders(data.source, data.path, (data.eval_split, data.heldout_split))  # nor in them (A22-11)
    reads = {**trained_read_folders(source, "--model"), **reads}  # nor in the model's own data (audit25 A25-01)
    out = check_outside_outputs(out, "--out", "harness import", reads)  # not inside another run or an export
    _check_out(out, overwrite)
    return check_writable(out, f"--out {out}", "give --out a folder you can write")


def _check_out(out: Path, overwrite: bool) -> None:
    """``out`` holds no imported run, and no file of the names an import writes (a run folder: refused even with
    ``overwrite``, so it is not offered), nor, without ``overwrite``, other files (:func:`harness.io.check_output_folder`).

    Raises:
        ValueError: naming the folder, what it holds and the fix.
    """
    from harness.io import check_output_folder
    from harness.runs import run_config

    if "imported" in (run_config(out) if (out / "config.yaml").is_file() else {}):
        raise ValueError(f"{out} holds an imported run already: give --out a new folder (an import never replaces one)")
    check_output_folder(out, False, IMPORT_FILES, True, "harness import", "--out")
    check_output_folder(out, False, IMPORT_FILES, overwrite, "harness import", "--out")


def _import_config(out: Path, record: dict, model, data: DataConfig, trained: Optional[dict]) -> dict:
    """An imported run's ``config.yaml``: ``data`` the evaluation data, ``trained_on`` the model's own record of its
    training data (None: not recorded; audit18 A18-05), the head's options as the model has them (audit18 A18-09: a het
    model was recorded as homoscedastic), the source under ``imported``."""
    from dataclasses import asdict

    from harness.model_config import live_head_options

    head = live_head_options(model.head, model.config.head or {})
    return {
        "name": out.name,
        "output_dir": str(out),
        "imported": record,
        "model": {"backbone": model.config.backbone, "head": head},
        "data": asdict(data),
        "trained_on": trained,
        "train": {"loss": "nll"},
    }


def trained_data(model: "str | Path", recorded: Optional[dict]) -> "tuple[Optional[dict], str]":
    """``(data, whence)``: the data a model was trained on, for :func:`check_not_trained_on`, and where that is
    recorded. A harness ``model.pt`` (or ``checkpoints/*.pt``, or the run folder ``model``) in a run folder is the
    run's data section (its ``config.yaml``, with ``data.path`` as the run read it, :func:`harness.runs.data_config`: audit22 A22-02, which a model.pt's own record leaves out because
    cards never publish paths: audit21 A21-04), when that model.pt holds the run's own weights
    (:func:`harness.checkpoint_files.check_run_model` without the head's options: audit23 A23-20); in an imported run (``harness import``'s folder), its
    recorded ``trained_on``, or the data of the run whose model.pt it imported where that file still holds the same
    weights (:func:`harness.model_identity.weights_digest`); anything else (a timm or torchvision name, an export) ``recorded`` (a model.pt's
    or an export's ``trained_on``; None when not recorded). ``whence`` is ``"as it records"`` or names the
    config.yaml read (:func:`harness.model_identity.check_not_trained_on` takes both). A folder that cannot be read
    is not known to be that data.

    Raises:
        MovedDataError: the run's recorded data folder is gone and its data.path names another one from here
            (:func:`harness.moved_data.check_not_moved`, audit24 A24-09), rather than the run's data left unknown.
    """
    return _trained_data(model, recorded, 0)


def _trained_data(model: "str | Path", recorded: Optional[dict], depth: int) -> "tuple[Optional[dict], str]":
    from dataclasses import asdict

    from harness.checkpoint_files import check_run_model, followed, imported_source, run_folder
    from harness.model_identity import weights_digest
    from harness.moved_data import MovedDataError
    from harness.runs import data_config, run_config

    file = Path(str(model)).expanduser()
    file = followed(file / "model.pt" if file.is_dir() else file)  # a link names the run it leads to (audit23 A23-10)
    folder = run_folder(file)
    if file.suffix != ".pt" or not file.is_file() or not (folder / "config.yaml").is_file() or depth > 3:
        return recorded, "as it records"
    try:
        cfg = run_config(folder)
        if "imported" not in cfg:
            if file.name == "model.pt":
                check_run_model(folder, False)  # another model.pt in the run is not the run's data's (its weights)
            return asdict(data_config(folder)), f"as its run's {folder / 'config.yaml'} records"
        own = cfg.get("trained_on") or recorded
        came = imported_source(cfg.get("imported"))
        if came and Path(came).expanduser().is_file() and weights_digest(came) == weights_digest(file):
            up, whence = _trained_data(came, own, depth + 1)
            return (up, whence) if up is not own else (own, "as it records")
        return own, "as it records"
    except MovedDataError:  # its data's recorded folder gone, another here: said, not skipped (audit24 A24-09)
        raise
    except (OSError, ValueError):  # not a run this can read, or not the run's own model: not known to be its data
        return recorded, "as it records"


def _source_record(source: "str | Path", weights: "Optional[str | Path]") -> dict:
    """An import's ``imported`` record: ``source`` as typed, ``source_absolute`` (:func:`source_absolute`),
    ``weights`` resolved and their ``sha256``."""
    from harness.data.cache import file_digest

    return {
        "source": str(source),
        "source_absolute": source_absolute(source),  # its run, from any working folder (audit24 A24-07)
        "weights": str(Path(weights).resolve()) if weights else None,
        "sha256": file_digest(weights) if weights else None,
    }


def source_absolute(source: "str | Path") -> Optional[str]:
    """An import's ``--model`` as an absolute path (``~`` expanded, joined to the working folder, links kept, as
    run.json's ``data_path``), recorded as ``imported.source_absolute`` beside the ``source`` typed, so the run it
    imported is found from any working folder (audit24 A24-07); None for a name that is no local file or folder
    (``timm:resnet18``, a hub name)."""
    import os

    local = Path(str(source)).expanduser()
    return os.path.abspath(local) if local.exists() else None


def trained_read_folders(model: "str | Path", flag: str) -> "dict[Path, str]":
    """The folders the data a harness ``model.pt`` (or its run folder) was trained on reads (its run's data section,
    :func:`trained_data`, followed through an import to the run it imported: the training, evaluation and held-out
    splits, :func:`harness.data.splits.read_folders`; a manifest's image folders; a pack's split folders and those of
    the image folder or manifest its index records it was packed from) -> how a message names each, as
    :func:`harness.folder_paths.check_outside_outputs`' ``inputs`` of a writer that takes the model (harness fewshot,
    downstream, import, ensemble and report): an output folder inside one would become a
    class folder of the data the model was trained on (audit25 A25-01). Empty for a model known by name (timm,
    torchvision, an export: no path recorded) or one whose run cannot be read (its loader names why).

    Args:
        model: the model as given (``runs/a/model.pt``, ``runs/a``, ``timm:resnet18``).
        flag: how messages name it (``--model``, ``--upstream``; empty: by its path alone).

    Raises:
        MovedDataError: the run's data folder moved (:func:`trained_data`).
    """
    from harness.data.splits import pack_record, read_folders

    text = str(model).removeprefix("local-dir:")
    if ":" in text.split("/")[0] and not Path(text).expanduser().exists():  # timm:..., hf-hub:...: no run folder
        return {}
    data, whence = trained_data(text, None)
    if not isinstance(data, dict):
        return {}
    source, path = data.get("source"), data.get("path")
    splits = (data.get("train_split"), data.get("eval_split"), data.get("heldout_split"))
    found = dict(read_folders(source, path, splits))
    if source == "shards":  # a pack: the data it was packed from too
        for split in dict.fromkeys(s for s in splits if s):
            packed = pack_record(path, split)
            if packed and packed[0].get("source") in ("image_folder", "manifest"):
                more = read_folders(packed[0]["source"], packed[0].get("path"), (packed[1],))
                found.update({k: f"{v}, packed into data.path={path}" for k, v in more.items() if k not in found})
    said = f"the model {flag + ' ' if flag else ''}{model}"
    return {where: f"{how} of the run {said} was trained in ({whence}):" for where, how in found.items()}


def models_data(folders: "Sequence[str | Path]") -> "dict[Path, str]":
    """:func:`trained_read_folders` of the models of run folders (an imported run's: the data its model was trained
    with, which its own data section, the evaluation data, leaves out), for the ``inputs`` of harness ensemble's
    ``--out`` and harness report's ``--out-root`` (audit25 A25-01). A folder without a model, or whose data moved (its
    reader names that), adds none."""
    from harness.moved_data import MovedDataError

    found: "dict[Path, str]" = {}
    for f in folders:
        if not (Path(f) / "model.pt").is_file():
            continue
        try:
            found = {**trained_read_folders(Path(f) / "model.pt", ""), **found}
        except MovedDataError:  # the folder's own reader says where its data went
            continue
    return found
