"""``harness run EXPERIMENT``: pretraining -> ensembles -> VTAB-style transfer -> one report.

An experiment file (YAML, in ``harness/experiments/`` or any path) names the upstream methods and
seeds, the ensemble sizes and the downstream tasks. Every stage resumes: upstream runs finish or
skip, sweeps skip finished fine-tunes, ensembles and the report are recomputed from what is on disk.
Outputs: run folders under ``runs/<name>/`` and the report under ``results/<name>/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

EXPERIMENTS = Path(__file__).parent / "experiments"


@dataclass
class DownstreamSection:
    """Transfer of every upstream model (see :class:`downstream.sweep.SweepSettings`)."""

    tasks: List[str] = field(default_factory=lambda: ["demo"])
    preset: str = "demo"
    settings: Dict[str, Any] = field(default_factory=dict)


@dataclass
class Experiment:
    """One experiment.

    Attributes:
        name: report folder ``results/<name>``; run folders under ``runs/<name>``.
        upstream_config: an upstream config (a path, or a file name in ``upstream/configs``).
        upstream_overrides: ``key=value`` overrides of that config for every run.
        methods: method name -> head options (replacing the config's ``model.head``).
        seeds: upstream seeds of every method.
        ensemble_sizes: ensembles of the first n seeds of each method.
        downstream: transfer settings; ``tasks: []`` skips the stage.
        covariance: run the covariance analysis in the report.
        runs_root, results_root: where the run folders and the report go.
        confusable_pairs: class pairs people are known to confuse (e.g. cat/dog); the report says how
            many of the top covariance pairs are among them.
    """

    name: str = "digits"
    upstream_config: str = "digits_base.yaml"
    upstream_overrides: List[str] = field(default_factory=list)
    methods: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    seeds: List[int] = field(default_factory=lambda: [0])
    ensemble_sizes: List[int] = field(default_factory=list)
    downstream: DownstreamSection = field(default_factory=DownstreamSection)
    covariance: bool = True
    runs_root: str = "runs"
    results_root: str = "results"
    description: str = ""
    confusable_pairs: List[List[str]] = field(default_factory=list)


def find_experiment(name_or_path: str) -> Path:
    """A path, or the name of a file in ``harness/experiments`` (``digits`` -> ``digits.yaml``).

    Raises:
        FileNotFoundError: neither (the message lists the built-in experiments).
    """
    p = Path(name_or_path)
    if p.is_file():
        return p
    built_in = EXPERIMENTS / f"{name_or_path}.yaml"
    if built_in.is_file():
        return built_in
    names = sorted(f.stem for f in EXPERIMENTS.glob("*.yaml"))
    raise FileNotFoundError(f"no experiment {name_or_path!r}: give a YAML path or one of {', '.join(names)}")


def _upstream_config_path(ref: str) -> Path:
    import upstream

    p = Path(ref)
    return p if p.is_file() else Path(upstream.__file__).parent / "configs" / ref


def run_experiment(exp: Experiment, progress: Callable[[str], None] = print) -> Path:
    """Run (or finish) every stage of ``exp``; return the report folder.

    Raises:
        ValueError: no methods, an ensemble larger than the seeds, or any stage's own errors.
    """
    from downstream.sweep import PRESETS, SweepSettings, sweep
    from harness.config import load_config
    from harness.ensembles import build_ensemble
    from harness.report import build
    from upstream.config import UpstreamConfig
    from upstream.train import run

    if not exp.methods:
        raise ValueError("the experiment names no methods: add e.g. methods: {hom: {covariance: none}}")
    if any(n > len(exp.seeds) or n < 2 for n in exp.ensemble_sizes):
        raise ValueError(f"ensemble sizes {exp.ensemble_sizes} must lie in [2, number of seeds = {len(exp.seeds)}]")
    root = Path(exp.runs_root) / exp.name
    base = _upstream_config_path(exp.upstream_config)
    runs: "dict[str, list[Path]]" = {}
    for method, head in exp.methods.items():
        for seed in exp.seeds:
            out = root / "upstream" / f"{method}_s{seed}"
            cfg = load_config(UpstreamConfig, base, [*exp.upstream_overrides, f"name={exp.name}_{method}_s{seed}",
                                                     f"seed={seed}", f"output_dir={out}"])
            cfg.model.head = dict(head)
            progress(f"[upstream] {method} seed {seed}")
            runs.setdefault(method, []).append(run(cfg, progress=False))
    ensembles = []
    for method, dirs in runs.items():
        for size in exp.ensemble_sizes:
            out = root / "ensembles" / f"{method}_x{size}"
            build_ensemble(dirs[:size], out)
            ensembles.append(out)
            progress(f"[ensemble] {method} x{size}")
    extra = {}
    if exp.downstream.tasks:
        settings = SweepSettings(**{**PRESETS[exp.downstream.preset], **exp.downstream.settings})
        per_run = {}
        for dirs in runs.values():
            for d in dirs:
                progress(f"[downstream] {d.name}")
                per_run[d] = sweep(str(d / "model.pt"), exp.downstream.tasks, root / "downstream" / d.name, settings,
                                   progress=lambda s: None)
        extra = downstream_section(runs, per_run)
    progress("[report]")
    extra.setdefault("text", []).extend(findings(runs, ensembles))
    extra.setdefault("json", {})["confusable_pairs"] = [list(p) for p in exp.confusable_pairs]
    extra["text"].insert(0, f"Experiment: {exp.description or exp.name}. Schedule: upstream config {base.name} with "
                            f"{' '.join(exp.upstream_overrides) or 'no overrides'}; seeds {list(exp.seeds)}; methods "
                            + "; ".join(f"{m} {dict(h)}" for m, h in exp.methods.items()) + ".")
    return build([d for dirs in runs.values() for d in dirs] + ensembles, exp.name, exp.results_root,
                 covariance=exp.covariance, extra=extra)


def findings(runs: "dict[str, list[Path]]", ensembles: "list[Path]") -> "list[str]":
    """Sentences comparing the methods, computed from the runs' own metrics (never typed in):
    each non-hom method against hom on top-1 and NLL (means over seeds, with the seed std), and
    each ensemble against the mean of its members."""
    import json

    def metric(d: Path, key: str) -> float:
        return json.loads((d / "metrics.json").read_text())["metrics"][key]

    acc_key = "top1"
    first = next(iter(runs.values()))[0]
    if acc_key not in json.loads((first / "metrics.json").read_text())["metrics"]:
        acc_key = "prec@1"
    nll_key = "nll" if acc_key == "top1" else "sigmoid_nll"
    stats = {m: {k: (float(np.mean([metric(d, k) for d in ds])), float(np.std([metric(d, k) for d in ds])))
                 for k in (acc_key, nll_key)} for m, ds in runs.items()}
    out = []
    if "hom" in stats:
        h = stats["hom"]
        for m, st in stats.items():
            if m == "hom":
                continue
            da, dn = st[acc_key][0] - h[acc_key][0], st[nll_key][0] - h[nll_key][0]
            verdict = ("better on both" if da > 0 and dn < 0 else "worse on both" if da < 0 and dn > 0 else "mixed")
            if abs(da) <= max(st[acc_key][1], h[acc_key][1]):
                verdict += f", but the {acc_key} gap is within the seed-to-seed spread"
            out.append(f"{m} vs hom (mean of {len(runs[m])} seeds): {acc_key} {100 * st[acc_key][0]:.2f}% vs "
                       f"{100 * h[acc_key][0]:.2f}% ({100 * da:+.2f} points; seed std {100 * st[acc_key][1]:.2f} and "
                       f"{100 * h[acc_key][1]:.2f}), NLL {st[nll_key][0]:.4f} vs {h[nll_key][0]:.4f} ({dn:+.4f}): "
                       f"{verdict}. The paper finds het and diag better than hom on both.")
    for e in ensembles:
        spec = json.loads((e / "ensemble.json").read_text())["summary"]
        ens, mean = spec["ensemble"], spec["member_mean"]
        out.append(f"{e.name}: ensemble {acc_key} {100 * ens[acc_key]:.2f}% vs members' mean "
                   f"{100 * mean[acc_key]:.2f}%, NLL {spec['ensemble_nll']:.4f} vs {spec['gibbs_ce']:.4f} "
                   f"({'ensemble better on both' if ens[acc_key] >= mean[acc_key] and spec['ensemble_gain'] > 0 else 'mixed'}"
                   "; the paper finds ensembles better than single models).")
    return out


def downstream_section(runs: "dict[str, list[Path]]", per_run: "dict[Path, dict]") -> dict:
    """The shape of the paper's Table 6: per task, the test accuracy of each method (mean ± std over
    the upstream seeds of that method, each the mean over its fine-tuning seeds), then group means
    and the mean over tasks."""
    methods = list(runs)
    first = per_run[runs[methods[0]][0]]
    tasks = list(first["tasks"])
    groups = list(first["groups"])

    def cell(values: "list[float]") -> str:
        return f"{100 * np.mean(values):.2f} ± {100 * np.std(values, ddof=1):.2f}" if len(values) > 1 else \
            f"{100 * values[0]:.2f}"

    rows, summary = [], {}
    for t in tasks:
        vals = {m: [per_run[d]["tasks"][t]["mean"] for d in runs[m]] for m in methods}
        rows.append([t, first["tasks"][t]["group"]] + [cell(vals[m]) for m in methods])
        summary[t] = {m: float(np.mean(v)) for m, v in vals.items()}
    for g in groups:
        vals = {m: [per_run[d]["groups"][g]["mean"] for d in runs[m]] for m in methods}
        rows.append([f"mean ({g})", g] + [cell(vals[m]) for m in methods])
    vals = {m: [per_run[d]["mean_over_tasks"] for d in runs[m]] for m in methods}
    rows.append(["mean over tasks", "all"] + [cell(vals[m]) for m in methods])
    title = ("Downstream transfer (layout of the paper's Table 6): test top-1 after fine-tuning a fresh "
             "homoscedastic head, mean ± std over upstream seeds")
    return {"tables": [(title, ["task", "group", *methods], rows)],
            "json": {"downstream": {"per_task": summary, "mean_over_tasks": {m: float(np.mean(v)) for m, v in
                                                                             vals.items()}}}}


def load_experiment(name_or_path: Optional[str] = None, overrides: "tuple[str, ...]" = ()) -> Experiment:
    """Read an experiment file (default: the embedded digits experiment) with ``key=value`` overrides."""
    from harness.config import load_config

    return load_config(Experiment, find_experiment(name_or_path or "digits"), overrides)
