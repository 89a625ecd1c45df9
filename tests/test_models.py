"""Model assembly: timm backbone + head, head replacement for transfer, checkpoints that rebuild themselves."""

import pytest
import torch

from harness.models import (
    ModelConfig,
    build_model,
    count_parameters,
    load_model,
    read_checkpoint,
    replace_head,
    save_model,
)

TINY = dict(backbone="test_resnet", num_classes=5)


def test_build_model_puts_the_head_on_the_backbone_pre_logits():
    model = build_model(dict(**TINY, head=dict(covariance="low_rank", num_factors=2, eval_mc_samples=10))).eval()
    x = torch.randn(2, 3, 32, 32)
    feats = model.pre_logits(x)
    assert feats.shape == (2, model.backbone.head_hidden_size) == (2, model.head.in_features)
    out = model(x)
    assert out.shape == (2, 5)
    assert torch.allclose(out.exp().sum(-1), torch.ones(2), atol=1e-5)
    assert torch.equal(out, model.head(feats))


def test_paper_resnet152_parameter_counts():
    """Paper Sec. 4: ResNet-152 hom 60,185,128 and het (R = 15) 92,969,128 parameters."""
    hom = build_model(dict(backbone="resnetv2_152", num_classes=1000, head=dict(covariance="none")))
    assert count_parameters(hom) == 60_185_128
    het = replace_head(hom, 1000, covariance="low_rank", num_factors=15)
    assert count_parameters(het) == 92_969_128


def test_replace_head_gives_zero_logits_and_shares_the_backbone():
    model = build_model(
        dict(**TINY, head=dict(covariance="parameter_efficient", num_factors=2, learn_temperature=True))
    )
    new = replace_head(model, 7)
    assert new.backbone is model.backbone
    assert new.head.covariance_type == "none" and new.config.num_classes == 7
    assert new.config.head == {"covariance": "none", "link": "softmax"}
    x = torch.randn(3, 3, 32, 32)
    assert torch.equal(new(x), torch.zeros(3, 7))
    assert not hasattr(new.head, "temperature_logit")


def test_checkpoint_round_trip_rebuilds_the_model(tmp_path):
    model = build_model(
        dict(**TINY, head=dict(covariance="low_rank", num_factors=3, link="sigmoid", eval_mc_samples=16))
    ).eval()
    path = save_model(model, tmp_path / "ckpt" / "model.pt", extra={"epoch": 3})
    assert read_checkpoint(path)["extra"] == {"epoch": 3}
    assert not list(path.parent.glob(".*.tmp"))  # the temporary file was renamed away
    loaded = load_model(path).eval()
    assert loaded.config == model.config
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(loaded(x), model(x))


def test_bad_inputs_have_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown backbone 'resnet_5O'.*Did you mean"):
        build_model(dict(backbone="resnet_5O", num_classes=3))
    with pytest.raises(ValueError, match="unknown model config keys"):
        ModelConfig.from_dict(dict(backbone="test_resnet", num_classes=3, heads={}))
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        load_model(tmp_path / "missing.pt")
    torch.save({"weights": 1}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a harness model checkpoint"):
        load_model(tmp_path / "other.pt")
    # a checkpoint whose weights do not fit its recorded architecture
    model = build_model(dict(**TINY, head=dict(covariance="diagonal")))
    path = save_model(model, tmp_path / "m.pt")
    payload = read_checkpoint(path)
    payload["config"]["head"] = {"covariance": "low_rank", "num_factors": 2}
    torch.save(payload, path)
    with pytest.raises(ValueError, match=r"do not fit the model \(missing \['head.scale.bias'"):
        load_model(path)
    with pytest.raises(ValueError, match="pretrained_file"):
        build_model(ModelConfig(**TINY), pretrained_file=str(tmp_path / "nope.pth"))


def test_local_pretrained_file_is_loaded_without_network(tmp_path):
    import timm

    src = timm.create_model("test_resnet", num_classes=0)
    torch.save(src.state_dict(), tmp_path / "w.pth")
    model = build_model(ModelConfig(**TINY), pretrained_file=str(tmp_path / "w.pth"))
    for a, b in zip(model.backbone.state_dict().values(), src.state_dict().values()):
        assert torch.equal(a, b)


def test_a_pretrained_backbone_brings_its_own_preprocessing_and_strict_loading(tmp_path):
    """The upstream stage's ``model.pretrained_file`` loads like a ``timm:NAME --weights`` source: strictly, the
    file's classifier left out, and the model records the backbone's normalisation from its pretrained_cfg."""
    import timm
    import timm.data
    import torchvision

    src = timm.create_model("resnet10t", num_classes=10)  # with a classifier, as users' files have
    torch.save(src.state_dict(), tmp_path / "w.pth")
    model = build_model(ModelConfig(backbone="timm:resnet10t", num_classes=5), pretrained_file=str(tmp_path / "w.pth"))
    expected = timm.data.resolve_model_data_config(src)
    assert model.config.preprocessing["mean"] == pytest.approx(list(expected["mean"]))
    assert model.config.preprocessing["interpolation"] == expected["interpolation"] and model.renormalise
    assert torch.equal(model.backbone.state_dict()["conv1.0.weight"], src.state_dict()["conv1.0.weight"])
    # it is saved and restored with the model
    assert load_model(save_model(model, tmp_path / "m.pt")).config.preprocessing == model.config.preprocessing
    # a file of another architecture: the key report, not timm's partial load
    torch.save(timm.create_model("resnet18", num_classes=0).state_dict(), tmp_path / "other.pth")
    with pytest.raises(ValueError, match="do not fit"):
        build_model(ModelConfig(backbone="resnet10t", num_classes=5), pretrained_file=str(tmp_path / "other.pth"))
    # torchvision backbones: their ImageNet normalisation
    torch.save(torchvision.models.get_model("resnet18", weights=None).state_dict(), tmp_path / "tv.pth")
    tv = build_model(
        ModelConfig(backbone="torchvision:resnet18", num_classes=5), pretrained_file=str(tmp_path / "tv.pth")
    )
    assert tv.config.preprocessing["std"] == pytest.approx([0.229, 0.224, 0.225])


# ------------------------------------------------------------------ timm's model interface
def test_the_timm_interface_of_a_built_model():
    import timm.data

    model = build_model(dict(backbone="resnet10_32px_w16", num_classes=5, head=dict(covariance="none"))).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        feats = model.forward_features(x)
        assert feats.shape == (2, 128, 4, 4)  # unpooled
        assert torch.equal(model.forward_head(feats, pre_logits=True), model.pre_logits(x))
        assert torch.equal(model.forward_head(feats), model(x))
    assert model.num_classes == 5 and model.num_features == model.head_hidden_size == 128
    assert model.get_classifier() is model.head
    cfg = timm.data.resolve_data_config(model=model)  # timm's transforms for this model: the harness's [-1, 1]
    assert cfg["mean"] == (0.5, 0.5, 0.5) and cfg["input_size"] == (3, 32, 32)
    model.card_info = {"trained_on": {"source": "digits"}, "metrics": {"top1": 0.9}, "label_names": [*"abcde"]}
    model.reset_classifier(7)
    assert model(x).shape == (2, 7) and torch.equal(model(x), torch.zeros(2, 7)) and model.config.num_classes == 7
    assert model.card_info == {"trained_on": {"source": "digits"}}  # the old head's metrics and names dropped
    model.reset_classifier(3, covariance="diagonal", eval_mc_samples=4)
    assert model.head.covariance_type == "diagonal" and model.config.head["covariance"] == "diagonal"
    model.reset_classifier(0)
    assert model(x).shape == (2, 128) and model.num_classes == 0
    with pytest.raises(ValueError, match="no head .*reset_classifier\\(num_classes\\)"):
        save_model(model, "unused.pt")


def test_a_renormalising_model_applies_its_normalisation_in_forward_features():
    import timm

    from harness.models import Classifier, HeteroscedasticHead

    backbone = timm.create_model("test_resnet", num_classes=0)
    prep = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    model = Classifier(
        backbone,
        HeteroscedasticHead(backbone.num_features, 3, covariance="none"),
        ModelConfig("test_resnet", 3, {"covariance": "none"}, {}, prep),
    ).eval()
    x = torch.randn(2, 3, 32, 32)
    own = (x * 0.5 + 0.5 - torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)) / torch.tensor(
        [0.229, 0.224, 0.225]
    ).view(1, 3, 1, 1)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x), backbone.forward_features(own))
        torch.testing.assert_close(model.forward_head(model.forward_features(x)), model(x))


def test_save_model_records_the_heads_current_monte_carlo_settings(tmp_path):
    model = build_model(ModelConfig("test_resnet", 4, {"covariance": "diagonal", "eval_mc_samples": 50}))
    model.head.eval_mc_samples, model.head.share_samples_across_batch = 8, True
    path = save_model(model, tmp_path / "model.pt")
    head = load_model(path).head
    assert (head.eval_mc_samples, head.share_samples_across_batch, head.train_mc_samples) == (8, True, 1000)
    assert model.config.head == {"covariance": "diagonal", "eval_mc_samples": 50}  # the model's own config untouched


def test_build_model_refuses_backbone_options_timm_or_the_harness_cannot_use():
    for kwargs, match in [
        ({"global_pool": "bogus"}, r"backbone_kwargs\.global_pool = 'bogus': timm cannot build test_resnet with it"),
        ({"bogus_option": 1}, r"backbone_kwargs\.bogus_option = 1: .*unexpected keyword argument 'bogus_option'"),
        ({"in_chans": 1}, r"backbone_kwargs\.in_chans = 1: the harness cannot use it"),
        ({"features_only": True}, r"backbone_kwargs\.features_only = True: the harness cannot use it"),
        ({"global_pool": ""}, r"backbone_kwargs\.global_pool = '': the harness cannot use it"),
        ({"checkpoint_path": "w.pth"}, r"backbone_kwargs\.checkpoint_path = 'w\.pth': the harness sets"),
    ]:
        with pytest.raises(ValueError, match=match):
            build_model(ModelConfig("test_resnet", 3, {}, kwargs))
    model = build_model(ModelConfig("test_resnet", 3, {}, {"global_pool": "max", "in_chans": 3}))
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)
