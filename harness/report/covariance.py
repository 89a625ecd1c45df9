"""A report's covariance analysis (paper Sec. 4.1: Table 4's top pairs and Figure 2's ranks): which entry it reads,
the pairs it lists (``harness report --top-pairs``), and its figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from harness.heads.variants import has_factors
from harness.io import atomic_write_bytes
from harness.report.figures import ranks_png
from harness.runs import covariance_analysis

#: a report's entry (:class:`harness.report.build.Entry`, not imported: build imports this module)
Entry = Any

#: the class pairs of the covariance analysis a report lists when ``top_pairs`` is unset (``harness report --top-pairs``)
TOP_PAIRS = 10


def covariance_section(entries: "list[Entry]", top: int) -> Optional[dict]:
    """Table 4 / Figure 2 for the first entry with a low-rank or PE covariance (first member of such an
    ensemble; a diagonal one has nothing to rank classes by), against the first hom entry evaluated on the
    same data (:func:`harness.runs.covariance_analysis`)."""

    het = covariance_model(entries)
    if het is None:
        return None
    hom = next(
        (
            e
            for e in entries
            if e.head.get("covariance") == "none"
            and e.kind == "single"
            and np.array_equal(e.preds.index, het.preds.index)
        ),
        None,
    )
    return covariance_analysis(het.run_dir, hom.run_dir if hom else None, hom.preds if hom else None, top)


def check_top_pairs(top_pairs: int, entries: "list[Entry]", covariance: bool, het: Optional[Entry]) -> None:
    """``top_pairs`` is read by the covariance analysis only: refused (naming each entry's covariance) when it is off
    or no entry has a model it analyses (:func:`covariance_model`), as it would be ignored without a word.

    Raises:
        ValueError: naming the setting, the entries' covariances and the fix.
    """
    if not covariance:
        raise ValueError(
            f"--top-pairs {top_pairs} sets the pairs of the covariance analysis, which --no-covariance leaves out: "
            "drop --top-pairs, or drop --no-covariance"
        )
    if het is None:
        shown = ", ".join(f"{e.label}: covariance {e.head.get('covariance', 'low_rank')}" for e in entries)
        raise ValueError(
            f"--top-pairs {top_pairs} sets the pairs of the covariance analysis of a het model (a low-rank or PE "
            f"covariance, with its model.pt), and no entry has one ({shown}), so it would be ignored: drop "
            "--top-pairs, or add a run of such a model"
        )


def covariance_model(entries: "list[Entry]") -> Optional[Entry]:
    """The entry whose model.pt the covariance analysis reads (:func:`_covariance_section`), if any."""
    het = next((e for e in entries if has_factors(e.head.get("covariance", "low_rank")) and e.run_dir), None)
    return het if het is not None and (het.run_dir / "model.pt").is_file() else None


def covariance_figure(cov: Optional[dict], out: Path) -> Optional[bytes]:
    """Figure 2 of the covariance analysis ``cov`` (:func:`covariance_section`), written as
    ``out/covariance_ranks.png`` when it has ranks: its PNG bytes, else None."""
    if not (cov and cov.get("ranks")):
        return None
    cov_png = ranks_png(cov["ranks"], cov["num_classes"], "Figure 2: het right, hom wrong")
    atomic_write_bytes(out / "covariance_ranks.png", cov_png)
    return cov_png
