"""CIFAR-10-C-style corruptions: seeded per example, cached atomically, named by family and severity."""

import numpy as np
import pytest

from harness.shift import corruptions as C


def _images(n=6, size=32, seed=0):
    return (np.random.default_rng(seed).random((n, size, size, 3)) * 255).astype(np.uint8)


@pytest.mark.parametrize(
    "corruption,severity",
    [
        ("gaussian_noise", 5),
        ("impulse_noise", 2),
        ("glass_blur", 2),
        ("motion_blur", 4),
        ("frost", 3),
        ("elastic_transform", 1),
    ],
)
def test_corruption_of_an_example_depends_only_on_its_seed(corruption, severity):
    imgs, index = _images(), np.arange(10, 16)
    seeds = C.example_seeds(0, corruption, severity, index)
    state = np.random.get_state()
    a = C.corrupt_images(imgs, corruption, severity, seeds)
    assert a.dtype == np.uint8 and a.shape == imgs.shape and not np.array_equal(a, imgs)
    np.testing.assert_array_equal(a, C.corrupt_images(imgs, corruption, severity, seeds))  # repeated: identical
    np.testing.assert_array_equal(a[2:4], C.corrupt_images(imgs[2:4], corruption, severity, seeds[2:4]))  # batch-free
    assert np.array_equal(np.random.get_state()[1], state[1])  # the caller's global stream is untouched
    if corruption != "elastic_transform" or severity > 1:  # another seed, other noise
        other = C.corrupt_images(imgs, corruption, severity, C.example_seeds(1, corruption, severity, index))
        assert not np.array_equal(a, other)


def test_corrupted_sets_are_cached_atomically(tmp_path, monkeypatch):
    imgs, index = _images(), np.arange(6)
    first = C.corrupted(imgs, index, "shot_noise", 3, 0, tmp_path)
    path = C.cache_path(imgs, index, "shot_noise", 3, 0, tmp_path)
    assert path.is_file() and list((tmp_path / "corrupted").iterdir()) == [path]

    def refuse(*a, **k):
        raise AssertionError("regenerated a cached set")

    with monkeypatch.context() as m:  # a second call reads the cache
        m.setattr(C, "corrupt_images", refuse)
        np.testing.assert_array_equal(C.corrupted(imgs, index, "shot_noise", 3, 0, tmp_path), first)

    def killed(f, **arrays):  # the process dies half-way through writing the file
        f.write(b"PK\x03\x04 half an npz")
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(np, "savez", killed)
        with pytest.raises(KeyboardInterrupt):
            C.corrupted(imgs, index, "shot_noise", 4, 0, tmp_path)
    assert list((tmp_path / "corrupted").iterdir()) == [path]  # no partial file, no temporary left
    path.write_bytes(b"not an npz")  # an unreadable cache file is regenerated, the same pixels
    np.testing.assert_array_equal(C.corrupted(imgs, index, "shot_noise", 3, 0, tmp_path), first)
    assert C.cache_path(imgs, index, "shot_noise", 3, 1, tmp_path) != path  # the seed is part of the key


def test_names_families_and_severities():
    assert len(C.standard_corruptions()) == 15
    assert C.families()["noise"] == ["gaussian_noise", "shot_noise", "impulse_noise"]
    assert len(C.resolve(["all"], [1, 2, 3, 4, 5])) == 75
    assert C.resolve(["blur", "defocus_blur", "frost"], [5, 1, 5]) == [
        ("defocus_blur", 5),
        ("defocus_blur", 1),
        ("glass_blur", 5),
        ("glass_blur", 1),
        ("motion_blur", 5),
        ("motion_blur", 1),
        ("zoom_blur", 5),
        ("zoom_blur", 1),
        ("frost", 5),
        ("frost", 1),
    ]
    assert C.resolve(["none"], []) == []
    with pytest.raises(ValueError, match="unknown corruption 'fros'"):
        C.resolve(["fros"], [1])
    with pytest.raises(ValueError, match="severity 6 is not one of 1, 2, 3, 4, 5"):
        C.resolve(["frost"], [6])
    with pytest.raises(ValueError, match="at least 32x32"):
        C.corrupt_images(_images(size=16), "frost", 1, np.zeros(6))
