"""A model trained elsewhere as a run folder (harness import; harness.sources.load_classifier and
harness.importing.import_run): its own output layer kept, its preprocessing applied, and the folder taken by harness
ensemble and harness shift like an upstream run."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from harness.cli import main
from harness.uncertainty.predictions import Predictions

DIGITS = str(Path(__file__).resolve().parents[1] / "upstream" / "configs" / "digits_base.yaml")


def _weights(tmp_path: Path, seed: int, num_classes: int = 10) -> Path:
    import timm

    torch.manual_seed(seed)
    net = timm.create_model("resnet10t", num_classes=num_classes).eval()
    path = tmp_path / f"w{seed}_{num_classes}.safetensors"
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))
    return path


def _import(tmp_path: Path, weights: Path, name: str, *extra: str):
    return CliRunner().invoke(
        main,
        [
            "import",
            "--model",
            "timm:resnet10t",
            "--weights",
            str(weights),
            "--data",
            DIGITS,
            "--out",
            str(tmp_path / name),
            "limit_eval=40",
            *extra,
        ],
    )


def test_an_imported_timm_model_predicts_with_its_own_classifier_and_normalisation(tmp_path):
    import timm

    from harness.data.batched import make_loader
    from harness.data.eval_keys import data_from_file
    from harness.data.sources import build_split

    w = _weights(tmp_path, 0)
    res = _import(tmp_path, w, "a")
    assert res.exit_code == 0, res.output
    preds = Predictions.load(tmp_path / "a")
    # the reference: timm's own model on the same images, renormalised from the harness's [-1, 1] to ImageNet's
    data = data_from_file(DIGITS, ("limit_eval=40",))
    x, y, _ = next(iter(make_loader(data, build_split(data, data.eval_split), train=False, batch_size=40)[0]))
    net = timm.create_model("resnet10t", num_classes=10).eval()
    net.load_state_dict(load_file(str(w)))
    mean, std = (
        torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1),
        torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1),
    )
    with torch.no_grad():
        ref = torch.log_softmax(net(((x * 0.5 + 0.5) - mean) / std), 1).numpy()
    assert np.allclose(preds.log_probs()[:40], ref, atol=1e-4) and np.array_equal(preds.targets[:40], np.asarray(y))
    run = json.loads((tmp_path / "a" / "run.json").read_text())
    assert run["config"]["imported"]["source"] == "timm:resnet10t" and len(run["config"]["imported"]["sha256"]) == 64
    top1 = float(np.mean(preds.logits.argmax(1) == preds.targets))
    assert json.loads((tmp_path / "a" / "metrics.json").read_text())["metrics"]["top1"] == pytest.approx(top1)


def test_imported_runs_ensemble_and_shift_like_upstream_runs(tmp_path):
    for seed in (0, 1):
        assert _import(tmp_path, _weights(tmp_path, seed), f"m{seed}").exit_code == 0
    runner = CliRunner()
    res = runner.invoke(
        main, ["ensemble", "--members", str(tmp_path / "m0"), str(tmp_path / "m1"), "--out", str(tmp_path / "ens")]
    )
    assert res.exit_code == 0, res.output
    members = [Predictions.load(tmp_path / f"m{s}") for s in (0, 1)]
    probs = np.mean([np.exp(m.log_probs()) for m in members], axis=0)
    assert np.allclose(np.exp(Predictions.load(tmp_path / "ens").log_probs()), probs, atol=1e-8)
    # re-predicting from the checkpoints on the data of a config file (--eval-data) gives the same ensemble
    res = runner.invoke(
        main,
        [
            "ensemble",
            "--members",
            str(tmp_path / "m0"),
            str(tmp_path / "m1"),
            "--from-checkpoints",
            "--eval-data",
            DIGITS,
            "--out",
            str(tmp_path / "ens2"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert len(Predictions.load(tmp_path / "ens2").targets) > 40  # the config's whole evaluation split
    res = runner.invoke(
        main,
        [
            "shift",
            "--members",
            str(tmp_path / "m0"),
            "--corruptions",
            "gaussian_noise",
            "--severities",
            "1",
            "--examples",
            "20",
            "--ood",
            "none",
        ],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "m0" / "shift" / "gaussian_noise-1" / "predictions.npz").is_file()


def test_bad_imports_are_refused_before_any_file_is_written(tmp_path):
    res = _import(tmp_path, _weights(tmp_path, 0, num_classes=7), "seven")  # a classifier for 7 classes, data of 10
    assert res.exit_code != 0 and "do not fit" in res.output and not (tmp_path / "seven").exists()
    res = CliRunner().invoke(
        main, ["import", "--model", "timm:resnet10t", "--data", DIGITS, "--out", str(tmp_path / "x")]
    )
    assert res.exit_code != 0 and "needs --weights" in res.output and not (tmp_path / "x").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    res = _import(tmp_path, _weights(tmp_path, 1), "full")
    assert res.exit_code != 0 and "holds files harness import did not write (notes.txt)" in res.output
    assert sorted(p.name for p in (tmp_path / "full").iterdir()) == ["notes.txt"]


def test_bad_weight_files_get_one_clean_error_and_a_refused_import_leaves_nothing(tmp_path):
    """Issue 29 item 8: a 0-byte .pth (which printed only 'Aborted!') and NaN weights (which left a half-written
    folder blocking the rerun) get a click error naming the file and the fix, no traceback; the rerun with good
    weights then writes the folder."""
    (tmp_path / "empty.pth").write_bytes(b"")
    res = _import(tmp_path, tmp_path / "empty.pth", "run")
    assert res.exit_code == 1 and "Aborted!" not in res.output and "Traceback" not in res.output
    assert "empty.pth' cannot be read as a weights file (EOFError); give a state dict" in res.output
    state = load_file(str(_weights(tmp_path, 0)))
    state["fc.weight"] = torch.full_like(state["fc.weight"], float("nan"))
    save_file(state, str(tmp_path / "nan.safetensors"))
    res = _import(tmp_path, tmp_path / "nan.safetensors", "run")
    assert res.exit_code == 1 and "NaN or infinite values (first: fc.weight)" in res.output
    assert not (tmp_path / "run").exists()
    res = _import(tmp_path, _weights(tmp_path, 0), "run")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "run" / "predictions.npz").is_file()
