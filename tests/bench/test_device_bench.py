"""harness bench device: the dry run goes end to end on the CPU (so the GPU check never rots) and writes every part's
rows; bad input is refused before any work. The dry run takes about 15 s on 2 busy Zen 4 cores (one torch thread)."""

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from harness.bench import device
from harness.cli import main
from harness.heads.variants import VARIANTS


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    """In its own process: the dry run holds accelerate's precision at bf16, which would send later tests' runs of
    another precision to fresh processes (where their monkeypatches do not reach)."""
    out = tmp_path_factory.mktemp("device")
    cmd = [sys.executable, "-m", "harness.cli", "bench", "device", "--dry-run", "--out", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    return out, json.loads((out / "device.json").read_text())


def test_dry_run_writes_every_part_with_provenance(dry_run):
    out, result = dry_run
    text = (out / "device.md").read_text()
    assert "Written by `" in text and "torch " in text and "dry run at tiny sizes" in text
    for heading in ("## Head", "## Training throughput", "## Loader", "## Transfer", "## Correctness on the device"):
        assert heading in text
    assert "| het ÷ hom (the paper's cost claim) |" in text and "not yet run" not in text
    assert set(result["seconds"]) == {*device.PARTS, "total"} and result["device"] == "cpu"
    assert "error" not in json.dumps(result)


def test_dry_run_head_rows_cover_every_variant_in_both_precisions(dry_run):
    rows = dry_run[1]["head"]
    assert {r["covariance"] for r in rows} == set(VARIANTS)
    assert any(r["noise_space"] == "pre_logits" for r in rows) and any(r["K"] == device.DRY.big_K for r in rows)
    assert {r["dtype"] for r in rows} == {"fp32", "bf16"} and len(rows) == 2 * (len(VARIANTS) + 2)
    for r in rows:
        assert r["eager"]["ms"] > 0
        assert ("ms" in r["naive"]) == (r["covariance"] != "none")
    assert [r["compiled"]["ms"] > 0 for r in rows if "compiled" in r] == [True]  # low rank, fp32


def test_dry_run_training_transfer_and_correctness_rows(dry_run):
    result = dry_run[1]
    runs = {(r["setting"], r["compiled"]): r for r in result["train"]}
    assert set(runs) == {("plain", False), ("hom", False), ("het", False), ("hom", True), ("het", True)}
    assert all(r["median"] > 0 and len(r["images_per_s"]) == device.DRY.rounds for r in runs.values())
    assert result["transfer"]["steps_per_s"] > 0 and result["transfer"]["task"] == "demo_digit"
    checks = result["correctness"]
    assert len(checks) == 4 and all(c["ok"] for c in checks), checks
    assert checks[0]["losses"][0] == checks[0]["losses"][1] == checks[1]["losses"][1]


def test_dry_run_loader_row_reads_a_pack_and_compares_it_with_the_step(dry_run):
    out, result = dry_run
    r = result["loader"]
    assert r["images"] == device.DRY.loader_batches * device.DRY.batch and r["images_per_sec"] > 0
    assert "digits training split" in r["pack"] and r["workers"] == device.DRY.loader_workers
    assert "so the loader could feed" in (out / "device.md").read_text()


CIFAR = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10n"


@pytest.mark.skipif(not CIFAR.is_dir(), reason="no ../shared/data/cifar10n")
def test_loader_part_reads_cifar_images_packed_by_harness_data_pack(tmp_path):
    """The GPU check's pack (docs/development.md): CIFAR-10 JPEGs packed as shards, read by the loader part."""
    pack = tmp_path / "pack"
    res = CliRunner().invoke(
        main,
        ["data", "pack", "cifar10n", str(pack), f"path={CIFAR}", "limit_train=256", "--shard-size", "64"],
    )
    assert res.exit_code == 0, res.output
    from harness.bench.device_parts import measure_loader

    r = measure_loader(device.DRY, torch.device("cpu"), str(pack), lambda s: None)
    assert r["pack"] == str(pack) and r["images"] == device.DRY.loader_batches * device.DRY.batch
    assert r["batches_per_epoch"] == 256 // device.DRY.batch


def test_bad_input_is_refused_before_any_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["bench", "device", "--dry-run", "--part", "nope"])
    assert res.exit_code == 2 and "'nope' is not one of" in res.output
    res = CliRunner().invoke(main, ["bench", "device", "--dry-run", "--out", "results/bench"])
    assert res.exit_code == 2 and "would overwrite the measured results/bench/device.md" in res.output
    assert not (tmp_path / "results").exists()
    with pytest.raises(ValueError, match="unknown part"):
        device.run(tmp_path, dry_run=True, parts=("heads",))
    choices = next(p for p in main.commands["bench"].commands["device"].params if p.name == "parts").type.choices
    assert tuple(choices) == device.PARTS


def test_a_run_cut_short_says_what_is_missing(tmp_path):
    result = {"device": "cpu", "note": "n", "sizes": asdict(device.DRY), "seconds": {"correctness": 1.0}}
    result["correctness"] = [{"check": "c", "error": "RuntimeError: no deterministic kernel"}]
    device.write(tmp_path, result, pending=["transfer", "head", "train"])
    text = (tmp_path / "device.md").read_text()
    assert "**not yet run: transfer, head, train** (cut short)" in text
    assert "| c | **failed** | RuntimeError: no deterministic kernel |" in text


def test_a_failed_part_fails_the_command_and_says_which(tmp_path, monkeypatch):
    """(audit6 B12) A part whose error went only into device.md exited 0 with "loader done"."""
    failed = {
        "device": "cpu",
        "loader": {"error": "FileNotFoundError: no index.json"},
        "transfer": {"error": "skipped: x"},
    }
    monkeypatch.setattr(device, "run", lambda *a, **k: failed)
    res = CliRunner().invoke(main, ["bench", "device", "--dry-run", "--out", str(tmp_path / "d")])
    assert res.exit_code == 1 and "part(s) loader (FileNotFoundError: no index.json) failed" in res.output
    assert device.failed_parts({"correctness": [{"check": "c", "ok": True}, {"check": "r", "ok": False}]}) == [
        "correctness (check r failed)"
    ]
    assert device.failed_parts({"train": [{"setting": "het", "error": "skipped: time budget"}]}) == []
