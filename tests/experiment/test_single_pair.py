"""The single-pair design's power calculation (harness.experiment.sigma) and the power functions under it
(harness.uncertainty.stats), against simulation, and the registered plan against its own calculation."""

import numpy as np
import pytest
from scipy import stats as sps

from harness.experiment import load_experiment
from harness.experiment.config import SinglePairSection
from harness.experiment.sigma import pilot_seeds, seeds_for_power, single_pair_plan
from harness.uncertainty.stats import paired_t_power, tost_power


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
    for arm in design.arms:  # every arm has its planned seeds, paired across arms
        assert exp.conditions[arm].seeds == list(range(design.planned_seeds))
        assert "train.mixed_precision='no'" in exp.conditions[arm].upstream_overrides


def test_the_pilot_only_raises_the_seeds_within_the_cap():
    d = SinglePairSection(spread={"x": 0.05}, planned_seeds=9, pilot_seeds=5, max_seeds=16)
    assert pilot_seeds([0.0, 0.01, -0.01, 0.02, -0.02], d) == 9            # small spread: the plan stands
    assert pilot_seeds([0.3, -0.3, 0.2, -0.2, 0.0], d) == 16               # large spread: capped
    with pytest.raises(ValueError, match="pilot needs 5"):
        pilot_seeds([0.1, 0.2], d)
