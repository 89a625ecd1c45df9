"""Bad inputs found by the sixth reliability audit (2026-11-28, issue 42) in the commands on run folders (``harness
ensemble``, ``import``, ``report``) and the provenance of ``harness fewshot``: a file without a data section taken for
the default digits data, an option silently ignored, raw device errors, a recorded data description that was another
data's, advice that could not be followed, a run counted twice (``audit6 <case id>``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from unittest import mock

import click
import numpy as np

from bad_inputs import bad_input, handled
from bad_inputs_safety import _model_pt
from bad_inputs_uncertainty import _cli, make_run

CLI_ERROR = click.ClickException
#: a file that is no config (the shape of /etc/passwd): its content must never appear in a message
PASSWD = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"
NOT_QUOTED = r"^(?!.*root:x).*"
NO_DATA = r"the file holds no data section \(a 'data:' mapping naming the evaluation data.*give a config with one"


def _checkpoint_runs(tmp: Path, limit_eval: int = 20) -> "list[str]":
    """Two run folders ``a`` and ``b`` with real (distinct, untrained) model.pt files of 10 classes, for
    ``harness ensemble --from-checkpoints``: config.yaml with digits data, metrics.json with its description."""
    import torch

    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    described = build_split(DataConfig(source="digits", limit_eval=limit_eval), "test").description
    for seed, name in enumerate("ab"):
        run = tmp / name
        run.mkdir()
        torch.manual_seed(seed)
        _model_pt(run / "model.pt")
        (run / "config.yaml").write_text(
            f"seed: {seed}\ndata:\n  source: digits\n  limit_eval: {limit_eval}\nmodel:\n  head:\n    covariance: none\n"
        )
        (run / "metrics.json").write_text(json.dumps({"eval_data": described}))
    return ["-m", str(tmp / "a"), "-m", str(tmp / "b")]


def _ensemble(tmp: Path, *args: str) -> None:
    """``harness ensemble --from-checkpoints`` of two run folders with ``args``; refused: no ensemble folder left."""
    members = _checkpoint_runs(tmp)
    try:
        _cli("ensemble", *members, "--from-checkpoints", "--out", str(tmp / "ens"), *args)
    finally:
        assert not (tmp / "ens").exists(), "an ensemble folder was written"


def _import(tmp: Path, *args: str, data: str = "data:\n  source: digits\n  limit_eval: 30\n") -> None:
    """``harness import`` of a model.pt with ``--data`` a file holding ``data`` (a config's text), and ``args``."""
    (tmp / "data.yaml").write_text(data)
    _cli("import", "--model", str(_model_pt(tmp / "model.pt")), "--data", str(tmp / "data.yaml"), *args)


# ------------------------------------------------------------------------------ a data config without data (1)
@bad_input(
    "ensembles",
    "harness ensemble --from-checkpoints --eval-data a file that is no config, e.g. /etc/passwd (audit6 E05: the "
    "default digits test split evaluated, rc 0)",
    CLI_ERROR,
    NOT_QUOTED + r"--eval-data .*passwd: " + NO_DATA + r", e\.g\. --eval-data upstream/configs/digits_base\.yaml",
)
def _eval_data_passwd(tmp):
    (tmp / "passwd").write_text(PASSWD)
    _ensemble(tmp, "--eval-data", str(tmp / "passwd"))


@bad_input(
    "ensembles",
    "harness ensemble --from-checkpoints --eval-data a YAML holding only model: {backbone: x} (audit6 E09: the "
    "default digits test split evaluated, rc 0)",
    CLI_ERROR,
    r"--eval-data .*model\.yaml: " + NO_DATA,
)
def _eval_data_no_section(tmp):
    (tmp / "model.yaml").write_text("model: {backbone: x}\n")
    _ensemble(tmp, "--eval-data", str(tmp / "model.yaml"))


@bad_input(
    "import",
    "harness import --data a file that is no config, e.g. /etc/passwd (audit6 I04: the default digits test split "
    "evaluated, rc 0)",
    CLI_ERROR,
    NOT_QUOTED + r"--data .*data\.yaml: " + NO_DATA + r", e\.g\. --data upstream/configs/digits_base\.yaml",
)
def _import_data_passwd(tmp):
    try:
        _import(tmp, "--out", str(tmp / "imp"), data=PASSWD)
    finally:
        assert not (tmp / "imp").exists(), "a run folder was written"


# ------------------------------------------------------------------------------ --eval-data ignored (2)
@bad_input(
    "ensembles",
    "harness ensemble --eval-data without --from-checkpoints (audit6 E06: --eval-data silently ignored)",
    click.UsageError,
    r"--eval-data .*digits_base\.yaml goes with --from-checkpoints: .*add --from-checkpoints, or leave out "
    r"--eval-data",
)
def _eval_data_without_checkpoints(tmp):
    from bad_inputs import ROOT

    make_run(tmp / "a", 0), make_run(tmp / "b", 1)
    try:
        _cli(
            "ensemble",
            "-m",
            str(tmp / "a"),
            "-m",
            str(tmp / "b"),
            "--eval-data",
            str(ROOT / "upstream/configs/digits_base.yaml"),
            "--out",
            str(tmp / "ens"),
        )
    finally:
        assert not (tmp / "ens").exists(), "an ensemble folder was written"


# ------------------------------------------------------------------------------ devices (3)
@bad_input(
    "ensembles",
    "harness ensemble --from-checkpoints --device tpu (audit6 E07: a raw torch RuntimeError)",
    CLI_ERROR,
    r"unknown device 'tpu' \(--device\): use cpu, cuda or cuda:N",
)
def _ensemble_device_tpu(tmp):
    _ensemble(tmp, "--device", "tpu")


@bad_input(
    "import",
    "harness import --device cuda on a machine without a GPU (audit6 I05: a raw 'Found no NVIDIA driver' traceback)",
    CLI_ERROR,
    r"--device cuda: no CUDA GPU is usable on this machine .*use --device cpu",
)
def _import_device_cuda(tmp):
    with mock.patch("torch.cuda.is_available", return_value=False):
        try:
            _import(tmp, "--out", str(tmp / "imp"), "--device", "cuda")
        finally:
            assert not (tmp / "imp").exists(), "a run folder was written"


# ------------------------------------------------------------------------------ the data recorded (4)
@handled(
    "ensembles",
    "harness ensemble --from-checkpoints --eval-data of limit_eval 12 on members of 20 (audit6 E08: ensemble.json "
    "recorded the first member's data, '(first 20)')",
    r"ensemble\.json records the data evaluated: .*\(first 12\)",
)
def _eval_data_recorded(tmp):
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    members = _checkpoint_runs(tmp, limit_eval=20)
    (tmp / "eval.yaml").write_text("data:\n  source: digits\n  limit_eval: 12\n")
    _cli("ensemble", *members, "--from-checkpoints", "--eval-data", str(tmp / "eval.yaml"), "--out", str(tmp / "ens"))
    spec = json.loads((tmp / "ens" / "ensemble.json").read_text())
    with np.load(tmp / "ens" / "predictions.npz") as z:
        rows = len(z["logits"])
    assert rows == 12, rows
    assert spec["data"] == build_split(DataConfig(source="digits", limit_eval=12), "test").description, spec["data"]
    return f"ensemble.json records the data evaluated: {spec['data']} ({rows} rows in predictions.npz)"


# ------------------------------------------------------------------------------ advice that can be followed (5)
_RUN_FILES = r"holds model\.pt, config\.yaml, predictions\.npz, metrics\.json that harness import did not write: "
_NOT_OFFERED = r"^(?!.*or give --overwrite).*"


def _import_onto_run(tmp: Path, *args: str) -> None:
    """``harness import --out RUN`` where RUN is a run folder; it must be left as it was."""
    run = make_run(tmp / "run", 0)
    _model_pt(run / "model.pt")
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    try:
        _import(tmp, "--out", str(run), *args)
    finally:
        assert {p.name: p.read_bytes() for p in run.iterdir()} == before, "the run folder was changed"


@bad_input(
    "import",
    "harness import --out an upstream run folder (audit6 I03: advised --overwrite, which is then refused)",
    CLI_ERROR,
    _NOT_OFFERED + _RUN_FILES + r"even with --overwrite they are not replaced; move them, or choose another --out",
)
def _import_onto_run_folder(tmp):
    _import_onto_run(tmp)


@bad_input(
    "import",
    "harness import --out an upstream run folder --overwrite (audit6 I03b: refused, as it must be)",
    CLI_ERROR,
    _RUN_FILES + r"even with --overwrite they are not replaced",
)
def _import_onto_run_folder_overwrite(tmp):
    _import_onto_run(tmp, "--overwrite")


@bad_input(
    "ensembles",
    "harness ensemble --out a folder holding someone else's predictions.npz, without --overwrite (audit6 I03, the "
    "same advice in harness ensemble: --overwrite offered, then refused)",
    CLI_ERROR,
    r"^(?!.*or give --overwrite).*holds predictions\.npz that no ensemble wrote: even with --overwrite",
)
def _ensemble_onto_foreign_predictions(tmp):
    make_run(tmp / "a", 0), make_run(tmp / "b", 1)
    (tmp / "mine").mkdir()
    (tmp / "mine" / "predictions.npz").write_bytes(b"someone else's")
    try:
        _cli("ensemble", "-m", str(tmp / "a"), "-m", str(tmp / "b"), "--out", str(tmp / "mine"))
    finally:
        assert os.listdir(tmp / "mine") == ["predictions.npz"]


# ------------------------------------------------------------------------------ a run given twice (6)
@bad_input(
    "report",
    "harness report RUN RUN, the same run folder twice (audit6 RP05: rc 0, statistics over one model counted twice)",
    CLI_ERROR,
    r"folder '.*a' is given twice \(also as '.*a'\); a report lists each run or ensemble once: remove the repeat",
)
def _report_same_run_twice(tmp):
    make_run(tmp / "a", 0)
    try:
        _cli("report", str(tmp / "a"), str(tmp / "a"), "--out-root", str(tmp / "results"), "--name", "rp05")
    finally:
        assert not (tmp / "results").exists(), "a report was written"


@bad_input(
    "report",
    "harness report RUN LINK, a run folder and a symbolic link to it (audit6 RP05)",
    CLI_ERROR,
    r"folder '.*link' is given twice \(also as '.*a'\)",
)
def _report_run_and_link(tmp):
    make_run(tmp / "a", 0), make_run(tmp / "b", 1)
    (tmp / "link").symlink_to(tmp / "a")
    try:
        _cli("report", str(tmp / "a"), str(tmp / "b"), str(tmp / "link"), "--out-root", str(tmp / "results"))
    finally:
        assert not (tmp / "results").exists(), "a report was written"


# ------------------------------------------------------------------------------ the weights' provenance (7)
@handled(
    "fewshot",
    "harness fewshot --model local-dir:EXPORT (audit6 F08: fewshot.md said the weights came from the local timm / "
    "Hugging Face cache)",
    r"fewshot\.md: Model: local-dir:.*export, weights read from the folder .*export \(model\.safetensors, sha256",
)
def _fewshot_export_provenance(tmp):
    import torch

    from harness.models import ModelConfig, build_model

    torch.manual_seed(0)
    build_model(ModelConfig("test_resnet", 10, {"covariance": "none"})).save_pretrained(tmp / "export")
    _cli(
        "fewshot",
        "--model",
        f"local-dir:{tmp / 'export'}",
        "--tasks",
        "demo_digit",
        "--shots",
        "1",
        "--resolution",
        "16",
        "--log-with",
        "none",
        "--out",
        str(tmp / "out"),
    )
    line = next(x for x in (tmp / "out" / "fewshot.md").read_text().splitlines() if x.startswith("Model: "))
    assert "cache" not in line, line
    return f"fewshot.md: {line}"
