"""Compact records of finished runs (save_record / restore_record) and the run-folder readers added
with them (run_method, noise_transition, clean_data)."""

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from harness.config import load_config, to_yaml
from harness.runs import RECORD_FILES, clean_data, noise_transition, restore_record, run_method, save_record
from harness.upstream.config import UpstreamConfig

CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"
TINY = ["train.epochs=1", "data.limit_train=128"]


def _config(out: Path, *extra: str, head=None) -> UpstreamConfig:
    cfg = load_config(UpstreamConfig, CONFIGS / "digits_base.yaml", [*TINY, *extra, f"output_dir={out}"])
    cfg.model.head = dict(head or {"covariance": "none"})
    return cfg


def _train(out: Path) -> Path:
    from harness.upstream.train import run

    return Path(run(_config(out), progress=False))


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("records") / "run")


def _copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


def _assert_same_files(run: Path, record: Path, names) -> None:
    for name in names:
        if name.endswith(".npz"):
            with np.load(run / name) as a, np.load(record / name) as b:
                assert sorted(a.files) == sorted(b.files)
                for k in a.files:
                    assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), (name, k)
        else:
            assert (run / name).read_bytes() == (record / name).read_bytes(), name


def test_save_record_copies_exactly_the_record_files_compressed(finished, tmp_path):
    run = _copy(finished, tmp_path / "run")
    assert (run / "checkpoints").is_dir() and (run / "metrics.jsonl").is_file()  # not part of a record
    present = [n for n in RECORD_FILES if (run / n).is_file()]
    assert set(present) == set(RECORD_FILES)  # this run has a held-out split: every record file
    assert save_record(run, tmp_path / "rec") is True
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == sorted(present)
    _assert_same_files(run, tmp_path / "rec", present)
    for name in ("predictions.npz", "heldout_predictions.npz"):
        with zipfile.ZipFile(tmp_path / "rec" / name) as z:
            assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    # a run without a held-out split: the record has no held-out predictions either
    other = _copy(finished, tmp_path / "other")
    (other / "heldout_predictions.npz").unlink()
    assert save_record(other, tmp_path / "rec2") is True
    assert sorted(p.name for p in (tmp_path / "rec2").iterdir()) == sorted(set(RECORD_FILES) - {"heldout_predictions.npz"})


def test_save_record_is_a_no_op_the_second_time_and_rewrites_a_changed_run(finished, tmp_path):
    run = _copy(finished, tmp_path / "run")
    rec = tmp_path / "rec"
    assert save_record(run, rec) is True
    stamps = {p.name: p.stat().st_mtime_ns for p in rec.iterdir()}
    assert save_record(run, rec) is False
    assert {p.name: p.stat().st_mtime_ns for p in rec.iterdir()} == stamps
    # the run finished again with other metrics: the record follows it
    m = json.loads((run / "metrics.json").read_text())
    m["wall_seconds"] = 1234.5
    (run / "metrics.json").write_text(json.dumps(m))
    assert save_record(run, rec) is True
    assert json.loads((rec / "metrics.json").read_text())["wall_seconds"] == 1234.5


def test_save_record_refuses_an_unfinished_run(finished, tmp_path):
    run = _copy(finished, tmp_path / "run")
    (run / "model.pt").unlink()
    assert save_record(run, tmp_path / "rec") is False and not (tmp_path / "rec").exists()
    run2 = _copy(finished, tmp_path / "run2")
    (run2 / "metrics.json").unlink()
    assert save_record(run2, tmp_path / "rec2") is False and not (tmp_path / "rec2").exists()


def test_restore_record_recreates_a_run_that_then_counts_as_done(tmp_path, monkeypatch):
    import harness.upstream.train as T

    out = tmp_path / "run"
    cfg = _config(out)
    T.run(cfg, progress=False)
    metrics = (out / "metrics.json").read_bytes()
    assert save_record(out, tmp_path / "rec")
    shutil.rmtree(out)
    assert restore_record(tmp_path / "rec", out) is True
    assert sorted(p.name for p in out.iterdir()) == sorted(RECORD_FILES)
    _assert_same_files(tmp_path / "rec", out, RECORD_FILES)
    assert restore_record(tmp_path / "rec", out) is False  # a finished run is left alone

    def no_training(*args, **kwargs):
        raise AssertionError("a restored run was trained again")

    monkeypatch.setattr(T, "_train", no_training)
    assert Path(T.run(cfg, progress=False)) == out
    assert (out / "metrics.json").read_bytes() == metrics
    assert not (out / "checkpoints").exists()
    # an empty or unfinished record restores nothing
    (tmp_path / "empty").mkdir()
    assert restore_record(tmp_path / "empty", tmp_path / "nowhere") is False and not (tmp_path / "nowhere").exists()


def test_restore_record_does_not_overwrite_a_finished_run(finished, tmp_path):
    run = _copy(finished, tmp_path / "run")
    save_record(run, tmp_path / "rec")
    m = json.loads((tmp_path / "rec" / "metrics.json").read_text())
    m["wall_seconds"] = -1.0
    (tmp_path / "rec" / "metrics.json").write_text(json.dumps(m))
    before = (run / "metrics.json").read_bytes()
    assert restore_record(tmp_path / "rec", run) is False and (run / "metrics.json").read_bytes() == before


# --- run_method, noise_transition, clean_data --------------------------------------------------------------------


def _folder(tmp_path: Path, name: str, *extra: str, head=None) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.yaml").write_text(to_yaml(_config(d, *extra, head=head)))
    return d


def test_run_method_adds_the_loss_suffix(tmp_path):
    assert run_method(_folder(tmp_path, "a", "train.loss=forward")) == "hom-fwd"
    assert run_method(_folder(tmp_path, "b", "train.loss=label_smoothing")) == "hom-ls"
    assert run_method(_folder(tmp_path, "c")) == "hom"
    het = {"covariance": "low_rank", "num_factors": 3}
    assert run_method(_folder(tmp_path, "d", "train.loss=forward", head=het)) == "het-fwd"
    assert run_method(_folder(tmp_path, "e", head={"covariance": "diagonal"})) == "diag"


def test_noise_transition_of_a_synthetic_pair_flip_run(finished, tmp_path):
    t = noise_transition(finished)
    meta = json.loads((finished / "run.json").read_text())["label_noise"]
    assert meta["kind"] == "pair_flip"
    assert np.array_equal(t, np.asarray(meta["transition"]))
    k = t.shape[0]
    assert t.shape == (10, 10) and np.allclose(t.sum(1), 1.0, atol=1e-3)
    allowed = np.eye(k, dtype=bool) | np.roll(np.eye(k, dtype=bool), 1, axis=1)  # c -> c and c -> c + 1
    assert np.all(t[~allowed] == 0) and t[allowed].min() >= 0
    # 30% nominal: the realised off-diagonal mass is near it
    assert 0.15 < 1 - np.trace(t) / k < 0.45
    # a run on clean digits labels has none
    clean = _folder(tmp_path, "clean", "data.label_noise={}")
    (clean / "run.json").write_text(json.dumps({"label_noise": None}))
    assert noise_transition(clean) is None


def test_clean_data_drops_label_noise_and_takes_the_clean_label_set():
    cfg = _config(Path("unused"), "data.label_set=aggre")
    data = cfg.data
    assert data.label_noise["kind"] == "pair_flip" and data.label_set == "aggre"
    clean = clean_data(data)
    assert clean.label_noise == {} and clean.label_set == "clean"
    assert clean.heldout_split == data.heldout_split and clean.source == data.source
    assert data.label_noise["kind"] == "pair_flip" and data.label_set == "aggre"  # the original is unchanged
