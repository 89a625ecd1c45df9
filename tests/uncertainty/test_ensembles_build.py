"""Building ensemble folders from hand-made run folders; the import layers of the uncertainty code."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from harness.ensemble_folder import build_ensemble
from harness.uncertainty.ensembles import average, check_compatible
from harness.uncertainty.predictions import Predictions

from bad_inputs_uncertainty import CLASSES, make_run

ROOT = Path(__file__).resolve().parents[2]


def test_build_writes_the_averaged_members(tmp_path):
    a, b = make_run(tmp_path / "a", 0, heldout=True), make_run(tmp_path / "b", 1, heldout=True)
    spec = build_ensemble([a, b], tmp_path / "ens")
    ens = Predictions.load(tmp_path / "ens")
    np.testing.assert_allclose(ens.logits, average([Predictions.load(a), Predictions.load(b)]).logits, atol=1e-6)
    assert (tmp_path / "ens" / "heldout_predictions.npz").is_file()
    assert json.loads((tmp_path / "ens" / "ensemble.json").read_text())["members"] == spec["members"]
    assert spec["method"] == "hom" and spec["data"] == "synthetic"


@pytest.mark.parametrize("problem", ["heldout differs", "member not a run", "same member", "identical predictions"])
def test_a_refused_ensemble_writes_nothing(tmp_path, problem):
    """Every member is read and checked before anything is written: no partial folder."""
    a, b = make_run(tmp_path / "a", 0, heldout=True), make_run(tmp_path / "b", 1, heldout=True)
    members = [a, b]
    if problem == "heldout differs":
        h = Predictions.load(b / "heldout_predictions.npz")
        h.targets = (h.targets + 1) % len(CLASSES)
        h.save(b / "heldout_predictions.npz")
    elif problem == "member not a run":
        (b / "config.yaml").unlink()
    elif problem == "same member":
        members = [a, b, b / ".." / "a"]
    else:
        members = [a, b, make_run(tmp_path / "c", 0)]  # the same seed as a: a copy of a's predictions
    with pytest.raises((ValueError, FileNotFoundError)):
        build_ensemble(members, tmp_path / "ens")
    assert not (tmp_path / "ens").exists()


def test_a_refused_rebuild_keeps_the_previous_ensemble(tmp_path):
    a, b = (make_run(tmp_path / n, s) for n, s in (("a", 0), ("b", 1)))
    build_ensemble([a, b], tmp_path / "ens")
    before = {f.name: f.read_bytes() for f in (tmp_path / "ens").iterdir()}
    make_run(b, 1, class_names=["c0", "c1", "c2", "c3", "other"])  # the same members, rebuilt after b changed
    with pytest.raises(ValueError, match="class 4 is 'other' vs 'c4'"):
        build_ensemble([a, b], tmp_path / "ens")
    assert {f.name: f.read_bytes() for f in (tmp_path / "ens").iterdir()} == before


def test_an_ensemble_of_other_members_or_settings_is_never_replaced(tmp_path):
    """Audit 8 N03: an ensemble of other members replaced the one in --out (and left its shift/ sets behind)."""
    a, b, c = (make_run(tmp_path / n, s) for n, s in (("a", 0), ("b", 1), ("c", 2)))
    out = tmp_path / "ens"
    build_ensemble([a, b], out)
    (out / "shift").mkdir()
    before = {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()}
    for members, options, problem in (
        ([a, c], {}, r"members .*/a, .*/b \(now .*/a, .*/c\)"),
        ([a, c], {"overwrite": True}, "even with --overwrite"),
        ([a, b], {"from_checkpoints": True, "repredict": Predictions.load}, r"from_checkpoints False \(now True\)"),
        ([a, b], {"data": "other data"}, r"data 'synthetic' \(now 'other data'\)"),
    ):
        with pytest.raises(
            ValueError, match=rf"--out {out} holds another ensemble \(.*{problem}.*remove {out} yourself"
        ):
            build_ensemble(members, out, **options)
        assert {f.name: f.read_bytes() for f in out.iterdir() if f.is_file()} == before
    build_ensemble([b, tmp_path / "b" / ".." / "a"], out)  # the same members, in another order and spelling: a rerun
    (out / "ensemble.json").write_text("[]")
    with pytest.raises(ValueError, match=r"ensemble\.json holds an array where a JSON object .* choose another --out"):
        build_ensemble([a, b], out)


def test_the_same_member_twice_is_refused_however_it_is_spelled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_run("a", 0), make_run("b", 1)
    os.symlink(tmp_path / "a", tmp_path / "link")
    for spelling in ("a", str(tmp_path / "a"), "link", "b/../a"):
        with pytest.raises(ValueError, match="is given twice"):
            build_ensemble(["a", "b", spelling], "ens")


def test_mismatch_messages_name_the_first_difference():
    def preds(names, index=np.arange(6), targets=np.array([0, 1, 2, 0, 1, 2]), link="softmax", source="x"):
        return Predictions(np.zeros((len(index), len(names))), targets, index, list(names), link, source)

    names = [f"class {i}" for i in range(10)]
    ref = preds(names, source="ref")
    with pytest.raises(
        ValueError, match=r"member 2 of 2 \(m\) does not match member 1 of 2 \(ref\): class 7 is 'cat' vs 'class 7'"
    ):
        check_compatible([ref, preds(names[:7] + ["cat"] + names[8:], source="m")])
    with pytest.raises(ValueError, match=r"class 10 is 'extra' vs none \(11 vs 10 classes"):
        check_compatible([ref, preds(names + ["extra"], source="m")])
    with pytest.raises(ValueError, match=r"at position 4 the example index is 9 vs 4"):
        check_compatible([ref, preds(names, index=np.array([0, 1, 2, 3, 9, 5]), source="m")])
    with pytest.raises(ValueError, match=r"example index 3 has target 2 vs 0"):
        check_compatible([ref, preds(names, targets=np.array([0, 1, 2, 2, 1, 2]), source="m")])


def test_an_interrupted_build_is_finished_and_other_writers_files_are_kept(tmp_path):
    a, b, c = (make_run(tmp_path / n, s, heldout=True) for n, s in (("a", 0), ("b", 1), ("c", 2)))
    out = tmp_path / "ens"
    build_ensemble([a, b], out)
    (out / "ensemble.json").unlink()  # killed after its predictions, before its completion marker
    (out / "notes.txt").write_text("the user's")
    build_ensemble([a, c], out)  # its own marker says the folder is an ensemble's: the rebuild goes on
    assert json.loads((out / "ensemble.json").read_text())["members"][1].endswith("/c")
    assert (out / "notes.txt").read_text() == "the user's"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's")
    with pytest.raises(ValueError, match="holds files no ensemble wrote"):
        build_ensemble([a, b], mine)
    build_ensemble([a, b], mine, overwrite=True)  # beside them, never over them
    assert (mine / "notes.txt").read_text() == "the user's" and (mine / "ensemble.json").is_file()
