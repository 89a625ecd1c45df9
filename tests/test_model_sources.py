"""Model sources (harness.sources.load_source): a timm architecture with a user's weights file (its classifier named
by timm's pretrained_cfg), timm's own weights (offline only when asked), timm's hf-hub: and local-dir: sources, a
torchvision model; its preprocessing from timm's pretrained_cfg, applied by the model; a usable head for num_classes;
clear errors before any work. Nothing is downloaded: the hub's cache is a folder the tests write."""

import pytest
import torch
from safetensors.torch import save_file

from harness.models import load_model, replace_head, save_model
from harness.sources import load_source

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
    expected = model.backbone(
        (pixels - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    )
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

    save_file(
        {k: v.contiguous() for k, v in timm.create_model("resnet34", pretrained=False).state_dict().items()},
        str(tmp_path / "r34.safetensors"),
    )
    with pytest.raises(
        ValueError, match=r"r34\.safetensors \(timm:resnet18\) do not fit the model \(unexpected \[.layer1\.2\."
    ):
        load_source("timm:resnet18", tmp_path / "r34.safetensors")
    w = {k: v.contiguous() for k, v in timm.create_model("resnet18", pretrained=False).state_dict().items()}
    w["conv1.weight"] = torch.zeros(64, 3, 3, 3)
    save_file(w, str(tmp_path / "bad.safetensors"))
    with pytest.raises(ValueError, match=r"shape mismatch conv1\.weight: \(64, 3, 3, 3\) vs \(64, 3, 7, 7\)"):
        load_source("timm:resnet18", tmp_path / "bad.safetensors")


def test_no_weights_offline_fails_fast_naming_the_option(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the environment says offline
    with pytest.raises(ValueError, match=r"no weights for timm:resnet18 .*offline mode.*--weights FILE.*--random-init"):
        load_source("timm:resnet18")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(ValueError, match=r"no weights for timm:resnet18 .*offline mode"):
        load_source("timm:resnet18", offline=True)  # the user's flag says offline
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


# ------------------------------------------------------------------ classifiers named by pretrained_cfg
@pytest.mark.parametrize(
    "name,classifier",
    [
        ("inception_resnet_v2", "classif"),
        ("deit_tiny_distilled_patch16_224", "head_dist"),
        ("levit_128s", "head_dist.linear"),
    ],
)
def test_full_checkpoints_of_families_with_other_classifier_names_load(tmp_path, name, classifier):
    """A full checkpoint (classifier included) of the paper's WebVision backbone (classifier ``classif``), a
    distilled DeiT (``head`` and ``head_dist``) and a LeViT (``head.linear``, ``head_dist.linear`` after a norm): the
    classifier, as ``pretrained_cfg['classifier']`` names it, is left out and every other tensor kept."""
    import timm

    torch.manual_seed(0)
    net = timm.create_model(name, pretrained=False, num_classes=7)
    state = {k: v.contiguous() for k, v in net.state_dict().items()}
    assert any(k.startswith(classifier + ".") for k in state)
    save_file(state, str(tmp_path / "full.safetensors"))
    model = load_source(f"timm:{name}", tmp_path / "full.safetensors", num_classes=3)
    own = model.backbone.state_dict()
    assert not any(k.startswith(classifier + ".") for k in own)
    assert all(torch.equal(v, state[k]) for k, v in own.items())
    assert model.head.num_classes == 3 and model.config.backbone == name


def test_a_file_with_keys_of_another_model_is_still_refused_by_name(tmp_path):
    import timm

    state = {k: v.contiguous() for k, v in timm.create_model("test_resnet", num_classes=5).state_dict().items()}
    state["extra.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "w.safetensors"))
    with pytest.raises(ValueError, match=r"do not fit the model \(unexpected \['extra.weight'\]"):
        load_source("timm:test_resnet", tmp_path / "w.safetensors")


def test_num_classes_gives_a_usable_head(resnet18_weights):
    folder, _ = resnet18_weights
    x = torch.randn(2, 3, 32, 32)
    assert load_source("timm:resnet18", folder / "r18.safetensors").eval()(x).shape == (2, 1)  # the placeholder
    model = load_source("timm:resnet18", folder / "r18.safetensors", num_classes=10).eval()
    with torch.no_grad():
        assert model(x).shape == (2, 10) and model.config.num_classes == 10
    het = load_source(
        "timm:resnet18",
        folder / "r18.safetensors",
        num_classes=4,
        head={"covariance": "low_rank", "num_factors": 2, "eval_mc_samples": 8},
    )
    assert het.head.covariance_type == "low_rank" and het.eval()(x).shape == (2, 4)
    with pytest.raises(ValueError, match="num_classes must be a whole number >= 1"):
        load_source("timm:resnet18", folder / "r18.safetensors", num_classes=0)


# ------------------------------------------------------------------ timm's own sources: download, cache, hub, folder
def _timm_folder(folder, name="test_resnet", num_classes=10):
    """A timm model folder (config.json + model.safetensors) written by timm's save_for_hf; returns its state."""
    import timm
    from timm.models import save_for_hf

    torch.manual_seed(1)
    net = timm.create_model(name, pretrained=False, num_classes=num_classes)
    save_for_hf(net, str(folder), safe_serialization=True)
    return net.state_dict()


def _fake_hub_cache(cache, repo, files_from):
    """The Hugging Face cache layout (refs/main -> snapshots/<commit>/...) of ``repo``, holding the files of
    ``files_from``."""
    import shutil

    commit = "0123456789abcdef0123456789abcdef01234567"
    root = cache / ("models--" + repo.replace("/", "--"))
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text(commit)
    shutil.copytree(files_from, root / "snapshots" / commit)


def test_offline_weights_by_name_come_from_the_cache_and_online_ones_from_timm(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub
    import timm

    state = _timm_folder(tmp_path / "repo")
    _fake_hub_cache(tmp_path / "cache", "timm/test_resnet.r160_in1k", tmp_path / "repo")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "cache"))
    model = load_source("timm:test_resnet", offline=True)
    assert all(torch.equal(v, state[k]) for k, v in model.backbone.state_dict().items())
    # online (no flag, no HF_HUB_OFFLINE): timm.create_model(pretrained=True) as timm users call it, nothing patched
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)  # read from the environment when huggingface_hub was imported
    # the hub answers (this machine has no network: harness.sources would read the cached weights as offline)
    monkeypatch.setattr("harness.network.unreachable", lambda url, timeout=3.0: None)
    seen = {}
    real = timm.create_model

    def spy(name, **kwargs):
        seen.update(name=name, offline=hub.HF_HUB_OFFLINE, **kwargs)
        return real(name, **{**kwargs, "pretrained": False})

    monkeypatch.setattr(timm, "create_model", spy)
    load_source("timm:test_resnet", offline=False)
    assert seen["name"] == "test_resnet" and seen["pretrained"] is True and "pretrained_cfg_overlay" not in seen
    assert seen["offline"] is False


def test_hf_hub_and_local_dir_sources_as_timm_spells_them(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    state = _timm_folder(tmp_path / "repo")
    model = load_source(f"local-dir:{tmp_path / 'repo'}", num_classes=3)
    assert all(torch.equal(v, state[k]) for k, v in model.backbone.state_dict().items())
    assert model.config.backbone == "test_resnet" and model.head.num_classes == 3
    assert load_source(f"timm:local-dir:{tmp_path / 'repo'}").config.backbone == "test_resnet"
    _fake_hub_cache(tmp_path / "cache", "someone/tiny", tmp_path / "repo")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "cache"))
    from_hub = load_source("hf-hub:someone/tiny", offline=True)
    assert all(torch.equal(v, state[k]) for k, v in from_hub.backbone.state_dict().items())
    with pytest.raises(ValueError, match=r"hf-hub:someone/absent: no config.json .*offline mode"):
        load_source("hf-hub:someone/absent", offline=True)
    with pytest.raises(ValueError, match="holds its own weights"):
        load_source(f"local-dir:{tmp_path / 'repo'}", tmp_path / "repo" / "model.safetensors")
    with pytest.raises(ValueError, match="no folder"):
        load_source(f"local-dir:{tmp_path / 'nowhere'}")


def test_backbone_options_are_checked_by_building_the_backbone_without_weights(monkeypatch):
    import timm

    from harness.backbone_sources import check_backbone_builds

    create, on_meta = timm.create_model, []

    def meta_refusing(*args, **kwargs):  # a model whose construction needs real tensors (e.g. .item() in __init__)
        on_meta.append(torch.empty(0).device.type == "meta")
        if on_meta[-1]:
            raise RuntimeError("Tensor.item() cannot be called on meta tensors")
        return create(*args, **kwargs)

    check_backbone_builds("timm:test_resnet", {"drop_rate": 0.1}, "model.backbone_kwargs")
    with pytest.raises(ValueError, match=r"^k\.global_pool = 'bogus': timm cannot build test_resnet with it \("):
        check_backbone_builds("test_resnet", {"global_pool": "bogus", "drop_rate": 0.1}, "k")
    with pytest.raises(
        ValueError, match=r"torchvision backbones \(torchvision:resnet18\) take no timm options; drop k"
    ):
        check_backbone_builds("torchvision:resnet18", {"drop_rate": 0.1}, "k")
    check_backbone_builds("local-dir:/no/such/folder", {"drop_rate": 0.1}, "k")  # its options come with its config
    monkeypatch.setattr(timm, "create_model", meta_refusing)
    check_backbone_builds("test_resnet", {"drop_rate": 0.1}, "k")  # refused on the meta device: built on the CPU
    assert on_meta == [True, False]
