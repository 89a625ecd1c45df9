"""Data sources, label noise, transforms and seeded loading."""

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from harness.data.config import DataConfig
from harness.data.dataset import LabelSets
from harness.data.loading import EpochSampler, TransformedDataset
from harness.data.noise import inject_label_noise, transition_matrix
from harness.data.sources import build_split
from harness.data.transforms import eval_transform, train_transform

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "cifar10n"


def test_digits_splits_are_fixed_disjoint_and_cover_the_data():
    splits = {s: build_split(DataConfig(source="digits"), s) for s in ("train", "val", "test")}
    assert [len(d) for d in splits.values()] == [1078, 360, 359]
    img, y = splits["train"][0]
    assert img.mode == "RGB" and img.size == (8, 8) and 0 <= y < 10
    again = build_split(DataConfig(source="digits"), "train")
    assert np.array_equal(again.labels, splits["train"].labels)
    with pytest.raises(ValueError, match="unknown digits split"):
        build_split(DataConfig(source="digits"), "validation")


def test_unknown_source_and_missing_paths_name_the_fix(tmp_path):
    with pytest.raises(ValueError, match="unknown data source 'csv'"):
        build_split(DataConfig(source="csv"), "train")
    with pytest.raises(ValueError, match="data.path is required"):
        build_split(DataConfig(source="cifar10n"), "train")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_split(DataConfig(source="image_folder", path=str(tmp_path / "nope")), "train")
    with pytest.raises(FileNotFoundError, match="cifar10_jpeg.zip"):
        build_split(DataConfig(source="cifar10n", path=str(tmp_path)), "train")
    with pytest.raises(ValueError, match="data.name is required"):
        build_split(DataConfig(source="tfds"), "train")


def test_image_folder_source(tmp_path):
    for c in ("cat", "dog"):
        (tmp_path / "train" / c).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (10, 10), (i * 40, 0, 0)).save(tmp_path / "train" / c / f"{i}.png")
    ds = build_split(DataConfig(source="image_folder", path=str(tmp_path)), "train")
    assert ds.class_names == ["cat", "dog"] and ds.labels.tolist() == [0, 0, 0, 1, 1, 1]
    assert ds[4][0].size == (10, 10)
    with pytest.raises(FileNotFoundError, match="no split folder"):
        build_split(DataConfig(source="image_folder", path=str(tmp_path)), "val")


def test_image_folder_links_out_of_data_path_are_refused_unless_allowed(tmp_path):
    def png(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4)).save(path)

    root, outside = tmp_path / "imf", tmp_path / "outside"
    png(root / "train" / "a" / "0.png"), png(root / "val" / "b" / "0.png"), png(outside / "c" / "0.png")
    (root / "train" / "b").symlink_to(root / "val" / "b")  # a link that stays inside data.path is read
    cfg = DataConfig(source="image_folder", path=str(root))
    assert build_split(cfg, "train").class_names == ["a", "b"]
    cases = {  # the link, what it points at
        root / "train" / "c": outside / "c",  # a class folder
        root / "train" / "a" / "1.png": outside / "c" / "0.png",  # one image
        root / "train" / "a" / "deep": outside / "c",  # a subfolder of a class folder
    }
    for link, target in cases.items():
        link.symlink_to(target)
        with pytest.raises(ValueError, match=rf"'{link}' is a link to '{target}', outside data.path '{root}'.*"):
            build_split(cfg, "train")
        allowed = build_split(DataConfig(source="image_folder", path=str(root), allow_outside_root=True), "train")
        assert len(allowed) == 3  # a/0.png, b/0.png and the image behind the link
        link.unlink()
    (tmp_path / "data").mkdir()  # the split folder itself a link out
    (tmp_path / "data" / "train").symlink_to(root / "train")
    with pytest.raises(ValueError, match=r"data/train' is a link to '\S*imf/train', outside data.path"):
        build_split(DataConfig(source="image_folder", path=str(tmp_path / "data")), "train")


def test_tfds_source_reads_real_schema_from_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
        ds = build_split(DataConfig(source="tfds", name="cifar10"), "train")
        assert len(ds) == 6 and ds.num_classes == 10  # names come from the schema (digits in mocks)
        img, y = ds[3]
        assert img.size == (32, 32) and 0 <= y < 10


def test_manifest_csv_and_label_range(tmp_path):
    for name in "abc":
        Image.new("RGB", (4, 4)).save(tmp_path / f"{name}.png")
    (tmp_path / "train.csv").write_text("path,labels\na.png,0 3\nb.png,2;1\nc.png,\n")
    ds = build_split(DataConfig(source="manifest", path=str(tmp_path), multilabel=True), "train")
    assert ds.multilabel and ds.num_classes == 4
    assert ds.targets().tolist() == [[1, 0, 0, 1], [0, 1, 1, 0], [0, 0, 0, 0]]  # c.png: an image of no class
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 3\)"):
        build_split(DataConfig(source="manifest", path=str(tmp_path), num_classes=3, multilabel=True), "train")
    (tmp_path / "bad.csv").write_text("a.png,x\n")
    with pytest.raises(ValueError, match="must be integers"):
        build_split(DataConfig(source="manifest", path=str(tmp_path)), "bad")


def test_manifest_is_held_in_columns_whose_memory_grows_by_bytes_per_entry(tmp_path):
    """20,000 JSONL entries (16-character paths, 2 labels each) are held as buffers, not objects: the dataset keeps
    what the columns need (16 path bytes + 8 offset + 2 x 8 label ids + 8 label offset = 48 bytes an entry, 51
    measured), where the list of (str, list) rows read before held 307 bytes an entry; every path and label set
    reads back."""
    import json
    import tracemalloc

    n = 20_000
    rows = [{"path": f"img/{i:08d}.png", "labels": [i % 7, 7 + i % 3]} for i in range(n)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    ds = build_split(DataConfig(source="manifest", path=str(tmp_path), multilabel=True), "train")
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert held / n < 64, held / n
    assert len(ds) == n and ds.num_classes == 10
    for i in (0, 1, 12_345, n - 1):
        assert ds.load_image.name(i) == str(tmp_path / rows[i]["path"])
        assert ds.labels[i].tolist() == rows[i]["labels"]


def test_manifest_labels_are_what_data_multilabel_says(tmp_path):
    """Audit 14 (A14-10): every manifest was read as label sets, so a softmax model could not train on one, and
    data.multilabel was refused for it. By default a manifest is single-label (one id a line, integer targets, a line
    of none or several refused naming the file and line); data.multilabel=true reads label sets, [] a negative."""
    for name in "abc":
        Image.new("RGB", (4, 4)).save(tmp_path / f"{name}.png")
    (tmp_path / "train.jsonl").write_text('{"path": "a.png", "labels": [2]}\n\n{"path": "b.png", "labels": [0]}\n')
    (tmp_path / "val.csv").write_text("path,labels\na.png,1\nb.png, 0 \n")
    single = build_split(DataConfig(source="manifest", path=str(tmp_path)), "train")
    assert not single.multilabel and single.labels.dtype == np.int64 and single.labels.tolist() == [2, 0]
    assert single[0][1] == 2 and "one label each" in single.description and single.num_classes == 3
    assert build_split(DataConfig(source="manifest", path=str(tmp_path)), "val").labels.tolist() == [1, 0]
    sets = build_split(DataConfig(source="manifest", path=str(tmp_path), multilabel=True), "train")
    assert sets.multilabel and sets.targets().tolist() == [[0, 0, 1], [1, 0, 0]] and "label sets" in sets.description
    rule = r"data\.multilabel=false \(the default\) reads a manifest as single-label data, exactly one label id a line"
    for split, text, match in [
        (
            "train",
            '{"path": "a.png", "labels": [0]}\n{"path": "c.png", "labels": []}\n',
            r"train\.jsonl line 2 lists no label",
        ),
        ("train", '{"path": "c.png", "labels": [1, 0]}\n', r"train\.jsonl line 1 lists 2 labels \[1, 0\]"),
        ("val", "path,labels\na.png,0\nc.png,\n", r"val\.csv line 3 lists no label"),
        ("val", "path,labels\na.png,0;2\n", r"val\.csv line 2 lists 2 labels \[0, 2\]"),
    ]:
        (tmp_path / f"{split}.{'jsonl' if split == 'train' else 'csv'}").write_text(text)
        with pytest.raises(ValueError, match=match + ": " + rule + r".*or set data\.multilabel=true if the list holds"):
            build_split(DataConfig(source="manifest", path=str(tmp_path)), split)
        assert build_split(DataConfig(source="manifest", path=str(tmp_path), multilabel=True), split).multilabel
    (tmp_path / "train.jsonl").write_text('{"path": "a.png", "labels": [0]}\n{"path": "./a.png", "labels": [1]}\n')
    with pytest.raises(
        ValueError,
        match=r"listed twice.*e\.g\. \[0, 1\] if both do, with data\.multilabel=true: .*or with its one class \(",
    ):
        build_split(DataConfig(source="manifest", path=str(tmp_path)), "train")
    with pytest.raises(ValueError, match=r"listed twice.*e\.g\. \[0, 1\] if both do"):
        build_split(DataConfig(source="manifest", path=str(tmp_path), multilabel=True), "train")


def test_manifest_paths_resolve_through_links_before_the_check(tmp_path):
    root, outside = tmp_path / "m", tmp_path / "elsewhere"
    (root / "ok").mkdir(parents=True)
    outside.mkdir()
    Image.new("RGB", (4, 4)).save(outside / "x.png")
    Image.new("RGB", (4, 4)).save(root / "ok" / "y.png")
    (root / "link.png").symlink_to(outside / "x.png")  # a file link leading out
    (root / "dir").symlink_to(outside)  # a folder link leading out
    (root / "inner").symlink_to(root / "ok")  # a folder link that stays inside
    for entry in ("link.png", "dir/x.png", "ok/../../elsewhere/x.png"):
        (root / "train.csv").write_text(f"ok/y.png,0\n{entry},1\n")
        with pytest.raises(ValueError, match=r"\(entry 2\) lies outside"):
            build_split(DataConfig(source="manifest", path=str(root)), "train")
        ds = build_split(DataConfig(source="manifest", path=str(root), allow_outside_root=True), "train")
        assert ds[1][0].size == (4, 4)
    (root / "train.csv").write_text("inner/y.png,0\nok/./y.png,1\n")
    assert len(build_split(DataConfig(source="manifest", path=str(root)), "train")) == 2


def test_label_sets_round_trip():
    sets = LabelSets.from_lists([[2], [0, 1], [], [3, 1]])
    assert len(sets) == 4 and sets[3].tolist() == [3, 1]
    dense = sets.to_dense(4)
    assert dense.tolist() == [[0, 0, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 1, 0, 1]]
    assert sets.multi_hot(1, 4).tolist() == [1, 1, 0, 0]
    assert sets.head(2).to_dense(4).tolist() == dense[:2].tolist()


@pytest.mark.parametrize("kind,rate", [("symmetric", 0.4), ("pair_flip", 0.3)])
def test_label_noise_rates_and_structure(kind, rate):
    labels = np.repeat(np.arange(5), 4000)
    noisy, info = inject_label_noise(labels, 5, kind, rate, seed=1)
    assert abs(info["realised_rate"] - rate) < 0.01
    t = np.array(info["transition"])
    np.testing.assert_allclose(t, transition_matrix(kind, 5, rate), atol=0.02)
    if kind == "pair_flip":
        assert set(noisy[(noisy != labels)] - labels[(noisy != labels)]) <= {1, -4}
    again, _ = inject_label_noise(labels, 5, kind, rate, seed=1)
    assert np.array_equal(noisy, again)


def test_label_noise_from_a_matrix_and_bad_input():
    m = [[0.5, 0.5, 0.0], [0.0, 1.0, 0.0], [0.2, 0.0, 0.8]]
    labels = np.repeat(np.arange(3), 5000)
    _, info = inject_label_noise(labels, 3, "matrix", matrix=m, seed=0)
    np.testing.assert_allclose(info["transition"], m, atol=0.02)
    with pytest.raises(ValueError, match="row-stochastic"):
        transition_matrix("matrix", 3, matrix=[[1, 0], [0, 1]])
    with pytest.raises(ValueError, match="unknown label_noise kind"):
        transition_matrix("asymmetric", 3, 0.1)
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\]"):
        transition_matrix("symmetric", 3, 1.5)


def test_transforms_scale_to_unit_range():
    img = Image.fromarray(np.array([[[0, 255, 128]] * 40] * 30, dtype=np.uint8))
    x = eval_transform(24)(img)
    assert x.shape == (3, 24, 24) and x.dtype == torch.float32
    assert x[0].max() == -1.0 and x[1].min() == 1.0
    y = train_transform(16, crop_scale=0.5)(img)
    assert y.shape == (3, 16, 16) and -1.0 <= y.min() and y.max() <= 1.0
    with pytest.raises(ValueError, match="crop_scale"):
        train_transform(16, crop_scale=0.0)


def test_seeded_augmentation_depends_only_on_seed_epoch_and_index():
    base = build_split(DataConfig(source="digits"), "val")
    ds = TransformedDataset(base, train_transform(16, crop_scale=0.3), seed=3)
    torch.manual_seed(0)
    a = ds[5][0]
    torch.manual_seed(123)  # the global RNG does not matter ...
    assert torch.equal(ds[5][0], a)
    state = torch.get_rng_state()
    ds[6]
    assert torch.equal(torch.get_rng_state(), state)  # ... and is left untouched
    ds.use_epoch(1)
    assert not torch.equal(ds[5][0], a)
    s = EpochSampler(10, seed=3)
    first = list(s)
    assert sorted(first) == list(range(10)) and list(s) == first
    s.use_epoch(1)
    assert list(s) != first


@pytest.mark.skipif(not (SHARED / "cifar10_jpeg.zip").is_file(), reason="../shared/data/cifar10n not present")
def test_cifar10n_reader_label_sets_and_multilabel_view():
    cfg = DataConfig(source="cifar10n", path=str(SHARED), label_set="worse")
    train, test = build_split(cfg, "train"), build_split(cfg, "test")
    assert len(train) == 50_000 and len(test) == 10_000 and train.class_names == test.class_names
    assert "40.2" in train.description  # the published worse-label noise rate
    img, y = test[0]
    assert img.size == (32, 32) and test.class_names[y] == "airplane"
    multi = build_split(DataConfig(source="cifar10n", path=str(SHARED), multilabel=True), "train")
    assert multi.multilabel and all(1 <= len(multi.labels[i]) <= 3 for i in range(100))
    with pytest.raises(ValueError, match="unknown cifar10n label_set"):
        build_split(DataConfig(source="cifar10n", path=str(SHARED), label_set="worst"), "train")


def test_manifest_class_names_are_checked_as_classes_txt_is_read(tmp_path):
    """Audit 11 (A11-12): classes.txt naming a class twice was refused only after training, without naming the file;
    a blank line between names was skipped, shifting the later names."""
    for name in "abc":
        Image.new("RGB", (4, 4)).save(tmp_path / f"{name}.png")
    (tmp_path / "train.jsonl").write_text('{"path": "a.png", "labels": [0]}\n{"path": "b.png", "labels": [2]}\n')
    cfg = DataConfig(source="manifest", path=str(tmp_path))
    names = tmp_path / "classes.txt"
    names.write_text(" x\ny \nz\n\n\n")  # spaces around a name and blank lines at the end: fine
    assert build_split(cfg, "train").class_names == ["x", "y", "z"]
    for text, match in [
        ("x\ny\nx\n", r"classes\.txt: class name 'x' is on line 1 \(class 0\) and line 3 \(class 2\).*rename one"),
        ("x\n\nz\n", r"classes\.txt line 2 is empty, between class names.*write the name of class 1 there"),
        ("x\ny\n", r"train\.jsonl line 2 holds label id 2, and .*classes\.txt names 2 classes \(ids 0 to 1\): add"),
    ]:
        names.write_text(text)
        with pytest.raises(ValueError, match=match):
            build_split(cfg, "train")
    names.write_bytes(b"x\n\xff\n")
    with pytest.raises(ValueError, match=r"classes\.txt is not UTF-8 text"):
        build_split(cfg, "train")
    names.write_text("x\ny\nz\n")
    with pytest.raises(
        ValueError, match=r"data\.num_classes=4, and .*classes\.txt names 3 classes.*data\.num_classes=null"
    ):
        build_split(DataConfig(source="manifest", path=str(tmp_path), num_classes=4), "train")


@pytest.mark.parametrize("warning", [False, True])
def test_an_image_above_pils_pixel_limit_is_named_with_the_fix(tmp_path, monkeypatch, warning):
    """Audit 11 (A11-13): PIL's DecompressionBombError (and its warning, made an error) ended in a traceback."""
    import warnings

    from harness.data.dataset import FileImages, ImageDataset

    Image.new("L", (40, 40)).save(tmp_path / "big.png")
    ds = ImageDataset(FileImages([str(tmp_path / "big.png")]), np.zeros(1, dtype=np.int64), ["a"], "a test split")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000 if warning else 500)  # 1,600 px: above 1,000; above 2 x 500
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        with pytest.raises(
            ValueError,
            match=r"cannot read image '.*big\.png' of a test split \(DecompressionBomb.*1600 "
            r"pixels.*\): PIL refuses an image this large .*shrink the image .*or remove that file",
        ):
            ds.check_images()
