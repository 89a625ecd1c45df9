"""The cost of one upstream training step, measured side by side.

A run's recorded wall time says what the machine was doing while it trained as much as what the run
cost: runs trained in different sessions of a shared, variably loaded machine cannot be compared by
it. :func:`step_seconds` instead builds each config's model as :mod:`harness.upstream.train` does and times
its training step (forward, the training loss, backward, optimiser step) on a random batch of the
config's shape, all the configs in one process, interleaved: round r times every config in turn.
Load that changes between rounds slows every config of the round alike, so the per-round ratio to
the first config holds even when the seconds do not. A run's cost is then its number of steps times
the step's median seconds (:func:`harness.experiment.step_cost.step_costs`).

Not timed: data loading (the array loader decodes the images once and augments whole batches as
tensor ops; it costs the same for every config of one batch shape, so timing it too would move every
ratio towards 1), evaluation, checkpoints, the learning-rate schedule.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any, Callable, Mapping, Union

import torch

from harness.upstream.config import UpstreamConfig

#: timed steps per config and round, untimed steps before them, rounds
STEPS, WARMUP, ROUNDS = 20, 3, 3
#: a block (one config in one round) stops taking steps once it has run this long (seconds), with at least
#: :data:`MIN_STEPS` timed steps: a step that is emulated (bf16 on a CPU without native bf16: seconds a step) then
#: costs minutes, not an hour, and a fast step (a fraction of a second) still takes all of ``steps``
BLOCK_SECONDS, MIN_STEPS = 30.0, 3
#: head options that do not change the training step's cost (the temperature divides the logits; the
#: evaluation's MC samples are drawn only when predicting)
FREE_HEAD_OPTIONS = ("temperature", "eval_mc_samples")

PerConfig = Union[None, int, str, Mapping[str, Any]]


def step_key(cfg: UpstreamConfig, num_classes: int, precision: str, threads: int = 1) -> dict:
    """What the cost of a training step of ``cfg`` depends on: backbone (and its options), head (less
    :data:`FREE_HEAD_OPTIONS`), K, batch and image size, memory format, precision, threads, optimiser,
    training loss and whether gradients are clipped. Epochs, learning rates and seeds do not enter:
    runs of one method that differ only in their schedule share one key.

    Args:
        cfg: the run's config.
        num_classes: K (the run's ``len(class_names)``; ``cfg.model.num_classes`` is often None).
        precision: the mixed precision the run trained in (``no``, ``bf16``, ``fp16``; its metrics.json
            ``mixed_precision``), not ``auto``.
        threads: torch threads of the run (its metrics.json ``threads``).

    Returns:
        A JSON-able dict; :func:`key_text` makes it a string.

    Raises:
        ValueError: ``precision`` is ``auto`` or unknown, ``num_classes`` or ``threads`` < 1.
    """
    if precision not in ("no", "bf16", "fp16"):
        raise ValueError(f"precision must be the one a run used (no, bf16 or fp16), got {precision!r}")
    if num_classes < 1 or threads < 1:
        raise ValueError(f"num_classes and threads must be >= 1, got {num_classes} and {threads}")
    return {
        "backbone": cfg.model.backbone,
        "backbone_kwargs": dict(cfg.model.backbone_kwargs),
        "head": {k: v for k, v in sorted(dict(cfg.model.head).items()) if k not in FREE_HEAD_OPTIONS},
        "num_classes": int(num_classes),
        "batch_size": int(cfg.data.batch_size),
        "image_size": int(cfg.data.image_size),
        "channels_last": bool(cfg.train.channels_last),
        "precision": precision,
        "threads": int(threads),
        "optimizer": cfg.optim.name,
        "loss": cfg.train.loss,
        "clip_grad_norm": cfg.optim.clip_grad_norm is not None and cfg.optim.clip_grad_norm > 0,
    }


def key_text(key: dict) -> str:
    """``key`` as one canonical string (sorted JSON), for caches and comparisons."""
    return json.dumps(key, sort_keys=True)


class _Setup:
    """One config's model, optimiser, autocast and random batch, ready to step.

    The configs of one measurement may differ in precision, and accelerate holds one mixed precision per process
    (:mod:`harness.training.loop`), so the step does here in plain PyTorch what an ``Accelerator`` of the run's
    precision does in :func:`harness.training.loop.accumulate_step`: the forward under ``torch.autocast`` (bf16 or
    fp16; none in fp32), the loss in fp32, and for fp16 a ``torch.amp.GradScaler`` (accelerate's own choices for
    these precisions: its ``autocast`` and ``GradScaler`` use). The device is accelerate's
    (``accelerate.PartialState().device``)."""

    def __init__(self, cfg: UpstreamConfig, num_classes: int, precision: str) -> None:
        from accelerate import PartialState

        from harness.models import ModelConfig, build_model
        from harness.training.precision import resolve
        from harness.upstream.optim import build_optimizer

        device = PartialState().device
        resolve(precision, device.type)  # the stages' precision rules (fp16 refused on a CPU)
        self.autocast = {
            "device_type": device.type,
            "enabled": precision != "no",
            "dtype": torch.float16 if precision == "fp16" else torch.bfloat16,
        }
        self.scaler = torch.amp.GradScaler(device.type) if precision == "fp16" else None
        model = build_model(
            ModelConfig(cfg.model.backbone, num_classes, dict(cfg.model.head), dict(cfg.model.backbone_kwargs))
        )
        self.memory_format = torch.channels_last if cfg.train.channels_last else torch.contiguous_format
        self.model = model.to(device=device, memory_format=self.memory_format)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.model.train()
        b, s = cfg.data.batch_size, cfg.data.image_size
        self.x = torch.randn(b, 3, s, s, device=device).contiguous(memory_format=self.memory_format)
        self.multilabel = cfg.model.head.get("link", "softmax") == "sigmoid"
        if self.multilabel:  # multi-hot targets, about half the classes on
            self.y = (torch.rand(b, num_classes, device=device) < 0.5).float()
        else:
            self.y = torch.randint(0, num_classes, (b,), device=device)
        self.loss, self.smoothing = cfg.train.loss, cfg.train.label_smoothing
        # forward correction: the cost does not depend on T's values, only on its shape
        self.log_transition = (
            torch.full((num_classes, num_classes), 1.0 / num_classes, device=device).log()
            if self.loss == "forward"
            else None
        )
        self.clip = cfg.optim.clip_grad_norm

    def step(self) -> None:
        """One optimiser step, as the body of harness.upstream.train's loop (without its loss check and logging)."""
        from harness.upstream.train import training_loss

        with torch.autocast(**self.autocast):
            out = self.model(self.x)
        loss = training_loss(out.float(), self.y, self.multilabel, self.loss, self.smoothing, self.log_transition)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            if self.clip:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            if self.clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.x.device.type == "cuda":
            torch.cuda.synchronize()


def _block(setup: "_Setup", steps: int, warmup: int, budget: float) -> "list[float]":
    """One block: up to ``warmup`` untimed steps, then up to ``steps`` timed ones (seconds each), both cut short once
    the block has run ``budget`` seconds, keeping at least one warm-up step and :data:`MIN_STEPS` timed ones."""
    start = time.perf_counter()
    for i in range(warmup):
        if i and time.perf_counter() - start > budget / 2:
            break
        setup.step()
    block: "list[float]" = []
    while len(block) < steps and (len(block) < MIN_STEPS or time.perf_counter() - start < budget):
        tic = time.perf_counter()
        setup.step()
        block.append(time.perf_counter() - tic)
    return block


def _per(value: PerConfig, name: str, default: Any) -> Any:
    if value is None:
        return default
    if isinstance(value, Mapping):
        return value.get(name, default)
    return value


def _spec(
    configs: "Mapping[str, UpstreamConfig]", num_classes: PerConfig, precision: PerConfig, threads: PerConfig
) -> "dict[str, tuple[UpstreamConfig, int, str, int]]":
    """name -> (config, K, precision, threads) of each config, the defaults of :func:`step_seconds` filled in.

    Raises:
        ValueError: K unknown (no ``num_classes`` given and ``cfg.model.num_classes`` None).
    """
    from harness.training.precision import device_type
    from harness.training.precision import resolve as resolve_precision

    spec = {}
    for name, cfg in configs.items():
        k = _per(num_classes, name, cfg.model.num_classes)
        if k is None:
            raise ValueError(f"{name}: the number of classes is unknown (model.num_classes is None): pass num_classes")
        p = _per(precision, name, None) or resolve_precision(cfg.train.mixed_precision, device_type())
        spec[name] = (cfg, int(k), p, int(_per(threads, name, 1)))
    return spec


def _interleaved(
    spec: "dict[str, tuple[UpstreamConfig, int, str, int]]",
    steps: int,
    warmup: int,
    rounds: int,
    block_seconds: float,
    progress: Callable[[str], None],
) -> "tuple[dict[str, list[list[float]]], list[list], str]":
    """Build every config's :class:`_Setup` (torch seeded 0, the caller's RNG untouched), then ``rounds`` rounds of one
    :func:`_block` per config in turn, each at its thread count (the caller's restored afterwards).

    Returns:
        ``(times, sequence, device)``: per config its blocks of step seconds, round by round; the ``[round, name]``
        blocks in the order they ran; the device the steps ran on.
    """
    before_threads = torch.get_num_threads()
    times: "dict[str, list[list[float]]]" = {name: [] for name in spec}
    sequence = []
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            setups = {name: _Setup(cfg, k, p) for name, (cfg, k, p, _) in spec.items()}
            for r in range(rounds):
                for name, setup in setups.items():
                    torch.set_num_threads(spec[name][3])
                    block = _block(setup, steps, warmup, block_seconds)
                    times[name].append(block)
                    sequence.append([r, name])
                    progress(f"[step cost] round {r + 1}/{rounds} {name}: {statistics.median(block):.4f} s/step")
            device = str(next(iter(setups.values())).x.device)
    finally:
        torch.set_num_threads(before_threads)
    return times, sequence, device


def _per_config(times: "dict[str, list[list[float]]]", keys: "dict[str, dict]", first: str) -> "dict[str, Any]":
    """Each config's entry of :func:`step_seconds`'s ``configs``: its key, medians (overall and per round), the
    per-round ratios to the ``first`` config's median of the same round and their median, and every timed step."""
    out: "dict[str, Any]" = {}
    for name, blocks in times.items():
        medians = [statistics.median(b) for b in blocks]
        ratios = [m / f for m, f in zip(medians, (statistics.median(b) for b in times[first]))]
        out[name] = {
            "key": keys[name],
            "median_seconds": statistics.median([t for b in blocks for t in b]),
            "round_medians": medians,
            "ratio_to_first": ratios,
            "ratio_median": statistics.median(ratios),
            "seconds": blocks,
        }
    return out


def step_seconds(
    configs: "Mapping[str, UpstreamConfig]",
    steps: int = STEPS,
    warmup: int = WARMUP,
    rounds: int = ROUNDS,
    num_classes: PerConfig = None,
    precision: PerConfig = None,
    threads: PerConfig = None,
    progress: Callable[[str], None] = lambda s: None,
    block_seconds: float = BLOCK_SECONDS,
) -> dict:
    """Seconds per training step of each config, measured side by side in this process.

    Each config's model is built as :func:`harness.upstream.train.run` builds it (``build_model`` with the run's
    backbone and head, ``channels_last`` per ``train.channels_last``, ``build_optimizer``, the forward in the run's
    mixed precision's autocast, as :class:`_Setup` says) and
    stepped on one random batch of the training shape [``data.batch_size``, 3, ``data.image_size``,
    ``data.image_size``] with random labels (multi-hot [B, K] for the sigmoid link, else ints in [0, K))
    through :func:`harness.upstream.train.training_loss` (``train.loss``), backward and the optimiser step. Round
    r runs, for every config in turn, ``warmup`` untimed steps and then ``steps`` steps each timed with
    ``time.perf_counter``, at ``torch.set_num_threads(threads)``; ``rounds`` rounds. A block (one config in one
    round) that has run ``block_seconds`` stops early, after at least one warm-up step and :data:`MIN_STEPS` timed
    ones (its median is then over fewer steps; ``seconds`` shows how many). The torch RNG
    and thread count of the caller are restored afterwards.

    Args:
        configs: name -> run config, in order; the first is the reference of the ratios.
        steps, warmup, rounds: timed steps per config and round, untimed steps before them, rounds.
        num_classes: K per config (a dict by name, or one int for all); default ``cfg.model.num_classes``.
        precision: the precision each run used (``no``/``bf16``/``fp16``; dict or one value); default
            ``train.mixed_precision`` resolved on this machine (:func:`harness.training.precision.resolve`).
        threads: torch threads per config (dict or one int); default 1, as ``harness run`` trains with
            ``workers: 2`` on 2 cores.
        progress: called with one line per config and round.
        block_seconds: a block's time budget (default :data:`BLOCK_SECONDS`).

    Returns:
        ``{"configs": {name: {"key", "median_seconds", "round_medians", "ratio_to_first", "ratio_median",
        "seconds"}}, "first", "steps", "warmup", "rounds", "block_seconds", "sequence", "cpu", "date", "load",
        "device"}``:
        ``median_seconds`` is the median over all ``rounds`` x ``steps`` timed steps, in seconds per
        step; ``round_medians`` each round's median; ``ratio_to_first`` per round, its median over steps
        divided by the first config's of the same round, and ``ratio_median`` their median; ``seconds``
        every timed step (round by round); ``sequence`` the ``[round, name]`` blocks in the order they
        ran; ``cpu`` the CPU as ``lscpu`` names it; ``native_bf16`` whether it computes bf16 natively (else bf16
        steps are emulated, and far slower than where such runs trained); ``load`` niceness and load averages
        at start and end.

    Raises:
        ValueError: no configs, ``steps`` or ``rounds`` < 1, ``warmup`` < 0, K unknown (no
            ``num_classes`` given and ``cfg.model.num_classes`` None), a precision that does not run here.
    """
    from harness.provenance import cpu_details, cpu_model, machine_load
    from harness.training.precision import device_type, native_bf16

    if not configs:
        raise ValueError("no configs to measure")
    if steps < 1 or rounds < 1 or warmup < 0:
        raise ValueError(f"steps and rounds must be >= 1 and warmup >= 0, got {steps}, {rounds}, {warmup}")
    spec = _spec(configs, num_classes, precision, threads)
    keys = {name: step_key(*s) for name, s in spec.items()}
    start = machine_load()
    times, sequence, device = _interleaved(spec, steps, warmup, rounds, block_seconds, progress)
    first = next(iter(configs))
    import datetime as _dt

    return {
        "configs": _per_config(times, keys, first),
        "first": first,
        "steps": steps,
        "warmup": warmup,
        "rounds": rounds,
        "block_seconds": block_seconds,
        "sequence": sequence,
        "cpu": cpu_details() or cpu_model(),
        "device": device,
        "native_bf16": native_bf16(device_type()),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load": {"start": start, "end": machine_load()},
    }
