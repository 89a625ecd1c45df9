"""Bad inputs found by the twelfth reliability audit that the lead fixed (``audit12 <case id>``): two commands writing
one folder at once, and names from an experiment file that left their root."""

from __future__ import annotations

import click
from bad_inputs_audit9_config import CONFIGS

from bad_inputs import bad_input
from bad_inputs_safety import _cli
from bad_inputs_shift import _run


# ------------------------------------------------------------------------------ A12-06: two shifts on one run
@bad_input(
    "shift",
    "harness shift on a run while another harness shift writes its sets (audit12 A12-06: both rc 0, one's 'starting "
    "over' cleared the other's sets, shift.json the second's)",
    click.ClickException,
    r"shift is being written by another process .*another harness shift writes this run's shifted predictions; wait "
    r"for it to finish",
)
def _shift_twice_at_once(tmp):
    from harness.io import RunLock

    run = _run(str(tmp / "run"))
    with RunLock(run / "shift", what="the other shift"):  # the other harness shift, still writing
        try:
            _cli("shift", "-m", str(run), "--corruptions", "gaussian_noise", "--severities", "1", "--ood", "none")
        finally:
            assert not (run / "shift" / "shift.json").exists(), "sets were written beside the other writer's"


# ------------------------------------------------------------------------------ A12-15: names read from shift.json
@bad_input(
    "shift",
    "a set named ../../victim added to a run's shift/shift.json, then harness shift with other settings (audit12 "
    "A12-15: 'starting over' deleted runs/victim/predictions.npz)",
    ValueError,
    r"shift\.json names a set that is not a folder of .*shift .*nothing was removed; move it away",
)
def _shift_json_name_out(tmp):
    import json

    from harness.shift.store import clear_sets

    run, victim = _run(str(tmp / "runs" / "base")), _run(str(tmp / "runs" / "victim"))
    (run / "shift" / "clean").mkdir(parents=True)
    (run / "shift" / "clean" / "predictions.npz").write_bytes(b"a set")
    (run / "shift" / "shift.json").write_text(json.dumps({"sets": {"clean": "k", "../../victim": "k"}}))
    try:
        clear_sets(run, list(json.loads((run / "shift" / "shift.json").read_text())["sets"]))  # what starting over does
    finally:
        assert (victim / "predictions.npz").is_file(), "another run's predictions were deleted"
        assert (run / "shift" / "clean" / "predictions.npz").is_file(), "a set was removed before the refusal"


# ------------------------------------------------------------------------------ A12-14: fewshot --out of another model
@bad_input(
    "fewshot",
    "harness fewshot --out F where F holds the few-shot results of another model (audit12 A12-14: replaced without "
    "a word, the first model's results gone)",
    click.ClickException,
    r"holds the few-shot results of another model \(the model: '/elsewhere/model\.pt' there, '.*run/model\.pt' now"
    r"( \(\w{12}\.\.\.\))?\): they would be replaced; give another --out, or --overwrite",
)
def _fewshot_other_model(tmp):
    import json

    from harness.downstream.fewshot import SCHEMA

    run = _run(str(tmp / "run"))  # a placeholder model.pt: the refusal comes before it is loaded
    (tmp / "fs").mkdir()
    earlier = {"schema": SCHEMA, "source": "/elsewhere/model.pt", "seed": 0, "shots": [1], "tasks": {}, "mean": {}}
    (tmp / "fs" / "fewshot.json").write_text(json.dumps(earlier))
    try:
        _cli(
            "fewshot",
            "--model",
            str(run / "model.pt"),
            "--tasks",
            "demo_digit",
            "--log-with",
            "none",
            "--out",
            str(tmp / "fs"),
            "--shots",
            "1",
        )
    finally:
        assert json.loads((tmp / "fs" / "fewshot.json").read_text())["source"] == "/elsewhere/model.pt"


# ------------------------------------------------------------------------------ A12-08: transfer record names
@bad_input(
    "experiment",
    "transfer.methods.hom: ['../../../victim'] (audit12 A12-08: the 'record' read from a run folder outside the "
    "results roots, and the sweep wrote 14 files into that run folder)",
    ValueError,
    r"transfer\.methods\.hom record '\.\./\.\./\.\./victim' must be a plain name .*it becomes a folder name; rename "
    r"it",
)
def _transfer_record_out(tmp):
    from harness.experiment import load_experiment
    from harness.experiment.transfer import run_transfer

    (tmp / "victim").mkdir()
    (tmp / "victim" / "model.pt").write_bytes(b"an upstream run's model")
    (tmp / "tr.yaml").write_text(
        "name: tr\ntransfer: {upstream: up, methods: {hom: ['../../../victim']}, reference: hom, preset: demo}\n"
    )
    exp = load_experiment(str(tmp / "tr.yaml"), (f"runs_root={tmp / 'truns'}", f"results_root={tmp / 'tres'}"))
    try:
        run_transfer(exp, progress=lambda s: None)
    finally:
        assert sorted(p.name for p in (tmp / "victim").iterdir()) == ["model.pt"], "files written into the run"
        assert not (tmp / "truns").exists(), "work started before the error"


# ------------------------------------------------------------------------------ A12-13: a newline in an override
@bad_input(
    "upstream",
    "$'output_dir=runs/a\\nb c' (audit12 A12-13: trained into 'runs/a b c', the newline made a space without a word)",
    click.ClickException,
    r"override 'output_dir=runs/a\\nb c' holds a control character \(a newline, a tab\.\.\.\): OmegaConf would turn it "
    r"into a space without a word; give output_dir a value without one",
)
def _override_newline(tmp):
    import os

    from bad_inputs_audit9_config import CONFIGS

    cwd = os.getcwd()
    os.chdir(tmp)
    try:
        _cli("upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "output_dir=runs/a\nb c")
    finally:
        os.chdir(cwd)
        assert not (tmp / "runs").exists(), "a run folder was made"


# ------------------------------------------------------------------------------ A12-07: a key twice from Python
@bad_input(
    "config",
    "load_config(UpstreamConfig, 'digits_hom.yaml', ['train.epochs=1', 'train.epochs=2']) from Python (audit12 A12-07: "
    "train.epochs=2, the last, taken without a word; the CLI refused it)",
    ValueError,
    r"the overrides set train\.epochs twice \(train\.epochs=1 and train\.epochs=2\): only the last would count; "
    r"keep one",
)
def _python_key_twice(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig

    load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", ["train.epochs=1", "train.epochs=2"])


# ------------------------------------------------------------------------------ A12-17: a data-only file to pack
@bad_input(
    "data",
    "harness data pack of a data section alone holding image_size: 64 (audit12 A12-17: 8x8 images packed, index.json "
    "recording image_size 64 as if applied; the same key as an override was refused)",
    click.ClickException,
    r"image_size: 64 in .*pk2\.yaml is not read by harness data pack.*remove image_size from .*pk2\.yaml, or give a "
    r"run config with a data: section",
)
def _pack_file_unread_key(tmp):
    (tmp / "pk2.yaml").write_text("source: digits\nimage_size: 64\nlimit_train: 20\n")
    try:
        _cli("data", "pack", str(tmp / "pk2.yaml"), str(tmp / "pk2"), "--shard-size", "10")
    finally:
        assert not (tmp / "pk2").exists(), "the pack was written before the refusal"


# ------------------------------------------------------------------------------ A12-20: from_pretrained offline
@bad_input(
    "hub",
    "Classifier.from_pretrained('hf-hub:someone/model') under HF_HUB_OFFLINE=1 (audit12 A12-20: huggingface_hub's "
    "LocalEntryNotFoundError, 'check your connection', naming neither the model, the variable nor local-dir:)",
    ValueError,
    r"hf-hub:someone/model: no config\.json from the Hugging Face hub \(LocalEntryNotFoundError; offline mode "
    r"\(HF_HUB_OFFLINE\) and not in the Hugging Face cache: unset HF_HUB_OFFLINE to download it\), or download the "
    r"repository and give local-dir:PATH",
)
def _from_pretrained_offline(tmp):
    import os
    from unittest import mock

    from harness.models import Classifier

    with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):  # as tests/conftest.py sets it before any import
        Classifier.from_pretrained("hf-hub:someone/model")
