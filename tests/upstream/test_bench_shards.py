"""``harness bench shards``: the commands it runs, and the comparison it writes."""

from pathlib import Path

import numpy as np
import pytest

from harness.upstream import bench_shards


def _run(path: str, seed: int, top1: float, correct: np.ndarray) -> dict:
    return {
        "path": path,
        "seed": seed,
        "command": f"harness upstream ... {path} {seed}",
        "run_dir": "r",
        "top1": top1,
        "nll": 1.5,
        "ece": 0.05,
        "heldout_top1": 0.4,
        "steps": 702,
        "train_minutes": 5.0,
        "wall_minutes": 6.0,
        "images_per_sec": 300.0,
        "mixed_precision": "bf16",
        "train_data": "d",
        "session_minutes": 6.0,
        "correct": correct,
        "index": np.arange(len(correct)),
    }


def test_comparison_pairs_seeds_and_counts_disagreements(tmp_path):
    base = np.zeros(100, bool)
    base[:50] = True
    shards0, shards1 = base.copy(), base.copy()
    shards0[50:53] = True  # seed 0: shards right on 3 more examples
    shards1[:2] = False  # seed 1: shards wrong on 2 the array got right
    runs = [
        _run("array", 0, 0.50, base),
        _run("shards", 0, 0.53, shards0),
        _run("array", 1, 0.52, base),
        _run("shards", 1, 0.48, shards1),
    ]
    c = bench_shards.compare(runs)
    assert c["per_path"]["array"]["mean"] == pytest.approx(0.51) and c["per_path"]["shards"]["max"] == 0.53
    d = c["difference"]
    assert d["diffs"] == pytest.approx([0.03, -0.04]) and d["lo"] < 0 < d["hi"]
    assert c["difference"]["verdict"] == "no detectable difference at n = 2"
    assert (c["mcnemar"]["0"]["n10"], c["mcnemar"]["0"]["n01"]) == (3, 0)  # shards right, array wrong
    assert (c["mcnemar"]["1"]["n10"], c["mcnemar"]["1"]["n01"]) == (0, 2)
    summary = {
        "seeds": [0, 1],
        "epochs": 2,
        "config": "upstream/configs/cifar10n_hom.yaml",
        "data": "c10n",
        "shard_size": 2500,
        "num_workers": 1,
        "pack_commands": ["harness data pack X Y --split test"],
        "pack_seconds": 60.0,
        "shards": {"train45k": 18, "val5k": 2, "test": 4},
        **c,
        "load": {"start": {"nice": 19, "load_average": [3.0, 2, 1]}, "end": {"nice": 19, "load_average": [1, 1, 1]}},
        "runs": [{k: v for k, v in r.items() if k not in ("correct", "index")} for r in runs],
    }
    bench_shards._write(tmp_path / "s.md", summary)
    text = (tmp_path / "s.md").read_text()
    assert "Written by `" in text and "CPU (`lscpu`)" in text and "harness data pack X Y --split test" in text
    assert "niceness 19, the 1-minute load average 3.0 at the start and 1.0 at the end" in text
    assert "| shards | 0 | 53.00% |" in text and "**-0.50 points**" in text and "seed 0: 3 / 0" in text
    assert "harness upstream ... shards 1" in text and (tmp_path / "s.json").is_file()
    runs[3]["index"] = runs[3]["index"][::-1]
    with pytest.raises(ValueError, match="different test examples"):
        bench_shards.compare(runs)


def test_commands_train_the_same_config_on_both_paths():
    array = bench_shards.run_command("array", 1, Path("c.yaml"), Path("/d"), Path("/s"), 2, 1, Path("/o"))
    shards = bench_shards.run_command("shards", 1, Path("c.yaml"), Path("/d"), Path("/s"), 2, 1, Path("/o"))
    assert shards[: len(array) - 1] == array[:-1] and "seed=1" in array and "train.epochs=2" in array
    assert array[-1] == "data.path=/d"
    assert shards[len(array) - 1 :] == ["data.source=shards", "data.path=/s", "data.loader=auto", "data.num_workers=1"]
    assert bench_shards.shown(["/venv/bin/harness", "upstream", "a b"]) == "harness upstream 'a b'"
    packs = bench_shards.pack_commands(Path("c.yaml"), Path("/d"), Path("/s"), 2500)
    assert [c[c.index("--split") + 1] for c in packs] == ["train45k", "val5k", "test"]
    with pytest.raises(FileNotFoundError, match="cifar10_jpeg.zip"):
        bench_shards.run(data_path=Path("/nonexistent"), out=None)
