"""Bad inputs found by the twenty-second reliability audit that the lead fixed (``audit22 <case id>``)."""

from __future__ import annotations

import click

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------------ A22-04: a card's splits, read back
@bad_input(
    "exports",
    "Classifier.from_pretrained of an export whose config.json says its metrics were measured on eval_split all, "
    "which holds its train_split (audit22 A22-04: loaded with those metrics; only a later save refused them)",
    ValueError,
    r"config\.json: harness\.trained_on\.eval_split=all holds harness\.trained_on\.train_split=train's images: the "
    r"model would be scored on the images it was trained on .*; give the folder save_pretrained wrote, unchanged",
)
def _card_splits_read_back(tmp):
    import json

    from harness.models import Classifier, build_model

    model = build_model(dict(backbone="test_resnet", num_classes=10))
    model.save_pretrained(tmp / "exp", trained_on={"source": "digits", "train_split": "train", "eval_split": "test"})
    Classifier.from_pretrained(tmp / "exp")  # as written: loads
    config = json.loads((tmp / "exp" / "config.json").read_text())
    config["harness"]["trained_on"]["eval_split"] = "all"
    (tmp / "exp" / "config.json").write_text(json.dumps(config))
    Classifier.from_pretrained(tmp / "exp")


# ------------------------------------------------------------------------------ A22-05: a timm folder given bare
@bad_input(
    "sources",
    "harness fewshot / downstream / import --model <a plain timm folder> given bare (audit22 A22-05: 'no checkpoint "
    "at tf; pass the model.pt written by a harness run', though local-dir:tf works)",
    click.ClickException,
    r"'.*tf' is a model folder whose config\.json is not a harness export's \(a timm folder\): give it as "
    r"local-dir:.*tf \(or timm:local-dir:.*tf\)",
)
def _bare_timm_folder(tmp):
    import timm
    from timm.models import save_for_hf

    save_for_hf(timm.create_model("resnet10t", num_classes=10), str(tmp / "tf"), safe_serialization=True)
    _cli("fewshot", "--model", str(tmp / "tf"), "--tasks", "demo_digit", "--shots", "1", "--log-with", "none",
         "--out", str(tmp / "fs"))  # fmt: skip


# ------------------------------------------------------------------------------ A22-09: a declaration a century ago
@bad_input(
    "experiment",
    "primary.declared: '1926-11-28' (audit22 A22-09: rc 0, every run 'after the declaration', the report calling "
    "them prospective; a day to come was refused)",
    ValueError,
    r"primary\.declared=1926-11-28 is before 2020-01-01, long before any run of the harness: give the day the "
    r"endpoint was declared \(a typo in the year\?\)",
)
def _declared_a_century_ago(tmp):
    from harness.rules import check_day

    assert check_day("2026-11-28", "primary.declared", "the endpoint was declared") == "2026-11-28"
    check_day("1926-11-28", "primary.declared", "the endpoint was declared")


# ------------------------------------------------------------------------------ A22-08: a pack's model, moved
@bad_input(
    "data",
    "a model trained on a pack of digits' train split (data.source=shards), its model.pt copied out of the run "
    "folder, then harness import on digits' train split (audit22 A22-08: rc 0, scored on the split it was packed "
    "from; model.pt's trained_on said only source shards)",
    click.ClickException,
    r"was trained on the train split of digits \(as it records\).*data\.eval_split=train is also data\.train_split",
)
def _moved_pack_model(tmp):
    import shutil

    import torch
    from bad_inputs_audit9_config import CONFIGS

    _cli("data", "pack", "digits", str(tmp / "pk"), "--shard-size", "500", "--split", "train")
    _cli("data", "pack", "digits", str(tmp / "pk"), "--shard-size", "500", "--split", "test", "limit_eval=40")
    _cli("upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1",
         "train.log_with=[]", "data.source=shards", f"data.path={tmp / 'pk'}", "data.eval_split=test",
         "data.heldout_split=null", "data.label_noise.kind=none", f"output_dir={tmp / 'r'}")  # fmt: skip
    record = torch.load(tmp / "r" / "model.pt", map_location="cpu", weights_only=True)["extra"]["trained_on"]
    assert record["source"] == "digits" and record["train_split"] == "train" and "path" not in record, record
    (tmp / "m").mkdir()
    shutil.copy(tmp / "r" / "model.pt", tmp / "m" / "model.pt")
    (tmp / "e.yaml").write_text("data:\n  source: digits\n  eval_split: train\n  heldout_split: null\n")
    _cli("import", "--model", str(tmp / "m" / "model.pt"), "--data", str(tmp / "e.yaml"), "--out", str(tmp / "i"))


# ------------------------------------------------------------------------------ A22-12: a run's head re-saved
@bad_input(
    "runs",
    "a het run's model.pt re-saved with head.eval_mc_samples = 1 and clip_eps = 0.4, then export_run (audit22 "
    "A22-12: the weights' digest matched, so the card published the metrics of the run's 100-sample evaluation)",
    ValueError,
    r"hc/model\.pt predicts with other evaluation options than the run's metrics\.json measured \(clip_eps .* -> 0\.4, "
    r"eval_mc_samples \d+ -> 1; audit22 A22-12\): put the run's own model\.pt back",
)
def _run_head_resaved(tmp):
    import shutil

    from bad_inputs_audit9_config import CONFIGS

    from harness.models import load_model, save_model
    from harness.runs import export_run

    _cli("upstream", "--no-progress", "--config", str(CONFIGS / "digits_het.yaml"), "train.epochs=1",
         "train.log_with=[]", "data.limit_train=64", "data.limit_eval=20", f"output_dir={tmp / 'h'}")  # fmt: skip
    export_run(tmp / "h", tmp / "exp_ok")  # its own model.pt: exported
    shutil.copytree(tmp / "h", tmp / "hc", ignore=shutil.ignore_patterns(".lock*"))
    model = load_model(tmp / "hc" / "model.pt")
    model.head.eval_mc_samples, model.head.clip_eps = 1, 0.4
    save_model(model, tmp / "hc" / "model.pt")
    export_run(tmp / "hc", tmp / "exp")


# ------------------------------------------------------------------------------ A22-02: a run's data from elsewhere
@handled(
    "shift",
    "harness shift of a run trained on an image folder given as a relative data.path (imf), called from another "
    "working folder (audit22 A22-02: 'data.path imf does not exist; set data.path', a key the user never set)",
    r"^the run's data read where the run read it \(run\.json's data_path\): shift wrote \d+ sets$",
)
def _shift_from_elsewhere(tmp):
    import os

    from bad_inputs_audit21_data import _IMF, _image_folder, _train

    from harness.runs import data_config

    here = os.getcwd()
    try:
        os.chdir(tmp)
        _image_folder(tmp / "imf")
        _train("runs/imf", *_IMF)
        (tmp / "elsewhere").mkdir()
        os.chdir(tmp / "elsewhere")
        assert data_config("../runs/imf").path == str(tmp / "imf"), data_config("../runs/imf")
        _cli("shift", "-m", "../runs/imf", "--corruptions", "none", "--ood", "gaussian")
    finally:
        os.chdir(here)
    n = len(list((tmp / "runs" / "imf" / "shift").rglob("predictions.npz")))
    assert n >= 2, n
    return f"the run's data read where the run read it (run.json's data_path): shift wrote {n} sets"
