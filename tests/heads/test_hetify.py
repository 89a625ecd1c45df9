"""hetify: a model's classifier replaced by a HET head in one call, never guessed (issue 43, item 2)."""

import pytest
import timm
import torch
import torchvision
from torch import nn

import harness
from harness.heads import HeteroscedasticHead, hetify
from harness.heads.hetify import HeteroscedasticConvHead

CHEAP = {"covariance": "diagonal", "eval_mc_samples": 2, "train_mc_samples": 2}

#: the issue's list: timm name -> the modules that must be replaced (and nothing else)
TIMM = {
    "resnet18": {"fc"},
    "convnext_atto": {"head.fc"},
    "vit_tiny_patch16_224": {"head"},
    "deit_tiny_distilled_patch16_224": {"head", "head_dist"},
    "levit_128s": {"head.linear", "head_dist.linear"},  # NormLinear: its BatchNorm1d kept
    "inception_resnet_v2": {"classif"},
    "efficientnet_b0": {"classifier"},
    "regnetx_002": {"head.fc"},
    "swin_tiny_patch4_window7_224": {"head.fc"},
    "maxvit_pico_rw_256": {"head.fc"},
    "mobilenetv3_small_050": {"classifier"},
    "eva02_tiny_patch14_224": {"head"},
    "coat_lite_tiny": {"head"},
    "crossvit_tiny_240": {"head.0", "head.1"},  # a ModuleList of heads
    "xcit_nano_12_p16_224": {"head"},
    "nfnet_l0": {"head.fc"},
    "ghostnet_050": {"classifier"},
    "volo_d1_224": {"head", "aux_head"},
    "pit_ti_distilled_224": {"head", "head_dist"},
    "resnetv2_50x1_bit": {"head.fc"},  # BiT: a 1x1 Conv2d on pooled features
    "efficientformer_l1": {"head", "head_dist"},
    "cait_xxs24_224": {"head"},
    "mixer_s16_224": {"head"},
    "fastvit_t8": {"head.fc"},
    "dla34": {"fc"},  # a 1x1 Conv2d on pooled features
    "mobilevit_xxs": {"head.fc"},
}
CONV = {"resnetv2_50x1_bit", "dla34"}


def replaced(before: dict, model: nn.Module) -> "set[str]":
    """Names whose module changed; also checks nothing disappeared and new names lie inside the new heads."""
    after = dict(model.named_modules())
    assert set(before) <= set(after)
    names = {n for n, m in after.items() if n in before and m is not before[n]}
    assert all(any(n.startswith(r + ".") for r in names) for n in set(after) - set(before))
    assert all(isinstance(after[n], HeteroscedasticHead) for n in names)
    return names


@pytest.mark.parametrize("name", sorted(TIMM))
def test_every_classifier_timm_names_is_replaced_and_nothing_else(name):
    model = timm.create_model(name, pretrained=False, num_classes=10)
    before = dict(model.named_modules())
    assert hetify(model, **CHEAP) is model
    assert replaced(before, model) == TIMM[name]
    for n in TIMM[name]:
        assert isinstance(model.get_submodule(n), HeteroscedasticConvHead) == (name in CONV)
    with torch.no_grad():
        out = model.eval()(torch.randn(1, *model.pretrained_cfg["input_size"]))
    assert out.shape == (1, 10)
    if len(TIMM[name]) == 1:  # one head: the model returns its log p̄
        torch.testing.assert_close(out.exp().sum(-1), torch.ones(1), atol=1e-5, rtol=0)


def test_levit_keeps_its_norm_and_crossvit_its_list_when_named_by_the_user():
    levit = timm.create_model("levit_128s", pretrained=False, num_classes=4)
    norm = levit.head.bn
    hetify(levit, layer=["head", "head_dist"], **CHEAP)
    assert levit.head.bn is norm and isinstance(levit.head.linear, HeteroscedasticHead)
    cross = timm.create_model("crossvit_tiny_240", pretrained=False, num_classes=4)
    hetify(cross, layer="head", **CHEAP)
    assert isinstance(cross.head, nn.ModuleList) and all(isinstance(h, HeteroscedasticHead) for h in cross.head)


def test_bit_conv_head_is_the_conv_it_replaces_at_covariance_none():
    """A homoscedastic head with the conv's weights gives the model's outputs unchanged: the shapes around the
    1x1 convolution ([B, D, 1, 1] in, flattened by timm after it) are kept."""
    model = timm.create_model("resnetv2_50x1_bit", pretrained=False, num_classes=5).eval()
    conv, x = model.head.fc, torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.nn.init.normal_(conv.bias)
        expected = model(x)
        hetify(model, covariance="none")
        model.head.fc.loc.weight.copy_(conv.weight.flatten(1))
        model.head.fc.loc.bias.copy_(conv.bias)
        torch.testing.assert_close(model(x), expected, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"takes \[B, D, H, W\]"):
        model.head.fc(torch.randn(2, 2048))


def test_volo_aux_head_is_a_het_head_on_tokens():
    model = timm.create_model("volo_d1_224", pretrained=False, num_classes=3)
    hetify(model, **CHEAP)
    assert isinstance(model.head, HeteroscedasticHead) and isinstance(model.aux_head, HeteroscedasticHead)
    tokens = torch.randn(2, 5, model.aux_head.in_features)
    assert model.aux_head.eval()(tokens).shape == (2, 5, 3)  # per-token log p̄, as timm's aux_head logits


def test_timm_resnet18_outputs_through_a_het_head_and_num_classes_resizes():
    model = timm.create_model("resnet18", num_classes=7, pretrained=False)
    fc = model.fc
    hetify(model, num_classes=4, covariance="low_rank", num_factors=3, train_mc_samples=5, eval_mc_samples=5)
    head = model.fc
    assert (head.in_features, head.num_classes, head.num_factors) == (fc.in_features, 4, 3)
    assert model.num_classes == 4 and model.get_classifier() is head
    x = torch.randn(2, 3, 32, 32)
    out = model.train()(x)
    assert out.shape == (2, 4)
    out.logsumexp(-1).sum().backward()
    assert head.scale.weight.grad.abs().sum() > 0  # the noise layers are in the graph
    with torch.no_grad():
        p = model.eval()(x).exp()
    torch.testing.assert_close(p.sum(-1), torch.ones(2), atol=1e-5, rtol=0)
    assert harness.hetify is hetify


class FcFirst(nn.Module):
    """The issue's trap: ``fc`` declared before ``features``, so the last nn.Linear registered is hidden."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 10)
        self.features = nn.Sequential(nn.Linear(64, 32), nn.ReLU())

    def forward(self, x):
        return self.fc(self.features(x))


def test_a_model_declaring_fc_first_is_refused_without_layer_and_converted_with_it():
    model = FcFirst()
    with pytest.raises(ValueError, match=r"layer='fc'.*example_input="):
        hetify(model, **CHEAP)
    before = dict(model.named_modules())
    hetify(model, layer="fc", **CHEAP)
    assert replaced(before, model) == {"fc"} and model.fc.in_features == 32
    assert model.eval()(torch.randn(3, 64)).shape == (3, 10)
    traced = FcFirst()
    before = dict(traced.named_modules())
    hetify(traced.train(), example_input=torch.randn(1, 64), **CHEAP)
    assert replaced(before, traced) == {"fc"} and traced.training and traced.features.training


def test_tracing_keeps_dtype_and_finds_a_nested_output_layer():
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4))).double()
    before = dict(model.named_modules())
    hetify(model, example_input=torch.randn(1, 5, dtype=torch.float64), covariance="diagonal", link="sigmoid")
    assert replaced(before, model) == {"2.0"}
    assert model[2][0].loc.weight.dtype == torch.float64 and model[2][0].link == "sigmoid"


def test_head_takes_the_replaced_layers_mode_device_and_dtype():
    """audit11 A11-22: a model in eval() keeps predicting with its eval samples (the head is not left in train())."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 5)).eval()
    hetify(model, layer="2", covariance="diagonal", eval_mc_samples=50, train_mc_samples=3)
    assert not model[2].training
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(model(x), model(x))
    mixed = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 5).eval())  # the layer's own mode, not its parent's
    hetify(mixed, layer="1", example_input=torch.randn(1, 4), **CHEAP)
    assert mixed.training and mixed[0].training and not mixed[1].training
    meta = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 5, device="meta", dtype=torch.float64))
    hetify(meta, layer="1", check_output=False, **CHEAP)
    tensors = [*meta[1].parameters(), *meta[1].buffers()]
    assert tensors and all(t.device.type == "meta" and t.dtype == torch.float64 for t in tensors)


TORCHVISION = {
    "resnet18": (224, {"fc"}),
    "mobilenet_v3_small": (224, {"classifier.3"}),
    "vit_b_16": (224, {"heads.head"}),
    "inception_v3": (299, {"fc"}),  # AuxLogits.fc feeds only the training-mode aux output: name it to convert it
}


@pytest.mark.parametrize("name", sorted(TORCHVISION))
def test_torchvision_classifier_is_found_by_tracing(name):
    size, expected = TORCHVISION[name]
    fast_init = {"init_weights": False} if name == "inception_v3" else {}  # its default init takes seconds
    model = getattr(torchvision.models, name)(weights=None, num_classes=10, **fast_init)
    x = torch.randn(1, 3, size, size)
    with pytest.raises(ValueError, match="not a timm model"):
        hetify(model, **CHEAP)
    before = dict(model.named_modules())
    hetify(model, example_input=x, **CHEAP)
    assert replaced(before, model) == expected
    with torch.no_grad():
        assert model.eval()(x).shape == (1, 10)


def test_inception_aux_classifier_is_converted_when_named():
    model = torchvision.models.inception_v3(weights=None, num_classes=10, init_weights=False)
    before = dict(model.named_modules())
    hetify(model, layer=["fc", "AuxLogits.fc"], **CHEAP)
    assert replaced(before, model) == {"fc", "AuxLogits.fc"}


def test_squeezenet_is_refused_and_converted_once_its_classifier_ends_the_model():
    """SqueezeNet's 1x1 conv is followed by ReLU and pooling: on log-probabilities the ReLU gives zeros. Pooling
    first and dropping the ReLU gives a 1x1 conv on pooled features, which is supported."""
    model = torchvision.models.squeezenet1_0(weights=None, num_classes=10)
    x = torch.randn(1, 3, 224, 224)
    with pytest.raises(ValueError, match=r"'classifier.3' \(AdaptiveAvgPool2d\)"):
        hetify(model, example_input=x, **CHEAP)
    model.classifier = nn.Sequential(nn.Dropout(0.5), nn.AdaptiveAvgPool2d(1), nn.Conv2d(512, 10, 1))
    hetify(model, example_input=x, **CHEAP)
    assert isinstance(model.classifier[2], HeteroscedasticConvHead)
    with torch.no_grad():
        assert model.eval()(x).shape == (1, 10)


class TwoOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(4, 3)

    def forward(self, x):
        return self.a(x), self.b(x)


class ScaledAfter(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return 2 * self.fc(x)


@pytest.mark.parametrize(
    "make,options,needle",
    [
        (lambda: nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU()), {}, "not a timm model"),
        (lambda: timm.create_model("resnet18", num_classes=0, pretrained=False), {}, "reset_classifier"),
        (lambda: nn.Linear(3, 2), {"num_classes": 5}, "HeteroscedasticHead"),
        (lambda: FcFirst(), {"layer": "head"}, r"names 'head'.*\['fc', 'features.0'\]"),
        (lambda: FcFirst(), {"layer": "features"}, "a Sequential"),
        (lambda: FcFirst(), {"layer": []}, "non-empty list"),
        (lambda: FcFirst(), {"layer": "fc", "in_features": 3}, "drop in_features="),
        (lambda: FcFirst(), {"layer": "fc", "num_classes": 0}, "num_classes must be an int >= 1"),
        (lambda: nn.Sequential(nn.Conv2d(3, 4, 1, stride=2)), {"layer": "0"}, "stride=.2, 2."),
        (lambda: TwoOutputs(), {"example_input": torch.randn(1, 4)}, "ambiguous"),
        (lambda: ScaledAfter(), {"example_input": torch.randn(1, 4)}, "after the last module"),
        (lambda: nn.Sequential(nn.Linear(4, 3), nn.ReLU(inplace=True)), {"example_input": torch.randn(1, 4)}, "ReLU"),
    ],
)
def test_what_cannot_be_hetified_is_refused_naming_the_fix(make, options, needle):
    model = make()
    with pytest.raises(ValueError, match=needle):
        hetify(model, **options)


def test_an_unknown_head_option_fails_before_tracing():
    with pytest.raises(TypeError):
        hetify(FcFirst(), example_input=torch.randn(1, 64), covarianse="diagonal")
