"""Uncertainty scores, out-of-distribution detection and selective prediction, from predictions.

Scores are *uncertainties*: higher means "less sure, more likely out of distribution". For N
examples and K classes, from log-probabilities ``[N, K]`` (rows normalised):

- ``one_minus_max_prob``: 1 - max_k p_k (the maximum softmax probability baseline, Hendrycks & Gimpel, ICLR
  2017, negated);
- ``entropy``: predictive entropy H[p̄] = -Σ_k p̄_k log p̄_k, in nats;
- ``mutual_information``: H[p̄] - E[H[p]], the expectation over the model's components: the
  members of a deep ensemble (entropy of the mean minus mean member entropy) or the Monte Carlo
  samples of a heteroscedastic head (entropy of the MC-averaged probability minus the mean entropy
  of the per-sample softmaxes). Depeweg et al. (ICML 2018), Eq. 13; Malinin & Gales (NeurIPS
  2018), Sec. 2. It is >= 0 (entropy is concave) and 0 when all components agree.

OOD detection (in-distribution vs OOD split, by one score), with scikit-learn's ranking metrics:

- AUROC: ``roc_auc_score`` with OOD as the positive class (ties count one half);
- AUPR-out: ``average_precision_score`` with OOD positive, scored by the uncertainty;
  AUPR-in: in-distribution positive, scored by the negated uncertainty (Hendrycks & Gimpel 2017);
- FPR at 95% TPR: in-distribution as the positive class kept below a threshold on the uncertainty;
  at the first threshold (``roc_curve``, ties grouped) where at least 95% of in-distribution examples
  are kept, the share of OOD examples also kept (Liang et al., ICLR 2018, *ODIN*, Sec. 4.2).

Selective prediction (Geifman & El-Yaniv, NeurIPS 2017; AURC as in Geifman, Uziel & El-Yaniv, ICLR
2019): examples are accepted in order of decreasing confidence; at coverage k/N the selective risk
is the error rate among the k accepted. Examples with equal confidence are accepted in random order,
taken in expectation: within a group of tied examples the expected number of errors grows linearly,
so the curve does not depend on how a sort breaks ties. AURC is the mean of the risk over the N
coverages k/N, k = 1..N (the area under the risk-coverage curve as a right Riemann sum).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from harness.uncertainty.checks import as_float64, check_correct, check_log_prob_matrix

SCORES = ("one_minus_max_prob", "entropy", "mutual_information")
TPR_LEVEL = 0.95


#: round-off allowed when an entropy is checked against [0, log K] (nats)
ENTROPY_TOL = 1e-6


def entropy(log_probs: Any) -> np.ndarray:
    """Predictive entropy ``[N]`` in nats of log-probabilities ``[N, K]`` (0 log 0 = 0).

    Raises:
        ValueError: ``log_probs`` not ``[N, K]`` normalised log-probabilities with N > 0 (raw logits, NaN; the rule
            of the metrics, :func:`harness.uncertainty.checks.check_log_prob_matrix`).
    """
    return _entropy(check_log_prob_matrix(log_probs))


def _entropy(lp: np.ndarray) -> np.ndarray:
    p = np.exp(lp)
    return -np.where(p > 0, p * lp, 0.0).sum(axis=1)


def expected_entropy(component_log_probs: Any) -> np.ndarray:
    """E[H] ``[N]``: the mean entropy of M components' log-probabilities ``[M, N, K]`` (members of
    an ensemble, or MC samples ``[S, N, K]``).

    Raises:
        ValueError: not ``[M, N, K]`` with M > 0, or a component that is not normalised log-probabilities.
    """
    lp = as_float64(component_log_probs, "component_log_probs")
    if lp.ndim != 3 or lp.shape[0] == 0:
        raise ValueError(f"expected component log-probabilities [M, N, K] with M > 0, got shape {lp.shape}")
    return np.mean([entropy(c) for c in lp], axis=0)


def mutual_information(mean_log_probs: Any, mean_entropy: Any) -> np.ndarray:
    """H[p̄] - E[H] ``[N]`` in nats, clipped at 0 against round-off (Depeweg et al. 2018, Eq. 13).

    Args:
        mean_log_probs: ``[N, K]`` log of the averaged probability p̄ (ensemble or MC average).
        mean_entropy: ``[N]`` the mean entropy of the components (:func:`expected_entropy`), each in [0, log K].

    Raises:
        ValueError: ``mean_log_probs`` not normalised log-probabilities (:func:`entropy`), or ``mean_entropy`` of
            another shape or with values outside [0, log K] (NaN too).
    """
    return _mutual_information(check_log_prob_matrix(mean_log_probs, "mean_log_probs"), mean_entropy)


def _mutual_information(lp: np.ndarray, mean_entropy: Any) -> np.ndarray:
    h, k = _entropy(lp), lp.shape[1]
    e = as_float64(mean_entropy, "mean_entropy")
    if e.shape != h.shape:
        raise ValueError(
            f"mean_entropy of shape {e.shape} for {h.shape[0]} examples: give one mean entropy per row ([N])"
        )
    high = float(np.log(k))
    bad = ~((e >= -ENTROPY_TOL) & (e <= high + ENTROPY_TOL))  # NaN is bad too
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"mean_entropy must be entropies in nats in [0, log K] = [0, {high:.4g}] (K = {k}), but {int(bad.sum())} "
            f"of {len(e)} are not (first: [{i}] = {e[i]}); pass expected_entropy(component_log_probs) of the "
            "components' normalised log-probabilities"
        )
    return np.maximum(h - e, 0.0)


def uncertainty_scores(log_probs: Any, mean_entropy: Optional[Any] = None) -> "dict[str, np.ndarray]":
    """``one_minus_max_prob``, ``entropy`` and, when the components' mean entropy is given,
    ``mutual_information``; each ``[N]``, higher = more uncertain.

    Raises:
        ValueError: as :func:`entropy` and :func:`mutual_information`.
    """
    lp = check_log_prob_matrix(log_probs)
    out = {"one_minus_max_prob": 1.0 - np.exp(lp.max(axis=1)), "entropy": _entropy(lp)}
    if mean_entropy is not None:
        out["mutual_information"] = _mutual_information(lp, mean_entropy)
    return out


def _scores(score_in: Any, score_out: Any) -> "tuple[np.ndarray, np.ndarray]":
    a, b = as_float64(score_in, "score_in"), as_float64(score_out, "score_out")
    for name, x in (("score_in", a), ("score_out", b)):
        if x.ndim != 1:
            raise ValueError(
                f"{name} must be a 1-D array of per-example uncertainties [N], got shape {x.shape}; pass one score "
                "(e.g. uncertainty_scores(log_probs)['entropy']), not the log-probabilities or a stack of scores"
            )
    if not len(a) or not len(b):
        raise ValueError(
            f"OOD detection needs in-distribution and OOD examples, got {len(a)} and {len(b)}: give a "
            "non-empty OOD split"
        )
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("OOD scores must be finite (NaN or inf in the predictions' scores)")
    return a, b


def fpr_at_tpr(score_in: Any, score_out: Any, level: float = TPR_LEVEL) -> float:
    """Share of OOD examples kept when at least ``level`` of the in-distribution examples are kept,
    keeping examples whose uncertainty is at most a threshold (the first ROC point, ties grouped, with
    TPR >= level). Liang et al. (2018), Sec. 4.2.

    Raises:
        ValueError: ``level`` not a number in (0, 1] (a TPR such as 0.95), either side empty, or a non-finite score.
    """
    from sklearn.metrics import roc_curve

    if isinstance(level, bool) or not isinstance(level, (int, float, np.integer, np.floating)) or not 0 < level <= 1:
        raise ValueError(
            f"level must be a true-positive rate in (0, 1], got level={level!r}; e.g. 0.95 for the FPR at 95% TPR"
        )
    a, b = _scores(score_in, score_out)
    is_in = np.r_[np.ones(len(a)), np.zeros(len(b))]
    fpr, tpr, _ = roc_curve(is_in, -np.r_[a, b], drop_intermediate=False)
    return float(fpr[np.searchsorted(tpr, level - 1e-12, side="left")])


def ood_metrics(score_in: Any, score_out: Any) -> "dict[str, float]":
    """AUROC, AUPR-in, AUPR-out and FPR at 95% TPR of one uncertainty score.

    Args:
        score_in: ``[N]`` uncertainties of in-distribution examples.
        score_out: ``[M]`` uncertainties of OOD examples.

    Returns:
        ``auroc``, ``aupr_in``, ``aupr_out``, ``fpr95`` (all in [0, 1]; higher is better except FPR).

    Raises:
        ValueError: either side empty or not 1-D (naming it and its shape), or a non-finite score.
    """
    from sklearn.metrics import average_precision_score, roc_auc_score

    a, b = _scores(score_in, score_out)
    is_out = np.r_[np.zeros(len(a)), np.ones(len(b))]
    s = np.r_[a, b]
    return {
        "auroc": float(roc_auc_score(is_out, s)),
        "aupr_in": float(average_precision_score(1 - is_out, -s)),
        "aupr_out": float(average_precision_score(is_out, s)),
        "fpr95": fpr_at_tpr(a, b),
    }


def risk_coverage(confidence: Any, correct: Any) -> "tuple[np.ndarray, np.ndarray]":
    """Risk-coverage curve of selective prediction by ``confidence`` (higher = accepted first).

    Args:
        confidence: ``[N]`` (e.g. the maximum probability).
        correct: ``[N]`` 0/1 or bool, whether each prediction is right.

    Returns:
        ``(coverage, risk)``, each ``[N]``: coverage k/N and the expected error rate among the k
        most confident examples, ties accepted in random order (see the module docstring).

    Raises:
        ValueError: empty input, lengths that differ, non-finite confidences, or ``correct`` values other than 0/1
            (the rule of the metrics, :func:`harness.uncertainty.checks.check_correct`).
    """
    c = as_float64(confidence, "confidence").ravel()
    err = 1.0 - check_correct(correct).ravel()
    if not len(c) or len(c) != len(err):
        raise ValueError(f"risk-coverage needs one correctness value per confidence, got {len(c)} and {len(err)}")
    if not np.isfinite(c).all():
        raise ValueError("confidences must be finite")
    order = np.argsort(-c, kind="stable")
    c, err = c[order], err[order]
    n = len(c)
    ends = np.r_[np.flatnonzero(np.diff(c) != 0), n - 1]  # last position of each tie group
    starts = np.r_[0, ends[:-1] + 1]
    cum = np.cumsum(err)
    errors_before = np.r_[0.0, cum[ends[:-1]]]
    rate = (cum[ends] - errors_before) / (ends - starts + 1)  # error share within each group
    group = np.repeat(np.arange(len(ends)), ends - starts + 1)
    k = np.arange(1, n + 1)
    expected_errors = errors_before[group] + (k - starts[group]) * rate[group]
    return k / n, expected_errors / k


def aurc(confidence: Any, correct: Any) -> float:
    """Area under the risk-coverage curve: the mean selective risk over coverages k/N, k = 1..N
    (Geifman, Uziel & El-Yaniv 2019). Lower is better; an ideal ordering gives
    e + (1 - e) log(1 - e) for error rate e.

    Raises:
        ValueError: as :func:`risk_coverage`.
    """
    return float(risk_coverage(confidence, correct)[1].mean())
