"""The upstream training loop, on ``accelerate`` (one CPU, several GPUs, TPUs).

A run folder ``<output_dir>/`` holds:

- ``config.yaml``: the resolved config; ``run.json``: command, machine, versions, data, label noise;
- ``checkpoints/last.pt``: resumable training state (model, optimiser, schedule, RNG, data
  position), rewritten atomically; ``checkpoints/best.pt``: the best model so far by
  ``train.best_metric`` (a :func:`harness.models.save_model` file);
- ``metrics.jsonl``: one line per evaluation; ``tb/``: TensorBoard logs;
- ``fewshot.jsonl`` (with ``train.fewshot_every``): one line per few-shot evaluation of a task at a shot count
  (:func:`harness.downstream.fewshot.monitor_records`), also logged to TensorBoard as ``fewshot/<task>/<shots>shot``;
- at the end: ``model.pt`` (final model), ``predictions.npz`` (final per-example logits on the
  evaluation split; ``heldout_predictions.npz`` likewise on ``data.heldout_split`` if set) and
  ``metrics.json`` (final metrics, those on the held-out split, best epoch, times, provenance). Its presence marks
  the run complete: running the same config again does nothing; an interrupted run resumes.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import time
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from harness.config import to_dict, to_yaml
from harness.data.batched import make_loader
from harness.data.config import STREAM_SOURCES
from harness.data.dataset import LabelSets
from harness.data.noise import empirical_transition, inject_label_noise, transition_matrix
from harness.data.shards import shard_split
from harness.data.sources import build_split
from harness.io import RunLock, atomic_torch_save, atomic_write_text, json_dumps
from harness.models import ModelConfig, build_model, save_model
from harness.provenance import provenance
from harness.uncertainty import metrics as M
from harness.uncertainty.predictions import Predictions
from harness.upstream.config import UpstreamConfig, validate
from harness.upstream.optim import build_optimizer, lr_multiplier

STATE_FORMAT = "harness.upstream-state/2"  # /2: one RNG state per process, in the same file
LOWER_IS_BETTER = {"nll", "sigmoid_nll", "ece", "mce", "adaptive_ece", "brier"}


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite."""


class Preempted(RuntimeError):
    """Training stopped early because ``stop_requested`` asked it to (a preemption or time-limit signal, see
    :mod:`harness.upstream.launch`); the state was saved at that step, so running the same config again resumes there."""


def _rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": [int(v) if not isinstance(v, np.ndarray) else v.tolist()
                                                       for v in np.random.get_state()[1:]],
             "python": list(random.getstate()[1]) + [random.getstate()[0]]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state(("MT19937", np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    *py, version = state["python"]
    random.setstate((version, tuple(py), None))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def forward_corrected_nll(logits: torch.Tensor, target: torch.Tensor, log_transition: torch.Tensor) -> torch.Tensor:
    """Forward loss correction: the mean over examples of -log (pᵀT)_ỹ, the NLL of the noisy label ỹ
    under the noisy-label distribution the model implies, with p = softmax(logits) the model's
    distribution over clean classes and T[c, j] = P(noisy = j | clean = c) (Patrini et al., CVPR
    2017, "Making deep neural networks robust to label noise: a loss correction approach", Sec. 3.1,
    Theorem 2). For a HET head the logits are log p̄, so p is its MC-averaged probability.

    Computed in log space: log (pᵀT)_ỹ = logsumexp_c (log p_c + log T[c, ỹ]), with log T = -inf where
    T = 0; only the column of each target enters, so the gradient is finite whenever that column
    has a non-zero entry (always, for labels drawn from T).

    Args:
        logits: ``[B, K]`` (p = softmax(logits); computed in their dtype).
        target: ``[B]`` int64 noisy labels.
        log_transition: ``[K, K]`` log T (``torch.log`` of a row-stochastic T).

    Returns:
        Scalar loss.
    """
    log_p = F.log_softmax(logits, dim=-1)
    columns = log_transition.to(log_p.dtype).t()[target]  # [B, K]: log T[c, ỹ_b] over clean classes c
    return -torch.logsumexp(log_p + columns, dim=-1).mean()


def training_loss(logits: torch.Tensor, target: torch.Tensor, multilabel: bool, loss: str = "nll",
                  label_smoothing: float = 0.1, log_transition: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The training loss of a batch (``train.loss``).

    Multi-label (multi-hot ``target`` ``[B, K]``): sigmoid cross-entropy summed over classes and
    averaged over examples (UB ``sigmoid_xent``). Single-label (``target`` ``[B]`` ints or soft
    ``[B, K]``), on ``logits`` ``[B, K]``: ``nll``, softmax cross-entropy; ``label_smoothing``, the
    cross-entropy against (1 - ε)·onehot(y) + ε/K with ε = ``label_smoothing`` (Szegedy et al.,
    CVPR 2016, Sec. 7; ``F.cross_entropy(..., label_smoothing=ε)``); ``forward``,
    :func:`forward_corrected_nll` with ``log_transition`` ``[K, K]``.

    Raises:
        ValueError: unknown ``loss``, ``forward`` without ``log_transition``, or a loss other than
            ``nll`` on multi-label targets.
    """
    if multilabel:
        if loss != "nll":
            raise ValueError(f"train.loss={loss} applies to single-label (softmax) training; multi-label takes nll")
        return F.binary_cross_entropy_with_logits(logits, target.float(), reduction="sum") / logits.shape[0]
    if loss == "nll":
        return F.cross_entropy(logits, target)
    if loss == "label_smoothing":
        return F.cross_entropy(logits, target, label_smoothing=label_smoothing)
    if loss == "forward":
        if log_transition is None:
            raise ValueError("train.loss=forward needs the log transition matrix of the label noise")
        return forward_corrected_nll(logits, target, log_transition)
    raise ValueError(f"unknown train.loss {loss!r}: use nll, label_smoothing or forward")


def predict_loader(model: torch.nn.Module, loader, accelerator, multilabel: bool,
             memory_format: torch.memory_format = torch.contiguous_format, stream: bool = False) -> "tuple[dict, dict]":
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
    outs: "dict[str, list]" = {"logits": [], "targets": [], "index": []}
    with torch.no_grad():
        for x, y, idx in loader:
            x = x.to(accelerator.device) if stream else x
            logits = net(x.contiguous(memory_format=memory_format)).float()
            if not stream:
                logits, y, idx = accelerator.gather_for_metrics((logits, y, idx))
            outs["logits"].append(logits.cpu())
            outs["targets"].append(y.cpu())
            outs["index"].append(idx.cpu())
    arrays = {k: torch.cat(v).numpy() for k, v in outs.items()}
    if stream:
        from accelerate.utils import gather_object

        parts = gather_object([arrays])
        order = np.argsort(np.concatenate([p["index"] for p in parts]), kind="stable")
        arrays = {k: np.concatenate([p[k] for p in parts])[order] for k in arrays}
    bad = int((~np.isfinite(arrays["logits"])).any(axis=1).sum())
    if bad:
        raise TrainingDiverged(f"the evaluation gave non-finite logits for {bad} of {len(arrays['logits'])} examples; "
                               "lower optim.lr or set optim.clip_grad_norm (the last checkpoint is intact)")
    if multilabel:
        result = M.multilabel_metrics(arrays["logits"], arrays["targets"])
    else:
        result = M.classification_metrics(M.log_softmax(arrays["logits"]), arrays["targets"])
    return result, arrays


def _same_config(saved: str, config_yaml: str) -> bool:
    """Whether a saved ``config.yaml`` describes the requested run: the same text, or the same after
    the settings added since it was written take their defaults (so run folders written by an older
    version, before a setting existed, still resume and count as done)."""
    if saved == config_yaml:
        return True
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        filled = OmegaConf.merge(OmegaConf.structured(UpstreamConfig), OmegaConf.create(saved))
    except (OmegaConfBaseException, ValueError):
        return False
    return OmegaConf.to_yaml(filled, resolve=True) == config_yaml


#: what harness upstream writes in a run folder: with --overwrite, a folder holding files of others may hold none of
#: these (``submitit``: the job folder of ``--executor``, made when the job is submitted)
RUN_FILES = ("config.yaml", "run.json", "metrics.json", "metrics.jsonl", "fewshot.jsonl", "model.pt", "predictions.npz",
             "heldout_predictions.npz", "checkpoints", "tb", "wandb", "submitit")


def check_output(run_dir: Path, overwrite: bool = False) -> None:
    """Refuse, before any work, a run folder holding files harness upstream did not write (a folder with no run's
    ``config.yaml``): with ``overwrite`` the run writes beside them, but never over one (:data:`RUN_FILES`).

    Raises:
        ValueError: naming the files, ``output_dir`` and ``--overwrite``.
    """
    from harness.io import LOCK_FILES, check_output_folder

    ours = (run_dir / "config.yaml").is_file() or (
        run_dir.is_dir() and all(p.name in ("submitit", *LOCK_FILES) for p in run_dir.iterdir()))
    check_output_folder(run_dir, ours, RUN_FILES, overwrite, "harness upstream", "output_dir")


def _check_existing(run_dir: Path, config_yaml: str) -> str:
    """``"new"``, ``"resume"`` or ``"done"``; refuses a folder that holds another config's run."""
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return "new"
    if not _same_config(saved.read_text(), config_yaml):
        import difflib

        diff = "".join(difflib.unified_diff(saved.read_text().splitlines(True), config_yaml.splitlines(True),
                                            "saved", "requested", n=0))
        raise ValueError(f"{run_dir} holds a run with a different config:\n{diff}\nuse another name or "
                         "output_dir for the new run, or delete that folder to start it over")
    if (run_dir / "metrics.json").is_file() and (run_dir / "model.pt").is_file():
        return "done"
    return "resume" if (run_dir / "checkpoints" / "last.pt").is_file() else "new"


def run(cfg: UpstreamConfig, progress: bool = True, stop_after_steps: Optional[int] = None,
        stop_requested: Optional[Callable[[], bool]] = None, overwrite: bool = False) -> Path:
    """Train and evaluate one upstream model; resume if its folder holds an interrupted run.

    Args:
        cfg: the run config.
        progress: show a progress bar.
        stop_after_steps: stop (after checkpointing) once this many optimiser steps are done in
            total, as an interruption would; for tests of resumption.
        stop_requested: polled after every optimiser step (by every process; the processes agree through
            ``accelerator.check_trigger``, one all-reduce of a scalar a step): once it returns True on any process,
            all of them save the state at that step and :class:`Preempted` is raised. Not polled after the last
            step (the run then finishes). :class:`harness.upstream.launch.PretrainJob` sets it to submitit's preemption flag.
        overwrite: train into a folder holding files harness upstream did not write, beside them (never over one:
            :func:`check_output`).

    Returns:
        The run folder.

    Raises:
        ValueError: bad config or data (unknown backbone, labels out of range, link not matching
            the labels, a folder holding a different run...).
        TrainingDiverged: NaN or infinite loss (the last checkpoint stays intact).
        Preempted: ``stop_requested`` returned True (the state is saved).
    """
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from harness.precision import device_type
    from harness.precision import resolve as resolve_precision

    validate(cfg)
    run_dir = Path(cfg.run_dir())
    config_yaml = to_yaml(cfg)
    status = _check_existing(run_dir, config_yaml)
    check_output(run_dir, overwrite)  # a folder of someone else's files: refused before any work
    # a previous run in this process leaves accelerate's global state behind (and with it its mixed
    # precision); drop that part, keeping the distributed environment
    AcceleratorState._reset_state(reset_partial_state=False)
    precision = resolve_precision(cfg.train.mixed_precision, device_type())
    accelerator = Accelerator(mixed_precision=precision,
                              gradient_accumulation_steps=cfg.train.grad_accum_steps,
                              log_with="tensorboard", project_dir=str(run_dir))
    main = accelerator.is_main_process
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world > 1 and accelerator.num_processes == 1:  # accelerate's silent fallback: W copies of one run
        raise ValueError(f"WORLD_SIZE={world} but accelerate started a single process (no process group): on CPUs "
                         "set ACCELERATE_USE_CPU=true (accelerate launch --cpu and harness upstream --executor do) "
                         "so that the processes join one gloo group; on GPUs check that torch sees CUDA")
    if precision == "fp16" and accelerator.device.type == "cpu":
        raise ValueError("train.mixed_precision=fp16 does not run on a CPU (accelerate silently trains in fp32 "
                         "there): use bf16 on CPUs")
    if status == "done":
        if main:
            print(f"{run_dir}: already complete (metrics.json); nothing to do")
        return run_dir
    with RunLock(run_dir, subfolders=("checkpoints",)) if main else contextlib.nullcontext():
        return _train(cfg, run_dir, config_yaml, status, accelerator, progress, stop_after_steps, stop_requested)


def _stop_agreed(accelerator: Any, stop_requested: Callable[[], bool]) -> bool:
    """Whether any process's ``stop_requested()`` is True: a collective (``accelerator.set_trigger`` /
    ``check_trigger``, an all-reduce of one scalar), so every process must call it at the same step."""
    if stop_requested():
        accelerator.set_trigger()
    return bool(accelerator.check_trigger())


def _fewshot_tasks(cfg: UpstreamConfig) -> "Optional[list]":
    """The few-shot monitor's tasks, read and drawn (:func:`harness.downstream.fewshot.prepare_tasks`), or None when
    ``train.fewshot_every`` is off.

    Raises:
        ValueError / FileNotFoundError: an unknown task, missing data, more shots than a class has examples.
    """
    if not cfg.train.fewshot_every:
        return None
    from harness.downstream.fewshot import prepare_tasks

    try:
        return prepare_tasks(list(cfg.train.fewshot_tasks), list(cfg.train.fewshot_shots), seed=cfg.seed,
                             what="train.fewshot_shots")
    except FileNotFoundError as e:
        raise FileNotFoundError(f"train.fewshot_tasks: {e}") from e
    except ValueError as e:
        raise ValueError(f"train.fewshot_tasks: {e}") from e


def _fewshot_records(model: torch.nn.Module, tasks: list, cfg: UpstreamConfig, device: Any, epoch: int,
                     step: int) -> "list[dict]":
    """Few-shot accuracy of the (unwrapped) ``model`` on the monitor's ``tasks`` at ``data.image_size`` px, one
    record per task and shot count (:func:`harness.downstream.fewshot.monitor_records`).

    The global torch RNG is restored afterwards (a data loader draws its base seed from it), so the monitor changes
    neither the HET noise nor the data order of the training that follows; the model's mode is restored too.
    """
    from harness.downstream.fewshot import evaluate_tasks, monitor_records

    with torch.random.fork_rng(devices=[]):
        results = evaluate_tasks(model, tasks, cfg.data.image_size, device, batch_size=cfg.data.eval_batch_size)
    return monitor_records(results, epoch, step)


def _noisy_heldout(cfg: UpstreamConfig, held: Any) -> "tuple[Any, dict]":
    """The held-out split with ``data.label_noise`` drawn on its labels too, from the noise seed's
    second stream (:func:`harness.data.noise.inject_label_noise`, ``stream=1``): held-out labels are
    what a user has, so they are as noisy as the training labels, and a held-out NLL (the choice of
    τ, a primary endpoint) is scored against them. Returns the split and the noise's description."""
    images = held.pixels(cfg.data.cache_dir) if cfg.data.label_noise.get("kind") == "input_dependent" else None
    noisy, info = inject_label_noise(held.labels, held.num_classes, **cfg.data.label_noise, images=images, stream=1)
    return held.with_labels(noisy, f"{held.description}, with {info['kind']} label noise "
                                   f"({info['realised_rate']:.1%} flipped)"), info


def _train(cfg: UpstreamConfig, run_dir: Path, config_yaml: str, status: str, accelerator: Any, progress: bool,
           stop_after_steps: Optional[int], stop_requested: Optional[Callable[[], bool]] = None) -> Path:
    """The body of :func:`run`, in a folder this process holds the lock of."""
    from accelerate.utils import gather_object, set_seed

    main = accelerator.is_main_process
    set_seed(cfg.seed, device_specific=True)  # + process index: each rank draws its own HET noise

    # ---------------------------------------------------------------- data
    # data.source=shards: WebDataset shards read as a stream, each process its own shards (harness.data.shards)
    stream = cfg.data.source in STREAM_SOURCES
    read_split = shard_split if stream else build_split
    train_base = read_split(cfg.data, cfg.data.train_split)
    eval_base = read_split(cfg.data, cfg.data.eval_split)
    if stream and cfg.data.heldout_split:
        shard_split(cfg.data, cfg.data.heldout_split)  # a missing pack is named now, not after training
    if train_base.class_names != eval_base.class_names or train_base.multilabel != eval_base.multilabel:
        raise ValueError(f"train split {cfg.data.train_split!r} and eval split {cfg.data.eval_split!r} differ in "
                         "classes or label type")
    noise_info, clean_labels = None, None if stream else train_base.labels
    if cfg.data.label_noise and cfg.data.label_noise.get("kind", "none") != "none":
        if train_base.multilabel:
            raise ValueError("data.label_noise flips single labels; this training split is multi-label")
        images = None
        if cfg.data.label_noise.get("kind") == "input_dependent":
            images = train_base.pixels(cfg.data.cache_dir)
            if images is None:
                raise ValueError(f"data.label_noise.kind=input_dependent needs the training images in one array, and "
                                 f"{train_base.description} reads them one by one: use a class-conditional kind")
        noisy, noise_info = inject_label_noise(train_base.labels, train_base.num_classes, **cfg.data.label_noise,
                                               images=images)
        train_base = train_base.with_labels(noisy, f"{train_base.description}, with {noise_info['kind']} "
                                                   f"label noise ({noise_info['realised_rate']:.1%} flipped)")
    link = cfg.model.head.get("link", "softmax")
    if link == "sigmoid" and not train_base.multilabel:  # sigmoid link on single-label data: one-hot targets
        train_base, eval_base = (d.one_hot() if stream else
                                 d.with_labels(LabelSets.from_labels(d.labels), f"{d.description}, one-hot")
                                 for d in (train_base, eval_base))
    multilabel = train_base.multilabel
    num_classes = cfg.model.num_classes or train_base.num_classes
    if num_classes != train_base.num_classes:
        raise ValueError(f"model.num_classes={num_classes} but the data has {train_base.num_classes} classes; "
                         "leave model.num_classes unset to take it from the data")
    if multilabel and link != "sigmoid":
        raise ValueError("multi-label data needs the sigmoid link: set model.head.link=sigmoid")
    if len(train_base) < cfg.data.batch_size:
        raise ValueError(f"the training split has {len(train_base)} examples, fewer than data.batch_size="
                         f"{cfg.data.batch_size}; lower the batch size")
    # the training loss, as recorded; forward correction takes the noise's nominal transition matrix,
    # or for input-dependent noise (which has none) the empirical one of the noisy labels
    loss_info: "dict[str, Any]" = {"name": cfg.train.loss}
    log_transition = None
    if cfg.train.loss == "label_smoothing":
        loss_info["label_smoothing"] = cfg.train.label_smoothing
    elif cfg.train.loss == "forward":
        noise = cfg.data.label_noise
        if noise["kind"] == "input_dependent":
            t = empirical_transition(clean_labels, train_base.labels, num_classes)
            loss_info["transition"] = "empirical"
        else:
            t = transition_matrix(noise["kind"], num_classes, noise.get("rate", 0.0), noise.get("matrix"),
                                  noise.get("permutation"))
            loss_info["transition"] = "nominal"
        loss_info["matrix"] = np.round(t, 4).tolist()
        log_transition = torch.log(torch.as_tensor(t, dtype=torch.float32))

    rank, world = accelerator.process_index, accelerator.num_processes
    if stream:  # whole batches, as many on every rank, a multiple of the accumulation steps an epoch
        train_loader, train_ds = train_base.loader(True, cfg.seed, rank, world, cfg.train.grad_accum_steps)
        eval_loader, sampler = eval_base.loader(False, cfg.seed, rank, world)[0], None
    else:
        train_loader, train_ds, sampler = make_loader(cfg.data, train_base, train=True, seed=cfg.seed)
        eval_loader = make_loader(cfg.data, eval_base, train=False, seed=cfg.seed)[0]
    # the shard stream's order depends on the processes and loader workers: a resume needs the same
    layout = {"world_size": world, "num_workers": cfg.data.num_workers} if stream else None
    fewshot_tasks = _fewshot_tasks(cfg)  # read and drawn now: bad few-shot data stops the run before training

    # ---------------------------------------------------------------- model and optimiser
    model_cfg = ModelConfig(cfg.model.backbone, num_classes, dict(cfg.model.head), dict(cfg.model.backbone_kwargs))
    model = build_model(model_cfg, cfg.model.pretrained_file)
    if cfg.model.head_bias_init is not None:
        torch.nn.init.constant_(model.head.loc.bias, cfg.model.head_bias_init)
    memory_format = torch.channels_last if cfg.train.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    optimizer = build_optimizer(model, cfg.optim)
    if stream:  # not the shard loaders: accelerate would split their streams across processes a second time
        model, optimizer = accelerator.prepare(model, optimizer)
    else:
        model, optimizer, train_loader, eval_loader = accelerator.prepare(model, optimizer, train_loader, eval_loader)
    steps_per_epoch = max(1, len(train_loader) // cfg.train.grad_accum_steps)
    # train.steps: exactly that many optimiser steps (the last epoch may be partial); else train.epochs epochs
    total_steps = cfg.train.steps
    epochs = cfg.train.epochs if total_steps is None else math.ceil(total_steps / steps_per_epoch)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_multiplier(cfg.optim, steps_per_epoch, epochs,
                                                                           total_steps))
    if log_transition is not None:
        log_transition = log_transition.to(accelerator.device)

    # ---------------------------------------------------------------- state, resume
    epoch, batch_in_epoch, step = 0, 0, 0
    # train_seconds, train_images: training steps only (no eval, no checkpoints); wall_seconds: the
    # whole run (data, model, evaluation, checkpoints) summed over its sessions up to its last checkpoint
    timing = {"train_seconds": 0.0, "train_images": 0, "wall_seconds": 0.0}
    session_start = time.perf_counter()
    history: "list[dict]" = []
    fewshot_history: "list[dict]" = []
    best: "dict[str, Any]" = {}
    ckpt_dir = run_dir / "checkpoints"
    if status == "resume":
        try:
            state = torch.load(ckpt_dir / "last.pt", map_location="cpu", weights_only=True)
        except Exception as e:  # damaged, or holding objects that weights-only loading refuses to build
            raise ValueError(f"{ckpt_dir / 'last.pt'} cannot be read as a training state ({type(e).__name__}); "
                             "delete it to start the run over") from e
        if state.get("format") == "harness.upstream-state/1":  # one process's RNG, saved with the model
            state["rng"] = [state["rng"]]
        elif state.get("format") != STATE_FORMAT:
            raise ValueError(f"{ckpt_dir / 'last.pt'} is not an upstream training state; delete it to start over")
        try:
            accelerator.unwrap_model(model).load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
        except (RuntimeError, ValueError, KeyError, TypeError) as e:  # another model's or optimiser's state
            first = str(e).splitlines()[0][:160] if str(e) else ""
            raise ValueError(f"{ckpt_dir / 'last.pt'} does not fit this run's model or optimiser ({type(e).__name__}: "
                             f"{first}): it is another run's state; delete it to start the run over") from None
        epoch, batch_in_epoch, step = state["epoch"], state["batch_in_epoch"], state["step"]
        history, best, timing = state["history"], state["best"], {"wall_seconds": 0.0, **state["timing"]}
        fewshot_history = list(state.get("fewshot", []))  # absent from states written before the monitor existed
        rng = state["rng"]
        if stream and state.get("stream") != layout:
            saved = state.get("stream") or {}
            raise ValueError(f"{ckpt_dir / 'last.pt'} was written reading the shards with {saved.get('world_size')} "
                             f"process(es) x {saved.get('num_workers')} loader worker(s) and this run has {world} x "
                             f"{cfg.data.num_workers}: a shard stream's order depends on both, so the run resumes "
                             f"exactly only with the same; resume with --num_processes {saved.get('world_size')} and "
                             f"data.num_workers={saved.get('num_workers')}, or start a new run")
        if len(rng) != accelerator.num_processes:
            raise ValueError(f"{ckpt_dir / 'last.pt'} was written by {len(rng)} processes and this run has "
                             f"{accelerator.num_processes}; resume with --num_processes {len(rng)} (the data order "
                             "and the HET noise of every process are part of the state)")
        _set_rng_state(rng[accelerator.process_index])
        if main:
            print(f"{run_dir}: resuming at epoch {epoch}, batch {batch_in_epoch} (step {step})")
    elif main:
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.yaml", config_yaml)
        meta = {**provenance(), "config": to_dict(cfg), "train_data": train_base.description,
                "eval_data": eval_base.description, "num_train": len(train_base), "num_eval": len(eval_base),
                "class_names": train_base.class_names, "label_noise": noise_info, "loss": loss_info,
                "num_processes": accelerator.num_processes, "mixed_precision": accelerator.mixed_precision}
        atomic_write_text(run_dir / "run.json", json_dumps(meta, indent=1))
    accelerator.init_trackers("tb", config={"name": cfg.name, "seed": cfg.seed})
    if main and not accelerator.trackers:  # accelerate drops an uninstalled tracker without a word
        from harness.extras import install_hint

        print(f"{run_dir}: no TensorBoard logs (tensorboard is not installed): {install_hint('track')}")

    def save_state() -> None:
        # one file, written atomically, holds the whole state, the RNG of every process included: a
        # kill at any point leaves either the previous checkpoint or this one, never a mix of the two
        rng = gather_object([_rng_state()])
        if main:
            timing_now = {**timing, "wall_seconds": timing["wall_seconds"] + time.perf_counter() - session_start}
            atomic_torch_save({
                "format": STATE_FORMAT, "model": accelerator.unwrap_model(model).state_dict(),
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng,
                "epoch": epoch, "batch_in_epoch": batch_in_epoch, "step": step, "history": history, "best": best,
                "timing": timing_now, "fewshot": fewshot_history, "stream": layout,
            }, ckpt_dir / "last.pt")
        accelerator.wait_for_everyone()

    # ---------------------------------------------------------------- evaluation and monitors
    best_key, higher = cfg.train.best_metric, cfg.train.best_metric not in LOWER_IS_BETTER

    def evaluate(at: "int | float") -> None:  # at: the epoch (a fraction between epoch ends)
        nonlocal best
        result, _ = predict_loader(model, eval_loader, accelerator, multilabel, memory_format, stream)
        history.append({"epoch": at, "step": step, **result})
        accelerator.log({f"eval/{k}": v for k, v in result.items()}, step=step)
        if main:
            atomic_write_text(run_dir / "metrics.jsonl", "".join(json_dumps(h) + "\n" for h in history))
            where = f"epoch {at}" if isinstance(at, int) else f"step {step} (epoch {at})"
            print(f"{where}: " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
        value = result.get(best_key, math.nan)
        if not best or (value > best["value"] if higher else value < best["value"]):
            best = {"metric": best_key, "value": value, "epoch": at, "step": step}
            if main:
                save_model(accelerator.unwrap_model(model), ckpt_dir / "best.pt", extra=best)
        model.train()

    def monitor(at: "int | float") -> None:  # the few-shot monitor (main process only)
        nonlocal fewshot_history
        records = _fewshot_records(accelerator.unwrap_model(model), fewshot_tasks, cfg, accelerator.device, at, step)
        fewshot_history += records
        accelerator.log({f"fewshot/{r['task']}/{r['shots']}shot": r["prec@1"] for r in records}, step=step)
        atomic_write_text(run_dir / "fewshot.jsonl", "".join(json_dumps(r) + "\n" for r in fewshot_history))
        print(f"epoch {at} few-shot: " + ", ".join(f"{r['task']} {r['shots']}-shot {r['prec@1']:.4f}" for r in records))

    def finished() -> bool:
        return total_steps is not None and step >= total_steps

    # ---------------------------------------------------------------- loop
    while epoch < epochs and not finished():
        if stream:  # the epoch's stream without the batches already done (resume), undecoded
            train_ds.use_epoch(epoch, skip_batches=batch_in_epoch)
            loader = train_loader
        else:
            sampler.use_epoch(epoch)
            train_ds.use_epoch(epoch)
            loader = accelerator.skip_first_batches(train_loader, batch_in_epoch) if batch_in_epoch else train_loader
        model.train()
        bar = tqdm(loader, total=len(train_loader), initial=batch_in_epoch, disable=not (progress and main),
                   desc=f"epoch {epoch + 1}/{epochs}", leave=False)
        tic = time.perf_counter()
        for x, y, _ in bar:
            if stream:  # loaders accelerate did not prepare: on the device here
                x, y = x.to(accelerator.device), y.to(accelerator.device)
            x = x.contiguous(memory_format=memory_format)
            with accelerator.accumulate(model):
                loss = training_loss(model(x), y, multilabel, cfg.train.loss, cfg.train.label_smoothing,
                                     log_transition)
                if not torch.isfinite(loss.detach()):
                    raise TrainingDiverged(
                        f"loss is {loss.item()} at epoch {epoch}, step {step}; lower optim.lr or set "
                        f"optim.clip_grad_norm ("
                        + (f"the last checkpoint, {ckpt_dir / 'last.pt'}, is intact and resumable)"
                           if (ckpt_dir / "last.pt").is_file() else "no checkpoint was written yet: the run starts over)"))
                accelerator.backward(loss)
                if accelerator.sync_gradients and cfg.optim.clip_grad_norm:
                    accelerator.clip_grad_norm_(model.parameters(), cfg.optim.clip_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            batch_in_epoch += 1
            timing["train_images"] += x.shape[0] * accelerator.num_processes
            if not accelerator.sync_gradients:
                continue
            scheduler.step()
            step += 1
            if step % cfg.train.log_every == 0:
                accelerator.log({"train/loss": loss.item(), "train/lr": scheduler.get_last_lr()[0]}, step=step)
                bar.set_postfix(loss=f"{loss.item():.4f}")
            at = round(epoch + batch_in_epoch / len(train_loader), 4)
            evaluated = (cfg.train.eval_every_steps and step % cfg.train.eval_every_steps == 0 and not finished()
                         and batch_in_epoch < len(train_loader))  # the epoch's end evaluates on its own
            if evaluated:
                evaluate(at)
            if (fewshot_tasks and main and cfg.train.fewshot_every_steps and not finished()
                    and step % cfg.train.fewshot_every_steps == 0 and batch_in_epoch < len(train_loader)):
                monitor(at)
                evaluated = True
            # a stop request (preemption) on any process stops all of them at this step, after saving the state
            preempted = stop_requested is not None and _stop_agreed(accelerator, stop_requested) and not finished()
            if evaluated or (cfg.train.checkpoint_every and step % cfg.train.checkpoint_every == 0) or (
                    stop_after_steps is not None and step >= stop_after_steps) or preempted:
                timing["train_seconds"] += time.perf_counter() - tic
                save_state()
                tic = time.perf_counter()
            if stop_after_steps is not None and step >= stop_after_steps:
                accelerator.end_training()
                return run_dir
            if preempted:
                accelerator.end_training()
                raise Preempted(f"{run_dir}: stopped at step {step} on request (preemption), the state saved in "
                                f"{ckpt_dir / 'last.pt'}; the same config resumes there")
            if finished():
                break
        timing["train_seconds"] += time.perf_counter() - tic
        bar.close()
        epoch, batch_in_epoch = epoch + 1, 0  # a run that reached train.steps ends its last, partial epoch here
        last = epoch == epochs or finished()
        if epoch % cfg.train.eval_every == 0 or last:
            evaluate(epoch)
        if fewshot_tasks and main and ((cfg.train.fewshot_every and epoch % cfg.train.fewshot_every == 0) or last):
            monitor(epoch)
        save_state()

    # ---------------------------------------------------------------- final outputs
    result, arrays = predict_loader(model, eval_loader, accelerator, multilabel, memory_format, stream)
    heldout, heldout_result = None, None
    if cfg.data.heldout_split:
        held_base = read_split(cfg.data, cfg.data.heldout_split)
        if noise_info is not None:  # the held-out labels carry the same noise (what a user holds out is noisy)
            held_base, noise_info["heldout"] = _noisy_heldout(cfg, held_base)
        if multilabel and not held_base.multilabel:
            held_base = held_base.one_hot() if stream else held_base.with_labels(LabelSets.from_labels(held_base.labels))
        if stream:
            held_loader = held_base.loader(False, cfg.seed, rank, world)[0]
        else:
            held_loader = accelerator.prepare(make_loader(cfg.data, held_base, train=False, seed=cfg.seed)[0])
        heldout_result, heldout = predict_loader(model, held_loader, accelerator, multilabel, memory_format, stream)
    if main:
        final = accelerator.unwrap_model(model)
        save_model(final, run_dir / "model.pt", extra={"epochs": epoch, "metrics": result})
        for name, out in (("predictions.npz", arrays), ("heldout_predictions.npz", heldout)):
            if out is not None:
                Predictions(out["logits"], out["targets"], out["index"], list(train_base.class_names), link,
                            str(run_dir)).save(run_dir / name)
        summary = {"name": cfg.name, "metrics": result, "heldout_metrics": heldout_result, "best": best, "history": history, "epochs": epoch,
                   "steps": step, "train_images_per_sec": timing["train_images"] / max(timing["train_seconds"], 1e-9),
                   "train_seconds": timing["train_seconds"], "train_images": timing["train_images"],
                   "wall_seconds": timing["wall_seconds"] + time.perf_counter() - session_start,
                   "threads": torch.get_num_threads(), "mixed_precision": accelerator.mixed_precision,
                   "eval_data": eval_base.description, "train_data": train_base.description,
                   "label_noise": noise_info, "loss": loss_info, **provenance()}
        atomic_write_text(run_dir / "metrics.json", json_dumps(summary, indent=1))
        print(f"{run_dir}: done; final " + ", ".join(f"{k} {v:.4f}" for k, v in result.items()))
    accelerator.end_training()
    return run_dir

