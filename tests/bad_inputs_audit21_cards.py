"""Bad inputs found by the twenty-first reliability audit in export cards (``audit21 <case id>``): the card of a head
whose evaluation options were changed after loading, and NaN / infinite metrics published in the model-index."""

from __future__ import annotations

import json
import math
import warnings

from bad_inputs import handled


def _het_run(tmp, name="run", metrics=None):
    """A 10-class run folder by hand with a low-rank HET head (model.pt, config.yaml, metrics.json, run.json)."""
    from harness.models import build_model, save_model

    run = tmp / name
    head = dict(covariance="low_rank", num_factors=2, eval_mc_samples=100)
    save_model(build_model(dict(backbone="test_resnet", num_classes=10, head=head)).eval(), run / "model.pt")
    (run / "config.yaml").write_text("data:\n  source: digits\n  eval_split: test\n  heldout_split: val\n")
    metrics = metrics or {"metrics": {"top1": 0.08, "nll": 2.3083}, "heldout_metrics": {"top1": 0.1, "nll": 2.3}}
    (run / "metrics.json").write_text(json.dumps(metrics))  # json.dumps writes NaN / Infinity as such
    (run / "run.json").write_text(json.dumps({"class_names": [str(i) for i in range(10)]}))
    return run


def _save(model, folder, **kwargs):
    """``model.save_pretrained(folder, **kwargs)``; returns (config.json's harness section, README.md's text, the
    warnings' text)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.save_pretrained(folder, **kwargs)
    said = " ".join(str(w.message) for w in caught)
    return json.loads((folder / "config.json").read_text())["harness"], (folder / "README.md").read_text(), said


# ------------------------------------------------------------------------------ A21-11: options set on a built head
@handled(
    "exports",
    "Classifier.from_pretrained(export of a HET run), then head.eval_mc_samples = 1 / clip_eps = 0.4 / eval_seed = "
    "None, then save_pretrained (audit21 A21-11: the export kept the metrics measured with 100 samples in the exact log "
    "space, top-1 0.08 in its model-index, for a head that now predicts otherwise)",
    r"^metrics dropped with a warning naming the option \(eval_mc_samples, clip_eps, eval_seed\); kept for "
    r"unchanged options, train_mc_samples / mc_chunk_size, metrics= given anew and a reload of the new export$",
)
def _changed_options_card(tmp):
    from harness.models import Classifier
    from harness.runs import export_run

    export = export_run(_het_run(tmp), tmp / "export")
    for option, value in {"eval_mc_samples": 1, "clip_eps": 0.4, "eval_seed": None}.items():
        model = Classifier.from_pretrained(export)
        setattr(model.head, option, value)
        harness, readme, said = _save(model, tmp / option)
        assert "evaluation options differ" in said and f"{option} " in said and "metrics" in said, (option, said)
        assert harness["metrics"] is None and harness["trained_on"] is not None, (option, harness)
        assert "model-index" not in readme and "0.0800" not in readme, option
        again = Classifier.from_pretrained(tmp / option)  # the new export states no metrics: none to drop
        assert getattr(again.head, option) == value
        assert not _save(again, tmp / f"{option}_again")[2]
    for option, value in {"train_mc_samples": 3, "mc_chunk_size": 7, "eval_mc_samples": 100}.items():
        model = Classifier.from_pretrained(export)
        setattr(model.head, option, value)
        harness, readme, said = _save(model, tmp / f"kept_{option}")
        assert not said and harness["metrics"]["top1"] == 0.08 and "value: 0.08" in readme, (option, said)
    model = Classifier.from_pretrained(export)
    model.head.eval_mc_samples = 1
    harness, readme, said = _save(model, tmp / "anew", metrics={"top1": 0.07})
    assert not said and harness["metrics"] == {"top1": 0.07}, (said, harness)
    measured = Classifier.from_pretrained(tmp / "anew")  # measured with eval_mc_samples 1: kept as saved
    assert measured.head.eval_mc_samples == 1 and _save(measured, tmp / "anew2")[0]["metrics"] == {"top1": 0.07}
    return (
        "metrics dropped with a warning naming the option (eval_mc_samples, clip_eps, eval_seed); kept for unchanged "
        "options, train_mc_samples / mc_chunk_size, metrics= given anew and a reload of the new export"
    )


# ------------------------------------------------------------------------------ A21-14: NaN / infinite metrics
@handled(
    "exports",
    "export_run of a run whose metrics.json holds top1 NaN and heldout nll Infinity; save_pretrained(metrics={'nll': "
    "inf, 'ece': nan}); card_info['metrics'] with a NaN set by hand (audit21 A21-14: the model-index said "
    "'value: .nan' / '.inf' while config.json said null)",
    r"^null in config\.json, left out of the card and its model-index, with a warning naming the key \(and "
    r"metrics\.json\); the export loads back$",
)
def _nonfinite_metrics_card(tmp):
    from huggingface_hub import ModelCard

    from harness.models import Classifier
    from harness.runs import export_run

    recorded = {"metrics": {"top1": math.nan, "nll": 2.3}, "heldout_metrics": {"top1": 0.1, "nll": math.inf}}
    run = _het_run(tmp, metrics=recorded)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        export = export_run(run, tmp / "export")
    said = " ".join(str(w.message) for w in caught)
    assert f"{run / 'metrics.json'}: metrics.top1 = nan" in said, said
    assert f"{run / 'metrics.json'}: heldout_metrics.nll = inf" in said, said
    model = Classifier.from_pretrained(export)  # config.json and the card agree: loads back
    assert model.card_info["metrics"] == {"top1": None, "nll": 2.3, "heldout_top1": 0.1, "heldout_nll": None}
    results = {(r.metric_type, r.dataset_split) for r in ModelCard.load(export / "README.md").data.eval_results}
    assert results == {("nll", "test"), ("accuracy", "val")}, results
    readme = (export / "README.md").read_text()
    assert ".nan" not in readme and ".inf" not in readme and "| nan" not in readme, readme
    harness, readme, said = _save(model, tmp / "given", metrics={"nll": math.inf, "ece": math.nan, "top1": 0.5})
    assert "save_pretrained: metrics.nll = inf, save_pretrained: metrics.ece = nan" in said, said
    assert harness["metrics"] == {"nll": None, "ece": None, "top1": 0.5}, harness
    assert ".nan" not in readme and ".inf" not in readme and "value: 0.5" in readme
    again = Classifier.from_pretrained(tmp / "given")
    again.card_info["metrics"] = {"top1": math.nan, "nll": 1.0}
    harness, readme, said = _save(again, tmp / "by_hand")
    assert "metrics.top1 = nan" in said and harness["metrics"] == {"top1": None, "nll": 1.0}, (said, harness)
    assert ".nan" not in readme and again.card_info["metrics"]["top1"] is None
    return (
        "null in config.json, left out of the card and its model-index, with a warning naming the key (and "
        "metrics.json); the export loads back"
    )
