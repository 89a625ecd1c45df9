"""hetify: a model's classifier replaced by a HET head of the same sizes in one call."""

import pytest
import timm
import torch
from torch import nn

import harness
from harness.heads import HeteroscedasticHead, hetify


def test_timm_resnet18_outputs_through_a_het_head():
    model = timm.create_model("resnet18", num_classes=7, pretrained=False)
    fc = model.fc
    assert hetify(model, covariance="low_rank", num_factors=3, train_mc_samples=5, eval_mc_samples=5) is model
    head = model.get_classifier()
    assert isinstance(head, HeteroscedasticHead) and model.fc is head
    assert (head.in_features, head.num_classes, head.num_factors) == (fc.in_features, 7, 3)
    x = torch.randn(2, 3, 32, 32)
    model.train()
    out = model(x)
    assert out.shape == (2, 7)
    out.logsumexp(-1).sum().backward()
    assert head.scale.weight.grad.abs().sum() > 0  # the noise layers are in the graph
    model.eval()
    with torch.no_grad():
        p = model(x).exp()
    torch.testing.assert_close(p.sum(-1), torch.ones(2), atol=1e-5, rtol=0)
    assert harness.hetify is hetify


def test_without_get_classifier_the_last_linear_is_replaced():
    model = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 4)))
    first = model[0]
    hetify(model.double(), covariance="diagonal", link="sigmoid", eval_mc_samples=3)
    assert model[0] is first and isinstance(model[2][0], HeteroscedasticHead)
    assert model[2][0].loc.weight.dtype == torch.float64 and model[2][0].link == "sigmoid"
    assert model.eval()(torch.randn(3, 5, dtype=torch.float64)).shape == (3, 4)


def test_distilled_timm_model_gets_both_heads_replaced():
    model = timm.create_model(
        "deit_tiny_distilled_patch16_224", num_classes=3, pretrained=False, img_size=32, patch_size=16
    )
    hetify(model, covariance="diagonal", eval_mc_samples=2)
    assert all(isinstance(h, HeteroscedasticHead) for h in model.get_classifier())
    assert model.eval()(torch.randn(1, 3, 32, 32)).shape == (1, 3)


@pytest.mark.parametrize(
    "model,options,needle",
    [
        (nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU()), {}, "no nn.Linear"),
        (timm.create_model("resnet18", num_classes=0, pretrained=False), {}, "reset_classifier"),
        (nn.Linear(3, 2), {"num_classes": 5}, "drop num_classes="),
    ],
)
def test_what_cannot_be_hetified_is_refused_naming_the_fix(model, options, needle):
    with pytest.raises(ValueError, match=needle):
        hetify(model, **options)
