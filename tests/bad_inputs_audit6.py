"""Bad inputs found by the sixth reliability audit (2026-11-28, issue 42) in the experiment file and the task specs:
names that name nothing, advice that missed the fix (``audit6 <case id>``). The other areas' cases of that audit are
in ``bad_inputs_audit6_*.py``."""

from __future__ import annotations

import click

from bad_inputs import bad_input, bad_settings, handled
from bad_inputs_downstream import CLI_ERROR, downstream, task_folder
from bad_inputs_safety import _experiment

bad_settings(
    "experiment",
    "`harness run` with {} (audit6, refused before any run)",
    lambda tmp, o: _experiment(tmp, o),
    [
        (
            "a replication that names no experiment (Y04: rc 0, the report silent on it)",
            "replication=nope_experiment",
            r"replication 'nope_experiment' names no experiment \(no experiment 'nope_experiment': give a YAML path "
            r"or one of .*digits_replication",
        ),
        (
            "confusable pairs of names the data's classes do not hold (Y06: 'cat/dog' reported as a finding)",
            "confusable_pairs=[[cat,dog]]",
            r"confusable_pairs names 'cat', 'dog', not classes of the data \(its classes: 0, 1, .*e\.g\. \[\[0, 9\]\]",
        ),
        (
            "the seed as a tune key (RT89: 'not a config setting', the fix not given)",
            "methods.ls.tune.key=seed",
            r"method 'ls': tune\.key seed would choose a seed by its held-out score; .*set seeds: \[0, 1, 2\]",
        ),
    ],
)


@bad_input(
    "downstream",
    "a custom task with a negative class count (audit6 RT80: the format message)",
    CLI_ERROR,
    r"NUM_CLASSES must be a whole number >= 1 \(the task's class count\), got -1",
)
def _task_k_negative(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:-1")


@bad_input(
    "downstream",
    "a custom task with a fractional class count (audit6 RT80)",
    CLI_ERROR,
    r"NUM_CLASSES must be a whole number >= 1 \(the task's class count\), got 2\.5",
)
def _task_k_fraction(tmp):
    downstream("--tasks", f"birds={task_folder(tmp)}:2.5")


@bad_input(
    "downstream",
    "a custom task whose test list is empty (audit6 DS_t_emptytest: torch.cat() of no tensors, after the checks)",
    CLI_ERROR,
    r"birds/test\.txt lists no examples: every split of a task is trained or scored on",
)
def _task_empty_test(tmp):
    folder = task_folder(tmp)
    (folder / "test.txt").write_text("")
    downstream("--tasks", f"birds={folder}:5")


@handled(
    "data",
    "a 16-bit grey PNG in a task folder (audit6 DS_t_16bit: every pixel turned white)",
    r"16-bit values 260, 65441, 32768 read as 1, 255, 128",
)
def _sixteen_bit_png(tmp):
    import numpy as np
    from PIL import Image

    from harness.tasks.folder_format import folder_split
    from harness.tasks.taskset import custom_task

    folder = task_folder(tmp)
    Image.fromarray(np.array([[260, 65441, 32768]], dtype=np.uint16)).save(folder / "img" / "0.png")  # PIL mode I;16
    image, _ = folder_split(custom_task(f"birds={folder}:5"), "test", tmp, folder=folder)[0]
    read = np.asarray(image)
    assert read.shape == (1, 3, 3) and (read[..., 0] == read[..., 2]).all()
    return f"16-bit values 260, 65441, 32768 read as {', '.join(str(v) for v in read[0, :, 0])}"


def _shift_images():
    import numpy as np

    return (np.random.default_rng(0).random((4, 32, 32, 3)) * 255).astype(np.uint8), np.arange(4)


@handled(
    "shift",
    "a cached corrupted set whose images were replaced, its file still valid (audit6 V02: used unchecked)",
    r"the altered cache file recomputed: the same pixels as the first computation",
)
def _shift_cache_altered(tmp):
    import numpy as np

    from harness.shift import corruptions as C

    images, index = _shift_images()
    first = C.corrupted(images, index, "shot_noise", 3, 0, tmp)
    path = C.cache_path(images, index, "shot_noise", 3, 0, tmp)
    with np.load(path) as z:
        digest = z["sha256"]
    np.savez(path.with_suffix(""), images=np.zeros_like(first), sha256=digest)  # the same name, other pixels
    assert np.array_equal(C.corrupted(images, index, "shot_noise", 3, 0, tmp), first)
    return "the altered cache file recomputed: the same pixels as the first computation"


@handled(
    "shift",
    "a cached corrupted set cut to 100 bytes (audit6 V03: BadZipFile traceback)",
    r"the truncated cache file recomputed",
)
def _shift_cache_truncated(tmp):
    import numpy as np

    from harness.shift import corruptions as C

    images, index = _shift_images()
    first = C.corrupted(images, index, "shot_noise", 3, 0, tmp)
    path = C.cache_path(images, index, "shot_noise", 3, 0, tmp)
    path.write_bytes(path.read_bytes()[:100])
    assert np.array_equal(C.corrupted(images, index, "shot_noise", 3, 0, tmp), first)
    return "the truncated cache file recomputed: the same pixels"


@bad_input(
    "shift",
    "HARNESS_CACHE naming a file (audit6 V04: '[Errno 20] Not a directory', the variable not named)",
    ValueError,
    r"the cache folder .*cachefile' \(from HARNESS_CACHE\) cannot be made: .*cachefile' is a file; point HARNESS_CACHE",
)
def _shift_cache_is_file(tmp):
    import os

    from harness.shift import corruptions as C

    (tmp / "cachefile").write_text("")
    images, index = _shift_images()
    before = os.environ.get("HARNESS_CACHE")
    os.environ["HARNESS_CACHE"] = str(tmp / "cachefile")
    try:
        C.corrupted(images, index, "shot_noise", 3, 0)
    finally:
        if before is None:
            del os.environ["HARNESS_CACHE"]
        else:
            os.environ["HARNESS_CACHE"] = before


@bad_input(
    "experiment",
    "harness run --sync-records for an experiment with records: false (audit6 Y19: '0 saved', nothing said)",
    ValueError,
    r"experiment 'digits' keeps no records \(records: false\), so --sync-records has nothing to save or restore",
)
def _sync_without_records(tmp):
    from harness.experiment import load_experiment
    from harness.experiment.stages import sync_records_locked

    sync_records_locked(load_experiment("digits", (f"runs_root={tmp / 'runs'}", f"results_root={tmp / 'res'}")))


@bad_input(
    "report",
    "harness report into a folder that cannot be written (audit6 D03: the bare '[Errno 30] Read-only file system')",
    click.ClickException,
    r"the report folder .*below/rep cannot be written \(.*\): choose a writable folder \(choose another --name or "
    r"--out-root\)",
)
def _report_read_only(tmp):
    from bad_inputs_safety import _read_only
    from bad_inputs_uncertainty import _cli, make_run

    make_run(tmp / "a", 0)
    _cli("report", str(tmp / "a"), "--out-root", str(_read_only(tmp)), "--name", "rep")


@bad_input(
    "shift",
    "harness shift --severities 5-1, a range from high to low (audit6 S03: 'no severity')",
    click.BadParameter,
    r"'5-1' runs from high to low, so it holds no severity: write 1-5",
)
def _severities_reversed(tmp):
    from bad_inputs_uncertainty import _cli, make_run

    make_run(tmp / "a", 0)
    _cli("shift", "-m", str(tmp / "a"), "--corruptions", "gaussian_noise", "--severities", "5-1")


@bad_input(
    "shift",
    "harness shift --device tpu (the device checked as downstream's and fewshot's are)",
    click.ClickException,
    r"unknown device 'tpu' \(--device\): use cpu, cuda or cuda:N",
)
def _shift_device_unknown(tmp):
    from bad_inputs_uncertainty import _cli, make_run

    make_run(tmp / "a", 0)
    try:
        _cli("shift", "-m", str(tmp / "a"), "--corruptions", "none", "--device", "tpu")
    finally:
        assert not (tmp / "a" / "shift").exists(), "work started before the error"


bad_settings(
    "data",
    "harness data {} --seed -1 (audit6 P03, T01: numpy's 'expected non-negative integer', --seed not named)",
    lambda tmp, cmd: _cli_seed(tmp, cmd),
    [
        ("pack", "pack", r"-1 is not in the range 0<=x<=4294967295"),
        ("tasks-cifar", "tasks-cifar", r"-1 is not in the range 0<=x<=4294967295"),
    ],
    click.BadParameter,
)


def _cli_seed(tmp, cmd: str) -> None:
    from bad_inputs_uncertainty import _cli

    if cmd == "pack":
        _cli("data", "pack", "digits", str(tmp / "out"), "--shard-size", "64", "--seed", "-1")
    else:
        _cli("data", "tasks-cifar", "--data", str(tmp), "--out", str(tmp / "out"), "--seed", "-1")


@bad_input(
    "sources",
    "harness downstream --upstream hf-hub: with no name (audit6 RT77: 'no config.json from the hub', the empty name "
    "not said)",
    click.ClickException,
    r"hf-hub:: the repository name is empty; give hf-hub:ORG/NAME",
)
def _hf_hub_empty(tmp):
    downstream("--upstream", "hf-hub:", "--tasks", "demo_digit")


@bad_input(
    "export",
    "save_pretrained into a folder that cannot be written (audit6 D06: a raw OSError from pathlib)",
    ValueError,
    r"save_pretrained's folder .*below/exp cannot be written \(.*\): choose a writable folder \(save into another",
)
def _save_read_only(tmp):
    from harness.models import ModelConfig, build_model

    from bad_inputs_safety import _read_only

    build_model(ModelConfig("test_resnet", 10, {"covariance": "none"})).save_pretrained(_read_only(tmp) / "exp")
