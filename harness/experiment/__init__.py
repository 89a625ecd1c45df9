"""``harness run EXPERIMENT``: pretraining -> ensembles -> VTAB-style transfer -> one report.

An experiment file (YAML, in ``harness/experiments/`` or any path) names the upstream methods and
seeds, the temperature grid of the het methods, the ensemble sizes, an optional multi-label study
and the downstream tasks. Every setting is checked before the first run. Every stage resumes:
upstream runs finish or skip, sweeps skip finished fine-tunes, ensembles and the report are
recomputed from what is on disk. Outputs: run folders under ``runs/<name>/`` and the report under
``results/<name>/``.

Temperature (paper Sec. 4: "τ is chosen from a grid on a held-out set"): for every method with a
noisy head, the first seed is trained at each τ of ``temperature_grid``; the τ with the lowest NLL
on the held-out split (``data.heldout_split``, noisy labels, as a user has them) is kept and the
other seeds are trained at it. The evaluation split is never used to choose anything.
"""

from harness.experiment.config import (
    EXPERIMENTS,
    BudgetSection,
    ConditionSection,
    DownstreamSection,
    Experiment,
    FrontierSection,
    MultilabelSection,
    find_experiment,
    load_experiment,
)
from harness.experiment.stages import records_dir, run_experiment, sync_records
from harness.experiment.validate import validate_experiment

__all__ = [
    "EXPERIMENTS",
    "BudgetSection",
    "ConditionSection",
    "DownstreamSection",
    "Experiment",
    "FrontierSection",
    "MultilabelSection",
    "find_experiment",
    "load_experiment",
    "validate_experiment",
    "records_dir",
    "run_experiment",
    "sync_records",
]
