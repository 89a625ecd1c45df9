"""The array loader: decoded-image cache, whole-batch seeded augmentation, agreement with PIL."""

import io
import zipfile

import numpy as np
import pytest
import torch
from PIL import Image

from harness.data.batched import ArrayBatches, BatchAugment, center_crop, make_loader
from harness.data.cache import decoded_images, file_digest
from harness.data.config import DataConfig
from harness.data.sources import build_split
from harness.data.transforms import eval_transform, train_transform

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def fake_cifar10n(root, n_train=40, n_test=20, seed=0):
    """A CIFAR-10N folder in the real layout (zip of 32 px JPEGs + label npz), small."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    clean = np.arange(n_train) % 10
    paths = [f"train/{CLASSES[c]}/{i:04d}.jpg" for i, c in enumerate(clean)]
    with zipfile.ZipFile(root / "cifar10_jpeg.zip", "w", zipfile.ZIP_STORED) as z:
        for i, p in enumerate(paths + [f"test/{CLASSES[i % 10]}/{i:04d}.jpg" for i in range(n_test)]):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "JPEG", quality=95)
            z.writestr(p, buf.getvalue())
    noisy = {f"{k}_label": (clean + rng.integers(0, 2, n_train)) % 10 for k in ("aggre", "worse")}
    noisy.update({f"random_label{i}": (clean + rng.integers(0, 2, n_train)) % 10 for i in (1, 2, 3)})
    np.savez(
        root / "cifar10n_labels.npz", clean_label=clean, train_path=np.array(paths), classes=np.array(CLASSES), **noisy
    )
    return root


def test_batched_augmentation_depends_only_on_seed_epoch_and_index():
    base = build_split(DataConfig(source="digits"), "val")
    for aug in (BatchAugment(32, crop_padding=4, hflip=True), BatchAugment(32, crop_scale=0.3, hflip=True)):
        ds = ArrayBatches(base, base.pixels(), aug, seed=3)
        torch.manual_seed(0)
        a = ds.__getitems__([5, 9])[0]
        torch.manual_seed(123)  # the global RNG does not matter, nor the batch an example is in ...
        state = torch.get_rng_state()
        b = ds.__getitems__([9, 2, 5])[0]
        assert torch.equal(a[0], b[2]) and torch.equal(a[1], b[0])
        assert torch.equal(torch.get_rng_state(), state)  # ... and the global RNG is left untouched
        ds.use_epoch(1)
        assert not torch.equal(ds.__getitems__([5])[0][0], a[0])
        other = ArrayBatches(base, base.pixels(), aug, seed=4)
        assert not torch.equal(other.__getitems__([5])[0][0], a[0])
        assert a.shape == (2, 3, 32, 32) and a.min() >= -1 and a.max() <= 1


def test_translation_is_an_exact_crop_of_the_zero_padded_image():
    pixels = torch.randint(0, 256, (64, 8, 8, 3), dtype=torch.uint8)
    aug = BatchAugment(8, crop_padding=2, hflip=True)
    p = aug.draw(64, 8, 8, seed=0, epoch=0)
    out = aug.apply(pixels, p["boxes"], p["flip"])
    padded = torch.nn.functional.pad(pixels.permute(0, 3, 1, 2).float() / 255, (2, 2, 2, 2))
    for i in range(64):
        x0, y0 = (int(v) for v in p["boxes"][i, :2])
        want = padded[i, :, y0 : y0 + 8, x0 : x0 + 8]
        want = want.flip(-1) if p["flip"][i] else want
        torch.testing.assert_close(out[i], want * 2 - 1)
    assert p["flip"].mean() == pytest.approx(0.5, abs=0.2) and {0, 4} <= set(p["boxes"][:, 0].astype(int).tolist())


def test_resized_crops_follow_torchvision_box_distribution():
    """Same image, 4000 draws each: the mean picture of the two paths agrees (same box law)."""
    base = build_split(DataConfig(source="digits"), "train")
    img, pixels = base[3][0], torch.from_numpy(base.pixels()[[3] * 4000])
    torch.manual_seed(0)
    tv = torch.stack([train_transform(32, 0.35, True)(img) for _ in range(4000)])
    aug = BatchAugment(32, crop_scale=0.35, hflip=True)
    p = aug.draw(4000, 8, 8, seed=0, epoch=0)
    ours = aug.apply(pixels, p["boxes"], p["flip"])
    assert abs(tv.mean() - ours.mean()) < 0.02 and abs(tv.std() - ours.std()) < 0.03
    assert (tv.mean(0) - ours.mean(0)).abs().mean() < 0.05


def test_evaluation_view_matches_the_pil_path():
    base = build_split(DataConfig(source="digits"), "test")
    pixels = torch.from_numpy(base.pixels()[:30])
    for size, resize in ((32, 32), (24, 28), (8, None)):
        pil = torch.stack([eval_transform(size, resize)(base[i][0]) for i in range(30)])
        assert (pil - center_crop(pixels, size, resize)).abs().max() < 0.01  # PIL rounds to uint8


def test_resize_then_random_crop_is_pils_view_at_the_drawn_offsets():
    """The fine-tuning view (BiT: Resize((R, R)) then RandomCrop(S), flips): each example equals PIL's
    resize-then-crop at the offset drawn for it; R == S is a plain Resize((S, S))."""
    from torchvision.transforms.v2 import functional as TF

    base = build_split(DataConfig(source="digits"), "test")
    pixels, n = torch.from_numpy(base.pixels()[:40]), 40
    for resize, size in ((40, 32), (32, 32), (20, 16)):
        aug = BatchAugment(size, resize=resize, hflip=True)
        p = aug.draw(n, 8, 8, seed=1, epoch=2)
        out = aug.apply(pixels, p["boxes"], p["flip"])
        offsets = set()
        for i in range(n):
            x0, y0 = (int(round(float(v) * resize / 8)) for v in p["boxes"][i, :2])
            offsets.add((x0, y0))
            img = TF.resize(TF.to_image(base[i][0]), [resize, resize], antialias=True)
            want = TF.to_dtype(TF.crop(img, y0, x0, size, size), torch.float32, scale=True) * 2 - 1
            want = want.flip(-1) if p["flip"][i] else want
            assert (out[i] - want).abs().max() < 0.01  # PIL rounds to uint8
        span = set(range(resize - size + 1))
        assert {o for xy in offsets for o in xy} == span  # every offset RandomCrop can pick, and no other
    with pytest.raises(ValueError, match="resize must be >= image_size"):
        BatchAugment(32, resize=16)


def test_decoded_cache_is_reused_and_rebuilt_when_the_data_changes(tmp_path):
    data = fake_cifar10n(tmp_path / "c10n")
    cfg = DataConfig(source="cifar10n", path=str(data), cache_dir=str(tmp_path / "cache"))
    test = build_split(cfg, "test")
    first = test.pixels(cfg.cache_dir)
    assert first.shape == (20, 32, 32, 3) and first.dtype == np.uint8
    np.testing.assert_array_equal(first[7], np.asarray(test[7][0]))  # the same pixels as the PIL reader
    files = sorted((tmp_path / "cache").iterdir())
    assert len(files) == 1 and not any(f.name.endswith(".tmp") for f in files)
    stamp = files[0].stat().st_mtime_ns
    assert np.array_equal(test.pixels(cfg.cache_dir), first) and files[0].stat().st_mtime_ns == stamp  # reused
    fake_cifar10n(data, seed=1)  # new image content, same names
    again = build_split(cfg, "test").pixels(cfg.cache_dir)
    assert not np.array_equal(again, first) and len(list((tmp_path / "cache").iterdir())) == 2


def test_decoded_cache_is_never_half_written(tmp_path, monkeypatch):
    data = fake_cifar10n(tmp_path / "c10n")
    digest, members = file_digest(data / "cifar10_jpeg.zip"), [f"test/{CLASSES[i % 10]}/{i:04d}.jpg" for i in range(20)]
    z = zipfile.ZipFile(data / "cifar10_jpeg.zip")
    real_savez, calls = np.savez, []

    def dying_savez(f, **arrays):  # interrupted half-way through writing the file
        real_savez(f, **arrays)
        f.truncate(f.tell() // 2)
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", dying_savez)
    with pytest.raises(KeyboardInterrupt):
        decoded_images("c", digest, members, z.read, tmp_path / "cache")
    assert calls and list((tmp_path / "cache").iterdir()) == []  # nothing left, not even a .tmp
    monkeypatch.undo()
    good = decoded_images("c", digest, members, z.read, tmp_path / "cache")
    (cache,) = (tmp_path / "cache").iterdir()
    cache.write_bytes(b"garbage")  # a damaged cache file is decoded again and replaced
    np.testing.assert_array_equal(decoded_images("c", digest, members, z.read, tmp_path / "cache"), good)


def test_decoding_errors_name_the_file_and_the_fix(tmp_path):
    with zipfile.ZipFile(tmp_path / "x.zip", "w") as z:
        for name, size in (("a.png", 8), ("b.png", 9)):
            buf = io.BytesIO()
            Image.new("RGB", (size, size)).save(buf, "PNG")
            z.writestr(name, buf.getvalue())
        z.writestr("broken.jpg", b"not a jpeg")
    z = zipfile.ZipFile(tmp_path / "x.zip")
    with pytest.raises(ValueError, match="different sizes.*data.loader=pil"):
        decoded_images("x", "d", ["a.png", "b.png"], z.read, tmp_path / "cache")
    with pytest.raises(ValueError, match="cannot decode image 'broken.jpg'"):
        decoded_images("x", "d", ["a.png", "broken.jpg"], z.read, tmp_path / "cache")


def test_loader_choice_and_the_heldout_split(tmp_path):
    data = fake_cifar10n(tmp_path / "c10n", n_train=50_000 // 1000)
    cfg = DataConfig(source="cifar10n", path=str(data), cache_dir=str(tmp_path / "cache"), batch_size=8)
    base = build_split(cfg, "test")
    loader, ds, sampler = make_loader(cfg, base, train=True)
    assert isinstance(ds, ArrayBatches) and sampler is not None
    x, y, idx = next(iter(loader))
    assert x.shape == (8, 3, 32, 32) and y.shape == (8,) and idx.shape == (8,)
    pil_cfg = DataConfig(**{**cfg.__dict__, "loader": "pil"})
    xp, yp, ip = next(iter(make_loader(pil_cfg, base, train=False)[0]))
    xa, ya, ia = next(iter(make_loader(cfg, base, train=False)[0]))
    assert torch.equal(ya, yp) and torch.equal(ia, ip) and (xa - xp).abs().max() < 0.01
    with pytest.raises(ValueError, match="unknown data.loader"):
        make_loader(DataConfig(source="digits", loader="fast"), base, train=True)


def test_cifar10n_heldout_split_is_fixed_and_disjoint():
    from harness.data.sources import cifar10n_rows

    train, val = cifar10n_rows("train45k"), cifar10n_rows("val5k")
    assert len(train) == 45_000 and len(val) == 5_000 and not set(train) & set(val)
    assert np.array_equal(np.sort(np.concatenate([train, val])), np.arange(50_000))
    assert np.array_equal(cifar10n_rows("val5k"), val)
