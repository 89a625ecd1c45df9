"""What a run and a pack record of the data they read (audit22 A22-02, A22-08): a relative data.path made absolute
at training or packing time, and a pack's data section as the source split it holds."""

from __future__ import annotations

import os

from harness.data.splits import absolute_path, recorded_path, unpacked


def test_recorded_path_reads_a_relative_path_where_the_run_read_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    record = {"path": "imf", "absolute": absolute_path("image_folder", "imf")}
    assert record["absolute"] == os.path.join(str(tmp_path), "imf")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert recorded_path("image_folder", "imf", record) == record["absolute"]
    assert recorded_path("image_folder", "other", record) == "other"  # not the path recorded: as given
    assert recorded_path("image_folder", "imf", None) == "imf"  # an older run: as before
    assert recorded_path("digits", None, record) is None
    assert absolute_path("shards", "pk-{000..009}.tar") == "pk-{000..009}.tar"  # a shard pattern: unchanged


def test_unpacked_records_the_source_split_a_pack_holds(tmp_path, monkeypatch):
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    for split in ("train", "test"):
        main(["data", "pack", "digits", "pk", "--shard-size", "500", "--split", split], standalone_mode=False)
    data = {"source": "shards", "path": "pk", "train_split": "train", "eval_split": "test", "heldout_split": None}
    got = unpacked(data)
    assert got["source"] == "digits" and got["train_split"] == "train" and got["eval_split"] == "test", got
    assert "path" not in got and got["heldout_split"] is None
    assert unpacked({"source": "digits", "train_split": "train"}) == {"source": "digits", "train_split": "train"}
    assert unpacked({**data, "path": "nowhere"})["source"] == "shards"  # no record: as given
