"""Model sources (harness.models.load_source): a timm architecture with a user's weights file, loaded by timm;
its preprocessing from timm's pretrained_cfg, applied by the model; clear errors before any work."""

import pytest
import torch
from safetensors.torch import save_file

from harness.models import load_model, load_source, replace_head, save_model

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.fixture(scope="module")
def resnet18_weights(tmp_path_factory):
    """A timm resnet18's state dict (with its 1000-class fc), saved as .safetensors and as a .pth file."""
    import timm

    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False)
    folder = tmp_path_factory.mktemp("weights")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "r18.safetensors"))
    torch.save(state, folder / "r18.pth")
    return folder, state


@pytest.mark.parametrize("file", ["r18.safetensors", "r18.pth"])
def test_timm_weights_load_through_timm_and_keep_their_values(resnet18_weights, file):
    folder, state = resnet18_weights
    model = load_source("timm:resnet18", folder / file)
    own = model.backbone.state_dict()
    assert "fc.weight" not in own  # the backbone has no classifier; the file's is left out
    for k, v in own.items():
        assert torch.equal(v, state[k]), k


def test_a_timm_source_normalises_with_its_pretrained_cfg_mean_and_std(resnet18_weights):
    folder, _ = resnet18_weights
    model = load_source("timm:resnet18", folder / "r18.safetensors").eval()
    prep = model.config.preprocessing
    assert prep["mean"] == pytest.approx(IMAGENET_MEAN) and prep["std"] == pytest.approx(IMAGENET_STD)
    pixels = torch.rand(2, 3, 32, 32)  # [0, 1]
    harness_view = (pixels - 0.5) / 0.5  # what the harness's loaders give
    expected = model.backbone((pixels - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1))
                              / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
    with torch.no_grad():
        torch.testing.assert_close(model.pre_logits(harness_view), expected, rtol=1e-4, atol=1e-5)


def test_a_transferred_source_saves_and_reloads_with_its_preprocessing(resnet18_weights, tmp_path):
    folder, _ = resnet18_weights
    model = replace_head(load_source("timm:resnet18", folder / "r18.safetensors"), 7).eval()
    save_model(model, tmp_path / "model.pt")
    again = load_model(tmp_path / "model.pt").eval()
    assert again.config.preprocessing == model.config.preprocessing and again.head.num_classes == 7
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(again(x), model(x))


def test_harness_models_keep_the_harness_normalisation():
    from harness.models import ModelConfig, build_model

    model = build_model(ModelConfig("test_resnet", 3, {"covariance": "none"})).eval()
    assert not model.renormalise
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model.pre_logits(x), model.backbone(x))


def test_weights_of_another_architecture_name_the_keys_and_shapes(tmp_path):
    import timm

    save_file({k: v.contiguous() for k, v in timm.create_model("resnet34", pretrained=False).state_dict().items()},
              str(tmp_path / "r34.safetensors"))
    with pytest.raises(ValueError, match=r"r34\.safetensors \(timm:resnet18\) do not fit the model \(unexpected \[.layer1\.2\."):
        load_source("timm:resnet18", tmp_path / "r34.safetensors")
    w = {k: v.contiguous() for k, v in timm.create_model("resnet18", pretrained=False).state_dict().items()}
    w["conv1.weight"] = torch.zeros(64, 3, 3, 3)
    save_file(w, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ValueError, match=r"shape mismatch conv1\.weight: \(64, 3, 3, 3\) vs \(64, 3, 7, 7\)"):
        load_source("timm:resnet18", tmp_path / "bad.safetensors")


def test_no_weights_offline_fails_fast_naming_the_option(tmp_path):
    with pytest.raises(ValueError, match=r"no weights for timm:resnet18 .*--weights FILE.*--random-init"):
        load_source("timm:resnet18")
    assert load_source("timm:resnet18", random_init=True).config.preprocessing["mean"] == pytest.approx(IMAGENET_MEAN)
    with pytest.raises(FileNotFoundError, match="no weights file"):
        load_source("timm:resnet18", tmp_path / "missing.safetensors")
    with pytest.raises(ValueError, match="unknown backbone 'resnet_18'"):
        load_source("timm:resnet_18", random_init=True)
    with pytest.raises(ValueError, match="--weights goes with a timm:NAME or torchvision:NAME source"):
        load_source(str(tmp_path / "model.pt"), tmp_path / "w.safetensors")


def test_torchvision_weights_load_strictly_without_the_classifier(tmp_path):
    import torchvision

    torch.manual_seed(0)
    state = torchvision.models.get_model("resnet18", weights=None).state_dict()
    torch.save(state, tmp_path / "tv.pth")
    model = load_source("torchvision:resnet18", tmp_path / "tv.pth").eval()
    own = model.backbone.state_dict()
    assert "fc.weight" not in own and all(torch.equal(v, state[k]) for k, v in own.items())
    assert model.config.preprocessing["mean"] == pytest.approx(IMAGENET_MEAN)
    transferred = replace_head(model, 4).eval()
    save_model(transferred, tmp_path / "model.pt")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(load_model(tmp_path / "model.pt").eval()(x), transferred(x))
    torch.save(torchvision.models.get_model("resnet34", weights=None).state_dict(), tmp_path / "r34.pth")
    with pytest.raises(ValueError, match=r"r34\.pth \(torchvision:resnet18\) do not fit the model \(unexpected"):
        load_source("torchvision:resnet18", tmp_path / "r34.pth")
    with pytest.raises(ValueError, match=r"torchvision:resnet18 needs its weights: give --weights FILE"):
        load_source("torchvision:resnet18")
    with pytest.raises(ValueError, match=r"unknown torchvision model 'resnet_18'.*Did you mean"):
        load_source("torchvision:resnet_18", random_init=True)
