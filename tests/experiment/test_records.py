"""Compact records of finished runs (save_record / restore_record) and the run-folder readers added
with them (run_method, noise_transition, clean_data)."""

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.config import load_config, to_yaml
from harness.records import HASHES_FILE, verify_record
from harness.runs import RECORD_FILES, clean_data, noise_transition, restore_record, run_method, save_record
from harness.upstream.config import UpstreamConfig

CONFIGS = Path(__file__).resolve().parents[2] / "upstream" / "configs"
TINY = ["train.epochs=1", "data.limit_train=128"]


def _config(out: Path, *extra: str, head=None) -> UpstreamConfig:
    cfg = load_config(
        UpstreamConfig, CONFIGS / "digits_base.yaml", [*TINY, *extra, f"output_dir={out}"], distinct=False
    )
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
    from omegaconf import OmegaConf

    for name in names:
        if name == "config.yaml":  # the same config; a record names its run folder relatively
            a, b = (OmegaConf.to_container(OmegaConf.load(d / name)) for d in (run, record))
            assert {**a, "output_dir": None} == {**b, "output_dir": None}
        elif name.endswith(".npz"):
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
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == sorted([*present, HASHES_FILE])
    _assert_same_files(run, tmp_path / "rec", present)
    assert OmegaConf.load(tmp_path / "rec" / "config.yaml").output_dir == "run"  # relative: the folder's name
    for name in ("predictions.npz", "heldout_predictions.npz"):
        with zipfile.ZipFile(tmp_path / "rec" / name) as z:
            assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in z.infolist())
    # a run without a held-out split: the record has no held-out predictions either
    other = _copy(finished, tmp_path / "other")
    (other / "heldout_predictions.npz").unlink()
    assert save_record(other, tmp_path / "rec2") is True
    assert sorted(p.name for p in (tmp_path / "rec2").iterdir()) == sorted(
        set(RECORD_FILES) - {"heldout_predictions.npz"} | {HASHES_FILE}
    )


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


# --- records are verified before use ----------------------------------------------------------------------------------
def _reverse_logits(path: Path) -> None:
    """What the audit did (Q_rec2_tamper): a valid predictions file whose logit columns are reversed."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["logits"] = arrays["logits"][:, ::-1].copy()
    np.savez_compressed(path, **arrays)


def test_a_tampered_record_is_refused_and_restores_nothing(finished, tmp_path):
    """Audit Q_rec2_tamper: a record whose predictions.npz was altered went into the report (top-1 6.41% instead of its
    own metrics.json's 18.66%), exit 0."""
    rec = tmp_path / "rec"
    assert save_record(_copy(finished, tmp_path / "run"), rec)
    _reverse_logits(rec / "predictions.npz")
    with pytest.raises(
        ValueError,
        match=r"predictions\.npz does not match the SHA-256 written with the record.*git "
        r"checkout -- .*rec",
    ):
        restore_record(rec, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()
    # audit 2026-11-27: predictions and metrics changed together and record.json deleted were "verified by metrics
    # alone" and blessed with fresh hashes; a record without hashes is now never used
    (rec / HASHES_FILE).unlink()
    with pytest.raises(
        ValueError,
        match=r"record\.json is missing, so its files cannot be checked.*harness run "
        r"EXPERIMENT --sync-records",
    ):
        restore_record(rec, tmp_path / "restored")
    assert not (tmp_path / "restored").exists() and not (rec / HASHES_FILE).exists()


@pytest.mark.parametrize(
    "damage", ["truncate_predictions", "truncate_model", "drop_heldout_hash", "short_digest", "unknown_file"]
)
def test_a_damaged_record_is_refused_before_anything_is_written(finished, tmp_path, damage):
    """Audit Q_rec2_trunc (a BadZipFile traceback after training), Q_rec2_truncmodel (found at the shift stage)."""
    rec = tmp_path / "rec"
    assert save_record(_copy(finished, tmp_path / "run"), rec)
    if damage == "truncate_predictions":
        data = (rec / "predictions.npz").read_bytes()
        (rec / "predictions.npz").write_bytes(data[: len(data) // 2])
        match = r"predictions\.npz does not match the SHA-256"
    elif damage == "truncate_model":
        data = (rec / "model.pt").read_bytes()
        (rec / "model.pt").write_bytes(data[: len(data) // 2])
        match = r"model\.pt does not match the SHA-256"
    else:  # record.json against its schema (audit 2026-11-27: one omitting model.pt let a damaged one through)
        hashes = json.loads((rec / HASHES_FILE).read_text())
        if damage == "drop_heldout_hash":
            hashes["files"] = {"predictions.npz": hashes["files"]["predictions.npz"]}
            match = r"not in record\.json: a file the record holds must be hashed"
        elif damage == "short_digest":
            hashes["files"]["model.pt"] = "0"
            match = r"record\.json is not a record's hash list \(files\.model\.pt must be a SHA-256 of 64 hex digits, got '0'\)"
        else:
            hashes["files"]["notes.txt"] = "0" * 64
            match = (
                r"record\.json is not a record's hash list \(files names 'notes\.txt': a record holds only config\.yaml"
            )
        (rec / HASHES_FILE).write_text(json.dumps(hashes))
    with pytest.raises(ValueError, match=match):
        restore_record(rec, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()


def test_a_record_restores_into_another_runs_root_and_counts_as_done(tmp_path, monkeypatch):
    """Audit Q01: records held the absolute output_dir, so restored into another runs_root every run was refused as
    'a different config' whose only difference was output_dir."""
    import harness.upstream.train as T

    cfg = _config(tmp_path / "a" / "run")
    T.run(cfg, progress=False)
    assert save_record(tmp_path / "a" / "run", tmp_path / "rec")
    other = tmp_path / "b" / "run"
    assert restore_record(tmp_path / "rec", other, expected=to_yaml(_config(other))) is True
    monkeypatch.setattr(T, "_train", lambda *a, **k: pytest.fail("a restored run was trained again"))
    assert Path(T.run(_config(other), progress=False)) == other
    # a record of another config than the plan's is refused before anything is written
    with pytest.raises(
        ValueError,
        match=r"(?s)holds a run of another config than this experiment plans for run:"
        r".*epochs: 2",
    ):
        restore_record(
            tmp_path / "rec",
            tmp_path / "c" / "run",
            expected=to_yaml(_config(tmp_path / "c" / "run", "train.epochs=2")),
        )
    assert not (tmp_path / "c").exists()


def test_a_record_without_hashes_is_recorded_again_from_its_finished_run(finished, tmp_path):
    rec = tmp_path / "rec"
    assert save_record(_copy(finished, tmp_path / "run"), rec)
    (rec / HASHES_FILE).unlink()
    with pytest.raises(ValueError, match="record.json is missing"):
        verify_record(rec)
    # save_record beside the finished run (what harness run --sync-records does) writes it again, with its hashes
    assert save_record(tmp_path / "run", rec) is True
    assert verify_record(rec) is True


COMMITTED = Path(__file__).resolve().parents[2] / "results" / "cifar10n" / "records"


@pytest.mark.skipif(not COMMITTED.is_dir(), reason="no committed cifar10n records")
@pytest.mark.parametrize("name", ["hom_s0", "het_t1.3_s1", "multilabel_pe-sigmoid_s0"])
def test_the_committed_records_carry_their_hashes_verify_and_restore(tmp_path, name):
    rec = shutil.copytree(COMMITTED / name, tmp_path / "records" / name)
    assert (rec / HASHES_FILE).is_file()  # migrated once: every committed record hashes each of its files
    assert verify_record(rec) is True
    assert restore_record(rec, tmp_path / "runs" / name) is True


def test_sync_records_takes_the_experiment_lock_and_verifies_every_record_first(finished, tmp_path):
    """Audit Q10: --sync-records took no lock and wrote into run folders a running harness run was training."""
    from harness.experiment import load_experiment
    from harness.experiment.stages import EXPERIMENT_LOCK, sync_records_locked
    from harness.io import RunLock

    exp = load_experiment(
        "digits", (f"runs_root={tmp_path / 'runs'}", f"results_root={tmp_path / 'results'}", "records=true")
    )
    records = tmp_path / "results" / "digits" / "records"
    for name in ("hom_s0", "hom_s1"):
        assert save_record(_copy(finished, tmp_path / name), records / name)
    with RunLock(tmp_path / "runs", name=EXPERIMENT_LOCK, clean=False):  # a harness run in this runs_root
        with pytest.raises(ValueError, match="is being written by another process.*sync the records when it has"):
            sync_records_locked(exp)
    assert not (tmp_path / "runs" / "digits").exists()
    _reverse_logits(records / "hom_s1" / "predictions.npz")
    with pytest.raises(ValueError, match=r"hom_s1: predictions\.npz does not match the SHA-256"):
        sync_records_locked(exp)
    assert not (tmp_path / "runs" / "digits" / "upstream").exists()  # checked before anything was restored
    shutil.rmtree(records / "hom_s1")
    assert sync_records_locked(exp) == (1, 0)
    assert (tmp_path / "runs" / "digits" / "upstream" / "hom_s0" / "metrics.json").is_file()
