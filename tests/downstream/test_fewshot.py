"""`harness fewshot` (harness.downstream.fewshot, on harness.tasks.probe): tasks, draws, features, fewshot.json / fewshot.md, bad input."""

import json
import re

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

import harness.downstream.fewshot as F
import harness.tasks.probe as P
from harness.cli import main
from harness.models import build_model, save_model

from bad_inputs_downstream import task_folder


def _cli(*args):
    return CliRunner().invoke(main, ["fewshot", *args])


def test_a_timm_model_with_a_weights_file_end_to_end(tmp_path):
    import timm

    torch.manual_seed(0)
    weights = tmp_path / "W.safetensors"
    save_file({k: v.contiguous() for k, v in timm.create_model("resnet18").state_dict().items()}, str(weights))
    # 3 classes, each one image's pixels (line i of a split: label i % 3, image i % 3): 10 per class in train800val200
    # (train800's 21 lines then val200's 9)
    folder = task_folder(tmp_path, "shapes", k=3, sizes={"train800": 21, "val200": 9, "train800val200": 30, "test": 12})
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main,
        [
            "fewshot",
            "--model",
            "timm:resnet18",
            "--weights",
            str(weights),
            "--tasks",
            f"shapes={folder}:3",
            "--shots",
            "1,5",
            "--resolution",
            "32",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    result = json.loads((out / "fewshot.json").read_text())
    assert result["source"]["source"] == "timm:resnet18" and result["source"]["weights"] == str(weights.resolve())
    assert len(result["source"]["sha256"]) == 64 and result["shots"] == [1, 5]
    task = result["tasks"]["shapes"]
    assert task["num_classes"] == 3 and task["resolution"] == 32 and task["pool_size"] == 30
    for s, v in task["shots"].items():
        assert v["num_train"] == 3 * int(s) and v["num_heldout"] == 3 * min(10, 10 - int(s)) and v["num_test"] == 12
        assert v["prec@1"] == 1.0  # one distinct image per class: the probe separates them
    assert result["mean"] == {"1": 1.0, "5": 1.0} and "provenance" in result
    md = (out / "fewshot.md").read_text()
    assert "| shapes | 3 | 32 | 100.00 (" in md and "W.safetensors (sha256" in md and "1-shot | 5-shot" in md


def test_a_harness_model_on_a_demo_task_beats_chance_and_is_reproducible(tmp_path):
    torch.manual_seed(0)
    ckpt = save_model(
        build_model({"backbone": "test_resnet", "num_classes": 10, "head": {"covariance": "none"}}),
        tmp_path / "run" / "model.pt",
    )
    kwargs = dict(shots=[1, 10], resolution=16, progress=lambda line: None)
    a = F.fewshot(str(ckpt), ["demo_digit"], tmp_path / "a", **kwargs)
    b = F.fewshot(str(ckpt), ["demo_digit"], tmp_path / "b", **kwargs)
    shots = a["tasks"]["demo_digit"]["shots"]
    assert shots["10"]["prec@1"] > 0.3 and shots["10"]["num_test"] == 500  # chance is 0.1
    assert shots["10"]["prec@1"] > shots["1"]["prec@1"]
    assert a["tasks"] == b["tasks"] and a["source"] == str(ckpt.resolve())


def test_prepare_tasks_draws_from_train800val200_only_what_is_used():
    (p,) = P.prepare_tasks(["demo_rotation"], [2, 4], heldout=3)
    assert p.pool_size == 1000 and len(p.pool) == 4 * (4 + 3) and len(p.test) == 500
    for s, (shot, held) in p.draws.items():
        assert np.bincount(p.pool.labels[shot]).tolist() == [s] * 4 and not set(shot) & set(held)
        assert np.bincount(p.pool.labels[held]).tolist() == [3] * 4
    assert p.data == [{"format": "demo"}]
    (same,) = P.prepare_tasks(["demo_rotation"], [2, 4], heldout=3)
    (other,) = P.prepare_tasks(["demo_rotation"], [2, 4], seed=1, heldout=3)
    assert np.array_equal(same.pool.pixels(), p.pool.pixels()) and np.array_equal(same.draws[4][0], p.draws[4][0])
    assert not np.array_equal(other.pool.pixels(), p.pool.pixels())  # another seed draws other examples


@pytest.fixture
def no_features(monkeypatch):
    """Bad input must be refused before any feature is extracted."""

    def refuse(*a, **k):
        raise AssertionError("features were extracted")

    monkeypatch.setattr(P, "extract_features", refuse)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--tasks", "demo_nope"], "unknown"),
        (["--tasks", "demo_digit", "--shots", "0"], r"--shots must be whole numbers >= 1"),
        (["--tasks", "demo_digit", "--shots", "abc"], r"--shots 'abc': expected comma-separated whole numbers"),
        (
            ["--tasks", "demo_digit", "--shots", "1,200"],
            r"task demo_digit train800val200: 200 shots need at least 201 per "
            r"class .* ask for at most \d+ shots \(--shots\)",
        ),
        (["--tasks", "demo_digit", "--resolution", "16,32"], r"--resolution\) must be SIZE or RESIZE,CROP"),
    ],
)
def test_bad_input_is_refused_before_any_feature_is_extracted(tmp_path, no_features, args, message):
    ckpt = save_model(
        build_model({"backbone": "test_resnet", "num_classes": 10, "head": {"covariance": "none"}}),
        tmp_path / "run" / "model.pt",
    )
    res = _cli("--model", str(ckpt), "--out", str(tmp_path / "out"), *args)
    assert res.exit_code != 0
    assert re.search(message, res.output.replace("\n", " ")), res.output
    assert not (tmp_path / "out" / "fewshot.json").exists()


def test_missing_data_and_small_classes_of_a_folder_task_are_named(tmp_path, no_features):
    ckpt = save_model(
        build_model({"backbone": "test_resnet", "num_classes": 3, "head": {"covariance": "none"}}),
        tmp_path / "run" / "model.pt",
    )
    missing = _cli("--model", str(ckpt), "--tasks", f"birds={tmp_path / 'nowhere'}:3", "--out", str(tmp_path / "o"))
    assert missing.exit_code != 0 and "nowhere" in missing.output and "does not exist" in missing.output
    # 30 examples in train800val200, 10 per class: train800's 21 lines (7 per class) then val200's 9 (3 per class)
    folder = task_folder(tmp_path, "birds", k=3, sizes={"train800": 21, "val200": 9, "train800val200": 30, "test": 12})
    small = _cli("--model", str(ckpt), "--tasks", f"birds={folder}:3", "--shots", "5,10", "--out", str(tmp_path / "o"))
    assert small.exit_code != 0 and "class 0 has 10 examples in task birds train800val200" in small.output
    assert "ask for at most 9 shots" in small.output
    no_model = _cli("--model", str(tmp_path / "none.pt"), "--tasks", "demo_digit", "--out", str(tmp_path / "o"))
    assert no_model.exit_code != 0 and "no upstream checkpoint" in no_model.output


def test_progress_from_the_model_load_and_the_result_in_mlflow(tmp_path, mlflow_store):
    mlflow, store_uri = mlflow_store
    ckpt = save_model(
        build_model({"backbone": "test_resnet", "num_classes": 10, "head": {"covariance": "none"}}),
        tmp_path / "run" / "model.pt",
    )
    lines = []
    result = F.fewshot(
        str(ckpt),
        ["demo_digit", "demo_count"],
        tmp_path / "out",
        shots=[1, 5],
        resolution=16,
        progress=lines.append,
        log_with=["mlflow"],
    )
    assert lines[:3] == [
        f"[fewshot] loading the model {ckpt}",
        "[fewshot] reading demo_digit (task 1/2): train800val200 and test",
        "[fewshot] reading demo_count (task 2/2): train800val200 and test",
    ]
    assert re.fullmatch(
        r"\[fewshot\] demo_digit \(task 1/2\): features of \d+ drawn and 500 test images at 16 px", lines[3]
    )
    assert lines[4].startswith("[fewshot] demo_digit ") and "5-shot" in lines[4] and len(lines) == 7
    client = mlflow.tracking.MlflowClient(store_uri)
    (logged,) = client.search_runs([client.get_experiment_by_name("harness-fewshot").experiment_id])
    assert logged.data.params["shots"] == "[1, 5]" and logged.data.params["settings.device"] == "cpu"
    metrics = logged.data.metrics
    # MLflow refuses "@" in a metric's name: prec@1 is logged as prec_at_1 there
    assert metrics["demo_count/5shot/prec_at_1"] == pytest.approx(result["tasks"]["demo_count"]["shots"]["5"]["prec@1"])
    assert metrics["mean/1shot/prec_at_1"] == pytest.approx(result["mean"]["1"])
    assert {"fewshot.md", "fewshot.json"} <= {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert not (tmp_path / "out" / "tb").exists()  # only the trackers named


def test_the_model_line_names_where_every_kind_of_source_took_its_weights():
    """One description of every source kind (audit6 F08: an export folder's weights were said to come from the
    local timm / Hugging Face cache)."""
    from harness.downstream.table import source_text

    def record(source, weights=None, sha256=None, random_init=False):
        return {"source": source, "weights": weights, "sha256": sha256, "random_init": random_init}

    assert source_text("/r/model.pt") == "harness checkpoint /r/model.pt"
    assert source_text(record("timm:resnet18", "/w/W.safetensors", "ab")) == (
        "timm:resnet18 with weights W.safetensors (sha256 ab)"
    )
    assert source_text(record("timm:resnet18", random_init=True)).endswith("RANDOMLY INITIALISED (--random-init)")
    export = source_text(record("local-dir:/e/export", sha256="cd"))
    assert export == "local-dir:/e/export, weights read from the folder /e/export (model.safetensors, sha256 cd)"
    assert "folder /t/x" in source_text(record("timm:local-dir:/t/x"))
    assert "Hugging Face Hub repository org/name" in source_text(record("hf-hub:org/name"))
    assert "timm's published weights" in source_text(record("timm:resnet18"))
