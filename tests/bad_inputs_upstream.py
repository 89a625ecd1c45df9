"""Bad inputs of the upstream stage (configs, data, run folders): each gets a clear error before
any work, or, for data found broken later, one that names the file."""

import errno
import io
import json
import os
import zipfile

import click
import numpy as np
from PIL import Image

from bad_inputs import ROOT, bad_input, bad_settings

CONFIGS = ROOT / "upstream" / "configs"
QUICK = ["train.epochs=1", "data.limit_train=128", "data.limit_eval=32"]
#: few Monte Carlo samples, for the configs whose head draws noise (a hom head refuses sample counts)
FEW_SAMPLES = ["model.head.train_mc_samples=4", "model.head.eval_mc_samples=4"]


def _run(tmp, *overrides, config="digits_het.yaml", **kw):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig
    from harness.upstream.train import run

    hom = "hom" in config or "model.head.covariance=none" in overrides
    cfg = load_config(
        UpstreamConfig,
        CONFIGS / config,
        [*QUICK, *([] if hom else FEW_SAMPLES), f"output_dir={tmp / 'run'}", *overrides],
        distinct=False,  # the case's overrides over the quick defaults
    )
    return run(cfg, progress=False, **kw)


def _cli(*args):
    from click.testing import CliRunner

    from harness.cli import main

    res = CliRunner().invoke(main, list(args), standalone_mode=False, catch_exceptions=True)
    if res.exception is not None:
        raise res.exception
    return res


def _nothing_written(tmp):
    assert not (tmp / "run").exists(), "the run folder was written before the error"


def _config_case(tmp, *overrides):
    try:
        _run(tmp, *overrides)
    finally:
        _nothing_written(tmp)


bad_settings(
    "upstream",
    "config setting `{}`",
    _config_case,
    [
        ("train.epochs=0", "train.epochs=0", r"train.epochs must be >= 1"),
        ("train.eval_every=0", "train.eval_every=0", r"train.eval_every must be >= 1"),
        ("train.log_every=0", "train.log_every=0", r"train.log_every must be >= 1"),
        ("train.grad_accum_steps=0", "train.grad_accum_steps=0", r"train.grad_accum_steps must be >= 1"),
        ("data.limit_train=-5", "data.limit_train=-5", r"data.limit_train must be >= 0"),
        ("train.best_metric=accuracy (not computed)", "train.best_metric=accuracy", r"not computed.*top1"),
        ("model.head.foo=1 (unknown head option)", "model.head.foo=1", r"unknown head option.*model.head.foo"),
        ("model.head.covariance=full", "model.head.covariance=full", r"model.head:.*covariance"),
        (
            "train.mixed_precision=fp8",
            "train.mixed_precision=fp8",
            r"unknown mixed precision 'fp8' \(train.mixed_precision\)",
        ),
        ("train.mixed_precision=fp16 on a CPU", "train.mixed_precision=fp16", r"fp16 does not run on a CPU.*bf16"),
        ("data.loader=fast", "data.loader=fast", r"data\.loader must be one of auto, array, pil, got .fast."),
        (
            "optim.schedule=poly",
            "optim.schedule=poly",
            r"optim\.schedule must be one of step, cosine, constant, got .poly.",
        ),
    ],
)


@bad_input("upstream", "malformed YAML config file", click.ClickException, r"line 3, column 1 is not valid YAML")
def _malformed_yaml(tmp):
    (tmp / "c.yaml").write_text("model:\n  backbone: [resnet18\n")
    _cli("upstream", "--config", str(tmp / "c.yaml"))


@bad_input("upstream", "YAML config holding a list instead of settings", click.ClickException, r"must hold a mapping")
def _list_yaml(tmp):
    (tmp / "c.yaml").write_text("- a\n- b\n")
    _cli("upstream", "--config", str(tmp / "c.yaml"))


@bad_input(
    "upstream",
    "a corrupt JPEG in an image folder",
    ValueError,
    r"cannot read image '.*broken.jpg'.*replace",
    before=False,
)
def _corrupt_jpeg(tmp):
    for split in ("train", "test"):
        for c in ("a", "b"):
            (tmp / "imgs" / split / c).mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (16, 16), (40 * i, 0, 0)).save(tmp / "imgs" / split / c / f"{i}.jpg")
    (tmp / "imgs" / "train" / "b" / "broken.jpg").write_bytes(b"\xff\xd8\xff not really a jpeg")
    _run(
        tmp,
        "data.source=image_folder",
        f"data.path={tmp / 'imgs'}",
        "data.heldout_split=null",
        "data.label_noise={}",
        "data.batch_size=4",
        "data.loader=pil",
    )


@bad_input(
    "upstream",
    "a corrupt image inside the CIFAR-10N zip",
    ValueError,
    r"cannot decode image 'test/cat/0003.jpg'",
    before=False,
)
def _corrupt_zip_member(tmp):
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    rng = np.random.default_rng(0)
    root = tmp / "c10n"
    root.mkdir()
    with zipfile.ZipFile(root / "cifar10_jpeg.zip", "w") as z:
        for i in range(4):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(buf, "JPEG")
            z.writestr(f"test/cat/{i:04d}.jpg", buf.getvalue() if i != 3 else b"garbage")
    np.savez(
        root / "cifar10n_labels.npz",
        classes=np.array(["cat"]),
        clean_label=np.zeros(1, int),
        train_path=np.array(["test/cat/0000.jpg"]),
    )
    cfg = DataConfig(source="cifar10n", path=str(root), cache_dir=str(tmp / "cache"))
    build_split(cfg, "test").pixels(cfg.cache_dir)


@bad_input(
    "upstream",
    "manifest entry `../outside.png` (outside the manifest folder)",
    ValueError,
    r"lies outside the manifest folder.*allow_outside_root",
)
def _manifest_outside(tmp):
    (tmp / "m").mkdir()
    Image.new("RGB", (8, 8)).save(tmp / "outside.png")
    (tmp / "m" / "train.jsonl").write_text(json.dumps({"path": "../outside.png", "labels": [0]}) + "\n")
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    build_split(DataConfig(source="manifest", path=str(tmp / "m")), "train")


@bad_input("upstream", "manifest entry `/etc/passwd` (absolute path)", ValueError, r"'/etc/passwd'.*outside")
def _manifest_absolute(tmp):
    (tmp / "m").mkdir()
    (tmp / "m" / "train.csv").write_text("path,labels\n/etc/passwd,0\n")
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    build_split(DataConfig(source="manifest", path=str(tmp / "m")), "train")


@bad_input(
    "upstream",
    "manifest JSONL line that is not JSON",
    ValueError,
    r'line 2: expected \{"path": \.\.\., "labels": \[ids\]\} \(Expecting',
)
def _manifest_bad_line(tmp):
    (tmp / "m").mkdir()
    (tmp / "m" / "train.jsonl").write_text('{"path": "a.png", "labels": [0]}\n{path: b.png}\n')
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    build_split(DataConfig(source="manifest", path=str(tmp / "m")), "train")


@bad_input(
    "upstream",
    "last.pt replaced by a pickle that runs code when loaded",
    ValueError,
    r"cannot be read as a training state.*delete it",
)
def _malicious_state(tmp):
    _run(tmp, "train.checkpoint_every=1", stop_after_steps=1)

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {tmp / 'pwned'}",))

    import pickle

    (tmp / "run" / "checkpoints" / "last.pt").write_bytes(pickle.dumps(Exploit()))
    try:
        _run(tmp, "train.checkpoint_every=1")
    finally:
        assert not (tmp / "pwned").exists(), "the pickle was executed"


@bad_input(
    "upstream",
    "a second `harness upstream` on a folder another process is writing",
    ValueError,
    r"being written by another process \(PID \d+",
)
def _second_writer(tmp):
    from harness.io import RunLock

    (tmp / "run").mkdir()
    with RunLock(tmp / "run"):  # stands for the other process: the lock is per open file, not per process
        _run(tmp)


@bad_input("upstream", "read-only output folder", ValueError, r"cannot write to .*choose a writable output folder")
def _read_only(tmp):
    if os.geteuid() == 0:  # root writes anywhere: make the folder a file's child instead
        (tmp / "file").write_text("")
        _run(tmp, f"output_dir={tmp / 'file' / 'run'}")
    (tmp / "ro").mkdir()
    (tmp / "ro").chmod(0o500)
    _run(tmp, f"output_dir={tmp / 'ro' / 'run'}")


@bad_input(
    "upstream",
    "disk full while writing a checkpoint",
    OSError,
    r"disk full while writing .*last.pt.*run the "
    r"same command again",
    before=False,
)
def _disk_full(tmp):
    import harness.io

    real = harness.io.os.fsync

    def full(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp") and "last.pt" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    harness.io.os.fsync = full
    try:
        _run(tmp, "train.checkpoint_every=1")
    finally:
        harness.io.os.fsync = real
        assert (tmp / "run" / "config.yaml").is_file() and not list((tmp / "run").rglob("*.tmp"))


@bad_input("upstream", "unknown backbone name", ValueError, r"unknown backbone 'resnet_18'.*Did you mean")
def _unknown_backbone(tmp):
    _run(tmp, "model.backbone=resnet_18")


@bad_input("upstream", "CIFAR-10N data.path that does not exist", FileNotFoundError, r"set data.path to the cifar10n")
def _missing_data(tmp):
    _run(tmp, f"data.path={tmp / 'nowhere'}", config="cifar10n_hom.yaml")


def _experiment(tmp, *overrides):
    from harness.experiment import load_experiment, run_experiment

    exp = load_experiment("digits", (f"runs_root={tmp / 'runs'}", f"results_root={tmp / 'results'}", *overrides))
    try:
        run_experiment(exp, progress=lambda s: None)
    finally:
        assert not (tmp / "runs").exists(), "upstream work started before the error"


bad_settings(
    "experiment",
    "`harness run` with {}",
    _experiment,
    [
        ("seeds=[] (no seeds)", "seeds=[]", r"seeds is empty"),
        ("downstream.preset=bogus", "downstream.preset=bogus", r"downstream.preset 'bogus'|unknown .*preset"),
        ("unknown downstream.settings key", "downstream.settings.lrz=[0.1]", r"downstream.settings:.*lrz"),
        (
            "temperature_grid with τ = 0",
            "temperature_grid=[0.0,1.0]",
            r"temperature_grid must be in \[0\.001, 1000\], got \[0.0, 1.0\]",
        ),
        (
            "temperature_grid values that print alike (audit 2026-11-27: trained once, 'chose' the untrained one)",
            "temperature_grid=[0.1,0.1000000001]",
            r"temperature_grid: 0\.1 and 0\.1000000001 name the same run folder",
        ),
        (
            "tune values that print alike (audit 2026-11-27)",
            "methods.ls.tune.values=[0.1,0.1000000001]",
            r"method 'ls': tune\.values: 0\.1 and 0\.1000000001 name the same run folder",
        ),
        ("a method with an unknown head option", "methods.het.rank=4", r"method 'het': unknown head option.*rank"),
        (
            "ensemble larger than the seeds",
            "ensemble_sizes=[5]",
            r"ensemble_sizes \[5\] must be at most the number of seeds \(3\)",
        ),
        (
            "primary.split=test (not a split the comparisons read; a rule on the schema's field)",
            "primary.split=test",
            r"primary\.split must be one of heldout, eval \(.*\), got 'test'",
        ),
        (
            "a condition's seed out of numpy's range (the dict of sections is checked by key)",
            "conditions.input_dependent.seeds=[-1]",
            r"conditions\.input_dependent\.seeds must be a whole number in \[0, 2\*\*32 - 1\]",
        ),
    ],
)


@bad_input(
    "upstream",
    "checkpoints/last.pt of a hom run in a het run's folder (audit K22: a state_dict traceback)",
    ValueError,
    r"last\.pt does not fit this run's model or optimiser \(RuntimeError: .*\): it is another run's "
    r"state; delete it",
)
def _foreign_state(tmp):
    import shutil

    _run(tmp / "hom", "train.checkpoint_every=1", config="digits_hom.yaml", stop_after_steps=1)
    _run(tmp, "train.checkpoint_every=1", stop_after_steps=1)
    shutil.copy(tmp / "hom" / "run" / "checkpoints" / "last.pt", tmp / "run" / "checkpoints" / "last.pt")
    _run(tmp, "train.checkpoint_every=1")


@bad_input(
    "upstream",
    "a loss that turns NaN before the first checkpoint (audit P6e: the message named a checkpoint that did not exist)",
    RuntimeError,
    r"loss is nan at epoch 0, step \d+; lower optim\.lr .*\(no checkpoint was written yet: the run starts over\)",
    before=False,
)
def _nan_before_checkpoint(tmp):
    from unittest import mock

    import harness.upstream.epochs as epochs

    real = epochs.training_loss  # a loss that turns NaN at once (a learning rate that diverges in the first step
    # is refused before work now: optim.lr <= 100)
    try:
        with mock.patch.object(epochs, "training_loss", lambda *a, **k: real(*a, **k) * float("nan")):
            _run(tmp, "optim.warmup_epochs=0")
    finally:
        assert not (tmp / "run" / "checkpoints" / "last.pt").exists()
