"""The final outputs of an upstream run (step 7 of :func:`harness.upstream.train.run`): predictions on the
evaluation split and on ``data.heldout_split``, ``model.pt``, ``predictions.npz``, ``heldout_predictions.npz`` and
``metrics.json`` (whose presence marks the run complete), and the final report to the trackers."""

from __future__ import annotations

import time

import torch

from harness.io import atomic_write_text, json_dumps
from harness.models import save_model
from harness.provenance import provenance
from harness.training.trackers import log_report
from harness.uncertainty.predictions import Predictions
from harness.upstream.evaluation import predict_loader
from harness.upstream.parts import Training
from harness.upstream.rundata import heldout_loader


def write_outputs(t: Training) -> None:
    """Predict on the evaluation split (and the held-out split, if set), then (main process) write the final
    files, log the final metrics (``final/<metric>``, ``final/heldout/<metric>``) and the files to the trackers, and
    end the trackers."""
    cfg, accelerator, d, p = t.cfg, t.accelerator, t.data, t.p
    result, arrays = predict_loader(t.model, d.eval_loader, accelerator, d.multilabel, t.memory_format, d.stream)
    heldout, heldout_result = None, None
    if cfg.data.heldout_split:
        held_loader = heldout_loader(cfg, d, accelerator)
        heldout_result, heldout = predict_loader(
            t.model, held_loader, accelerator, d.multilabel, t.memory_format, d.stream
        )
    if t.main:
        run_dir = t.run_dir
        final = accelerator.unwrap_model(t.model)
        save_model(final, run_dir / "model.pt", extra={"epochs": p.epoch, "metrics": result})
        for name, out in (("predictions.npz", arrays), ("heldout_predictions.npz", heldout)):
            if out is not None:
                Predictions(
                    out["logits"], out["targets"], out["index"], list(d.train.class_names), d.link, str(run_dir)
                ).save(run_dir / name)
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
    accelerator.end_training()
