"""Bad inputs found by the seventh reliability audit in an export's files (``audit7 <case id>``): a head's fixed
temperature τ in the weights (``model.safetensors``, a run's ``model.pt``) outside the head's rule or other than
config.json's, a τ changed on the model and not recorded at save, an unbounded ``trained_on.image_size``, a bad
``harness.layout``, a missing folder and a config.json with a byte-order mark."""

from __future__ import annotations

import json

import torch
from bad_inputs_audit5_exports import CONFIG, UNCHANGED, _set
from bad_inputs_schemas import _export, _from_pretrained

from bad_inputs import bad_input, handled


def _weights_temperature(tmp, tau: float):
    """A het export whose model.safetensors holds ``het_head.fixed_temperature = tau`` (config.json unchanged)."""
    from safetensors.torch import load_file, save_file

    folder = _export(tmp, lambda c: None)
    state = load_file(folder / "model.safetensors")
    state["het_head.fixed_temperature"] = torch.tensor(tau)
    save_file(state, folder / "model.safetensors")
    return folder


def _load_export(folder):
    from harness.models import Classifier

    Classifier.from_pretrained(folder)


for _case, _tau, _match in [
    (
        "E28: every logit NaN",
        0.0,
        r"fixed_temperature = 0\.0 \(the head's fixed temperature τ\) must be a finite number at least 0\.001 and at most",
    ),
    (
        "E29: every prediction uniform",
        1e6,
        r"fixed_temperature = 1000000\.0 .* must be a finite number at least 0\.001 and at most 1000",
    ),
    (
        "E19: logits sign-flipped",
        -1.0,
        r"fixed_temperature = -1\.0 .* must be a finite number at least 0\.001 and at most 1000",
    ),
    ("E19's kind: a τ other than config.json's", 2.0, r"fixed_temperature = 2\.0 contradicts the temperature 1\.0 of "),
]:
    bad_input(
        "export",
        f"Classifier.from_pretrained of an export whose model.safetensors has het_head.fixed_temperature = {_tau!r} "
        f"while config.json says 1.0 (audit7 {_case}, loaded without a word)",
        match=r"model\.safetensors .*" + _match + r".*config\.json",
    )(lambda tmp, tau=_tau: _load_export(_weights_temperature(tmp, tau)))


@bad_input(
    "export",
    "harness.sources.load_source('local-dir:<export with fixed_temperature 0>'), as harness import loads it (audit7 "
    "E30: 719 images predicted, then 'a diverged run')",
    match=r"fixed_temperature = 0\.0 .* must be a finite number at least 0\.001",
)
def _import_zero_temperature(tmp):
    from harness.sources import load_source

    load_source(f"local-dir:{_weights_temperature(tmp, 0.0)}")


@bad_input(
    "export",
    "harness.models.load_model of a model.pt with state_dict['head.fixed_temperature'] = 0 (audit7 E32: NaN logits)",
    match=r"model\.pt: head\.fixed_temperature = 0\.0 \(the head's fixed temperature τ\) must be a finite number at least 0\.001",
)
def _model_pt_zero_temperature(tmp):
    from harness.models import ModelConfig, build_model, load_model, save_model

    save_model(build_model(ModelConfig("test_resnet", 10, {"covariance": "low_rank", "num_factors": 2})), tmp / "m.pt")
    payload = torch.load(tmp / "m.pt", weights_only=True)
    payload["state_dict"]["head.fixed_temperature"] = torch.tensor(0.0)
    torch.save(payload, tmp / "model.pt")
    load_model(tmp / "model.pt")


@handled(
    "export",
    "save_pretrained after model.head.fixed_temperature.fill_(2.0) (audit7 E27: config.json said temperature 1.0)",
    r"saved as the head has it",
)
def _resave_temperature(tmp):
    from harness.models import Classifier

    model = Classifier.from_pretrained(_export(tmp, lambda c: None))
    model.head.fixed_temperature.fill_(2.0)
    model.save_pretrained(tmp / "again")
    head = json.loads((tmp / "again" / "config.json").read_text())["harness"]["model"]["head"]
    assert head["temperature"] == 2.0, head
    assert float(Classifier.from_pretrained(tmp / "again").head.temperature) == 2.0
    return "saved as the head has it: temperature 2.0 in config.json, and loaded back so"


for _what, _edit, _match in [
    (
        "harness.trained_on.image_size 10**9 (audit7 E10: loaded, and published again by a re-save)",
        _set("harness", "trained_on", value={"image_size": 10**9}),
        CONFIG + r"harness\.trained_on\.image_size must be a whole number in \[1, 100000\] \(pixels\), got "
        r"1000000000; " + UNCHANGED,
    ),
    (
        "harness.layout 'bogus' (audit7 E02: 'has no harness section of format harness.export/1')",
        _set("harness", "layout", value="bogus"),
        r"config\.json harness\.layout = 'bogus' is not 'timm' or 'het_head': " + UNCHANGED,
    ),
    (
        "harness.format 'other/2' (audit7 E02's kind)",
        _set("harness", "format", value="other/2"),
        r"config\.json harness\.format = 'other/2' is not 'harness\.export/1'",
    ),
]:
    bad_input("export", f"Classifier.from_pretrained of an export whose config.json has {_what}", match=_match)(
        lambda tmp, edit=_edit: _from_pretrained(tmp, edit)
    )


@bad_input(
    "export",
    "Classifier.from_pretrained of a folder that does not exist (audit7 E23: huggingface_hub's 'Repo id must be in "
    "the form')",
    match=r"^no folder '.*nope': give the folder save_pretrained wrote",
)
def _missing_folder(tmp):
    from harness.models import Classifier

    Classifier.from_pretrained(str(tmp / "nope"))


@handled(
    "export", "Classifier.from_pretrained of an export whose config.json starts with a UTF-8 BOM (audit7 E15)", "loaded"
)
def _bom(tmp):
    from harness.models import Classifier

    folder = _export(tmp, lambda c: None)
    path = folder / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert Classifier.from_pretrained(folder).num_classes == 10
    return "loaded: the byte-order mark (as Windows editors write) is taken"
