"""The final outputs of an upstream run (step 7 of :func:`harness.upstream.train.run`): predictions on the
evaluation split and on ``data.heldout_split``, ``model.pt``, ``predictions.npz``, ``heldout_predictions.npz`` and
``metrics.json`` (whose presence marks the run complete; its ``eval_noise`` names the Monte Carlo noise the
metrics were evaluated with, :func:`harness.heads.noise_record.eval_noise`), and the final report to the trackers."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from harness.checkpoint_files import measured_model
from harness.export_rules import trained_on
from harness.heads.noise_record import eval_noise
from harness.heldout import RECORD_KEY, heldout_record
from harness.io import atomic_write_text, json_dumps
from harness.models import save_model
from harness.provenance import provenance
from harness.runs import RUN_EXPORT
from harness.training.trackers import log_model, log_report
from harness.uncertainty.predictions import Predictions
from harness.upstream.evaluation import predict_loader
from harness.upstream.parts import Training
from harness.upstream.rundata import heldout_loader

#: the folder of a run that holds its ``save_pretrained`` export (``train.log_model``): :data:`harness.runs.RUN_EXPORT`
MODEL_FOLDER = RUN_EXPORT


def write_outputs(t: Training) -> None:
    """Predict on the evaluation split (and the held-out split, if set), then (main process) write the final
    files, log the final metrics (``final/<metric>``, ``final/heldout/<metric>``) and the files to the trackers, with
    ``train.log_model`` export the model and log its folder to them (:func:`export_model`), and end the trackers."""
    cfg, accelerator, d, p = t.cfg, t.accelerator, t.data, t.p
    result, arrays, heldout_result, heldout = final_predictions(t)
    if t.main:
        run_dir = t.run_dir
        final = accelerator.unwrap_model(t.model)
        read = {"limit_train": len(d.train), "limit_eval": len(d.eval)}  # a limit above a split's size cut nothing
        seen = trained_on(dataclasses.asdict(cfg.data), read)  # the view timm's transforms rebuild from load_model's
        save_model(final, run_dir / "model.pt", extra={"epochs": p.epoch, "metrics": result, "trained_on": seen})
        measured = measured_model(run_dir / "model.pt")  # what metrics.json measured (check_run_model)
        save_predictions(t, arrays, heldout)
        timing = p.timing
        summary = {
            "name": cfg.name,
            "metrics": result,
            "heldout_metrics": heldout_result,
            "best": p.best,
            "history": p.history,
            "epochs": p.epoch,
            "steps": p.step,
            "train_images_per_sec": timing["train_images"] / max(timing["train_seconds"], 1e-9),
            "train_seconds": timing["train_seconds"],
            "train_images": timing["train_images"],
            "wall_seconds": timing["wall_seconds"] + time.perf_counter() - p.session_start,
            "threads": torch.get_num_threads(),
            "mixed_precision": accelerator.mixed_precision,
            "eval_data": d.eval.description,
            "train_data": d.train.description,
            "label_noise": d.noise_info,
            "loss": d.loss_info,
            "eval_noise": eval_noise(final),  # the definition of the evaluation's MC noise (None: no noise)
            RECORD_KEY: heldout_record(cfg.data.heldout_split, d.heldout),  # what it was evaluated on (audit25 A25-03)
            **measured,  # weights_sha256 and eval_options
            **provenance(),
        }
        atomic_write_text(run_dir / "metrics.json", json_dumps(summary, indent=1))
        print(f"{run_dir}: done; final " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
        finals = {f"final/{k}": v for k, v in result.items()}
        finals.update({f"final/heldout/{k}": v for k, v in (heldout_result or {}).items()})
        accelerator.log(finals, step=p.step)
        log_report(
            accelerator.trackers,
            [run_dir / "metrics.json", run_dir / "config.yaml"],
            {
                "final_metrics": (
                    ["split", *result],
                    [["eval", *result.values()]] + ([["heldout", *heldout_result.values()]] if heldout_result else []),
                )
            },
        )
        if cfg.train.log_model:
            export_model(run_dir, accelerator.trackers)
    accelerator.end_training()


def final_predictions(t: Training) -> "tuple[dict, dict, Optional[dict], Optional[dict]]":
    """The final evaluation of ``t.model``: ``(metrics, arrays, heldout metrics, heldout arrays)`` on the evaluation
    split and on ``data.heldout_split`` (both None without one), as :func:`predict_loader` gives them. Training's
    last step and the re-evaluation of a finished run (:mod:`harness.upstream.reevaluate`) both read it."""
    cfg, accelerator, d = t.cfg, t.accelerator, t.data
    result, arrays = predict_loader(t.model, d.eval_loader, accelerator, d.multilabel, t.memory_format, d.stream)
    heldout, heldout_result = None, None
    if cfg.data.heldout_split:
        held_loader = heldout_loader(cfg, d, accelerator)
        heldout_result, heldout = predict_loader(
            t.model, held_loader, accelerator, d.multilabel, t.memory_format, d.stream
        )
    return result, arrays, heldout_result, heldout


def save_predictions(t: Training, arrays: dict, heldout: Optional[dict]) -> None:
    """Write ``predictions.npz`` (and ``heldout_predictions.npz`` when ``heldout`` is given) in ``t.run_dir``
    (:class:`harness.uncertainty.predictions.Predictions`, atomically)."""
    d = t.data
    for name, out in (("predictions.npz", arrays), ("heldout_predictions.npz", heldout)):
        if out is not None:
            Predictions(
                out["logits"], out["targets"], out["index"], list(d.train.class_names), d.link, str(t.run_dir)
            ).save(t.run_dir / name)


def export_model(run_dir: Path, trackers: Sequence[Any]) -> Optional[Path]:
    """``train.log_model``: the finished run exported with ``save_pretrained`` (:func:`harness.runs.export_run`: the
    weights, ``config.json`` with its data and final metrics, the model card) to ``<run_dir>/pretrained``, and that
    folder logged to ``trackers`` (:func:`harness.training.trackers.log_model`). The run is complete before this
    step (``metrics.json`` is written), so an export that fails is reported on stderr and the run still ends
    normally; returns the folder, or None after such a failure."""
    from harness.runs import export_run

    try:
        folder = export_run(run_dir, run_dir / MODEL_FOLDER, overwrite=True)  # the run's own export, rewritten
    except (ValueError, OSError) as e:
        print(
            f"[log_model] the model of {run_dir} was not exported ({type(e).__name__}: {str(e)[:300]}); the run is "
            "complete: export it with harness.runs.export_run",
            file=sys.stderr,
            flush=True,
        )
        return None
    log_model(trackers, folder)
    return folder
