"""Bad inputs the lead found in the twelfth session by reading the code, not by an audit (``gap12 <n>``): rules that
knew only some of the harness's output folders or some of its writers."""

from __future__ import annotations

from bad_inputs_audit8_experiment import _run
from bad_inputs_audit11_trackers import _upstream_tracked

from bad_inputs import bad_input
from bad_inputs_downstream import task_folder
from bad_inputs_uncertainty import make_run


# ------------------------------------------------------------------------------ 1: trackers inside other outputs
@bad_input(
    "trackers",
    "WANDB_MODE=offline WANDB_DIR=<a harness ensemble folder> (gap12 1: the tracker rule knew run and sweep folders "
    "only, so W&B's wandb/ would have been written beside ensemble.json)",
    ValueError,
    r"WANDB_DIR='.*ens' is inside the harness ensemble folder .*ens \(it holds ensemble\.json\), which W&B would fill",
)
def _wandb_dir_in_an_ensemble(tmp):
    (tmp / "ens").mkdir()
    (tmp / "ens" / "ensemble.json").write_text("{}\n")  # what marks a harness ensemble folder
    _upstream_tracked(tmp, "wandb", WANDB_MODE="offline", WANDB_DIR=str(tmp / "ens"))
    assert not (tmp / "ens" / "wandb").exists()


@bad_input(
    "trackers",
    "MLFLOW_TRACKING_URI=sqlite:///<a report folder>/mlflow.db (gap12 1: the tracker rule knew run and sweep folders "
    "only, so MLflow's database would have been written beside report.json)",
    ValueError,
    r"MLFLOW_TRACKING_URI 'sqlite:///[^']*' is inside the harness report folder .*rep \(it holds "
    r"report\.json\), which MLflow would fill",
)
def _mlflow_store_in_a_report(tmp):
    (tmp / "rep").mkdir()
    (tmp / "rep" / "report.json").write_text("{}\n")  # what marks a harness report folder
    _upstream_tracked(tmp, "mlflow", MLFLOW_TRACKING_URI=f"sqlite:///{tmp / 'rep' / 'mlflow.db'}")
    assert not (tmp / "rep" / "mlflow.db").exists()


# ------------------------------------------------------------------------------ 2: build_ensemble without the lock
@bad_input(
    "outputs",
    "harness.ensemble_folder.build_ensemble([a, b], 'ens') while another ensemble writes ens (gap12 2: only the CLI "
    "took --out's lock, so the Python entry point, and harness run's ensembles, could replace another's ensemble)",
    ValueError,
    r"ens is being written by another process \(PID .*\): another harness ensemble is being written there; wait for "
    r"it to finish, or choose another --out than .*ens",
)
def _build_ensemble_twice_at_once(tmp):
    from harness.ensemble_folder import build_ensemble
    from harness.io import RunLock

    a, b = make_run(tmp / "a", seed=0), make_run(tmp / "b", seed=1)
    with RunLock(tmp / "ens", what="the other ensemble"):  # another process's ensemble, still computing
        try:
            build_ensemble([a, b], tmp / "ens")
        finally:
            assert not (tmp / "ens" / "ensemble.json").exists(), "an ensemble written beside the other writer's"


# ------------------------------------------------------------------------------ 3: a transfer split of one example
@bad_input(
    "experiment",
    "downstream.tasks=[birds=<a custom task whose train800 list has one image>:5] with a BatchNorm backbone (gap12 3: "
    "refused by the sweep only when the transfer stage started, after every upstream run had trained)",
    ValueError,
    r"task birds's train800 split has 1 example\(s\), fine-tuned as one forward pass of them all \(a split smaller "
    r"than downstream\.settings\.micro_batch=\d+ is not cut into passes\), and backbone test_resnet .*BatchNorm.*list "
    r"2 or more examples in the task's train800\.txt",
)
def _experiment_transfer_split_of_one(tmp):
    sizes = {"train800": 1, "val200": 10, "train800val200": 11, "test": 12}
    task = task_folder(tmp, sizes=sizes)
    _run(tmp, f"downstream={{tasks: ['birds={task}:5'], preset: demo}}")


# ------------------------------------------------------------------------------ 4: a grid extension's run folder
@bad_input(
    "experiment",
    "a method named het_t3 beside method het with temperature_grid=[1,2] and grid_extensions=1 (gap12 4: the run "
    "folder check knew the grid's values only, and het's extension above the edge, τ=3, is run het_t3_s0)",
    ValueError,
    r"methods\.het at τ=3 \(an extension past the grid's edge, grid_extensions\), seed 0 and methods\.het_t3, "
    r"seed 0 would share the run folder .*upstream/het_t3_s0.*rename method 'het' or method 'het_t3'",
)
def _grid_extension_named_like_a_method(tmp):
    _run(
        tmp,
        "methods={het: {covariance: diagonal}, het_t3: {covariance: none, overrides: [data.label_noise.seed=5]}}",
        "temperature_grid=[1,2]",
        "grid_extensions=1",
    )
