"""The crossed single-pair design of what Σ learns (``single_pair`` in an experiment file): its seeds from the power
calculation, the variance-only pilot, the analysis (which does not look at Δ before the planned seeds are in) and
its report section. The pair correlations come from :mod:`harness.experiment.sigma`'s model rows.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from harness.experiment.config import SinglePairSection


def seeds_for_power(
    sd_delta: float, effect: float, margin: float, alpha: float = 0.05, power: float = 0.8, max_seeds: int = 64
) -> int:
    """The fewest seeds per arm n (n >= 3) at which, with per-seed Δ of standard deviation ``sd_delta``, the
    two-sided paired t test at ``alpha`` detects |Δ| = ``effect`` with probability >= ``power`` and the
    equivalence test (TOST, margin ``margin``) succeeds at Δ = 0 with probability >= ``power``
    (:func:`harness.uncertainty.power.paired_t_power`, :func:`~harness.uncertainty.power.tost_power`);
    ``max_seeds`` + 1 when no n up to ``max_seeds`` reaches it."""
    from harness.uncertainty.power import paired_t_power, tost_power

    for n in range(3, max_seeds + 1):
        if paired_t_power(sd_delta, n, effect, alpha) >= power and tost_power(sd_delta, n, margin, alpha) >= power:
            return n
    return max_seeds + 1


def single_pair_plan(design: SinglePairSection, sensitivity: "Optional[dict[str, float]]" = None) -> dict:
    """The power calculation of the crossed single-pair design.

    Δ = [s_1(D1) − s_1(D2)] − [s_2(D1) − s_2(D2)] for seed-paired runs of the two arms, s_k a model's mean
    signed correlation of u_a, u_b on pair k. Its four terms come from four runs; taken as independent with
    the per-pair seed standard deviation σ (the largest of ``design.spread``, measured in the conditions
    ``design.spread_from``), SD(Δ) = 2σ. Returns ``{"sd_pair", "sd_delta", "seeds", "t_power", "tost_power"}``
    at the seeds :func:`seeds_for_power` gives, and under ``"sensitivity"`` the same powers at those seeds for
    each spread of ``sensitivity`` (name -> σ), e.g. the clean-label condition's."""
    from harness.uncertainty.power import paired_t_power, tost_power

    if not design.spread:
        raise ValueError("single_pair.spread is empty: record the per-pair seed spread of single_pair.spread_from")
    sd_pair = max(design.spread.values())
    sd_delta = 2.0 * sd_pair
    n = seeds_for_power(sd_delta, design.effect, design.margin, design.alpha, design.power)
    out = {
        "sd_pair": sd_pair,
        "sd_delta": sd_delta,
        "seeds": n,
        "t_power": paired_t_power(sd_delta, n, design.effect, design.alpha),
        "tost_power": tost_power(sd_delta, n, design.margin, design.alpha),
    }
    out["sensitivity"] = {
        name: {
            "sd_pair": sd,
            "t_power": paired_t_power(2 * sd, n, design.effect, design.alpha),
            "tost_power": tost_power(2 * sd, n, design.margin, design.alpha),
        }
        for name, sd in (sensitivity or {}).items()
    }
    return out


def pilot_seeds(deltas: "list[float]", design: SinglePairSection) -> int:
    """The seeds per arm after the internal pilot (variance only): from the sample standard deviation of the
    first ``design.pilot_seeds`` per-seed Δ (never their mean), the seeds :func:`seeds_for_power` needs,
    no fewer than ``design.planned_seeds`` and no more than ``design.max_seeds``.
    Source: Wittes & Brittain 1990, "The role of internal pilot studies in increasing the efficiency of
    clinical trials", Stat. Med. 9(1-2):65-72."""
    if len(deltas) < max(2, design.pilot_seeds):
        raise ValueError(f"the pilot needs {design.pilot_seeds} seed-paired Δ, got {len(deltas)}")
    sd = float(np.std(np.asarray(deltas[: design.pilot_seeds], dtype=float), ddof=1))
    need = seeds_for_power(sd, design.effect, design.margin, design.alpha, design.power, design.max_seeds)
    return int(min(design.max_seeds, max(design.planned_seeds, need)))


def _pair_value(row: dict, a: int, b: int, column: int) -> float:
    a, b = min(a, b), max(a, b)
    v = next(p[column] for p in row["pairs"] if p[0] == a and p[1] == b)
    return float(np.log(v)) if column == 2 else float(v)


def single_pair_analysis(rows: "list[dict]", design: SinglePairSection, class_names: "list[str]") -> dict:
    """The crossed single-pair design's analysis (pre-registered in the experiment file, ``single_pair``).

    Per het model of arm D1 or D2 (rows of :func:`model_rows` whose group starts with the arm's name): s_p, the
    mean signed correlation of u_a, u_b of pair p over the test images of its two classes (primary), and the mean
    log Var(u_a − u_b) (secondary). Per seed present in both arms, Δ = [s_1(D1) − s_1(D2)] − [s_2(D1) − s_2(D2)]
    (pair 1 carries the noise in D1, pair 2 in D2): how much noise on a pair raises its correlation. Tests on the
    seed-paired Δ: the two-sided paired t test at ``alpha`` (its 1 − alpha interval) and the equivalence test TOST
    with ``margin`` (its 1 − 2·alpha interval inside ±margin). The read-out is the pre-registered sentence the
    numbers select.

    Nothing about Δ's mean is computed before every planned seed is in (``design.planned_seeds`` per arm, or the
    number the internal pilot set): until then the result says how many seed pairs are in and, from
    ``design.pilot_seeds`` on, only the pilot's standard deviation of Δ and the seeds it plans
    (:func:`pilot_seeds`).

    Returns: ``{"status", "seed_pairs", "planned", "per_seed": [{seed, s values, delta, delta_secondary}],
    "primary": {...}, "secondary": {...}, "readout"}`` (the last three only when complete).
    Raises ValueError: a pair's class name not among ``class_names``.
    """
    from scipy import stats as sps

    index = {c: i for i, c in enumerate(class_names)}
    try:
        (a1, b1), (a2, b2) = ([index[c] for c in p] for p in design.pairs)
    except KeyError as e:
        raise ValueError(f"single_pair.pairs names {e}, not a class of the study ({', '.join(class_names)})") from None
    d1, d2 = design.arms
    arm = {name: {r["seed"]: r for r in rows if r["group"].split()[0] == name} for name in (d1, d2)}
    seeds = sorted(set(arm[d1]) & set(arm[d2]))

    def values(r: dict, column: int) -> "tuple[float, float]":
        return _pair_value(r, a1, b1, column), _pair_value(r, a2, b2, column)

    per_seed = []
    for s in seeds:
        (p1_d1, p2_d1), (p1_d2, p2_d2) = values(arm[d1][s], 3), values(arm[d2][s], 3)
        (q1_d1, q2_d1), (q1_d2, q2_d2) = values(arm[d1][s], 2), values(arm[d2][s], 2)
        per_seed.append(
            {
                "seed": s,
                "s1_d1": p1_d1,
                "s1_d2": p1_d2,
                "s2_d1": p2_d1,
                "s2_d2": p2_d2,
                "delta": (p1_d1 - p1_d2) - (p2_d1 - p2_d2),
                "delta_secondary": (q1_d1 - q1_d2) - (q2_d1 - q2_d2),
            }
        )
    planned = design.planned_seeds
    out: dict = {"seed_pairs": len(seeds), "planned": planned, "arms": [d1, d2], "pairs": design.pairs}
    if len(seeds) >= design.pilot_seeds >= 2:
        deltas = [x["delta"] for x in per_seed[: design.pilot_seeds]]
        planned = pilot_seeds(deltas, design)
        out["pilot"] = {"seeds": design.pilot_seeds, "sd_delta": float(np.std(deltas, ddof=1)), "planned": planned}
    out["planned"] = planned
    if len(seeds) < planned:
        out["status"] = f"{len(seeds)} of {planned} seed pairs in: Δ is not looked at before all are (pre-registered)"
        return out
    out["per_seed"] = per_seed
    out["status"] = "complete"
    for key, name in (("delta", "primary"), ("delta_secondary", "secondary")):
        x = np.array([p[key] for p in per_seed])
        n, mean, sd = len(x), float(x.mean()), float(x.std(ddof=1))
        se = sd / np.sqrt(n)
        t95 = float(sps.t.ppf(1 - design.alpha / 2, n - 1))
        t90 = float(sps.t.ppf(1 - design.alpha, n - 1))
        p_t = float(sps.ttest_1samp(x, 0.0).pvalue)
        p_tost = float(max(sps.t.sf((mean + design.margin) / se, n - 1), sps.t.cdf((mean - design.margin) / se, n - 1)))
        out[name] = {
            "mean": mean,
            "sd": sd,
            "n": n,
            "lo": mean - t95 * se,
            "hi": mean + t95 * se,
            "p": p_t,
            "tost_lo": mean - t90 * se,
            "tost_hi": mean + t90 * se,
            "p_tost": p_tost,
            "equivalent": p_tost < design.alpha,
        }
    r = out["primary"]
    if r["p"] < design.alpha:
        out["readout"] = (
            "Σ shares noise on the pair the noise affects" if r["mean"] > 0 else "Σ represents it as a swap"
        )
    elif r["equivalent"]:
        out["readout"] = "Σ encodes the similarity that noise switches on, not where the noise sits"
    else:
        out["readout"] = (
            f"inconclusive at this power: Δ = {r['mean']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}] (n = {r['n']})"
        )
    return out


def single_pair_png(result: dict) -> bytes:
    """s_1 and s_2 per arm and seed (one line per seed joining D1 and D2), the figure of the single-pair design."""
    from harness.report.figures import png, pyplot

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, k, pair in zip(axes, ("s1", "s2"), result["pairs"]):
        for x in result["per_seed"]:
            ax.plot([0, 1], [x[f"{k}_d1"], x[f"{k}_d2"]], marker="o", alpha=0.7)
        ax.set_xticks([0, 1], result["arms"])
        ax.set_title(f"{pair[0]} / {pair[1]}: mean correlation of u_a, u_b")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return png(fig)


def single_pair_section(result: dict) -> dict:
    """The report's lead of the Σ section: the single-pair design's table, sentence and figure (or its status)."""
    head = (
        f"What Σ learns, the crossed single-pair design ({' vs '.join(result['arms'])}; pairs "
        f"{' and '.join('/'.join(p) for p in result['pairs'])}; pre-registered): "
    )
    pilot = result.get("pilot")
    pilot_text = (
        f" Internal pilot ({pilot['seeds']} seed pairs): SD(Δ) = {pilot['sd_delta']:.3f}, "
        f"seeds per arm planned: {pilot['planned']}."
        if pilot
        else ""
    )
    if result["status"] != "complete":
        return {"text": [head + result["status"] + "." + pilot_text], "json": {"single_pair": result}}
    p, s = result["primary"], result["secondary"]
    rows = [
        [
            str(x["seed"]),
            f"{x['s1_d1']:+.3f}",
            f"{x['s1_d2']:+.3f}",
            f"{x['s2_d1']:+.3f}",
            f"{x['s2_d2']:+.3f}",
            f"{x['delta']:+.3f}",
            f"{x['delta_secondary']:+.3f}",
        ]
        for x in result["per_seed"]
    ]
    text = [
        head + f"Δ = {p['mean']:+.3f} [{p['lo']:+.3f}, {p['hi']:+.3f}] (95%, paired t p {p['p']:.3g}; TOST 90% "
        f"[{p['tost_lo']:+.3f}, {p['tost_hi']:+.3f}], p {p['p_tost']:.3g}; n = {p['n']} seed pairs). Read-out "
        f"(pre-registered): {result['readout']}. Secondary (log Var(u_a − u_b)): {s['mean']:+.3f} "
        f"[{s['lo']:+.3f}, {s['hi']:+.3f}], p {s['p']:.3g}." + pilot_text
    ]
    arms = result["arms"]
    a, b = ("/".join(q) for q in result["pairs"])
    return {
        "tables": [
            (
                "The single-pair design per seed: mean signed correlation of u_a, u_b per pair and arm, Δ and "
                "its secondary (log Var(u_a − u_b))",
                [
                    "seed",
                    f"{a} in {arms[0]}",
                    f"{a} in {arms[1]}",
                    f"{b} in {arms[0]}",
                    f"{b} in {arms[1]}",
                    "Δ",
                    "Δ (log Var)",
                ],
                rows,
            )
        ],
        "text": text,
        "json": {"single_pair": result},
        "figures": [
            (
                "The single-pair design: each pair's mean correlation in both arms (a line per seed)",
                "single_pair.png",
                single_pair_png(result),
            )
        ],
    }
