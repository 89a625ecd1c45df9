"""Bad inputs of ``harness bench`` found by the sixth reliability audit (2026-11-28, issue 42): a user's file replaced
by a bench's table or its JSON twin, numbers that are no numbers, a part that failed reported as done, a backbone
refused after minutes of work (``audit6 <case id>``). Every case is refused before any measurement."""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from bad_inputs import ROOT, bad_input, handled
from bad_inputs_safety import _cli

CLI_ERROR = click.ClickException  # click.UsageError and click.BadParameter are ones too
NOT_OURS = (
    r"{} exists and harness bench {} did not write it \(.*\): .* never replaced; move it, or choose another --out"
)


def _kept(path: Path, text: str) -> None:
    """``path`` still holds the user's ``text``, and nothing was written beside it."""
    assert path.read_text() == text, f"{path} was replaced"


@bad_input(
    "bench",
    "a user's cov3.json beside bench coverage's --out cov3.md (audit6 B03: replaced by the JSON twin, rc 0)",
    CLI_ERROR,
    NOT_OURS.format(r"cov3\.json", "coverage"),
)
def _coverage_json_twin(tmp: Path):
    Path("cov3.json").write_text("USER JSON\n")
    try:
        _cli("bench", "coverage", "--sims", "10", "--setting", "image-dominated", "--out", "cov3.md")
    finally:
        _kept(Path("cov3.json"), "USER JSON\n")
        assert not Path("cov3.md").exists(), "work started before the error"


@bad_input(
    "bench",
    "a user's own file named by bench coverage's --out (audit6 B04: replaced without a word)",
    CLI_ERROR,
    NOT_OURS.format(r"cov4\.md", "coverage") + r"$",
)
def _coverage_md_taken(tmp: Path):
    Path("cov4.md").write_text("USER MD\n")
    try:
        _cli("bench", "coverage", "--sims", "10", "--setting", "image-dominated", "--out", "cov4.md")
    finally:
        _kept(Path("cov4.md"), "USER MD\n")
        assert not Path("cov4.json").exists(), "work started before the error"


@bad_input(
    "bench",
    "a user's heads5.json beside bench heads' --out heads5.md (audit6 B05: replaced by the JSON twin, rc 0)",
    CLI_ERROR,
    NOT_OURS.format(r"heads5\.json", "heads"),
)
def _heads_json_twin(tmp: Path):
    Path("heads5.json").write_text("USER JSON\n")
    try:
        _cli("bench", "heads", "--quick", "--no-compile", "--repeats", "1", "--out", "heads5.md")
    finally:
        _kept(Path("heads5.json"), "USER JSON\n")
        assert not Path("heads5.md").exists(), "work started before the error"


@bad_input(
    "bench",
    "a user's device.md in bench device's --out folder (audit6 B13: replaced by the dry run)",
    CLI_ERROR,
    NOT_OURS.format(r"dev/device\.md", "device"),
)
def _device_md_taken(tmp: Path):
    Path("dev").mkdir()
    Path("dev/device.md").write_text("mine\n")
    try:
        _cli("bench", "device", "--dry-run", "--part", "correctness", "--out", "dev")
    finally:
        _kept(Path("dev/device.md"), "mine\n")
        assert not Path("dev/device.json").exists(), "work started before the error"


@bad_input(
    "bench",
    "bench coverage --out x.json (audit6 B03: the JSON twin would replace the table)",
    CLI_ERROR,
    r"--out x\.json ends in \.json, the name of its JSON twin: give a \.md name",
)
def _coverage_out_json(tmp: Path):
    _cli("bench", "coverage", "--sims", "10", "--out", "x.json")


@bad_input(
    "bench",
    "a user's n8 folder in bench data's --work-dir (audit6 B03: written into, then deleted)",
    CLI_ERROR,
    r"--work-dir work holds n8, which this bench writes and then deletes: move them .* or choose another --work-dir",
)
def _data_work_dir_taken(tmp: Path):
    Path("work/n8").mkdir(parents=True)
    Path("work/n8/mine.txt").write_text("mine\n")
    try:
        _cli("bench", "data", "--size", "8", "--batch-size", "4", "--warmup", "0", "--work-dir", "work")
    finally:
        _kept(Path("work/n8/mine.txt"), "mine\n")


@handled(
    "bench",
    "rerunning a bench over its own earlier output, the committed results/bench tables (audit6 B03: still replaced)",
    r"its own tables and JSON twins pass",
)
def _own_results_replaceable(tmp: Path) -> str:
    from dataclasses import asdict

    from harness.bench import coverage, data_report, device, heads_report
    from harness.provenance import check_replaceable
    from harness.upstream import bench as upstream_bench
    from harness.upstream import bench_shards

    writers = {
        "coverage": (coverage.TITLE, "results"),
        "data": (data_report.TITLE, "sizes"),
        "heads": (heads_report.TITLE, "rows"),
        "upstream": (upstream_bench.TITLE, "speed"),
        "shards_vs_array": (bench_shards.TITLE, "per_path"),
    }
    for name, (title, key) in writers.items():
        for suffix in (".md", ".json"):
            shutil.copy(ROOT / "results" / "bench" / f"{name}{suffix}", tmp / f"{name}{suffix}")
        check_replaceable(tmp / f"{name}.md", title, key, name)
    result = {"device": "cpu", "note": "n", "sizes": asdict(device.DRY), "seconds": {}}
    device.write(tmp, result, pending=list(device.PARTS))
    check_replaceable(tmp / "device.md", device.TITLE, "device", "device")
    return f"{', '.join(writers)} and device: its own tables and JSON twins pass (a rerun replaces them)"


@bad_input(
    "bench",
    "bench heads --naive-budget-gib -1 (audit6 B06: every naive column 'needs about 0 GiB')",
    CLI_ERROR,
    r"^-1\.0 is not in the range x>=0",
)
def _heads_budget_negative(tmp: Path):
    _cli("bench", "heads", "--quick", "--no-compile", "--repeats", "1", "--naive-budget-gib", "-1", "--out", "h.md")


@bad_input(
    "bench",
    "bench heads --naive-budget-gib nan (audit6 B07: meant no budget)",
    CLI_ERROR,
    r"^'nan' is not a finite number: give a number in the range x>=0$",
)
def _heads_budget_nan(tmp: Path):
    _cli("bench", "heads", "--quick", "--no-compile", "--repeats", "1", "--naive-budget-gib", "nan", "--out", "h.md")


@bad_input(
    "bench",
    "bench data --max-minutes nan (audit6 B10: passed FloatRange(min=0), no limit)",
    CLI_ERROR,
    r"^'nan' is not a finite number: give a number in the range x>=0$",
)
def _data_minutes_nan(tmp: Path):
    _cli("bench", "data", "--size", "8", "--batch-size", "4", "--warmup", "0", "--max-minutes", "nan", "--out", "d.md")


@bad_input(
    "bench",
    "bench data --max-minutes inf (audit6 B10)",
    CLI_ERROR,
    r"^'inf' is not a finite number",
)
def _data_minutes_inf(tmp: Path):
    _cli("bench", "data", "--size", "8", "--batch-size", "4", "--warmup", "0", "--max-minutes", "inf", "--out", "d.md")


@bad_input(
    "bench",
    "bench device --pack of a folder that is no pack (audit6 B12: rc 0, 'loader done', the error only in device.md)",
    CLI_ERROR,
    r"--pack t_ok is not a shard pack with a train split \(no index\.json in t_ok/train or t_ok: pack the data "
    r"there first .*or drop --pack",
)
def _device_pack_not_a_pack(tmp: Path):
    Path("t_ok").mkdir()
    try:
        _cli("bench", "device", "--dry-run", "--part", "loader", "--pack", "t_ok", "--out", "dev")
    finally:
        assert not Path("dev").exists(), "work started before the error"


@bad_input(
    "bench",
    "bench upstream --backbone bogus (audit6 B15: 100 s of runs, runs/bench left, then a traceback)",
    CLI_ERROR,
    r"unknown backbone 'bogus': not a timm model",
)
def _upstream_backbone_bogus(tmp: Path):
    try:
        _cli("bench", "upstream", "--images", "256", "--repeats", "1", "--epochs", "0", "--backbone", "bogus")
    finally:
        assert not Path("runs").exists() and not Path("results").exists(), "work started before the error"
