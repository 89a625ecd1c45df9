"""The upstream stage: configs, optimisation, training loop, checkpoints and resumption."""

import json
import math
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

import harness.upstream.epochs as epochs
from harness.cli import main
from harness.config import load_config
from harness.models import ModelConfig, build_model, load_model
from harness.upstream.config import OptimSection, UpstreamConfig
from harness.upstream.optim import build_optimizer, lr_multiplier, param_groups
from harness.upstream.train import TrainingDiverged, run

CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"
QUICK = ["train.epochs=2", "model.head.train_mc_samples=8", "model.head.eval_mc_samples=8", "train.log_every=5"]
#: QUICK for a homoscedastic config, whose head refuses sample counts (it draws no noise)
QUICK_HOM = [o for o in QUICK if not o.startswith("model.head.")]


def quick(tmp_path, name="digits_het.yaml", *extra):
    short = QUICK_HOM if "_hom" in name else QUICK
    return load_config(
        UpstreamConfig, CONFIGS / name, [*short, f"output_dir={tmp_path / 'run'}", *extra], distinct=False
    )


@pytest.mark.parametrize(
    "path", sorted(p for p in CONFIGS.glob("*.yaml") if "_base" not in p.name), ids=lambda p: p.stem
)
def test_every_config_loads_builds_and_states_its_command(path):
    text = path.read_text()
    assert "Command:" in text and path.stem in text
    cfg = load_config(UpstreamConfig, path)
    assert cfg.name == path.stem
    k = (
        cfg.model.num_classes
        or {
            "digits": 10,
            "cifar10n": 10,
            "image_folder": 1000,
            "manifest": 18291,
            "tfds": 21843 if cfg.data.name == "imagenet21k" else 1000,
        }[cfg.data.source]
    )
    model = build_model(ModelConfig(cfg.model.backbone, k, dict(cfg.model.head), dict(cfg.model.backbone_kwargs)))
    opt = build_optimizer(model, cfg.optim)
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == sum(p.numel() for p in model.parameters())
    fn = lr_multiplier(cfg.optim, 100, cfg.train.epochs)
    assert 0 < fn(0) <= 1 and fn(100 * cfg.train.epochs - 1) <= 1


def test_param_groups_give_covariance_kernels_their_own_decay():
    model = build_model(
        dict(
            backbone="test_resnet",
            num_classes=10,
            head=dict(covariance="parameter_efficient", num_factors=3, learn_temperature=True),
        )
    )
    groups = {g["name"]: g for g in param_groups(model, 3e-3, 1e-2)}
    cov = {id(p) for p in groups["covariance_kernels"]["params"]}
    head = model.head
    assert cov == {id(head.diag.weight), id(head.scale_het.weight), id(head.scale_hom.weight)}
    assert groups["covariance_kernels"]["weight_decay"] == 1e-2 and groups["kernels"]["weight_decay"] == 3e-3
    assert id(head.temperature_logit) in {id(p) for p in groups["no_decay"]["params"]}
    assert id(head.loc.bias) in {id(p) for p in groups["no_decay"]["params"]}


def test_sgd_weight_decay_is_explicit_l2():
    """One SGD step with weight_decay λ equals a step on loss + (λ/2)||w||²."""
    torch.manual_seed(0)
    w1 = torch.nn.Parameter(torch.randn(4, 3))
    w2 = torch.nn.Parameter(w1.detach().clone())
    x = torch.randn(5, 3)
    opt1 = torch.optim.SGD([{"params": [w1], "weight_decay": 0.1}], lr=0.5, momentum=0.9)
    opt2 = torch.optim.SGD([w2], lr=0.5, momentum=0.9)
    (x @ w1.T).square().sum().backward()
    ((x @ w2.T).square().sum() + 0.05 * w2.square().sum()).backward()
    opt1.step()
    opt2.step()
    torch.testing.assert_close(w1, w2)


def test_schedules():
    step = lr_multiplier(OptimSection(schedule="step", warmup_epochs=1, decay_epochs=[2, 3], decay_factor=0.1), 10, 4)
    assert [round(step(s), 6) for s in (0, 4, 9, 10, 19, 20, 29, 30)] == [0.1, 0.5, 1.0, 1.0, 1.0, 0.1, 0.1, 0.01]
    cos = lr_multiplier(OptimSection(schedule="cosine", lr=1.0, min_lr=0.1), 10, 2)
    assert cos(0) == pytest.approx(1.0) and cos(10) == pytest.approx(0.55) and cos(20) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="unknown optim.schedule"):
        lr_multiplier(OptimSection(schedule="poly"), 10, 2)
    with pytest.raises(ValueError, match="unknown optim.name"):
        build_optimizer(torch.nn.Linear(2, 2), OptimSection(name="lamb"))


def test_digits_run_writes_checkpoint_metrics_predictions(tmp_path):
    cfg = quick(tmp_path)
    run_dir = run(cfg, progress=False)
    for f in (
        "config.yaml",
        "run.json",
        "metrics.json",
        "metrics.jsonl",
        "model.pt",
        "predictions.npz",
        "checkpoints/last.pt",
        "checkpoints/best.pt",
    ):
        assert (run_dir / f).is_file(), f
    summary = json.loads((run_dir / "metrics.json").read_text())
    assert set(summary["metrics"]) >= {"top1", "top5", "nll", "ece"} and summary["epochs"] == 2
    assert summary["label_noise"]["kind"] == "pair_flip" and 0.2 < summary["label_noise"]["realised_rate"] < 0.4
    assert "command" in summary and "torch" in summary["versions"]
    assert summary["eval_noise"] == "counter/1"  # the seeded evaluation's noise, eager or compiled (issue 43)
    pred = np.load(run_dir / "predictions.npz")
    assert pred["logits"].shape == (359, 10) and pred["targets"].shape == (359,)
    assert sorted(pred["index"].tolist()) == list(range(359))
    model = load_model(run_dir / "model.pt").eval()
    assert model.head.covariance_type == "low_rank"
    # running the finished config again does nothing
    before = (run_dir / "metrics.json").stat().st_mtime_ns
    run(cfg, progress=False)
    assert (run_dir / "metrics.json").stat().st_mtime_ns == before


@pytest.mark.parametrize("loader", ["array", "pil"])
def test_interrupted_run_resumes_to_identical_final_metrics(tmp_path, loader):
    extra = ["train.checkpoint_every=4", "train.eval_every=1", f"data.loader={loader}"]
    a = run(quick(tmp_path / "a", "digits_het.yaml", *extra), progress=False)
    b_cfg = quick(tmp_path / "b", "digits_het.yaml", *extra)
    run(b_cfg, progress=False, stop_after_steps=21)  # mid-epoch 2 of 2 (16 steps an epoch)
    assert not (Path(b_cfg.output_dir) / "metrics.json").exists()
    b = run(b_cfg, progress=False)
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert ma["metrics"] == mb["metrics"] and ma["history"] == mb["history"]


KILL_DURING_CHECKPOINT = """
import os, signal, sys
from harness.config import load_config
from harness.upstream.config import UpstreamConfig
from harness.upstream.train import run

real_replace, writes = os.replace, [0]

def replace(src, dst):  # SIGKILL once the n-th last.pt is fully written, before it is renamed into place
    if str(dst).endswith("last.pt"):
        writes[0] += 1
        if writes[0] == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGKILL)
    return real_replace(src, dst)

os.replace = replace
run(load_config(UpstreamConfig, sys.argv[2], sys.argv[3:]), progress=False)
"""


def test_kill_while_writing_a_checkpoint_resumes_to_identical_final_metrics(tmp_path):
    """A kill -9 in the middle of saving the training state (issue: the RNG state and the model were
    two files, and a kill between them made the resumed run differ)."""
    import subprocess
    import sys

    extra = ["train.checkpoint_every=4", "train.eval_every=1"]
    a = run(quick(tmp_path / "a", "digits_het.yaml", *extra), progress=False)
    b_cfg = quick(tmp_path / "b", "digits_het.yaml", *extra)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            KILL_DURING_CHECKPOINT,
            "3",
            str(CONFIGS / "digits_het.yaml"),
            *QUICK,
            *extra,
            f"output_dir={b_cfg.output_dir}",
        ],
        cwd=CONFIGS.parents[1],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    state = torch.load(Path(b_cfg.output_dir) / "checkpoints" / "last.pt", weights_only=True)
    assert state["step"] == 8  # the 2nd checkpoint; the 3rd was being written when the process died
    b = run(b_cfg, progress=False)
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (a, b))
    assert ma["metrics"] == mb["metrics"] and ma["history"] == mb["history"]


def test_run_folder_with_another_config_is_refused(tmp_path):
    run(quick(tmp_path, "digits_hom.yaml", "train.epochs=1"), progress=False)
    with pytest.raises(ValueError, match="different config"):
        run(quick(tmp_path, "digits_hom.yaml", "train.epochs=1", "optim.lr=0.5"), progress=False)


def test_nan_loss_stops_with_a_clear_error_and_keeps_the_checkpoint(tmp_path):
    cfg = quick(tmp_path, "digits_hom.yaml", "train.checkpoint_every=2")
    run(cfg, progress=False, stop_after_steps=2)
    state = (Path(cfg.output_dir) / "checkpoints" / "last.pt").read_bytes()
    cfg2 = quick(tmp_path / "nan", "digits_hom.yaml", "optim.warmup_epochs=0")
    real = epochs.training_loss  # a loss that turns NaN at once (a learning rate that diverges is refused: <= 100)
    with mock.patch.object(epochs, "training_loss", lambda *a, **k: real(*a, **k) * float("nan")):
        with pytest.raises(TrainingDiverged, match="lower optim.lr"):
            run(cfg2, progress=False)
    assert (Path(cfg.output_dir) / "checkpoints" / "last.pt").read_bytes() == state


def test_sigmoid_link_on_single_labels_trains_on_one_hot_targets(tmp_path):
    cfg = quick(tmp_path, "digits_het.yaml", "model.head.link=sigmoid", "train.epochs=1", "train.best_metric=prec@1")
    summary = json.loads((run(cfg, progress=False) / "metrics.json").read_text())
    assert set(summary["metrics"]) == {"prec@1", "sigmoid_nll", "micro_ap", "macro_map", "ece"}


def _write_images(root: Path, n: int, seed: int = 0) -> "list[str]":
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(root / f"{i}.png")
        paths.append(f"{root.name}/{i}.png")
    return paths


def test_manifest_multilabel_run(tmp_path):
    data = tmp_path / "manifest"
    rng = np.random.default_rng(0)
    for split, n in (("train", 48), ("val", 16)):
        paths = _write_images(data / f"img_{split}", n)
        lines = [
            json.dumps({"path": p, "labels": sorted(set(rng.integers(0, 6, rng.integers(1, 3)).tolist()))})
            for p in paths
        ]
        (data / f"{split}.jsonl").write_text("\n".join(lines))
    (data / "classes.txt").write_text("\n".join(f"c{i}" for i in range(6)))
    cfg = load_config(
        UpstreamConfig,
        None,
        [
            f"output_dir={tmp_path / 'run'}",
            "data.source=manifest",
            "data.multilabel=true",
            f"data.path={data}",
            "data.eval_split=val",
            "data.batch_size=16",
            "data.image_size=16",
            "train.epochs=1",
            "train.best_metric=prec@1",
            "model.head.link=sigmoid",
            "model.head.covariance=parameter_efficient",
            "model.head.num_factors=2",
            "model.head.train_mc_samples=4",
            "model.head.eval_mc_samples=4",
            "model.head_bias_init=-3",
        ],
    )
    run_dir = run(cfg, progress=False)
    pred = np.load(run_dir / "predictions.npz")
    assert pred["targets"].shape == (16, 6) and set(np.unique(pred["targets"])) <= {0.0, 1.0}
    with pytest.raises(ValueError, match=r"holds label sets \(multi-hot targets\), which need the sigmoid link"):
        run(
            load_config(
                UpstreamConfig,
                None,
                [
                    f"output_dir={tmp_path / 'run2'}",
                    "data.source=manifest",
                    "data.multilabel=true",
                    f"data.path={data}",
                    "data.eval_split=val",
                    "data.batch_size=16",
                ],
            ),
            progress=False,
        )


def test_cli_runs_upstream_and_reports_bad_input(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "upstream",
            "--config",
            str(CONFIGS / "digits_hom.yaml"),
            "--no-progress",
            *(o for o in QUICK_HOM if not o.startswith("train.epochs=")),  # each key once on the command line
            "train.epochs=1",
            f"output_dir={tmp_path / 'cli'}",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "cli" / "metrics.json").is_file()
    res = CliRunner().invoke(main, ["upstream", "--config", str(CONFIGS / "digits_hom.yaml"), "optim.lrr=1"])
    assert res.exit_code != 0 and "lrr" in res.output
    res = CliRunner().invoke(
        main,
        [
            "upstream",
            "--config",
            str(CONFIGS / "digits_hom.yaml"),
            "model.backbone=resnet_5O",
            f"output_dir={tmp_path / 'bad'}",
        ],
    )
    assert res.exit_code != 0 and "unknown backbone" in res.output
    res = CliRunner().invoke(main, ["upstream", "--config", str(tmp_path / "missing.yaml")])
    assert res.exit_code != 0


@pytest.mark.skipif(
    not (CONFIGS.parents[2] / "shared" / "data" / "cifar10n" / "cifar10_jpeg.zip").is_file(),
    reason="../shared/data/cifar10n not present",
)
def test_cifar10n_worse_labels_short_schedule(tmp_path):
    """Issue acceptance: a CIFAR-10N run on the worse labels completes a short CPU schedule and
    reports clean-test accuracy, NLL and ECE."""
    root = CONFIGS.parents[2] / "shared" / "data" / "cifar10n"
    cfg = load_config(
        UpstreamConfig,
        CONFIGS / "cifar10n_het.yaml",
        [
            f"data.path={root}",
            f"output_dir={tmp_path / 'c10n'}",
            "model.backbone=test_resnet",
            "train.epochs=1",
            "data.limit_train=512",
            "data.limit_eval=256",
            "data.num_workers=0",
            "data.batch_size=64",
            "model.head.train_mc_samples=8",
            "model.head.eval_mc_samples=16",
        ],
    )
    summary = json.loads((run(cfg, progress=False) / "metrics.json").read_text())
    assert {"top1", "nll", "ece"} <= set(summary["metrics"])
    assert "worse labels" in summary["train_data"] and "clean" in summary["eval_data"]


TWO_PROCESSES = """
import sys
from functools import partial
from accelerate import debug_launcher
from harness.config import load_config
from harness.upstream.config import UpstreamConfig
from harness.upstream.train import run

def main(out_dir):
    cfg = load_config(UpstreamConfig, "upstream/configs/digits_het.yaml",
                      ["train.epochs=2", "model.head.train_mc_samples=8", "model.head.eval_mc_samples=8",
                       f"output_dir={out_dir}", "train.checkpoint_every=3"])
    run(cfg, progress=False)

debug_launcher(partial(main, sys.argv[1]), num_processes=2)
"""


def test_two_process_data_parallel_run_gathers_each_example_once(tmp_path, debug_launcher_port):
    """accelerate's debug_launcher: 2 CPU processes (gloo DDP), as `accelerate launch` would start.
    Run from a fresh interpreter: forking a process whose OpenMP threads already ran can hang."""
    import subprocess
    import sys

    subprocess.run(
        [sys.executable, "-c", TWO_PROCESSES, str(tmp_path / "ddp")],
        cwd=CONFIGS.parents[1],
        check=True,
        capture_output=True,
        timeout=600,
    )
    summary = json.loads((tmp_path / "ddp" / "metrics.json").read_text())
    assert summary["steps"] == 2 * (1078 // 64 // 2)  # each process takes half of every epoch's batches
    pred = np.load(tmp_path / "ddp" / "predictions.npz")
    assert sorted(pred["index"].tolist()) == list(range(359))
    rng = torch.load(tmp_path / "ddp" / "checkpoints" / "last.pt", weights_only=True)["rng"]
    assert len(rng) == 2 and not torch.equal(rng[0]["torch"], rng[1]["torch"])  # each process's own stream


def test_module_entry_point_for_accelerate_launch():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "harness.upstream", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=CONFIGS.parents[1],
    )
    assert "--config" in out.stdout and "accelerate launch" in out.stdout


def test_bf16_mixed_precision_and_gradient_accumulation(tmp_path):
    cfg = quick(
        tmp_path,
        "digits_het.yaml",
        "train.epochs=1",
        "train.mixed_precision=bf16",
        "train.grad_accum_steps=2",
        "optim.clip_grad_norm=1.0",
        "data.limit_train=256",
        "data.limit_eval=64",
    )
    summary = json.loads((run(cfg, progress=False) / "metrics.json").read_text())
    assert summary["steps"] == 256 // 64 // 2  # optimiser steps: two batches of 64 each
    assert np.isfinite(summary["metrics"]["nll"])


def test_auto_precision_is_bf16_only_where_native_and_is_recorded(tmp_path, monkeypatch):
    from harness.training import precision

    for native, want in ((True, "bf16"), (False, "no")):
        monkeypatch.setattr(precision, "native_bf16", lambda device_type="cpu", native=native: native)
        assert precision.resolve("auto", "cpu") == want
        assert precision.resolve("bf16", "cpu") == "bf16" and precision.resolve("no", "cpu") == "no"
    with pytest.raises(ValueError, match="unknown mixed precision 'fp8'"):
        precision.resolve("fp8")
    monkeypatch.undo()
    cfg = quick(tmp_path, "digits_hom.yaml", "train.epochs=1", "train.mixed_precision=auto")
    run_dir = run(cfg, progress=False)
    want = "bf16" if precision.native_bf16("cpu") else "no"  # this machine's answer (its CPU flags)
    assert json.loads((run_dir / "run.json").read_text())["mixed_precision"] == want
    assert json.loads((run_dir / "metrics.json").read_text())["mixed_precision"] == want


def _bf16_dtypes() -> dict:
    """The dtypes a bf16 model prepared by accelerate computes in, on a CPU; run in a fresh process (accelerate
    holds one mixed precision per process: harness.training.loop)."""
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16", cpu=True)
    model = build_model(
        dict(
            backbone="resnet10_32px_w32",
            num_classes=10,
            head=dict(covariance="low_rank", num_factors=3, train_mc_samples=4),
        )
    )
    model = accelerator.prepare(model.to(memory_format=torch.channels_last))
    seen = {}
    model.backbone.conv1.register_forward_hook(lambda m, i, o: seen.update(conv=o.dtype))
    model.head.register_forward_hook(lambda m, i, o: seen.update(head=o.dtype))
    out = model(torch.randn(4, 3, 32, 32).contiguous(memory_format=torch.channels_last))
    out.logsumexp(-1).sum().backward()
    seen["out"] = out.dtype
    seen["fp32 parameters and gradients"] = all(
        p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters()
    )
    return seen


def test_bf16_on_cpu_runs_the_backbone_in_bf16_and_the_head_in_fp32():
    from harness.training.loop import in_fresh_process

    seen = in_fresh_process(_bf16_dtypes)
    assert seen["conv"] == torch.bfloat16 and seen["head"] == torch.float32 and seen["out"] == torch.float32
    assert seen["fp32 parameters and gradients"]


def test_non_finite_evaluation_stops_the_run_and_json_stays_valid(tmp_path):
    from accelerate import Accelerator

    from harness.io import json_dumps
    from harness.upstream.train import predict_loader

    class HalfNaN(torch.nn.Module):
        def forward(self, x):
            out = torch.zeros(x.shape[0], 3)
            out[::2] = float("nan")
            return out

    loader = [(torch.zeros(4, 1), torch.zeros(4, dtype=torch.long), torch.arange(4))]
    with pytest.raises(TrainingDiverged, match="non-finite logits for 2 of 4 examples"):
        predict_loader(HalfNaN(), loader, Accelerator(cpu=True), multilabel=False)
    text = json_dumps({"nll": float("nan"), "top1": [1.0, float("inf")]})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON token {c}")) == {
        "nll": None,
        "top1": [1.0, None],
    }


def test_run_lock_removes_orphaned_temporaries_of_killed_writes(tmp_path):
    from harness.io import RunLock

    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    orphan = tmp_path / "run" / "checkpoints" / ".last.pt.abc12345.tmp"  # mkstemp's 8 random characters
    orphan.write_bytes(b"half a checkpoint")
    keep = tmp_path / "run" / "notes.tmp"  # not named as the atomic writer names its temporaries
    keep.write_text("mine")
    with RunLock(tmp_path / "run", subfolders=("checkpoints",)):  # as harness upstream takes it
        assert not orphan.exists() and keep.exists()
        assert f"PID {__import__('os').getpid()}" in (tmp_path / "run" / ".lock.pid").read_text()
    with RunLock(tmp_path / "run"):  # released on exit: the next writer gets it
        pass


def test_pretraining_a_het_head_on_a_pretrained_timm_backbone_records_its_preprocessing(tmp_path):
    """JFT-style fine-tuning: the upstream stage starts from a timm backbone's weights file; the run's model.pt
    keeps the backbone's own normalisation, which the downstream stage then applies."""
    import timm

    timm_net = timm.create_model("resnet10t", num_classes=0)
    torch.save(timm_net.state_dict(), tmp_path / "w.pth")
    cfg = quick(
        tmp_path,
        "digits_het.yaml",
        "train.epochs=1",
        "model.backbone=timm:resnet10t",
        f"model.pretrained_file={tmp_path / 'w.pth'}",
    )
    model = load_model(run(cfg, progress=False) / "model.pt")
    assert model.config.preprocessing["mean"] == pytest.approx([0.485, 0.456, 0.406]) and model.renormalise
    assert model.head.covariance_type == "low_rank"


def test_a_step_schedule_trains_exactly_its_steps_evaluates_every_n_steps_and_resumes_mid_epoch(tmp_path):
    """train.steps (the JFT configs' unit): exactly that many optimiser steps, the last epoch partial; evaluation
    every train.eval_every_steps and at epoch ends; a run killed between evaluations resumes to the same history."""
    extra = [
        "train.steps=20",
        "train.eval_every_steps=6",
        "train.checkpoint_every=4",
        "optim.warmup_steps=5",
        "optim.warmup_epochs=0",
        "optim.schedule=cosine",  # (digits_base.yaml's, without decay points: naming them is refused, audit13 A13-16)
    ]
    a = run(quick(tmp_path / "a", "digits_het.yaml", *extra), progress=False)
    ma = json.loads((a / "metrics.json").read_text())
    assert ma["steps"] == 20 and [h["step"] for h in ma["history"]] == [6, 12, 16, 18, 20]  # 16 steps an epoch
    assert [h["epoch"] for h in ma["history"]][2] == 1 and 1 < ma["history"][3]["epoch"] < 2
    b_cfg = quick(tmp_path / "b", "digits_het.yaml", *extra)
    run(b_cfg, progress=False, stop_after_steps=9)  # after the first evaluation, mid-epoch 1
    b = run(b_cfg, progress=False)
    mb = json.loads((b / "metrics.json").read_text())
    assert ma["metrics"] == mb["metrics"] and ma["history"] == mb["history"]


def test_step_schedules_of_the_learning_rate_and_their_checks():
    from harness.upstream.config import validate

    cfg = OptimSection(lr=1.0, schedule="cosine", warmup_steps=5)
    f = lr_multiplier(cfg, steps_per_epoch=16, epochs=99, total_steps=20)
    assert f(0) == pytest.approx(0.2) and f(4) == pytest.approx(1.0) and f(20) == pytest.approx(0.0)
    assert f(12) == pytest.approx(0.5 * (1 + math.cos(math.pi * 7 / 15)))
    step = lr_multiplier(OptimSection(lr=1.0, schedule="step", decay_steps=[10, 15]), 16, 99, 20)
    assert [step(s) for s in (9, 10, 15)] == pytest.approx([1.0, 0.1, 0.01])
    base = load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml")
    for overrides, message in (
        (["train.steps=0"], "train.steps must be"),
        (["optim.warmup_steps=5", "optim.warmup_epochs=1"], "both set"),
        (["optim.decay_steps=[5]", "optim.decay_epochs=[1]"], "both set"),
        (["train.eval_every_steps=-1"], "train.eval_every_steps must be >= 0"),
    ):
        with pytest.raises(ValueError, match=message):
            validate(load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", overrides))
    validate(base)
