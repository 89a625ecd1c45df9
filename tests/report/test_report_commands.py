"""harness ensemble and harness report end to end on short digits runs, and the HTML in headless Chromium."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.config import load_config
from harness.uncertainty.predictions import Predictions
from harness.upstream.config import UpstreamConfig
from harness.upstream.train import run

CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"

#: the head's sample counts of each method (the homoscedastic head draws no noise and refuses them)
SAMPLES = {"hom": [], "het": ["model.head.train_mc_samples=8", "model.head.eval_mc_samples=16"]}


@pytest.fixture(scope="module")
def digits_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    dirs = {}
    for method in ("hom", "het"):
        for seed in (0, 1):
            cfg = load_config(
                UpstreamConfig,
                CONFIGS / f"digits_{method}.yaml",
                [
                    "train.epochs=2",
                    *SAMPLES[method],
                    f"seed={seed}",
                    f"output_dir={root / f'{method}_s{seed}'}",
                ],
            )
            dirs[(method, seed)] = run(cfg, progress=False)
    return root, dirs


def test_ensemble_and_report_commands(digits_runs, tmp_path):
    root, dirs = digits_runs
    runner = CliRunner()
    for method in ("hom", "het"):
        res = runner.invoke(
            main,
            [
                "ensemble",
                "--members",
                str(dirs[(method, 0)]),
                str(dirs[(method, 1)]),
                "--out",
                str(root / f"{method}_ens"),
            ],
        )
        assert res.exit_code == 0, res.output
        assert "Gibbs CE" in res.output
    spec = json.loads((root / "het_ens" / "ensemble.json").read_text())
    assert spec["method"] == "het" and spec["summary"]["size"] == 2
    assert (root / "het_ens" / "heldout_predictions.npz").is_file()
    # re-predicting from the checkpoints gives the saved predictions
    res = runner.invoke(
        main,
        [
            "ensemble",
            "--members",
            str(dirs[("het", 0)]),
            str(dirs[("het", 1)]),
            "--from-checkpoints",
            "--out",
            str(tmp_path / "ckpt_ens"),
        ],
    )
    assert res.exit_code == 0, res.output
    np.testing.assert_allclose(
        Predictions.load(tmp_path / "ckpt_ens").logits, Predictions.load(root / "het_ens").logits, atol=1e-4
    )

    res = runner.invoke(
        main,
        [
            "report",
            *(str(d) for d in dirs.values()),
            str(root / "hom_ens"),
            str(root / "het_ens"),
            "--name",
            "digits_test",
            "--out-root",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    out = tmp_path / "digits_test"
    report = json.loads((out / "report.json").read_text())
    assert report["schema"] == "harness.report/1" and len(report["entries"]) == 6
    assert {e["kind"] for e in report["entries"]} == {"single", "ensemble"}
    assert all("temperature_scaling" in e for e in report["entries"])
    cov = report["covariance"]
    assert len(cov["top_pairs"]) == 10 and cov["num_examples"] == 359 and cov["hom_run"]
    assert cov["num_het_right_hom_wrong"] == len(cov["ranks"])
    md, page = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "Table 7" in md and "Gibbs CE" in md and "![ranks](covariance_ranks.png)" in md
    assert cov["tempered"] is False and cov["temperature"] > 0
    assert "Σ is not tempered" in md and "| correlation Σ̄\\_ab / sqrt(Σ̄\\_aa Σ̄\\_bb) |" in md
    assert "that example's own covariance Σ(x)" in md
    assert page.count("data:image/png;base64,") == len(report["figures"]["reliability"]) + 1
    assert "Written by" in page and "torch" in page


def test_report_refuses_runs_on_different_data(digits_runs, tmp_path):
    root, dirs = digits_runs
    other = tmp_path / "other"
    shutil.copytree(dirs[("hom", 0)], other)
    p = Predictions.load(other)
    cut = Predictions(p.logits[:100], p.targets[:100], p.index[:100], p.class_names, p.link)
    cut.save(other / "predictions.npz")
    record = json.loads((other / "metrics.json").read_text())  # a run on other data: its metrics measured them
    (other / "metrics.json").write_text(json.dumps({**record, "metrics": cut.metrics()}))
    res = CliRunner().invoke(main, ["report", str(dirs[("hom", 0)]), str(other), "--out-root", str(tmp_path)])
    assert res.exit_code != 0 and "other data" in res.output
    res = CliRunner().invoke(
        main, ["ensemble", "--members", str(dirs[("hom", 0)]), str(other), "--out", str(tmp_path / "e")]
    )
    # the copy holds the same model.pt: refused as one model twice before its data is compared (audit19 A19-11)
    assert res.exit_code != 0 and "an ensemble counts each model once" in res.output, res.output


@pytest.mark.skipif(shutil.which("chromium") is None, reason="headless Chromium not installed")
def test_report_html_renders_in_headless_chromium(digits_runs, tmp_path):
    root, dirs = digits_runs
    res = CliRunner().invoke(
        main,
        [
            "report",
            str(dirs[("hom", 0)]),
            str(dirs[("het", 0)]),
            "--name",
            "r",
            "--out-root",
            str(tmp_path),
            "--screenshot",
        ],
    )
    assert res.exit_code == 0, res.output
    from PIL import Image

    img = np.asarray(Image.open(tmp_path / "r" / "report.png").convert("L"))
    assert img.shape[0] > 1000 and img.std() > 10  # not a blank page: tables and figures drawn
    # the whole page: taller than the old 2,400 px cut, and the page's last section drawn near its bottom
    assert img.shape[0] > 2400 and (img[-300:] < 128).any(), img.shape
    assert f"x{img.shape[0]} px)" in res.output
    from harness.report.browser import layout, overflowing_tables

    page = layout(tmp_path / "r" / "report.html", 1280, 900)  # issue 45: a report to navigate on a 1280 x 900 screen
    assert page["nav"] and page["first_figure"] is not None and page["first_figure"] < 3 * 900, page
    assert overflowing_tables(tmp_path / "r" / "report.html", 1280) == []
