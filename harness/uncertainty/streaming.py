"""Streaming metrics: torchmetrics ``Metric`` classes whose ``update``/``compute`` equal the array metrics.

The array metrics (:mod:`harness.uncertainty.metrics`, :mod:`harness.uncertainty.ood`) score whole ``[N, K]``
arrays. These classes take one batch at a time, keep small states, and sync them across processes
(torchmetrics' ``add_state`` with a ``dist_reduce_fx``: ``sync`` / ``compute`` all-gather them in DDP, and
``merge_state`` merges two metrics), so they drop into a plain evaluation loop, a Lightning ``LightningModule`` or
torch-uncertainty's routine. On the same examples, however batched or split across processes, ``compute`` equals
the array function named in each class (to round-off, 1e-6 in ``tests/uncertainty/test_streaming.py``).

Inputs of ``update(preds, target)``: ``preds`` ``[B, K]`` float logits *or* normalised log-probabilities (any float
dtype; computed in float64); ``log_softmax`` is applied first, which leaves log-probabilities unchanged (to
round-off), so the raw logits of a linear head and the log p̄ that a HET head returns for the softmax link
(:class:`harness.heads.HeteroscedasticHead`) both go in as they are. Probabilities do not: rows that are all
non-negative and sum to 1 are refused (pass ``probs.log()``). ``target`` ``[B]`` integer class indices in
``[0, K)``. With ``validate_args=True`` (the default) bad input raises ``ValueError`` naming the fix (shape, dtype,
label range, NaN or +inf); ``False`` skips the checks (and their device-to-host syncs).

States and memory (float64, so on CPU and CUDA; MPS has no float64):

| class | array function | state | dist_reduce_fx |
|---|---|---|---|
| :class:`ECE`, :class:`MCE`, :class:`RMSCalibrationError` | ``ece``, ``mce``, ``rms_calibration_error`` | 3 x ``[bins]`` | sum |
| :class:`ClasswiseECE` | ``classwise_ece`` | 3 x ``[K, bins]`` | sum |
| :class:`NLL`, :class:`Brier` | ``nll``, ``brier`` | 2 scalars | sum |
| :class:`AdaptiveECE` | ``adaptive_ece`` | ``[N]`` confidences and correctness | cat |
| :class:`AURC` | ``ood.aurc`` on ``top_label`` | ``[N]`` confidences and correctness | cat |
| :class:`FPR95` | ``ood.fpr_at_tpr`` | ``[N]`` scores and OOD flags | cat |

Equal-mass bins, AURC and FPR95 depend on the order of all the scores, so their states grow with N (two numbers per
example, never ``[N, K]``); the others are O(bins·K) or O(1).

Saturated confidences differ from torchmetrics. Our equal-width bins put conf = 1.0 in the last bin
(``floor(B·conf)`` clipped to ``B - 1``, as robustness_metrics and ``tf.histogram_fixed_width_bins``); torchmetrics'
``MulticlassCalibrationError`` (and torch-uncertainty's ``CalibrationError``, built on it) bins with
``torch.bucketize(conf, linspace(0, 1, B + 1), right=True) - 1``, which gives conf = 1.0 the index B: a 16th bin
of its own for B = 15. Without a confidence of exactly 1.0 the two agree (to float32 round-off); with one, ECE, RMS
CE and MCE differ (``test_saturated_confidence_opens_a_16th_bin_in_torchmetrics`` pins an example).
"""

from __future__ import annotations

import torch
from torch import Tensor

from harness.extras import require
from harness.uncertainty.checks import check_forecasts, check_num_bins, check_two_classes
from harness.uncertainty.metrics import NUM_BINS, _calibration_error
from harness.uncertainty.ood import SCORES, TPR_LEVEL, aurc, fpr_at_tpr

require("torchmetrics", "the streaming metrics (harness.uncertainty.streaming)")  # names the metrics extra
from torchmetrics import Metric  # noqa: E402
from torchmetrics.utilities import dim_zero_cat  # noqa: E402

__all__ = ["ECE", "MCE", "AdaptiveECE", "RMSCalibrationError", "ClasswiseECE", "NLL", "Brier", "AURC", "FPR95"]

F64 = torch.float64


def _log_probs(preds: Tensor, validate: bool) -> Tensor:
    """``[B, K]`` float64 log-probabilities from logits or log-probabilities (see the module docstring)."""
    if validate:
        if not isinstance(preds, Tensor) or preds.ndim != 2 or not preds.is_floating_point():
            what = f"a {preds.ndim}-D {preds.dtype} tensor" if isinstance(preds, Tensor) else type(preds).__name__
            raise ValueError(f"preds must be a float tensor [B, K] of logits or log-probabilities, got {what}")
        check_two_classes(tuple(preds.shape), "preds")
        if len(preds) and bool((preds >= 0).all()) and bool(((preds.sum(1) - 1).abs() <= 1e-3).all()):
            raise ValueError(
                "preds look like probabilities (non-negative rows that sum to 1): pass logits or log-probabilities "
                "(probs.log())"
            )
    lp = torch.log_softmax(preds.detach().to(F64), dim=1)
    if validate and len(lp):
        bad = torch.isnan(lp).any(dim=1)
        if bool(bad.any()):
            raise ValueError(
                f"preds give NaN log-probabilities in {int(bad.sum())} of {len(lp)} rows (first: row "
                f"{int(bad.float().argmax())}): a NaN, a +inf or a row of -inf in the model's output is not scored"
            )
    return lp


def _inputs(preds: Tensor, target: Tensor, validate: bool) -> "tuple[Tensor, Tensor]":
    """(log-probabilities ``[B, K]`` float64, labels ``[B]`` int64 on their device), checked if ``validate``."""
    lp = _log_probs(preds, validate)
    if validate:
        if not isinstance(target, Tensor) or target.ndim != 1:
            raise ValueError(
                f"target must be a 1-D tensor of class indices [B], got {getattr(target, 'shape', target)}"
            )
        if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
            raise ValueError(f"target must hold integer class indices, got dtype {target.dtype}: cast with .long()")
        if len(target) != len(lp):
            raise ValueError(f"{len(target)} labels for {len(lp)} rows of preds: give one label per row")
        if len(target) and (int(target.min()) < 0 or int(target.max()) >= lp.shape[1]):
            raise ValueError(
                f"labels must lie in [0, {lp.shape[1]}), got range [{int(target.min())}, {int(target.max())}]: "
                "check the label set or the model's num_classes"
            )
    return lp, target.to(device=lp.device, dtype=torch.long)


def _top_label(lp: Tensor, y: Tensor) -> "tuple[Tensor, Tensor]":
    """(confidence = max_k p_k, correct = argmax == y), as :func:`harness.uncertainty.metrics.top_label`."""
    top, arg = lp.max(dim=1)
    return top.exp(), (arg == y).to(F64)


def _bin_index(p: Tensor, num_bins: int) -> Tensor:
    """floor(B·p) clipped to [0, B - 1]: p = 1.0 falls in the last bin (metrics.reliability_bins)."""
    return torch.floor(p * num_bins).long().clamp_(0, num_bins - 1)


def _no_examples(metric: Metric) -> ValueError:
    return ValueError(
        f"{type(metric).__name__}.compute() before any example: call update() with a non-empty batch first (an "
        "empty evaluation split has nothing to score)"
    )


def _cat(metric: Metric, state: "list[Tensor] | Tensor") -> Tensor:
    if isinstance(state, list) and not state:
        raise _no_examples(metric)
    out = dim_zero_cat(state)
    if not out.numel():
        raise _no_examples(metric)
    return out


class _Streaming(Metric):
    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, validate_args: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.validate_args = validate_args
        # K of the batches seen (0: none yet), so one evaluation is never two label spaces averaged as one
        self.add_state("classes", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="max")

    def _batch(self, preds: Tensor, target: Tensor) -> "tuple[Tensor, Tensor]":
        """:func:`_inputs`, and (if ``validate_args``) ``preds`` of the K classes of the batches before (audit13
        A13-25); ``ValueError`` naming both."""
        lp, y = _inputs(preds, target, self.validate_args)
        seen = int(self.classes)
        if self.validate_args and seen and lp.shape[1] != seen:
            raise ValueError(
                f"{type(self).__name__} has seen batches of {seen} classes; got preds of shape {tuple(lp.shape)}: one "
                "evaluation scores one label space; call reset() between evaluations"
            )
        self.classes.fill_(lp.shape[1])
        return lp, y


class _TopLabelBins(_Streaming):
    """Equal-width reliability bins of top-label forecasts: count, Σ confidence, Σ correct per bin (sum states)."""

    reduce = "mean"

    def __init__(self, num_bins: int = NUM_BINS, validate_args: bool = True, **kwargs) -> None:
        super().__init__(validate_args, **kwargs)
        self.num_bins = check_num_bins(num_bins)
        for name in ("count", "confidence_sum", "correct_sum"):
            self.add_state(name, default=torch.zeros(num_bins, dtype=F64), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add a batch: ``preds`` ``[B, K]`` logits or log-probabilities, ``target`` ``[B]`` class indices."""
        conf, correct = _top_label(*self._batch(preds, target))
        idx = _bin_index(conf, self.num_bins)
        self.count.index_add_(0, idx, torch.ones_like(conf))
        self.confidence_sum.index_add_(0, idx, conf)
        self.correct_sum.index_add_(0, idx, correct)

    def compute(self) -> Tensor:
        """The calibration error over every example seen (0-dim float64 tensor).

        Raises:
            ValueError: no example was given to ``update``.
        """
        total = self.count.sum()
        if not bool(total > 0):
            raise _no_examples(self)
        filled = self.count > 0
        n = self.count[filled]
        gaps = (self.correct_sum[filled] / n - self.confidence_sum[filled] / n).abs()
        if self.reduce == "max":
            return gaps.max()
        weights = n / total
        return (weights * gaps**2).sum().sqrt() if self.reduce == "rms" else (weights * gaps).sum()


class ECE(_TopLabelBins):
    """Expected calibration error, top-label, ``num_bins`` equal-width bins: Σ_b (n_b / N) |acc_b - conf_b|.

    Equals :func:`harness.uncertainty.metrics.ece` (Guo et al. 2017; google-research/robustness_metrics
    ``metrics/uncertainty.py``) on the examples seen. ``update(preds [B, K], target [B])`` (module docstring);
    state: 3 x ``[num_bins]`` float64, summed across processes. ``compute()`` raises ``ValueError`` before any
    example; ``__init__`` raises it for ``num_bins`` outside [1, MAX_BINS]. conf = 1.0 falls in the last bin, unlike torchmetrics
    (module docstring).
    """

    reduce = "mean"


class MCE(_TopLabelBins):
    """Maximum calibration error: max over non-empty equal-width bins of |acc_b - conf_b| (Naeini et al. 2015).

    Equals :func:`harness.uncertainty.metrics.mce`; inputs, state and errors as :class:`ECE`.
    """

    reduce = "max"


class RMSCalibrationError(_TopLabelBins):
    """Root-mean-square calibration error, top-label, equal-width bins: sqrt(Σ_b (n_b / N) (acc_b - conf_b)²).

    Equals :func:`harness.uncertainty.metrics.rms_calibration_error` (Hendrycks et al. 2019; torchmetrics'
    ``norm="l2"`` except at conf = 1.0, module docstring); inputs, state and errors as :class:`ECE`.
    """

    reduce = "rms"


class ClasswiseECE(_Streaming):
    """Classwise ECE: the ECE of each class's probability p_j as a forecast of y == j, averaged over the K classes.

    Equals :func:`harness.uncertainty.metrics.classwise_ece` (Kull et al. 2019, Sec. 2). ``num_classes`` K sizes
    the state: 3 x ``[K, num_bins]`` float64 (count, Σ p_j, Σ 1[y = j] per class and bin), summed across processes;
    a batch also takes ``[B, K]`` float64 temporaries. ``update(preds [B, K], target [B])`` as :class:`ECE`.

    Raises:
        ValueError: ``num_classes`` or ``num_bins`` outside [1, MAX_BINS]; ``preds`` with another K; ``compute`` before any example.
    """

    def __init__(self, num_classes: int, num_bins: int = NUM_BINS, validate_args: bool = True, **kwargs) -> None:
        super().__init__(validate_args, **kwargs)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"num_classes must be a whole number >= 1, got {num_classes!r}")
        self.num_classes, self.num_bins = num_classes, check_num_bins(num_bins)
        for name in ("count", "confidence_sum", "hit_sum"):
            self.add_state(name, default=torch.zeros(num_classes, num_bins, dtype=F64), dist_reduce_fx="sum")

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add a batch: ``preds`` ``[B, K]`` logits or log-probabilities, ``target`` ``[B]`` class indices."""
        lp, y = self._batch(preds, target)
        k, bins = self.num_classes, self.num_bins
        if lp.shape[1] != k:
            raise ValueError(f"preds have {lp.shape[1]} classes, this metric was made for num_classes={k}")
        probs = lp.exp().clamp_(max=1.0)
        flat = (_bin_index(probs, bins) + torch.arange(k, device=lp.device) * bins).flatten()
        hits = torch.zeros_like(probs)
        hits[torch.arange(len(y), device=lp.device), y] = 1.0
        self.count.view(-1).index_add_(0, flat, torch.ones_like(probs).flatten())
        self.confidence_sum.view(-1).index_add_(0, flat, probs.flatten())
        self.hit_sum.view(-1).index_add_(0, flat, hits.flatten())

    def compute(self) -> Tensor:
        """The classwise ECE over every example seen (0-dim float64 tensor); ``ValueError`` before any example."""
        n = self.count.sum(dim=1, keepdim=True)
        if not bool((n > 0).all()):
            raise _no_examples(self)
        filled = self.count > 0
        safe = self.count.clamp(min=1.0)
        gaps = (self.hit_sum / safe - self.confidence_sum / safe).abs()
        return torch.where(filled, self.count / n * gaps, torch.zeros_like(gaps)).sum(dim=1).mean()


class _Mean(_Streaming):
    """Mean over examples of a per-example loss: its sum and the count (sum states)."""

    def __init__(self, validate_args: bool = True, **kwargs) -> None:
        super().__init__(validate_args, **kwargs)
        self.add_state("total", default=torch.zeros((), dtype=F64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=F64), dist_reduce_fx="sum")

    def _losses(self, lp: Tensor, y: Tensor) -> Tensor:
        raise NotImplementedError

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add a batch: ``preds`` ``[B, K]`` logits or log-probabilities, ``target`` ``[B]`` class indices."""
        lp, y = self._batch(preds, target)
        self.total += self._losses(lp, y).sum()
        self.count += len(y)

    def compute(self) -> Tensor:
        """The mean over every example seen (0-dim float64 tensor); ``ValueError`` before any example."""
        if not bool(self.count > 0):
            raise _no_examples(self)
        return self.total / self.count


class NLL(_Mean):
    """Negative log-likelihood in nats, mean over examples of -log p(y|x).

    Equals :func:`harness.uncertainty.metrics.nll` (robustness_metrics); ``inf`` once a label had probability exactly
    0. ``update(preds [B, K], target [B])`` (module docstring); state: 2 float64 scalars, summed across processes;
    ``compute`` raises ``ValueError`` before any example.
    """

    def _losses(self, lp: Tensor, y: Tensor) -> Tensor:
        return -lp.gather(1, y[:, None]).squeeze(1)


class Brier(_Mean):
    """Brier score, mean over examples of Σ_k (p_k - 1[y = k])², in [0, 2] (Brier 1950; full multiclass form).

    Equals :func:`harness.uncertainty.metrics.brier`; inputs, state and errors as :class:`NLL`.
    """

    def _losses(self, lp: Tensor, y: Tensor) -> Tensor:
        p = lp.exp()
        p[torch.arange(len(y), device=p.device), y] -= 1.0
        return (p**2).sum(dim=1)


class _Forecasts(_Streaming):
    """Every example's top-label confidence and correctness (cat states: O(N), two float64 per example)."""

    def __init__(self, validate_args: bool = True, **kwargs) -> None:
        super().__init__(validate_args, **kwargs)
        self.add_state("confidence", default=[], dist_reduce_fx="cat")
        self.add_state("correct", default=[], dist_reduce_fx="cat")

    def update(self, preds: Tensor, target: Tensor) -> None:
        """Add a batch: ``preds`` ``[B, K]`` logits or log-probabilities, ``target`` ``[B]`` class indices."""
        conf, correct = _top_label(*self._batch(preds, target))
        self.confidence.append(conf)
        self.correct.append(correct)

    def _arrays(self):
        conf = _cat(self, self.confidence).cpu().numpy()
        return conf, _cat(self, self.correct).cpu().numpy()


class AdaptiveECE(_Forecasts):
    """ECE with ``num_bins`` equal-mass bins (Nguyen & O'Connor 2015), top-label.

    Equals :func:`harness.uncertainty.metrics.adaptive_ece` (computed by it, on the gathered forecasts). Equal-mass
    bins need every confidence, so the state is O(N): two ``[N]`` float64 cat states, concatenated across
    processes. ``update(preds [B, K], target [B])`` (module docstring).

    Raises:
        ValueError: ``num_bins`` outside [1, MAX_BINS]; ``compute`` before any example.
    """

    def __init__(self, num_bins: int = NUM_BINS, validate_args: bool = True, **kwargs) -> None:
        super().__init__(validate_args, **kwargs)
        self.num_bins = check_num_bins(num_bins)

    def compute(self) -> Tensor:
        """The adaptive ECE over every example seen (0-dim float64 tensor)."""
        conf, correct = check_forecasts(*self._arrays(), self.num_bins)
        return torch.tensor(
            _calibration_error(conf, correct, self.num_bins, True, "mean"), dtype=F64, device=self.device
        )


class AURC(_Forecasts):
    """Area under the risk-coverage curve of selective prediction by top-label confidence (Geifman et al. 2019).

    Equals :func:`harness.uncertainty.ood.aurc` on :func:`harness.uncertainty.metrics.top_label` forecasts (computed
    by it: ties accepted in random order, taken in expectation). The curve needs every confidence: two ``[N]``
    float64 cat states, concatenated across processes. ``update(preds [B, K], target [B])`` (module docstring).
    ``compute`` raises ``ValueError`` before any example.
    """

    def compute(self) -> Tensor:
        """AURC over every example seen (0-dim float64 tensor); lower is better."""
        return torch.tensor(aurc(*self._arrays()), dtype=F64, device=self.device)


class FPR95(_Streaming):
    """False-positive rate at 95% TPR of OOD detection: the share of OOD examples kept when at least ``level`` of
    the in-distribution examples are kept (Liang et al. 2018, Sec. 4.2).

    ``update(preds, is_ood)``: ``preds`` ``[B]`` uncertainty scores (higher = more likely OOD) or ``[B, K]`` logits /
    log-probabilities, scored by ``score`` (``one_minus_max_prob`` or ``entropy``, as
    :func:`harness.uncertainty.ood.uncertainty_scores`); ``is_ood`` ``[B]`` bool or 0/1. Equals
    :func:`harness.uncertainty.ood.fpr_at_tpr` ``(scores[~is_ood], scores[is_ood], level)`` (computed by it). The
    ROC needs every score: two ``[N]`` cat states, concatenated across processes.

    Raises:
        ValueError: an unknown ``score``; bad input (shapes, NaN scores, ``is_ood`` not 0/1); ``compute`` without
            both in-distribution and OOD examples, or with a non-finite score.
    """

    def __init__(
        self, score: str = "one_minus_max_prob", level: float = TPR_LEVEL, validate_args: bool = True, **kwargs
    ) -> None:
        super().__init__(validate_args, **kwargs)
        if score not in SCORES[:2]:
            raise ValueError(f"unknown score {score!r}: use one of {', '.join(SCORES[:2])} (or pass [B] scores)")
        self.score, self.level = score, float(level)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("is_ood", default=[], dist_reduce_fx="cat")

    def update(self, preds: Tensor, is_ood: Tensor) -> None:
        """Add a batch: ``preds`` ``[B]`` scores or ``[B, K]`` logits / log-probabilities, ``is_ood`` ``[B]``."""
        if isinstance(preds, Tensor) and preds.ndim == 1:
            s = preds.detach().to(F64)
        else:
            lp = _log_probs(preds, self.validate_args)
            s = 1.0 - lp.max(dim=1).values.exp() if self.score == "one_minus_max_prob" else _entropy(lp)
        if self.validate_args:
            if not isinstance(is_ood, Tensor) or is_ood.shape != s.shape:
                raise ValueError(f"is_ood must be a [B] tensor, one flag per row of preds ({len(s)}), got {is_ood!r}")
            if len(s) and (bool(torch.isnan(s).any()) or not bool(((is_ood == 0) | (is_ood == 1)).all())):
                raise ValueError("scores must not be NaN and is_ood must be bool or 0/1 (1 = out of distribution)")
        self.scores.append(s)
        self.is_ood.append(is_ood.detach().to(device=s.device, dtype=torch.bool))

    def compute(self) -> Tensor:
        """FPR at ``level`` TPR over every example seen (0-dim float64 tensor); lower is better."""
        s, ood = _cat(self, self.scores).cpu().numpy(), _cat(self, self.is_ood).cpu().numpy()
        return torch.tensor(fpr_at_tpr(s[~ood], s[ood], self.level), dtype=F64, device=self.device)


def _entropy(lp: Tensor) -> Tensor:
    """Predictive entropy ``[B]`` in nats (0 log 0 = 0), as :func:`harness.uncertainty.ood.entropy`."""
    p = lp.exp()
    return -torch.where(p > 0, p * lp, torch.zeros_like(p)).sum(dim=1)
