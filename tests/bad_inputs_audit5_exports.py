"""Bad inputs found by the fifth reliability audit (exports and weights): an export's config.json checked beyond its
``harness`` section (timm's keys, what timm's transforms read, ``trained_on`` and ``metrics``) and as a JSON object
before huggingface_hub reads it; float8 and complex weights; backbone options the harness sets itself; and the
messages of two model sources (an empty ``local-dir:``, the weights file of an export)."""

from __future__ import annotations

import click
import torch
from bad_inputs_schemas import _export, _from_pretrained, _upstream

from bad_inputs import bad_input, handled
from bad_inputs_downstream import downstream

CONFIG = r"config\.json: "
UNCHANGED = r"give the folder save_pretrained wrote, unchanged"


def _set(*keys: str, value):
    """An edit of config.json setting ``keys`` (a path into it) to ``value``."""

    def edit(config: dict) -> None:
        for key in keys[:-1]:
            config = config[key]
        config[keys[-1]] = value

    return edit


for _what, _edit, _match in [
    (
        'num_classes "10", a string (audit5 E01)',
        _set("num_classes", value="10"),
        CONFIG
        + r"num_classes = '10' must be the whole number 10, the class count of harness\.model\.num_classes; "
        + UNCHANGED,
    ),
    (
        "num_classes 9 for a model of 10 classes (audit5 E02)",
        _set("num_classes", value=9),
        CONFIG + r"num_classes = 9 must be the whole number 10",
    ),
    (
        "label_names naming one class twice (audit5 E03)",
        _set("label_names", value=[*"abcdefghi", "a"]),
        CONFIG + r"label_names names 'a' more than once: give each class its own name",
    ),
    (
        "pretrained_cfg.mean holding a string (audit5 E07)",
        _set("pretrained_cfg", "mean", value=[0.5, "x", 0.5]),
        CONFIG + r"pretrained_cfg\.mean must be 3 numbers, each finite .*got \[0\.5, 'x', 0\.5\]",
    ),
    (
        "pretrained_cfg.std of 0 (audit5 E07)",
        _set("pretrained_cfg", "std", value=[0.5, 0, 0.5]),
        CONFIG + r"pretrained_cfg\.std must be 3 numbers, each > 0",
    ),
    (
        "trained_on.image_size 0 (audit5 E15)",
        _set("harness", "trained_on", value={"source": "digits", "image_size": 0}),
        CONFIG
        + r"harness\.trained_on\.image_size must be a whole number in \[1, 100000\] \(pixels\), got 0; "
        + UNCHANGED,
    ),
    (
        'metrics.top1 "great" (audit5 E16)',
        _set("harness", "metrics", value={"top1": "great"}),
        CONFIG + r"harness\.metrics\.top1 must be in \[0, 1\] \(a share of examples\), got 'great'",
    ),
    (
        "metrics.top1 7.0 (audit5 E17)",
        _set("harness", "metrics", value={"top1": 7.0, "nll": 0.3}),
        CONFIG + r"harness\.metrics\.top1 must be in \[0, 1\] \(a share of examples\), got 7\.0",
    ),
    (
        "metrics.nll a list (audit5 E16)",
        _set("harness", "metrics", value={"nll": [1]}),
        CONFIG + r"harness\.metrics\.nll must be a finite number \(null: not measured; a string: a note\), got \[1\]",
    ),
    (
        "architecture resnet50 for a test_resnet model (audit5 E18)",
        _set("architecture", value="resnet50"),
        CONFIG + r"architecture = 'resnet50' must be 'test_resnet', the backbone of harness\.model\.backbone",
    ),
    (
        "num_features 7 for a backbone of 96 (audit5 E22)",
        _set("num_features", value=7),
        CONFIG + r"num_features = 7 must be 96, the feature width of the backbone",
    ),
    (
        "pretrained_cfg.crop_pct 3 (audit5 E24)",
        _set("pretrained_cfg", "crop_pct", value=3),
        CONFIG + r"pretrained_cfg\.crop_pct must be in \(0, 1\], got 3",
    ),
    (
        "trained_on with an unknown key (audit5 E27)",
        _set("harness", "trained_on", value={"source": "digits", "bogus": 1}),
        CONFIG
        + r"harness\.trained_on takes only source, .*image_size, eval_resize, limit_train, limit_eval .*unknown key\(s\), got \['bogus'\]",
    ),
    (
        "pretrained_cfg.input_size [3, -1, 32] (audit5 E28)",
        _set("pretrained_cfg", "input_size", value=[3, -1, 32]),
        CONFIG + r"pretrained_cfg\.input_size must be 3 numbers, each a whole number >= 1 \(channels, height, width\)",
    ),
]:
    bad_input("export", f"Classifier.from_pretrained of an export whose config.json has {_what}", match=_match)(
        lambda tmp, edit=_edit: _from_pretrained(tmp, edit)
    )


@bad_input(
    "export",
    "Classifier.from_pretrained of an export whose config.json is null (audit5 E20: an AttributeError from "
    "huggingface_hub)",
    match=r"config\.json' must be a JSON object \(keys and values\), got null",
)
def _config_null(tmp):
    from harness.models import Classifier

    folder = _export(tmp, lambda c: None)
    (folder / "config.json").write_text("null")
    Classifier.from_pretrained(folder)


@bad_input(
    "export",
    "save_pretrained(metrics={'top1': 91.0}), a percentage (audit5 E17: written, then refused by from_pretrained)",
    match=r"save_pretrained: metrics\.top1 must be in \[0, 1\] \(a share of examples\), got 91\.0",
)
def _save_percent(tmp):
    from harness.models import ModelConfig, build_model

    build_model(ModelConfig("test_resnet", 10, {"covariance": "none"})).save_pretrained(
        tmp / "export", metrics={"top1": 91.0}
    )
    assert not (tmp / "export").exists()


def _weights(tmp, dtype: torch.dtype, suffix: str):
    """The state dict of timm's test_resnet (10 classes) as ``dtype``, saved to ``w<suffix>``; (path, state)."""
    import timm
    from safetensors.torch import save_file

    torch.manual_seed(0)
    state = {
        k: (v.to(dtype) if v.is_floating_point() else v).contiguous()
        for k, v in timm.create_model("test_resnet", num_classes=10).state_dict().items()
    }
    path = tmp / f"w{suffix}"
    save_file(state, str(path)) if suffix == ".safetensors" else torch.save(state, path)
    return path, state


@handled(
    "weights",
    "a .safetensors of float8 (e4m3) weights (audit5 W_fp8: NotImplementedError 'sum_cpu' in the finite check)",
    r"loaded",
)
def _fp8(tmp):
    from harness.sources import load_source

    path, state = _weights(tmp, torch.float8_e4m3fn, ".safetensors")
    model = load_source("timm:test_resnet", weights=path)
    got = model.backbone.state_dict()["conv1.0.weight"]
    assert got.dtype == torch.float32 and torch.equal(got, state["conv1.0.weight"].float())
    return "loaded: finiteness checked on a float32 copy (exact), cast into the float32 parameters"


@bad_input(
    "weights",
    "a .pth of complex64 weights (audit5 W_complex_pth: the imaginary parts dropped without a word)",
    match=r"tensor\(s\) of another kind than the model's \(conv1\.0\.weight is complex64, the model's is float32",
)
def _complex(tmp):
    from harness.sources import load_source

    load_source("timm:test_resnet", weights=_weights(tmp, torch.complex64, ".pth")[0])


@bad_input(
    "upstream",
    "harness upstream with model.backbone_kwargs={pretrained: true} (audit5 N05: timm's 'got multiple values for "
    "keyword argument')",
    (ValueError, click.ClickException),
    r"model\.backbone_kwargs\.pretrained = True: the harness sets pretrained itself .*give pretrained weights with "
    r"model\.pretrained_file=FILE",
)
def _upstream_pretrained(tmp):
    _upstream(tmp, "model.backbone_kwargs={pretrained: true}")


@bad_input(
    "upstream",
    "build_model of a ModelConfig with backbone_kwargs={'num_classes': 5} (audit5 N05)",
    match=r"backbone_kwargs\.num_classes = 5: the harness sets num_classes itself",
)
def _build_num_classes(tmp):
    from harness.models import ModelConfig, build_model

    build_model(ModelConfig("test_resnet", 10, {}, {"num_classes": 5}))


@bad_input(
    "sources",
    "harness downstream --upstream local-dir: with no path (audit5 M07: \"no config.json at 'config.json'\")",
    click.ClickException,
    r"'local-dir:': the path after local-dir: is empty: give the folder, e\.g\. local-dir:runs/",
)
def _local_dir_empty(tmp):
    downstream("--upstream", "local-dir:", "--tasks", "demo_digit")


@bad_input(
    "sources",
    "harness downstream --upstream EXPORT/model.safetensors (audit5 M13: 'not a harness model checkpoint; write it "
    "with save_model')",
    click.ClickException,
    r"model\.safetensors' is the model\.safetensors of a folder written by save_pretrained: give the folder itself, "
    r".*export' \(or local-dir:.*export\)",
)
def _export_weights_file(tmp):
    folder = _export(tmp, lambda c: None)
    downstream("--upstream", str(folder / "model.safetensors"), "--tasks", "demo_digit")
