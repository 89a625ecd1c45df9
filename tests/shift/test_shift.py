"""Distribution shift: evaluation views and OOD sets of every data source, shifted predictions of
trained models and ensembles, the report section, ``harness shift`` and the stage of ``harness run``."""

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from harness.cli import main
from harness.config import load_config
from harness.data.config import DataConfig
from harness.data.sources import build_split
from harness.ensemble_folder import build_ensemble
from harness.shift.predict import predict_run
from harness.shift.sets import ood_images, synthetic_ood, views
from harness.shift.settings import ShiftSettings, check_settings
from harness.shift.store import load_set, load_sets
from harness.uncertainty import ood as O
from harness.uncertainty.ensembles import average
from harness.uncertainty.predictions import Predictions

CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"
#: the head's sample counts of each method (the homoscedastic head draws no noise and refuses them)
SAMPLES = {"hom": [], "het": ["model.head.train_mc_samples=8", "model.head.eval_mc_samples=16"]}
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10n"


# ------------------------------------------------------------------------------- data sources, OOD sets
def test_views_and_ood_sets_from_image_folder_and_tfds(tmp_path):
    rng = np.random.default_rng(0)
    for split, size in (("test", (40, 48)), ("empty", None)):
        (tmp_path / "folder" / split / "a").mkdir(parents=True)
        for i in range(5 if size else 0):
            Image.fromarray((rng.random(size + (3,)) * 255).astype(np.uint8)).save(
                tmp_path / "folder" / split / "a" / f"{i}.png"
            )
    run_data = DataConfig(source="digits", image_size=32, eval_resize=32)
    imgs, index = ood_images("f", {"source": "image_folder", "path": str(tmp_path / "folder")}, run_data, 3, 0)
    assert imgs.shape == (3, 32, 32, 3) and imgs.dtype == np.uint8 and len(index) == 3
    from harness.data.transforms import eval_transform  # the PIL view is the model's evaluation view

    base = build_split(DataConfig(source="image_folder", path=str(tmp_path / "folder")), "test")
    want = (eval_transform(32, 32)(base[int(index[0])][0]).numpy().transpose(1, 2, 0) * 0.5 + 0.5) * 255
    assert np.abs(imgs[0].astype(float) - want).max() <= 1.0
    with pytest.raises(ValueError, match="OOD set 'e' .*split 'empty'.*hold no image.*point the OOD set's path and"):
        ood_images("e", {"source": "image_folder", "path": str(tmp_path / "folder"), "split": "empty"}, run_data, 3, 0)
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
        imgs, index = ood_images("c", {"source": "tfds", "name": "cifar10", "split": "test"}, run_data, 4, 0)
    assert imgs.shape == (4, 32, 32, 3) and sorted(index) == list(index)
    np.testing.assert_array_equal(synthetic_ood("blobs", 3, 32, 7), synthetic_ood("blobs", 3, 32, 7))
    g = synthetic_ood("gaussian", 50, 32, 0) / 255.0
    assert abs(g.mean() - 0.5) < 0.02 and 0.2 < g.std() < 0.25  # N(0.5, 0.25²), clipped


@pytest.mark.skipif(not (SHARED / "cifar10_jpeg.zip").is_file(), reason="../shared/data/cifar10n not present")
def test_cifar10n_views_are_the_decoded_images():
    data = DataConfig(source="cifar10n", path=str(SHARED), image_size=32, eval_resize=32, loader="array")
    base = build_split(data, "test")
    rows = np.array([0, 17, 9999])
    np.testing.assert_array_equal(views(base, data, rows), base.pixels()[rows])  # 32 px: the view is the image


def test_settings_are_checked_before_any_work():
    data = DataConfig(image_size=32)
    sets = check_settings(ShiftSettings(corruptions=["noise"], severities=[1, 5], ood=["gaussian"]), data)
    assert [n for n, _ in sets] == [
        "clean",
        "gaussian_noise-1",
        "gaussian_noise-5",
        "shot_noise-1",
        "shot_noise-5",
        "impulse_noise-1",
        "impulse_noise-5",
        "ood-gaussian",
    ]
    with pytest.raises(ValueError, match="below the 32 px"):
        check_settings(ShiftSettings(corruptions=["frost"]), DataConfig(image_size=16))
    with pytest.raises(ValueError, match="unknown built-in OOD set 'svhn'"):
        check_settings(ShiftSettings(ood=["svhn"]))
    with pytest.raises(ValueError, match="differs from the model's data.image_size=32"):
        check_settings(ShiftSettings(ood=["x:source=image_folder,path=.,image_size=64"]), data)


# ----------------------------------------------------------------------------- trained digits models
@pytest.fixture(scope="module")
def digits_runs(tmp_path_factory):
    """A hom and a het digits model (3 epochs, about 60% top-1 on clean test images)."""
    import torch

    from harness.upstream.config import UpstreamConfig
    from harness.upstream.train import run

    root = tmp_path_factory.mktemp("shift")
    dirs = {}
    # one torch thread, as under the suite's xdist workers (tests/conftest.py): the same models (and the same
    # top-1) whether this file runs alone or in the suite; two threads sum in another order and train other models
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for method in ("hom", "het"):
            cfg = load_config(
                UpstreamConfig,
                CONFIGS / f"digits_{method}.yaml",
                [
                    "train.epochs=3",
                    *SAMPLES[method],
                    f"output_dir={root / method}",
                    f"data.cache_dir={root / 'cache'}",
                ],
            )
            dirs[method] = run(cfg, progress=False)
    finally:
        torch.set_num_threads(threads)
    return root, dirs


SETTINGS = ShiftSettings(corruptions=["gaussian_noise"], severities=[1, 5], ood=["gaussian", "blobs"])


def test_severe_gaussian_noise_lowers_the_accuracy_of_a_trained_model(digits_runs):
    _, dirs = digits_runs
    for method, d in dirs.items():
        predict_run(d, SETTINGS)
        _, sets = load_sets(d)
        assert list(sets) == ["clean", "gaussian_noise-1", "gaussian_noise-5", "ood-gaussian", "ood-blobs"]
        clean, saved = sets["clean"][0], Predictions.load(d)
        # the clean set is the run's own evaluation (up to the uint8 rounding of the 8 -> 32 px view)
        assert np.abs(clean.logits - saved.logits).max() < 0.1
        assert (clean.logits.argmax(1) == saved.logits.argmax(1)).mean() > 0.97
        top1 = {n: p.metrics()["top1"] for n, (p, _) in sets.items() if not n.startswith("ood")}
        assert top1["clean"] > 0.4 and top1["gaussian_noise-5"] < top1["clean"] - 0.1, (method, top1)
        ood, ent = sets["ood-blobs"]
        assert len(ood.index) == len(clean.index) and (ood.targets == -1).all()
        if method == "het":  # MC entropy of the head's samples: mutual information >= 0, and not all 0
            mi = O.mutual_information(clean.log_probs(), sets["clean"][1])
            assert (mi >= 0).all() and mi.max() > 0 and (d / "shift" / "clean" / "mc.npz").is_file()
        else:
            assert ent is None and not (d / "shift" / "clean" / "mc.npz").exists()


def test_shift_predictions_resume_and_start_over(digits_runs):
    _, dirs = digits_runs
    d = dirs["hom"]
    predict_run(d, SETTINGS)
    stamps = {f: f.stat().st_mtime_ns for f in (d / "shift").rglob("predictions.npz")}
    predict_run(d, ShiftSettings(corruptions=["gaussian_noise"], severities=[1, 5, 3], ood=["gaussian", "blobs"]))
    assert all(f.stat().st_mtime_ns == t for f, t in stamps.items())  # done sets are kept ...
    assert (d / "shift" / "gaussian_noise-3" / "predictions.npz").is_file()  # ... the new one is added
    other = ShiftSettings(corruptions=[], examples=50, ood=[])
    with pytest.raises(ValueError, match=r"holds clean, gaussian_noise-1, .*--examples 0 .*--overwrite to replace"):
        predict_run(d, other)  # another subset: the sets there are kept (audit18 A18-04) ...
    assert (d / "shift" / "gaussian_noise-1" / "predictions.npz").is_file()
    spec = predict_run(d, other, overwrite=True)  # ... or replaced, with overwrite: start over
    assert list(spec["sets"]) == ["clean"] and not (d / "shift" / "gaussian_noise-1").exists()
    assert len(load_set(d / "shift" / "clean")[0].index) == 50
    predict_run(d, SETTINGS, overwrite=True)


def test_ensembles_average_the_members_sets_and_the_report_shows_them(digits_runs, tmp_path):
    _, dirs = digits_runs
    for d in dirs.values():
        predict_run(d, SETTINGS)
    ens = tmp_path / "ens"
    res = CliRunner().invoke(main, ["ensemble", "--members", str(dirs["hom"]), str(dirs["het"]), "--out", str(ens)])
    assert res.exit_code == 0 and "shift sets averaged: 5" in res.output, res.output
    members = [load_set(d / "shift" / "gaussian_noise-5") for d in dirs.values()]
    got, mean_ent = load_set(ens / "shift" / "gaussian_noise-5")
    np.testing.assert_allclose(got.logits, average([p for p, _ in members]).logits, atol=1e-6)
    np.testing.assert_allclose(mean_ent, np.mean([O.entropy(p.log_probs()) for p, _ in members], axis=0))
    assert (O.mutual_information(got.log_probs(), mean_ent) >= 0).all()

    res = CliRunner().invoke(
        main, ["report", str(dirs["hom"]), str(dirs["het"]), str(ens), "--name", "r", "--out-root", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    shift = report["shift"]
    assert [e["label"] for e in shift["entries"]] == ["hom seed 0", "het seed 0", "het+hom ensemble of 2"]
    assert shift["corruptions"] == ["gaussian_noise"] and shift["severities"] == [1, 5]
    het = shift["entries"][1]
    assert set(het["ood"]["blobs"]) == {"one_minus_max_prob", "entropy", "mutual_information"}
    assert set(shift["entries"][0]["ood"]["blobs"]) == {"one_minus_max_prob", "entropy"}  # hom: no components
    assert het["sets"]["gaussian_noise-5"]["top1"] == pytest.approx(
        load_set(dirs["het"] / "shift" / "gaussian_noise-5")[0].metrics()["top1"]
    )
    md, page = (tmp_path / "r" / "report.md").read_text(), (tmp_path / "r" / "report.html").read_text()
    for f in report["figures"]["shift"]:
        assert (tmp_path / "r" / f).is_file() and f"]({f})" in md
    assert "## Distribution shift" in md and "AURC" in md and "FPR at 95% TPR" in md
    assert page.count("data:image/png;base64,") == len(report["figures"]["reliability"]) + len(
        report["figures"]["shift"]
    ) + (1 if report["figures"]["covariance_ranks"] else 0)
    res = CliRunner().invoke(
        main, ["report", str(dirs["hom"]), "--name", "n", "--out-root", str(tmp_path), "--no-shift"]
    )
    assert res.exit_code == 0 and json.loads((tmp_path / "n" / "report.json").read_text())["shift"] is None


def test_report_and_ensembles_use_only_the_sets_every_entry_has(digits_runs, tmp_path):
    import shutil

    from harness.report.shift import section
    from harness.shift.predict import average_ensemble

    _, dirs = digits_runs
    for d in dirs.values():
        predict_run(d, SETTINGS)
    parts = []
    for i in range(2):  # copies of the het run whose shift evaluation was killed after the clean set
        part = tmp_path / f"het_part{i}"
        shutil.copytree(dirs["het"], part)
        spec = json.loads((part / "shift" / "shift.json").read_text())
        spec["sets"] = {"clean": spec["sets"]["clean"]}  # 'order' still lists every planned set
        (part / "shift" / "shift.json").write_text(json.dumps(spec))
        for n in ("gaussian_noise-1", "gaussian_noise-5", "ood-gaussian", "ood-blobs"):
            shutil.rmtree(part / "shift" / n)
        parts.append(part)
    out = section([("hom", "hom", "single", dirs["hom"]), ("part", "het", "single", parts[0])])
    assert out["json"]["corruptions"] == [] and out["json"]["severities"] == [] and out["json"]["ood_sets"] == []
    assert [f for _, f, _ in out["figures"]] == ["shift_risk_coverage.png"]  # no corrupted panel, no crash
    full = section([("hom", "hom", "single", dirs["hom"]), ("het", "het", "single", dirs["het"])])
    assert full["json"]["severities"] == [1, 5] and "shift_severity.png" in full["json"]["figures"]
    ens = tmp_path / "ens"
    ens.mkdir()
    (ens / "ensemble.json").write_text(json.dumps({"members": [str(p) for p in parts]}))
    assert average_ensemble(ens)["order"] == ["clean"]  # the sets neither member finished are left out


def test_shift_command_on_run_and_ensemble_folders(digits_runs, tmp_path):
    import shutil

    _, dirs = digits_runs
    copies = [tmp_path / m for m in dirs]  # copies: other settings here leave the shared runs as they are
    for d, c in zip(dirs.values(), copies):
        shutil.copytree(d, c, ignore=shutil.ignore_patterns("shift", "checkpoints", "tb"))
    build_ensemble(copies, tmp_path / "ens")
    res = CliRunner().invoke(
        main,
        [
            "shift",
            "--members",
            str(tmp_path / "ens"),
            "--corruptions",
            "gaussian_noise",
            "--severities",
            "5",
            "--examples",
            "40",
            "--ood",
            "blobs",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "corrupted mean top1" in res.output and "blobs AUROC" in res.output
    spec = json.loads((tmp_path / "ens" / "shift" / "shift.json").read_text())
    assert spec["order"] == ["clean", "gaussian_noise-5", "ood-blobs"] and spec["examples"] == 40
    assert json.loads((copies[1] / "shift" / "shift.json").read_text())["examples"] == 40  # members done first
    res = CliRunner().invoke(main, ["shift", "-m", str(copies[0]), "--severities", "0-2"])
    assert res.exit_code != 0 and "severity 0 is not one of" in res.output


# ------------------------------------------------------------------------------------------ harness run
TINY = """
name: tiny_shift
upstream_config: digits_base.yaml
upstream_overrides: [train.epochs=1, data.limit_train=256, data.cache_dir={root}/cache]
methods:
  hom: {{covariance: none}}
  het: {{covariance: low_rank, num_factors: 3, train_mc_samples: 8, eval_mc_samples: 16}}
seeds: [0, 1]
ensemble_sizes: [2]
workers: 2
downstream: {{tasks: []}}
shift:
  corruptions: [gaussian_noise, contrast]
  severities: [2, 5]
  examples: 60
  ood: [blobs]
runs_root: {root}/runs
results_root: {root}/results
"""


@pytest.mark.slow
def test_harness_run_evaluates_every_model_and_ensemble_under_shift(tmp_path):
    from harness.experiment import load_experiment, run_experiment

    path = tmp_path / "tiny.yaml"
    path.write_text(TINY.format(root=tmp_path))
    res = CliRunner().invoke(main, ["run", str(path)])
    assert res.exit_code == 0, res.output
    out = tmp_path / "results" / "tiny_shift"
    report = json.loads((out / "report.json").read_text())
    labels = ["hom seed 0", "hom seed 1", "het seed 0", "het seed 1", "hom ensemble of 2", "het ensemble of 2"]
    assert [e["label"] for e in report["shift"]["entries"]] == labels
    assert report["shift"]["examples"] == 60 and report["shift"]["ood_sets"] == ["blobs"]
    assert "shift" in report["wall_minutes"]["stages"]
    sets = ["clean", "gaussian_noise-2", "gaussian_noise-5", "contrast-2", "contrast-5", "ood-blobs"]
    for folder in [
        *(tmp_path / "runs" / "tiny_shift" / "upstream").iterdir(),
        *(tmp_path / "runs" / "tiny_shift" / "ensembles").iterdir(),
    ]:
        assert json.loads((folder / "shift" / "shift.json").read_text())["order"] == sets, folder
    assert len(list((tmp_path / "cache" / "corrupted").iterdir())) == 4  # one cached copy per set, shared
    md = (out / "report.md").read_text()
    assert "## Distribution shift" in md and all(f"]({f})" in md for f in report["figures"]["shift"])
    first = tmp_path / "runs" / "tiny_shift" / "upstream" / "het_s0" / "shift" / "contrast-5" / "predictions.npz"
    stamp = first.stat().st_mtime_ns
    run_experiment(load_experiment(str(path)), progress=lambda s: None)  # a rerun re-predicts nothing
    assert first.stat().st_mtime_ns == stamp
