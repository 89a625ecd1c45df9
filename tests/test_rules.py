"""harness.rules: a rule declared beside a field, checked in one place with one message format (issue 42 item 1)."""

from dataclasses import dataclass, field
from typing import List, Optional

import pytest

from harness.rules import Rule, check_rules, setting


@dataclass
class Inner:
    rate: float = setting(0.5, low=0, low_open=True, high=1)
    names: List[str] = setting(default_factory=lambda: ["a"], choices=("a", "b"))


@dataclass
class Outer:
    epochs: int = setting(3, low=1)
    steps: Optional[int] = setting(None, low=1, whole=True, note="or null: epochs count")
    sizes: List[int] = setting(default_factory=lambda: [1, 2], low=1, whole=True)
    inner: Inner = field(default_factory=Inner)
    free: float = 7.0  # no rule: never checked


def test_every_declared_rule_is_checked_with_its_key_value_and_rule():
    check_rules(Outer())  # the defaults hold
    cases = [
        (Outer(epochs=0), r"^epochs must be >= 1, got 0$"),
        (Outer(steps=2.5), r"^steps must be a whole number >= 1 \(or null: epochs count\), got 2\.5$"),
        (Outer(sizes=[1, 0]), r"^sizes must be a whole number >= 1, got \[1, 0\]$"),
        (Outer(inner=Inner(rate=0.0)), r"^inner\.rate must be in \(0, 1\], got 0\.0$"),
        (
            Outer(inner=Inner(rate=float("nan"))),
            r"^inner\.rate must be in \(0, 1\], got nan \(numbers must be finite\)$",
        ),
        (Outer(inner=Inner(names=["c"])), r"^inner\.names must be one of a, b, got \['c'\]$"),
    ]
    for config, message in cases:
        with pytest.raises(ValueError, match=message):
            check_rules(config)
    check_rules(Outer(steps=None, free=float("inf")))  # None passes where the type takes it; unruled fields pass


def test_numbers_are_finite_and_never_booleans():
    rule = Rule(low=0)
    assert rule.holds(0) and rule.holds(2.5)
    assert not any(rule.holds(v) for v in (float("inf"), float("nan"), True, "1", -1))
    assert Rule(low=0, high=1, high_open=True).describe() == "in [0, 1)"
    assert Rule(choices=("x",), fix="say x").describe() == "one of x"


def test_the_upstream_schema_declares_its_ranges():
    """The upstream config's ranges live on its fields: validate reads them (a field without a rule is a choice)."""
    import dataclasses

    from harness.data.config import DataConfig
    from harness.upstream.config import OptimSection, TrainSection

    declared = {
        f"{cls.__name__}.{f.name}"
        for cls in (DataConfig, OptimSection, TrainSection)
        for f in dataclasses.fields(cls)
        if "rule" in f.metadata
    }
    for key in (
        "TrainSection.epochs",
        "OptimSection.lr",
        "OptimSection.schedule",
        "DataConfig.loader",
        "DataConfig.source",
    ):
        assert key in declared


def test_the_experiment_schema_declares_its_rules_and_a_dict_of_sections_is_checked_by_key():
    """The experiment file's ranges live on its fields (checked first by validate_experiment)."""
    from harness.experiment.config import (
        ConditionSection,
        Experiment,
        PrimaryEndpoint,
        SinglePairSection,
        TransferSection,
    )

    check_rules(Experiment(conditions={"noisy": ConditionSection()}, single_pair=SinglePairSection()))
    cases = [
        (Experiment(workers=0), r"^workers must be a whole number in \[1, 256\] \(.*\), got 0$"),
        (
            Experiment(seeds=[0, 2**32]),
            r"^seeds must be a whole number in \[0, 2\*\*32 - 1\] .*, got \[0, 4294967296\]$",
        ),
        (Experiment(grid_extensions=-1), r"^grid_extensions must be a whole number >= 0, got -1$"),
        (Experiment(ensemble_sizes=[1]), r"^ensemble_sizes must be a whole number >= 2 \(.*\), got \[1\]$"),
        (
            Experiment(conditions={"noisy": ConditionSection(seeds=[1.5])}),
            r"^conditions\.noisy\.seeds must be a whole number in \[0, 2\*\*32 - 1\]",
        ),
        (
            Experiment(single_pair=SinglePairSection(alpha=1.0)),
            r"^single_pair\.alpha must be in \(0, 0\.5\) \(TOST's 1 - 2·alpha interval\), got 1\.0$",
        ),
        (
            Experiment(transfer=TransferSection(sizes=[800, 0])),
            r"^transfer\.sizes must be 2 numbers, each a whole number >= 1 \(train, val\)",
        ),
        (Experiment(primary=PrimaryEndpoint(split="test")), r"^primary\.split must be one of heldout, eval"),
        (
            Experiment(temperature_grid=[1.0, float("nan")]),
            r"^temperature_grid must be in \[0\.001, 1000\], got \[1\.0, nan\] \(numbers must be finite\)$",
        ),
    ]
    for config, message in cases:
        with pytest.raises(ValueError, match=message):
            check_rules(config)


def test_a_sized_rule_wants_exactly_that_many_values():
    @dataclass
    class Stats:
        std: Optional[List[float]] = setting(None, size=3, low=0, low_open=True)

    check_rules(Stats())
    check_rules(Stats(std=[0.2, 0.3, 0.4]))
    for bad in ([0.2, 0.3], [0.2, 0.3, 0.0], 0.5, [0.2, 0.3, float("inf")]):
        with pytest.raises(ValueError, match=r"^std must be 3 numbers, each > 0, got "):
            check_rules(Stats(std=bad))
