"""A user's ``harness run`` against the committed reference report of the same experiment: which verdicts agree,
which differ (and whether the reference marks them fragile), the largest metric differences per model, and the
machines of both. ``harness run`` prints it and writes ``comparison.md`` beside its report.

Across machines the numbers are not bit-identical (another CPU takes other kernels, bf16 is native or emulated,
another thread count sums in another order), so a verdict may move; a fragile reference verdict (its test at
df = n - 1 disagrees, or the replication study gives it another label) is the first to move. docs/reproducibility.md
says what is bit-identical and what is not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

#: the report.json families whose comparisons carry a verdict
FAMILIES = ("primary_endpoint", "secondary_family", "models_fixed_family")
#: the metrics compared per model (the report's entries)
METRICS = ("top1", "nll", "ece")


def _verdicts(report: dict) -> "dict[tuple, dict]":
    return {
        (r["study"], r["comparison"], r["metric"], r["split"]): r
        for family in FAMILIES
        for r in report.get(family, {}).get("comparisons", [])
    }


def _machine(report: dict) -> str:
    prov = report.get("provenance", {})
    m = prov.get("machine", {})
    cpu = prov.get("cpu_details") or m.get("cpu", "unknown CPU")
    return f"{cpu}, {m.get('cores', '?')} cores; torch {prov.get('versions', {}).get('torch', '?')}; {prov.get('date', '')}"


def compare_reports(own: dict, reference: dict, top: int = 5) -> dict:
    """The comparison of two ``report.json`` of one experiment (module docstring).

    Args:
        own, reference: the two reports (``harness.report.build`` schema).
        top: how many of the largest metric differences to keep.

    Returns:
        ``{"agree": [...], "differ": [...], "only_own", "only_reference", "largest": [...], "machines": {own,
        reference}}``: ``agree`` / ``differ`` rows are ``{"comparison", "metric", "split", "study", "own",
        "reference", "reference_fragile"}``; ``largest`` rows ``{"model", "metric", "own", "reference",
        "difference"}`` sorted by the absolute difference, the NLL and ECE in their units, top-1 as a fraction.
    """
    mine, theirs = _verdicts(own), _verdicts(reference)
    agree, differ = [], []
    for key in [k for k in theirs if k in mine]:
        a, b = mine[key], theirs[key]
        row = {
            "study": key[0],
            "comparison": key[1],
            "metric": key[2],
            "split": key[3],
            "own": a["verdict"],
            "reference": b["verdict"],
            "reference_fragile": bool(b.get("fragile") or b.get("replication") == "fragile"),
        }
        (agree if a["verdict"] == b["verdict"] else differ).append(row)
    entries = {e["label"]: e["metrics"] for e in reference.get("entries", [])}
    largest = [
        {
            "model": e["label"],
            "metric": m,
            "own": e["metrics"][m],
            "reference": entries[e["label"]][m],
            "difference": e["metrics"][m] - entries[e["label"]][m],
        }
        for e in own.get("entries", [])
        if e["label"] in entries
        for m in METRICS
        if m in e["metrics"] and m in entries[e["label"]]
    ]
    largest.sort(key=lambda r: -abs(r["difference"]))
    return {
        "agree": agree,
        "differ": differ,
        "only_own": sorted(" ".join(k[:2]) for k in mine.keys() - theirs.keys()),
        "only_reference": sorted(" ".join(k[:2]) for k in theirs.keys() - mine.keys()),
        "largest": largest[:top],
        "machines": {"own": _machine(own), "reference": _machine(reference)},
    }


def comparison_markdown(c: dict, own_path: str, reference_path: str) -> str:
    """:func:`compare_reports`'s result as the Markdown of ``comparison.md``."""
    n = len(c["agree"]) + len(c["differ"])
    fragile = sum(r["reference_fragile"] for r in c["differ"])
    lines = [
        "# Your run against the reference",
        "",
        f"**{len(c['agree'])} of {n} verdicts agree** with the reference; {len(c['differ'])} differ"
        + (f", {fragile} of which the reference marks fragile." if c["differ"] else "."),
        "",
        f"- yours: `{own_path}` ({c['machines']['own']})",
        f"- reference: `{reference_path}` ({c['machines']['reference']})",
        "",
        "Numbers are not bit-identical across machines (docs/reproducibility.md): a verdict that moves on another "
        "CPU is one the data do not pin down; a difference on the same machine and threads is a change.",
        "",
    ]
    if c["differ"]:
        lines += [
            "## Verdicts that differ",
            "",
            "| comparison | metric | split | yours | reference | fragile there |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['study']}: {r['comparison']} | {r['metric']} | {r['split']} | {r['own']} | {r['reference']} | "
            f"{'yes' if r['reference_fragile'] else 'no'} |"
            for r in c["differ"]
        ]
        lines.append("")
    if c["largest"]:
        lines += [
            "## Largest metric differences",
            "",
            "| model | metric | yours | reference | difference |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['model']} | {r['metric']} | {r['own']:.4f} | {r['reference']:.4f} | {r['difference']:+.4f} |"
            for r in c["largest"]
        ]
        lines.append("")
    for what, keys in (("only in yours", c["only_own"]), ("only in the reference", c["only_reference"])):
        if keys:
            lines += [f"Comparisons {what}: {', '.join(keys)}.", ""]
    return "\n".join(lines)


def compare_with_reference(out: Path, reference: Path, progress: Callable[[str], None] = print) -> Optional[dict]:
    """Compare the report in ``out`` with the reference report folder ``reference``; write ``out/comparison.md``
    (atomically) and say its first line. Nothing (None) when there is no reference report, or ``out`` is it.

    Raises:
        ValueError: a report.json that is not JSON (naming the file).
    """
    from harness.io import atomic_write_text

    mine, theirs = Path(out) / "report.json", Path(reference) / "report.json"
    if not theirs.is_file() or not mine.is_file() or mine.resolve() == theirs.resolve():
        return None
    reports = []
    for path in (mine, theirs):
        try:
            reports.append(json.loads(path.read_text()))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not JSON ({e}): rebuild it with harness run") from e
    c = compare_reports(*reports)
    atomic_write_text(Path(out) / "comparison.md", comparison_markdown(c, str(out), str(reference)) + "\n")
    n = len(c["agree"]) + len(c["differ"])
    progress(
        f"[reference] {len(c['agree'])} of {n} verdicts agree with {reference} ({c['machines']['reference']}); "
        f"{len(c['differ'])} differ: {Path(out) / 'comparison.md'}"
    )
    return c
