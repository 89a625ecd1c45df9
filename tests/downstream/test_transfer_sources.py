"""`harness downstream` from a timm architecture and a user's weights file (harness.sources.load_source)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from harness.cli import main
from harness.uncertainty import metrics as M
from harness.uncertainty.predictions import Predictions

from bad_inputs_downstream import task_folder


@pytest.mark.parametrize("source", ["timm:resnet18", "torchvision:resnet18"])
def test_a_timm_model_with_a_weights_file_runs_the_sweep_end_to_end(tmp_path, source):
    import timm
    import torchvision

    torch.manual_seed(0)
    weights = tmp_path / "W.safetensors"
    net = (
        timm.create_model("resnet18", pretrained=False)
        if source.startswith("timm")
        else torchvision.models.get_model("resnet18", weights=None)
    )
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(weights))
    folder = task_folder(
        tmp_path, "shapes", k=10, sizes={"train800": 20, "val200": 10, "train800val200": 30, "test": 12}
    )
    args = [
        "downstream",
        "--upstream",
        source,
        "--weights",
        str(weights),
        "--tasks",
        f"shapes={folder}:10",
        "--data-format",
        "folder",
        "--preset",
        "demo",
        "--lrs",
        "0.01",
        "--steps",
        "2",
        "--seeds",
        "2",
        "--batch-size",
        "8",
        "--micro-batch",
        "8",
        "--resolution",
        "32,32",
        "--out",
        str(tmp_path / "out"),
    ]
    res = CliRunner().invoke(main, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    vtab = json.loads((tmp_path / "out" / "vtab.json").read_text())
    assert vtab["upstream"]["source"] == source and vtab["upstream"]["weights"] == str(weights.resolve())
    assert len(vtab["upstream"]["sha256"]) == 64
    assert vtab["preprocessing"]["mean"] == pytest.approx([0.485, 0.456, 0.406])
    assert 0.0 <= vtab["tasks"]["shapes"]["mean"] <= 1.0 and vtab["tasks"]["shapes"]["seeds"] == 2
    md = (tmp_path / "out" / "vtab.md").read_text()
    assert f"Model: {source} with weights W.safetensors (sha256" in md and "mean [0.485, 0.456, 0.406]" in md
    # the model's own interpolation (timm resnet18: bicubic; torchvision: bilinear) is the one used and stated
    interpolation = "bicubic" if source.startswith("timm") else "bilinear"
    assert vtab["preprocessing"]["interpolation"] == interpolation and f"Interpolation: {interpolation}" in md
    preds = sorted(Path(tmp_path / "out" / "predictions").glob("shapes_seed*.npz"))
    assert len(preds) == 2 and np.load(preds[0])["logits"].shape == (12, 10)
    # uncertainty on test: every metric per seed, over seeds, for the ensemble of the seeds, and per group
    u = vtab["uncertainty"]["tasks"]["shapes"]
    assert set(u["mean"]) == {"top1", "nll", "ece", "brier"} and len(u["seeds"]) == 2
    assert u["mean"]["top1"] == pytest.approx(vtab["tasks"]["shapes"]["mean"])
    members = [Predictions.load(p) for p in preds]
    probs = np.mean([np.exp(M.log_softmax(m.logits)) for m in members], axis=0)
    assert u["ensemble"]["nll"] == pytest.approx(float(-np.log(probs[np.arange(12), members[0].targets]).mean()))
    assert vtab["uncertainty"]["groups"]["custom"]["mean"]["nll"] == pytest.approx(u["mean"]["nll"])
    # temperature scaling: T fit on val200 by the chosen configuration trained on train800 (one configuration:
    # no selection ran, so that fine-tune ran for calibration), applied to every final seed's test logits
    from harness.uncertainty.calibration import fit_temperature, scale

    held = Predictions.load(tmp_path / "out" / "predictions" / "shapes_val200_lr0.01_steps2.npz")
    assert len(held.index) == 10 and u["temperature"] == pytest.approx(fit_temperature(held))
    assert u["scaled"]["mean"]["nll"] == pytest.approx(np.mean([scale(m, u["temperature"]).nll() for m in members]))
    assert "ensemble NLL" in md


def test_a_timm_model_without_weights_offline_is_refused_before_any_work(tmp_path):
    folder = task_folder(tmp_path, "shapes", k=5)
    res = CliRunner().invoke(
        main,
        [
            "downstream",
            "--upstream",
            "timm:resnet18",
            "--tasks",
            f"shapes={folder}:5",
            "--data-format",
            "folder",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code != 0 and "--weights FILE" in res.output and not (tmp_path / "out").exists()


def test_the_views_resize_with_the_models_interpolation():
    """Every resize of the fine-tuning views uses the interpolation it is given (bicubic differs from bilinear)."""
    from PIL import Image
    from torchvision.transforms import v2

    from harness.tasks.views import transforms

    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (20, 20, 3), dtype=np.uint8))
    for mode in ("bilinear", "bicubic"):
        _, evaluate = transforms(False, False, 40, 32, mode)
        ref = v2.functional.to_dtype(
            v2.functional.to_image(v2.functional.resize(img, [32, 32], v2.InterpolationMode(mode), antialias=True)),
            torch.float32,
            scale=True,
        )
        assert torch.allclose(evaluate(img), (ref - 0.5) / 0.5, atol=1e-5)
    bilinear, bicubic = (transforms(False, False, 40, 32, m)[1](img) for m in ("bilinear", "bicubic"))
    assert not torch.allclose(bilinear, bicubic, atol=1e-3)
    with pytest.raises(ValueError):
        transforms(False, False, 40, 32, "sideways")


def test_the_sweep_writes_an_html_page_with_a_reliability_diagram_per_group(tmp_path):
    """vtab.html: the tables of vtab.md and, per group, the reliability diagram of every final fine-tune's test
    predictions pooled (also saved as reliability_<group>.png)."""
    from harness.downstream.config import SweepSettings
    from harness.downstream.sweep import sweep
    from harness.models import build_model, save_model

    up = save_model(
        build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none"))),
        tmp_path / "up" / "model.pt",
    )
    settings = SweepSettings(lrs=[0.05], steps=[2], seeds=2, batch_size=32, micro_batch=32, resolution=[32, 32])
    sweep(str(up), ["demo_digit", "demo_rotation"], tmp_path / "out", settings, progress=lambda s: None)
    page = (tmp_path / "out" / "vtab.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Test top-1 per task" in page and "ensemble NLL" in page
    assert page.count("data:image/png;base64,") == 1 and "every fine-tuning seed pooled" in page
    png = (tmp_path / "out" / "reliability_demo.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    vtab = json.loads((tmp_path / "out" / "vtab.json").read_text())
    n = sum(len(Predictions.load(tmp_path / "out" / p).targets) for ps in vtab["predictions"].values() for p in ps)
    assert (
        f"2 task(s), {n} test predictions" in page and "![demo: 2 task(s)" in (tmp_path / "out" / "vtab.md").read_text()
    )


@pytest.mark.parametrize("spelling", ["local-dir:{}", "{}"])
def test_an_export_folder_is_one_source_for_downstream_and_fewshot(tmp_path, spelling):
    """One spelling of a model source for every command: a save_pretrained folder, bare or as local-dir:PATH,
    transfers and probes as a model.pt does (audit: refused with advice about model.pt)."""
    from harness.models import build_model

    torch.manual_seed(0)
    folder = tmp_path / "export"
    build_model({"backbone": "test_resnet", "num_classes": 10, "head": {"covariance": "none"}}).save_pretrained(folder)
    source = spelling.format(folder)
    args = ["--tasks", "demo_digit", "--preset", "demo", "--steps", "2", "--lrs", "0.01", "--seeds", "1"]
    res = CliRunner().invoke(main, ["downstream", "--upstream", source, *args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    sweep = json.loads((tmp_path / "o" / "sweep.json").read_text())
    assert sweep["upstream"]["source"] == f"local-dir:{folder.resolve()}" and len(sweep["upstream"]["sha256"]) == 64
    res = CliRunner().invoke(
        main, ["fewshot", "--model", source, "--tasks", "demo_digit", "--shots", "1", "--out", str(tmp_path / "f")]
    )
    assert res.exit_code == 0, res.output
    missing = CliRunner().invoke(main, ["downstream", "--upstream", "local-dir:" + str(tmp_path / "nope"), *args])
    assert missing.exit_code != 0 and "no folder at" in missing.output
