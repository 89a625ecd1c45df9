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
from harness.experiment.single_pair import single_pair_analysis, single_pair_section
from harness.heads.variants import has_factors

#: the keys of an experiment's ``sigma_readout``: the conditions whose het models decide what Σ follows
READOUTS = ("permuted", "clean", "class_conditional")

#: the pre-registered threshold: Σ tracks a noise matrix when |ρ| >= this with p < P_TRACK in every seed
RHO_TRACK, P_TRACK = 0.5, 0.01


def _has_sigma(run_dir: Path) -> bool:
    from harness.runs import run_head

    return has_factors(run_head(run_dir).get("covariance", "low_rank"))


def model_rows(
    groups: "dict[str, list[Path]]", human: np.ndarray, progress: Callable[[str], None] = lambda s: None
) -> "list[dict]":
    """Per model of ``groups`` (label -> run folders; those without a low-rank Σ are skipped): the Mantel
    tests of its per-pair noise against its own training noise and against ``human`` ``[K, K]``; ``progress`` gets
    one line per model (each predicts the whole evaluation split)."""
    from harness.runs import covariance_analysis, noise_transition
    from harness.uncertainty.covariance import transition_test

    rows = []
    todo = [(label, d) for label, dirs in groups.items() for d in dirs if (d / "model.pt").is_file() and _has_sigma(d)]
    for i, (label, d) in enumerate(todo, 1):
        progress(f"[covariance] what Σ follows: {d.name} ({i} of {len(todo)})")
        result = covariance_analysis(d, None, None)
        pairs = result.get("pair_noise")
        if not pairs:
            continue
        own = noise_transition(d)
        tests = {
            "own": result.get("transition_test") if own is not None else None,
            "human": transition_test(human, pairs),
        }
        row = {
            "group": label,
            "run": d.name,
            "seed": int(d.name.rsplit("_s", 1)[-1]) if "_s" in d.name else None,
            "pairs": [list(p) for p in pairs],
            "own_noise": None if own is None else np.asarray(own).tolist(),
        }
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
        out.append(
            f"Pre-registered criterion 1 ({permuted}: |ρ| ≥ {RHO_TRACK} and p < {P_TRACK} against its own "
            f"permuted noise, signed correlation): holds in {k} of {len(b)} seed(s) ("
            + ", ".join(f"seed {r['seed']} {_cell(r['own_correlation'])}" for r in b)
            + ")."
        )
    if a and b:
        ha = [r["human_correlation"]["rho"] for r in a]
        hb = [r["human_correlation"]["rho"] for r in b]
        out.append(
            f"Association with the human noise (signed correlation ρ): {permuted} mean {np.mean(hb):+.2f} "
            f"(n = {len(hb)}) against {clean} mean {np.mean(ha):+.2f} (n = {len(ha)}); "
            + ("at or below the clean-label level." if np.mean(hb) <= np.mean(ha) else "above the clean-label level.")
        )
        k = sum(_tracks(r["own_correlation"]) for r in b)
        if k == len(b) and np.mean(hb) <= np.mean(ha):
            out.append("Read-out: Σ follows the label noise (both pre-registered conditions hold).")
        elif k == 0 and np.mean(hb) >= np.mean(ha):
            out.append(
                "Read-out: Σ looks like the clean-label Σ under permuted noise: it encodes visual similarity "
                "more than the label noise (criterion 1 fails in every seed)."
            )
        else:
            out.append("Read-out: mixed; neither pre-registered pattern holds in full.")
    if not a or not b:
        out.append("Read-out pending: the conditions' runs are not all finished (see the table's seeds).")
    return out


def _matrix(pairs: "list", column: int, k: int, log: bool = False) -> np.ndarray:
    """A symmetric ``[k, k]`` matrix of one :class:`~harness.uncertainty.covariance.PairNoise` statistic
    (column 2: Var(u_a − u_b), 3: the signed correlation) from a row's ``pairs``."""
    m = np.zeros((k, k))
    for p in pairs:
        m[p[0], p[1]] = m[p[1], p[0]] = np.log(p[column]) if log else p[column]
    return m


def _mass(t: "list | np.ndarray") -> np.ndarray:
    t = np.asarray(t, dtype=np.float64)
    return t + t.T


def _test(kind: str, *mats: np.ndarray) -> dict:
    from harness.uncertainty.mantel import mantel, partial_mantel

    r = mantel(*mats) if kind == "mantel" else partial_mantel(*mats)
    return {"rho": r["rho"], "p": r["p_value"]}


def secondary_analyses(rows: "list[dict]", human: np.ndarray, permuted: str, class_conditional: str) -> dict:
    """The declared secondary analyses of what Σ follows (two-sided, class labels permuted), from the rows of
    :func:`model_rows`:

    - **placebo**: models that never saw the permuted noise T_perm (the main study's het models and the
      class-conditional condition's) against T_perm's pair mass: what the test gives without the noise;
    - **partial Mantel** for the permuted condition's models (:func:`harness.uncertainty.mantel.partial_mantel`):
      their signed correlation against their own noise given the human pair mass, and against the human pair mass
      given their own noise;
    - **difference in differences**: seed-paired permuted − class-conditional (both trained on 40% noise of the same
      T, placed on other pairs), per statistic (signed correlation, log Var(u_a − u_b)), class effects removed
      (:func:`~harness.uncertainty.mantel.without_class_effects`), against T_perm's pair mass given the human
      mass (partial Mantel), per seed and for the seed mean.

    Returns ``{"placebo": [...], "partial": [...], "did": {...}, "readout": sentence}`` (empty without rows of both
    conditions)."""
    b = sorted((r for r in rows if r["group"] == permuted and r.get("own_noise") is not None), key=lambda r: r["seed"])
    c = {r["seed"]: r for r in rows if r["group"] == class_conditional}
    if not b:
        return {}
    k = len(human)
    t_perm, h = _mass(b[0]["own_noise"]), _mass(human)
    placebo = [
        {"group": r["group"], "seed": r["seed"], **_test("mantel", t_perm, _matrix(r["pairs"], 3, k))}
        for r in rows
        if r["group"].startswith("main") or r["group"] == class_conditional
    ]
    partial = [
        {
            "seed": r["seed"],
            "own_given_human": _test("partial", _matrix(r["pairs"], 3, k), t_perm, h),
            "human_given_own": _test("partial", _matrix(r["pairs"], 3, k), h, t_perm),
        }
        for r in b
    ]
    did: dict = {}
    paired = [(r, c[r["seed"]]) for r in b if r["seed"] in c]
    for stat, col, log in (("correlation", 3, False), ("log_var_diff", 2, True)):
        from harness.uncertainty.mantel import without_class_effects

        diffs = [
            without_class_effects(_matrix(x["pairs"], col, k, log) - _matrix(y["pairs"], col, k, log))
            for x, y in paired
        ]
        if diffs:
            did[stat] = {
                "per_seed": [
                    {"seed": x["seed"], **_test("partial", dd, t_perm, h)} for (x, _), dd in zip(paired, diffs)
                ],
                "seed_mean": _test("partial", np.mean(diffs, axis=0), t_perm, h),
            }
    return {"placebo": placebo, "partial": partial, "did": did, "readout": _secondary_readout(placebo, partial, did)}


def _secondary_readout(placebo: "list[dict]", partial: "list[dict]", did: dict) -> str:
    """The sentence the secondary numbers support (each clause computed from them)."""
    own = [x["own_given_human"] for x in partial]
    hum = [x["human_given_own"] for x in partial]
    sig = lambda xs: sum(x["p"] < 0.05 for x in xs)  # noqa: E731
    parts = [
        f"Given the human pair mass, the permuted condition's Σ tracks its own noise in {sig(own)} of {len(own)} "
        f"seed(s) (partial ρ {min(x['rho'] for x in own):+.2f} to {max(x['rho'] for x in own):+.2f}); given its "
        f"own noise, it tracks the human pairs in {sig(hum)} of {len(hum)} (partial ρ "
        f"{min(x['rho'] for x in hum):+.2f} to {max(x['rho'] for x in hum):+.2f})"
    ]
    if placebo:
        parts.append(
            f"models that never saw T_perm give ρ {min(x['rho'] for x in placebo):+.2f} to "
            f"{max(x['rho'] for x in placebo):+.2f} against it (placebo)"
        )
    for stat, d in did.items():
        m = d["seed_mean"]
        parts.append(
            f"the seed-paired permuted − class-conditional shift in {stat.replace('_', ' ')}, class effects "
            f"and the human mass removed, follows T_perm with ρ {m['rho']:+.2f} (p {m['p']:.2g})"
        )
    shift = did.get("correlation", {}).get("seed_mean")
    second = (
        ""
        if not shift or shift["p"] >= 0.05
        else f" (a {'swap' if shift['rho'] < 0 else 'sharing'}-type shift: T_perm's pairs move "
        f"{'apart' if shift['rho'] < 0 else 'together'})"
    )
    support = (
        "so Σ encodes the similarity of the classes people confuse, which label noise switches on, and where "
        f"the noise sits moves it only at second order{second}"
        if sig(hum) == len(hum) and sig(own) < len(own)
        else "so the permuted noise's own pairs are visible in Σ beyond the human pairs"
        if sig(own) == len(own)
        else "so neither reading is supported by every seed"
    )
    return "; ".join(parts) + f": {support}."


def sigma_section(
    groups: "dict[str, list[Path]]",
    human: np.ndarray,
    permuted: str = "",
    clean: str = "",
    progress: Callable[[str], None] = lambda s: None,
    class_conditional: str = "",
) -> dict:
    """The table (one row per model: ρ and two-sided Mantel p of the signed correlation and of Var(u_a − u_b)
    against its own noise and the human noise) and the read-out sentences; ``progress`` as :func:`model_rows`."""
    rows = model_rows(groups, human, progress)
    if not rows:
        return {}
    table = [
        [
            r["group"],
            str(r["seed"]),
            _cell(r["own_correlation"]),
            _cell(r["own_var_diff"]),
            _cell(r["human_correlation"]),
            _cell(r["human_var_diff"]),
        ]
        for r in rows
    ]
    text = []
    signs = [r["human_correlation"]["rho"] for r in rows if r["group"].startswith("main")]
    if signs:
        word = "share noise" if np.mean(signs) > 0 else "swap (their utilities move apart)"
        text.append(
            f"Main study: against the human noise the signed correlation's ρ is {min(signs):+.2f} to "
            f"{max(signs):+.2f} over {len(signs)} models: pairs the annotators confuse {word} in Σ "
            "(the sign of ρ; two-sided Mantel p in the table)."
        )
    if permuted and clean:
        text += readout(rows, permuted, clean)
    extra = secondary_analyses(rows, human, permuted, class_conditional) if permuted and class_conditional else {}
    tables = [] if not extra else _secondary_tables(extra)
    if extra:
        text.append(
            "Secondary analyses (declared 2026-11-27, after the conditions' runs, so exploratory): " + extra["readout"]
        )
    title = (
        "What Σ follows: Spearman ρ (two-sided Mantel p, class labels permuted) of the noise's pair mass "
        "T_ab + T_ba against the signed mean correlation of u_a, u_b (primary) and Var(u_a − u_b), per model, "
        "against its own training noise and against the human noise (CIFAR-10N worse)"
    )
    return {
        "tables": [
            (
                title,
                [
                    "condition",
                    "seed",
                    "own noise: correlation",
                    "own noise: Var(u_a − u_b)",
                    "human noise: correlation",
                    "human noise: Var(u_a − u_b)",
                ],
                table,
            )
        ]
        + tables,
        "text": text,
        "json": {"sigma_follows": {"rows": rows, "rho_track": RHO_TRACK, "p_track": P_TRACK, "secondary": extra}},
    }


def _secondary_tables(extra: dict) -> list:
    rows = [["placebo: " + x["group"], str(x["seed"]), "T_perm's pair mass", _cell(x)] for x in extra["placebo"]]
    rows += [
        ["partial: permuted", str(x["seed"]), "own noise | human mass", _cell(x["own_given_human"])]
        for x in extra["partial"]
    ]
    rows += [
        ["partial: permuted", str(x["seed"]), "human mass | own noise", _cell(x["human_given_own"])]
        for x in extra["partial"]
    ]
    for stat, d in extra["did"].items():
        rows += [
            [
                f"permuted − class-conditional, {stat}",
                str(x["seed"]),
                "T_perm | human mass (class effects removed)",
                _cell(x),
            ]
            for x in d["per_seed"]
        ]
        rows.append(
            [
                f"permuted − class-conditional, {stat}",
                "mean",
                "T_perm | human mass (class effects removed)",
                _cell(d["seed_mean"]),
            ]
        )
    return [
        (
            "What Σ follows, declared secondary analyses: Spearman ρ (partial where marked; two-sided Mantel p, "
            "class labels permuted) of the signed correlation of u_a, u_b (or the shift in it)",
            ["analysis", "seed", "against", "ρ (p)"],
            rows,
        )
    ]


def experiment_sigma(
    exp: Experiment,
    runs: "dict[str, list[Path]]",
    conditions: dict,
    main: Any,
    progress: Callable[[str], None] = lambda s: None,
) -> dict:
    """The section of :mod:`harness.experiment.sigma`: every het model of the main study and of the read-out's
    conditions against its own noise and the main study's (human) noise, and the pre-registered read-out."""
    from harness.runs import noise_transition

    noisy = [m for m in runs if has_factors(exp.methods[m].get("covariance", "low_rank"))]
    human = noise_transition(runs[noisy[0]][0]) if noisy else None
    if human is None:
        return {}
    groups = {f"main {m}": runs[m] for m in noisy}
    arms = exp.single_pair.arms if exp.single_pair else []
    for name in [*exp.sigma_readout.values(), *arms]:
        for m, fs in conditions.get(name, {}).items():
            dirs = [Path(main.configs[f].output_dir) for f in fs]
            groups[f"{name} {m}"] = [d for d in dirs if (d / "metrics.json").is_file()]
    r = exp.sigma_readout
    het = next((m for m in noisy if exp.methods[m].get("covariance") == "low_rank"), noisy[0])
    out = sigma_section(
        groups,
        human,
        f"{r['permuted']} {het}" if "permuted" in r else "",
        f"{r['clean']} {het}" if "clean" in r else "",
        progress,
        f"{r['class_conditional']} {het}" if "class_conditional" in r else "",
    )
    if exp.single_pair and out:
        from harness.uncertainty.predictions import Predictions

        names = Predictions.load(runs[noisy[0]][0]).class_names
        rows = out["json"]["sigma_follows"]["rows"]
        lead = single_pair_section(single_pair_analysis(rows, exp.single_pair, names))
        out = {
            "tables": lead.get("tables", []) + out["tables"],
            "text": lead["text"] + out["text"],
            "json": {**out["json"], **lead["json"]},
            "figures": lead.get("figures", []) + out.get("figures", []),
        }
    return out
