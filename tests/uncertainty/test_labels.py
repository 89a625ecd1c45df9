"""harness.uncertainty.labels: calibration against noisy and clean labels, per-class accuracy, and the
clean labels of a real digits run's held-out split."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness.runs import clean_heldout, heldout_description
from harness.uncertainty import metrics as M
from harness.uncertainty.labels import KEYS, label_calibration, per_class_accuracy
from harness.uncertainty.predictions import Predictions

K = 5
NAMES = [f"c{k}" for k in range(K)]
CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"


def _calibrated(n: int, seed: int) -> Predictions:
    """Logits and labels drawn from the logits' own softmax: calibrated against these (clean) labels."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 2.0, (n, K))
    p = np.exp(M.log_softmax(z))
    y = (rng.random(n)[:, None] > np.cumsum(p, 1)).sum(1)
    return Predictions(z, np.minimum(y, K - 1), np.arange(n), NAMES, "softmax", f"calibrated seed {seed}")


def _flip(p: Predictions, share: float, seed: int) -> Predictions:
    """Exactly ``share`` of the labels moved to the next class (c -> c + 1 mod K: class-conditional)."""
    n = len(p.targets)
    flip = np.random.default_rng(seed).permutation(n)[: int(round(share * n))]
    y = p.targets.copy()
    y[flip] = (y[flip] + 1) % K
    return replace(p, targets=y, source=p.source + " (noisy)")


def _scored(p: Predictions, t: float = 1.0) -> dict:
    m = M.classification_metrics(M.log_softmax(p.logits / t), p.targets)
    return {k: m[k] for k in KEYS}


@pytest.fixture(scope="module")
def case():
    held_clean = _calibrated(3000, 0)
    held_noisy = _flip(held_clean, 0.4, 1)
    test = _calibrated(2000, 2)
    return test, held_noisy, held_clean


def test_noisy_labels_favour_a_larger_temperature_than_clean_ones(case):
    test, noisy, clean = case
    out = label_calibration(test, noisy, clean)
    tn, tc = out["fit_noisy"]["temperature"], out["fit_clean"]["temperature"]
    assert tc == pytest.approx(1.0, abs=0.1)  # the logits are calibrated against the clean labels
    assert tn > 1.5 * tc  # 40% wrong labels: flatter predictions fit them better
    assert out["noisy_labels_differ"] == pytest.approx(0.4, abs=1e-12)
    # each fitted T minimises the NLL of the labels it was fitted on
    for t, p in ((tn, noisy), (tc, clean)):
        nll = lambda s: M.nll(M.log_softmax(p.logits / s), p.targets)  # noqa: E731
        assert nll(t) <= min(nll(t * 1.05), nll(t / 1.05))


def test_before_and_after_metrics_are_the_metrics_of_logits_over_t(case):
    test, noisy, clean = case
    out = label_calibration(test, noisy, clean)
    assert out["heldout_noisy"] == pytest.approx(_scored(noisy), abs=1e-12)
    assert out["test_clean"] == pytest.approx(_scored(test), abs=1e-12)
    for fit in ("fit_noisy", "fit_clean"):
        t = out[fit]["temperature"]
        assert set(out[fit]) == {"temperature", "test_clean", "heldout_noisy"}
        assert out[fit]["test_clean"] == pytest.approx(_scored(test, t), abs=1e-12)
        assert out[fit]["heldout_noisy"] == pytest.approx(_scored(noisy, t), abs=1e-12)
    # the clean-label oracle scores better on the clean test labels than the fit on noisy labels
    assert out["fit_clean"]["test_clean"]["nll"] < out["fit_noisy"]["test_clean"]["nll"]
    # the heldout_noisy scores are against the noisy labels, not the clean ones
    assert out["heldout_noisy"]["top1"] < _scored(clean)["top1"] - 0.2


def test_identical_labels_give_identical_fits_and_no_clean_labels_give_none(case):
    test, _, clean = case
    same = label_calibration(test, clean, replace(clean, source="copy"))
    assert same["noisy_labels_differ"] == 0.0
    assert same["fit_clean"]["temperature"] == pytest.approx(same["fit_noisy"]["temperature"], rel=1e-9)
    assert same["fit_clean"]["test_clean"] == pytest.approx(same["fit_noisy"]["test_clean"], rel=1e-9)
    alone = label_calibration(test, clean, None)
    assert alone["noisy_labels_differ"] is None and alone["fit_clean"] is None
    assert alone["fit_noisy"]["temperature"] == pytest.approx(same["fit_noisy"]["temperature"], rel=1e-12)


def test_per_class_accuracy_matches_numpy_and_is_nan_for_an_empty_class():
    rng = np.random.default_rng(3)
    y = rng.choice([0, 1, 2, 4], size=500)  # no example of class 3
    z = rng.normal(size=(500, K))
    z[np.arange(500), y] += rng.normal(1.0, 1.0, 500)
    acc = per_class_accuracy(Predictions(z, y, np.arange(500), NAMES, "softmax"))
    assert acc.shape == (K,) and np.isnan(acc[3])
    for c in (0, 1, 2, 4):
        assert acc[c] == pytest.approx(np.mean(z[y == c].argmax(1) == c), abs=1e-12)
    assert np.nanmean(acc) != pytest.approx(np.mean(z.argmax(1) == y))  # per class, not overall


# --- a real digits run -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig
    from harness.upstream.train import run

    out = tmp_path_factory.mktemp("labels") / "run"
    cfg = load_config(
        UpstreamConfig, CONFIGS / "digits_base.yaml", ["train.epochs=1", "data.limit_train=128", f"output_dir={out}"]
    )
    cfg.model.head = {"covariance": "none"}
    return run(cfg, progress=False)


def _clean_val_labels() -> np.ndarray:
    """The digits val split's labels, straight from scikit-learn (60/20/20 split of a fixed permutation)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    n = len(order)
    return d.target[order[int(round(0.6 * n)) : int(round(0.8 * n))]]


def test_clean_heldout_gives_the_clean_val_labels_by_index(digits_run):
    from harness.runs import load_heldout

    held = load_heldout(digits_run)
    clean = _clean_val_labels()
    assert held is not None and len(held.index) == len(clean)
    # labels that are not the clean ones (as a noisy held-out split would have), in a shuffled order
    order = np.random.default_rng(0).permutation(len(held.index))
    noisy = replace(held, logits=held.logits[order], index=held.index[order], targets=(held.targets[order] + 1) % 10)
    out = clean_heldout(noisy, digits_run)
    assert np.array_equal(out.targets, clean[noisy.index])
    assert np.array_equal(out.index, noisy.index) and np.array_equal(out.logits, noisy.logits)
    assert "clean labels" in out.source
    # a subset of the examples keeps its own indices
    part = replace(held, logits=held.logits[5:40], index=held.index[5:40], targets=held.targets[5:40])
    assert np.array_equal(clean_heldout(part, digits_run).targets, clean[5:40])
    # examples past the clean split were made on other data
    past = replace(held, index=held.index + len(clean))
    with pytest.raises(ValueError, match="index past the clean split"):
        clean_heldout(past, digits_run)
    assert "val split" in heldout_description(digits_run)


def test_a_run_without_heldout_split_has_no_clean_heldout(digits_run, tmp_path):
    from harness.runs import load_heldout

    text = (Path(digits_run) / "config.yaml").read_text()
    assert "heldout_split: val" in text
    (tmp_path / "config.yaml").write_text(text.replace("heldout_split: val", "heldout_split: null"))
    assert clean_heldout(load_heldout(digits_run), tmp_path) is None
    assert heldout_description(tmp_path) is None
