"""Few-shot linear evaluation of frozen features: closed-form ridge regression to ±1 one-hot targets.

The probe of ViT and big_vision (Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021, Sec. 4.1:
"few-shot accuracies are obtained by solving a regularized least-squares regression problem that maps the (frozen)
representation of a subset of training images to {-1, 1}^K target vectors"; google-research/big_vision,
``big_vision/evaluators/fewshot_lsr.py``), on feature arrays, so that any stage can use it:

- the shots' features are standardised by their own mean and standard deviation (+1e-5), and the same affine map
  is applied to every other example;
- a constant feature of value :data:`BIAS_FEATURE` (100, as big_vision) is appended: its weight is the bias, and
  since the penalty falls on that weight, the bias is in effect penalised by λ / 100², almost not at all;
- the targets are 2·onehot(y) − 1; W = argmin ||X W − Y||² + λ ||W||², in closed form (:func:`ridge_solve`);
- the prediction is argmax over classes of the K scores.

Choosing λ: big_vision's current evaluator fixes λ = 2^10 (``configs/common_fewshot.py``); its earlier one (and
uncertainty-baselines' ``fewshot_utils.py``) scored the grid 2^k, k = −10 .. 19, and ranked the λ by their test
accuracies across datasets. Here λ is chosen from that grid (:data:`L2_GRID`) on held-out examples drawn from the
training pool, disjoint from the shots (:func:`draw_shots`), never on the test split (:func:`fewshot_scores`).
So a k-shot result uses k labelled examples per class to fit the probe and up to :data:`HELDOUT_PER_CLASS` more
per class to choose λ.

Feature extraction (:func:`extract_features`) runs a frozen :class:`harness.models.Classifier` in eval mode
through its :meth:`~harness.models.Classifier.pre_logits` (the pooled backbone features, the head dropped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

#: the value of the constant feature that carries the bias (big_vision ``BIAS_CONSTANT``)
BIAS_FEATURE = 100.0
#: added to the shots' per-feature standard deviation before dividing (big_vision's whitening)
STD_EPS = 1e-5
#: the λ grid: 2^k for k = -10 .. 19 (the grid of big_vision's earlier few-shot evaluator and uncertainty-baselines')
L2_GRID = tuple(2.0**k for k in range(-10, 20))
#: held-out examples per class drawn beside the shots to choose λ (fewer where a class has fewer left, at least 1)
HELDOUT_PER_CLASS = 10


def _float_matrix(a: Any, what: str) -> torch.Tensor:
    """``a`` as a finite 2-D float64 tensor, or a ValueError naming ``what``."""
    t = torch.as_tensor(np.asarray(a, dtype=np.float64) if not isinstance(a, torch.Tensor) else a).double()
    if t.ndim != 2 or t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"{what} must be a non-empty 2-D array [N, D], got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(
            f"{what} holds NaN or infinite values ({int((~torch.isfinite(t)).sum())} of {t.numel()}): "
            "the model's features diverged, or the input images are broken; check the model"
        )
    return t


def _lams(lams: "float | Iterable[float]") -> "list[float]":
    values = [lams] if isinstance(lams, (int, float)) else list(lams)
    if not values or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in values
    ):
        raise ValueError(f"the l2 strength λ must be a finite number > 0 (or a non-empty list of them), got {lams!r}")
    return [float(v) for v in values]


def ridge_solve(x: Any, targets: Any, lams: "float | Iterable[float]") -> np.ndarray:
    """Closed-form ridge regression for each λ: W(λ) = argmin_W ||x W − targets||² + λ ||W||² = (xᵀx + λI)⁻¹ xᵀY.

    One symmetric eigendecomposition (``torch.linalg.eigh``, float64) of the smaller Gram matrix serves every λ,
    as big_vision's ``_precompute_cache`` does: when N >= D (primal), xᵀx = Q diag(e) Qᵀ and
    W = Q diag(1 / (e + λ)) Qᵀ xᵀY; when N < D (dual, the usual few-shot case), x xᵀ = Q diag(e) Qᵀ and
    W = xᵀ Q diag(1 / (e + λ)) Qᵀ Y, by the push-through identity (xᵀx + λI)⁻¹xᵀ = xᵀ(x xᵀ + λI)⁻¹. Eigenvalues
    are clipped at 0 (the Gram matrix is positive semi-definite; rounding can make its smallest ones negative).
    Every column of ``x`` is penalised alike: a bias is a constant column (:func:`fit_probes`).

    Args:
        x: ``[N, D]`` features (any float array or tensor).
        targets: ``[N, K]`` regression targets.
        lams: λ > 0, or a sequence of them.

    Returns:
        ``[L, D, K]`` float64: W for each of the L values of λ, in order.

    Raises:
        ValueError: not 2-D, empty, N differs between ``x`` and ``targets``, NaN or infinite values, λ <= 0.
    """
    lam = _lams(lams)
    x, y = _float_matrix(x, "features x"), _float_matrix(targets, "targets")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"features x have {x.shape[0]} rows and targets {y.shape[0]}: give one target row per example")
    n, d = x.shape
    gram = x.T @ x if n >= d else x @ x.T
    e, q = torch.linalg.eigh(gram)
    e = e.clamp_min(0.0)
    scale = 1.0 / (e[None, :] + torch.tensor(lam, dtype=torch.float64)[:, None])  # [L, M]
    if n >= d:
        rhs = q.T @ (x.T @ y)  # [D, K]
        w = (q[None] * scale[:, None, :]) @ rhs  # [L, D, K]
    else:
        rhs = q.T @ y  # [N, K]
        w = ((x.T @ q)[None] * scale[:, None, :]) @ rhs
    return w.numpy()


def _labels(labels: Any, num_classes: int, n: "int | None", what: str) -> np.ndarray:
    """``labels`` as ``[N]`` int64 in [0, K), or a ValueError naming ``what``."""
    if not (isinstance(num_classes, (int, np.integer)) and num_classes >= 2):
        raise ValueError(f"num_classes must be a whole number >= 2, got {num_classes!r}")
    y = np.asarray(labels)
    if y.ndim != 1 or (n is not None and len(y) != n):
        raise ValueError(
            f"{what} must be a 1-D array of {n if n is not None else 'N'} class indices, got shape {y.shape}"
        )
    if y.size and not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"{what} must be integer class indices, got dtype {y.dtype}: pass the labels, not one-hot "
            "rows or probabilities"
        )
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(
            f"{what} must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]: give the task's number of classes"
        )
    return y.astype(np.int64)


@dataclass
class LinearProbe:
    """A linear classifier on raw features: scores ``features @ weight + bias``, prediction their argmax.

    The standardisation by the shots' mean and std and the bias feature of :func:`fit_probes` are folded in:
    with m, s the shots' mean and std + 1e-5 and [W; w_b] the ridge solution on the standardised features with the
    constant column c = 100, ``weight = W / s[:, None]`` and ``bias = c·w_b − (m / s) @ W``.

    Attributes:
        weight: ``[D, K]`` float64.
        bias: ``[K]`` float64.
        lam: the λ it was fit with.
    """

    weight: np.ndarray
    bias: np.ndarray
    lam: float

    def scores(self, features: Any) -> np.ndarray:
        """``[N, K]`` scores (the regression's estimate of the ±1 targets) for ``[N, D]`` features."""
        x = _float_matrix(features, "features").numpy()
        if x.shape[1] != self.weight.shape[0]:
            raise ValueError(
                f"features have {x.shape[1]} dimensions and the probe was fit on {self.weight.shape[0]}: "
                "use features of the same model"
            )
        return x @ self.weight + self.bias

    def predict(self, features: Any) -> np.ndarray:
        """``[N]`` predicted classes (argmax of :meth:`scores`; ties: the lowest class)."""
        return self.scores(features).argmax(axis=1)


def fit_probes(features: Any, labels: Any, num_classes: int, lams: "float | Iterable[float]") -> "list[LinearProbe]":
    """Fit the few-shot probe of big_vision for each λ (see the module docstring): standardise ``features`` by
    their own mean and std (+ :data:`STD_EPS`), append the constant :data:`BIAS_FEATURE`, regress 2·onehot − 1 in
    closed form (:func:`ridge_solve`).

    Args:
        features: ``[N, D]`` the shots' features.
        labels: ``[N]`` int class indices in [0, ``num_classes``).
        num_classes: K >= 2 (every class gets a score, also one without shots).
        lams: λ > 0, or a sequence of them.

    Returns:
        One :class:`LinearProbe` per λ, in order.

    Raises:
        ValueError: bad shapes, dtypes, label range, NaN features or λ <= 0 (the message names the fix).
    """
    x = _float_matrix(features, "features").numpy()
    y = _labels(labels, num_classes, x.shape[0], "labels")
    lam = _lams(lams)
    mean, std = x.mean(axis=0), x.std(axis=0) + STD_EPS
    z = np.concatenate([(x - mean) / std, np.full((len(x), 1), BIAS_FEATURE)], axis=1)
    targets = 2.0 * np.eye(num_classes)[y] - 1.0
    probes = []
    for lam_i, w in zip(lam, ridge_solve(z, targets, lam)):
        weight = w[:-1] / std[:, None]
        probes.append(LinearProbe(weight, BIAS_FEATURE * w[-1] - (mean / std) @ w[:-1], lam_i))
    return probes


def check_shots(shots: Any, what: str = "shots") -> "list[int]":
    """``shots`` as a sorted list of distinct whole numbers >= 1.

    Raises:
        ValueError: empty, or a value that is not a whole number >= 1 (naming ``what``, e.g. ``--shots``).
    """
    values = list(shots) if isinstance(shots, (list, tuple)) else [shots]
    if not values or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1 for s in values):
        raise ValueError(f"{what} must be whole numbers >= 1 (examples per class), e.g. 1,5,10,25; got {shots!r}")
    return sorted({int(s) for s in values})


def draw_shots(
    labels: Any,
    num_classes: int,
    shots: Sequence[int],
    seed: int = 0,
    heldout: int = HELDOUT_PER_CLASS,
    where: str = "the training pool",
) -> "dict[int, tuple[np.ndarray, np.ndarray]]":
    """For each shot count s, ``s`` training examples per class and, disjoint from them, up to ``heldout`` more per
    class to choose λ on: indices into ``labels``.

    Each class's examples are put in one seeded random order (``np.random.default_rng(seed)``, classes in turn);
    the shots are its first s (so the shots of a smaller count are among those of a larger one, as big_vision
    draws them) and the held-out examples the next min(``heldout``, n_c − s).

    Args:
        labels: ``[N]`` int class indices of the pool.
        num_classes: K; every class must have at least max(shots) + 1 examples.
        shots: the shot counts (:func:`check_shots`).
        seed: the draw.
        heldout: held-out examples per class (>= 1).
        where: names the pool in messages (e.g. ``"task demo_digit, train800val200"``).

    Returns:
        ``{s: (shot indices [K·s], held-out indices [<= K·heldout])}``, each sorted by class, then by draw.

    Raises:
        ValueError: bad shots or labels; a class with fewer than s + 1 examples (the message names the class, its
            count and the largest shot count the pool allows).
    """
    shots = check_shots(shots)
    y = _labels(labels, num_classes, None, "labels")
    if not (isinstance(heldout, (int, np.integer)) and heldout >= 1):
        raise ValueError(f"heldout must be a whole number >= 1 (examples per class to choose λ on), got {heldout!r}")
    counts = np.bincount(y, minlength=num_classes)
    smallest = int(counts.argmin())
    if counts[smallest] < shots[-1] + 1:
        n = int(counts[smallest])
        fix = (
            f"ask for at most {n - 1} shots"
            if n >= 2
            else "few-shot evaluation needs at least 2 examples of every class (1 shot, 1 held out)"
        )
        raise ValueError(
            f"class {smallest} has {n} example{'s' if n != 1 else ''} in {where}: {shots[-1]} shots need "
            f"at least {shots[-1] + 1} per class ({shots[-1]} to fit, at least 1 held out to choose λ); "
            f"{fix}"
        )
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(np.flatnonzero(y == c)) for c in range(num_classes)]
    out = {}
    for s in shots:
        out[s] = (np.concatenate([o[:s] for o in orders]), np.concatenate([o[s : s + heldout] for o in orders]))
    return out


def fewshot_scores(
    pool_features: Any,
    pool_labels: Any,
    draws: "Mapping[int, tuple[np.ndarray, np.ndarray]]",
    test_features: Any,
    test_labels: Any,
    num_classes: int,
    grid: Sequence[float] = L2_GRID,
) -> "dict[int, dict]":
    """Few-shot accuracy for each shot count: λ chosen on the held-out draw, the probe fit on the shots with it,
    scored on the test examples.

    For each λ of ``grid`` the probe is fit on the shots (:func:`fit_probes`) and scored on the held-out examples;
    the λ with the highest held-out accuracy is kept (ties: the lowest held-out squared error to the ±1 targets,
    then the larger λ). Only then are the test examples scored, by that one probe: the test labels never enter the
    choice.

    Args:
        pool_features: ``[N, D]`` features of the pool the draws index.
        pool_labels: ``[N]`` their labels.
        draws: ``{shots: (shot indices, held-out indices)}`` into the pool (:func:`draw_shots`).
        test_features: ``[M, D]``; test_labels: ``[M]``.
        num_classes: K.
        grid: the λ values to choose from.

    Returns:
        ``{shots: {"prec@1": test accuracy, "lam": λ chosen, "heldout_prec@1": its held-out accuracy,
        "num_train": shots used, "num_heldout": held-out examples, "num_test": M}}``.

    Raises:
        ValueError: bad shapes, labels or λ; an empty held-out draw; feature sizes that differ.
    """
    px = _float_matrix(pool_features, "pool features").numpy()
    py = _labels(pool_labels, num_classes, px.shape[0], "pool labels")
    tx = _float_matrix(test_features, "test features").numpy()
    ty = _labels(test_labels, num_classes, tx.shape[0], "test labels")
    if tx.shape[1] != px.shape[1]:
        raise ValueError(
            f"test features have {tx.shape[1]} dimensions and pool features {px.shape[1]}: extract both "
            "with the same model"
        )
    grid = _lams(grid)
    out = {}
    for shots, (train_idx, held_idx) in sorted(draws.items()):
        if len(held_idx) == 0:
            raise ValueError(f"the {shots}-shot draw has no held-out examples to choose λ on; draw with draw_shots")
        probes = fit_probes(px[train_idx], py[train_idx], num_classes, grid)
        held_targets = 2.0 * np.eye(num_classes)[py[held_idx]] - 1.0
        ranked = []
        for p in probes:
            s = p.scores(px[held_idx])
            ranked.append(
                (float((s.argmax(axis=1) == py[held_idx]).mean()), -float(((s - held_targets) ** 2).mean()), p.lam, p)
            )
        acc, _, lam, best = max(ranked, key=lambda r: r[:3])
        out[int(shots)] = {
            "prec@1": float((best.predict(tx) == ty).mean()),
            "lam": lam,
            "heldout_prec@1": acc,
            "num_train": int(len(train_idx)),
            "num_heldout": int(len(held_idx)),
            "num_test": int(len(ty)),
        }
    return out


@torch.no_grad()
def extract_features(
    model: torch.nn.Module, loader: Iterable, device: "str | torch.device" = "cpu"
) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """Frozen pre-logit features of ``model`` (a :class:`harness.models.Classifier`: its
    :meth:`~harness.models.Classifier.pre_logits`, the pooled backbone output; the head is not used) in eval mode,
    in float32, the model's training mode restored afterwards.

    Args:
        model: a :class:`harness.models.Classifier` (anything with ``pre_logits(x) -> [B, D]``).
        loader: ``(x [B, 3, H, W], y [B], index [B])`` batches, images normalised as the harness's loaders do.
        device: where the model runs.

    Returns:
        ``(features [N, D] float32, labels [N] int64, index [N] int64)`` in the loader's order.

    Raises:
        TypeError: a model without ``pre_logits``.
        ValueError: an empty loader.
    """
    if not callable(getattr(model, "pre_logits", None)):
        raise TypeError(
            f"{type(model).__name__} has no pre_logits(x): pass a harness.models.Classifier "
            "(harness.sources.load_source loads one from any source)"
        )
    was_training = model.training
    model.eval()
    feats, labels, index = [], [], []
    try:
        for x, y, idx in loader:
            feats.append(model.pre_logits(x.to(device)).float().cpu().numpy())
            labels.append(np.asarray(y, dtype=np.int64))
            index.append(np.asarray(idx, dtype=np.int64))
    finally:
        model.train(was_training)
    if not feats:
        raise ValueError("the loader gave no examples: few-shot evaluation needs a non-empty split")
    return np.concatenate(feats), np.concatenate(labels), np.concatenate(index)
