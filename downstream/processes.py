"""A sweep over several processes, and its trackers.

**Processes.** Under ``accelerate launch --num_processes N -m harness.cli downstream ...`` (one process per GPU, or
``--cpu`` for CPU processes) the N processes split each phase of a sweep (:func:`harness.downstream.sweep.sweep`):
process r takes the r-th, (r+N)-th, ... of the phase's runs not done yet (the selection runs of every task, then
the final seeds), trains each on its own device (:func:`harness.downstream.finetune.finetune`: a run is never split
across processes) and appends its record to ``runs.jsonl`` (one ``write`` each); after each phase the processes wait
for each other and read every record back, so each makes the same choices; the main process writes the table. A
single process (no launcher) runs everything itself, as before.

**Trackers** (``--log-with``, :mod:`harness.training.trackers`): the main process logs the sweep's whole header
(upstream model, settings, tasks) as parameters, every finished fine-tune's accuracy and NLL on the split it is
scored on (``select/<task>/lr<lr>_steps<steps>/accuracy``, ``final/<task>/seed<s>/accuracy``, ...), the per-task
test accuracy and the mean over tasks, and ``vtab.md`` / ``vtab.json`` (as artefacts or text) with the table.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

#: the MLflow experiment / W&B project of sweeps (unless MLFLOW_EXPERIMENT_NAME / WANDB_PROJECT name one)
PROJECT = "harness-downstream"


@dataclass
class Processes:
    """This process's place among the processes of a launch (``rank`` of ``world``; ``state`` accelerate's
    ``PartialState``, None for a single process)."""

    rank: int = 0
    world: int = 1
    state: Any = None

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, todo: Sequence[Any]) -> list:
        """This process's part of ``todo``: every ``world``-th item from its ``rank``."""
        return list(todo[self.rank :: self.world])

    def wait(self) -> None:
        """Wait for every process (nothing with one)."""
        if self.state is not None:
            self.state.wait_for_everyone()


def processes(device: str = "cpu") -> Processes:
    """The processes of this launch: accelerate's ``PartialState`` when a launcher started several (``WORLD_SIZE``
    > 1), on CPUs for ``device`` cpu or ``accelerate launch --cpu``; a single process otherwise (no accelerate state
    is made, so the process keeps whatever device a later ``Accelerator`` chooses)."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return Processes()
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    state = PartialState(cpu=device == "cpu" or parse_flag_from_env("ACCELERATE_USE_CPU"))
    return Processes(state.process_index, state.num_processes, state)


def run_label(rec: dict) -> str:
    """A finished run's tracker key: ``<phase>/<task>/lr<lr>_steps<steps>[_tau<τ>][_seed<s>]`` (final runs by
    seed), with characters trackers refuse replaced by ``_``."""
    tau = "" if rec.get("temperature") is None else f"_tau{rec['temperature']:g}"
    what = f"seed{rec['seed']}" if rec["phase"] == "final" else f"lr{rec['lr']:g}_steps{rec['steps']}{tau}"
    return re.sub(r"[^\w.\-/ ]", "_", f"{rec['phase']}/{rec['task']}/{what}")


class SweepLog:
    """The trackers of a sweep (main process; none when ``names`` is empty): use as a context; :meth:`runs` logs
    the records not logged yet, :meth:`table` the final table and files."""

    def __init__(self, names: Sequence[str], out: Path, header: dict, tasks: Sequence[str]) -> None:
        from harness.training.trackers import Tracking

        config = {**header, "tasks": list(tasks)}
        self.tracking = Tracking(names, PROJECT, out.name, out, config) if names else None
        self.logged: "set[str]" = set()

    def __enter__(self) -> "SweepLog":
        if self.tracking is not None:
            self.tracking.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.tracking is not None:
            self.tracking.__exit__(*exc)

    def runs(self, records: Iterable[dict]) -> None:
        """Each record's accuracy and NLL, once, at the step of its rank among the runs logged."""
        for rec in records:
            if self.tracking is None or rec["key"] in self.logged:
                continue
            self.logged.add(rec["key"])
            label = run_label(rec)
            self.tracking.log({f"{label}/accuracy": rec["accuracy"], f"{label}/nll": rec["nll"]}, step=len(self.logged))

    def table(self, result: dict, out: Path) -> None:
        """Per-task test accuracy (mean over seeds), the mean over tasks (and the VTAB-1k score with all 19), the
        ``vtab.md`` / ``vtab.json`` files and the table's rows."""
        if self.tracking is None:
            return
        values = {f"test/{name}/top1": row["mean"] for name, row in result["tasks"].items()}
        values["test/mean_over_tasks"] = result["mean_over_tasks"]
        if result.get("vtab1k_score") is not None:
            values["test/vtab1k_score"] = result["vtab1k_score"]
        self.tracking.log(values, step=len(self.logged) + 1)
        columns = ["task", "group", "lr", "steps", "test_top1_mean", "test_top1_std", "seeds"]
        rows = [
            [name, r["group"], r["lr"], r["steps"], r["mean"], r["std"], r["seeds"]]
            for name, r in result["tasks"].items()
        ]
        self.tracking.report([out / "vtab.md", out / "vtab.json"], {"vtab": (columns, rows)})


def new_records(store: Path, done: dict, read: Any) -> "Optional[list[dict]]":
    """Read ``store`` back into ``done`` (the records other processes appended); the records that were new."""
    fresh = read(store)
    added = [r for k, r in fresh.items() if k not in done]
    done.update(fresh)
    return added
