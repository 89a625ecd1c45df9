"""VTAB-1k readers: the PEFT folder format and TFDS (mock data with the real schemas)."""

import shutil

import numpy as np
import pytest
from PIL import Image

from harness.tasks.catalogue import get_task
from harness.tasks.folder_format import check_disjoint, check_split, folder_split
from harness.tasks.readers import tfds_split


def _write_task(root, folder, sizes, num_classes=47):
    """A folder-format task in ``root/folder``: one 8x8 JPEG ``images/a.jpg`` and, for each split of ``sizes`` (split ->
    lines), a list whose line ``i`` is ``images/<split>_<i>.jpg`` (a hard link to a.jpg: a file of its own name, since a
    list names each image once) with a random label; train800val200 lists the lines of train800 then of val200 (VTAB-1k's
    union, one label an image), then images of its own if it is longer."""
    rng = np.random.default_rng(0)
    images = root / folder / "images"
    images.mkdir(parents=True)
    Image.new("RGB", (8, 8), (10, 20, 30)).save(images / "a.jpg")
    written = {}
    for split in sorted(sizes, key=lambda s: s == "train800val200"):  # train800val200 last: it repeats the others
        n = sizes[split]
        lines = (written.get("train800", []) + written.get("val200", []))[:n] if split == "train800val200" else []
        lines += [f"images/{split}_{i}.jpg {rng.integers(0, num_classes)}" for i in range(len(lines), n)]
        for line in lines:
            if not (root / folder / line.split()[0]).exists():
                shutil.copyfile(images / "a.jpg", root / folder / line.split()[0])
        written[split] = lines
        (root / folder / f"{split}.txt").write_text("\n".join(lines) + "\n")


def _own(n, label=0):
    """``n`` lines ``images/val200_<i>.jpg <label>``: distinct images of :func:`_write_task`'s val200 (a list names each
    image once), so a bad line added after them is what a test triggers."""
    return "".join(f"images/val200_{i}.jpg {label}\n" for i in range(n))


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
    (tmp_path / "dtd" / "val200.txt").write_text(
        "".join(f"images/val200_{i}.jpg {3 if i < 150 else 99}\n" for i in range(200))
    )
    with pytest.raises(
        ValueError,
        match=r"val200.txt line 151: label 99; labels must lie in \[0, 47\) .* not a dtd "
        "split: regenerate it",
    ):
        folder_split(task, "val200", tmp_path)
    (tmp_path / "dtd" / "val200.txt").write_text("images/a.jpg\n")
    with pytest.raises(ValueError, match="expected 'relative/path label'"):
        folder_split(task, "val200", tmp_path)


def test_a_line_is_exactly_path_and_label(tmp_path):
    _write_task(tmp_path, "dtd", {"val200": 200})
    listing = tmp_path / "dtd" / "val200.txt"
    listing.write_text(_own(199, 1) + "images/my photo.jpg 1\n")  # a space is an extra column
    with pytest.raises(ValueError, match="line 200: expected 'relative/path label' \\(2 columns\\), got 3"):
        folder_split(get_task("dtd"), "val200", tmp_path)
    listing.write_text(_own(199, 1) + "images/val200_199.jpg one\n")
    with pytest.raises(ValueError, match="line 200: label 'one' is not an integer"):
        folder_split(get_task("dtd"), "val200", tmp_path)


@pytest.mark.parametrize("path", ["../secret.png", "images/../../secret.png", "/etc/passwd"])
def test_list_paths_stay_in_the_task_folder_unless_allowed(tmp_path, path):
    _write_task(tmp_path, "dtd", {"val200": 200})
    Image.new("RGB", (8, 8)).save(tmp_path / "secret.png")
    (tmp_path / "dtd" / "val200.txt").write_text(_own(199) + f"{path} 0\n")
    with pytest.raises(ValueError, match=f"line 200: path '{path}' leaves the task folder .*--allow-outside-paths"):
        folder_split(get_task("dtd"), "val200", tmp_path)
    ds = folder_split(get_task("dtd"), "val200", tmp_path, allow_outside=True)
    assert ds.load_image.paths[-1] == str(tmp_path / "dtd" / path)
    if path != "/etc/passwd":
        assert ds[199][0].size == (8, 8)  # read, since the user allowed it
    (tmp_path / "dtd" / "val200.txt").write_text(
        "".join(f"images/./val200_{2 * i}.jpg 0\n./images/val200_{2 * i + 1}.jpg 0\n" for i in range(100))
    )
    assert folder_split(get_task("dtd"), "val200", tmp_path)[1][0].size == (8, 8)  # inside: fine


def test_corrupt_and_missing_images_are_named(tmp_path):
    _write_task(tmp_path, "dtd", {"val200": 200})
    listing = tmp_path / "dtd" / "val200.txt"
    good = (tmp_path / "dtd" / "images" / "a.jpg").read_bytes()
    (tmp_path / "dtd" / "images" / "cut.jpg").write_bytes(good[: len(good) // 2])  # truncated JPEG
    (tmp_path / "dtd" / "images" / "text.png").write_text("not an image")
    for bad in ("cut.jpg", "text.png"):
        listing.write_text(_own(199) + f"images/{bad} 0\n")
        ds = folder_split(get_task("dtd"), "val200", tmp_path)
        with pytest.raises(
            ValueError, match=f"images/{bad} \\(listed in .*val200.txt line 200\\)' .*replace or remove that file"
        ):
            ds[199]
        with pytest.raises(ValueError, match=f"images/{bad} \\(listed in .*val200.txt line 200"):
            check_split(ds)  # the sample includes the last image
    listing.write_text(_own(198) + "images/gone.jpg 0\nimages/gone2.jpg 1\n")
    with pytest.raises(
        FileNotFoundError,
        match="2 of 200 images listed in .*val200.txt do not exist: .*gone.jpg \\(listed in .* line 199\\)",
    ):
        check_split(folder_split(get_task("dtd"), "val200", tmp_path))


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


def test_tfds_version_actually_read_is_recorded_and_a_missing_pin_warned():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE):
        dtd = tfds_split(get_task("dtd"), "val200", None, validate=False)
        assert dtd.source["name"] == "dtd" and dtd.source["version"] == "3.0.1" and not dtd.source["fallback"]
        # installed TFDS has only oxford_iiit_pet 4.0.0: read it, but say so and record it
        with pytest.warns(
            UserWarning,
            match=r"no version oxford_iiit_pet:3\.\*\.\* .* reading oxford_iiit_pet "
            r"4\.0\.0",
        ):
            pets = tfds_split(get_task("pets"), "val200", None, validate=False)
        assert pets.source["version"] == "4.0.0" and pets.source["fallback"]
        assert pets.source["pinned"] == "oxford_iiit_pet:3.*.*"


def test_tfds_read_errors_are_not_retried_as_another_version(monkeypatch):
    tfds = pytest.importorskip("tensorflow_datasets")

    calls = []

    def flaky(builder, split, **kwargs):  # the pinned version's files cannot be read
        calls.append(str(builder.version))
        raise OSError("array_record shard is unreadable")

    with tfds.testing.mock_data(num_examples=3, policy=tfds.testing.MockPolicy.USE_CODE, as_data_source_fn=flaky):
        with pytest.raises(FileNotFoundError, match="TFDS dtd:3.*.* for task dtd .*OSError: array_record shard"):
            tfds_split(get_task("dtd"), "val200", None)
    assert calls == ["3.0.1"]  # one attempt at the pinned version, no silent retry


def _listed_task(root, lists, allow_outside=False):
    """A custom 2-class task in ``root`` whose split lists are ``lists`` (split -> image names under img/, each with
    label ``i % 2`` by its line, or a ``(name, label)`` pair; a split given None is neither written nor read)."""
    from harness.tasks.taskset import custom_task

    lists = {split: names for split, names in lists.items() if names is not None}
    (root / "img").mkdir(parents=True, exist_ok=True)
    for split, names in lists.items():
        named = [n if isinstance(n, tuple) else (n, i % 2) for i, n in enumerate(names)]
        for name, _ in named:
            if not (root / "img" / name).exists():
                Image.new("RGB", (4, 4)).save(root / "img" / name)
        (root / f"{split}.txt").write_text("".join(f"img/{n} {y}\n" for n, y in named))
    task = custom_task(f"ct={root}:2")
    return {
        split: folder_split(task, split, root.parent, validate=False, folder=root, allow_outside=allow_outside)
        for split in lists
    }


def test_held_out_splits_share_no_image_with_those_trained_on(tmp_path):
    apart = {"train800": ["a.png", "b.png"], "val200": ["c.png"], "train800val200": ["a.png", "b.png", "c.png"]}
    check_disjoint(_listed_task(tmp_path / "ok", {**apart, "test": ["d.png", "e.png"]}))  # VTAB-1k's layout
    cases = [
        (
            {"test": ["d.png", "b.png", "a.png"]},
            r"ct/test.txt line 2 lists .*img/b.png, the image .*ct/train800val200.txt line 2 lists \(2 of the 3 lines "
            r"of test.txt list images of train800val200.txt\): the test split is scored.*list each image in only one "
            r"of test.txt and train800val200.txt",
        ),
        (
            {"train800val200": None, "test": ["c.png"]},
            r"test.txt line 1 lists .*c.png, .*val200.txt line 1 lists \(1 of the 1 lines of test.txt list images of "
            r"val200.txt\)",
        ),  # train800val200 not read: the test split is still kept apart from val200
        (
            {
                "val200": [("b.png", 1)],
                "train800val200": ["a.png", "b.png"],
                "test": ["d.png"],
            },  # b's label in train800
            r"val200.txt line 1 lists .*b.png, the image .*train800.txt line 2 lists .*val200 scores the fine-tunes "
            r"trained on train800",
        ),
        (
            {"test": ["./d.png", ("../img/a.png", 0)]},  # a's label in train800
            r"test.txt line 2 lists .*img/\.\./img/a.png, the image .*train800val200.txt line 1",
        ),  # the same file by another path
    ]
    for i, (changed, match) in enumerate(cases):
        splits = _listed_task(tmp_path / f"c{i}" / "ct", {**apart, **changed})
        with pytest.raises(ValueError, match=match):
            check_disjoint(splits)
    (tmp_path / "c4" / "ct" / "img").mkdir(parents=True)
    (tmp_path / "c4" / "ct" / "img" / "link.png").symlink_to(tmp_path / "ok" / "img" / "a.png")
    with pytest.raises(ValueError, match=r"test.txt line 1: '.*c4/ct/img/link.png' is a link to '.*ok/img/a.png', "):
        _listed_task(tmp_path / "c4" / "ct", {**apart, "test": ["link.png"]})  # out of the task folder: refused
    test = _listed_task(tmp_path / "c4" / "ct", {**apart, "test": ["link.png"]}, allow_outside=True)["test"]
    splits = {**_listed_task(tmp_path / "ok", apart), "test": test}  # ok's trained splits (their union), c4's test
    with pytest.raises(ValueError, match=r"link.png, the image .*ok/train800val200.txt line 1 lists"):
        check_disjoint(splits)  # a symbolic link is the file it names
    union = _listed_task(tmp_path / "union" / "ct", {**apart, "train800val200": ["a.png"], "test": ["d.png"]})
    with pytest.raises(
        ValueError, match=r"train800.txt line 2 lists .*b.png, which train800val200.txt does not \(2 images differ\)"
    ):
        check_disjoint(union)  # train800val200 that is not train800 and val200 together
