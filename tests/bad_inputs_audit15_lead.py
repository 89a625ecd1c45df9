"""Bad inputs found by the fifteenth reliability audit that the lead fixed (``audit15 <case id>``)."""

from __future__ import annotations

import numpy as np

from bad_inputs import bad_input


# ------------------------------------------------------------------------------ A15-01: one label, multi-label
@bad_input(
    "uncertainty",
    "harness.uncertainty.multilabel.multilabel_metrics of [10, 1] logits, a maximally wrong binary model (audit15 "
    "A15-01: prec@1, micro_ap and macro_map 1.0, the advice of the single-label K = 1 refusal followed)",
    ValueError,
    r"^logits have K = 1 label \(shape \(10, 1\)\): the multi-label metrics score the examples that have a positive "
    r"label.*for one binary label, give its two classes' log-probabilities \[log\(1 - p\), log p\]",
)
def _multilabel_one_label(tmp):
    from harness.uncertainty import multilabel

    y = np.array([1, 0] * 5)
    multilabel.multilabel_metrics(np.where(y == 1, -8.0, 8.0)[:, None], y[:, None])
