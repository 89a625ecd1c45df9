"""Bad inputs found by the sixth reliability audit in the backbone options and an export's config.json (``audit6 <case
id>``): options timm refuses or the harness cannot use (3-channel images, pooled features), ``pretrained_cfg`` values
timm's transforms do not take, an empty class name, a metric out of its range, unknown keys of the ``harness``
section, and head settings changed on a loaded model that a re-save dropped."""

from __future__ import annotations

import json

import click
from bad_inputs_audit5_exports import CONFIG, UNCHANGED, _set
from bad_inputs_schemas import _export, _from_pretrained, _upstream

from bad_inputs import bad_input, bad_settings, handled

bad_settings(
    "upstream",
    "harness upstream with {} (audit6, refused before the run folder is made)",
    _upstream,
    [
        (
            "model.backbone_kwargs={in_chans: 1} (RT38: a 90-line traceback at the first step, RGB input into a "
            "1-channel stem)",
            "model.backbone_kwargs={in_chans: 1}",
            r"model\.backbone_kwargs\.in_chans = 1: the harness cannot use it: the harness feeds 3-channel \(RGB\) "
            r"images; drop model\.backbone_kwargs\.in_chans \(or give 3\)",
        ),
        (
            "model.backbone_kwargs={features_only: true} (RT40: AttributeError 'FeatureListNet' object has no "
            "attribute 'num_features')",
            "model.backbone_kwargs={features_only: true}",
            r"model\.backbone_kwargs\.features_only = True: the harness cannot use it: a features_only model gives "
            r"feature maps, and the head takes the pooled features \[B, D\]; drop model\.backbone_kwargs\.features_only",
        ),
        (
            "model.backbone_kwargs={global_pool: ''} (RT40's kind: unpooled features into the head)",
            "model.backbone_kwargs={global_pool: ''}",
            r"model\.backbone_kwargs\.global_pool = '': the harness cannot use it: no pooling leaves the features "
            r"unpooled.*drop model\.backbone_kwargs\.global_pool \(or give a pooling such as 'avg'\)",
        ),
        (
            "model.backbone_kwargs={checkpoint_path: w.pth} (RT40's kind: weights timm loads unchecked)",
            "model.backbone_kwargs={checkpoint_path: w.pth}",
            r"model\.backbone_kwargs\.checkpoint_path = 'w\.pth': the harness sets checkpoint_path itself .*give "
            r"model\.pretrained_file=FILE",
        ),
        (
            "model.backbone_kwargs={global_pool: bogus} (RT39: timm's AssertionError)",
            "model.backbone_kwargs={global_pool: bogus}",
            r"model\.backbone_kwargs\.global_pool = 'bogus': timm cannot build test_resnet with it",
        ),
    ],
    (ValueError, click.ClickException),
)


@bad_input(
    "upstream",
    "model.backbone_kwargs={global_pool: bogus}, checked as harness upstream checks its config "
    "(audit6 RT39: timm's AssertionError 'Invalid pool type: bogus')",
    match=r"model\.backbone_kwargs\.global_pool = 'bogus': timm cannot build test_resnet with it \(AssertionError: "
    r"Invalid pool type: bogus\); drop model\.backbone_kwargs\.global_pool or correct it",
)
def _pool_checked(tmp):
    from harness.model_config import check_backbone_kwargs

    check_backbone_kwargs({"global_pool": "bogus"}, "model.backbone_kwargs", "timm:test_resnet")


@bad_input(
    "upstream",
    "build_model of a ModelConfig with backbone_kwargs={'global_pool': 'bogus'} (audit6 RT39: timm's AssertionError)",
    match=r"^backbone_kwargs\.global_pool = 'bogus': timm cannot build test_resnet with it \(AssertionError: Invalid "
    r"pool type: bogus\)",
)
def _pool_built(tmp):
    from harness.models import ModelConfig, build_model

    build_model(ModelConfig("test_resnet", 10, {}, {"global_pool": "bogus"}))


@bad_input(
    "upstream",
    "build_model of a ModelConfig with backbone_kwargs={'features_only': True} (audit6 RT40: AttributeError "
    "'FeatureListNet' object has no attribute 'num_features')",
    match=r"backbone_kwargs\.features_only = True: the harness cannot use it",
)
def _features_only_built(tmp):
    from harness.models import ModelConfig, build_model

    build_model(ModelConfig("test_resnet", 10, {}, {"features_only": True}))


for _what, _edit, _match in [
    (
        "harness.model.backbone_kwargs.global_pool 'bogus' (audit6 RT62: timm's AssertionError, no file named)",
        _set("harness", "model", "backbone_kwargs", value={"global_pool": "bogus"}),
        CONFIG + r"backbone_kwargs\.global_pool = 'bogus': timm cannot build test_resnet with it \(AssertionError: "
        r"Invalid pool type: bogus\); drop backbone_kwargs\.global_pool",
    ),
    (
        "harness.model.backbone_kwargs.in_chans 1 (audit6 RT38: a 1-channel stem for RGB images)",
        _set("harness", "model", "backbone_kwargs", value={"in_chans": 1}),
        CONFIG + r"backbone_kwargs\.in_chans = 1: the harness cannot use it",
    ),
    (
        "pretrained_cfg.interpolation 'bogus' (audit6 RT42: loaded, and published again by a re-save)",
        _set("pretrained_cfg", "interpolation", value="bogus"),
        CONFIG + r"pretrained_cfg\.interpolation must be one of nearest, bilinear, bicubic, box, hamming, lanczos "
        r"\(timm's names\), got 'bogus': " + UNCHANGED,
    ),
    (
        "pretrained_cfg.crop_mode 'bogus' (audit6 RT56: loaded; timm's transforms take it as 'center')",
        _set("pretrained_cfg", "crop_mode", value="bogus"),
        CONFIG + r"pretrained_cfg\.crop_mode must be one of center, squash, border \(timm's crop modes\), got 'bogus'",
    ),
    (
        "an empty class name in label_names (audit6 RT47)",
        _set("label_names", value=["", *"abcdefghi"]),
        CONFIG + r"label_names\[0\] = '' is an empty class name: give each class a name, or drop label_names",
    ),
    (
        "harness.metrics.nll -1.0 (audit6 RT49: loaded, and re-published in the card as '| nll | -1.0000 |')",
        _set("harness", "metrics", value={"top1": 0.5, "nll": -1.0}),
        CONFIG + r"harness\.metrics\.nll must be >= 0 \(NLL is never negative\), got -1\.0; " + UNCHANGED,
    ),
    (
        "harness.metrics.ece 1.5 (audit6 RT49's kind: a calibration error above its bound)",
        _set("harness", "metrics", value={"ece": 1.5}),
        CONFIG + r"harness\.metrics\.ece must be in \[0, 1\] \(ECE lies in \[0, 1\]\), got 1\.5",
    ),
    (
        "harness.metrics.heldout_ece -0.1 (audit6 RT49)",
        _set("harness", "metrics", value={"heldout_ece": -0.1}),
        CONFIG + r"harness\.metrics\.heldout_ece must be in \[0, 1\]",
    ),
    (
        "an unknown key harness.bogus (audit6 RT65: ignored)",
        _set("harness", "bogus", value=1),
        CONFIG + r"harness\.bogus is not a key of the harness section; it takes format, layout, folded_temperature, "
        r"model, trained_on, metrics, measured: " + UNCHANGED,
    ),
    (
        "harness.folded_temprature, misspelt (audit6 RT67: ignored)",
        _set("harness", "folded_temprature", value=2.0),
        CONFIG + r"harness\.folded_temprature is not a key of the harness section \(did you mean "
        r"harness\.folded_temperature\?\)",
    ),
]:
    bad_input("export", f"Classifier.from_pretrained of an export whose config.json has {_what}", match=_match)(
        lambda tmp, edit=_edit: _from_pretrained(tmp, edit)
    )


@bad_input(
    "export",
    "save_pretrained(metrics={'nll': -1.0}) (audit6 RT49: written, and shown in the card)",
    match=r"save_pretrained: metrics\.nll must be >= 0 .*got -1\.0",
)
def _save_negative_nll(tmp):
    from harness.models import ModelConfig, build_model

    try:
        build_model(ModelConfig("test_resnet", 10, {"covariance": "none"})).save_pretrained(
            tmp / "export", metrics={"nll": -1.0}
        )
    finally:
        assert not (tmp / "export").exists()


@bad_input(
    "export",
    "save_pretrained of a model whose card_info label_names holds an empty name (audit6 RT47)",
    match=r"save_pretrained: label_names\[3\] = ' ' is an empty class name",
)
def _save_empty_name(tmp):
    from harness.models import ModelConfig, build_model

    model = build_model(ModelConfig("test_resnet", 10, {"covariance": "none"}))
    model.card_info["label_names"] = [*"abc", " ", *"efghij"]
    try:
        model.save_pretrained(tmp / "export")
    finally:
        assert not (tmp / "export").exists()


@handled(
    "export",
    "save_pretrained after model.head.eval_mc_samples = 5 on a loaded export (audit6 X13: the export said 1000, the "
    "config stored at load time)",
    r"saved as the head has it",
)
def _resave_head_settings(tmp):
    from harness.models import Classifier

    model = Classifier.from_pretrained(_export(tmp, lambda c: None))
    model.head.eval_mc_samples, model.head.eval_seed = 5, None
    model.save_pretrained(tmp / "again")
    head = json.loads((tmp / "again" / "config.json").read_text())["harness"]["model"]["head"]
    assert head["eval_mc_samples"] == 5 and head["eval_seed"] is None, head
    loaded = Classifier.from_pretrained(tmp / "again").head
    assert (loaded.eval_mc_samples, loaded.eval_seed, loaded.train_mc_samples) == (5, None, 1000)
    return "saved as the head has it: eval_mc_samples 5 and eval_seed None in config.json, and loaded back so"


@bad_input(
    "export",
    "save_pretrained after model.head.eval_mc_samples = 0 (audit6 X13: a setting the head refuses, written)",
    match=r"model\.head: eval_mc_samples must be .*; set the head's option to a value it takes before saving",
)
def _resave_bad_head_setting(tmp):
    from harness.models import Classifier

    model = Classifier.from_pretrained(_export(tmp, lambda c: None))
    model.head.eval_mc_samples = 0
    try:
        model.save_pretrained(tmp / "again")
    finally:
        assert not (tmp / "again").exists()
