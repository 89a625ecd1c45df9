"""VTAB-1k sweeps: selection, final runs, the table, resumption after a kill, submitit, bad input."""

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.downstream.config import SweepSettings
from harness.downstream.sweep import read_records, sweep
from harness.models import build_model, save_model

ROOT = Path(__file__).resolve().parents[2]
TINY = SweepSettings(lrs=[0.01, 0.05], steps=[10, 20], seeds=2, batch_size=32, micro_batch=32, resolution=[32, 32])
CLI_TINY = [
    "--lrs",
    "0.01,0.05",
    "--steps",
    "10,20",
    "--seeds",
    "2",
    "--batch-size",
    "32",
    "--micro-batch",
    "32",
    "--resolution",
    "32,32",
]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    model = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="low_rank", num_factors=3)))
    return str(save_model(model, tmp_path_factory.mktemp("up") / "model.pt"))


def test_demo_sweep_selects_retrains_and_writes_the_table(upstream, tmp_path):
    result = sweep(upstream, ["demo_rotation", "demo_position"], tmp_path, TINY, progress=lambda s: None)
    records = read_records(tmp_path / "runs.jsonl")
    assert len(records) == 2 * 4 + 2 * 2  # 2 tasks x (4 selection + 2 final) runs
    for task in ("demo_rotation", "demo_position"):
        sel = [r for r in records.values() if r["task"] == task and r["phase"] == "select"]
        best = max(sel, key=lambda r: (r["accuracy"], -r["lr"], -r["steps"]))
        assert (result["tasks"][task]["lr"], result["tasks"][task]["steps"]) == (best["lr"], best["steps"])
        assert (tmp_path / "predictions" / f"{task}_seed1.npz").is_file()
        assert all(r["split"] == "val200" for r in sel)
    assert result["groups"]["demo"]["tasks"] == 2 and result["vtab1k_score"] is None
    md = (tmp_path / "vtab.md").read_text()
    assert "Not a VTAB-1k score" in md and "Written by" in md
    assert json.loads((tmp_path / "vtab.json").read_text())["tasks"].keys() == result["tasks"].keys()
    # a rerun does nothing new and gives the same table
    lines = []
    again = sweep(upstream, ["demo_rotation", "demo_position"], tmp_path, TINY, progress=lines.append)
    assert again == result and lines == [f"[downstream] loading the model {upstream}"]  # no run, no phase left


def test_killed_sweep_reruns_only_the_remaining_runs(upstream, tmp_path):
    args = [
        sys.executable,
        "-m",
        "harness.cli",
        "downstream",
        "--upstream",
        upstream,
        "--tasks",
        "demo_digit",
        *CLI_TINY,
        "--out",
        str(tmp_path / "killed"),
    ]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = tmp_path / "killed" / "runs.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and (not store.is_file() or len(store.read_text().splitlines()) < 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done_before = read_records(store)
    assert 2 <= len(done_before) < 6
    with open(store, "a") as f:
        f.write('{"key": "torn')  # a line cut by the kill
    res = CliRunner().invoke(
        main,
        ["downstream", "--upstream", upstream, "--tasks", "demo_digit", *CLI_TINY, "--out", str(tmp_path / "killed")],
    )
    assert res.exit_code == 0, res.output
    assert res.output.count("accuracy") == 6 - len(done_before)  # only the remaining runs
    full = sweep(upstream, ["demo_digit"], tmp_path / "full", TINY, progress=lambda s: None)
    killed = json.loads((tmp_path / "killed" / "vtab.json").read_text())
    assert killed["tasks"] == full["tasks"]


def test_submitit_local_executor_runs_real_processes(upstream, tmp_path):
    pytest.importorskip("submitit")
    settings = SweepSettings(lrs=[0.05], steps=[10], seeds=1, batch_size=32, micro_batch=32, resolution=[32, 32])
    result = sweep(upstream, ["demo_count"], tmp_path, settings, executor="submitit-local")
    assert set(result["tasks"]) == {"demo_count"}
    assert list((tmp_path / "jobs").glob("*_result.pkl"))  # submitit's own job outputs


def test_slurm_jobs_go_to_slurm_or_nowhere(tmp_path, monkeypatch):
    """audit11 A11-24/25: the SLURM job array is submitit's SLURM executor (cluster="slurm"), never the local
    fall-back AutoExecutor picks without SLURM; a key submitit refuses is a ValueError naming it, not its NameError."""
    pytest.importorskip("submitit")
    from submitit.slurm.test_slurm import mocked_slurm  # submitit's own stand-in for SLURM

    from harness.downstream.records import _execute

    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no srun: AutoExecutor alone would run the jobs here
    with pytest.raises(ValueError, match=r"--executor slurm: .*srun.* Submit from a machine of the cluster"):
        _execute([{"key": "k"}], "slurm", tmp_path / "jobs", {"slurm_partition": "gpu"})
    with mocked_slurm(), pytest.raises(ValueError, match=r"--slurm bogus_key=1: Unknown executor 'bogus'"):
        _execute([{"key": "k"}], "slurm", tmp_path / "jobs", {"bogus_key": 1})


def test_a_slurm_fine_tune_gets_the_jobs_time_limit_unless_given():
    """Without --slurm timeout_min a SLURM fine-tune gets JOB_TIMEOUT_MIN (submitit's own default, 5 minutes, would
    end most of them); a given one is kept; --gpus' visible_gpus is submitit-local's only."""
    from harness.downstream.records import JOB_TIMEOUT_MIN, slurm_job_parameters

    assert slurm_job_parameters({"slurm_partition": "gpu"}) == {
        "timeout_min": JOB_TIMEOUT_MIN,
        "slurm_partition": "gpu",
    }
    assert slurm_job_parameters({"timeout_min": 5, "visible_gpus": (0,)}) == {"timeout_min": 5}


def test_slurm_keys_are_checked_before_any_work(upstream, tmp_path, monkeypatch):
    """audit11 A11-23..25: sweep() refuses a --slurm key its executor does not read, and --executor slurm without
    sbatch/srun, before the model is loaded or anything is written."""
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    out = tmp_path / "out"
    cases = [
        ("submitit-local", {"slurm_partition": "gpu"}, "reads only timeout_min of --slurm"),
        ("slurm", {"bogus_key": 1}, "bogus_key is not among the submitit parameters --executor slurm reads"),
        ("slurm", {"slurm_partition": "gpu"}, "this machine has no sbatch and no srun on its PATH"),
    ]
    for executor, slurm, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            sweep(upstream, ["demo_count"], out, TINY, executor=executor, slurm=slurm)
    assert not out.exists()
    # --gpus travels as visible_gpus, which submitit-local reads
    with pytest.raises(ValueError, match="unknown task"):
        sweep(upstream, ["nope"], out, TINY, executor="submitit-local", slurm={"visible_gpus": [0], "timeout_min": 5})


def test_bad_input(upstream, tmp_path):
    with pytest.raises(ValueError, match="unknown task 'cifar1000': did you mean cifar100"):
        sweep(upstream, ["cifar1000"], tmp_path, TINY)
    with pytest.raises(FileNotFoundError, match="no upstream checkpoint"):
        sweep(str(tmp_path / "nope.pt"), ["demo_digit"], tmp_path, TINY)
    with pytest.raises(ValueError, match="unknown executor"):
        sweep(upstream, ["demo_digit"], tmp_path, TINY, executor="ray")
    with pytest.raises(ValueError, match="folder format needs --data-dir"):
        sweep(upstream, ["dtd"], tmp_path / "f", SweepSettings(data_format="folder"))
    with pytest.raises(FileNotFoundError, match="not prepared under data_dir"):
        sweep(upstream, ["dtd"], tmp_path / "t", SweepSettings(data_dir=str(tmp_path / "no_tfds")))
    sweep(
        upstream,
        ["demo_digit"],
        tmp_path / "x",
        SweepSettings(lrs=[0.05], steps=[5], seeds=1, batch_size=32, micro_batch=32, resolution=[32, 32]),
    )
    with pytest.raises(ValueError, match="another upstream checkpoint or settings"):
        sweep(upstream, ["demo_digit"], tmp_path / "x", TINY)
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="cannot be read as a harness model checkpoint"):
        sweep(str(tmp_path / "bad.pt"), ["demo_digit"], tmp_path / "y", TINY)
    import torch

    payload = torch.load(upstream, weights_only=True)
    payload["config"]["backbone"] = "resnet_from_the_future"
    torch.save(payload, tmp_path / "future.pt")
    with pytest.raises(ValueError, match="unknown backbone 'resnet_from_the_future'"):
        sweep(str(tmp_path / "future.pt"), ["demo_digit"], tmp_path / "z", TINY)


def test_custom_task_from_a_folder_and_one_line(upstream, tmp_path):
    folder = _custom_folder(tmp_path / "birds")
    res = CliRunner().invoke(
        main,
        [
            "downstream",
            "--upstream",
            upstream,
            "--tasks",
            f"birds={folder}:5",
            "--lrs",
            "0.05",
            "--steps",
            "3",
            "--batch-size",
            "16",
            "--micro-batch",
            "8",
            "--resolution",
            "32,32",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "out" / "vtab.json").read_text())
    assert table["tasks"]["birds"]["group"] == "custom" and table["groups"]["custom"]["tasks"] == 1
    with pytest.raises(ValueError, match="NAME=FOLDER:NUM_CLASSES"):
        sweep(upstream, ["birds=/x"], tmp_path / "bad", TINY)


def test_learning_rate_scales_with_the_batch():
    from harness.downstream.finetune import FinetuneConfig

    assert FinetuneConfig(lr=0.003, batch_size=128, lr_batch=512).effective_lr == pytest.approx(0.00075)
    assert FinetuneConfig(lr=0.003, batch_size=128).effective_lr == 0.003


def _custom_folder(root, sizes=(("train800", 40), ("val200", 10), ("train800val200", 50), ("test", 12)), k=5):
    """A custom task folder: line ``i`` of a list is image ``img/<split>_<i>.png`` of the split's own (image ``i % 3``'s
    pixels: a hard link to it, a file of its own name, since a list names each image once), label ``i % k``;
    train800val200 lists the lines of train800 then of val200 (one label an image): no held-out image is trained on."""
    import numpy as np
    from PIL import Image

    (root / "img").mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)) for _ in range(3)]
    for split in ("train800", "val200", "test"):
        for j, image in enumerate(images):
            image.save(root / "img" / f"{split}_{j}.png")
    n_train = dict(sizes)["train800"]
    for split, n in sizes:
        own = [(split, i) for i in range(n)]
        if split == "train800val200":
            own = [("train800", i) if i < n_train else ("val200", i - n_train) for i in range(n)]
        for name, i in own:
            if not (root / "img" / f"{name}_{i}.png").exists():
                shutil.copyfile(root / "img" / f"{name}_{i % 3}.png", root / "img" / f"{name}_{i}.png")
        (root / f"{split}.txt").write_text("".join(f"img/{name}_{i}.png {i % k}\n" for name, i in own))
    return root


def test_vtab_md_names_the_preset_actually_used(upstream, tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "downstream",
            "--upstream",
            upstream,
            "--tasks",
            "demo_rotation",
            "--preset",
            "demo",
            "--lrs",
            "0.05",
            "--steps",
            "3",
            "--seeds",
            "1",
            "--out",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    md = (tmp_path / "vtab.md").read_text()
    assert "Recipe: preset `demo`, CPU-sized settings" in md and "Changed from the preset: lrs, steps, seeds." in md
    assert "BiT-HyperRule fine-tuning" not in md and "schedule staircase" in md and "no selection" in md
    recipe = json.loads((tmp_path / "vtab.json").read_text())["recipe"]
    assert (recipe["preset"], recipe["lrs"], recipe["steps"]) == ("demo", [0.05], [3])


def test_presets_vtab_sweep_and_bit_hyperrule(upstream, tmp_path, monkeypatch):
    from harness.downstream import schedules
    from harness.downstream.config import PRESETS

    assert asdict(SweepSettings()) == asdict(SweepSettings(**PRESETS["vtab_sweep"]))  # the default: the VTAB sweep
    assert (SweepSettings().lrs, SweepSettings().steps, SweepSettings().schedule) == (
        [0.001, 0.01],
        [500, 2500],
        "staircase",
    )
    bit = SweepSettings(**PRESETS["bit_hyperrule"])
    assert (bit.lrs, bit.steps, bit.batch_size, bit.lr_batch, bit.schedule) == (
        [0.003],
        [None],
        512,
        512,
        "bit_hyperrule",
    )
    with pytest.raises(ValueError, match="preset 'bit' was renamed.*vtab_sweep.*bit_hyperrule"):
        PRESETS["bit"]
    # the rule's 500 steps shrunk to 5 so the run takes seconds; everything else is the preset's
    monkeypatch.setattr(schedules, "bit_hyperrule_supports", lambda n: (1, 2, 3, 4, 5))
    settings = SweepSettings(
        **{**PRESETS["bit_hyperrule"], "batch_size": 16, "micro_batch": 16, "resolution": [32, 32]}
    )
    result = sweep(upstream, ["demo_count"], tmp_path, settings, progress=lambda s: None)
    records = list(read_records(tmp_path / "runs.jsonl").values())
    # nothing to select; then one fine-tune on train800 scored on val200, which only fits the temperature
    assert [(r["phase"], r["lr"], r["steps"]) for r in records] == [("final", 0.003, 5), ("select", 0.003, 5)]
    assert result["tasks"]["demo_count"]["steps"] == 5
    md = (tmp_path / "vtab.md").read_text()
    assert "Recipe: preset `bit_hyperrule`, the BiT-HyperRule as published" in md
    assert "Changed from the preset: batch_size, micro_batch, resolution." in md
    assert "lr {0.003} (given for batch 512, scaled linearly)" in md


def test_every_split_is_checked_before_the_first_run(upstream, tmp_path):
    from PIL import Image

    root = tmp_path / "vtab-1k"
    (root / "dtd" / "images").mkdir(parents=True)
    Image.new("RGB", (20, 20)).save(root / "dtd" / "images" / "a.png")
    (root / "dtd" / "images" / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    # each line an image of its own (a copy of a.png: a list names each image once, and a hard link is that image);
    # train800val200 is train800 and val200 together, and the test split's images are its own (images/test_<i>.png)
    lines = {s: [f"images/{s}_{i}.png {i % 47}" for i in range(n)] for s, n in (("train800", 800), ("val200", 200))}
    lines["train800val200"] = lines["train800"] + lines["val200"]
    lines["test"] = [f"images/test_{i}.png {i % 47}" for i in range(1880)]
    for split in ("train800", "val200", "test"):
        for line in lines[split]:
            shutil.copyfile(root / "dtd" / "images" / "a.png", root / "dtd" / line.split()[0])
    for split, listed in lines.items():
        (root / "dtd" / f"{split}.txt").write_text("".join(f"{line}\n" for line in listed))
    settings = SweepSettings(**{**asdict(TINY), "data_format": "folder", "data_dir": str(root)})
    test_list = root / "dtd" / "test.txt"
    own = [f"images/test_{i}.png 1" for i in range(1879)]  # the bad last line names an image no other line lists
    for lines, error, match in [
        (own, ValueError, "dtd test has 1879 examples in .*test.txt, VTAB-1k expects 1880"),
        (own + ["images/b.png 1"], ValueError, r"b.png \(listed in .*test.txt line 1880\)"),
        (
            own + ["images/c.png 1"],
            FileNotFoundError,
            "1 of 1880 images listed in .*test.txt do not exist",
        ),
        (
            own + ["images/a.png 47"],
            ValueError,
            r"test.txt line 1880: label 47; labels must lie "
            r"in \[0, 47\)",
        ),
    ]:
        test_list.write_text("\n".join(lines) + "\n")
        with pytest.raises(error, match=match):
            sweep(upstream, ["dtd"], tmp_path / "out", settings)
        assert not (tmp_path / "out").exists()  # found before any run (and before anything was written)


def test_custom_tasks_can_turn_flip_and_crop_off(upstream, tmp_path, monkeypatch):
    from harness.tasks import views
    from harness.tasks.taskset import custom_spec, custom_task

    folder = _custom_folder(tmp_path / "counts")
    task = custom_task(f"counts={folder}:5:no-flip:no-crop")
    assert (task.flip, task.crop, task.num_classes) == (False, False, 5) and custom_spec(
        task
    ) == f"counts={folder}:5:no-flip:no-crop"
    assert (custom_task(f"c={folder}:5:no-crop").flip, custom_task(f"c={folder}:5").crop) == (True, True)
    seen, build = [], views.transforms
    monkeypatch.setattr(views, "transforms", lambda flip, crop, *a: seen.append((flip, crop)) or build(flip, crop, *a))
    for spec, want in ((f"counts={folder}:5:no-flip:no-crop", (False, False)), (f"birds={folder}:5", (True, True))):
        res = CliRunner().invoke(
            main,
            [
                "downstream",
                "--upstream",
                upstream,
                "--tasks",
                spec,
                "--lrs",
                "0.05",
                "--steps",
                "1",
                "--batch-size",
                "8",
                "--micro-batch",
                "8",
                "--resolution",
                "32,24",
                "--out",
                str(tmp_path / "out" / spec.split("=")[0]),
            ],
        )
        assert res.exit_code == 0, res.output
        assert seen and set(seen) == {want}
        seen.clear()


def test_custom_task_names_are_unique_and_not_taken(tmp_path):
    from harness.tasks.taskset import expand_tasks

    folder = _custom_folder(tmp_path / "c")
    assert len(expand_tasks([f"c={folder}:5", f"c={folder}:5"])) == 1  # the same task twice
    with pytest.raises(ValueError, match="two custom tasks are named 'c'"):
        expand_tasks([f"c={folder}:5", f"c={tmp_path}:3"])
    for name, taken in (
        ("dtd", "the VTAB-1k task dtd"),
        ("Pets", "the VTAB-1k task oxford_iiit_pet"),
        ("natural", "a task group"),
        ("demo_count", "a demo task"),
    ):
        with pytest.raises(ValueError, match=f"custom task name '{name}' is already {taken}: .* my_{name}="):
            expand_tasks([f"{name}={folder}:5"])
    with pytest.raises(ValueError, match="custom task name .* must be a plain name"):
        expand_tasks([f"../x={folder}:5"])


def test_custom_label_range_error_names_the_task_line(upstream, tmp_path):
    folder = _custom_folder(tmp_path / "birds", k=7)
    with pytest.raises(
        ValueError,
        match=r"train800.txt line 6: label 5; labels must lie in \[0, 5\) .* say so in its "
        f"task line: birds={folder}:7",
    ):
        sweep(upstream, [f"birds={folder}:5"], tmp_path / "out", TINY)


def test_a_missing_gpu_is_reported_before_any_work(upstream, tmp_path):
    import torch

    with pytest.raises(ValueError, match="--device cuda:99: (no CUDA GPU .* use --device cpu|only .* GPU)"):
        sweep(upstream, ["demo_digit"], tmp_path / "out", SweepSettings(**{**asdict(TINY), "device": "cuda:99"}))
    assert not (tmp_path / "out").exists()
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda: no CUDA GPU is usable"):
            sweep(upstream, ["demo_digit"], tmp_path / "out", SweepSettings(**{**asdict(TINY), "device": "cuda"}))


def test_a_sweep_folder_written_before_the_new_settings_still_resumes(upstream, tmp_path):
    settings = SweepSettings(lrs=[0.05], steps=[2], seeds=1, batch_size=16, micro_batch=16, resolution=[32, 32])
    old = {k: v for k, v in asdict(settings).items() if k not in ("allow_outside_paths", "preset")}
    tmp_path.joinpath("sweep.json").write_text(
        json.dumps({"upstream": str(Path(upstream).resolve()), "settings": {**old, "schedule": "bit"}})
    )
    sweep(upstream, ["demo_digit"], tmp_path, settings, progress=lambda s: None)
    # a write killed mid-way leaves its temporary: the resumed sweep removes it (audit 2026-11-27 item 9)
    orphans = [tmp_path / ".sweep.json.abcd1234.tmp", tmp_path / "predictions" / ".demo_digit_seed0.npz.efgh5678.tmp"]
    for orphan in orphans:
        orphan.write_text("partial")
    # how runs execute (memory format, device) may change on resume; the recipe may not
    sweep(
        upstream,
        ["demo_digit"],
        tmp_path,
        SweepSettings(**{**asdict(settings), "channels_last": True}),
        progress=lambda s: None,
    )
    assert not any(o.exists() for o in orphans)
    with pytest.raises(ValueError, match="another upstream checkpoint or settings"):
        sweep(upstream, ["demo_digit"], tmp_path, SweepSettings(**{**asdict(settings), "lrs": [0.01]}))


def test_a_wrong_task_name_is_refused_before_the_model_loads_with_every_kind_of_task(tmp_path, monkeypatch):
    """``--tasks demo_digits``: refused at once (no model load), naming the closest task and every kind of task."""
    import harness.sources

    monkeypatch.setattr(harness.sources, "load_source", pytest.fail)  # a load would fail the test
    with pytest.raises(ValueError) as e:
        sweep(str(tmp_path / "never-read.pt"), ["demo_digits"], tmp_path / "out", TINY)
    text = str(e.value)
    assert "did you mean demo_digit?" in text and "NAME=FOLDER:NUM_CLASSES" in text and "dtd" in text
    assert not (tmp_path / "out").exists()
