"""Analyses of a run folder that need its model again: the covariance analysis of a heteroscedastic run
(paper Sec. 4.1: Table 4's top pairs, Figure 2's ranks, and the test of the learned noise against the
label-noise transition). Its parts are in :mod:`harness.uncertainty.covariance`; this module loads the
model and feeds it the run's evaluation split.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from harness.models import load_model
from harness.runs import data_config, eval_batches, noise_transition
from harness.uncertainty.covariance import analyse, rank_summary, transition_test
from harness.uncertainty.predictions import Predictions


def covariance_analysis(het_run: "str | Path", hom_run: "Optional[str | Path]", hom_preds: Optional[Predictions],
                        top: int = 10) -> dict:
    """The covariance analysis of the het run ``het_run`` (its ``model.pt`` on its evaluation split), with
    Figure 2's ranks against the hom run's predictions ``hom_preds`` on the same examples when given.

    Returns:
        :func:`~harness.uncertainty.covariance.analyse`'s dict, plus ``het_run``, ``hom_run``, the rank
        summary (:func:`~harness.uncertainty.covariance.rank_summary`) when there are ranks, and
        ``transition_test`` (:func:`~harness.uncertainty.covariance.transition_test`; None without a
        label-noise transition or per-pair noise).

    Raises:
        FileNotFoundError: no ``model.pt`` or ``config.yaml`` in ``het_run``.
    """
    het_run = Path(het_run)
    model = load_model(het_run / "model.pt")
    het_preds = Predictions.load(het_run)
    with_hom = hom_preds is not None
    result = analyse(model.head, eval_batches(model, data_config(het_run)), het_preds.class_names, top,
                     het_preds.logits if with_hom else None, hom_preds.logits if with_hom else None,
                     het_preds.index if with_hom else None)
    result.update(het_run=str(het_run), hom_run=str(hom_run) if hom_run is not None else None)
    if result["ranks"]:
        result.update(rank_summary(result["ranks"], result["mean_logit_ranks"], result["num_classes"]))
    transition = noise_transition(het_run)
    result["transition_test"] = None
    if transition is not None and result.get("pair_noise"):
        result["transition_test"] = transition_test(transition, result["pair_noise"])
    return result
