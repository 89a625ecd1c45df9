"""``harness bench data``: the synthetic data, and the table on two tiny sizes."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from harness.bench.synthetic_data import make_data
from harness.cli import main
from harness.data.config import DataConfig
from harness.data.sources import build_split


def test_synthetic_data_is_a_manifest_of_readable_pngs(tmp_path):
    made = make_data(tmp_path, 1_203, image_size=8)
    ds = build_split(DataConfig(source="manifest", path=str(tmp_path), multilabel=True), "train")
    assert len(ds) == 1_203 and ds.num_classes == 10 and made["image_bytes"] > 1_203 * 64
    image, target = ds[1_002]
    assert image.size == (8, 8) and np.array_equal(np.asarray(image), np.asarray(Image.open(ds.image_name(2)[1:-1])))
    assert target.tolist() == np.eye(10)[2].tolist()  # the pool's image 2, label 2 mod 10
    assert len(list((tmp_path / "img").iterdir())) == 2  # 1,000 files a folder


@pytest.mark.slow
def test_bench_data_writes_the_table_with_command_cpu_and_versions(tmp_path):
    out = tmp_path / "data.md"
    res = CliRunner().invoke(
        main,
        [
            "bench",
            "data",
            "--size",
            "300",
            "--size",
            "600",
            "--batch-size",
            "32",
            "--batches",
            "3",
            "--warmup",
            "1",
            "--steps",
            "1",
            "--shard-size",
            "100",
            "--repeats",
            "1",
            "--work-dir",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert "Written by `" in text and "CPU (`lscpu`)" in text and "torch " in text
    s = json.loads(out.with_suffix(".json").read_text())
    assert [(c["examples"], c["source"]) for c in s["cases"]] == [
        (300, "manifest"),
        (300, "shards"),
        (600, "manifest"),
        (600, "shards"),
    ]
    assert all(
        c["images"] == 3 * 32
        and c["images_per_sec"] > 0
        and c["peak_rss"] > c["rss_growth"] >= 0
        and len(c["rounds"]) == 1
        for c in s["cases"]
    )
    assert [p["shards"] for p in s["preparation"]] == [3, 6] and s["training_step"]["images_per_sec"] > 0
    assert "| 600 | shards |" in text and not list((tmp_path / "work").iterdir())  # the data is deleted
    res = CliRunner().invoke(main, ["bench", "data", "--size", "10", "--out", str(out)])
    assert res.exit_code != 0 and "fewer than the" in res.output
