"""harness.uncertainty.streaming: the torchmetrics Metric classes equal the array metrics batch by batch, merged and
synced across processes, including saturated confidences (issue 44); and torchmetrics' 16th bin, pinned."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import torch

pytest.importorskip("torchmetrics")

import harness.uncertainty as U  # noqa: E402
from harness.uncertainty import metrics as M  # noqa: E402
from harness.uncertainty import ood  # noqa: E402
from harness.uncertainty import streaming as S  # noqa: E402

K = 7


def _case(n: int, seed: int, sharp: float, saturated: int) -> "tuple[np.ndarray, np.ndarray]":
    """(logits [n, K] float64, labels [n]): labels drawn from the model's own probabilities (roughly calibrated, so
    equal-width and equal-mass bins differ); the first ``saturated`` rows put probability exactly 1.0 on a class,
    their label that class except every fourth."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, K)) * sharp
    p = np.exp(M.log_softmax(z))
    y = (p.cumsum(1) < rng.random((n, 1))).sum(1).clip(0, K - 1)
    top = rng.integers(0, K, saturated)
    z[:saturated] = 0.0
    z[np.arange(saturated), top] = 1000.0
    y[:saturated] = np.where(np.arange(saturated) % 4 == 0, (top + 1) % K, top)
    return z, y


def _reference(lp: np.ndarray, y: np.ndarray) -> "dict[str, float]":
    conf, correct = M.top_label(lp, y)
    return {
        "ECE": M.ece(lp, y),
        "MCE": M.mce(lp, y),
        "RMSCalibrationError": M.rms_calibration_error(lp, y),
        "AdaptiveECE": M.adaptive_ece(lp, y),
        "ClasswiseECE": M.classwise_ece(lp, y),
        "NLL": M.nll(lp, y),
        "Brier": M.brier(lp, y),
        "AURC": ood.aurc(conf, correct),
    }


def _make(name: str):
    return S.ClasswiseECE(num_classes=K) if name == "ClasswiseECE" else getattr(S, name)()


CASES = {"plain": (400, 0, 1.5, 0), "sharp+saturated": (400, 1, 4.0, 40), "mostly saturated": (120, 2, 2.0, 90)}
#: batch sizes, then one batch of the rest
SPLITS = {"one batch": [], "uneven": [1, 7, 64, 3], "singles then rest": [1] * 10}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("inputs", ["logits", "log_probs"])
@pytest.mark.parametrize("split", list(SPLITS))
@pytest.mark.parametrize("case", list(CASES))
def test_streaming_equals_the_array_metrics(case, split, inputs, dtype):
    z, y = _case(*CASES[case])
    x = torch.from_numpy(z if inputs == "logits" else M.log_softmax(z)).to(dtype)
    lp = M.log_softmax(x.double().numpy())  # the array metrics see the same (cast) values
    if case != "plain":
        assert (np.exp(lp.max(1)) == 1.0).sum() >= CASES[case][3]  # saturated: confidence exactly 1.0
    ref = _reference(lp, y)
    metrics = {name: _make(name) for name in ref}
    bounds = np.r_[np.cumsum([0] + SPLITS[split]), len(y)]
    for a, b in zip(bounds[:-1], bounds[1:]):
        for m in metrics.values():
            m.update(x[a:b], torch.from_numpy(y[a:b]))
    for name, m in metrics.items():
        assert float(m.compute()) == pytest.approx(ref[name], abs=1e-6), name


@pytest.mark.parametrize("score", ["one_minus_max_prob", "entropy"])
def test_fpr95_equals_fpr_at_tpr(score):
    z_in, _ = _case(300, 3, 3.0, 30)
    z_out, _ = _case(200, 4, 0.7, 5)
    z = np.r_[z_in, z_out]
    is_ood = np.r_[np.zeros(300, bool), np.ones(200, bool)]
    order = np.random.default_rng(5).permutation(500)  # in and OOD examples mixed in the batches
    z, is_ood = z[order], is_ood[order]
    s = ood.uncertainty_scores(M.log_softmax(z))[score]
    ref = ood.fpr_at_tpr(s[~is_ood], s[is_ood])
    from_logits, from_scores = S.FPR95(score=score), S.FPR95()
    for part in np.array_split(np.arange(500), 6):
        from_logits.update(torch.from_numpy(z[part]), torch.from_numpy(is_ood[part]))
        from_scores.update(torch.from_numpy(s[part]), torch.from_numpy(is_ood[part].astype(int)))
    assert float(from_logits.compute()) == pytest.approx(ref, abs=1e-6)
    assert float(from_scores.compute()) == pytest.approx(ref, abs=1e-12)


def test_merge_state_equals_one_metric_over_all_examples():
    """torchmetrics' public merge_state reduces the states as the distributed sync does (sum and cat)."""
    z, y = _case(*CASES["sharp+saturated"])
    ref = _reference(M.log_softmax(z), y)
    for name in ref:
        a, b = _make(name), _make(name)
        a.update(torch.from_numpy(z[:150]), torch.from_numpy(y[:150]))
        b.update(torch.from_numpy(z[150:]), torch.from_numpy(y[150:]))
        a.merge_state(b)
        assert float(a.compute()) == pytest.approx(ref[name], abs=1e-6), name


def _sync_worker(rank: int, world: int, init: str, out: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    z, y = _case(*CASES["sharp+saturated"])
    part = slice(0, 123) if rank == 0 else slice(123, None)
    values = {}
    for name in _reference(M.log_softmax(z[:2]), y[:2]):
        m = _make(name)
        m.update(torch.from_numpy(z[part]), torch.from_numpy(y[part]))
        values[name] = float(m.compute())  # compute() all-gathers the states first (sync_on_compute)
    if rank == 0:
        torch.save(values, out)
    dist.destroy_process_group()


def test_two_processes_sync_to_the_array_metrics(tmp_path):
    """A real gloo process group of two (forked, so no re-import: about 3 s on a loaded 2-core CPU); the rendezvous
    is a file, so no port is taken."""
    import torch.multiprocessing as mp

    out = tmp_path / "values.pt"
    ctx = mp.start_processes(
        _sync_worker,
        args=(2, (tmp_path / "rendezvous").as_uri(), str(out)),
        nprocs=2,
        join=False,
        start_method="fork",
    )
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=5):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail("the two-process sync did not finish in 120 s")
    z, y = _case(*CASES["sharp+saturated"])
    ref = _reference(M.log_softmax(z), y)
    assert torch.load(out) == pytest.approx(ref, abs=1e-6)


def test_saturated_confidence_opens_a_16th_bin_in_torchmetrics():
    """The documented difference (module docstring of harness.uncertainty.streaming): 10 forecasts with confidence
    exactly 1.0 (9 right) and 10 with 0.94 (all right), K = 2, 15 bins. Here (robustness_metrics) all 20 share the
    last bin: conf 0.97, acc 0.95, so ECE = RMS = MCE = 0.02. torchmetrics' bucketize gives conf = 1.0 a 16th bin:
    gaps 0.06 and 0.1 with weight 1/2 each, so ECE 0.08, RMS sqrt(0.0068) = 0.0825, MCE 0.1."""
    from torchmetrics.classification import MulticlassCalibrationError

    probs = torch.tensor([[1.0, 0.0]] * 10 + [[0.94, 0.06]] * 10, dtype=torch.float64)
    y = torch.tensor([1] + [0] * 19)
    ours = {"l1": S.ECE(), "l2": S.RMSCalibrationError(), "max": S.MCE()}
    theirs = {"l1": 0.08, "l2": np.sqrt(0.5 * 0.06**2 + 0.5 * 0.1**2), "max": 0.1}
    arrays = {"l1": M.ece, "l2": M.rms_calibration_error, "max": M.mce}
    with np.errstate(divide="ignore"):
        lp = np.log(probs.numpy())
    for norm, metric in ours.items():
        metric.update(probs.log(), y)
        assert float(metric.compute()) == pytest.approx(0.02, abs=1e-9) == arrays[norm](lp, y.numpy())
        tm = float(MulticlassCalibrationError(num_classes=2, n_bins=15, norm=norm)(probs, y))
        assert tm == pytest.approx(theirs[norm], abs=1e-6), norm
    # the same forecasts just below 1.0 (1 - 1e-6 survives torchmetrics' float32): the two agree again
    below = probs.clone()
    below[:10] = torch.tensor([1 - 1e-6, 1e-6], dtype=torch.float64)
    for norm, array in arrays.items():
        tm = float(MulticlassCalibrationError(num_classes=2, n_bins=15, norm=norm)(below, y))
        assert tm == pytest.approx(array(np.log(below.numpy()), y.numpy()), abs=1e-6), norm


@pytest.mark.parametrize(
    "preds, target, match",
    [
        (torch.full((4, 3), 1 / 3), torch.zeros(4, dtype=torch.long), "look like probabilities"),
        (torch.zeros(4, 3), torch.tensor([0, 1, 2, 3]), r"labels must lie in \[0, 3\)"),
        (torch.zeros(4, 3), torch.zeros(4), "integer class indices"),
        (torch.zeros(4, 3), torch.zeros(3, dtype=torch.long), "3 labels for 4 rows"),
        (torch.zeros(4), torch.zeros(4, dtype=torch.long), r"float tensor \[B, K\]"),
        (torch.tensor([[0.0, float("nan")], [0.0, 1.0]]), torch.zeros(2, dtype=torch.long), "NaN .* 1 of 2 rows"),
        (torch.tensor([[float("inf"), 0.0]]), torch.zeros(1, dtype=torch.long), "NaN .* \\+inf"),
    ],
)
def test_bad_input_is_refused_with_the_fix(preds, target, match):
    for metric in (S.ECE(), S.NLL(), S.AURC(), S.ClasswiseECE(num_classes=preds.shape[-1])):
        with pytest.raises(ValueError, match=match):
            metric.update(preds, target)


def test_settings_and_empty_metrics_are_refused():
    for make in (lambda: S.ECE(num_bins=0), lambda: S.AdaptiveECE(num_bins=1.5), lambda: S.ClasswiseECE(0)):
        with pytest.raises(ValueError, match=r"must be a whole number (>= 1|in \[1, 10000\])"):
            make()
    with pytest.raises(ValueError, match="unknown score 'mutual_information'"):
        S.FPR95(score="mutual_information")
    with pytest.raises(ValueError, match="made for num_classes=4"):
        S.ClasswiseECE(num_classes=4).update(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    for name in ("ECE", "ClasswiseECE", "NLL", "AdaptiveECE", "AURC"):
        with pytest.raises(ValueError, match="before any example"), pytest.warns(UserWarning, match="compute"):
            _make(name).compute()
    fpr = S.FPR95()
    fpr.update(torch.tensor([0.1, 0.2]), torch.tensor([False, False]))
    with pytest.raises(ValueError, match="in-distribution and OOD examples"):
        fpr.compute()


def test_the_package_exports_its_api_without_importing_torchmetrics():
    assert set(U.STREAMING) <= set(U.__all__) and all(hasattr(U, name) for name in U.__all__)
    assert U.ECE is S.ECE and U.ece is M.ece and U.aurc is ood.aurc
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        U.nope  # noqa: B018
    code = "import sys, harness.uncertainty; assert 'torchmetrics' not in sys.modules; print('light')"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "light\n"
