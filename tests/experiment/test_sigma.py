"""harness.experiment.sigma: the per-model Mantel rows (one progress line per model) and the pre-registered
read-out, worded from the rows."""

from pathlib import Path

import numpy as np
import pytest

import harness.experiment.sigma as S

K = 8  # 4 disjoint heavy pairs: a perfect match has Mantel p = 4! 2^4 / 8! < 0.01


def _pairs(correlation_of):
    """PairNoise.pairs()-shaped tuples (a, b, Var(u_a − u_b), correlation, |correlation|) for K classes."""
    return [
        (a, b, 1.0 - correlation_of(a, b), correlation_of(a, b), abs(correlation_of(a, b)))
        for a in range(K)
        for b in range(a + 1, K)
    ]


def _transition(heavy):
    t = np.full((K, K), 0.02)
    for a, b in heavy:
        t[a, b] = t[b, a] = 0.3
    return t / t.sum(1, keepdims=True)


HUMAN = _transition([(0, 1), (2, 3), (4, 5), (6, 7)])
PERMUTED = _transition([(0, 2), (1, 3), (4, 6), (5, 7)])


def test_model_rows_test_each_model_against_its_own_and_the_human_noise_and_say_which_model(monkeypatch, tmp_path):
    import harness.runs as R
    from harness.uncertainty.covariance import transition_test

    runs = {}
    for name, own in (("b_het_s0", PERMUTED), ("b_het_s1", PERMUTED), ("a_het_s0", None)):
        d = tmp_path / name
        d.mkdir()
        (d / "model.pt").write_bytes(b"")
        heavy = {(0, 2), (1, 3), (4, 6), (5, 7)} if own is not None else {(0, 1)}  # Σ ties its own noise's pairs
        pairs = _pairs(lambda a, b, h=heavy: 0.8 if (a, b) in h else 0.0)
        runs[name] = (own, pairs)
    monkeypatch.setattr(S, "_has_sigma", lambda d: True)
    monkeypatch.setattr(
        R,
        "covariance_analysis",
        lambda d, *a: {
            "pair_noise": runs[d.name][1],
            **(
                {"transition_test": transition_test(runs[d.name][0], runs[d.name][1])}
                if runs[d.name][0] is not None
                else {}
            ),
        },
    )
    monkeypatch.setattr(R, "noise_transition", lambda d: runs[Path(d).name][0])
    lines = []
    rows = S.model_rows(
        {"b het": [tmp_path / "b_het_s0", tmp_path / "b_het_s1"], "a het": [tmp_path / "a_het_s0"]},
        HUMAN,
        progress=lines.append,
    )
    assert lines == [
        f"[covariance] what Σ follows: {n} ({i} of 3)" for i, n in enumerate(("b_het_s0", "b_het_s1", "a_het_s0"), 1)
    ]
    assert [(r["group"], r["seed"]) for r in rows] == [("b het", 0), ("b het", 1), ("a het", 0)]
    b0 = rows[0]
    assert b0["own_correlation"]["rho"] == pytest.approx(1.0) and b0["own_correlation"]["p"] < 0.01  # its own noise
    assert b0["human_correlation"]["rho"] < 0 and b0["human_correlation"]["p"] > 0.05  # not the human pairs
    assert rows[2]["own_correlation"] is None  # clean labels: no noise of its own


def _row(group, seed, own, human):
    return {
        "group": group,
        "seed": seed,
        "own_correlation": None if own is None else {"rho": own[0], "p": own[1]},
        "human_correlation": {"rho": human[0], "p": human[1]},
    }


@pytest.mark.parametrize(
    "b_own, b_human, verdict",
    [
        ([(0.7, 0.001), (-0.6, 0.002), (0.55, 0.005)], 0.1, "Σ follows the label noise"),
        ([(0.2, 0.3), (0.1, 0.5), (-0.3, 0.2)], 0.9, "encodes visual similarity"),
        ([(0.7, 0.001), (0.47, 0.007), (0.6, 0.001)], 0.9, "mixed"),
    ],
)
def test_the_readout_is_the_preregistered_pattern_that_holds(b_own, b_human, verdict):
    rows = [_row("b het", s, o, (b_human, 1e-4)) for s, o in enumerate(b_own)]
    rows += [_row("a het", s, None, (0.2, 0.2)) for s in range(3)]
    text = S.readout(rows, "b het", "a het")
    k = sum(abs(r) >= S.RHO_TRACK and p < S.P_TRACK for r, p in b_own)
    assert text[0].startswith("Pre-registered criterion 1") and f"holds in {k} of 3 seed(s)" in text[0]
    assert verdict in text[-1]


def test_the_readout_waits_for_both_conditions():
    rows = [_row("b het", 0, (0.7, 0.001), (0.1, 0.3))]
    assert "Read-out pending" in S.readout(rows, "b het", "a het")[-1]
