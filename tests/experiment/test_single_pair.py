"""The single-pair design's power calculation (harness.experiment.sigma) and the power functions under it
(harness.uncertainty.stats), against simulation, and the registered plan against its own calculation."""

import numpy as np
import pytest
from scipy import stats as sps

from harness.experiment import load_experiment
from harness.experiment.config import SinglePairSection
from harness.experiment.single_pair import pilot_seeds, seeds_for_power, single_pair_analysis, single_pair_plan
from harness.uncertainty.power import paired_t_power, tost_power


def _simulate(sd, n, mean, margin, alpha=0.05, reps=20000, seed=0):
    x = np.random.default_rng(seed).normal(mean, sd, size=(reps, n))
    m, se = x.mean(1), x.std(1, ddof=1) / np.sqrt(n)
    t_reject = np.abs(m / se) > sps.t.ppf(1 - alpha / 2, n - 1)
    half = sps.t.ppf(1 - alpha, n - 1) * se
    tost = (m - half > -margin) & (m + half < margin)
    return t_reject.mean(), tost.mean()


@pytest.mark.parametrize("sd,n,mean", [(0.108, 9, 0.12), (0.108, 9, 0.0), (0.2, 5, 0.1)])
def test_power_functions_match_simulation(sd, n, mean):
    t_sim, tost_sim = _simulate(sd, n, mean, 0.15)
    assert paired_t_power(sd, n, mean) == pytest.approx(t_sim, abs=0.012)
    assert tost_power(sd, n, 0.15, delta=mean) == pytest.approx(tost_sim, abs=0.012)


def test_power_grows_with_seeds_and_the_plan_is_the_smallest_n():
    n = seeds_for_power(0.108, 0.12, 0.15)
    assert paired_t_power(0.108, n, 0.12) >= 0.8 > paired_t_power(0.108, n - 1, 0.12)
    assert seeds_for_power(0.5, 0.12, 0.15, max_seeds=10) == 11  # unreachable: max + 1


def test_the_registered_plan_is_its_own_calculation():
    design = load_experiment("cifar10n").single_pair
    plan = single_pair_plan(design)
    assert design.planned_seeds == plan["seeds"]
    assert plan["sd_delta"] == pytest.approx(2 * max(design.spread.values()))
    exp = load_experiment("cifar10n")
    for arm in design.arms:  # every arm has the planned seeds (or the pilot's raise, within the cap), paired
        n = len(exp.conditions[arm].seeds)
        assert exp.conditions[arm].seeds == list(range(n))
        assert design.planned_seeds <= n <= design.max_seeds
        assert "train.mixed_precision='no'" in exp.conditions[arm].upstream_overrides


def test_the_pilot_only_raises_the_seeds_within_the_cap():
    d = SinglePairSection(spread={"x": 0.05}, planned_seeds=9, pilot_seeds=5, max_seeds=16)
    assert pilot_seeds([0.0, 0.01, -0.01, 0.02, -0.02], d) == 9  # small spread: the plan stands
    assert pilot_seeds([0.3, -0.3, 0.2, -0.2, 0.0], d) == 16  # large spread: capped
    with pytest.raises(ValueError, match="pilot needs 5"):
        pilot_seeds([0.1, 0.2], d)


def _rows(deltas, seeds, noise_sd=0.0, seed=0):
    """Model rows of both arms whose pair correlations give the seed-paired Δ in ``deltas``: the noisy pair's
    correlation is raised by Δ/2 in its own arm, over a shared visual-similarity baseline (airplane/cat −0.5,
    automobile/truck +0.8)."""
    rng = np.random.default_rng(seed)
    rows = []
    for s, d in zip(seeds, deltas):
        for arm, (ac, at) in (("d1_airplane_cat", (d / 2, 0.0)), ("d2_automobile_truck", (0.0, d / 2))):
            corr = {(0, 3): -0.5 + ac, (1, 9): 0.8 + at}
            pairs = [
                [
                    a,
                    b,
                    2.0 + rng.normal(0, noise_sd) ** 2 + abs(corr.get((a, b), 0.1)),
                    corr.get((a, b), 0.1),
                    abs(corr.get((a, b), 0.1)),
                ]
                for a in range(10)
                for b in range(a + 1, 10)
            ]
            rows.append({"group": f"{arm} het", "seed": s, "pairs": pairs})
    return rows


NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def test_single_pair_analysis_computes_delta_and_each_declared_readout():
    design = load_experiment("cifar10n").single_pair
    seeds = list(range(design.planned_seeds))
    rng = np.random.default_rng(1)
    share = single_pair_analysis(_rows(0.3 + rng.normal(0, 0.05, len(seeds)), seeds), design, NAMES)
    assert share["status"] == "complete" and len(share["per_seed"]) == len(seeds)
    assert share["per_seed"][0]["delta"] == pytest.approx(
        share["per_seed"][0]["s1_d1"]
        - share["per_seed"][0]["s1_d2"]
        - share["per_seed"][0]["s2_d1"]
        + share["per_seed"][0]["s2_d2"]
    )
    assert share["readout"] == "Σ shares noise on the pair the noise affects"
    swap = single_pair_analysis(_rows(-0.3 + rng.normal(0, 0.05, len(seeds)), seeds), design, NAMES)
    assert swap["readout"] == "Σ represents it as a swap"
    same = single_pair_analysis(_rows(rng.normal(0, 0.02, len(seeds)), seeds), design, NAMES)
    assert same["readout"].startswith("Σ encodes the similarity") and same["primary"]["equivalent"]
    # a spread the pilot finds too large raises the seeds to the cap; at the cap the answer may be inconclusive
    wide_deltas = rng.normal(0, 0.4, design.max_seeds)
    assert single_pair_analysis(_rows(wide_deltas[:9], seeds), design, NAMES)["planned"] == design.max_seeds
    wide = single_pair_analysis(_rows(wide_deltas, range(design.max_seeds)), design, NAMES)
    assert wide["readout"].startswith("inconclusive at this power")


def test_single_pair_analysis_does_not_look_at_delta_before_the_planned_seeds():
    design = load_experiment("cifar10n").single_pair
    early = single_pair_analysis(_rows([0.3] * 3, [0, 1, 2]), design, NAMES)
    assert "per_seed" not in early and "primary" not in early and early["status"].startswith("3 of 9")
    pilot = single_pair_analysis(_rows([0.3, 0.1, -0.2, 0.4, 0.0], range(5)), design, NAMES)
    assert "primary" not in pilot and pilot["pilot"]["planned"] >= design.planned_seeds
    assert pilot["pilot"]["sd_delta"] == pytest.approx(np.std([0.3, 0.1, -0.2, 0.4, 0.0], ddof=1))
