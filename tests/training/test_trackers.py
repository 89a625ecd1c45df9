"""Experiment trackers (train.log_with): the whole config as parameters, the metrics, the report; real MLflow on a
local file store and W&B offline, no network; and log_with outside a run's identity."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness.config import load_config, to_dict, to_yaml
from harness.io import LOCK_FILES
from harness.training.trackers import available, check_names, flat_params, parse_log_with
from harness.upstream.config import UpstreamConfig, validate
from harness.upstream.train import _check_existing, _same_config, run

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "upstream" / "configs"
RECORDS = ROOT / "results" / "cifar10n" / "records"
#: a tiny digits run: 2 optimiser steps of 64 images, evaluated on 64
TINY = [
    "train.epochs=1",
    "data.limit_train=128",
    "data.limit_eval=64",
    "model.head.train_mc_samples=4",
    "model.head.eval_mc_samples=4",
    "train.log_every=1",
]


def _tiny(tmp_path, *extra):
    return load_config(
        UpstreamConfig, CONFIGS / "digits_het.yaml", [*TINY, f"output_dir={tmp_path / 'run'}", *extra], distinct=False
    )


def test_flat_params_hold_every_setting_as_a_scalar():
    cfg = load_config(UpstreamConfig, CONFIGS / "digits_het.yaml")
    flat = flat_params(to_dict(cfg))
    assert flat["optim.lr"] == cfg.optim.lr and flat["model.head.covariance"] == "low_rank"
    assert flat["train.log_with"] == '["tensorboard"]' and flat["model.backbone_kwargs"] == "{}"
    assert flat["model.num_classes"] == "null" and flat["data.label_noise.rate"] == 0.3
    assert all(isinstance(v, (bool, int, float, str)) for v in flat.values())

    def paths(tree, prefix=""):  # every setting of config.yaml: a leaf, a list or an empty mapping
        if isinstance(tree, dict) and tree:
            return [p for k, v in tree.items() for p in paths(v, f"{prefix}{k}.")]
        return [prefix[:-1]]

    assert sorted(flat) == sorted(paths(yaml.safe_load(to_yaml(cfg))))  # one parameter per setting, none left out


def test_tracker_names_are_checked_before_any_work(tmp_path):
    assert parse_log_with("mlflow, wandb") == ["mlflow", "wandb"] and parse_log_with("none") == []
    assert check_names(["tensorboard", "mlflow"]) == ["tensorboard", "mlflow"]
    with pytest.raises(ValueError, match="unknown tracker.*'tensorbord'.*tensorboard, mlflow, wandb"):
        validate(_tiny(tmp_path, "train.log_with=[tensorbord]"))
    with pytest.raises(ValueError, match="names a tracker twice"):
        check_names(["mlflow", "mlflow"])
    with pytest.raises(ValueError, match='aim, not installed here: pip install "het-harness\\[track\\]"'):
        available(["aim"], "train.log_with")
    with pytest.raises(ValueError, match="not installed"):
        run(_tiny(tmp_path, "train.log_with=[aim]"), progress=False)
    assert not (tmp_path / "run").exists()


def test_log_with_is_not_part_of_a_runs_identity(tmp_path):
    """A record saved before train.log_with existed (results/cifar10n/records: no log_with in its config.yaml) is
    the same config as the one planned today, whatever trackers it names; a real setting still tells runs apart."""
    record = sorted(p for p in RECORDS.iterdir() if (p / "config.yaml").is_file())[0]
    saved = (record / "config.yaml").read_text()
    assert "log_with" not in saved
    base = yaml.safe_load(saved)
    for trackers in ("[tensorboard]", "[mlflow]", "[]", "[wandb,mlflow]"):
        cfg = load_config(UpstreamConfig, None, [f"train.log_with={trackers}"], base=base)
        assert _same_config(saved, to_yaml(cfg)), trackers
    other = load_config(UpstreamConfig, None, ["train.log_with=[mlflow]", "optim.lr=0.2"], base=base)
    assert not _same_config(saved, to_yaml(other))
    # the record restored in a folder counts as done for a config that logs to MLflow: nothing is trained again
    folder = tmp_path / record.name
    shutil.copytree(record, folder)
    mlflow_cfg = load_config(UpstreamConfig, None, ["train.log_with=[mlflow]"], base=base)
    assert _check_existing(folder, to_yaml(mlflow_cfg)) == "done"
    with pytest.raises(ValueError, match="different config"):
        _check_existing(folder, to_yaml(other))


def test_an_upstream_run_logged_to_mlflow_holds_the_full_config_as_parameters(tmp_path, mlflow_store):
    """The acceptance test: train.log_with=[mlflow] on a local file store (no server, no network)."""
    mlflow, store_uri = mlflow_store
    cfg = _tiny(tmp_path, "train.log_with=[mlflow]")
    run_dir = run(cfg, progress=False)
    client = mlflow.tracking.MlflowClient(store_uri)
    exp = client.get_experiment_by_name("harness-upstream")
    (logged,) = client.search_runs([exp.experiment_id])
    assert logged.info.run_name == cfg.name and logged.info.status == "FINISHED"
    want = {k: str(v) for k, v in flat_params(to_dict(cfg)).items()}
    assert logged.data.params == want  # every setting, none dropped
    summary = json.loads((run_dir / "metrics.json").read_text())
    assert logged.data.metrics["final/nll"] == pytest.approx(summary["metrics"]["nll"])
    assert logged.data.metrics["final/heldout/nll"] == pytest.approx(summary["heldout_metrics"]["nll"])
    history = client.get_metric_history(logged.info.run_id, "eval/nll")
    assert [h.step for h in history] == [h["step"] for h in summary["history"]]
    assert len(client.get_metric_history(logged.info.run_id, "train/loss")) == summary["steps"]
    artefacts = {a.path for a in client.list_artifacts(logged.info.run_id)}
    assert {"metrics.json", "config.yaml"} <= artefacts
    assert not (run_dir / "tb").exists()  # only the trackers named


def test_an_upstream_run_logged_to_wandb_offline(tmp_path, monkeypatch, request):
    """Real W&B in offline mode (no network): what the run hands to W&B is recorded on its way in (W&B offline keeps
    the config and metrics in its binary run log until `wandb sync`), and that log holds them."""
    wandb = pytest.importorskip("wandb")
    from accelerate.tracking import WandBTracker

    request.addfinalizer(wandb.teardown)  # W&B's service process ends with this test, not at the suite's exit

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_dir").mkdir()
    sent = {"config": {}, "metrics": {}}
    store, log = WandBTracker.store_init_configuration, WandBTracker.log

    def spy_store(self, values):
        sent["config"].update(values)
        return store(self, values)

    def spy_log(self, values, step=None, **kwargs):
        sent["metrics"].update({k: v for k, v in values.items() if isinstance(v, (int, float))})
        return log(self, values, step=step, **kwargs)

    monkeypatch.setattr(WandBTracker, "store_init_configuration", spy_store)
    monkeypatch.setattr(WandBTracker, "log", spy_log)
    cfg = _tiny(tmp_path, "train.log_with=[wandb,tensorboard]")
    run_dir = run(cfg, progress=False)
    assert sent["config"] == flat_params(to_dict(cfg))  # every setting, none dropped
    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    assert sent["metrics"]["final/top1"] == pytest.approx(metrics["top1"]) and "eval/nll" in sent["metrics"]
    (offline,) = (tmp_path / "wandb_dir" / "wandb").glob("offline-run-*")
    (log_file,) = offline.glob("run-*.wandb")
    import time

    deadline = time.monotonic() + 30  # W&B's service process writes the run log after finish(), on its own time
    while b"final_metrics" not in (data := log_file.read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert b"final/top1" in data and b"train/loss" in data and b"label_noise" in data and b"final_metrics" in data
    assert (offline / "files" / run_dir.name / "metrics.json").is_file()  # the report files, saved with the run
    assert any((run_dir / "tb").rglob("events.out.tfevents.*"))
    # the trackers change nothing the run computes: the same predictions without any
    plain = run(_tiny(tmp_path / "plain", "train.log_with=[]"), progress=False)
    a, b = np.load(run_dir / "predictions.npz"), np.load(plain / "predictions.npz")
    assert np.array_equal(a["logits"], b["logits"]) and not (plain / "tb").exists()


def test_a_tracker_that_fails_mid_run_never_ends_the_run(tmp_path, mlflow_store, monkeypatch, capsys):
    """Audit 2026-11-27 item 7: an MLflow store that failed mid-run raised out of accelerator.log and killed the
    training. The store is removed after the run has started (its first metrics logged): the failure is reported once,
    the tracker turned off, and the run finishes with its metrics in the run folder."""
    mlflow, store_uri = mlflow_store
    real = mlflow.log_metrics
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            return real(*args, **kwargs)
        shutil.rmtree(Path(store_uri.removeprefix("file://")), ignore_errors=True)  # the store is gone
        raise OSError("the MLflow store was removed")

    monkeypatch.setattr(mlflow, "log_metrics", failing)
    run_dir = run(_tiny(tmp_path, "train.log_with=[mlflow]"), progress=False)
    assert (run_dir / "metrics.json").is_file() and (run_dir / "model.pt").is_file()
    err = capsys.readouterr().err
    assert err.count("[tracking] mlflow failed in log (OSError: the MLflow store was removed); it is turned off") == 1
    assert len(calls) == 2  # not called again once turned off


def test_log_model_puts_the_pretrained_folder_in_mlflow_and_wandb_offline(tmp_path, mlflow_store, monkeypatch, request):
    """Issue 44 item 3, the acceptance test: after a run with train.log_model=true, an MLflow file store and a W&B
    offline run each hold the model folder save_pretrained wrote (pretrained/: weights, config.json, card), and the
    folder from MLflow loads as the run's model; log_model is not part of the run's identity."""
    import torch

    from harness.models import Classifier, load_model

    wandb = pytest.importorskip("wandb")
    request.addfinalizer(wandb.teardown)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_dir").mkdir()
    mlflow, store_uri = mlflow_store
    run_dir = run(_tiny(tmp_path, "train.log_with=[mlflow,wandb]", "train.log_model=true"), progress=False)
    files = {"model.safetensors", "config.json", "README.md"}
    assert {p.name for p in (run_dir / "pretrained").iterdir()} - set(LOCK_FILES) == files  # the lock: not logged
    client = mlflow.tracking.MlflowClient(store_uri)
    (logged,) = client.search_runs([client.get_experiment_by_name("harness-upstream").experiment_id])
    assert {a.path for a in client.list_artifacts(logged.info.run_id, "pretrained")} == {
        f"pretrained/{f}" for f in files
    }
    local = client.download_artifacts(logged.info.run_id, "pretrained", str(tmp_path))
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(Classifier.from_pretrained(local)(x), load_model(run_dir / "model.pt").eval()(x))
    (offline,) = (tmp_path / "wandb_dir" / "wandb").glob("offline-run-*")
    assert all((offline / "files" / "pretrained" / f).is_file() for f in files)
    assert _check_existing(run_dir, to_yaml(_tiny(tmp_path, "train.log_with=[]"))) == "done"
