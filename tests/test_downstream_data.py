"""VTAB-1k readers: the PEFT folder format and TFDS (mock data with the real schemas)."""

import numpy as np
import pytest
from PIL import Image

from downstream.data import folder_split, tfds_split
from downstream.tasks import get_task


def _write_task(root, folder, sizes, num_classes=47):
    rng = np.random.default_rng(0)
    (root / folder / "images").mkdir(parents=True)
    Image.new("RGB", (8, 8), (10, 20, 30)).save(root / folder / "images" / "a.jpg")
    for split, n in sizes.items():
        lines = [f"images/a.jpg {rng.integers(0, num_classes)}" for _ in range(n)]
        (root / folder / f"{split}.txt").write_text("\n".join(lines) + "\n")


def test_folder_format_with_alias_folder_names(tmp_path):
    _write_task(tmp_path, "oxford_pet", {"train800": 800, "val200": 200, "train800val200": 1000, "test": 3669}, 37)
    task = get_task("oxford_iiit_pet")
    for split, n in (("train800", 800), ("val200", 200), ("train800val200", 1000), ("test", 3669)):
        ds = folder_split(task, split, tmp_path)
        assert len(ds) == n and ds.num_classes == 37
    img, y = ds[0]
    assert img.size == (8, 8) and 0 <= y < 37


def test_folder_format_errors_name_the_fix(tmp_path):
    task = get_task("dtd")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        folder_split(task, "train800", tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="looked for dtd"):
        folder_split(task, "train800", tmp_path)
    _write_task(tmp_path, "dtd", {"train800": 799, "val200": 200})
    with pytest.raises(ValueError, match="has 799 examples .* expects 800"):
        folder_split(task, "train800", tmp_path)
    with pytest.raises(FileNotFoundError, match="test.txt is missing"):
        folder_split(task, "test", tmp_path)
    (tmp_path / "dtd" / "val200.txt").write_text("images/a.jpg 99\n" * 200)
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 47\)"):
        folder_split(task, "val200", tmp_path)
    (tmp_path / "dtd" / "val200.txt").write_text("images/a.jpg\n")
    with pytest.raises(ValueError, match="expected 'relative/path label'"):
        folder_split(task, "val200", tmp_path)


def test_tfds_reader_on_mock_data_with_real_schemas():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
        dtd = tfds_split(get_task("dtd"), "train800val200", None, validate=False)
        assert dtd.num_classes == 47 and len(dtd) > 0 and dtd[0][0].mode == "RGB"
        norb = tfds_split(get_task("smallnorb_ele"), "val200", None, validate=False)
        img, y = norb[0]
        assert img.mode == "RGB" and np.asarray(img).shape[-1] == 3 and 0 <= y < 9  # grayscale tiled
        with pytest.raises(ValueError, match="VTAB-1k expects 200"):
            tfds_split(get_task("dtd"), "val200", None)
