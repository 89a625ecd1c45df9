"""Evaluation during and after an upstream run: predictions and metrics on a loader (gathered over processes),
the evaluation that keeps the best model, and the few-shot monitor (``train.fewshot_every``)."""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import torch

from harness.io import atomic_write_text, json_dumps
from harness.models import save_model
from harness.training.predict import predict_logits
from harness.uncertainty import metrics as M
from harness.uncertainty.multilabel import multilabel_metrics
from harness.upstream.config import UpstreamConfig
from harness.upstream.parts import Training

LOWER_IS_BETTER = {"nll", "sigmoid_nll", "ece", "mce", "adaptive_ece", "brier"}


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


#: what a diverged run's message advises (the settings that make a training diverge)
DIVERGED_FIX = (
    "lower optim.lr or optim.weight_decay, or set optim.clip_grad_norm (a head started with large weights, "
    "model.head.cov_init_scale or model.head_bias_init, diverges too)"
)


def predict_loader(
    model: torch.nn.Module,
    loader,
    accelerator,
    multilabel: bool,
    memory_format: torch.memory_format = torch.contiguous_format,
    stream: bool = False,
) -> "tuple[dict, dict]":
    """Metrics and per-example outputs of ``model`` on ``loader`` (gathered over processes).

    Args:
        stream: ``loader`` reads this process's own part of the split (a shard stream,
            :func:`harness.data.shards.shard_loader`, not prepared by accelerate): processes hold different
            numbers of examples and batches, so the batches are moved to the device here, the model runs
            unwrapped (no DDP collective in its forward), and the outputs are gathered once at the end
            (``gather_object``) and put in index order: every example once.

    Returns:
        (metrics dict, arrays dict with ``logits`` [N, K], ``targets`` [N] or [N, K], ``index`` [N]).
    """
    model.eval()
    net = accelerator.unwrap_model(model) if stream else model  # keeps accelerate's autocast wrapper
    arrays = predict_logits(
        net,
        loader,
        device=accelerator.device if stream else None,
        memory_format=memory_format,
        gather=None if stream else accelerator.gather_for_metrics,
    )
    if stream:
        from accelerate.utils import gather_object

        parts = gather_object([arrays])
        order = np.argsort(np.concatenate([p["index"] for p in parts]), kind="stable")
        arrays = {k: np.concatenate([p[k] for p in parts])[order] for k in arrays}
    bad = int((~np.isfinite(arrays["logits"])).any(axis=1).sum())
    if bad:
        raise TrainingDiverged(
            f"the evaluation gave non-finite logits for {bad} of {len(arrays['logits'])} examples; "
            f"{DIVERGED_FIX} (the last checkpoint is intact)"
        )
    if multilabel:
        result = multilabel_metrics(arrays["logits"], arrays["targets"])
    else:
        result = M.classification_metrics(M.log_softmax(arrays["logits"]), arrays["targets"])
    return result, arrays


def evaluate(t: Training, at: "int | float") -> None:
    """Evaluate on the evaluation split at epoch ``at`` (a fraction between epoch ends): one line of
    ``metrics.jsonl``, the metrics logged as ``eval/<metric>``, and ``checkpoints/best.pt`` when
    ``train.best_metric`` improves; the model goes back to training mode."""
    p, cfg, accelerator = t.p, t.cfg, t.accelerator
    result, _ = predict_loader(
        t.model, t.data.eval_loader, accelerator, t.data.multilabel, t.memory_format, t.data.stream
    )
    p.history.append({"epoch": at, "step": p.step, **result})
    accelerator.log({f"eval/{k}": v for k, v in result.items()}, step=p.step)
    if t.main:
        atomic_write_text(t.run_dir / "metrics.jsonl", "".join(json_dumps(h) + "\n" for h in p.history))
        where = f"epoch {at}" if isinstance(at, int) else f"step {p.step} (epoch {at})"
        print(f"{where}: " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
    best_key = cfg.train.best_metric
    higher = best_key not in LOWER_IS_BETTER
    value = result.get(best_key, math.nan)
    if not p.best or (value > p.best["value"] if higher else value < p.best["value"]):
        p.best = {"metric": best_key, "value": value, "epoch": at, "step": p.step}
        if t.main:
            save_model(accelerator.unwrap_model(t.model), t.ckpt_dir / "best.pt", extra=p.best)
    t.model.train()


def monitor(t: Training, at: "int | float") -> None:
    """The few-shot monitor at epoch ``at`` (main process only): its records appended to ``fewshot.jsonl`` and
    logged as ``fewshot/<task>/<shots>shot``."""
    p, accelerator = t.p, t.accelerator
    records = _fewshot_records(
        accelerator.unwrap_model(t.model), t.fewshot_tasks, t.cfg, accelerator.device, at, p.step
    )
    p.fewshot += records
    accelerator.log({f"fewshot/{r['task']}/{r['shots']}shot": r["prec@1"] for r in records}, step=p.step)
    atomic_write_text(t.run_dir / "fewshot.jsonl", "".join(json_dumps(r) + "\n" for r in p.fewshot))
    print(f"epoch {at} few-shot: " + ", ".join(f"{r['task']} {r['shots']}-shot {r['prec@1']:.4f}" for r in records))


def fewshot_tasks(cfg: UpstreamConfig) -> "Optional[list]":
    """The few-shot monitor's tasks, read and drawn (:func:`harness.tasks.probe.prepare_tasks`), or None when
    the monitor is off (``train.fewshot_every`` and ``train.fewshot_every_steps`` both 0: either alone turns it on,
    audit20 A20-11). Before they are read: no task's test list names an image of the run's own training split
    (:func:`harness.tasks.trained_images.check_lists` with the run's data section, as harness fewshot refuses such a
    task for the finished model: audit23 A23-18).

    Raises:
        ValueError / FileNotFoundError: an unknown task, missing data, more shots than a class has examples; a task's
            test list naming an image the run trains on (the list file and line, the image, data.train_split and the
            fix); each message starts ``train.fewshot_tasks: ``.
    """
    if not (cfg.train.fewshot_every or cfg.train.fewshot_every_steps):
        return None
    from dataclasses import asdict

    from harness.tasks.probe import prepare_tasks
    from harness.tasks.taskset import TaskData, expand_tasks
    from harness.tasks.trained_images import FEWSHOT_SCORED, check_lists, data_folder

    try:
        check_lists(
            data_folder(asdict(cfg.data), "this run's data section"),
            expand_tasks(list(cfg.train.fewshot_tasks)),
            TaskData(),  # the monitor's own (prepare_tasks' default)
            FEWSHOT_SCORED,
            "this run trains on",
            "remove the task from train.fewshot_tasks",
        )
        return prepare_tasks(
            list(cfg.train.fewshot_tasks), list(cfg.train.fewshot_shots), seed=cfg.seed, what="train.fewshot_shots"
        )
    except FileNotFoundError as e:
        raise FileNotFoundError(f"train.fewshot_tasks: {e}") from e
    except ValueError as e:
        raise ValueError(f"train.fewshot_tasks: {e}") from e


def _fewshot_records(
    model: torch.nn.Module, tasks: list, cfg: UpstreamConfig, device: Any, epoch: int, step: int
) -> "list[dict]":
    """Few-shot accuracy of the (unwrapped) ``model`` on the monitor's ``tasks`` at ``data.image_size`` px, one
    record per task and shot count (:func:`harness.tasks.probe.monitor_records`).

    The global torch RNG is restored afterwards (a data loader draws its base seed from it), so the monitor changes
    neither the HET noise nor the data order of the training that follows; the model's mode is restored too.
    """
    from harness.tasks.probe import evaluate_tasks, monitor_records

    with torch.random.fork_rng(devices=[]):
        results = evaluate_tasks(model, tasks, cfg.data.image_size, device, batch_size=cfg.data.eval_batch_size)
    return monitor_records(results, epoch, step)
