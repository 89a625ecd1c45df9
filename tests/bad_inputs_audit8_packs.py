"""Bad inputs found by the eighth reliability audit in manifests, packs and checkpoints (``audit8 <case id>``): a
label that is not an integer truncated to one, an image listed twice packed twice, and a Ctrl-C landing in a
checkpoint write ending with a traceback. Every refusal comes before any shard is written."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock

import click
from click.testing import CliRunner
from PIL import Image

from bad_inputs import bad_input, handled

CLI_ERROR = click.ClickException
CONFIGS = Path(__file__).resolve().parents[1] / "upstream" / "configs"


def _manifest(tmp: Path, *rows: dict) -> Path:
    """A manifest folder ``m`` with 4 tiny images ``img/<i>.png`` and ``train.jsonl`` of ``rows``."""
    m = tmp / "m"
    (m / "img").mkdir(parents=True)
    for i in range(4):
        Image.new("RGB", (4, 4), (60 * i, 0, 0)).save(m / "img" / f"{i}.png")
    (m / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return m


def _pack_manifest(tmp: Path, m: Path) -> None:
    """``harness data pack manifest OUT --shard-size 4 --split train path=m num_classes=3``; refused: no shard."""
    from harness.cli import main

    try:
        main(
            ["data", "pack", "manifest", str(tmp / "pk"), "--shard-size", "4", "--split", "train", f"path={m}"]
            + ["num_classes=3"],
            standalone_mode=False,
        )
    finally:
        assert not list(tmp.glob("pk/**/*.tar")), "a shard was written"


# ------------------------------------------------------------------------------ P01: labels that are not integers
@bad_input(
    "packs",
    'harness data pack of a manifest with "labels": [1.7] (audit8 P01: packed as label 1, int() truncates)',
    CLI_ERROR,
    r"train\.jsonl line 2: label 1\.7 is not a class id: label ids must be integers; write the class id",
)
def _pack_float_label(tmp):
    rows = [{"path": f"img/{i}.png", "labels": [i % 3]} for i in range(4)]
    rows[1]["labels"] = [1.7]
    _pack_manifest(tmp, _manifest(tmp, *rows))


@bad_input(
    "packs",
    'harness data pack of a manifest with "labels": [true] (audit8 P01: JSON true packed as label 1)',
    CLI_ERROR,
    r"train\.jsonl line 3: label true is not a class id: label ids must be integers",
)
def _pack_bool_label(tmp):
    rows = [{"path": f"img/{i}.png", "labels": [i % 3]} for i in range(4)]
    rows[2]["labels"] = [True]
    _pack_manifest(tmp, _manifest(tmp, *rows))


# ------------------------------------------------------------------------------ P03: an image listed twice
@bad_input(
    "packs",
    "harness data pack of a manifest listing one image twice, labels 0 and 2 (audit8 P03: packed twice with "
    "conflicting labels, no word)",
    CLI_ERROR,
    r"train\.jsonl: image path 'img/1\.png' is listed twice, on line 2 \(labels \[0\]\) and line 4 \(labels \[2\]\); "
    r"list each image once: keep one line for it, with every label that holds in its list \(e\.g\. \[0, 2\]",
)
def _pack_repeated_image(tmp):
    rows = [{"path": f"img/{i}.png", "labels": [i % 3]} for i in range(3)]
    rows[1]["labels"] = [0]
    _pack_manifest(tmp, _manifest(tmp, *rows, {"path": "img/1.png", "labels": [2]}))


@bad_input(
    "upstream",
    "data.source=manifest listing one image twice (as img/1.png and ./img/1.png) with the same label (audit8 P03: "
    "read as two examples by every reader of manifests)",
    ValueError,
    r"image path '\./img/1\.png' is listed twice, on line 2 \(as 'img/1\.png'\) \(labels \[1\]\) and line 4 "
    r"\(labels \[1\]\); list each image once: delete line 4",
)
def _manifest_repeated_image(tmp):
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    rows = [{"path": f"img/{i}.png", "labels": [i % 3]} for i in range(3)]
    m = _manifest(tmp, *rows, {"path": "./img/1.png", "labels": [1]})
    build_split(DataConfig(source="manifest", path=str(m)), "train")


# ------------------------------------------------------------------------------ K03: Ctrl-C in a checkpoint write
@handled(
    "upstream",
    "Ctrl-C landing in torch.save of a checkpoint, which then raises RuntimeError 'unexpected pos' (audit8 K03: "
    "rc 1, a 40-line traceback and no resume hint)",
    r"exit 130 with the resume line; last\.pt of step \d+ kept, no temporary file",
)
def _ctrl_c_in_checkpoint_write(tmp):
    import torch

    from harness.cli import RESUMES, main

    real_save, calls = torch.save, []

    def save(obj, f, *a, **kw):  # the 2nd last.pt: Ctrl-C mid-write, then the zip writer's error while closing
        if isinstance(obj, dict) and str(obj.get("format", "")).startswith("harness.upstream-state"):  # last.pt
            calls.append(obj["step"])
            if len(calls) == 2:
                f.write(b"PK\x03\x04partial")
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt:
                    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")  # noqa: B904
        return real_save(obj, f, *a, **kw)

    run_dir = tmp / "run"
    args = ["upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), f"output_dir={run_dir}"]
    args += ["train.epochs=3", "data.limit_train=32", "data.limit_eval=16", "data.batch_size=16"]
    with mock.patch("torch.save", save):
        res = CliRunner().invoke(main, args)
    assert res.exit_code == 130, (res.exit_code, res.output)
    said = [line for line in res.output.splitlines() if line.startswith("interrupted")]
    assert said == [f"interrupted: {RESUMES['upstream']}"] and "Traceback" not in res.output, res.output
    ckpt = run_dir / "checkpoints"
    assert sorted(p.name for p in ckpt.iterdir()) == ["best.pt", "last.pt"], list(ckpt.iterdir())
    state = torch.load(ckpt / "last.pt", map_location="cpu", weights_only=True)
    assert state["step"] == calls[0] < calls[1] and not (run_dir / "metrics.json").exists(), (state["step"], calls)
    return f"exit 130 with the resume line; last.pt of step {state['step']} kept, no temporary file"
