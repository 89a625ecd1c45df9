"""Bad inputs found by the nineteenth reliability audit in exports and model sources (``audit19 <case id>``): the
card of a run trained with label noise, the card of weights changed after loading, and harness folders that hold no
one model given as a model source."""

from __future__ import annotations

import json
import warnings

from bad_inputs import bad_input, handled


def _run_folder(tmp, name="run", **data):
    """A 10-class run folder by hand (model.pt, config.yaml with ``data``, metrics.json with held-out metrics,
    run.json); returns it."""
    from harness.models import build_model, save_model

    run = tmp / name
    model = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    save_model(model.eval(), run / "model.pt")
    lines = "".join(f"  {k}: {v}\n" for k, v in {"source": "digits", "eval_split": "test", **data}.items())
    (run / "config.yaml").write_text("data:\n" + lines)
    metrics = {"metrics": {"top1": 0.947, "nll": 0.2}, "heldout_metrics": {"top1": 0.04, "nll": 2.3}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "run.json").write_text(json.dumps({"class_names": [str(i) for i in range(10)]}))
    return run


# ------------------------------------------------------------------------------ A19-02: noisy held-out labels
@handled(
    "exports",
    "export_run of a run with data.label_noise pair_flip 0.3 and heldout_split val (audit19 A19-02: the model-index "
    "filed its heldout_* metrics, measured against the noisy held-out labels the run drew, as the val split's)",
    r"^model-index: test only; heldout_\* named against pair_flip 0\.3 noisy labels in the table$",
)
def _noisy_heldout_card(tmp):
    from huggingface_hub import ModelCard

    from harness.runs import export_run

    noise = "{kind: pair_flip, rate: 0.3, seed: 0}"
    export = export_run(_run_folder(tmp, heldout_split="val", label_noise=noise), tmp / "export")
    card = ModelCard.load(export / "README.md")
    assert {r.dataset_split for r in card.data.eval_results} == {"test"}, card.data.eval_results
    assert not any("held-out" in r.metric_name for r in card.data.eval_results)
    assert "`heldout_*` on `val`, against its pair_flip 0.3 noisy labels (drawn by the run)" in card.text
    assert "| heldout_top1 (noisy labels) | 0.0400 |" in card.text and "| top1 | 0.9470 |" in card.text
    clean = export_run(_run_folder(tmp, "clean", heldout_split="val"), tmp / "clean_export")
    assert {r.dataset_split for r in ModelCard.load(clean / "README.md").data.eval_results} == {"test", "val"}
    return "model-index: test only; heldout_* named against pair_flip 0.3 noisy labels in the table"


# ------------------------------------------------------------------------------ A19-03: card of other weights
@handled(
    "exports",
    "Classifier.from_pretrained(export) then load_state_dict(another model's) / model.head.loc = nn.Linear(...) / "
    "model.backbone = another backbone, then save_pretrained (audit19 A19-03: each export kept the old weights' "
    "top-1 0.947 in its model-index and their training data)",
    r"^metrics dropped with a warning \(lsd, loc, bb\); trained_on dropped where the backbone changed \(lsd, bb\)$",
)
def _changed_weights_card(tmp):
    import torch

    from harness.models import Classifier, build_model
    from harness.runs import export_run

    export = export_run(_run_folder(tmp), tmp / "export")
    other = build_model(dict(backbone="test_resnet", num_classes=10, head=dict(covariance="none")))
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.01)
    changes = {
        "lsd": lambda m: m.load_state_dict(other.state_dict()),
        "loc": lambda m: setattr(m.head, "loc", torch.nn.Linear(m.head.loc.in_features, 10)),
        "bb": lambda m: setattr(m, "backbone", other.backbone),
    }
    for name, change in changes.items():
        model = Classifier.from_pretrained(export)
        change(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.save_pretrained(tmp / name)
        said = " ".join(str(w.message) for w in caught)
        assert "metrics" in said and "left out of the export" in said, (name, said)
        config = json.loads((tmp / name / "config.json").read_text())
        assert config["harness"]["metrics"] is None, (name, config["harness"])
        assert (config["harness"]["trained_on"] is None) == (name != "loc"), (name, config["harness"])
        assert ("label_names" in config) == (name == "bb"), name
    model = Classifier.from_pretrained(export)  # unchanged weights: everything kept, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.save_pretrained(tmp / "same")
    assert json.loads((tmp / "same" / "config.json").read_text())["harness"]["metrics"]["top1"] == 0.947
    return "metrics dropped with a warning (lsd, loc, bb); trained_on dropped where the backbone changed (lsd, bb)"


# ------------------------------------------------------------------------------ A19-15: folders of no one model
def _ensemble(tmp):
    run = _run_folder(tmp)
    (tmp / "ens").mkdir()
    (tmp / "ens" / "ensemble.json").write_text(json.dumps({"members": [str(run), str(tmp / "other")]}))
    return tmp / "ens"


def _unfinished(tmp):
    run = _run_folder(tmp)
    (run / "checkpoints").mkdir()
    (run / "model.pt").rename(run / "checkpoints" / "last.pt")
    return run


@bad_input(
    "sources",
    "harness fewshot / import / downstream --model an ensemble folder (audit19 A19-15: 'no config.json ... give a "
    "folder written by save_pretrained')",
    match=r"'.*ens' is an ensemble folder \(it holds ensemble\.json\): an ensemble is no single model: give one "
    r"member's model\.pt \('.*run/model\.pt', its first member's\)",
)
def _ensemble_as_model(tmp):
    _load_source(str(_ensemble(tmp)))


@bad_input(
    "sources",
    "harness import --model local-dir:<an ensemble folder> (audit19 A19-15: told to give a save_pretrained folder)",
    match=r"is an ensemble folder .*give one member's model\.pt",
)
def _ensemble_as_classifier(tmp):
    from harness.sources import load_classifier

    load_classifier(f"local-dir:{_ensemble(tmp)}", 10)


@bad_input(
    "sources",
    "harness fewshot / downstream --model a run folder killed before model.pt (run.json, checkpoints/last.pt) "
    "(audit19 A19-15: 'no config.json ... give a folder written by save_pretrained')",
    match=r"is an unfinished run \(run\.json and checkpoints, no model\.pt\): it has no final model yet; rerun "
    r"harness upstream --config .*run/config\.yaml output_dir=.*run, which resumes",
)
def _unfinished_run_as_model(tmp):
    _load_source(str(_unfinished(tmp)))


@bad_input(
    "sources",
    "harness downstream --upstream timm:local-dir:<an unfinished run folder> (audit19 A19-15: told to give a "
    "save_pretrained folder)",
    match=r"is an unfinished run .*rerun harness upstream",
)
def _unfinished_run_as_timm_folder(tmp):
    _load_source(f"timm:local-dir:{_unfinished(tmp)}")


def _load_source(spelling: str) -> None:
    from harness.sources import load_source

    load_source(spelling)


@bad_input(
    "exports",
    "Classifier.from_pretrained(<an ensemble folder>) and (<an unfinished run folder>) (audit19 A19-15's rule, not "
    "applied to from_pretrained: 'no config.json ... give a folder written by save_pretrained')",
    match=r"'.*ens' is an ensemble folder .*give one member's model\.pt.*; '.*run' is an unfinished run .*rerun "
    r"harness upstream",
)
def _from_pretrained_of_folders(tmp):
    import pytest

    from harness.models import Classifier

    (tmp / "1").mkdir(), (tmp / "2").mkdir()
    said = []
    for folder in (_ensemble(tmp / "1"), _unfinished(tmp / "2")):
        with pytest.raises(ValueError) as e:
            Classifier.from_pretrained(folder)
        said.append(str(e.value))
    raise ValueError("; ".join(said))
