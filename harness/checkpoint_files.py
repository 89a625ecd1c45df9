"""The harness's own checkpoint files, recognised wherever a file of weights or a model is given, so that each is
refused with what it is and what to give instead: a run's model checkpoint (``<run>/model.pt``,
``<run>/checkpoints/best.pt``: :func:`harness.models.save_model`, format :data:`CHECKPOINT_FORMAT`)
where a backbone's weights are asked for (``--weights``, ``model.pretrained_file``), and a run's training state
(``<run>/checkpoints/last.pt``: the upstream stage's resume point, format ``harness.upstream-state/<n>``) where a
model or weights are asked for (:func:`checkpoint_kind`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import torch

#: the format marker of a harness model checkpoint (:func:`harness.models.save_model`)
CHECKPOINT_FORMAT = "harness.model/1"
#: the format marker of a run's training state, versioned by the upstream stage (``harness.upstream-state/2``)
STATE_PREFIX = "harness.upstream-state/"


def checkpoint_kind(path: "str | os.PathLike | None") -> Optional[str]:
    """``"model"`` for a harness model checkpoint, ``"state"`` for a run's training state, None for any other file
    (no file, a ``.safetensors`` or ``.npz``, a torch file of another content, a file torch cannot open: the weights
    reader, :func:`harness.weights.read_state`, names what is wrong with it). The file is opened memory-mapped (only
    its small record is read)."""
    if path is None or Path(path).suffix.lower() in (".safetensors", ".npz") or not Path(path).is_file():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 -- not a zip-format torch file: the weights reader names what it is
        return None
    return _kind(payload.get("format") if isinstance(payload, dict) else None)


def _kind(fmt: Any) -> Optional[str]:
    if fmt == CHECKPOINT_FORMAT:
        return "model"
    return "state" if str(fmt).startswith(STATE_PREFIX) else None


def followed(path: "str | os.PathLike") -> Path:
    """The file ``path`` names, ``~`` expanded and symbolic links followed: where the path goes through a link (the
    file itself, ``latest.pt -> runs/a/model.pt``, or a folder on the way), the resolved file, which is the one in its
    run folder (audit23 A23-10: a link to a run's model.pt skipped every rule of its run folder); an ordinary path as
    given (a relative one stays relative, so messages name it as typed)."""
    file = Path(path).expanduser()
    real = os.path.realpath(file)
    return Path(real) if real != os.path.abspath(file) else file


def run_folder(path: "str | os.PathLike") -> Path:
    """The run folder that holds a checkpoint file: ``<run>/model.pt``'s folder, ``<run>/checkpoints/*.pt``'s parent;
    the file's links followed first (:func:`followed`), so a link to a run's model.pt names that run."""
    folder = followed(path).parent
    return folder.parent if folder.name == "checkpoints" else folder


def state_fix(path: "str | os.PathLike") -> str:
    """What a message says of a run's training state given as a model or weights, and what to give instead."""
    run = run_folder(path)
    return (
        f"{str(path)!r} is the training state of the harness run {run} (the point it resumes from), not a model: give "
        f"{run / 'model.pt'} (written when the run ends) or {run / 'checkpoints' / 'best.pt'}, or finish the run by "
        "giving its harness upstream command again"
    )


def check_weights_file(weights: "str | os.PathLike | None", what: str = "--weights") -> None:
    """Refuse a harness checkpoint (:func:`checkpoint_kind`) as the weights of a ``timm:NAME`` / ``torchvision:NAME``
    model (``--weights`` of harness import, fewshot and downstream): its tensors would meet the architecture as keys
    that do not fit (``backbone.bn1.bias`` for ``bn1.bias``), whose advice (other classes, other data, load_model)
    does not apply; the commands take the harness model itself as ``--model`` (``--upstream``).

    Raises:
        ValueError: naming ``what``, the file, what it is and the fix (the model checkpoint as ``--model``, or
            ``--upstream`` for harness downstream, without ``--weights``).
    """
    kind = checkpoint_kind(weights)
    if kind == "state":
        raise ValueError(f"{what}: {state_fix(weights)}, as --model (--upstream for harness downstream)")
    if kind == "model":
        raise ValueError(
            f"{what} {str(weights)!r} is a harness run's model.pt (format {CHECKPOINT_FORMAT!r}: the whole model, its "
            "backbone's tensors under backbone., with its head and config), and --weights takes the state dict of a "
            f"timm or torchvision model: give {weights} as --model (--upstream for harness downstream), without "
            "--weights"
        )


def not_a_model(path: "str | os.PathLike", fmt: Any) -> ValueError:
    """The refusal of a torch file of format ``fmt`` given as a harness model checkpoint
    (:func:`harness.models.load_model`): a run's training state named as such, any other file as not a checkpoint."""
    if _kind(fmt) == "state":
        return ValueError(state_fix(path))
    return ValueError(
        f"{str(path)!r} is not a harness model checkpoint (format {CHECKPOINT_FORMAT!r}); write it with "
        "harness.models.save_model"
    )


def measured_model(path: "str | os.PathLike") -> dict:
    """What a run's ``metrics.json`` records of the ``model.pt`` its metrics measured: ``weights_sha256``
    (:func:`harness.model_identity.weights_digest`) and ``eval_options``, the head's evaluation options the file
    stores (:data:`harness.heads.checks.MEASURED_OPTIONS`, the head's defaults where its config leaves one out; ``{}``
    for a head without noise, which reads none) and ``preprocessing``, the input normalisation its model config
    stores (``mean``, ``std``, ...; ``{}``: the harness's own, as :func:`harness.card_facts.card_state` records it;
    audit25 A25-10). Written by upstream and ``harness import``, compared by :func:`check_run_model`."""
    import inspect
    import json

    from harness.heads import HeteroscedasticHead
    from harness.heads.checks import MEASURED_OPTIONS
    from harness.model_identity import weights_digest

    try:
        payload = torch.load(Path(path), map_location="cpu", weights_only=True, mmap=True)
        head = dict(payload["config"].get("head") or {})
        prep = json.loads(json.dumps(dict(payload["config"].get("preprocessing") or {})))  # as metrics.json reads
    except Exception:  # noqa: BLE001 -- not a harness checkpoint: its readers name what it is
        head, prep = {}, {}
    given = inspect.signature(HeteroscedasticHead.__init__).parameters
    options = {k: head.get(k, given[k].default) for k in ("covariance", *MEASURED_OPTIONS)}
    noisy = options.pop("covariance") != "none"
    return {"weights_sha256": weights_digest(path), "eval_options": options if noisy else {}, "preprocessing": prep}


def _differences(recorded: dict, now: dict) -> str:
    """``"key recorded -> now, ..."`` for each key (sorted) whose value differs between the two settings."""
    keys = sorted(set(recorded) | set(now))
    return ", ".join(f"{k} {recorded.get(k)!r} -> {now.get(k)!r}" for k in keys if recorded.get(k) != now.get(k))


def check_run_model(run_dir: "str | os.PathLike", options: bool = True, predictions: bool = False) -> None:
    """A run folder's ``model.pt`` is the model its ``metrics.json`` and predictions measured: the digest of its
    weights (:func:`harness.model_identity.weights_digest`) equals the ``weights_sha256`` the run recorded when it
    wrote them (audit20 A20-09: another model.pt copied into a run was exported, and shifted, with the run's metrics
    and training data), and, with ``options`` and where the run recorded them, the head's evaluation options it stores
    equal the run's ``eval_options`` (audit22 A22-12: a model.pt re-saved with ``eval_mc_samples = 1`` was exported
    with the metrics of 100 samples), and the input preprocessing it stores equals the run's ``preprocessing``
    (audit25 A25-10: a model.pt re-saved with other mean / std was exported with the metrics of the old ones): all as
    :func:`measured_model` reads them. A run that recorded none (written before the record existed) passes.

    Args:
        options: compare the head's evaluation options too: for readers of the head's predictions (export, shift,
            ensemble, the covariance analysis); False for readers of the weights alone (harness fewshot and
            downstream, which drop the head, and the run's training data: audit23 A23-20).
        predictions: check the run's predictions against its metrics.json first (:func:`check_run_predictions`):
            for readers of both the model and the recorded metrics (export_run's card, the covariance analysis).

    Raises:
        ValueError: naming the file, the two digests (or the options that differ) and the fix: the run's own model.pt
            back, or the run made again (harness upstream with its config.yaml; for an imported run, harness import
            of the model its config.yaml's ``imported`` names, :func:`imported_source`, its data
            ``path=`` as its run.json records it: audit23 A23-14, audit24 A24-07); with ``predictions``, predictions
            that are not those metrics.json measured (:func:`check_run_predictions`).
    """
    import json

    run_dir = Path(run_dir)
    if predictions:
        check_run_predictions(run_dir)
    try:
        record = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
        recorded, measured, prep = record.get("weights_sha256"), record.get("eval_options"), record.get("preprocessing")
    except (OSError, ValueError, AttributeError):  # no record to compare (its readers name a damaged metrics.json)
        return
    if not recorded:
        return
    found = measured_model(run_dir / "model.pt")
    if found["weights_sha256"] != recorded:
        raise ValueError(
            f"{run_dir / 'model.pt'} is not the model the run's metrics.json and predictions measured (its weights' "
            f"digest is {str(found['weights_sha256'])[:12]}..., metrics.json records {str(recorded)[:12]}...): put "
            f"the run's own model.pt back, or {remake(run_dir)}"
        )
    if options and isinstance(measured, dict) and found["eval_options"] != measured:
        changed = _differences(measured, found["eval_options"])
        raise ValueError(
            f"{run_dir / 'model.pt'} predicts with other evaluation options than the run's metrics.json measured "
            f"({changed}; audit22 A22-12): put the run's own model.pt back, or set the head's options back and save "
            "it again"
        )
    if options and isinstance(prep, dict) and found["preprocessing"] != prep:
        changed = _differences(prep, found["preprocessing"])
        raise ValueError(
            f"{run_dir / 'model.pt'} normalises its input otherwise than the model the run's metrics.json and "
            f"predictions measured (its config's preprocessing: {changed}; audit25 A25-10): its metrics do not hold "
            f"for it; put the run's own model.pt back, or save it again with the preprocessing it was measured with "
            f"(model.config.preprocessing = {prep!r}), or {remake(run_dir)}"
        )


def check_run_predictions(run_dir: "str | os.PathLike", heldout: bool = True) -> None:
    """A run folder's ``predictions.npz`` (and, with ``heldout``, ``heldout_predictions.npz``) are the predictions its
    ``metrics.json`` measured: the metrics recomputed from each equal those it records (``metrics``,
    ``heldout_metrics``; :func:`harness.records.metrics_mismatch`, the rule a record is restored by). Audit26
    A26-05: another run's predictions.npz copied (or hard-linked) into a run was reported and ensembled under its
    name; A26-12: a hand-edited metrics.json was exported on the model card. A folder without metrics.json, or whose
    metrics.json records no metrics, passes (its readers name what is missing).

    Raises:
        ValueError: naming the run's two files, the metric and both values, and the fix: the run's own files back,
            or its predictions and metrics written again from its model.pt (:func:`rewrite_predictions`).
    """
    import json

    from harness.records import metrics_mismatch

    run_dir = Path(run_dir)
    try:
        record = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no record to compare (its readers name a damaged metrics.json)
        return
    if not isinstance(record, dict):
        return
    files = (("predictions.npz", "metrics"), ("heldout_predictions.npz", "heldout_metrics"))
    for name, key in files if heldout else files[:1]:
        try:
            differ = metrics_mismatch(run_dir / name, record.get(key), f"its metrics.json ({key})")
        except ValueError as e:
            raise ValueError(f"{run_dir / name}: {e}; {rewrite_predictions(run_dir)}") from None
        if differ:
            raise ValueError(
                f"{run_dir / name} is not what the run's metrics.json measured: {differ} (audit26 A26-05/A26-12: "
                f"one of the two was replaced by another run's or edited by hand): put the run's own "
                f"{name} and metrics.json back, or {rewrite_predictions(run_dir)}"
            )


def remake(run_dir: Path) -> str:
    """How a message says to make the run ``run_dir`` again: train it (harness upstream with its config.yaml), or, for
    an imported run (its config.yaml's ``imported``), import its model again into a new folder (audit23 A23-14: an
    imported run was told to train, which its config.yaml cannot)."""
    import yaml

    try:
        cfg = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {}
        imported, data = cfg.get("imported"), cfg.get("data") or {}
    except (OSError, ValueError, AttributeError, yaml.YAMLError):  # not readable: the upstream run's fix
        imported, data = None, {}
    if not isinstance(imported, dict):
        return "train the run again (harness upstream with its config.yaml)"
    weights = f" --weights {imported['weights']}" if imported.get("weights") else ""
    return (
        f"import its model again into a new folder (an imported run, made by harness import: harness import --model "
        f"{imported_source(imported)}{weights} --data {run_dir / 'config.yaml'}{_read_path(run_dir, data)} --out NEW_FOLDER)"
    )


def rewrite_predictions(run_dir: "str | os.PathLike") -> str:
    """How a message says to write a run's predictions (``predictions.npz``, ``heldout_predictions.npz``) again: from
    an upstream run's own ``model.pt``, without training (:func:`harness.upstream.reevaluate.reevaluate` with
    ``force=True``), or else make the run again (:func:`remake`; an imported run: import its model again)."""
    import yaml

    run_dir = Path(run_dir)
    try:
        imported = "imported" in (yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8")) or {})
    except (OSError, ValueError, TypeError, yaml.YAMLError):  # not readable: make the run again
        imported = True
    if imported or not (run_dir / "model.pt").is_file():
        return remake(run_dir)
    return (
        'write its predictions again from its model.pt without training (python -c "from harness.upstream.reevaluate import '
        f"reevaluate; reevaluate('{run_dir}', force=True)\"), or {remake(run_dir)}"
    )


def _read_path(run_dir: Path, data: dict) -> str:
    """`` path=FOLDER`` where a run's relative data.path (``data``, its config.yaml's data section) was read from
    another folder than it names from here (its run.json's data_path, :func:`harness.data.splits.recorded_path`), for
    a command a message gives; else ``""``."""
    from harness.data.splits import recorded_path
    from harness.io import read_json

    meta = read_json(run_dir / "run.json")
    given = data.get("path") if isinstance(data, dict) else None
    read = recorded_path(data.get("source"), given, meta.get("data_path")) if given and isinstance(meta, dict) else None
    return f" path={read}" if read and read != given else ""


def imported_source(imported: Optional[dict]) -> Optional[str]:
    """The model an imported run's ``imported`` record (its config.yaml's) names, as a path to read from any working
    folder: ``source_absolute`` where it is recorded and still exists (audit24 A24-07); else ``source`` as typed (an
    import recorded before, read from the working folder as then; None for no record)."""
    if not isinstance(imported, dict):
        return None
    absolute, typed = imported.get("source_absolute"), imported.get("source")
    if isinstance(absolute, str) and Path(absolute).exists():
        return absolute
    return str(typed) if typed else None
