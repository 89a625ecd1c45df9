"""Run and ensemble folders: the one place that reads them (their shift sets: :mod:`harness.shift.store`; an
ensemble folder is written by :mod:`harness.ensemble_folder`).

A run folder is what ``harness upstream`` (or a downstream fine-tune) writes: ``config.yaml``,
``model.pt``, ``predictions.npz`` (and ``heldout_predictions.npz`` with ``data.heldout_split``),
``metrics.json``, ``run.json``. An ensemble folder (:func:`harness.ensemble_folder.build_ensemble`,
``harness ensemble``) holds ``predictions.npz`` (and ``heldout_predictions.npz``) and, last, ``ensemble.json``.

Layering: :mod:`harness.uncertainty` (computations on predictions) <- this module <- :mod:`harness.shift`,
:mod:`harness.report`, the stages. Model and loader modules (timm, torchvision) are imported inside the
functions that re-predict, so reading predictions stays light.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence

import numpy as np
import torch
from omegaconf import OmegaConf

from harness.checkpoint_files import check_run_model
from harness.config import load_config
from harness.data.config import DataConfig
from harness.data.dataset import ImageDataset
from harness.data.sources import build_split
from harness.folder_kinds import check_kind, ensemble_json
from harness.heads.variants import VARIANTS
from harness.heldout import (
    HELDOUT_FILE,
    check_heldout_file,
    check_heldout_record,
    check_stored_labels,
    read_heldout_split,
)
from harness.io import read_json_object
from harness.model_identity import check_classes_match, check_distinct_predictions, model_class_names
from harness.moved_data import check_ensemble_path, check_members_here, check_not_moved
from harness.records import RECORD_FILES, restore_record, save_record  # noqa: F401 (read with the run folders)
from harness.run_record import check_recorded_config
from harness.run_streams import is_stream, pack_clean_heldout, read_split, split_batches
from harness.training.predict import predict_logits
from harness.uncertainty.predictions import Predictions

if TYPE_CHECKING:
    from harness.models import Classifier
    from harness.progress import Steps


def load_heldout(run_dir: "str | Path") -> Optional[Predictions]:
    """A run's (or ensemble's) ``heldout_predictions.npz`` if it saved one (``data.heldout_split``), else None.

    Raises:
        FileNotFoundError: the file of a run that wrote one is missing (:func:`harness.heldout.check_heldout_file`).
    """
    path = Path(run_dir) / HELDOUT_FILE
    if path.is_file():
        return Predictions.load(path)
    check_heldout_file(run_dir)  # only a run without a held-out split lacks it (audit25 A25-04)
    return None


def ensemble_spec(ens_dir: "str | Path") -> Optional[dict]:
    """An ensemble folder's ``ensemble.json`` (members, method, summary, ...), or None if it has none.

    Raises:
        ValueError: not valid JSON, not a JSON object, an ensemble of sweeps (:func:`harness.folder_kinds.ensemble_json`).
    """
    return ensemble_json(ens_dir)


def ensemble_members(ens_dir: "str | Path") -> "list[Path]":
    """The member run folders an ensemble folder's ``ensemble.json`` lists.

    Raises:
        FileNotFoundError: not an ensemble folder (no ensemble.json listing members); MovedDataError: a member gone.
    """
    spec = ensemble_spec(ens_dir)
    if not spec or not spec.get("members"):
        why = "no ensemble.json listing members); build it with harness ensemble"
        raise FileNotFoundError(f"{str(ens_dir)!r} is not an ensemble folder ({why}")
    check_members_here(ens_dir, spec)  # a moved project's ensemble names where its members are (audit25 A25-02)
    return [Path(m) for m in spec["members"]]


def run_config(run_dir: "str | Path") -> dict:
    """The resolved ``config.yaml`` of a run as a dict: the settings its ``run.json`` recorded (audit26 A26-01).

    Raises:
        FileNotFoundError: no config.yaml (not a run folder). ValueError: edited since (:mod:`harness.run_record`).
    """
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"{str(run_dir)!r} is not a run folder (no config.yaml); pass the folder that harness upstream wrote"
        )
    stat, meta = path.stat(), path.with_name("run.json")  # a report reads a config often: parsed once per version
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, meta.stat().st_mtime_ns if meta.is_file() else 0)
    if key not in _CONFIGS:
        _CONFIGS[key] = check_recorded_config(run_dir, OmegaConf.to_container(OmegaConf.load(path), resolve=True))
    return copy.deepcopy(_CONFIGS[key])


#: parsed run configs by (path, modification time, size, run.json's time): :func:`run_config`'s cache
_CONFIGS: "dict[tuple[str, int, int, int], dict]" = {}


def run_head(run_dir: "str | Path") -> dict:
    """The ``model.head`` section of a run's config (``{}`` if absent)."""
    return run_config(run_dir).get("model", {}).get("head", {}) or {}


def run_summary(run_dir: "str | Path") -> dict:
    """A run's ``metrics.json`` (final metrics, ``command``, ``eval_data``, ...), or ``{}`` if it has none.

    Raises:
        ValueError: a ``metrics.json`` that is not valid JSON or not a JSON object, naming it and the fix.
    """
    return read_json_object(Path(run_dir) / "metrics.json") or {}


def method_name(head: dict) -> str:
    """The variant's short name (:attr:`~harness.heads.variants.CovarianceVariant.transfer_name`: ``hom``, ``diag``,
    ``het``, ``pe``); ``hetxl``/``hetxl-pe`` for pre-logit noise; ``-sigmoid`` suffix."""
    cov = head.get("covariance", "low_rank")
    name = VARIANTS[cov].transfer_name if cov in VARIANTS else cov
    if head.get("noise_space") == "pre_logits" and cov != "none":
        name = "hetxl" if cov == "low_rank" else f"hetxl-{name}"
    return name + ("-sigmoid" if head.get("link") == "sigmoid" else "")


def clean_data(data: DataConfig) -> DataConfig:
    """The same data with the clean labels: cifar10n's ``clean`` label set, no synthetic label noise
    (synthetic noise is applied to the training split only; see ``harness.upstream.train``)."""
    return replace(data, label_set="clean", label_noise={})


def noise_transition(run_dir: "str | Path") -> Optional[np.ndarray]:
    """The empirical label-noise transition T ``[K, K]`` (T[c, j] = P(noisy j | clean c)) of a run's
    training split: the one its synthetic noise recorded in ``run.json``, or, for a cifar10n run on
    human labels, clean against the run's label set on the training images; None for clean labels.

    Raises:
        ValueError: a ``run.json`` that is not valid JSON or not a JSON object, naming it and the fix.
    """
    meta = read_json_object(Path(run_dir) / "run.json") or {}
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
    """A run's method name (:func:`config_method` of its config): how the report names its runs and ensembles; an
    imported run's (``harness import``) is its own, ``<method> import <name>`` (audit18 A18-09: two imports are two
    models trained elsewhere, not one method's seeds)."""
    cfg = run_config(run_dir)
    name = config_method((cfg.get("model") or {}).get("head") or {}, (cfg.get("train") or {}).get("loss", "nll"))
    return f"{name} import {cfg.get('name') or Path(run_dir).name}" if "imported" in cfg else name


def config_method(head: dict, loss: str) -> str:
    """The method name of a run of ``head`` options trained with ``loss``: :func:`method_name` of its head, with the
    training loss's suffix (``hom-fwd``: forward-corrected loss, ``hom-ls``: label smoothing)."""
    return method_name(head) + LOSS_SUFFIX.get(loss, "")


def data_config(run_dir: "str | Path", overrides: "tuple[str, ...]" = ()) -> DataConfig:
    """The run's data section as a :class:`DataConfig`, with ``key=value`` overrides (data keys); an ensemble folder's:
    the ``--eval-data`` its ``ensemble.json`` records (``data_config``), else its first member's. A relative
    ``data.path`` is the folder the run read, as its ``run.json`` records it (``data_path``,
    :func:`harness.data.splits.recorded_path`), from any working folder (audit22 A22-02); a run that recorded none as
    its config.yaml has it.

    Raises:
        MovedDataError: the folder its run.json records is gone and data.path names another one from here
            (:func:`~harness.moved_data.check_not_moved`: a moved project, A24-09), or a member (check_members_here).
        ValueError: an ensemble's --eval-data path recorded relative that names nothing from here.
    """
    from harness.data.splits import recorded_path
    from harness.io import read_json

    spec = ensemble_spec(run_dir) if (Path(run_dir) / "ensemble.json").is_file() else None
    check_members_here(run_dir, spec)  # a moved project's ensemble names where its members are (audit25 A25-02)
    folder = spec["members"][0] if spec else run_dir
    section = (spec or {}).get("data_config") or run_config(folder).get("data")
    cfg = load_config(DataConfig, None, list(overrides), base=section or {})
    if (spec or {}).get("data_config"):  # a path recorded relative before A23-11's fix, naming nothing from here
        check_ensemble_path(Path(run_dir) / "ensemble.json", cfg.path, cfg.source)
    meta = {} if (spec or {}).get("data_config") else read_json(Path(folder) / "run.json")  # None: none, damaged
    path = recorded_path(cfg.source, cfg.path, meta.get("data_path") if isinstance(meta, dict) else None)
    check_not_moved(folder, cfg.path, path)  # its folder gone, data.path naming another here (audit24 A24-09)
    return cfg if path == cfg.path else replace(cfg, path=path)


def check_distinct_folders(folders: "Sequence[str | Path]", what: str, why: str, predictions: bool = True) -> None:
    """The same folder may not be given twice: not the same folder (after resolving links and relative paths), nor
    (with ``predictions``) two folders whose ``predictions.npz`` hold identical predictions
    (:func:`harness.model_identity.check_distinct_predictions`: the same model, within a stated tolerance).
    ``what`` names an item (``member``), ``why`` says why each counts once (``an ensemble counts each model once``).
    The predictions are read one folder at a time.

    Raises:
        ValueError: a folder given twice, two folders with identical predictions, or a predictions.npz that is not a
            predictions file, naming the folders and the fix.
    """
    seen: "dict[Path, Path]" = {}
    for f in map(Path, folders):
        key = f.resolve()
        if key in seen:
            raise ValueError(f"{what} {str(f)!r} is given twice (also as {str(seen[key])!r}); {why}: remove the repeat")
        seen[key] = f
    if predictions:  # a folder without predictions.npz is not a run or ensemble folder: its own check names it
        found = [f for f in map(Path, folders) if (f / "predictions.npz").is_file()]
        check_distinct_predictions((Predictions.load(f) for f in found), what, why)


def eval_batches(
    model: "Classifier",
    data: DataConfig,
    split: Optional[str] = None,
    device: str = "cpu",
    base: Optional[ImageDataset] = None,
) -> "Iterator[tuple[torch.Tensor, np.ndarray, np.ndarray]]":
    """Pre-logit features ``[B, D]``, targets and indices of ``split`` (default: the eval split; or
    the already-read ``base``, :func:`harness.run_streams.read_split`), computed by ``model.backbone`` in eval mode,
    batch by batch, through the evaluation loader upstream training uses (:func:`harness.run_streams.split_batches`;
    a packed split's stream in shard order), so re-predicting a run reproduces its saved predictions."""
    base = base if base is not None else read_split(data, split or data.eval_split)
    loader = split_batches(data, base, one_hot=model.head.link == "sigmoid")
    model.eval().to(device)
    with torch.no_grad():
        for x, y, idx in loader:
            yield model.pre_logits(x.to(device)), np.asarray(y), np.asarray(idx)


def predict_model(
    model: "Classifier",
    data: DataConfig,
    split: Optional[str] = None,
    device: str = "cpu",
    source: str = "",
    base: Optional[ImageDataset] = None,
    steps: "Optional[Steps]" = None,
    names: "Optional[Sequence[str]]" = None,
) -> Predictions:
    """``model``'s predictions on a split of ``data`` (default: its evaluation split; or the already-read ``base``);
    ``steps`` (:class:`harness.progress.Steps`) says the images done and the time left every 10 s; ``names``: the
    model's class names where recorded (:func:`harness.model_identity.model_class_names`).

    Raises:
        ValueError: the model's classes are not the data's (:func:`harness.model_identity.check_classes_match`),
            before predicting.
    """
    base = base if base is not None else read_split(data, split or data.eval_split)
    check_classes_match(source or "the model", model.head.num_classes, names, base.class_names, base.description)
    batches = eval_batches(model, data, device=device, base=base)  # pre-logit features: the head predicts
    if steps is not None:
        batches = steps.count(batches, len(base), size=lambda batch: len(batch[1]), unit="images")
    out = predict_logits(model.head, batches)
    if is_stream(data):  # a packed split streams in shard order; a run's saved predictions are by index
        out = {k: v[np.argsort(out["index"], kind="stable")] for k, v in out.items()}
    return Predictions(
        out["logits"].astype(np.float64),
        out["targets"],
        out["index"],
        base.class_names,
        model.head.link,
        source,
    )


def predict_checkpoint(
    run_dir: "str | Path",
    data: Optional[DataConfig] = None,
    split: Optional[str] = None,
    device: str = "cpu",
    base: Optional[ImageDataset] = None,
) -> Predictions:
    """Load ``run_dir/model.pt`` and predict on a split (default: the run's own evaluation split; or the already-read
    ``base`` of ``data``, read once for several models).

    Only this one model is in memory; its predictions are returned.

    Raises:
        ValueError: a model.pt whose classes are not the data's (:func:`predict_model`), before predicting.
    """
    from harness.models import load_model

    model, source = load_model(Path(run_dir) / "model.pt"), str(Path(run_dir) / "model.pt")
    names = model_class_names(source, model)
    return predict_model(model, data or data_config(run_dir), split, device, source, base, names=names)


# ------------------------------------------------------------------ analyses of a run folder
def clean_heldout(preds: Predictions, run_dir: "str | Path") -> Optional[Predictions]:
    """``preds`` (held-out predictions of the run, or of an ensemble whose first member is
    ``run_dir``) with the clean labels of the same examples, or None when the run has no held-out
    split or was trained on shards whose pack records noisy labels and not their clean counterparts
    (:func:`harness.run_streams.pack_clean_heldout`; a pack of the source's own labels: the predictions' targets).

    Raises:
        ValueError: held-out examples not all in the clean split (other data); a split other than the run recorded
            (:func:`harness.heldout.check_heldout_record`), or labels other than it stored (no label noise).
        FileNotFoundError: the data (or pack) gone, naming the run (:func:`harness.heldout.read_heldout_split`).
    """
    data = data_config(run_dir)
    if data.heldout_split is None:
        return None
    if is_stream(data):
        return read_heldout_split(run_dir, data, lambda: pack_clean_heldout(preds, data))
    split = read_heldout_split(run_dir, data, lambda: build_split(clean_data(data), data.heldout_split))
    as_read = split if data.label_set == "clean" else build_split(data, data.heldout_split)  # the run's label set
    clean = np.asarray(split.labels)
    check_stored_labels(run_dir, data, preds, clean)  # its examples; noiseless, its stored labels (audit24 A24-12)
    check_heldout_record(run_dir, data, as_read)  # the split it was evaluated on, whatever the noise (audit25 A25-03)
    return replace(preds, targets=clean[preds.index], source=f"{preds.source} (clean labels)")


def heldout_description(run_dir: "str | Path") -> Optional[str]:
    """What the run's held-out split is (source, split, labels), or None without one."""
    data = data_config(run_dir)
    if data.heldout_split is None:
        return None
    return read_heldout_split(run_dir, data, lambda: read_split(data, data.heldout_split)).description


def check_model_classes(model_pt: "str | Path", num_classes: int, what: str = "its predictions") -> None:
    """Check, without building the model, that the checkpoint ``model_pt`` predicts ``num_classes`` classes.

    Raises:
        ValueError: another number of classes (naming the file and the fix), or not a harness checkpoint.
        FileNotFoundError: no such file.
    """
    from harness.models import read_checkpoint

    k = read_checkpoint(model_pt)["config"].get("num_classes")
    if k != num_classes:
        raise ValueError(
            f"{model_pt} has {k} classes but {what} have {num_classes}: the model.pt is not this run's; put "
            "the run's own model.pt back (or rerun harness upstream)"
        )


def covariance_analysis(
    het_run: "str | Path", hom_run: "Optional[str | Path]", hom_preds: Optional[Predictions], top: int = 10
) -> dict:
    """The covariance analysis (paper Sec. 4.1: Table 4's top pairs, Figure 2's ranks, and the test of the learned
    noise against the label-noise transition; :mod:`harness.uncertainty.covariance`) of the het run ``het_run``
    (its ``model.pt`` on its evaluation split), with Figure 2's ranks against the hom run's predictions
    ``hom_preds`` on the same examples when given.

    Returns:
        :func:`~harness.uncertainty.covariance.analyse`'s dict, plus ``het_run``, ``hom_run``, the rank
        summary (:func:`~harness.uncertainty.covariance.rank_summary`) when there are ranks, and
        ``transition_test`` (:func:`~harness.uncertainty.covariance.transition_test`; None without a
        label-noise transition or per-pair noise).

    Raises:
        FileNotFoundError: no ``model.pt`` or ``config.yaml`` in ``het_run``.
        ValueError: a ``model.pt`` of another number of classes, or other weights, than the run's predictions.
    """
    from harness.models import load_model
    from harness.uncertainty.covariance import analyse, rank_summary, transition_test

    het_run = Path(het_run)
    het_preds = Predictions.load(het_run)
    check_model_classes(het_run / "model.pt", len(het_preds.class_names), f"{het_run / 'predictions.npz'}")
    check_run_model(het_run, predictions=True)  # the weights its predictions measured (audit22 A22-10, A26-05)
    model = load_model(het_run / "model.pt")
    with_hom = hom_preds is not None
    result = analyse(
        model.head,
        eval_batches(model, data_config(het_run)),
        het_preds.class_names,
        top,
        het_preds.logits if with_hom else None,
        hom_preds.logits if with_hom else None,
        het_preds.index if with_hom else None,
    )
    result.update(het_run=str(het_run), hom_run=str(hom_run) if hom_run is not None else None)
    if result["ranks"]:
        result.update(rank_summary(result["ranks"], result["mean_logit_ranks"], result["num_classes"]))
    transition = noise_transition(het_run)
    result["transition_test"] = None
    if transition is not None and result.get("pair_noise"):
        result["transition_test"] = transition_test(transition, result["pair_noise"])
    return result


#: the folder of a run's own export inside the run (``train.log_model``'s; upstream.outputs.MODEL_FOLDER reads it): the one
#: folder inside a run that :func:`export_run` writes
RUN_EXPORT = "pretrained"


def export_run(run_dir: "str | Path", out: "str | Path", overwrite: bool = False, **kwargs: Any) -> Path:
    """Export a run folder's ``model.pt`` with ``save_pretrained``: ``trained_on`` from its ``config.yaml``
    (:data:`harness.export_rules.DATA_KEYS`, no paths; an import's: :func:`harness.export_rules.imported_card`),
    ``metrics`` from its ``metrics.json`` (``heldout_metrics`` as ``heldout_<name>``; a NaN or infinity as null, with
    a warning naming the file and key: :func:`harness.export_rules.run_card_metrics`), the class names of its
    ``run.json`` as timm's ``label_names``; ``kwargs`` as ``save_pretrained`` (``push_to_hub=True, repo_id=...``;
    :func:`harness.hub_options.save_options`). An export already in ``out`` is written again only if it holds this
    run's weights, unless ``overwrite``. ``out`` is the run's own export folder (``<run_dir>/pretrained``:
    :data:`RUN_EXPORT`) or lies outside every other harness output folder (``check_outside_outputs``).

    Raises:
        FileNotFoundError: not a run folder. ValueError: a harness folder of another kind (an ensemble, a sweep:
            :func:`harness.folder_kinds.check_kind`); ``out`` inside another run's (or harness output's) folder or a
            split folder of the run's data (audit25 A25-01), checked before any work; an unknown keyword argument, or
            a hub option without ``push_to_hub=True`` (:func:`harness.hub_options.check_save_options`); a metrics.json
            or run.json that is not a JSON object; a model.pt of other weights than its metrics measured
            (:func:`harness.checkpoint_files.check_run_model`); an export of another model in ``out`` without
            ``overwrite`` (:func:`harness.hub.prepare_folder`); another process writing ``out``; see save_pretrained.
    """
    from harness import hub, hub_options
    from harness.data.read_folders import data_read_folders
    from harness.export_rules import imported_card, run_card_metrics, trained_on
    from harness.models import load_model

    hub_options.check_save_options(kwargs, "export_run")
    run_dir, out = check_kind(run_dir, ("run", "import"), "run"), Path(out)  # an ensemble, a sweep: named (A26-20)
    by = hub.ExportWriter("out", "harness.runs.export_run", own=run_dir.resolve() / RUN_EXPORT)  # save_pretrained's
    hub.check_export_place(out, by, data_read_folders(lambda: data_config(run_dir)))  # nor in its data (A25-01)
    model = load_model(run_dir / "model.pt")  # a FileNotFoundError names a folder without model.pt
    check_run_model(run_dir, predictions=True)  # the weights and predictions its metrics.json measured (A20-09, A26-12)
    cfg = run_config(run_dir)  # the settings it recorded (audit26 A26-01: a hand-edited config.yaml was published)
    meta = read_json_object(run_dir / "run.json") or {}
    read = {"limit_train": meta.get("num_train"), "limit_eval": meta.get("num_eval")}  # what each limit cut
    seen, keep = trained_on(cfg.get("data") or {}, read), True
    if "imported" in cfg:  # the model's own training data; its metrics only where the card can name their data
        seen, keep = imported_card(cfg.get("trained_on") or None, seen)
    metrics = run_card_metrics(run_summary(run_dir) if keep else {}, run_dir / "metrics.json")  # NaN: null
    if meta.get("class_names"):
        model.card_info["label_names"] = [str(n) for n in meta["class_names"]]
    model.save_pretrained(out, trained_on=seen, metrics=metrics, overwrite=overwrite, _by=by, **kwargs)
    return Path(out)
