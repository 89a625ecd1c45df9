"""Sweep settings: the grid and fine-tuning settings every VTAB-1k task shares, and the named recipes.

Recipes (:data:`PRESETS`): ``vtab_sweep`` (default), the VTAB-1k sweep {0.001, 0.01} x {500, 2500}
steps on the staircase schedule; ``bit_hyperrule``, the BiT-HyperRule as published (lr 0.003 at
batch 512, 500 / 10k / 20k steps by training-set size, no selection); ``demo``, CPU-sized settings
for the DEMO tasks. :func:`recipe` says which preset a sweep used and what it changed
(``vtab.json`` / ``vtab.md``). Every recipe transfers with the paper's fresh homoscedastic head unless
``head`` names a noisy one (``diag`` / ``het`` / ``pe``), whose τ joins the selection grid.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np

from harness.downstream.finetune import HEADS, TransferTraining
from harness.downstream.schedules import SCHEDULES
from harness.heads.options import TEMPERATURE_RULE, temperature_in_range
from harness.rules import MAX_IMAGE_SIDE, MAX_LEARNING_RATE, setting
from harness.tasks.taskset import TaskData
from harness.training.precision import canonical, resolve

#: the largest side (RESIZE and CROP, pixels) a transfer resizes images to: the one image-side bound
#: (:data:`harness.rules.MAX_IMAGE_SIDE`, as upstream's ``data.image_size``)
MAX_RESOLUTION = MAX_IMAGE_SIDE

#: τ grid of a noisy transfer head when none is given. It brackets the temperatures the references settle on
#: (uncertainty-baselines' CIFAR 1.3, the paper's ImageNet 0.9 and 1.5, Table 7's 1.5) with the ends of the
#: upstream grid (harness/experiments/cifar10n.yaml: {0.5, 1, 1.3, 2, 3}); 1.3 is left out because each τ
#: multiplies the selection runs of every task, and 1 and 2 sit either side of it.
DEFAULT_TEMPERATURES = (0.5, 1.0, 2.0, 3.0)
#: settings that only a noisy head uses, with their defaults: R (uncertainty-baselines' CIFAR num_factors 6, the
#: upstream het / pe methods' rank; min(R, K) per task) and the MC samples of the upstream experiments (100 in
#: training, 1,000 in evaluation: harness/experiments/cifar10n.yaml gives the timings and the paper's Appendix D).
NOISY_HEAD_DEFAULTS = {k: getattr(TransferTraining, k) for k in ("num_factors", "train_mc_samples", "eval_mc_samples")}


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


@dataclass
class SweepSettings(TransferTraining, TaskData):
    """Grid and fine-tuning settings shared by every task (the same sweep for all, as VTAB requires).

    Attributes:
        lrs, steps: the grid (default {0.001, 0.01} x {500, 2500}: the VTAB sweep; a repeated value raises
            ValueError); a steps entry of
            None (``bit_hyperrule`` schedule only) means the BiT-HyperRule's 500 / 10k / 20k steps.
        seeds: final runs per task (mean and std over them).
        batch_size, micro_batch, resolution, clip_grad_norm, device, schedule, lr_batch, channels_last, head, num_factors, train_mc_samples, eval_mc_samples, mixed_precision: what each fine-tune trains with, one
            default each (:class:`harness.downstream.finetune.TransferTraining`); as a sweep reads them below.
        data_format, data_dir, check_test_size, allow_outside_paths: where the tasks' data is read from
            (:class:`harness.tasks.taskset.TaskData`).
        schedule: ``staircase``, ``bit_hyperrule``, ``ta`` or ``cosine`` (see
            :class:`harness.downstream.finetune.FinetuneConfig`; ``bit``, its old name, means ``staircase``).
        lr_batch: the batch size the ``lrs`` are given for (scaled linearly to ``batch_size``).
        preset: the name of the :data:`PRESETS` entry these settings start from (reported in
            ``vtab.md``; not a setting itself).
        head: the fresh transfer head (``--head``): ``hom`` (default: the paper's Table 6 protocol, a linear
            softmax head), or ``diag`` / ``het`` / ``pe`` (:data:`harness.downstream.finetune.HEADS`), beyond that protocol.
        temperatures: the τ grid of a noisy head (``--temperatures``); None gives :data:`DEFAULT_TEMPERATURES`.
            τ joins (lr, steps) in the selection on val200 (see :func:`harness.downstream.sweep.sweep`). Must stay
            unset for ``hom``, which has no τ.
        num_factors: R of a ``het`` / ``pe`` head, used as min(R, K) on a K-class task (default 6).
        train_mc_samples, eval_mc_samples: a noisy head's MC samples S in training / evaluation (100 / 1,000).
        mixed_precision: ``no`` (fp32, the default: today's results), ``bf16``, ``fp16`` (GPUs only) or ``auto`` (bf16
            where the device computes it natively; :func:`harness.training.precision.resolve`), ``--mixed-precision``. Part of
            the recipe: a sweep folder keeps one precision.

    Raises:
        ValueError: a value out of range (the message names the setting and its CLI option); ``fp16`` with a CPU
            ``device`` (:func:`harness.training.precision.resolve`).
    """

    lrs: "list[float]" = field(default_factory=lambda: [0.001, 0.01])
    steps: "list[Optional[int]]" = field(default_factory=lambda: [500, 2500])
    seeds: int = setting(1, low=1, whole=True, note="--seeds")
    preset: str = "vtab_sweep"
    temperatures: "Optional[list[float]]" = None

    def __post_init__(self) -> None:
        if self.schedule == "bit":
            self.schedule = "staircase"
        _require(
            self.schedule in SCHEDULES,
            f"unknown schedule {self.schedule!r} (--schedule): use one of {', '.join(SCHEDULES)}",
        )
        _require(
            isinstance(self.lrs, (list, tuple))
            and len(self.lrs) > 0
            and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= MAX_LEARNING_RATE for v in self.lrs
            ),
            f"learning rates (--lrs, lrs) must be a non-empty list of positive numbers, at most {MAX_LEARNING_RATE:g} "
            f"(the references' lie below 1), e.g. 0.001,0.01; got {self.lrs!r}",
        )
        _require(
            len({float(v) for v in self.lrs}) == len(self.lrs),
            f"learning rates (--lrs, lrs) repeat a value: {self.lrs!r}; give each lr once (a repeat trains the same "
            "grid point twice)",
        )
        rule = self.schedule == "bit_hyperrule"
        _require(
            isinstance(self.steps, (list, tuple)) and len(self.steps) > 0,
            f"steps (--steps, steps) must be a non-empty list, e.g. 500,2500; got {self.steps!r}",
        )
        if rule:
            _require(
                list(self.steps) == [None],
                f"the BiT-HyperRule sets the steps from the training-set size (500 "
                f"below 20k examples, 10k below 500k, 20k above), so steps (--steps) cannot be given "
                f"({self.steps!r}); use --schedule staircase to choose the steps",
            )
        else:
            _require(
                all(_is_int(v) and v >= 1 for v in self.steps),
                f"steps (--steps, steps) must be whole numbers >= 1, e.g. 500,2500; got {self.steps!r}",
            )
            _require(
                len({int(v) for v in self.steps}) == len(self.steps),
                f"steps (--steps, steps) repeat a value: {self.steps!r}; give each step count once (a repeat trains "
                "the same grid point twice)",
            )
        if self.resolution is not None:
            r = self.resolution
            _require(
                isinstance(r, (list, tuple))
                and len(r) == 2
                and all(_is_int(v) and 1 <= v <= MAX_RESOLUTION for v in r)
                and r[1] <= r[0],
                f"resolution (--resolution) must be RESIZE,CROP: two whole numbers with "
                f"1 <= CROP <= RESIZE <= {MAX_RESOLUTION} (pixels), e.g. 160,128; got {r!r}",
            )
            self.resolution = [int(v) for v in r]
        super().__post_init__()  # the rules declared beside the fields, then the data settings (TaskData)
        PRESETS[self.preset]  # noqa: B018 -- an unknown name raises its ValueError
        self.mixed_precision = canonical(self.mixed_precision, "--mixed-precision")  # Lightning's aliases too
        if self.mixed_precision == "fp16":  # fp16 on a CPU: refused with the other options, before any output
            resolve(self.mixed_precision, str(self.device).split(":")[0].strip().lower(), "--mixed-precision")
        self._check_head()

    def _check_head(self) -> None:
        """Validate ``head`` and its settings; fill a noisy head's default τ grid (floats, in the order given)."""
        _require(
            isinstance(self.head, str) and self.head in HEADS,
            f"unknown head {self.head!r} (--head): use one "
            f"of {', '.join(HEADS)} (hom: the paper's homoscedastic transfer head; diag, het, pe: noisy heads "
            "named as the upstream methods)",
        )
        if self.head == "hom":
            _require(
                self.temperatures is None,
                f"temperatures (--temperatures {self.temperatures!r}) only apply to a "
                "noisy head: add --head diag, het or pe, or leave --temperatures out for the hom head",
            )
            odd = [k for k, v in NOISY_HEAD_DEFAULTS.items() if getattr(self, k) != v]
            _require(
                not odd,
                f"{', '.join(odd)} only apply to a noisy head (head diag, het or pe); the hom head "
                "has none: leave them at their defaults or choose a noisy head",
            )
            return
        t = list(DEFAULT_TEMPERATURES) if self.temperatures is None else self.temperatures
        _require(
            isinstance(t, (list, tuple)) and len(t) > 0 and all(temperature_in_range(v) for v in t),
            f"temperatures (--temperatures) must be a non-empty list, each {TEMPERATURE_RULE}, e.g. 0.5,1,2; got "
            f"{self.temperatures!r}",
        )
        _require(
            len({float(v) for v in t}) == len(t),
            f"temperatures (--temperatures) repeat a value: {t!r}; give each τ once",
        )
        self.temperatures = [float(v) for v in t]


class _Presets(dict):
    """Preset name -> SweepSettings fields; an unknown name raises ValueError naming the known ones."""

    def __missing__(self, name: str):
        if name == "bit":
            raise ValueError(
                "preset 'bit' was renamed: it was the VTAB sweep ({0.001, 0.01} x {500, 2500} steps), not "
                "the BiT-HyperRule; use --preset vtab_sweep for that grid, or --preset bit_hyperrule for "
                "the published BiT-HyperRule"
            )
        raise ValueError(f"unknown preset {name!r}: use one of {', '.join(self)}")


#: named settings (each records its own name in ``preset``)
PRESETS = _Presets(
    vtab_sweep=dict(preset="vtab_sweep"),
    bit_hyperrule=dict(
        preset="bit_hyperrule", lrs=[0.003], steps=[None], batch_size=512, lr_batch=512, schedule="bit_hyperrule"
    ),
    demo=dict(
        preset="demo", lrs=[0.01, 0.05], steps=[50, 100], seeds=2, batch_size=64, micro_batch=64, resolution=[32, 32]
    ),
)

PRESET_TEXT = {
    "vtab_sweep": "the VTAB-1k sweep (Zhai et al. 2019; google-research/task_adaptation): lr {0.001, 0.01} x steps {500, 2500} chosen on "
    "val200, batch 512, staircase schedule",
    "bit_hyperrule": "the BiT-HyperRule as published (Kolesnikov et al. 2020; big_transfer bit_hyperrule.py): "
    "lr 0.003 at batch 512; 500 steps below 20k training examples, 10k below 500k, 20k above; "
    "no selection",
    "demo": "CPU-sized settings for the DEMO tasks; neither the BiT-HyperRule nor the VTAB sweep",
}

#: fields that change what a run computes (the recipe); the others say where and how it runs
RECIPE_FIELDS = (
    "lrs",
    "steps",
    "seeds",
    "batch_size",
    "micro_batch",
    "resolution",
    "clip_grad_norm",
    "schedule",
    "lr_batch",
    "head",
    "mixed_precision",
)
#: recipe fields of a noisy head only (a hom recipe leaves them out)
NOISY_HEAD_FIELDS = ("temperatures", *NOISY_HEAD_DEFAULTS)


def recipe(settings: SweepSettings) -> dict:
    """The preset, what was changed from it, and the recipe fields (the head's too), for ``vtab.json`` /
    ``vtab.md``."""
    base, used = asdict(SweepSettings(**PRESETS[settings.preset])), asdict(settings)
    noisy = NOISY_HEAD_FIELDS if settings.head != "hom" else ()
    head_base = asdict(SweepSettings(**{**PRESETS[settings.preset], "head": settings.head}))  # the noisy defaults
    return {
        "preset": settings.preset,
        "description": PRESET_TEXT[settings.preset],
        "changed": [k for k in RECIPE_FIELDS if used[k] != base[k]] + [k for k in noisy if used[k] != head_base[k]],
        **{k: used[k] for k in RECIPE_FIELDS + noisy},
    }
