"""What the learned covariance Σ(x) follows: label noise or visual similarity.

Per heteroscedastic model (low-rank or PE covariance), the per-pair noise of :class:`harness.uncertainty.
covariance.PairNoise` (on the evaluation images) is tested against two noise matrices with the two-sided
Mantel test of :func:`harness.uncertainty.covariance.transition_test` (class labels permuted): the run's own
training noise (the matrix its labels were drawn from, or the human one for human labels) and the human
noise of the study's main condition. The primary statistic is the Spearman ρ between the pair mass
T_ab + T_ba and the signed mean correlation of u_a, u_b: ρ > 0 means classes the labels confuse *share*
noise (their utilities move together), ρ < 0 that they *swap* (their utilities move apart). The decisive
conditions (pre-registered in the experiment file) put the same noise on other classes (a permuted T) and
train on clean labels (no noise: only visual similarity left).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

from harness.experiment.config import Experiment, SinglePairSection

#: the pre-registered threshold: Σ tracks a noise matrix when |ρ| >= this with p < P_TRACK in every seed
RHO_TRACK, P_TRACK = 0.5, 0.01


def _has_sigma(run_dir: Path) -> bool:
    from harness.runs import run_head

    return run_head(run_dir).get("covariance", "low_rank") in ("low_rank", "parameter_efficient")


def model_rows(groups: "dict[str, list[Path]]", human: np.ndarray,
               progress: Callable[[str], None] = lambda s: None) -> "list[dict]":
    """Per model of ``groups`` (label -> run folders; those without a low-rank Σ are skipped): the Mantel
    tests of its per-pair noise against its own training noise and against ``human`` ``[K, K]``; ``progress`` gets
    one line per model (each predicts the whole evaluation split)."""
    from harness.runs import covariance_analysis, noise_transition
    from harness.uncertainty.covariance import transition_test

    rows = []
    todo = [(label, d) for label, dirs in groups.items() for d in dirs
            if (d / "model.pt").is_file() and _has_sigma(d)]
    for i, (label, d) in enumerate(todo, 1):
        progress(f"[covariance] what Σ follows: {d.name} ({i} of {len(todo)})")
        result = covariance_analysis(d, None, None)
        pairs = result.get("pair_noise")
        if not pairs:
            continue
        own = noise_transition(d)
        tests = {"own": result.get("transition_test") if own is not None else None,
                 "human": transition_test(human, pairs)}
        row = {"group": label, "run": d.name, "seed": int(d.name.rsplit("_s", 1)[-1]) if "_s" in d.name else None}
        for which, t in tests.items():
            for stat in ("correlation", "var_diff"):
                row[f"{which}_{stat}"] = None if t is None else {"rho": t[stat]["rho"], "p": t[stat]["p_value"]}
        rows.append(row)
    return rows


def _cell(x: Optional[dict]) -> str:
    return "—" if x is None else f"{x['rho']:+.2f} (p {x['p']:.2g})"


def _tracks(x: Optional[dict]) -> bool:
    return x is not None and abs(x["rho"]) >= RHO_TRACK and x["p"] < P_TRACK


def readout(rows: "list[dict]", permuted: str, clean: str) -> "list[str]":
    """The pre-registered read-out in sentences computed from ``rows``: does the permuted condition's Σ
    track its own (permuted) noise in every seed, and how its association with the human noise compares with
    the clean-label condition's."""
    b = [r for r in rows if r["group"] == permuted]
    a = [r for r in rows if r["group"] == clean]
    out = []
    if b:
        k = sum(_tracks(r["own_correlation"]) for r in b)
        out.append(f"Pre-registered criterion 1 ({permuted}: |ρ| ≥ {RHO_TRACK} and p < {P_TRACK} against its own "
                   f"permuted noise, signed correlation): holds in {k} of {len(b)} seed(s) ("
                   + ", ".join(f"seed {r['seed']} {_cell(r['own_correlation'])}" for r in b) + ").")
    if a and b:
        ha = [r["human_correlation"]["rho"] for r in a]
        hb = [r["human_correlation"]["rho"] for r in b]
        out.append(f"Association with the human noise (signed correlation ρ): {permuted} mean {np.mean(hb):+.2f} "
                   f"(n = {len(hb)}) against {clean} mean {np.mean(ha):+.2f} (n = {len(ha)}); "
                   + ("at or below the clean-label level." if np.mean(hb) <= np.mean(ha) else
                      "above the clean-label level."))
        k = sum(_tracks(r["own_correlation"]) for r in b)
        if k == len(b) and np.mean(hb) <= np.mean(ha):
            out.append("Read-out: Σ follows the label noise (both pre-registered conditions hold).")
        elif k == 0 and np.mean(hb) >= np.mean(ha):
            out.append("Read-out: Σ looks like the clean-label Σ under permuted noise: it encodes visual similarity "
                       "more than the label noise (criterion 1 fails in every seed).")
        else:
            out.append("Read-out: mixed; neither pre-registered pattern holds in full.")
    if not a or not b:
        out.append("Read-out pending: the conditions' runs are not all finished (see the table's seeds).")
    return out


def sigma_section(groups: "dict[str, list[Path]]", human: np.ndarray, permuted: str = "", clean: str = "",
                  progress: Callable[[str], None] = lambda s: None) -> dict:
    """The table (one row per model: ρ and two-sided Mantel p of the signed correlation and of Var(u_a − u_b)
    against its own noise and the human noise) and the read-out sentences; ``progress`` as :func:`model_rows`."""
    rows = model_rows(groups, human, progress)
    if not rows:
        return {}
    table = [[r["group"], str(r["seed"]), _cell(r["own_correlation"]), _cell(r["own_var_diff"]),
              _cell(r["human_correlation"]), _cell(r["human_var_diff"])] for r in rows]
    text = []
    signs = [r["human_correlation"]["rho"] for r in rows if r["group"].startswith("main")]
    if signs:
        word = "share noise" if np.mean(signs) > 0 else "swap (their utilities move apart)"
        text.append(f"Main study: against the human noise the signed correlation's ρ is {min(signs):+.2f} to "
                    f"{max(signs):+.2f} over {len(signs)} models: pairs the annotators confuse {word} in Σ "
                    "(the sign of ρ; two-sided Mantel p in the table).")
    if permuted and clean:
        text += readout(rows, permuted, clean)
    title = ("What Σ follows: Spearman ρ (two-sided Mantel p, class labels permuted) of the noise's pair mass "
             "T_ab + T_ba against the signed mean correlation of u_a, u_b (primary) and Var(u_a − u_b), per model, "
             "against its own training noise and against the human noise (CIFAR-10N worse)")
    return {"tables": [(title, ["condition", "seed", "own noise: correlation", "own noise: Var(u_a − u_b)",
                                "human noise: correlation", "human noise: Var(u_a − u_b)"], table)],
            "text": text, "json": {"sigma_follows": {"rows": rows, "rho_track": RHO_TRACK, "p_track": P_TRACK}}}


def experiment_sigma(exp: Experiment, runs: "dict[str, list[Path]]", conditions: dict, main: Any,
                     progress: Callable[[str], None] = lambda s: None) -> dict:
    """The section of :mod:`harness.experiment.sigma`: every het model of the main study and of the read-out's
    conditions against its own noise and the main study's (human) noise, and the pre-registered read-out."""
    from harness.runs import noise_transition

    noisy = [m for m in runs if exp.methods[m].get("covariance", "low_rank") in ("low_rank", "parameter_efficient")]
    human = noise_transition(runs[noisy[0]][0]) if noisy else None
    if human is None:
        return {}
    groups = {f"main {m}": runs[m] for m in noisy}
    for name in exp.sigma_readout.values():
        for m, fs in conditions.get(name, {}).items():
            dirs = [Path(main.configs[f].output_dir) for f in fs]
            groups[f"{name} {m}"] = [d for d in dirs if (d / "metrics.json").is_file()]
    r = exp.sigma_readout
    het = next((m for m in noisy if exp.methods[m].get("covariance") == "low_rank"), noisy[0])
    return sigma_section(groups, human, f"{r['permuted']} {het}" if "permuted" in r else "",
                         f"{r['clean']} {het}" if "clean" in r else "", progress)


def seeds_for_power(sd_delta: float, effect: float, margin: float, alpha: float = 0.05, power: float = 0.8,
                    max_seeds: int = 64) -> int:
    """The fewest seeds per arm n (n >= 3) at which, with per-seed Δ of standard deviation ``sd_delta``, the
    two-sided paired t test at ``alpha`` detects |Δ| = ``effect`` with probability >= ``power`` and the
    equivalence test (TOST, margin ``margin``) succeeds at Δ = 0 with probability >= ``power``
    (:func:`harness.uncertainty.stats.paired_t_power`, :func:`~harness.uncertainty.stats.tost_power`);
    ``max_seeds`` + 1 when no n up to ``max_seeds`` reaches it."""
    from harness.uncertainty.stats import paired_t_power, tost_power

    for n in range(3, max_seeds + 1):
        if (paired_t_power(sd_delta, n, effect, alpha) >= power
                and tost_power(sd_delta, n, margin, alpha) >= power):
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
    from harness.uncertainty.stats import paired_t_power, tost_power

    if not design.spread:
        raise ValueError("single_pair.spread is empty: record the per-pair seed spread of single_pair.spread_from")
    sd_pair = max(design.spread.values())
    sd_delta = 2.0 * sd_pair
    n = seeds_for_power(sd_delta, design.effect, design.margin, design.alpha, design.power)
    out = {"sd_pair": sd_pair, "sd_delta": sd_delta, "seeds": n,
           "t_power": paired_t_power(sd_delta, n, design.effect, design.alpha),
           "tost_power": tost_power(sd_delta, n, design.margin, design.alpha)}
    out["sensitivity"] = {name: {"sd_pair": sd, "t_power": paired_t_power(2 * sd, n, design.effect, design.alpha),
                                 "tost_power": tost_power(2 * sd, n, design.margin, design.alpha)}
                          for name, sd in (sensitivity or {}).items()}
    return out


def pilot_seeds(deltas: "list[float]", design: SinglePairSection) -> int:
    """The seeds per arm after the internal pilot (variance only): from the sample standard deviation of the
    first ``design.pilot_seeds`` per-seed Δ (never their mean), the seeds :func:`seeds_for_power` needs,
    no fewer than ``design.planned_seeds`` and no more than ``design.max_seeds``.
    Source: Wittes & Brittain 1990, "The role of internal pilot studies in increasing the efficiency of
    clinical trials", Stat. Med. 9(1-2):65-72."""
    if len(deltas) < max(2, design.pilot_seeds):
        raise ValueError(f"the pilot needs {design.pilot_seeds} seed-paired Δ, got {len(deltas)}")
    sd = float(np.std(np.asarray(deltas[:design.pilot_seeds], dtype=float), ddof=1))
    need = seeds_for_power(sd, design.effect, design.margin, design.alpha, design.power, design.max_seeds)
    return int(min(design.max_seeds, max(design.planned_seeds, need)))
