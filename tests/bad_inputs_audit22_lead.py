"""Bad inputs found by the twenty-second reliability audit that the lead fixed (``audit22 <case id>``)."""

from __future__ import annotations

import click

from bad_inputs import bad_input
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
