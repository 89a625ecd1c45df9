"""The upstream run config: model, data, optimisation and training loop settings.

Configs are YAML files in ``upstream/configs/`` read through :func:`harness.config.load_config`;
any field can be overridden on the command line as ``section.field=value``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from harness.data.config import ARRAY_SOURCES, DataConfig, check_data
from harness.rules import LEARNING_RATE, SEED, WEIGHT_DECAY, Rule, check_rules, given_keys, setting
from harness.training.precision import canonical as canonical_precision
from harness.upstream.schedule_keys import LOSS_KEYS, OPTIMIZER_KEYS, SCHEDULE_KEYS, check_loss_keys


@dataclass
class ModelSection:
    """Backbone and head (see :class:`harness.models.ModelConfig` and :class:`harness.heads.HeteroscedasticHead`).

    Attributes:
        backbone: timm model name (optionally ``timm:NAME``), or ``torchvision:NAME``.
        head: head options (``covariance``, ``link``, ``num_factors``, ``temperature``, ...).
        backbone_kwargs: extra ``timm.create_model`` arguments.
        num_classes: K; None takes it from the data.
        pretrained_file: local backbone weights to start from (nothing is downloaded), loaded strictly as
            ``harness downstream --upstream timm:NAME --weights FILE`` loads them; the run then records and applies
            the backbone's own normalisation (:func:`harness.models.build_model`).
        head_bias_init: initial bias of the head's mean layer, sigmoid link only (UB uses -10 for large-K sigmoid).
    """

    backbone: str = "test_resnet"
    head: Dict[str, Any] = field(default_factory=dict)
    backbone_kwargs: Dict[str, Any] = field(default_factory=dict)
    num_classes: Optional[int] = setting(None, low=1, high=10**6, whole=True, note="or null: from the data")
    pretrained_file: Optional[str] = None
    head_bias_init: Optional[float] = setting(
        None, low=-100, high=100, note="or null: the layer's own; a bias beyond ±100 saturates every probability"
    )


#: optimisers and learning-rate schedules of the upstream stage (built in :mod:`harness.upstream.optim`)
OPTIMIZERS = tuple(OPTIMIZER_KEYS)
SCHEDULES = tuple(SCHEDULE_KEYS)


@dataclass
class OptimSection:
    """Optimiser and learning-rate schedule (paper Appendix B: SGD, warm-up, step decay, L2).

    Attributes:
        name: ``sgd`` (momentum; L2 applied as explicit L2, i.e. coupled weight decay) or ``adamw``
            (decoupled weight decay).
        lr: peak learning rate for the configured per-process batch size.
        momentum, nesterov: SGD momentum (read by ``sgd`` only: set with ``adamw`` they are refused).
        betas: AdamW betas (read by ``adamw`` only: set with ``sgd`` they are refused).
        weight_decay: L2 weight of the weights (kernels) outside the covariance layers.
        cov_weight_decay: L2 weight of the kernels that map to the covariance (diag, scale, PE
            layers); None = ``weight_decay``. Biases, norm parameters and the temperature get none.
        schedule: ``step`` (x ``decay_factor`` at each of ``decay_epochs``), ``cosine`` (to ``min_lr``)
            or ``constant`` (the default); all after a linear warm-up of ``warmup_epochs``.
        warmup_steps, decay_steps: the same in optimiser steps, as the paper's JFT configs count them (instead
            of ``warmup_epochs`` / ``decay_epochs``, not with them).
        clip_grad_norm: global gradient-norm clip; None = off.
    """

    name: str = setting("sgd", choices=OPTIMIZERS)
    lr: float = setting(0.1, **LEARNING_RATE)
    momentum: float = setting(0.9, low=0, high=1, high_open=True)
    nesterov: bool = False
    betas: List[float] = setting(default_factory=lambda: [0.9, 0.999], low=0, high=1, high_open=True)
    weight_decay: float = setting(1e-4, **WEIGHT_DECAY)
    cov_weight_decay: Optional[float] = setting(
        None, **{**WEIGHT_DECAY, "note": "or null: the same as optim.weight_decay"}
    )
    schedule: str = setting("constant", choices=SCHEDULES)
    warmup_epochs: float = setting(0.0, low=0, note="0 = none")
    decay_epochs: List[float] = setting(default_factory=list, low=0)
    decay_factor: float = setting(0.1, low=0, low_open=True, high=1)
    warmup_steps: Optional[int] = setting(None, low=0, whole=True, note="or null: optim.warmup_epochs counts")
    decay_steps: List[int] = setting(default_factory=list, low=0, whole=True)
    min_lr: float = setting(0.0, low=0)
    clip_grad_norm: Optional[float] = setting(None, low=0, low_open=True, note="or null: no clipping")


@dataclass
class TrainSection:
    """Training loop settings.

    Attributes:
        epochs: passes over the training split.
        steps: if set, train exactly this many optimiser steps instead (``epochs`` is then ignored; the last epoch
            may be partial), as the paper's JFT configs count (``total_steps``); the cosine schedule ends there.
        mixed_precision: ``no``, ``fp16``, ``bf16`` (accelerate: autocast on GPUs and on CPUs) or
            ``auto``: bf16 where the device computes it natively (a GPU with bf16, a CPU with
            AVX512-BF16 or AMX), else fp32 (``no``): on a CPU without native bf16,
            bf16 autocast trains 10-50x *slower* than fp32 (measured on an AVX2 AMD EPYC). The
            precision used is recorded in ``run.json`` and ``metrics.json``. The HET head always
            runs in fp32.
        channels_last: keep activations in NHWC order (faster convolutions on CPUs and tensor cores).
        grad_accum_steps: micro-batches per optimiser step.
        eval_every: evaluate every N epochs (and always after the last).
        eval_every_steps: also evaluate every N optimiser steps (0: off); with ``steps`` the unit that fits
            data sets where one epoch takes hours.
        log_every: optimiser steps between training-loss logs.
        checkpoint_every: optimiser steps between resumable checkpoints (0: end of each epoch only).
        best_metric: eval metric that picks ``best.pt`` (``nll``/``sigmoid_nll``/``ece`` lower is
            better; ``top1``/``prec@1``/``micro_ap`` higher).
        loss: training loss of softmax runs (sigmoid runs take ``nll`` only): ``nll``, the
            cross-entropy of the head's probability (-log p̄_y for HET heads); ``label_smoothing``,
            the cross-entropy against (1 - ε)·onehot(y) + ε/K (Szegedy et al., CVPR 2016, Sec. 7);
            ``forward``, forward loss correction -log (pᵀT)_ỹ with T the known transition matrix of
            ``data.label_noise`` (Patrini et al., CVPR 2017, Sec. 3.1, Theorem 2; the empirical matrix
            of the noisy labels for ``input_dependent`` noise, which has no nominal one; see
            :func:`harness.upstream.train.forward_corrected_nll`). Evaluation and saved predictions use the
            model's own p either way.
        label_smoothing: ε of ``label_smoothing``, in (0, 1); refused with another ``loss`` (none reads it).
        fewshot_every: evaluate the model every N epochs (and after the last) by few-shot linear evaluation on
            ``fewshot_tasks`` (:mod:`harness.tasks.probe`: frozen pre-logit features at ``data.image_size`` px,
            ridge regression to ±1 targets, λ chosen on held-out training examples), logged to TensorBoard as
            ``fewshot/<task>/<shots>shot`` and to ``fewshot.jsonl``; 0 or null: off.
        fewshot_tasks: the tasks, as ``harness downstream --tasks`` names them (``demo_digit``, ``demo``, a custom
            ``NAME=FOLDER:K``; VTAB-1k tasks read from TFDS's default folder).
        fewshot_shots: training examples per class (big_vision's 1, 5, 10, 25).
        fewshot_every_steps: also run the few-shot monitor every N optimiser steps (0: off).
        log_with: experiment trackers, accelerate's names (:data:`harness.training.trackers.NAMES`:
            ``tensorboard`` writes ``tb/`` in the run folder; ``mlflow``, ``wandb``, ...: ``pip install
            "het-harness[track]"``); ``[]``: none. Each gets the whole resolved config as parameters, the
            metrics of every evaluation and the final metrics (:mod:`harness.training.trackers`). Not part of a
            run's identity: a run resumes, or counts as done, whatever trackers log it.
        log_model: at the end of the run, export the model with ``save_pretrained`` to ``pretrained/`` in the run
            folder and log that folder to the trackers that keep files (MLflow artefacts, W&B files; Lightning's
            ``log_model=True``; :func:`harness.training.trackers.log_model`). Not part of a run's identity either.
    """

    epochs: int = setting(10, low=1)
    steps: Optional[int] = setting(
        None, low=1, whole=True, text="a whole number of optimiser steps >= 1", note="or null: train.epochs counts"
    )
    mixed_precision: str = "no"
    channels_last: bool = False
    grad_accum_steps: int = setting(1, low=1)
    eval_every: int = setting(1, low=1)
    eval_every_steps: int = setting(0, low=0, note="0 = none")
    log_every: int = setting(20, low=1)
    checkpoint_every: int = setting(0, low=0, note="0 = none")
    best_metric: str = "nll"
    loss: str = "nll"
    label_smoothing: float = 0.1
    fewshot_every: Optional[int] = 0
    fewshot_tasks: List[str] = field(default_factory=list)
    fewshot_shots: List[int] = setting(default_factory=lambda: [1, 5, 10, 25], low=1, whole=True)
    fewshot_every_steps: int = setting(0, low=0, note="0 = none")
    log_with: List[str] = field(default_factory=lambda: ["tensorboard"])
    log_model: bool = False


@dataclass
class UpstreamConfig:
    """One upstream pretraining run.

    Attributes:
        name: run name, a plain name (:func:`harness.io.check_name`); the run writes to ``output_dir``.
        seed: training seed (initialisation, shuffling, augmentation, HET noise).
        output_dir: run folder (default ``runs/upstream/<name>``).
    """

    name: str = "run"
    seed: int = setting(0, **SEED)
    output_dir: Optional[str] = None
    model: ModelSection = field(default_factory=ModelSection)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimSection = field(default_factory=OptimSection)
    train: TrainSection = field(default_factory=TrainSection)

    def run_dir(self) -> str:
        return self.output_dir or f"runs/upstream/{self.name}"


LOSSES = tuple(LOSS_KEYS)


def metric_names(link: str, num_classes: Optional[int] = None) -> "tuple[str, ...]":
    """The evaluation metrics a run computes: the single-label suite (softmax link) or the
    multi-label one (sigmoid link), as :mod:`harness.uncertainty.metrics` and
    :mod:`harness.uncertainty.multilabel` name them, for ``num_classes`` classes (top-5 needs more than 5; None:
    not known yet, every name)."""
    import numpy as np

    from harness.uncertainty import metrics as M
    from harness.uncertainty.multilabel import multilabel_metrics

    if link == "sigmoid":
        return tuple(multilabel_metrics(np.array([[2.0, -2.0], [-2.0, 2.0]]), np.eye(2)))
    logits = np.eye(2, max(num_classes or 1000, 2))
    return tuple(M.classification_metrics(M.log_softmax(logits), np.array([0, 1])))


def check_best_metric(name: str, link: str, num_classes: Optional[int]) -> None:
    """``train.best_metric`` against the metrics a run of ``num_classes`` classes computes (None: not known yet;
    checked again once the data gives it).

    Raises:
        ValueError: the metric is not computed; the message lists those that are.
    """
    names = metric_names(link, num_classes)
    if name not in names:
        classes = f" of {num_classes} classes" if num_classes else ""
        raise ValueError(
            f"train.best_metric {name!r} is not computed for the {link} link{classes}: use one of {', '.join(names)}"
        )


#: the smallest fixed temperature τ a run takes (below it the 1/τ-scaled gradients diverge; the paper's lie in
#: [0.15, 5], uncertainty-baselines' CIFAR 1.3, an experiment's grid extension halves 0.5 at most twice)
MIN_TEMPERATURE = 0.01


def validate(cfg: UpstreamConfig) -> None:
    """Check every setting that needs no data, before any work (nothing is written, and nothing read but whether the
    run folder lies inside another run, an export or another harness output folder:
    :func:`harness.folder_paths.check_outside_outputs`); ``train.mixed_precision`` is kept in its canonical spelling
    (:func:`harness.training.precision.canonical`), a leading ``~`` of ``output_dir`` expanded
    (:func:`harness.folder_paths.expand_home`).

    Raises:
        ValueError: the first bad setting found; the message names the key and the fix (data.batch_size=1 for a
            backbone with BatchNorm: :func:`harness.upstream.batch_norm.check_batch_norm`).
    """
    import inspect

    from harness.data.splits import read_folders
    from harness.folder_paths import check_outside_outputs, expand_home
    from harness.heads import HeteroscedasticHead
    from harness.io import check_location, check_name
    from harness.upstream.pretrained import pretrained_file_setting

    t, d, o = cfg.train, cfg.data, cfg.optim
    check_name(cfg.name, "run name (key name)")  # it names runs/upstream/<name>, trackers and jobs
    check_location(cfg.output_dir, "output_dir")
    cfg.output_dir = expand_home(cfg.output_dir, "output_dir")  # ~/runs/x is the home folder's, as a shell reads it
    splits = (d.train_split, d.eval_split, d.heldout_split)  # nor inside a split it reads (audit22 A22-11)
    check_outside_outputs(cfg.run_dir(), "output_dir", "harness upstream", read_folders(d.source, d.path, splits))
    cfg.model.pretrained_file = pretrained_file_setting(cfg.model.pretrained_file)  # not a harness run's model.pt
    check_rules(cfg)  # every range and name declared beside its field (harness.rules), in one message format
    check_data(d)  # the rules that relate data settings (keys of one source, image sizes and crops, shards)
    # CHOICES and Lightning's aliases (bf16-mixed), kept canonical (YAML's false for "no" included)
    t.mixed_precision = canonical_precision(t.mixed_precision, "train.mixed_precision")
    _validate_optim(o)
    _validate_schedule(o, t)
    accepted = set(inspect.signature(HeteroscedasticHead.__init__).parameters) - {"self", "in_features", "num_classes"}
    unknown = sorted(set(cfg.model.head) - accepted)
    if unknown:
        raise ValueError(
            f"unknown head option(s) model.head.{', model.head.'.join(unknown)}: the head takes "
            f"{', '.join(sorted(accepted))}"
        )
    from harness.model_config import check_backbone, check_backbone_kwargs

    check_backbone(cfg.model.backbone, cfg.model.pretrained_file)  # a name its registry knows, weights a file
    check_backbone_kwargs(cfg.model.backbone_kwargs, "model.backbone_kwargs", cfg.model.backbone)
    tau = cfg.model.head.get("temperature")
    if isinstance(tau, (int, float)) and 0 < tau < MIN_TEMPERATURE:
        raise ValueError(
            f"model.head.temperature={tau:g} is below {MIN_TEMPERATURE:g}: the logits are divided by τ, so "
            f"their gradients grow by 1/τ and the training diverges at any usual optim.lr; the paper's τ "
            "lie in [0.15, 5] (choose one on held-out data with an experiment's temperature_grid)"
        )
    _validate_head(cfg.model.head, cfg.model.num_classes, given_keys(cfg.model))  # the overrides' head keys
    _validate_cov_weight_decay(o, cfg.model.head.get("covariance", "low_rank"))
    link = cfg.model.head.get("link", "softmax")
    if cfg.model.head_bias_init is not None and link != "sigmoid":
        raise ValueError(
            f"model.head_bias_init={cfg.model.head_bias_init:g} is read only by the sigmoid link, and this run's head "
            f"has link {link}: one bias added to every class's logit cancels in a softmax (and in its gradients), so "
            "it would change nothing; remove model.head_bias_init, or set model.head.link=sigmoid (a prior for many "
            "labels: uncertainty-baselines starts large-K sigmoid heads at -10)"
        )
    check_best_metric(t.best_metric, link, cfg.model.num_classes)
    _validate_noise_and_loss(cfg, link)
    _validate_fewshot(t)
    from harness.training.trackers import check_names

    check_names(list(t.log_with), "train.log_with")
    from harness.upstream.batch_norm import check_batch_norm

    check_batch_norm(cfg)  # data.batch_size=1 and BatchNorm: refused now, not at the first step (audit12 A12-21)


def _validate_fewshot(t: TrainSection) -> None:
    """``train.fewshot_every``, ``train.fewshot_tasks`` and ``train.fewshot_shots`` (see :func:`validate`); the task
    names are resolved (:func:`harness.tasks.taskset.expand_tasks`), their data is read when the run starts."""
    every = t.fewshot_every or 0
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(f"train.fewshot_every must be a whole number of epochs >= 0 (0 or null: off), got {every!r}")
    every = every or t.fewshot_every_steps
    if not every:
        for key in ("fewshot_tasks", "fewshot_shots"):
            if getattr(t, key) != getattr(TrainSection(), key):
                raise ValueError(
                    f"train.{key}=[{', '.join(map(str, getattr(t, key)))}] is set but train.fewshot_every is 0 (off), "
                    "so no few-shot "
                    f"probe reads it: set train.fewshot_every=N to evaluate every N epochs, or remove train.{key}"
                )
        return
    if not t.fewshot_tasks:
        raise ValueError(
            f"train.fewshot_every={every} needs train.fewshot_tasks, e.g. "
            "train.fewshot_tasks=[demo_digit,demo_rotation]"
        )
    from harness.tasks.fewshot import check_shots

    check_shots(list(t.fewshot_shots), "train.fewshot_shots")
    from harness.tasks.taskset import expand_tasks

    try:
        expand_tasks(list(t.fewshot_tasks))
    except ValueError as e:
        raise ValueError(f"train.fewshot_tasks: {e}") from e


def _validate_head(head: dict, k: Optional[int], given: "frozenset[str]" = frozenset()) -> None:
    """The head's options by the head's own checks (covariance, link, temperature, ...), on a stand-in of at most 64
    classes (the sizes are the data's, checked when the model is built); R against a given K by the head's rule; an
    option of another covariance refused at any value where ``given`` (``model``'s named keys) names it.

    Raises:
        ValueError: ``model.head: <the head's message>``.
    """
    from harness.heads import HeteroscedasticHead
    from harness.heads.checks import resolved_num_factors
    from harness.heads.options import check_unused_options
    from harness.heads.variants import has_factors

    options, r = dict(head), head.get("num_factors")
    try:
        if r is not None and not Rule(low=1, whole=True).holds(r):
            raise ValueError(f"num_factors must be a whole number >= 1 (or null: the default), got {r!r}")
        covariance = options.get("covariance", "low_rank")
        if k and r is not None and options.get("noise_space", "logits") == "logits" and has_factors(covariance):
            resolved_num_factors(covariance, r, k, "logits")  # R <= K, the head's own rule and message
        standin = min(k or 64, 64)
        if r is not None:
            options["num_factors"] = min(r, standin)
        HeteroscedasticHead(max(8, standin), standin, **options)
        check_unused_options(HeteroscedasticHead.__init__, dict(head), [g[5:] for g in given if g[:5] == "head."])
    except (TypeError, ValueError) as e:
        raise ValueError(f"model.head: {e}") from e


def _validate_cov_weight_decay(o: OptimSection, covariance: str) -> None:
    """``optim.cov_weight_decay`` only for a head with covariance layers (:func:`harness.upstream.optim.param_groups`
    gives it their kernels; a head that draws no noise has none, so the value would be saved and never read)."""
    from harness.heads.variants import VARIANTS, variant

    if o.cov_weight_decay is not None and covariance in VARIANTS and variant(covariance).form is None:
        noisy = ", ".join(n for n, v in VARIANTS.items() if v.form is not None)
        raise ValueError(
            f"optim.cov_weight_decay={o.cov_weight_decay:g} is the L2 weight of the covariance layers' kernels, and "
            f"model.head.covariance={covariance} has none: remove optim.cov_weight_decay, or choose a noisy "
            f"covariance ({noisy})"
        )


def _validate_optim(o: OptimSection) -> None:
    """The optimiser's cross-field rules (its ranges are declared on :class:`OptimSection`; see :func:`validate`)."""
    if len(o.betas) != 2:
        raise ValueError(f"optim.betas must be two numbers in [0, 1), got {o.betas}")
    if o.warmup_steps is not None and o.warmup_epochs:
        raise ValueError("optim.warmup_steps and optim.warmup_epochs are both set: give the warm-up in one unit")
    if o.decay_steps and o.decay_epochs:
        raise ValueError("optim.decay_steps and optim.decay_epochs are both set: give the decay points in one unit")
    from harness.upstream.schedule_keys import check_schedule_keys  # the keys each schedule reads: one table

    check_schedule_keys(o)


def _validate_schedule(o: OptimSection, t: TrainSection) -> None:
    """The warm-up and decay points in the unit the training's length is given in (``train.steps`` with
    ``optim.warmup_steps`` / ``decay_steps``; ``train.epochs`` with ``optim.warmup_epochs`` / ``decay_epochs``: a
    mixed pair would need the data's steps per epoch, and an audit found 1000 warm-up steps in a 1-epoch run
    accepted), a warm-up that ends and decay points within the training (see :func:`validate`)."""
    if t.steps is not None:  # the schedule's points in the unit the training's length is given in
        length, unit, other, other_length = f"train.steps={t.steps}", "optimiser steps", "epochs", "train.epochs"
        mixed = [
            ("optim.warmup_epochs", o.warmup_epochs, "optim.warmup_steps"),
            ("optim.decay_epochs", o.decay_epochs, "optim.decay_steps"),
        ]
    else:
        length, unit, other, other_length = f"train.epochs={t.epochs}", "epochs", "optimiser steps", "train.steps"
        mixed = [
            ("optim.warmup_steps", o.warmup_steps, "optim.warmup_epochs"),
            ("optim.decay_steps", o.decay_steps, "optim.decay_epochs"),
        ]
    for key, value, alternative in mixed:
        if value:
            raise ValueError(
                f"{key}={value} counts {other} but the training is counted in {unit} ({length}): give it as "
                f"{alternative}, or the training's length as {other_length}"
            )
    if t.steps is not None:
        total, unit, warmup = t.steps, "train.steps", ("optim.warmup_steps", o.warmup_steps or 0)
        points = [("optim.decay_steps", b) for b in o.decay_steps]
    else:
        total, unit, warmup = t.epochs, "train.epochs", ("optim.warmup_epochs", o.warmup_epochs)
        points = [("optim.decay_epochs", e) for e in o.decay_epochs]
    if warmup[1] > total:
        raise ValueError(
            f"{warmup[0]}={warmup[1]:g} is longer than the training ({unit}={total}): the learning rate "
            f"would never reach optim.lr and the {o.schedule} schedule would never start; shorten the "
            f"warm-up to at most {total}, or train longer"
        )
    if o.schedule == "step":
        late = [v for _, v in points if v >= total]
        if late:
            key = points[0][0]
            raise ValueError(
                f"{key} {late} lie at or past the end of the training ({unit}={total}): those decays "
                f"never happen; give points below {total}, or train longer"
            )


def _validate_noise_and_loss(cfg: UpstreamConfig, link: str) -> None:
    """``data.label_noise`` (:func:`harness.data.noise.check_noise_spec`) and ``train.loss`` /
    ``train.label_smoothing``, which only ``train.loss=label_smoothing`` reads (see :func:`validate`)."""
    from harness.data.noise import check_noise_spec

    t, noise = cfg.train, dict(cfg.data.label_noise or {})
    kind = noise.get("kind", "none")
    check_noise_spec(noise, cfg.data.source, ARRAY_SOURCES)
    if t.loss not in LOSSES:
        raise ValueError(f"unknown train.loss {t.loss!r}: use one of {', '.join(LOSSES)}")
    if not 0.0 < t.label_smoothing < 1.0:
        raise ValueError(f"train.label_smoothing must be in (0, 1), got {t.label_smoothing}")
    check_loss_keys(t)  # train.label_smoothing only under its loss
    if link == "sigmoid" and t.loss != "nll":
        raise ValueError(
            f"train.loss={t.loss} applies to the softmax link; sigmoid (multi-label) runs take train.loss=nll"
        )
    if t.loss == "forward" and kind == "none":
        raise ValueError(
            "train.loss=forward corrects the loss with the transition matrix of the run's synthetic label "
            "noise, and this run has none (data.label_noise unset, or kind none): set data.label_noise "
            "(e.g. {kind: pair_flip, rate: 0.3}), or use train.loss=nll or label_smoothing"
        )
