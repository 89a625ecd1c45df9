"""Deep ensembles of per-example predictions.

Predictions (:class:`harness.uncertainty.predictions.Predictions`) are what a run saves
(``predictions.npz``): logits ``[N, K]`` (for het models the log of the MC-averaged probability, or
its inverse sigmoid), targets, example indices, class names and the link. Ensembles average member
*probabilities* in log space (Lakshminarayanan et al., NeurIPS 2017; uncertainty-baselines ``baselines/jft/deep_ensemble.py``): softmax members
``log p = LSE_m log_softmax(l_m) - log M``; sigmoid members per class and outcome.

Building an ensemble folder from run folders is :func:`harness.ensemble_folder.build_ensemble`; this module only
computes.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Optional, Sequence

import numpy as np

import harness.uncertainty.metrics as M
from harness.uncertainty.predictions import Predictions

__all__ = ["average", "check_compatible", "summarize"]


def _first_difference(a: Sequence, b: Sequence) -> int:
    """Position of the first element where ``a`` and ``b`` differ (``min(len)`` if one is a prefix)."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n])) if n else np.array([], dtype=int)
    return int(diff[0]) if len(diff) else n


def _at(seq: Sequence, i: int) -> str:
    """``seq[i]`` for a message (``none`` past the end)."""
    return repr(seq[i].tolist() if hasattr(seq[i], "tolist") else seq[i]) if i < len(seq) else "none"


def evaluation_mismatch(m: Predictions, ref: Predictions, compare_link: bool = True) -> Optional[str]:
    """How ``m`` was evaluated otherwise than ``ref``: the first differing class (index and name), the link (unless
    ``compare_link`` is off), the first differing example index, or the first example whose target differs; None when
    they share the label space, link, examples and targets. The one rule of :func:`check_compatible` and the report's
    entry check (:mod:`harness.report.build`)."""
    if m.class_names != ref.class_names:
        i = _first_difference(m.class_names, ref.class_names)
        return (
            f"class {i} is {_at(m.class_names, i)} vs {_at(ref.class_names, i)} ({len(m.class_names)} vs "
            f"{len(ref.class_names)} classes; different label space)"
        )
    if compare_link and m.link != ref.link:
        return f"link {m.link!r} vs {ref.link!r}"
    if not np.array_equal(m.index, ref.index):
        i = _first_difference(m.index, ref.index)
        return (
            f"at position {i} the example index is {_at(m.index, i)} vs {_at(ref.index, i)} ({len(m.index)} "
            f"vs {len(ref.index)} evaluation examples; different evaluation data)"
        )
    if m.targets.shape != ref.targets.shape:
        return f"targets of shape {m.targets.shape} vs {ref.targets.shape} (different evaluation data or labels)"
    if not np.array_equal(m.targets, ref.targets):
        i = int(np.argmax((m.targets != ref.targets).reshape(len(ref.targets), -1).any(axis=1)))
        return (
            f"example index {int(ref.index[i])} has target {_at(m.targets, i)} vs {_at(ref.targets, i)} "
            "(different evaluation data or labels)"
        )
    return None


def check_compatible(members: Sequence[Predictions]) -> None:
    """Members must share the label space (class names, in order), link, examples and targets
    (:func:`evaluation_mismatch`).

    Raises:
        ValueError: naming the first member that differs from the first member and the first
            differing class (index and name), example index or target.
    """
    if not members:
        raise ValueError("an ensemble needs at least one member")
    ref, n = members[0], len(members)
    for i, m in enumerate(members[1:], 2):
        what = evaluation_mismatch(m, ref)
        if what:
            raise ValueError(
                f"member {_named(m, i, n)} does not match member {_named(ref, 1, n)}: {what}; ensemble only models "
                "evaluated on the same split of the same data"
            )


def _named(member: Predictions, i: int, n: int) -> str:
    """How a message names the ``i``-th of ``n`` members: its position, and its ``source`` where it has one."""
    return f"{i} of {n}" + (f" ({member.source})" if member.source else "")


def average(members: Sequence[Predictions], source: str = "ensemble") -> Predictions:
    """Ensemble predictions: members' probabilities averaged (in log space).

    softmax: logits = LSE_m log_softmax(l_m) - log M (a normalised log p̄);
    sigmoid: logits = [LSE_m log σ(l_m) - log M] - [LSE_m log σ(-l_m) - log M] = logit(p̄).
    Source: uncertainty-baselines ``log_average_softmax_probs`` / ``log_average_sigmoid_probs`` (``baselines/jft/deep_ensemble.py``).
    """
    check_compatible(members)
    log_m = math.log(len(members))
    if members[0].link == "softmax":
        logits = np.logaddexp.reduce(np.stack([m.log_probs() for m in members]), axis=0) - log_m
    else:
        pos = np.logaddexp.reduce(np.stack([M.log_sigmoid(m.logits) for m in members]), axis=0) - log_m
        neg = np.logaddexp.reduce(np.stack([M.log_sigmoid(-m.logits) for m in members]), axis=0) - log_m
        logits = pos - neg
    return replace(members[0], logits=logits, source=source)


def _mean_kl_to_ensemble(members: Sequence[Predictions], ens: Predictions) -> float:
    """Mean over members and examples of KL(p_m || p_ens) (summed over classes; Bernoulli per class
    for sigmoid members)."""
    if ens.link == "softmax":
        lq = ens.log_probs()
        return float(np.mean([(np.exp(lp) * (lp - lq)).sum(1).mean() for lp in (m.log_probs() for m in members)]))
    lq1, lq0 = M.log_sigmoid(ens.logits), M.log_sigmoid(-ens.logits)
    kls = []
    for m in members:
        lp1, lp0 = M.log_sigmoid(m.logits), M.log_sigmoid(-m.logits)
        kls.append((np.exp(lp1) * (lp1 - lq1) + np.exp(lp0) * (lp0 - lq0)).sum(1).mean())
    return float(np.mean(kls))


def summarize(members: Sequence[Predictions]) -> dict:
    """Everything the ensemble report shows (Lakshminarayanan et al., NeurIPS 2017; uncertainty-baselines ``baselines/jft/deep_ensemble.py``).

    Returns:
        ``members`` (per-member metrics), ``member_mean`` / ``member_std`` (over members),
        ``ensemble`` (metrics of the averaged probabilities), ``gibbs_ce`` (mean member NLL),
        ``ensemble_gain`` (Gibbs CE - ensemble NLL, >= 0 by Jensen), ``disagreement`` (mean over
        member pairs of the share of examples whose argmax differs), ``disagreement_over_error``
        (that divided by the ensemble's error rate) and ``mean_kl_to_ensemble``. The metrics follow
        :mod:`harness.uncertainty.metrics` (multi-label: examples without a positive label dropped); the
        label-free diagnostics (disagreement, KL) use every example.
    """
    ens = average(members)
    per = [m.metrics() for m in members]
    keys = per[0].keys()
    gibbs = float(np.mean([m.nll() for m in members]))
    ens_nll = ens.nll()
    argmax = [m.logits.argmax(1) for m in members]
    pairs = list(itertools.combinations(range(len(members)), 2))
    disagreement = float(np.mean([(argmax[i] != argmax[j]).mean() for i, j in pairs])) if pairs else 0.0
    ens_metrics = ens.metrics()
    error = 1.0 - ens_metrics.get("top1", ens_metrics.get("prec@1", 0.0))
    return {
        "size": len(members),
        "sources": [m.source for m in members],
        "members": per,
        "member_mean": {k: float(np.mean([p[k] for p in per])) for k in keys},
        "member_std": {k: float(np.std([p[k] for p in per], ddof=1)) if len(per) > 1 else 0.0 for k in keys},
        "ensemble": ens_metrics,
        "gibbs_ce": gibbs,
        "ensemble_nll": ens_nll,
        "ensemble_gain": gibbs - ens_nll,
        "disagreement": disagreement,
        "disagreement_over_error": disagreement / error if error > 0 else float("nan"),
        "mean_kl_to_ensemble": _mean_kl_to_ensemble(members, ens),
    }
