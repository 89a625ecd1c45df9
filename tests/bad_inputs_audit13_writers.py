"""Bad inputs found by the thirteenth reliability audit in the writers of output folders (``audit13 <case id>``):
two harness ensemble commands on one ``--out`` at once, an export or CIFAR task folders written inside another run's
folder, and a custom task folder spelt with ``~`` or ``$``."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import click
import pytest

from bad_inputs import bad_input, handled
from bad_inputs_safety import _cli, _model_pt
from bad_inputs_uncertainty import make_run

INSIDE_RUN = r"is inside the run folder .*runs/base \(it holds run\.json\), which would then hold {}'s files"


def _run(folder: Path, seed: int = 0) -> Path:
    """A finished run folder by hand (``run.json``, saved predictions, a real tiny ``model.pt``)."""
    run = make_run(folder, seed=seed)
    (run / "run.json").write_text("{}")
    _model_pt(run / "model.pt")
    return run


# ------------------------------------------------------------------------------ A13-23: two ensembles on one --out
@bad_input(
    "outputs",
    "harness ensemble --out ens while another harness ensemble writes ens (audit13 A13-23: both rc 0, one ensemble "
    "silently replaced by the other)",
    click.ClickException,
    r"ens is being written by another process \(PID .*\): another harness ensemble is being written there; wait for "
    r"it to finish, or choose another --out than .*ens",
)
def _ensemble_twice_at_once(tmp):
    from harness.io import RunLock

    a, b = make_run(tmp / "a", seed=0), make_run(tmp / "b", seed=1)
    with RunLock(tmp / "ens", what="the other ensemble"):  # the other harness ensemble, still computing
        try:
            _cli("ensemble", "-m", str(a), "-m", str(b), "--out", str(tmp / "ens"))
        finally:
            assert not (tmp / "ens" / "ensemble.json").exists(), "an ensemble written beside the other writer's"


# ------------------------------------------------------------------------------ writers inside another run's folder
@bad_input(
    "outputs",
    "harness.runs.export_run(run, 'runs/base/exp') (audit13 notes A12-19: an export written inside another finished "
    "run's folder; the run's own export, <run>/pretrained, stays allowed)",
    ValueError,
    r"out=.*runs/base/exp " + INSIDE_RUN.format(r"harness\.runs\.export_run") + r".*: give out a folder outside it",
)
def _export_into_other_run(tmp):
    from harness.runs import export_run

    run, base = _run(tmp / "runs" / "a"), _run(tmp / "runs" / "base", seed=1)
    assert (export_run(run, run / "pretrained") / "model.safetensors").is_file()  # its own export: allowed
    with pytest.raises(ValueError, match=r"out=.*runs/a/exp is inside the run folder .*runs/a "):
        export_run(run, run / "exp")  # inside its own run, but not its export folder
    try:
        export_run(run, base / "exp")
    finally:
        assert not (base / "exp").exists(), "an export written inside another run"


@bad_input(
    "outputs",
    "harness data tasks-cifar --out runs/base/tasks (audit13 notes A12-19: CIFAR task folders written inside a "
    "finished run; --out runs/base itself refused too)",
    click.ClickException,
    r"--out .*runs/base/tasks " + INSIDE_RUN.format("harness data tasks-cifar") + r".*: give --out a folder outside",
)
def _tasks_cifar_into_run(tmp):
    base = _run(tmp / "runs" / "base")
    with pytest.raises(
        click.ClickException,
        match=r"--out .*runs/base is the run folder of another harness command \(it holds run\.json\)",
    ):
        _cli("data", "tasks-cifar", "--data", str(tmp / "cifar10n"), "--out", str(base))
    try:
        _cli("data", "tasks-cifar", "--data", str(tmp / "cifar10n"), "--out", str(base / "tasks"))
    finally:
        assert not (base / "tasks").exists(), "task folders written inside a run"


# ------------------------------------------------------------------------------ ~ and $ in a custom task's folder
@handled(
    "tasks",
    "--tasks 'c=~/x:2' (audit13 lead: a custom task folder with ~ read as a folder literally named ~, "
    "'task folder ~/x does not exist'; a $ in it is refused naming the task line)",
    "home folder",
)
def _custom_task_home(tmp):
    from harness.tasks.taskset import expand_tasks

    (tmp / "home" / "x").mkdir(parents=True)
    with mock.patch.dict(os.environ, {"HOME": str(tmp / "home")}):
        (task,) = expand_tasks(["c=~/x:2"])
        assert task.tfds == f"folder:{tmp / 'home' / 'x'}", task.tfds
        with pytest.raises(ValueError, match=r"custom task 'c=\$HOME/x:2': FOLDER='\$HOME/x' holds a \$: .*write"):
            expand_tasks(["c=$HOME/x:2"])
    return f"c=~/x:2 reads {task.tfds[7:]} (the home folder); c=$HOME/x:2 refused naming the task line"
