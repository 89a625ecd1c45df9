"""``harness bench coverage``: does the seeds-and-images interval cover the method's true difference at its
nominal 95%, through the real :func:`harness.uncertainty.compare.method_level` path?

Each simulation draws a fresh study: N evaluation images (labels and an image effect shared by every model) and n
seeds of a method and of a reference, each a softmax classifier over K classes whose logits are

    z_k = strength · [k == y] + image_k + model_k,   strength = base (+ effect for the method) + seed_effect,

with ``image`` ~ N(0, image_sd) shared by all models on an image (the image effect b_i), ``model`` ~ N(0, noise_sd)
the model's own per-image noise (the interaction e_si) and ``seed_effect`` ~ N(0, seed_sd) per model (the seed
effect a_s). The true difference mu of each metric (top-1, NLL, ECE at that N) is its expectation over new seeds
and new images, estimated once per setting from :data:`TRUTH_SIMS` studies without intervals. A simulation
covers when mu lies in the 95% interval; it also checks the invariant that the method interval contains the
models-fixed one. Settings span the variance that dominates, including seeds that agree more closely than
per-image flips allow (where an unfloored seed term under-covers).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from harness.uncertainty.compare import method_level, metric_stat, parts
from harness.uncertainty.predictions import Predictions

TRUTH_SIMS = 2000


@dataclass(frozen=True)
class Setting:
    """One simulated study design (see the module docstring)."""

    seeds: int = 3
    images: int = 1000
    classes: int = 10
    base: float = 2.0
    effect: float = 0.05
    seed_sd: float = 0.0
    image_sd: float = 1.0
    noise_sd: float = 0.5


SETTINGS = {
    "image-dominated": Setting(seed_sd=0.0, image_sd=1.5, noise_sd=0.3),
    "seed-dominated": Setting(seed_sd=0.3, image_sd=0.5, noise_sd=0.3),
    "interaction-dominated": Setting(seed_sd=0.02, image_sd=0.3, noise_sd=1.5),
    "seeds agree closely (top-1 flips)": Setting(seed_sd=0.0, image_sd=0.3, noise_sd=1.0, effect=0.02),
}


def _study(s: Setting, rng: np.random.Generator) -> "tuple[list[Predictions], list[Predictions]]":
    y = rng.integers(0, s.classes, s.images)
    shared = rng.normal(0.0, s.image_sd, (s.images, s.classes))
    onehot = np.eye(s.classes)[y]
    names = [f"c{k}" for k in range(s.classes)]

    def model(effect: float) -> Predictions:
        strength = s.base + effect + rng.normal(0.0, s.seed_sd) if s.seed_sd else s.base + effect
        z = strength * onehot + shared + rng.normal(0.0, s.noise_sd, shared.shape)
        return Predictions(z, y, np.arange(s.images), names, "softmax", "simulated")

    return [model(s.effect) for _ in range(s.seeds)], [model(0.0) for _ in range(s.seeds)]


def truth(s: Setting, keys: Sequence[str], sims: int = TRUTH_SIMS, seed: int = 10_000) -> "dict[str, float]":
    """The expected difference method − reference of each metric of ``keys`` over new seeds and images at the
    setting's N: the mean per-seed difference over ``sims`` simulated studies (no intervals)."""
    rng = np.random.default_rng(seed)
    sums = dict.fromkeys(keys, 0.0)
    for _ in range(sims):
        a, b = _study(s, rng)
        for key in keys:
            stat = metric_stat(key, 1)
            sums[key] += float(np.mean([stat(*parts(x)) - stat(*parts(y)) for x, y in zip(a, b)]))
    return {k: v / sims for k, v in sums.items()}


def coverage(
    s: Setting,
    sims: int,
    keys: Sequence[str] = ("top1", "nll", "ece"),
    seed: int = 0,
    truth_sims: int = TRUTH_SIMS,
    progress: Optional[Callable[[str], None]] = None,
) -> dict:
    """Coverage of the true difference by :func:`~harness.uncertainty.compare.method_level`'s 95% interval over
    ``sims`` simulated studies of setting ``s``, per metric, and how many studies kept the containment invariant
    (every metric's method interval contains its models-fixed interval).

    Returns: ``{"setting", "sims", "truth", "coverage": {key: share}, "floored": {key: share of studies with the
    seed term floored}, "contained", "seconds"}``.
    """
    start = time.perf_counter()
    mu = truth(s, keys, truth_sims)
    rng = np.random.default_rng(seed)
    tic = time.perf_counter()
    hits, floored, contained, last = dict.fromkeys(keys, 0), dict.fromkeys(keys, 0), 0, tic
    for i in range(sims):
        a, b = _study(s, rng)
        r = method_level(a, b, keys=keys, n_boot=500, seed=i)
        ok = True
        for key in keys:
            x = r[key]
            hits[key] += x["lo"] <= mu[key] <= x["hi"]
            floored[key] += bool(x.get("seed_floored"))
            f = x["models_fixed"]
            ok &= x["lo"] <= f["lo"] + 1e-12 and f["hi"] <= x["hi"] + 1e-12
        contained += ok
        now = time.perf_counter()
        if progress is not None and now - last >= 10:
            last = now
            progress(f"  {i + 1}/{sims} simulations, about {(now - tic) / (i + 1) * (sims - i - 1) / 60:.1f} min left")
    return {
        "setting": asdict(s),
        "sims": sims,
        "truth": mu,
        "coverage": {k: v / sims for k, v in hits.items()},
        "floored": {k: v / sims for k, v in floored.items()},
        "contained": contained,
        "seconds": time.perf_counter() - start,
    }


#: the title of the table
TITLE = "Coverage of the seeds-and-images interval"


def run(
    sims: int = 2000,
    keys: Sequence[str] = ("top1", "nll", "ece"),
    out: Path = Path("results/bench/coverage.md"),
    settings: Optional[Sequence[str]] = None,
    progress: Callable[[str], None] = print,
) -> dict:
    """Every setting of :data:`SETTINGS` (or those named), ``sims`` simulations each; writes ``out`` (Markdown)
    and its ``.json`` twin atomically. A coverage within ±2 points of 95% passes.

    Raises:
        ValueError: an unknown setting, or ``out`` or its JSON twin is a file this bench did not write
            (:func:`harness.provenance.check_replaceable`); before any work.
    """
    from harness.io import atomic_write_text
    from harness.provenance import check_replaceable, cpu_details, machine_load, provenance

    names = list(settings or SETTINGS)
    unknown = sorted(set(names) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}: use some of {', '.join(SETTINGS)}")
    check_replaceable(out, TITLE, "results", "harness bench coverage")
    results = {}
    for j, name in enumerate(names, 1):
        progress(f"[coverage] {j}/{len(names)} {name}: {sims} simulations")
        results[name] = coverage(SETTINGS[name], sims, keys, seed=j, progress=progress)
    load = machine_load()
    se = math.sqrt(0.95 * 0.05 / sims)
    lines = [
        f"# {TITLE}",
        "",
        f"Command: `harness bench coverage --sims {sims}`; {sims} simulated studies per setting through "
        "`harness.uncertainty.compare.method_level` (harness/bench/coverage.py says how a study is drawn); "
        f"binomial standard error of a 95% coverage: {se:.3f}. Target: within ±0.02 of 0.95. "
        f"Machine: {cpu_details()}; 1-minute load average "
        f"{load['load_average'][0]:.1f} at the end, niceness {load['nice']}; "
        f"{sum(r['seconds'] for r in results.values()) / 60:.1f} min in all.",
        "",
        "| setting | n seeds | N images | metric | true difference | coverage | seed term floored | "
        "method ⊇ models-fixed | within ±0.02 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        for key in keys:
            c = r["coverage"][key]
            lines.append(
                f"| {name} | {r['setting']['seeds']} | {r['setting']['images']} | {key} | "
                f"{r['truth'][key]:+.5f} | {c:.3f} | {r['floored'][key]:.2f} | {r['contained']}/{r['sims']} | "
                f"{'yes' if abs(c - 0.95) <= 0.02 else 'no'} |"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(lines) + "\n")
    atomic_write_text(
        out.with_suffix(".json"), json.dumps({"provenance": provenance(), "load": load, "results": results}, indent=1)
    )
    return results
