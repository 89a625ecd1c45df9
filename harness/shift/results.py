"""The results of one folder's saved shift sets (:mod:`harness.shift.store`), computed from the sets only
(nothing is re-predicted):

- accuracy, NLL and ECE (:mod:`harness.uncertainty.metrics`) on the clean subset and on every corrupted set,
  their means over all corrupted sets (the ImageNet-C-style summary, Hendrycks & Dietterich, ICLR 2019) and
  per severity;
- selective prediction by the maximum probability: risk-coverage curves and AURC (:mod:`harness.uncertainty.ood`);
- OOD detection of every OOD set against the clean subset: AUROC, AUPR-in, AUPR-out and FPR at 95% TPR for
  1 − max probability, the predictive entropy and, for models with components (het heads' MC samples,
  ensemble members), the mutual information.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from harness.shift.settings import CLEAN, OOD_PREFIX
from harness.shift.store import load_sets
from harness.uncertainty import metrics as M
from harness.uncertainty import ood as O

#: the metrics computed on every clean and corrupted set (names of :data:`harness.uncertainty.metrics.METRICS`)
METRICS = ("top1", "nll", "ece")


def severity(name: str) -> Optional[int]:
    """Severity of a corrupted set's name (``frost-3`` -> 3); None for clean and OOD sets."""
    if name == CLEAN or name.startswith(OOD_PREFIX):
        return None
    return int(name.rsplit("-", 1)[1])


def entry_results(folder: "str | Path") -> Optional[dict]:
    """Metrics of one run or ensemble folder's saved shift sets; None if it has none.

    Returns:
        ``sets`` {set: {top1, nll, ece, aurc}} (clean and corrupted), ``ood`` {OOD set: {score:
        {auroc, aupr_in, aupr_out, fpr95}}}, ``mean_corrupted`` {top1, nll, ece, aurc},
        ``by_severity`` {severity: {top1, nll, ece, aurc}}, ``curves`` (the risk-coverage arrays of
        the clean subset; :func:`add_pooled_curves` adds the pooled corrupted sets common to all entries),
        ``selective`` {set: (confidence [N], correct [N])}, ``index`` of the clean subset, the spec
        of the folder's ``shift.json``.
    """
    loaded = load_sets(folder)
    if loaded is None or CLEAN not in loaded[1]:
        return None
    spec, sets = loaded
    res: dict = {"sets": {}, "ood": {}, "spec": spec, "selective": {}}
    for name, (preds, _) in sets.items():
        if name.startswith(OOD_PREFIX):
            continue
        lp = preds.log_probs()
        m = M.classification_metrics(lp, preds.targets)
        conf, correct = M.top_label(lp, preds.targets)
        res["sets"][name] = {"top1": m["top1"], "nll": m["nll"], "ece": m["ece"], "aurc": O.aurc(conf, correct)}
        res["selective"][name] = (conf, correct)
        if name == CLEAN:
            res["curves"] = {"clean": O.risk_coverage(conf, correct)}
            res["index"] = preds.index
    corrupted = {n: v for n, v in res["sets"].items() if n != CLEAN}
    keys = ("top1", "nll", "ece", "aurc")
    res["mean_corrupted"] = {k: float(np.mean([v[k] for v in corrupted.values()])) for k in keys} if corrupted else {}
    res["by_severity"] = {}
    for s in sorted({severity(n) for n in corrupted}):
        vals = [v for n, v in corrupted.items() if severity(n) == s]
        res["by_severity"][s] = {k: float(np.mean([v[k] for v in vals])) for k in keys}
    clean_preds, clean_ent = sets[CLEAN]
    score_in = O.uncertainty_scores(clean_preds.log_probs(), clean_ent)
    for name, (preds, ent) in sets.items():
        if name.startswith(OOD_PREFIX):
            score_out = O.uncertainty_scores(preds.log_probs(), ent)
            res["ood"][name[len(OOD_PREFIX) :]] = {
                k: O.ood_metrics(score_in[k], score_out[k]) for k in score_in if k in score_out
            }
    return res


def add_pooled_curves(results: "list[dict]", pairs: Sequence["tuple[str, int]"]) -> None:
    """Add to each :func:`entry_results` (in place) the risk-coverage curve ``curves["corrupted"]`` of the
    corrupted sets ``pairs`` (corruption, severity) pooled; nothing for no pairs."""
    if not pairs:
        return
    for r in results:
        sel = [r["selective"][f"{c}-{s}"] for c, s in pairs]
        r["curves"]["corrupted"] = O.risk_coverage(
            np.concatenate([c for c, _ in sel]), np.concatenate([k for _, k in sel])
        )
