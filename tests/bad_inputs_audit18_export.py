"""Bad inputs found by the eighteenth reliability audit in exports (``audit18 <case id>``): the model card of a new
head, and of a run trained and evaluated on part of its splits."""

from __future__ import annotations

import json

from bad_inputs import handled


def _trained_export(tmp, **data):
    """A 10-class run folder by hand (model.pt, config.yaml with ``data``, metrics.json, run.json) exported by
    ``export_run``; returns the export's folder."""
    from harness.models import build_model, save_model
    from harness.runs import export_run

    run = tmp / "run"
    model = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    save_model(model.eval(), run / "model.pt")
    lines = "".join(f"  {k}: {v}\n" for k, v in {"source": "digits", "eval_split": "test", **data}.items())
    (run / "config.yaml").write_text("data:\n" + lines)
    (run / "metrics.json").write_text(json.dumps({"metrics": {"top1": 0.947, "nll": 0.2}}))
    (run / "run.json").write_text(json.dumps({"class_names": [str(i) for i in range(10)]}))
    return export_run(run, tmp / "export")


# ------------------------------------------------------------------------------ A18-06: a new head's card
@handled(
    "exports",
    "Classifier.from_pretrained(export) then reset_classifier(10) / reset_classifier(4) / replace_head(m, 3) / "
    "m.head = a new head, then save_pretrained (audit18 A18-06: reset_classifier kept the old head's top-1 0.947 and "
    "class names in the card's model-index and config.json for an untrained head; with 4 classes the save was refused "
    "for label_names the user never gave)",
    r"^a new head's export states no metrics and no class names; the backbone's data kept: digits$",
)
def _new_head_card(tmp):
    from huggingface_hub import ModelCard

    from harness.models import Classifier, fresh_head, replace_head

    export = _trained_export(tmp)
    for name, renew in (
        ("rc10", lambda m: m.reset_classifier(10)),
        ("rc4", lambda m: m.reset_classifier(4)),
        ("rh3", lambda m: replace_head(m, 3)),
        ("set", lambda m: setattr(m, "head", fresh_head(m.head_hidden_size, 10, {"covariance": "none"}))),
    ):
        model = Classifier.from_pretrained(export)
        assert model.card_info["metrics"]["top1"] == 0.947 and len(model.card_info["label_names"]) == 10
        model = renew(model) or model
        model.save_pretrained(tmp / name)
        config = json.loads((tmp / name / "config.json").read_text())
        assert config["harness"]["metrics"] is None and "label_names" not in config, (name, config)
        assert config["harness"]["trained_on"]["source"] == "digits", name
        card = ModelCard.load(tmp / name / "README.md")
        assert card.data.eval_results is None and "0.947" not in card.text and "top1" not in card.text, name
    model = Classifier.from_pretrained(export)
    model.reset_classifier(0)
    assert set(model.card_info) == {"trained_on"}
    return "a new head's export states no metrics and no class names; the backbone's data kept: digits"


# ------------------------------------------------------------------------------ A18-13: limited splits
@handled(
    "exports",
    "export_run of a run with data.limit_train=100 and data.limit_eval=50 (audit18 A18-13: the model-index said "
    "split: test for a score on the first 50 test images, and the card named neither limit)",
    r"^model-index split test\[:50\]; trained on .*train_split train \(first 100 examples: limit_train\)",
)
def _limited_splits_card(tmp):
    from huggingface_hub import ModelCard

    from harness.models import Classifier

    export = _trained_export(tmp, train_split="train", limit_train=100, limit_eval=50)
    config = json.loads((export / "config.json").read_text())
    assert config["harness"]["trained_on"]["limit_train"] == 100 and config["harness"]["trained_on"]["limit_eval"] == 50
    card = ModelCard.load(export / "README.md")
    assert {r.dataset_split for r in card.data.eval_results} == {"test[:50]"}
    assert "Measured on `test[:50]` of digits (its first 50 examples: limit_eval)" in card.text
    row = next(line for line in card.text.splitlines() if line.startswith("| trained on |"))
    assert "eval_split test (first 50 examples: limit_eval)" in row
    again = Classifier.from_pretrained(export)  # read back, and written again the same
    assert again.card_info["trained_on"]["limit_eval"] == 50
    full = _trained_export(tmp / "full", limit_train=0, limit_eval=0)  # 0 = all: no limit recorded
    assert "limit_train" not in json.loads((full / "config.json").read_text())["harness"]["trained_on"]
    assert {r.dataset_split for r in ModelCard.load(full / "README.md").data.eval_results} == {"test"}
    return f"model-index split test[:50]; trained on {row.split('|')[2].strip()}"
