"""Re-evaluating a finished upstream run with this version's evaluation noise, without training it again.

A HET head's evaluation draws Monte Carlo noise, and ``metrics.json`` records which (``eval_noise``,
:func:`harness.heads.noise_record.eval_noise`). When that definition changes (``counter/1`` replaced the seeded
generators of earlier versions), results evaluated before are not comparable with new ones. :func:`reevaluate`
brings a finished run up to date from its own ``model.pt`` and ``config.yaml``: the same data, loaders, mixed
precision and memory format as the run's last step (:func:`harness.upstream.outputs.final_predictions`, the one
evaluation both read), then ``predictions.npz``, ``heldout_predictions.npz`` and ``metrics.json`` rewritten
atomically (``metrics.json`` last). ``model.pt`` (the weights) and the training record (history, best epoch,
times, provenance) are kept; ``metrics.json`` gains ``reevaluated``: the noise it had before and the provenance of
the re-evaluation, and records the ``model.pt`` it measured (``weights_sha256``, ``eval_options``:
:func:`harness.checkpoint_files.measured_model`, as training writes them). A run already evaluated with the current
noise is left alone (:func:`needs_reevaluation`). Only the run's own ``model.pt`` is re-evaluated
(:func:`harness.checkpoint_files.check_run_model`, audit23 A23-01), on the data the run read: a relative
``data.path`` as its ``run.json`` records it (:func:`harness.runs.data_config`, from any working folder: audit23
A23-02).

``harness run EXPERIMENT --reevaluate`` does this for every finished run of an experiment and records them again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional


def current_noise(run_dir: "str | Path") -> Optional[str]:
    """The evaluation noise this version draws for the run's head
    (:func:`harness.heads.noise_record.noise_definition_of` of its ``config.yaml``'s ``model.head``, as the shift
    predictions key it; None for a head without noise), read without loading ``model.pt``.

    Raises:
        FileNotFoundError: no ``config.yaml``. ValueError: head options the head refuses.
    """
    from harness.heads.noise_record import noise_definition_of
    from harness.runs import run_config

    return noise_definition_of(dict((run_config(run_dir).get("model") or {}).get("head") or {}))


def needs_reevaluation(run_dir: "str | Path") -> bool:
    """Whether ``run_dir`` is a finished run (``metrics.json`` and ``model.pt``) whose metrics were evaluated with
    another noise than this version draws for its model (a run without noise never needs it)."""
    from harness.io import read_json

    run_dir = Path(run_dir)
    metrics = read_json(run_dir / "metrics.json")
    if metrics is None or not (run_dir / "model.pt").is_file():
        return False
    return metrics.get("eval_noise") != current_noise(run_dir)


def reevaluate(run_dir: "str | Path", force: bool = False) -> Optional[dict]:
    """Re-evaluate the finished run ``run_dir`` with this version's evaluation noise (module docstring).

    Args:
        run_dir: a finished upstream run folder (``config.yaml``, ``model.pt``, ``metrics.json``).
        force: re-evaluate even when its noise is already the current one (the files come out the same: the
            evaluation is deterministic given the weights, the data and ``eval_seed``).

    Returns:
        The new ``metrics.json`` content, or None when the run needed nothing.

    Raises:
        FileNotFoundError: not a finished run folder (names the missing file).
        ValueError: its ``config.yaml`` is no valid upstream config, another process holds the run's lock, or its
            ``model.pt`` is not the model its ``metrics.json`` measured (another file's weights, other evaluation
            options: :func:`harness.checkpoint_files.check_run_model`, refused before any work, audit23 A23-01).
    """
    from harness.training.loop import held_precision, in_fresh_process
    from harness.training.precision import device_type
    from harness.training.precision import resolve as resolve_precision

    run_dir = Path(run_dir)
    for name in ("config.yaml", "model.pt", "metrics.json"):
        if not (run_dir / name).is_file():
            raise FileNotFoundError(
                f"{run_dir} has no {name}: only a finished upstream run folder can be re-evaluated (finish it "
                "with harness upstream, which evaluates it with the current noise)"
            )
    if not force and not needs_reevaluation(run_dir):
        return None
    from harness.checkpoint_files import check_run_model

    check_run_model(run_dir)  # its own model.pt: metrics.json would record other weights' numbers (A23-01)
    cfg = _config(run_dir)
    precision = resolve_precision(cfg.train.mixed_precision, device_type(), "train.mixed_precision")
    held = held_precision()
    if held is not None and held[0] != precision:  # accelerate holds one precision per process
        return in_fresh_process(reevaluate, str(run_dir), force)
    from harness.io import RunLock

    with RunLock(run_dir):
        return _reevaluate(run_dir, cfg, precision)


def _config(run_dir: Path):
    """The run's config, its ``data.path`` the folder the run read (:func:`harness.runs.data_config`: a relative one
    as its ``run.json`` records it, audit23 A23-02), validated."""
    from harness.config import load_config
    from harness.runs import data_config
    from harness.upstream.config import UpstreamConfig, validate

    cfg = load_config(UpstreamConfig, run_dir / "config.yaml", [f"output_dir={json.dumps(str(run_dir))}"])
    cfg.data.path = data_config(run_dir).path  # not another working folder's data of the same name
    validate(cfg)
    return cfg


def _reevaluate(run_dir: Path, cfg, precision: str) -> dict:
    """The body of :func:`reevaluate`, holding the run's lock."""
    import torch
    from accelerate.utils import set_seed

    from harness.checkpoint_files import measured_model
    from harness.heads.noise_record import eval_noise
    from harness.heldout import RECORD_KEY, heldout_record
    from harness.io import atomic_write_text, json_dumps, read_json
    from harness.models import load_model
    from harness.provenance import provenance
    from harness.training.loop import make_accelerator
    from harness.upstream.outputs import final_predictions, save_predictions
    from harness.upstream.parts import Training
    from harness.upstream.rundata import read_run_data

    before = read_json(run_dir / "metrics.json")
    accelerator = make_accelerator(precision, cfg.train.grad_accum_steps)
    set_seed(cfg.seed, device_specific=True)  # as training sets it (the counter noise does not read it)
    data = read_run_data(cfg, accelerator.process_index, accelerator.num_processes)
    memory_format = torch.channels_last if cfg.train.channels_last else torch.contiguous_format
    model = load_model(run_dir / "model.pt").to(memory_format=memory_format)
    if data.stream:
        model = accelerator.prepare(model)
    else:
        model, data.eval_loader = accelerator.prepare(model, data.eval_loader)
    t = Training(cfg, run_dir, accelerator, data, model, None, None, memory_format, cfg.train.epochs, None, None)
    result, arrays, heldout_result, heldout = final_predictions(t)
    if not t.main:
        return {}
    save_predictions(t, arrays, heldout)
    after = {
        **before,
        "metrics": result,
        "heldout_metrics": heldout_result,
        "eval_noise": eval_noise(accelerator.unwrap_model(model)),
        RECORD_KEY: heldout_record(cfg.data.heldout_split, data.heldout),  # the split evaluated now (audit25 A25-03)
        **measured_model(run_dir / "model.pt"),  # weights_sha256 and eval_options of what it measured (A23-01)
        "reevaluated": {"eval_noise_before": before.get("eval_noise"), **provenance()},
    }
    atomic_write_text(run_dir / "metrics.json", json_dumps(after, indent=1))
    return after
