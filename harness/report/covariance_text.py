"""The sentences of a report's covariance analysis (paper Sec. 4.1), for its Markdown and HTML: whether Σ̄ is
tempered (Table 4's caption), Figure 2's ranks beside the baseline of the mean logits, which of the top pairs people
are known to confuse, and the Mantel tests of Σ against the label-noise transition. Numbers arrive computed
(:func:`harness.runs.covariance_analysis`, :mod:`harness.uncertainty.covariance`).
"""

from __future__ import annotations

from typing import Optional


def _tempered_text(cov: dict) -> str:
    """Whether Σ̄ is divided by τ² (tempered) or is the latent noise covariance of the logits."""
    tau = cov.get("temperature")
    tau_text = f"τ = {tau:.3g}" if tau is not None else "τ"
    if cov.get("tempered"):
        return f"Σ is tempered: divided by τ² ({tau_text}), the covariance of the logits the softmax sees."
    return (
        f"Σ is not tempered: the latent noise covariance of the logits before the division by the temperature "
        f"({tau_text}; the softmax sees Σ/τ²). Correlations do not depend on τ."
    )


def _transition_text(cov: Optional[dict], names: "list[str]") -> str:
    """Whether the model's pairwise noise follows the label-noise transition: two-sided Mantel tests
    (class labels permuted; :func:`harness.uncertainty.covariance.transition_test`), the primary statistic
    first, the finding worded from the sign of its ρ."""
    test = (cov or {}).get("transition_test")
    if not test or "correlation" not in test:
        return ""
    primary = test.get("primary", "correlation")
    corr, var, absc = test["correlation"], test["var_diff"], test.get("abs_correlation")
    top = sorted(test["pairs"], key=lambda p: -p["transition"])[:4]
    by_corr = sorted(test["pairs"], key=lambda p: -p["correlation"])
    rank = {(p["a"], p["b"]): i + 1 for i, p in enumerate(by_corr)}
    p_text = lambda r: f"two-sided Mantel p = {r['p_value']:.4f}"  # noqa: E731
    if corr["p_value"] < 0.05:
        finding = (
            " On these numbers, pairs whose labels the noise exchanges more often share noise in Σ (their "
            "utilities move together, ρ > 0)."
            if corr["rho"] > 0
            else " On these numbers, pairs whose labels the noise exchanges more often get noise that moves their "
            "utilities apart (ρ < 0)."
        )
    else:
        finding = " On these numbers there is no detectable association at the 5% level."
    return (
        f"Does Σ follow the label noise? Over the {test['n_pairs']} class pairs, the primary statistic ({primary}): "
        "Spearman ρ between the noise's pair mass T_ab + T_ba (T[c, j] = P(noisy label j | clean class c), "
        "measured on the training images) and the het model's signed mean correlation of u_a and u_b over the "
        f"evaluation images of classes a and b is ρ = {corr['rho']:+.3f} ({p_text(corr)}; class labels permuted, "
        f"{test['n_resamples']} permutations). Secondary: Var(u_a − u_b) ρ = {var['rho']:+.3f} ({p_text(var)})"
        + (f"; mean |correlation| ρ = {absc['rho']:+.3f} ({p_text(absc)})" if absc else "")
        + ". The pairs with the most transition mass: "
        + ", ".join(
            f"{names[p['a']]}/{names[p['b']]} ({100 * p['transition']:.1f}%, correlation rank "
            f"{rank[(p['a'], p['b'])]} of {test['n_pairs']})"
            for p in top
        )
        + "."
        + finding
        + " Whether this is label noise or visual similarity is what conditions that move the noise onto other "
        "classes decide (see the Σ section where the experiment has them)."
    )


def _pairs_text(cov: Optional[dict], confusable: "list[list[str]]", names: "Optional[list[str]]" = None) -> str:
    """Which of the top covariance pairs are pairs people are known to confuse, and the transition test."""
    trans = _transition_text(cov, names or [])
    if not cov or not confusable:
        return trans
    known = {frozenset(p) for p in confusable}
    top = [(p["class_a"], p["class_b"]) for p in cov["top_pairs"][:5]]
    hits = [f"{a}/{b}" for a, b in top if frozenset((a, b)) in known]
    return (
        f"Of the top 5 covariance pairs ({', '.join(f'{a}/{b}' for a, b in top)}), {len(hits)} "
        f"{'is' if len(hits) == 1 else 'are'} among the pairs people are known to confuse "
        f"({', '.join('/'.join(p) for p in confusable)})"
        + (f": {', '.join(hits)}." if hits else ".")
        + (" " + trans if trans else "")
    )


def _cov_text(cov: Optional[dict]) -> str:
    if not cov or not cov.get("ranks"):
        return ""
    return (
        f"Figure 2: over the {cov['num_het_right_hom_wrong']} examples the het model ({cov['het_run']}) gets "
        f"right and the hom model ({cov['hom_run']}) wrong, the classes j other than the true class c are ranked "
        "by |Σ_cj(x)| of that example's own covariance Σ(x) (per example, not the average Σ̄ of the table; "
        "ranks do not depend on τ). The hom prediction is the class with the largest "
        f"|covariance| with the true class in {100 * cov['share_rank_1']:.1f}% of cases (uniform: "
        f"{100 * cov['uniform_share_rank_1']:.1f}%); mean rank {cov['mean_rank']:.2f} of "
        f"{cov['num_classes'] - 1} (uniform: {cov['uniform_mean_rank']:.2f})." + _mean_rank_text(cov)
    )


def _mean_rank_text(cov: dict) -> str:
    """The Figure 2 baseline: the same ranks from the mean logits μ(x) alone."""
    if "mean_logit_share_rank_1" not in cov:
        return ""
    return (
        " Baseline without the covariance: ranked by the het model's mean logits μ_j(x) instead, the hom "
        f"prediction is first in {100 * cov['mean_logit_share_rank_1']:.1f}% of cases (mean rank "
        f"{cov['mean_logit_mean_rank']:.2f}); "
        + (
            "the covariance ranks it first more often than μ alone."
            if cov["share_rank_1"] > cov["mean_logit_share_rank_1"]
            else "the covariance does not rank it first more often than μ alone."
        )
    )
