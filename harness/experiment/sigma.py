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

from harness.experiment.config import Experiment

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
