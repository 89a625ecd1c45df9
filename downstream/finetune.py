"""Transfer of an upstream checkpoint to one task: fresh zero-initialised head, BiT-style fine-tuning.

The transfer rule (paper Sec. 4.2: a fresh homoscedastic output layer): load the upstream model, drop its whole
head (mean and covariance layers, temperature), attach a zero-initialised linear softmax head on
the pre-logits and fine-tune the whole network. Optionally (``head`` of :class:`FinetuneConfig`, :data:`HEADS`;
beyond the paper's Table 6 protocol) the fresh head is heteroscedastic: its mean layer zero-initialised as the
linear head's, its covariance layers initialised as :mod:`harness.heads` does by default, at a fixed τ.

Fine-tuning follows BiT (Kolesnikov et al. 2020; google-research/big_transfer
``bit_hyperrule.py`` and ``bit_pytorch/train.py``): SGD with momentum 0.9 and no weight decay,
batch 512 (reached by gradient accumulation when a smaller micro-batch fits the device; the
learning rate belongs to the full batch), mixup (alpha 0.1) only from 20k training examples with
one lambda per optimiser step; images whose area is below 96x96 are resized to 160 and randomly
cropped to 128, others resized to 512 and cropped to 480 (``resolution`` overrides both; tasks
that allow no crop are resized to the crop size); evaluation resizes to the crop size. Random crop
and flip only where the task allows them.

Schedules (:func:`harness.downstream.schedules.lr_schedule`): ``bit_hyperrule`` is the published rule: 500 steps below 20k
training examples (warm-up 100, x0.1 after steps 200/300/400), 10k below 500k (500; 3k/6k/9k),
20k above (500; 6k/12k/18k), the rate rising linearly from 0; ``staircase`` scales that shape to
any number of steps (warm-up 20%, x0.1 at 40/60/80%), the schedule of the VTAB sweep; ``ta`` and
``cosine`` are the task_adaptation and big_vision recipes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from harness.data.dataset import ImageDataset
from harness.downstream.schedules import lr_schedule, mixup_alpha, resolved_steps
from harness.heads.options import TEMPERATURE_RANGE
from harness.heads.variants import TRANSFER_HEADS, TRANSFER_NUM_FACTORS, has_factors
from harness.models import Classifier, load_model, replace_head
from harness.progress import Countdown
from harness.rules import SEED, check_rules, setting
from harness.sources import load_source
from harness.tasks.views import bit_resolution, task_views
from harness.training.predict import predict_logits
from harness.uncertainty.predictions import Predictions


@dataclass
class TransferTraining:
    """The training settings of a fine-tune that a sweep hands on unchanged: one definition and one default each,
    inherited by :class:`FinetuneConfig` and :class:`harness.downstream.config.SweepSettings`.

    Attributes:
        batch_size: examples per optimiser step (512 in BiT).
        micro_batch: examples per forward pass (gradient accumulation fills ``batch_size``).
        resolution: (resize, crop) override of the BiT resolution rule, e.g. (32, 32) for tiny demos.
        clip_grad_norm: None, or a global gradient-norm clip.
        device: ``cpu`` or ``cuda``.
        schedule: ``bit_hyperrule`` (the published BiT-HyperRule), ``staircase`` (its shape scaled to
            ``steps``: warm-up 20%, x0.1 at 40/60/80%), ``ta`` (task_adaptation defaults: warm-up 8%,
            x0.1 at 30/60/90%; 80/300/600/900 of its 1000 steps) or ``cosine`` (warm-up 5%, cosine to
            0, as big_vision transfer configs).
        lr_batch: if set, the learning rate is the rate for that batch size and scales linearly to
            ``batch_size`` (BiT: 0.003 at 512, so 0.00075 at 128).
        channels_last: NHWC activations (faster convolutions on CPUs and tensor cores; the same
            result up to float rounding).
        head: the fresh head, a key of :data:`HEADS`: ``hom`` (the paper's linear head) or the noisy
            ``diag`` / ``het`` / ``pe``.
        num_factors, train_mc_samples, eval_mc_samples: a noisy head's rank R (used as min(R, K) for ``het`` /
            ``pe``; uncertainty-baselines' CIFAR num_factors 6) and Monte Carlo samples in training / evaluation
            (100 / 1,000, as the upstream experiments: harness/experiments/cifar10n.yaml gives the timings and the
            paper's Appendix D); ignored by ``hom``.
        mixed_precision: ``no`` (fp32, the default), ``bf16``, ``fp16`` (GPUs only) or ``auto``: bf16 where the
            device computes it natively, else fp32 (:func:`harness.training.precision.resolve`; on a CPU without
            AVX512-BF16 or AMX, bf16 is emulated and many times slower).
    """

    batch_size: int = setting(512, low=1, whole=True, note="--batch-size")
    micro_batch: int = setting(64, low=1, whole=True, note="--micro-batch")
    resolution: "Optional[Sequence[int]]" = setting(None, size=2, low=1, whole=True, note="resize, crop")
    clip_grad_norm: Optional[float] = setting(None, low=0, low_open=True, note="None: no clipping")
    device: str = "cpu"
    schedule: str = "staircase"
    lr_batch: Optional[int] = setting(None, low=1, whole=True, note="--lr-batch; None: the rates are per batch_size")
    channels_last: bool = False
    head: str = "hom"
    num_factors: int = setting(TRANSFER_NUM_FACTORS, low=1, whole=True)
    train_mc_samples: int = setting(100, low=1, whole=True)
    eval_mc_samples: int = setting(1000, low=1, whole=True)
    mixed_precision: str = "no"

    def __post_init__(self) -> None:
        """The rules declared beside the fields (:func:`harness.rules.check_rules`), before any work; then the
        checks of the classes this one is combined with (:class:`harness.tasks.taskset.TaskData` in a sweep)."""
        check_rules(self)
        if self.micro_batch > self.batch_size:
            raise ValueError(
                f"micro_batch={self.micro_batch} (--micro-batch) is larger than batch_size={self.batch_size} "
                f"(--batch-size): a forward pass cannot hold more examples than an optimiser step; give "
                f"--micro-batch at most {self.batch_size}, or a --batch-size of at least {self.micro_batch}"
            )
        if self.batch_size % self.micro_batch:
            fits = max(d for d in range(1, self.micro_batch + 1) if self.batch_size % d == 0)
            raise ValueError(
                f"batch_size={self.batch_size} is not a multiple of micro_batch={self.micro_batch}: a step "
                f"accumulates whole micro-batches, so it would train {-(-self.batch_size // self.micro_batch)} x "
                f"{self.micro_batch} examples; give a micro_batch that divides batch_size, e.g. {fits}"
            )
        after = getattr(super(), "__post_init__", None)
        if after is not None:
            after()

    def training_fields(self) -> "dict[str, Any]":
        """The :class:`TransferTraining` fields of these settings, by name (what a sweep passes to each fine-tune)."""
        return {f.name: getattr(self, f.name) for f in fields(TransferTraining)}


@dataclass
class FinetuneConfig(TransferTraining):
    """One fine-tuning run: the :class:`TransferTraining` settings and its own.

    Attributes:
        lr: learning rate for ``batch_size`` examples per step.
        steps: optimiser steps; None with the ``bit_hyperrule`` schedule: set by the training-set size
            (:func:`harness.downstream.schedules.bit_hyperrule_supports`).
        seed: initialisation of the data order, augmentation and head.
        eval_batch_size: examples per forward pass in evaluation.
        mixup_alpha: None applies the BiT rule (0.1 from 20k training examples, else no mixup);
            a number forces it (0 = off).
        temperature: the noisy head's τ (:func:`head_options`); ignored by ``hom``.
    """

    @property
    def effective_lr(self) -> float:
        return self.lr * self.batch_size / self.lr_batch if self.lr_batch else self.lr

    lr: float = setting(0.003, low=0, low_open=True)
    steps: Optional[int] = setting(500, low=1, whole=True, note="None: the BiT-HyperRule's")
    seed: int = setting(0, **SEED)
    eval_batch_size: int = setting(256, low=1, whole=True)
    mixup_alpha: Optional[float] = setting(None, low=0, note="None: the BiT rule; 0: off")
    temperature: float = setting(1.0, **TEMPERATURE_RANGE)


#: the fresh heads of a transfer: name -> covariance of :class:`harness.heads.HeteroscedasticHead`, from the registry
#: (:data:`harness.heads.variants.VARIANTS`); ``hom`` is the paper's Table 6 protocol
HEADS = TRANSFER_HEADS


def head_options(
    head: str = "hom",
    num_classes: int = 2,
    temperature: float = 1.0,
    num_factors: int = TRANSFER_NUM_FACTORS,
    train_mc_samples: int = 100,
    eval_mc_samples: int = 1000,
) -> "dict[str, Any]":
    """Keyword arguments of :func:`harness.models.replace_head` for a fresh ``head`` on ``num_classes`` classes.

    ``hom``: ``{}`` (the zero-initialised linear softmax head, unchanged). ``diag`` / ``het`` / ``pe``: the
    covariance of :data:`HEADS`, τ = ``temperature``, S = ``train_mc_samples`` in training and ``eval_mc_samples``
    in evaluation (seeded evaluation noise, the head's default), and for a variant with factors (``het`` / ``pe``)
    R = min(``num_factors``, ``num_classes``) (the rule of :data:`harness.heads.variants.TRANSFER_NUM_FACTORS`).

    Raises:
        ValueError: an unknown head (naming the choices).
    """
    if head not in HEADS:
        raise ValueError(
            f"unknown head {head!r} (--head): use one of {', '.join(HEADS)} (hom is the paper's "
            "homoscedastic transfer head)"
        )
    if head == "hom":
        return {}
    opts = {
        "covariance": HEADS[head],
        "temperature": float(temperature),
        "train_mc_samples": int(train_mc_samples),
        "eval_mc_samples": int(eval_mc_samples),
    }
    if has_factors(HEADS[head]):
        opts["num_factors"] = min(int(num_factors), int(num_classes))
    return opts


def transfer_model(
    upstream: "str | dict | Classifier", num_classes: int, head_kwargs: "Optional[dict[str, Any]]" = None
) -> Classifier:
    """The upstream model with its whole head replaced by a fresh head on ``num_classes`` classes.

    ``upstream``: a model, a harness ``model.pt`` path, or a source record of
    :func:`harness.downstream.sweep.upstream_record` (``{source, weights, sha256, random_init}``). ``head_kwargs``
    (:func:`head_options`): None or ``{}`` gives the zero-initialised linear softmax head (paper Sec. 4.2);
    a noisy head's options give a :class:`harness.heads.HeteroscedasticHead` whose mean layer ``loc`` is
    zero-initialised too (μ(x) = 0 before fine-tuning, as the linear head) and whose covariance layers keep
    the head's default initialisation (``init="keras"``: Glorot-uniform kernels, zero biases).

    Raises:
        FileNotFoundError / ValueError: see :func:`harness.models.load_source`; bad head options (see
            :class:`harness.heads.HeteroscedasticHead`).
    """
    if isinstance(upstream, dict):
        model = load_source(upstream["source"], upstream.get("weights"), upstream.get("random_init", False))
    else:
        model = load_model(upstream) if not isinstance(upstream, Classifier) else upstream
    model = replace_head(model, num_classes, **(head_kwargs or {}))
    with torch.no_grad():  # replace_head zeroes the linear head only; the noisy head's mean starts at 0 too
        model.head.loc.weight.zero_()
        model.head.loc.bias.zero_()
    return model


def finetune(
    upstream: "str | dict | Classifier",
    train: ImageDataset,
    test: ImageDataset,
    cfg: FinetuneConfig,
    flip: bool = True,
    crop: bool = True,
    progress: Optional[Callable[[str], None]] = None,
) -> "tuple[float, Predictions]":
    """Fine-tune a transferred copy of ``upstream`` on ``train``; return (top-1 on ``test``, predictions).
    ``progress`` gets a line (steps done, steps per second, time left) at most every 15 s while it trains.

    Runs :func:`resolved_steps` optimiser steps of ``cfg.batch_size`` examples (``cfg.micro_batch`` per
    forward pass, gradients accumulated), each with one mixup lambda when mixup is on. The fresh head is
    ``cfg.head`` (:func:`head_options`); a noisy head's loss is the NLL of its MC-averaged probability.

    On accelerate, in the idiom the upstream stage uses (:func:`harness.training.loop.accumulate_step`): an
    ``Accelerator(mixed_precision, gradient_accumulation_steps)`` with ``cfg.mixed_precision`` resolved for the
    device (:func:`harness.training.precision.resolve`: ``auto`` is bf16 where it is native), the optimiser prepared,
    forward passes under ``accelerator.autocast()``, the loss in fp32, ``accelerator.backward`` and
    ``accelerator.clip_grad_norm_``. In fp32 it computes what the plain PyTorch loop computed before
    (``tests/downstream/test_finetune_accelerate.py`` holds that loop and compares). The run is this process's own:
    under
    ``accelerate launch`` the processes split a sweep's runs (:func:`harness.downstream.sweep.sweep`), so the model
    is not wrapped for data parallelism and trains on this process's device. A precision other than the one
    accelerate already holds in this process is trained in a fresh process (:mod:`harness.training.loop`).

    Raises:
        ValueError: train and test differ in classes; non-positive lr or steps (see
            :func:`resolved_steps`); an unknown head or mixed precision; fp16 on a CPU; a NaN loss.
    """
    from harness.training.loop import PrecisionHeld, make_accelerator
    from harness.training.precision import resolve as resolve_precision

    if train.class_names != test.class_names:
        raise ValueError("train and test splits have different classes")
    if not cfg.lr > 0:
        raise ValueError(f"lr must be > 0, got lr={cfg.lr}")
    steps = resolved_steps(cfg, len(train))
    device = torch.device(cfg.device)
    precision = resolve_precision(cfg.mixed_precision, device.type, "--mixed-precision")
    micro = min(cfg.micro_batch, cfg.batch_size)
    accum = max(1, math.ceil(cfg.batch_size / micro))
    try:
        accelerator = make_accelerator(precision, accum, cpu=device.type == "cpu")
    except PrecisionHeld:
        from harness.training.loop import in_fresh_process

        # a line printer that pickles: the fresh process's lines go to this process's output
        return in_fresh_process(finetune, upstream, train, test, cfg, flip, crop, print if progress else None)
    if accelerator.num_processes > 1:  # a process of `accelerate launch` splitting a sweep: its own device
        device = accelerator.device
    torch.manual_seed(cfg.seed)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    head = head_options(
        cfg.head, train.num_classes, cfg.temperature, cfg.num_factors, cfg.train_mc_samples, cfg.eval_mc_samples
    )
    model = transfer_model(upstream, train.num_classes, head).to(device, memory_format=memory_format)
    resize, size = cfg.resolution or bit_resolution(train[0][0].size)
    interpolation = model.config.preprocessing.get("interpolation", "bilinear")  # the model's own
    loader, ds, sampler = task_views(train, True, flip, crop, resize, size, micro, cfg.seed, interpolation)
    opt = accelerator.prepare(torch.optim.SGD(model.parameters(), lr=cfg.effective_lr, momentum=0.9, weight_decay=0.0))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_schedule(steps, cfg.schedule, len(train)))
    _train_steps(
        accelerator,
        model,
        opt,
        sched,
        (loader, ds, sampler),
        steps,
        accum,
        mixup_alpha(len(train), cfg.mixup_alpha),
        cfg.clip_grad_norm,
        device,
        memory_format,
        Countdown(progress, steps),
    )
    preds = predict(
        model,
        test,
        task_views(test, False, flip, crop, resize, size, cfg.eval_batch_size, cfg.seed, interpolation)[0],
        device,
        memory_format,
        accelerator.autocast,
    )
    return float((preds.logits.argmax(1) == preds.targets).mean()), preds


def _train_steps(
    accelerator: Any,
    model: Classifier,
    opt: Any,
    sched: Any,
    views: tuple,
    steps: int,
    accum: int,
    alpha: float,
    clip_grad_norm: Optional[float],
    device: Any,
    memory_format: torch.memory_format,
    countdown: Optional[Countdown] = None,
) -> None:
    """``steps`` optimiser steps of ``accum`` micro-batches each (:func:`harness.training.loop.accumulate_step`),
    epoch after epoch of ``views`` (``(loader, dataset, sampler)`` of :func:`harness.tasks.views.task_views`); with mixup (``alpha`` > 0)
    one lambda per optimiser step, each example mixed with a permutation of its micro-batch (BiT).

    Raises:
        ValueError: a NaN or infinite loss.
    """
    from harness.training.loop import accumulate_step

    loader, ds, sampler = views
    mix = torch.distributions.Beta(alpha, alpha) if alpha > 0 else None
    model.train()
    step, micro_done, epoch, lam = 0, 0, 0, 1.0

    def diverged(value: float) -> ValueError:
        return ValueError(f"fine-tuning loss is {value} at step {step}; lower the learning rate")

    while step < steps:
        sampler.use_epoch(epoch)
        ds.use_epoch(epoch)
        for x, y, _ in loader:
            x, y = x.to(device, memory_format=memory_format), y.to(device)
            if mix is None:
                _, synced = accumulate_step(
                    accelerator,
                    model,
                    opt,
                    lambda: model(x),
                    lambda out: F.cross_entropy(out, y),
                    clip_grad_norm,
                    diverged,
                )
            else:
                if micro_done % accum == 0:
                    lam = float(mix.sample())
                perm = torch.randperm(x.shape[0], device=x.device)
                _, synced = accumulate_step(
                    accelerator,
                    model,
                    opt,
                    lambda: model(lam * x + (1 - lam) * x[perm]),
                    lambda out: lam * F.cross_entropy(out, y) + (1 - lam) * F.cross_entropy(out, y[perm]),
                    clip_grad_norm,
                    diverged,
                )
            micro_done += 1
            if not synced:
                continue
            sched.step()
            step += 1
            if countdown is not None:
                countdown.tick(step)
            if step >= steps:
                break
        epoch += 1


def predict(
    model: Classifier,
    data: ImageDataset,
    loader: torch.utils.data.DataLoader,
    device: str = "cpu",
    memory_format: torch.memory_format = torch.contiguous_format,
    autocast: Optional[Callable[[], Any]] = None,
) -> Predictions:
    """Logits of ``model`` (eval mode) on ``data`` fed by ``loader`` (``(x, y, index)`` batches), as
    :class:`Predictions` (``logits`` ``[N, K]`` float64).

    A noisy head's output is already the representation of :class:`Predictions` and of upstream's
    ``predict_loader``: log p̄, p̄ the mean of softmax(u_s / τ) over its ``eval_mc_samples`` samples of seeded
    evaluation noise (:meth:`harness.heads.HeteroscedasticHead.forward`), so softmax(logits) = p̄ and the
    metrics, ensembles and temperature scaling of :mod:`harness.uncertainty` treat it as upstream's het runs.
    ``autocast``: the mixed-precision context of the run (``accelerator.autocast``), or none (fp32).
    """
    out = predict_logits(model, loader, autocast, device, memory_format)
    return Predictions(
        out["logits"].astype(np.float64),
        out["targets"],
        out["index"],
        data.class_names,
        "softmax",
        data.description,
    )
