"""Post-hoc calibrators beside temperature scaling, in one registry (:data:`CALIBRATORS`): each is fitted on the
held-out split's predictions and returns a map ``Predictions -> Predictions`` applied to the evaluation split.

| name | map | source | implementation |
|---|---|---|---|
| ``temperature`` | softmax(z / T) | Guo et al., ICML 2017, Sec. 4.2 | :func:`harness.uncertainty.calibration.fit_temperature` |
| ``vector`` | softmax(w ⊙ log p + b) | Guo et al. 2017, Sec. 4.2 ("vector scaling") | netcal ``scaling.LogisticCalibration`` (multiclass) |
| ``dirichlet`` | softmax(W log p + b), ODIR | Kull et al., NeurIPS 2019, Sec. 3-4 | :func:`fit_dirichlet` (scipy trust-ncg) |
| ``histogram`` | one score: bin frequency | Zadrozny & Elkan, ICML 2001 | netcal ``binning.HistogramBinning`` |
| ``isotonic`` | one score: isotonic fit | Zadrozny & Elkan, KDD 2002 | netcal ``binning.IsotonicRegression`` |
| ``bbq`` | one score: Bayesian binning | Naeini et al., AAAI 2015 | netcal ``binning.BBQ`` |
| ``beta`` | one score: sigmoid(a log s − b log(1 − s) + c) | Kull et al., AISTATS 2017 | netcal ``scaling.BetaCalibration`` |

**The multiclass rule of the one-score calibrators** (``histogram``, ``isotonic``, ``bbq``, ``beta``): one-vs-rest, as
netcal's binning classes and scikit-learn's ``CalibratedClassifierCV`` do (Zadrozny & Elkan 2002): for each class k a
binary calibrator is fitted to (p_k, 1[y = k]) on the held-out split; on new predictions the K calibrated scores
s_k are clipped below at :data:`EPS` and divided by their row sum, q_k = max(s_k, EPS) / Σ_j max(s_j, EPS). Rows then
sum to 1 and every q_k >= EPS / K, so the NLL is finite: at most log(K / EPS) nats per example (13.8 + log K). Before
the clip this is netcal's own multiclass output (``transform`` of the multiclass fit, the scores divided by their
sum) for histogram binning, isotonic regression and BBQ; a class that never occurs in the held-out split gets the
score 0 (netcal leaves its column 0 too). netcal's multiclass *beta* calibration is another model (one multinomial
fit over all classes' beta features); here beta is one-vs-rest like the other three. Histogram binning, isotonic
regression and BBQ give a score of exactly 0 to a bin without positives, so their NLL depends on :data:`EPS`.

**What each calibrator can change.** ``temperature`` keeps every example's class order (one positive scale for all
logits): top-1 never changes; NLL, ECE, Brier and the confidences' ranking over examples do. ``vector`` and
``dirichlet`` change the logits class by class: top-1 can change too. The one-vs-rest calibrators apply a different
map to each class and renormalise, so top-1 can change as well (histogram binning and BBQ map many scores to one
value, which also makes ties: top-1 then takes the first of the tied classes); isotonic regression and beta
calibration (netcal keeps a, b >= 0) are monotone per class, histogram binning and BBQ need not be.

Single-label (softmax) predictions only. netcal is an optional dependency (the ``calibrate`` extra): it is imported
when a netcal calibrator is fitted, never by importing this module.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import numpy as np

import harness.uncertainty.metrics as M
from harness.uncertainty.predictions import Predictions

#: the floor of a one-vs-rest calibrated score before the row is renormalised (module docstring)
EPS = 1e-6
#: λ = μ of Dirichlet calibration's ODIR term, chosen among these by :data:`DIRICHLET_FOLDS`-fold cross-validation
DIRICHLET_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1e3, 1e4)
DIRICHLET_FOLDS = 5
#: what ``require`` names when netcal is missing
FEATURE = "post-hoc calibrators (harness report --calibrators)"

Apply = Callable[[Predictions], Predictions]


@dataclass(frozen=True)
class Calibrator:
    """One entry of :data:`CALIBRATORS`.

    Attributes:
        name: the name ``--calibrators`` takes.
        fit: ``fit(heldout) -> apply``: fitted on held-out predictions, ``apply(preds)`` returns calibrated ones.
        rule: ``scaling`` (a map of the whole logit vector) or ``one-vs-rest`` (module docstring).
        can_change_top1: whether the map can change an example's top-1 class.
        netcal: the netcal class it uses (None: none).
        source: the paper.
    """

    name: str
    fit: Callable[[Predictions], Apply]
    rule: str
    can_change_top1: bool
    netcal: Optional[str]
    source: str


def _check(preds: Predictions, what: str, num_classes: Optional[int] = None) -> np.ndarray:
    """The integer labels ``[N]`` of single-label ``preds``.

    Raises:
        ValueError: sigmoid-link predictions, no examples, a class count other than ``num_classes``, labels out of
            range.
    """
    if preds.multilabel:
        raise ValueError(
            f"{_named(what, preds)} are multi-label (sigmoid link): the calibrators take single-label (softmax) "
            "predictions; for multi-label runs use temperature scaling (harness report does)"
        )
    n, k = preds.logits.shape
    if n == 0:
        raise ValueError(f"{_named(what, preds)} hold no examples: a calibrator needs held-out predictions")
    if num_classes is not None and k != num_classes:
        raise ValueError(
            f"{_named(what, preds)} have {k} classes, the held-out predictions the calibrator was fitted on "
            f"{num_classes}: apply it to predictions of the same model"
        )
    y = np.asarray(preds.targets)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or (n and (y.min() < 0 or y.max() >= k)):
        raise ValueError(f"{_named(what, preds)} need integer labels in [0, {k}), one per example")
    return y.astype(np.int64)


def _named(what: str, preds: Predictions) -> str:
    """How a message names ``preds``: ``what`` (``"held-out predictions"``) and their ``source`` where they have one."""
    return f"{what} ({preds.source})" if preds.source else what


def _output(preds: Predictions, log_q: np.ndarray, name: str) -> Predictions:
    """``preds`` with logits ``log q`` ``[N, K]`` (normalised log-probabilities) and the calibrator in ``source``."""
    return replace(preds, logits=log_q, link="softmax", source=f"{preds.source} ({name})")


def renormalise(scores: np.ndarray, eps: float = EPS) -> np.ndarray:
    """The one-vs-rest rule's last step: log q ``[N, K]`` with q_k = max(s_k, eps) / Σ_j max(s_j, eps), from
    per-class calibrated scores ``scores`` ``[N, K]`` in [0, 1] (module docstring). Rows of q sum to 1 and
    q_k >= eps / K."""
    s = np.maximum(np.asarray(scores, dtype=np.float64), eps)
    return np.log(s) - np.log(s.sum(axis=1, keepdims=True))


@contextlib.contextmanager
def _quiet():
    """netcal's progress bars (BBQ), prints and warnings kept out of the caller's output."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield


def _netcal(module: str, cls: str) -> type:
    from harness.extras import require

    return getattr(require(f"netcal.{module}", FEATURE), cls)


def one_vs_rest(
    make: Callable[[], object], heldout: Predictions, **fit_kwargs: object
) -> Callable[[np.ndarray], np.ndarray]:
    """Fit one binary netcal calibrator per class to (p_k, 1[y = k]) of ``heldout`` (``make()`` builds one;
    ``fit_kwargs`` go to its ``fit``) and return ``scores(p)``: ``[N, K]`` probabilities -> ``[N, K]`` per-class calibrated scores in [0, 1], before the
    renormalisation (:func:`renormalise`). A class absent from ``heldout`` (or the only one present) gets the constant
    score 0 (or 1).

    Raises:
        ValueError: as :func:`_check`.
    """
    y = _check(heldout, "held-out predictions")
    p = np.exp(heldout.log_probs())
    models = []
    with _quiet():
        for k in range(p.shape[1]):
            target = (y == k).astype(np.int64)
            if target.min() == target.max():
                models.append(float(target[0]))
                continue
            m = make()
            m.fit(p[:, k], target, **fit_kwargs)
            models.append(m)

    def scores(probs: np.ndarray) -> np.ndarray:
        out = np.empty_like(probs, dtype=np.float64)
        with _quiet():
            for k, m in enumerate(models):
                out[:, k] = m if isinstance(m, float) else np.reshape(m.transform(probs[:, k]), -1)
        return np.clip(out, 0.0, 1.0)

    return scores


def _fit_one_vs_rest(name: str, module: str, cls: str, **fit_kwargs: object) -> Callable[[Predictions], Apply]:
    def fit(heldout: Predictions) -> Apply:
        klass = _netcal(module, cls)
        scores = one_vs_rest(klass, heldout, **fit_kwargs)
        k = heldout.logits.shape[1]

        def apply(preds: Predictions) -> Predictions:
            _check(preds, "predictions", k)
            return _output(preds, renormalise(scores(np.exp(preds.log_probs()))), name)

        return apply

    fit.__doc__ = f"One-vs-rest {cls} (netcal.{module}) fitted on held-out predictions (module docstring)."
    return fit


def fit_temperature_map(heldout: Predictions) -> Apply:
    """Temperature scaling (:func:`harness.uncertainty.calibration.fit_temperature`) as a calibrator."""
    from harness.uncertainty.calibration import fit_temperature

    _check(heldout, "held-out predictions")
    t = fit_temperature(heldout)
    k = heldout.logits.shape[1]

    def apply(preds: Predictions) -> Predictions:
        _check(preds, "predictions", k)
        return _output(preds, M.log_softmax(preds.logits / t), f"temperature T={t:.3f}")

    return apply


def fit_vector_scaling(heldout: Predictions) -> Apply:
    """Vector scaling, softmax(w ⊙ log p + b) with w, b ``[K]`` (Guo et al., ICML 2017, Sec. 4.2): netcal's
    ``LogisticCalibration(method="mle")``, whose multiclass model is exactly this, fitted by maximum likelihood
    (scipy ``minimize`` on netcal's side; finite-difference gradients, so the fit costs O(K) NLL evaluations a step:
    seconds at K = 10, slow at K in the thousands).

    Raises:
        ValueError: as :func:`_check`; fewer than 2 classes.
    """
    y = _check(heldout, "held-out predictions")
    k = heldout.logits.shape[1]
    if k < 2:
        raise ValueError("vector scaling needs at least 2 classes")
    model = _netcal("scaling", "LogisticCalibration")(method="mle")
    with _quiet():
        model.fit(np.exp(heldout.log_probs()), y, tensorboard=False)

    def apply(preds: Predictions) -> Predictions:
        _check(preds, "predictions", k)
        with _quiet():
            q = np.asarray(model.transform(np.exp(preds.log_probs())), dtype=np.float64)
        log_q = np.log(np.maximum(q, np.finfo(np.float64).tiny))  # an underflow to 0, not a clip of real mass
        return _output(preds, M.log_softmax(log_q), "vector scaling")

    return apply


def _unpack(theta: np.ndarray, k: int) -> "tuple[np.ndarray, np.ndarray]":
    return theta[: k * k].reshape(k, k), theta[k * k :]


def _dirichlet_loss(theta: np.ndarray, x: np.ndarray, y: np.ndarray, lam: float):
    """(loss, gradient) of Dirichlet calibration with ODIR at ``theta`` = (W ``[K, K]`` row-major, b ``[K]``):
    mean NLL of softmax(x Wᵀ + b) + λ/(K(K−1)) Σ_{i≠j} W_ij² + μ/K Σ_j b_j², μ = λ (Kull et al. 2019, Sec. 4)."""
    n, k = x.shape
    w, b = _unpack(theta, k)
    lp = M.log_softmax(x @ w.T + b)
    off = w - np.diag(np.diag(w))
    loss = -lp[np.arange(n), y].mean() + lam / (k * (k - 1)) * (off**2).sum() + lam / k * (b**2).sum()
    g = np.exp(lp)
    g[np.arange(n), y] -= 1.0
    g /= n
    grad_w = g.T @ x + 2 * lam / (k * (k - 1)) * off
    return float(loss), np.concatenate([grad_w.ravel(), g.sum(0) + 2 * lam / k * b])


def _dirichlet_hessp(theta: np.ndarray, v: np.ndarray, x: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """The Hessian of :func:`_dirichlet_loss` at ``theta`` times ``v``: the softmax's Jacobian (diag(p) − p pᵀ)
    applied to the logits' change x dWᵀ + db, back through the linear map, plus the penalty's constant Hessian."""
    n, k = x.shape
    w, b = _unpack(theta, k)
    dw, db = _unpack(v, k)
    p = np.exp(M.log_softmax(x @ w.T + b))
    pd = p * (x @ dw.T + db)
    g = (pd - p * pd.sum(axis=1, keepdims=True)) / n
    off = dw - np.diag(np.diag(dw))
    return np.concatenate([(g.T @ x + 2 * lam / (k * (k - 1)) * off).ravel(), g.sum(0) + 2 * lam / k * db])


def _dirichlet_fit(x: np.ndarray, y: np.ndarray, lam: float) -> np.ndarray:
    """θ = (W ``[K, K]`` row-major, b ``[K]``) minimising :func:`_dirichlet_loss` from the identity map (W = I,
    b = 0): scipy's trust-region Newton-CG (``trust-ncg``) with the exact gradient and Hessian-vector products (the
    loss is convex), to a largest gradient entry of 1e-8."""
    from scipy.optimize import minimize

    k = x.shape[1]
    theta0 = np.concatenate([np.eye(k).ravel(), np.zeros(k)])
    return minimize(
        _dirichlet_loss,
        theta0,
        args=(x, y, lam),
        jac=True,
        hessp=_dirichlet_hessp,
        method="trust-ncg",
        options={"gtol": 1e-8, "maxiter": 1000},
    ).x


def _dirichlet_cv(x: np.ndarray, y: np.ndarray, grid: Sequence[float], folds: int) -> float:
    """The λ of ``grid`` with the lowest ``folds``-fold cross-validated NLL (folds from a permutation seeded 0; a tie
    goes to the larger λ)."""
    part = np.random.default_rng(0).permutation(len(y)) % folds
    k = x.shape[1]
    nll = dict.fromkeys(grid, 0.0)
    for f in range(folds):
        fit, held = part != f, part == f
        for lam in grid:
            w, b = _unpack(_dirichlet_fit(x[fit], y[fit], lam), k)
            lp = M.log_softmax(x[held] @ w.T + b)
            nll[lam] -= lp[np.arange(len(lp)), y[held]].sum()
    return min(grid, key=lambda lam: (nll[lam], -lam))


def fit_dirichlet(heldout: Predictions, reg: Optional[float] = None) -> Apply:
    """Dirichlet calibration with off-diagonal and intercept regularisation (ODIR; Kull et al., "Beyond temperature
    scaling: Obtaining well-calibrated multiclass probabilities with Dirichlet calibration", NeurIPS 2019, Sec. 3-4):
    q = softmax(W log p + b), W ``[K, K]``, b ``[K]``, minimising the mean NLL + λ/(K(K−1)) Σ_{i≠j} W_ij² + μ/K Σ_j b_j²
    (the diagonal of W is not penalised), by scipy's trust-region Newton-CG with the exact gradient and
    Hessian-vector products, from the identity map.
    λ = μ = ``reg``, or, with ``reg`` None, the value of :data:`DIRICHLET_GRID` (10^-4 ... 10^4; at its large end
    W is nearly diagonal and b nearly 0) with the lowest :data:`DIRICHLET_FOLDS`-fold cross-validated NLL on
    ``heldout`` (1e-2 below 10 examples). The paper picks λ and μ by cross-validation; tying μ = λ and this grid are
    this implementation's choices. K² + K parameters; about 3 s at K = 10, N = 360 on one CPU core.

    Raises:
        ValueError: as :func:`_check`; fewer than 2 classes; ``reg`` < 0.
    """
    y = _check(heldout, "held-out predictions")
    x = heldout.log_probs()
    k = x.shape[1]
    if k < 2:
        raise ValueError("Dirichlet calibration needs at least 2 classes")
    if reg is not None and not reg >= 0:
        raise ValueError(f"reg must be >= 0 (λ = μ of the ODIR term), got {reg}")
    folds = DIRICHLET_FOLDS if len(y) >= 2 * DIRICHLET_FOLDS else 0
    lam = reg if reg is not None else (_dirichlet_cv(x, y, DIRICHLET_GRID, folds) if folds else DIRICHLET_GRID[2])
    w, b = _unpack(_dirichlet_fit(x, y, lam), k)

    def apply(preds: Predictions) -> Predictions:
        _check(preds, "predictions", k)
        return _output(preds, M.log_softmax(preds.log_probs() @ w.T + b), f"Dirichlet λ={lam:g}")

    return apply


#: every calibrator, by the name ``harness report --calibrators`` takes
CALIBRATORS = {
    c.name: c
    for c in (
        Calibrator("temperature", fit_temperature_map, "scaling", False, None, "Guo et al., ICML 2017, Sec. 4.2"),
        Calibrator(
            "vector",
            fit_vector_scaling,
            "scaling",
            True,
            "scaling.LogisticCalibration",
            "Guo et al., ICML 2017, Sec. 4.2",
        ),
        Calibrator("dirichlet", fit_dirichlet, "scaling", True, None, "Kull et al., NeurIPS 2019"),
        Calibrator(
            "histogram",
            _fit_one_vs_rest("histogram", "binning", "HistogramBinning"),
            "one-vs-rest",
            True,
            "binning.HistogramBinning",
            "Zadrozny & Elkan, ICML 2001",
        ),
        Calibrator(
            "isotonic",
            _fit_one_vs_rest("isotonic", "binning", "IsotonicRegression"),
            "one-vs-rest",
            True,
            "binning.IsotonicRegression",
            "Zadrozny & Elkan, KDD 2002",
        ),
        Calibrator(
            "bbq",
            _fit_one_vs_rest("bbq", "binning", "BBQ"),
            "one-vs-rest",
            True,
            "binning.BBQ",
            "Naeini et al., AAAI 2015",
        ),
        Calibrator(
            "beta",
            _fit_one_vs_rest("beta", "scaling", "BetaCalibration", tensorboard=False),
            "one-vs-rest",
            True,
            "scaling.BetaCalibration",
            "Kull et al., AISTATS 2017",
        ),
    )
}


def check_names(names: "str | Sequence[str]") -> "list[str]":
    """Calibrator names from ``histogram,isotonic`` text or a list, checked before any work.

    Raises:
        ValueError: an unknown or repeated name; a netcal calibrator without netcal installed (the message names the
            install command).
    """
    from harness.extras import available, missing_message

    items = names.split(",") if isinstance(names, str) else list(names)
    out = [str(n).strip().lower() for n in items if str(n).strip()]
    unknown = [n for n in out if n not in CALIBRATORS]
    if unknown:
        raise ValueError(f"unknown calibrator(s) {', '.join(map(repr, unknown))}: use {', '.join(CALIBRATORS)}")
    if len(set(out)) != len(out):
        raise ValueError(f"a calibrator is named twice: {out}")
    if any(CALIBRATORS[n].netcal for n in out) and not available("netcal"):
        raise ValueError(missing_message("netcal", FEATURE))
    return out


def calibrate(names: Sequence[str], heldout: Predictions, preds: Predictions) -> "dict[str, Predictions]":
    """``{name: preds calibrated by the calibrator fitted on heldout}`` for each of ``names``.

    Args:
        names: :data:`CALIBRATORS` names (:func:`check_names`).
        heldout: the held-out split's predictions of the model (fitted on; single-label).
        preds: the same model's evaluation-split predictions (calibrated; single-label, same classes).

    Raises:
        ValueError: as :func:`check_names`; multi-label predictions; class counts that differ.
    """
    return {n: CALIBRATORS[n].fit(heldout)(preds) for n in check_names(names)}
