"""What the core install (``pip install het-harness``, no extras) must do: the head, the metrics, upstream
training and a report. ``.ci/run`` runs this folder in a second virtual environment holding the core alone
(``HARNESS_CORE_ONLY=1``), where the optional stacks must be absent and a feature that needs one names its extra;
in the full environment the same tests run with everything installed."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from harness.heads.variants import VARIANTS

CORE_ONLY = os.environ.get("HARNESS_CORE_ONLY") == "1"
OPTIONAL = (
    "tensorflow_datasets",
    "imagecorruptions",
    "tensorboard",
    "skimage",
    "netcal",
    "webdataset",
    "submitit",
    "torchmetrics",
)
CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"


@pytest.mark.skipif(not CORE_ONLY, reason="the core-only environment of .ci/run (HARNESS_CORE_ONLY=1)")
def test_the_core_install_holds_no_optional_stack():
    import harness

    present = [m for m in OPTIONAL if importlib.util.find_spec(m) is not None]
    assert not present, f"the core install pulled {present}"
    assert "site-packages" in harness.__file__, f"testing {harness.__file__}, not the installed package"
    from importlib.metadata import distribution

    import harness.downstream
    import harness.upstream

    top = {str(f).split("/")[0] for f in distribution("het-harness").files}
    assert "harness" in top and not top & {"upstream", "downstream"}, f"installed top-level folders: {sorted(top)}"
    assert "site-packages" in harness.upstream.__file__ and "site-packages" in harness.downstream.__file__


@pytest.mark.parametrize("covariance", list(VARIANTS))
def test_the_head_trains_and_evaluates(covariance):
    from harness.heads import HeteroscedasticHead

    torch.manual_seed(0)
    factors = 2 if VARIANTS[covariance].has_factors else None  # a head without factors refuses num_factors
    # and one without noise its sample counts
    samples = dict(train_mc_samples=8, eval_mc_samples=32) if VARIANTS[covariance].input_dependent else {}
    head = HeteroscedasticHead(16, 5, covariance=covariance, num_factors=factors, **samples)
    x, y = torch.randn(12, 16), torch.randint(0, 5, (12,))
    loss = F.cross_entropy(head(x), y)
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in head.parameters() if p.requires_grad)
    head.eval()
    with torch.no_grad():
        out = head(x)
    assert out.shape == (12, 5)
    if covariance != "none":  # log p̄, normalised (the homoscedastic head is exactly a linear layer: raw logits)
        assert torch.allclose(out.exp().sum(1), torch.ones(12), atol=1e-5)
    assert torch.equal(out, head(x).detach())  # a seeded evaluation repeats exactly


def test_the_metrics_agree_with_scikit_learn():
    from sklearn.metrics import accuracy_score, log_loss

    from harness.uncertainty import metrics as M

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=200)
    lp = M.log_softmax(rng.normal(size=(200, 4)) * 2)
    got = M.classification_metrics(lp, labels)
    assert got["nll"] == pytest.approx(log_loss(labels, np.exp(lp), labels=range(4)), abs=1e-9)
    assert got["top1"] == pytest.approx(accuracy_score(labels, lp.argmax(1)))
    conf, correct = M.top_label(lp, labels)
    bins = M.reliability_bins(conf, correct)
    filled = bins["count"] > 0
    by_hand = (bins["count"][filled] / 200 * np.abs(bins["accuracy"] - bins["confidence"])[filled]).sum()
    assert got["ece"] == pytest.approx(by_hand)


def test_upstream_training_and_a_report(tmp_path, monkeypatch):
    """harness upstream and harness report from the command line, on the embedded digits, with the core alone."""
    from click.testing import CliRunner

    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    quick = [
        "train.epochs=1",
        "data.limit_train=128",
        "data.limit_eval=64",
        "model.head.train_mc_samples=4",
        "model.head.eval_mc_samples=4",
        "output_dir=runs/het",
    ]
    result = CliRunner().invoke(
        main, ["upstream", "--config", str(CONFIGS / "digits_het.yaml"), "--no-progress", *quick]
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "runs" / "het" / "metrics.json").read_text())["metrics"]
    assert 0 <= metrics["ece"] <= 1 and np.isfinite(metrics["nll"])
    if CORE_ONLY:
        assert "tensorboard is not installed" in result.output.lower() and "het-harness[track]" in result.output
    result = CliRunner().invoke(main, ["report", "runs/het", "--name", "smoke", "--no-shift"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "results" / "smoke" / "report.html").stat().st_size > 10_000  # figures embedded


@pytest.mark.skipif(not CORE_ONLY, reason="the core-only environment of .ci/run (HARNESS_CORE_ONLY=1)")
def test_a_missing_extra_is_named(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    run = tmp_path / "run"
    run.mkdir()
    result = CliRunner().invoke(main, ["shift", "-m", str(run), "--corruptions", "fog", "--ood", "none"])
    assert result.exit_code == 1 and 'pip install "het-harness[shift]"' in result.output, result.output
