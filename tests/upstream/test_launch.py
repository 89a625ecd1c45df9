"""Pretraining as a submitit job (harness.upstream.launch): two CPU processes (gloo) through submitit's local executor,
their data shards, their agreement with one process at the same global batch, preemption and requeue, and the
SLURM submission (submitit's own mocked SLURM) and task environment."""

import json
import os
import re
import shutil
import signal
import time
from pathlib import Path
from unittest import mock

import numpy as np
import psutil
import pytest
import submitit
from click.testing import CliRunner

from harness.cli import main
from harness.config import load_config, to_yaml
from harness.upstream.config import UpstreamConfig
from harness.upstream.launch import PretrainJob, Resources, export_distributed_env, submit
from harness.upstream.train import run

CONFIG = Path(__file__).resolve().parents[2] / "upstream" / "configs" / "digits_hom.yaml"
#: a tiny run: the homoscedastic head (no per-process noise), GroupNorm instead of BatchNorm (no per-process batch
#: statistics), 300 training examples, 24 steps (2.7 epochs at a global batch of 32), an evaluation every 8 steps
COMMON = [
    "model.head.covariance=none",
    "model.backbone_kwargs.norm_layer=groupnorm1",
    "data.heldout_split=null",
    "data.limit_train=300",
    "data.limit_eval=200",
    "train.steps=24",
    "train.eval_every_steps=8",
    "optim.warmup_epochs=0",
    "train.log_every=4",
]
#: the largest difference allowed between 2 processes at batch 16 each and 1 process at batch 32, in every final
#: metric and in every logit of the final model: measured 0 (metrics) and 6e-7 (logits); one process at batch 16
#: differs from the batch-32 run by 0.18 in NLL and 0.96 in logits (also measured), so a process that missed the
#: other's gradients or saw the wrong examples would fail it by orders of magnitude
TOLERANCE = 1e-4
WORLD = 2


def _cfg(out: Path, *extra: str) -> UpstreamConfig:
    return load_config(UpstreamConfig, CONFIG, [*COMMON, f"output_dir={out}", *extra], distinct=False)


def _final(run_dir: Path) -> "tuple[dict, np.ndarray]":
    """metrics.json and the final logits in example order."""
    metrics = json.loads((run_dir / "metrics.json").read_text())
    pred = np.load(run_dir / "predictions.npz")
    return metrics, pred["logits"][np.argsort(pred["index"])]


@pytest.fixture(scope="module")
def two_processes(tmp_path_factory) -> Path:
    """An uninterrupted run of 2 CPU processes at batch 16 each, submitted through the command line."""
    out = tmp_path_factory.mktemp("launch") / "two"
    result = CliRunner().invoke(
        main,
        [
            "upstream",
            "--config",
            str(CONFIG),
            "--executor",
            "submitit-local",
            "--tasks-per-node",
            str(WORLD),
            "--slurm",
            "timeout_min=30",
            *COMMON,
            "data.batch_size=16",
            f"output_dir={out}",
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"run folder: {out}" in result.output and "(done, 2 process(es))" in result.output
    return out


def test_each_process_sees_its_own_examples_and_together_the_single_process_batches(tmp_path):
    """The training loader through accelerate.prepare in a 2-task submitit job: per epoch the ranks' examples are
    disjoint, and step k's two batches of 16 are together exactly batch k of 32 of one process (same seed)."""
    cfg = _cfg(tmp_path / "unused", "data.batch_size=16")

    def shard_indices(cfg):  # runs in each task of the job (pickled by value)
        from accelerate import Accelerator

        from harness.data.batched import make_loader
        from harness.data.sources import build_split
        from harness.upstream.launch import export_distributed_env

        env = export_distributed_env(0)
        accelerator = Accelerator()
        base = build_split(cfg.data, cfg.data.train_split)
        loader, ds, sampler = make_loader(cfg.data, base, train=True, seed=cfg.seed)
        loader = accelerator.prepare(loader)
        epochs = []
        for epoch in (0, 1):
            sampler.use_epoch(epoch)
            ds.use_epoch(epoch)
            epochs.append([idx.tolist() for _, _, idx in loader])
        return env.rank, accelerator.num_processes, len(base), epochs

    ex = submitit.AutoExecutor(folder=str(tmp_path / "jobs"), cluster="local")
    ex.update_parameters(nodes=1, tasks_per_node=WORLD, gpus_per_node=0, timeout_min=10)
    results = sorted(ex.submit(shard_indices, cfg).results())
    assert [(r[0], r[1]) for r in results] == [(0, WORLD), (1, WORLD)]  # two processes in one gloo group
    n = results[0][2]
    from harness.data.loading import EpochSampler

    sampler = EpochSampler(n, cfg.seed)
    for epoch in (0, 1):
        sampler.use_epoch(epoch)
        order = list(sampler)
        single = [order[k * 32 : (k + 1) * 32] for k in range(n // 32)]  # one process, batch 32, drop_last
        ranks = [r[3][epoch] for r in results]
        assert [len(b) for b in ranks[0]] == [16] * len(single) == [len(b) for b in ranks[1]]
        seen = [i for b in ranks[0] + ranks[1] for i in b]
        assert len(seen) == len(set(seen))  # disjoint, and no example twice on a rank
        for k, batch in enumerate(single):
            assert sorted(ranks[0][k] + ranks[1][k]) == sorted(batch)
            assert ranks[0][k] == batch[:16] and ranks[1][k] == batch[16:]


def test_two_processes_match_one_process_with_the_same_global_batch(two_processes, tmp_path):
    one = run(_cfg(tmp_path / "one", "data.batch_size=32"), progress=False)
    (m2, logits2), (m1, logits1) = _final(two_processes), _final(one)
    assert json.loads((two_processes / "run.json").read_text())["num_processes"] == WORLD
    assert m2["steps"] == m1["steps"] == 24 and m2["train_images"] == m1["train_images"] == 24 * 32
    for key, value in m1["metrics"].items():
        assert abs(m2["metrics"][key] - value) <= TOLERANCE, key
    assert [h["step"] for h in m2["history"]] == [h["step"] for h in m1["history"]] == [8, 9, 16, 18, 24]
    assert np.abs(logits2 - logits1).max() <= TOLERANCE


@pytest.mark.slow
def test_a_preempted_job_is_requeued_and_ends_as_the_uninterrupted_run(two_processes, tmp_path):
    """submitit's preemption signal to every task (as SLURM sends it) after the first evaluation: the processes
    save the state at the next step, submitit requeues the job, the new tasks resume at that step, and the final
    metrics, history and logits equal the uninterrupted run's exactly."""
    out = tmp_path / "preempted"
    job = submit(
        _cfg(out, "data.batch_size=16"), "submitit-local", Resources(tasks_per_node=WORLD), {"timeout_min": 30}
    )
    deadline = time.monotonic() + 600
    while not (out / "checkpoints" / "last.pt").exists():  # saved at the evaluation of step 8
        assert job.state == "RUNNING" and time.monotonic() < deadline, job.state
        time.sleep(0.02)
    tasks = psutil.Process(int(job.job_id)).children()  # the local controller's tasks
    assert len(tasks) == WORLD
    for task in tasks:
        task.send_signal(getattr(signal, "SIG" + submitit.JobEnvironment.USR_SIG))
    records = job.results()
    assert [r["status"] for r in records] == ["done"] * WORLD
    log = (Path(job.paths.folder) / f"{job.job_id}_0_log.out").read_text()
    assert "this job is preempted" in log and "Requeued job" in log
    stopped = int(re.search(r"stopped at step (\d+) on request", log).group(1))
    resumed = int(re.search(r"resuming at epoch \d+, batch \d+ \(step (\d+)\)", log).group(1))
    assert 8 < stopped == resumed < 24  # the state saved at the signal, not at the step-8 evaluation
    (m, logits), (ref, ref_logits) = _final(out), _final(two_processes)
    assert m["metrics"] == ref["metrics"] and m["history"] == ref["history"]
    assert np.array_equal(logits, ref_logits)


def test_a_slurm_job_asks_for_the_nodes_gpus_and_preemption_signal(tmp_path):
    from submitit.core.utils import DelayedSubmission
    from submitit.slurm.test_slurm import mocked_slurm  # submitit's own stand-in for sbatch

    cfg = _cfg(tmp_path / "run")
    programs = {"srun": "/usr/bin/srun", "sbatch": "/usr/bin/sbatch"}  # SLURM's programs, as a login node has them
    with mocked_slurm(), mock.patch("shutil.which", programs.get):
        job = submit(
            cfg,
            "slurm",
            Resources(nodes=2, gpus_per_node=4),
            {"slurm_partition": "gpu"},
            max_timeouts=5,
            folder=tmp_path / "jobs",
        )
    sbatch = job.paths.submission_file.read_text()
    for line in (
        "--nodes=2",
        "--ntasks-per-node=4",
        "--gpus-per-node=4",
        "--partition=gpu",
        "--time=1440",
        f"--signal={submitit.JobEnvironment.USR_SIG}@90",
        f"--job-name={cfg.name}",
    ):
        assert f"#SBATCH {line}\n" in sbatch, line
    delayed = DelayedSubmission.load(job.paths.submitted_pickle)
    task = delayed.function
    assert isinstance(task, PretrainJob) and task.cfg == cfg and task.gpus_per_node == 4
    assert task.workdir == str(Path.cwd()) and delayed._timeout_countdown == 5
    requeued = task.checkpoint().function  # what submitit resubmits: the same job, the state being in the folder
    assert isinstance(requeued, PretrainJob) and requeued.cfg == cfg and requeued.workdir == task.workdir


DIST = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ACCELERATE_USE_CPU")


def test_a_slurm_task_exports_its_rank_world_size_and_master(monkeypatch):
    """Task 5 of 8 (2 nodes x 4 GPUs, node list gpu[07-08]): the environment torch.distributed's env:// reads."""
    ports = []
    for procid, node, local in ((5, 1, 1), (0, 0, 0)):
        for key in DIST:  # set, then deleted: teardown restores each key as it was (absent included)
            monkeypatch.setenv(key, "")
            monkeypatch.delenv(key)
        for key, value in {
            "SUBMITIT_EXECUTOR": "slurm",
            "SLURM_JOB_ID": "4242",
            "SLURM_NTASKS": "8",
            "SLURM_JOB_NUM_NODES": "2",
            "SLURM_NODEID": str(node),
            "SLURM_PROCID": str(procid),
            "SLURM_LOCALID": str(local),
            "SLURM_JOB_NODELIST": "gpu[07-08]",
        }.items():
            monkeypatch.setenv(key, value)
        env = export_distributed_env(gpus_per_node=4)
        assert {k: os.environ.get(k) for k in DIST[:1] + DIST[2:]} == {
            "MASTER_ADDR": "gpu07",
            "RANK": str(procid),
            "WORLD_SIZE": "8",
            "LOCAL_RANK": str(local),
            "LOCAL_WORLD_SIZE": "4",
            "ACCELERATE_USE_CPU": None,
        }
        assert (env.rank, env.world_size, env.local_rank) == (procid, 8, local)
        ports.append(int(os.environ["MASTER_PORT"]))
    assert ports[0] == ports[1] and 20000 <= ports[0] <= 60000  # every task meets at one port, from the job id
    export_distributed_env(gpus_per_node=0)
    assert os.environ["ACCELERATE_USE_CPU"] == "true"  # CPU processes: accelerate forms a gloo group


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes", "2"], "--executor slurm"),
        (["--tasks-per-node", "2"], "--executor submitit-local"),
        (["--executor", "submitit-local", "--nodes", "2"], "runs on this machine only: use --nodes 1"),
        (["--executor", "slurm", "--gpus-per-node", "4", "--tasks-per-node", "2"], "one process per GPU"),
        (["--executor", "slurm", "--nodes", "0"], "--nodes must be a whole number >= 1"),
        (["--executor", "submitit-local", "--slurm", "timeout_min"], "expected key=value"),
        (["--executor", "submitit-local", "--slurm", "nodes=2"], "give the processes with --nodes"),
        (["--executor", "submitit-local", "--slurm", "color=blue"], "--slurm color=blue"),
        (["--executor", "submitit-local", "train.epochs=0"], "train.epochs must be >= 1"),
        pytest.param(
            ["--executor", "slurm"],
            "this machine has no sbatch and no srun on its PATH (not a SLURM cluster): submit from a machine of the "
            "cluster (a login node), or use --executor submitit-local",
            marks=pytest.mark.skipif(bool(shutil.which("srun") or shutil.which("sbatch")), reason="a SLURM machine"),
        ),
        (
            ["--executor", "submitit-local", "--slurm", "slurm_partition=gpu"],
            "--executor submitit-local runs the jobs on this machine and reads only timeout_min of --slurm",
        ),
        (["--executor", "slurm", "--slurm", "partition=gpu"], "(did you mean slurm_partition?)"),
    ],
)
def test_bad_launches_are_refused_before_anything_is_submitted(tmp_path, args, message):
    result = CliRunner().invoke(main, ["upstream", "--config", str(CONFIG), *args, f"output_dir={tmp_path / 'run'}"])
    assert result.exit_code != 0 and message in result.output, result.output
    # nothing submitted, no run started (submitit may have made its empty folder)
    assert not [p for p in (tmp_path / "run").rglob("*") if p.is_file()]


def test_gpus_this_machine_lacks_are_refused(tmp_path):
    import torch

    have = torch.cuda.device_count()
    result = CliRunner().invoke(
        main,
        [
            "upstream",
            "--config",
            str(CONFIG),
            "--executor",
            "submitit-local",
            "--gpus-per-node",
            str(have + 1),
            f"output_dir={tmp_path / 'run'}",
        ],
    )
    assert result.exit_code != 0 and f"this machine has {have} GPU(s)" in result.output, result.output


def test_an_interrupted_run_resumes_only_with_its_number_of_processes(tmp_path):
    cfg = _cfg(tmp_path / "run")
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(to_yaml(cfg))
    (run_dir / "run.json").write_text(json.dumps({"num_processes": 2}))
    (run_dir / "checkpoints" / "last.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="interrupted with 2 process.*resume it with 2 processes"):
        submit(cfg, "submitit-local", Resources(tasks_per_node=1))
    assert not (run_dir / "submitit").exists()


def test_a_world_size_without_a_process_group_is_refused(tmp_path, monkeypatch):
    """accelerate falls back to one process when it cannot form a group (WORLD_SIZE=2 on CPUs without
    ACCELERATE_USE_CPU): two copies of the same run would write one folder; the run refuses instead."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("ACCELERATE_USE_CPU", raising=False)
    with pytest.raises(ValueError, match="ACCELERATE_USE_CPU=true"):
        run(_cfg(tmp_path / "run"), progress=False)
    assert not (tmp_path / "run").exists()
