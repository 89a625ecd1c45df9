"""harness.experiment.verdicts, harness.experiment.summary_table and harness.experiment.sigma: the summary's verdicts
and the Σ read-out."""

from __future__ import annotations

import pytest

from harness.experiment.config import Experiment
from harness.experiment.sigma import readout
from harness.experiment.summary_table import findings, summary_section
from harness.experiment.verdicts import adjust, oracle_methods, validate_primary


def _row(method, metric, mean, lo, hi, p, verdict, study="main", split="heldout"):
    return {
        "study": study,
        "comparison": f"{method} − hom",
        "method": method,
        "metric": metric,
        "split": split,
        "scope": "seeds + images",
        "n_seeds": 3,
        "mean": mean,
        "lo": lo,
        "hi": hi,
        "p": p,
        "interval": "",
        "verdict_raw": verdict,
    }


def test_holm_keeps_a_verdict_only_when_the_adjusted_p_is_below_alpha():
    rows = adjust(
        [
            _row("a", "nll", -0.03, -0.04, -0.02, 0.001, "better"),
            _row("b", "nll", -0.01, -0.02, -0.001, 0.04, "better"),
            _row("c", "nll", 0.0, -0.01, 0.01, 0.5, "no detectable difference at n = 3"),
        ]
    )
    # Holm: sorted p 0.001, 0.04, 0.5 -> 3 x 0.001 = 0.003, 2 x 0.04 = 0.08, max(0.08, 0.5) = 0.5
    assert [round(r["p_holm"], 6) for r in rows] == [0.003, 0.08, 0.5]
    assert [r["verdict"] for r in rows] == [
        "better",
        "no detectable difference after Holm",
        "no detectable difference at n = 3",
    ]
    assert all(r["family_size"] == 3 for r in rows)


def test_a_p_value_is_never_printed_on_the_other_side_of_alpha():
    """The CIFAR-10N report printed Holm p 0.0496 as "0.050" beside "better"."""
    from harness.experiment.summary_table import row_cells

    def printed(p):
        return row_cells({**_row("pe", "nll", -0.03, -0.05, -0.01, p, "better"), "p_holm": p, "verdict": ""})[6]

    assert [printed(p) for p in (0.0496, 0.04996, 0.05, 0.0504, 0.12345, 0.0002)] == [
        "0.0496",
        "0.04996",
        "0.050",
        "0.050",
        "0.123",
        "0.0002",
    ]


def test_the_summary_opens_with_the_primary_rows_then_the_survivors():
    primary = adjust([_row("het", "nll", -0.03, -0.04, -0.02, 0.001, "better")])
    secondary = adjust(
        [
            _row("het", "top1", 0.005, -0.001, 0.011, 0.09, "no detectable difference at n = 3", split="eval"),
            _row("het", "ece", -0.01, -0.015, -0.005, 0.0001, "better", split="eval"),
        ]
    )
    out = summary_section(primary, secondary, Experiment(methods={"hom": {}, "het": {}}))
    rows = out["summary"]["rows"]
    assert [r[0] for r in rows] == ["primary", "secondary: main"] and rows[1][2].startswith("ece")
    assert "2 comparisons" in out["summary"]["findings"][1] and "1 keep" in out["summary"]["findings"][1]
    assert out["json"]["secondary_family"]["size"] == 2


def test_an_oracle_control_ahead_of_everything_is_said():
    exp = Experiment(methods={"hom": {}, "het": {}, "fwd": {"covariance": "none", "overrides": ["train.loss=forward"]}})
    assert oracle_methods(exp) == ["fwd"]
    rows = adjust(
        [
            _row("het", "nll", -0.02, -0.03, -0.01, 0.002, "better"),
            _row("fwd", "nll", -0.20, -0.25, -0.15, 0.0001, "better"),
        ]
    )
    text = " ".join(findings(rows, [], ["fwd"]))
    assert "oracle control fwd" in text and "ahead of every method" in text
    rows[1]["mean"] = -0.01  # no longer ahead: no sentence
    assert "oracle" not in " ".join(findings(rows, [], ["fwd"]))


def test_an_oracle_worse_on_the_noisy_heldout_labels_is_said_to_be_scored_on_its_clean_label_estimate():
    rows = adjust(
        [
            _row("het", "nll", -0.02, -0.03, -0.01, 0.002, "better", study="primary"),
            _row("fwd", "nll", 1.62, 1.26, 1.99, 1e-17, "worse", study="primary"),
        ]
    )
    text = " ".join(findings(rows, [], ["fwd"]))
    assert "fwd is scored on what it outputs, its estimate of the clean label" in text
    assert "primary: +1.6200 nll" in text
    rows[1]["verdict"] = "no detectable difference at n = 3"
    assert "clean label" not in " ".join(findings(rows, [], ["fwd"]))
    assert "clean label" not in " ".join(findings(rows, [], []))  # not an oracle: nothing to explain


def test_a_primary_endpoint_the_comparisons_cannot_compute_is_refused_before_work():
    exp = Experiment(methods={"hom": {}})
    exp.primary.metric = "brier"
    with pytest.raises(ValueError, match="primary.metric='brier'.*top1, nll, ece"):
        validate_primary(exp)


def _sigma(group, seed, own, human):
    return {"group": group, "seed": seed, "own_correlation": own, "human_correlation": {"rho": human, "p": 0.001}}


def test_the_sigma_readout_follows_the_preregistered_rule():
    a = [_sigma("a het", s, None, 0.30) for s in range(3)]
    tracks = [_sigma("b het", s, {"rho": 0.7, "p": 0.001}, 0.1) for s in range(3)]
    text = " ".join(readout(a + tracks, "b het", "a het"))
    assert "holds in 3 of 3" in text and "Σ follows the label noise" in text
    similar = [_sigma("b het", s, {"rho": 0.2, "p": 0.3}, 0.5) for s in range(3)]
    text = " ".join(readout(a + similar, "b het", "a het"))
    assert "holds in 0 of 3" in text and "visual similarity" in text
    assert "pending" in " ".join(readout(similar, "b het", "a het"))
