"""The numbers and the report of a transfer study (:mod:`harness.experiment.transfer`): per-image test correctness
of each transfer, the VTAB-1k-style score difference with one interval over upstream seeds and test images
(:func:`score_interval`), the primary and secondary verdict rows, the exploratory NLL and ECE per task
(:func:`calibration_rows`), and ``report.md`` / ``report.json`` in the layout of the paper's Table 6
(:func:`write_report`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from harness.experiment.config import TransferSection


def _final_predictions(folder: Path, task: str) -> list:
    """One transfer's test predictions of ``task``, one per final fine-tuning seed (``predictions/<task>_seed*.npz``).

    Raises:
        FileNotFoundError: none there (the message names the folder).
    """
    from harness.uncertainty.predictions import Predictions

    files = sorted((folder / "predictions").glob(f"{task}_seed*.npz"))
    if not files:
        raise FileNotFoundError(f"no test predictions of {task} in {folder / 'predictions'}; rerun the study")
    return [Predictions.load(f) for f in files]


def _correct(folder: Path, task: str) -> np.ndarray:
    """``[N]`` per-image test correctness of one transfer, averaged over its final fine-tuning seeds."""
    return np.mean([p.logits.argmax(1) == p.targets for p in _final_predictions(folder, task)], axis=0)


def score_interval(
    a: "list[dict[str, np.ndarray]]",
    b: "list[dict[str, np.ndarray]]",
    tasks: "list[str]",
    higher_is_better: bool = True,
) -> dict:
    """The difference a − b of the mean test top-1 over ``tasks`` (the VTAB-1k score), one interval over upstream
    seeds and test images.

    ``a[s][task]`` is upstream seed s's ``[N_task]`` per-image correctness (mean over fine-tuning seeds). The score is
    Σ_t (1/T) mean_i c_ti, a weighted mean of per-image values: each image of task t gets weight N/(T N_t) (N the
    images of all tasks), so the plain mean of the weighted per-image differences over all N images is the score
    difference, and :func:`harness.uncertainty.method.anova_interval` applies to the ``[n, N]`` table of them
    (seeds paired by position; the image effect is each test image's, shared by the seeds).

    Raises: ValueError for no seeds or a task missing on a side (the message names it).
    """
    from harness.uncertainty.method import anova_interval

    n = min(len(a), len(b))
    if n == 0:
        raise ValueError("score_interval needs at least one upstream seed on each side")
    sizes = {t: len(a[0][t]) for t in tasks}
    total = sum(sizes.values())
    rows = [np.concatenate([(a[s][t] - b[s][t]) * total / (len(tasks) * sizes[t]) for t in tasks]) for s in range(n)]
    return anova_interval(np.stack(rows), higher_is_better=higher_is_better)


def _rows(t: TransferSection, correct: "dict[str, list[dict]]", groups: "dict[str, list[str]]") -> "tuple[list, list]":
    """The primary rows (score, each primary method against the reference) and the secondary rows (per-group scores
    of those comparisons, and the score and groups of ``t.secondary``), in the verdict-row form of
    :mod:`harness.experiment.verdicts`."""
    from harness.experiment.verdicts import _row, adjust

    every = [task for ts in groups.values() for task in ts]

    def rows(method: str, ref: str, study: str, scopes: "dict[str, list[str]]") -> list:
        out = []
        for scope, tasks in scopes.items():
            r = score_interval(correct[method], correct[ref], tasks)
            out.append(
                _row(
                    study,
                    f"{method} − {ref}",
                    method,
                    "top1",
                    scope,
                    r["n_seeds"],
                    {**r, "verdict_df_n1": r.get("verdict_df_n1")},
                )
            )
        return out

    primary = [x for m in t.primary for x in rows(m, t.reference, "transfer", {"score": every})]
    secondary = [x for m in t.primary for x in rows(m, t.reference, "transfer", groups)]
    for m, ref in t.secondary.items():
        secondary += rows(m, ref, "transfer", {"score": every, **groups})
    return adjust(primary, "primary"), adjust(secondary)


def _ensemble(folder: Path, task: str) -> Any:
    """One transfer's test predictions of ``task``: the ensemble (mean probability) of its fine-tuning seeds, as the
    sweep's own per-task ensemble (:func:`harness.uncertainty.ensembles.average`)."""
    from harness.uncertainty.ensembles import average

    return average(_final_predictions(folder, task), source=f"{folder.name}/{task}")


def calibration_rows(t: TransferSection, folders: "dict[str, Path]", tasks: "list[str]") -> "list[dict]":
    """The exploratory family: NLL and ECE on each task's test list, each primary method against the reference,
    each transfer taken as the ensemble of its fine-tuning seeds (:func:`_ensemble`), upstream seeds paired by
    position; one interval over upstream seeds and test images per row
    (:func:`harness.uncertainty.compare.method_level`: the two-way ANOVA for NLL, the two-level bootstrap for ECE),
    Holm over the family. Lower is better for both."""
    from harness.experiment.verdicts import _row, adjust
    from harness.uncertainty.compare import method_level

    rows = []
    for task in tasks:
        ref = [_ensemble(folders[r], task) for r in t.methods[t.reference]]
        for m in t.primary:
            found = method_level([_ensemble(folders[r], task) for r in t.methods[m]], ref, keys=("nll", "ece"))
            for key, r in found.items():
                rows.append(_row("transfer", f"{m} − {t.reference}", m, key, task, r["n_seeds"], r))
    return adjust(rows, "exploratory")


def _calibration_lines(rows: "list[dict]") -> "list[str]":
    """The report's exploratory section: the rows of :func:`calibration_rows` as a table."""
    from harness.experiment.verdicts import _p

    lines = [
        "",
        "## NLL and ECE per task",
        "",
        f"Exploratory ({len(rows)} comparisons, Holm together; added after the transfer runs had started, so "
        "not part of the declared families): NLL and ECE on each task's test list of each transfer's ensemble over "
        "its fine-tuning seeds; difference method − reference (lower is better), one 95% interval over upstream "
        "seeds and test images.",
        "",
        "| comparison | task | metric | difference [95% CI] | p | Holm p | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    return lines + [
        f"| {r['comparison']} | {r['split']} | {r['metric']} | {r['mean']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] "
        f"| {_p(r['p'])} | {_p(r['p_holm'])} | {r['verdict']}{', fragile' if r.get('fragile') else ''} |"
        for r in rows
    ]


def _table6(acc: "dict[str, list[dict]]", methods: "list[str]", groups: "dict[str, list[str]]") -> "list[list[str]]":
    """The rows of the Table 6 layout: the score over every task, each group's mean and each task, a cell per
    method of test top-1 (%) mean ± standard deviation over upstream seeds (``acc[method][seed][task]``)."""
    tasks = [x for ts in groups.values() for x in ts]

    def score(per: dict, ts: "list[str]") -> float:
        return float(np.mean([per[x] for x in ts]))

    def cell(vals: "list[float]") -> str:
        return (
            f"{100 * np.mean(vals):.2f} ± {100 * np.std(vals, ddof=1):.2f}" if len(vals) > 1 else f"{100 * vals[0]:.2f}"
        )

    table = [["score (all tasks)"] + [cell([score(a, tasks) for a in acc[m]]) for m in methods]]
    table += [[f"mean ({g})"] + [cell([score(a, ts) for a in acc[m]]) for m in methods] for g, ts in groups.items()]
    return table + [[task] + [cell([a[task] for a in acc[m]]) for m in methods] for task in tasks]


def _protocol(t: TransferSection, settings: Any) -> str:
    """The report's protocol paragraph: the upstream records, the recipe, and the differences from the paper."""
    return (
        f"Upstream: the {t.upstream} experiment's committed models (records: "
        + "; ".join(f"{m}: {', '.join(rs)}" for m, rs in t.methods.items())
        + f"). Transfer recipe: {settings.preset} (lrs {settings.lrs}, steps {settings.steps}, batch "
        f"{settings.batch_size}, {settings.seeds} fine-tuning seed(s), resolution {settings.resolution}), "
        "selection on val200, final fit on train800val200, the same for every model. Differences from the paper: "
        "a 32 px ResNet-10 pretrained on 45,000 CIFAR-10N images (not a ResNet-50 on JFT-300M); tasks built "
        "from CIFAR-10 and digits in VTAB-1k form (not the 19 VTAB-1k datasets); a CPU-sized recipe, not the "
        "BiT-HyperRule's 500-20k steps at 224-384 px."
    )


def _pending_lines(pending: "list[str] | tuple", primary: list, secondary: list) -> "list[str]":
    """The partial report's warning: which comparisons wait for unfinished transfers, and what that does to Holm."""
    if not pending:
        return []
    return [
        "",
        f"**Partial report** (`harness run --no-train` before every transfer finished): pending {', '.join(pending)}. "
        f"Each family's Holm adjustment is over the comparisons present ({len(primary)} primary, {len(secondary)} "
        "secondary), so its adjusted p-values can only grow when the rest are in; rerunning the study without "
        "`--no-train` finishes the transfers and rewrites this report.",
    ]


def _verdict_lines(primary: "list[dict]", secondary: "list[dict]") -> "list[str]":
    """The report's verdict tables: the primary family, then the secondary (differences in points)."""
    from harness.experiment.verdicts import ALPHA, _p

    header = [
        "| comparison | scope | difference, points [95% CI] | p | Holm p | Holm p at df = n − 1 | verdict |",
        "|---|---|---|---|---|---|---|",
    ]

    def line(r: dict) -> str:
        return (
            f"| {r['comparison']} | {r['split']} | {100 * r['mean']:+.2f} [{100 * r['lo']:+.2f}, {100 * r['hi']:+.2f}] "
            f"| {_p(r['p'])} | {_p(r['p_holm'])} | {_p(r.get('p_holm_df_n1'))} | {r['verdict']}"
            f"{', fragile' if r.get('fragile') else ''} |"
        )

    return (
        ["", "## Verdicts", "", *header]
        + [line(r) for r in primary]
        + ["", f"Secondary family ({len(secondary)} comparisons, Holm together; alpha {ALPHA}):", "", *header]
        + [line(r) for r in secondary]
    )


def write_report(
    exp: Any,
    folders: "dict[str, Path]",
    groups: "dict[str, list[str]]",
    settings: Any,
    section: "TransferSection | None" = None,
    pending: "list[str] | tuple" = (),
) -> Path:
    """The study's report from the finished transfers: the bottom line, a table in the layout of the paper's Table 6
    (score ± standard deviation over upstream seeds per method, per group and task), the primary and secondary
    verdicts, and the protocol differences from the paper. Written atomically as report.md and report.json.
    ``section``: the study as far as it has finished (:func:`finished_section`; default ``exp.transfer``), with the
    ``pending`` comparisons named at the top."""
    from harness.io import atomic_write_text
    from harness.provenance import provenance

    t = section or exp.transfer
    tasks = [x for ts in groups.values() for x in ts]
    correct = {m: [{task: _correct(folders[r], task) for task in tasks} for r in recs] for m, recs in t.methods.items()}
    primary, secondary = _rows(t, correct, groups)
    acc = {m: [{task: float(c[task].mean()) for task in tasks} for c in cs] for m, cs in correct.items()}

    table = _table6(acc, list(t.methods), groups)

    bottom = "; ".join(
        f"{r['comparison']} {100 * r['mean']:+.2f} points [{100 * r['lo']:+.2f}, {100 * r['hi']:+.2f}]: {r['verdict']}"
        for r in primary
    )
    ep = exp.primary
    lines = [
        f"# Report: {exp.name}",
        "",
        f"**Bottom line** (primary endpoint: the mean test top-1 over {len(tasks)} tasks, declared {ep.declared}, "
        f"before any transfer run; one 95% interval over upstream seeds and test images, Holm over "
        f"{len(primary)}): {bottom}. The paper (Table 6, JFT ResNet-50s on VTAB-1k): PE-HET +0.88 points over hom "
        "and +0.22 over diagonal, p < 0.05.",
        *_pending_lines(pending, primary, secondary),
        "",
        "Contents: [Table 6 layout](#table-6-layout) · [Verdicts](#verdicts) · "
        "[NLL and ECE per task](#nll-and-ece-per-task) · [Protocol](#protocol)",
        "",
        "## Table 6 layout",
        "",
        "Test top-1 (%) after fine-tuning a fresh homoscedastic head, mean ± std over upstream seeds (each the mean "
        "over its fine-tuning seeds).",
        "",
        "| | " + " | ".join(t.methods) + " |",
        "|---|" + "---|" * len(t.methods),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in table]
    lines += _verdict_lines(primary, secondary)
    calibration = calibration_rows(t, {r: folders[r] for rs in t.methods.values() for r in rs}, tasks)
    lines += _calibration_lines(calibration)
    protocol = _protocol(t, settings)
    prov = provenance()
    written = (
        f"Written by `{prov['command']}` on {prov['date']} ({prov['cpu_details']}; torch "
        f"{prov['versions'].get('torch', '?')})."
    )
    lines += ["", "## Protocol", "", protocol, "", written, ""]
    out = Path(exp.results_root) / exp.name
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    report = {
        "schema": "harness.transfer/1",
        "provenance": prov,
        "name": exp.name,
        "description": exp.description,
        "primary_endpoint": {"declared": {"metric": "score", "date": ep.declared}, "comparisons": primary},
        "secondary_family": {"size": len(secondary), "adjustment": "holm", "comparisons": secondary},
        "exploratory_family": {"size": len(calibration), "adjustment": "holm", "comparisons": calibration},
        "pending": list(pending),
        "per_model": {m: dict(zip(t.methods[m], a)) for m, a in acc.items()},
        "groups": groups,
        "protocol": protocol,
    }
    atomic_write_text(out / "report.json", json.dumps(report, indent=1, default=float))
    return out
