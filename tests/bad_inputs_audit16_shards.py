"""Bad inputs found by the sixteenth reliability audit on runs trained on shards (``audit16 A16-05``): the report, the
ensemble's re-prediction and the covariance analysis of such a run work (a packed split is streamed); what needs a
split's images by index (``harness shift``, an OOD set) is refused before any work, naming the run and the fix.

Packs are made with ``harness data pack digits`` (a few dozen examples); run folders by hand where no model is read,
one tiny het run trained on shards where one is.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
from bad_inputs_audit9_config import CONFIGS

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli

DIGITS = [str(i) for i in range(10)]


def _packs(tmp: Path, *noise: str) -> Path:
    """``tmp/pk``: digits' train (60), test (40) and val (40) splits packed; ``noise``: key=value settings of the val
    pack (e.g. symmetric label noise drawn on it as a held-out split)."""
    pk = tmp / "pk"
    _cli("data", "pack", "digits", str(pk), "--shard-size", "100", "--split", "train", "limit_train=60")
    _cli("data", "pack", "digits", str(pk), "--shard-size", "100", "--split", "test", "limit_eval=40")
    _cli("data", "pack", "digits", str(pk), "--shard-size", "100", "--split", "val", "limit_eval=40", *noise)
    return pk


def _labels(pk: Path, split: str) -> np.ndarray:
    """The packed labels of ``split`` by example (the source's row), read from its stream."""
    from harness.data.config import DataConfig
    from harness.data.shards import shard_loader

    loader, _ = shard_loader(DataConfig(source="shards", path=str(pk)), split, train=False, rank=0, world_size=1)
    y, idx = zip(*((np.asarray(b[1]), np.asarray(b[2])) for b in loader))
    return np.concatenate(y)[np.argsort(np.concatenate(idx))]


def _shards_run(folder: Path, pk: Path, seed: int = 0) -> Path:
    """A run folder by hand, trained on the shards ``pk`` (config, predictions on test and val with the packed
    labels, metrics; a placeholder model.pt that no case loads)."""
    from harness.io import atomic_write_text
    from harness.uncertainty.predictions import Predictions

    rng = np.random.default_rng(seed)
    for name, split in (("predictions.npz", "test"), ("heldout_predictions.npz", "val")):
        y = _labels(pk, split)
        logits = rng.normal(size=(len(y), 10)) + 3 * np.eye(10)[y]
        Predictions(logits, y, np.arange(len(y)), DIGITS, "softmax", str(folder)).save(folder / name)
    atomic_write_text(
        folder / "config.yaml",
        f"seed: {seed}\nmodel:\n  head:\n    covariance: none\n    link: softmax\ndata:\n  source: shards\n"
        f"  path: {pk}\n  heldout_split: val\n  image_size: 32\n  eval_resize: 32\n",
    )
    atomic_write_text(folder / "metrics.json", json.dumps({"command": "by hand", "eval_data": "digits shards"}))
    (folder / "model.pt").write_bytes(b"placeholder: no case loads it")
    return folder


def _report(tmp: Path, name: str, *folders: Path) -> dict:
    _cli("report", *map(str, folders), "--out-root", str(tmp / "rep"), "--name", name, "--no-covariance")
    return json.loads((tmp / "rep" / name / "report.json").read_text())


# ------------------------------------------------------------------------------------------ A16-05: harness report
@handled(
    "report",
    "harness report of a run trained on shards of the source's own labels, and of an ensemble of two such runs "
    "(audit16 A16-05: rc 1, \"data.source='shards' is read as a stream, not by index: read it with "
    'harness.data.shards.shard_loader" from the clean held-out labels, though the run drew no label noise)',
    r"reported: calibration on the held-out split's own \(clean\) labels",
)
def _report_shards_run(tmp):
    pk = _packs(tmp)
    a, b = _shards_run(tmp / "a", pk), _shards_run(tmp / "b", pk, seed=1)
    single = _report(tmp, "r1", a)
    cal = single["entries"][0]["calibration"]
    assert cal["noisy_labels_differ"] == 0.0 and cal["fit_clean"] is not None, cal
    assert "packed as 1 shard(s)" in single["heldout_data"], single["heldout_data"]
    _cli("ensemble", "-m", str(a), str(b), "--out", str(tmp / "ens"))
    both = _report(tmp, "r2", tmp / "ens", a, b)
    assert all(e["calibration"]["noisy_labels_differ"] == 0.0 for e in both["entries"]), both["entries"]
    return "reported: calibration on the held-out split's own (clean) labels, for a run and an ensemble of two"


@handled(
    "report",
    "harness report of a run trained on shards whose held-out pack holds noisy labels (label noise drawn at "
    "packing) (audit16 A16-05: rc 1, the report failed for want of clean labels the pack does not record)",
    r"reported without the clean-label rows",
)
def _report_shards_noisy_pack(tmp):
    pk = _packs(tmp, "heldout_split=val", "label_noise.kind=symmetric", "label_noise.rate=0.3")
    out = _report(tmp, "r3", _shards_run(tmp / "a", pk))
    cal = out["entries"][0]["calibration"]
    assert cal["noisy_labels_differ"] is None and cal["fit_clean"] is None, cal
    md = (tmp / "rep" / "r3" / "report.md").read_text()
    assert "their clean labels are not known (a run trained on shards whose pack holds noisy labels" in md
    assert "oracle" not in md, "the oracle's columns (clean held-out labels) are left out"
    return "reported without the clean-label rows, with a sentence saying why"


# --------------------------------------------------------------------------------------------- A16-05: harness shift
@bad_input(
    "shift",
    "harness shift -m RUN of a run trained on shards (audit16 A16-05: \"data.source='shards' is read as a stream, "
    'not by index: read it with harness.data.shards.shard_loader", a Python internal, from the prediction)',
    click.ClickException,
    r"^.*a was trained and evaluated on data.source=shards \(data.path=.*pk \(packed from scikit-learn digits, test "
    r"split .*\)\), read as a stream, and harness shift re-predicts the evaluation split's images by index .*which a "
    r"stream cannot give: harness shift covers runs on a source read by index \(digits, cifar10n, image_folder, tfds, "
    r"manifest\); leave .*a out of harness shift .*train it on the data source its shards were packed from",
)
def _shift_shards_run(tmp):
    run = _shards_run(tmp / "a", _packs(tmp))  # model.pt is a placeholder: refused before it is read
    try:
        _cli("shift", "-m", str(run), "--corruptions", "gaussian_noise", "--severities", "1")
    finally:
        assert not (run / "shift").exists()


@bad_input(
    "shift",
    "harness shift --ood 'pk:source=shards,path=PACK' (found with audit16 A16-05: an OOD set of a stream source, "
    "read by index when predicted)",
    click.ClickException,
    r"OOD set 'pk:source=shards,path=.*': source=shards is read as a stream, and an OOD set's images are drawn by "
    r"index .*: give a source read by index \(digits, cifar10n, image_folder, tfds, manifest\)",
)
def _shift_ood_shards(tmp):
    from bad_inputs_shift import _run

    pk = _packs(tmp)
    _cli("shift", "-m", str(_run(str(tmp / "a"))), "--corruptions", "none", "--ood", f"pk:source=shards,path={pk}")


# ------------------------------------------------------------- A16-05: re-predicting a run trained on shards (works)
@handled(
    "ensemble",
    "harness ensemble --from-checkpoints of two runs trained on shards, and the covariance analysis of harness report "
    "of a het run trained on shards (audit16 A16-05: both re-predict the run's evaluation split, which failed with "
    '"read it with harness.data.shards.shard_loader")',
    r"re-predicted from the shards",
)
def _repredict_shards_runs(tmp):
    from harness.runs import covariance_analysis
    from harness.uncertainty.predictions import Predictions

    pk = _packs(tmp)
    runs = []
    for seed in (0, 1):
        _cli(
            "upstream", "--config", str(CONFIGS / ("digits_het.yaml" if seed else "digits_hom.yaml")),
            "train.epochs=1", "train.log_with=[]", "data.source=shards", f"data.path={pk}", "data.label_noise=null",
            "data.image_size=16", "data.eval_resize=16", "data.batch_size=32", f"seed={seed}", f"output_dir={tmp / f'r{seed}'}",
        )  # fmt: skip
        runs.append(tmp / f"r{seed}")
    _cli("ensemble", "-m", *map(str, runs), "--out", str(tmp / "ens"), "--from-checkpoints")
    mean = np.mean([np.exp(Predictions.load(r).log_probs()) for r in runs], axis=0)
    again = Predictions.load(tmp / "ens")
    assert np.allclose(np.exp(again.log_probs()), mean, atol=1e-5), "re-predicted = saved predictions, by example"
    cov = covariance_analysis(runs[1], runs[0], Predictions.load(runs[0]))
    assert cov["num_examples"] == 40, cov["num_examples"]
    return "re-predicted from the shards: the ensemble equals the saved predictions; covariance over 40 examples"
