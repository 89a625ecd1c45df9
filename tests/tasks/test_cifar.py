"""``harness data tasks-cifar`` (:mod:`harness.tasks.cifar`): CIFAR transfer tasks in the VTAB-1k folder format.

The tasks are built from a small synthetic stand-in of the cifar10n folder, made once per module:

- ``cifar10n_labels.npz`` has the real keys and is 50,000 labels long, because the val5k / train45k split is the
  project's own :func:`harness.data.sources.cifar10n_rows`, which permutes exactly 50,000 training rows;
- ``cifar10_jpeg.zip`` holds the same member layout (``train/<class>/NNNNN.jpg``, ``test/<class>/NNNN.jpg``) but
  only the 5,000 val5k training images and 300 test images. The 45,000 train45k rows name members that are NOT
  in the zip, so a builder that read any train45k image would fail with a missing member;
- every image is one flat colour that encodes where it came from (training index or test index), so the test can
  check that the PNG written for an example is the image its ``sources.json`` names.

The builder runs with ``sizes=(40, 10)`` and ``test_size=40`` (the real build is 800/200/2000) to stay fast.
"""

import functools
import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from harness.cli import main
from harness.data.sources import cifar10n_rows
from harness.tasks.cifar import CIFAR_TASKS, build_cifar_tasks
from harness.tasks.folder_format import check_disjoint, check_split, folder_split
from harness.tasks.taskset import custom_task

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
TEST_PER_CLASS = 30
SIZES, TEST_SIZE = (40, 10), 40
SPLITS = ("train800", "val200", "train800val200", "test")


def _colour(split: str, index: int) -> "tuple[int, int, int]":
    """The flat colour of a synthetic image: training index or test index in R/G, the part in B."""
    return index % 256, index // 256, 40 if split == "train" else 200


def _jpeg(colour) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 32), colour).save(buf, format="JPEG", quality=100)
    return buf.getvalue()


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cifar10n")
    labels = np.arange(50_000) % 10
    paths = np.array([f"train/{CLASSES[y]}/{i:05d}.jpg" for i, y in enumerate(labels)])
    np.savez(
        root / "cifar10n_labels.npz",
        clean_label=labels,
        aggre_label=labels,
        worse_label=labels,
        random_label1=labels,
        random_label2=labels,
        random_label3=labels,
        train_path=paths,
        classes=np.array(CLASSES),
    )
    with zipfile.ZipFile(root / "cifar10_jpeg.zip", "w", zipfile.ZIP_STORED) as z:
        for i in cifar10n_rows("val5k"):  # train45k members are absent on purpose
            z.writestr(str(paths[i]), _jpeg(_colour("train", int(i))))
        # the reader sorts the test members by name: with these names the sorted position is c * 30 + k
        for c, name in enumerate(CLASSES):
            for k in range(TEST_PER_CLASS):
                z.writestr(f"test/{name}/{k:04d}.jpg", _jpeg(_colour("test", c * TEST_PER_CLASS + k)))
    return root


@pytest.fixture(scope="module")
def built(data, tmp_path_factory) -> "tuple[Path, dict]":
    out = tmp_path_factory.mktemp("tasks") / "out"
    lines = []
    summary = build_cifar_tasks(data, out, seed=0, test_size=TEST_SIZE, progress=lines.append, sizes=SIZES)
    assert any("tasks-cifar" in line and "images in" in line for line in lines)  # progress with counts
    return out, summary


def _lists(folder: Path) -> dict:
    return {s: [line.split() for line in (folder / f"{s}.txt").read_text().splitlines()] for s in SPLITS}


def test_summary_lists_the_groups_and_sizes(built):
    out, summary = built
    assert summary["groups"] == {
        "natural": ["cifar10"],
        "structured": ["cifar_rotation", "cifar_location", "cifar_count"],
        "ood": ["demo_digit", "demo_rotation", "demo_position", "demo_count"],
    }
    assert sum(len(v) for v in summary["groups"].values()) >= 7
    for task, (group, k, _, _) in CIFAR_TASKS.items():
        info = summary["tasks"][task]
        assert info["group"] == group and info["num_classes"] == k
        assert info["sizes"] == {"train800": 40, "val200": 10, "test": 40, "train800val200": 50}
    assert json.loads((out / "cifar_tasks.json").read_text()) == summary


@pytest.mark.parametrize("task", list(CIFAR_TASKS))
def test_task_lists_are_disjoint_in_range_and_from_val5k_only(built, task):
    out, summary = built
    folder, k = out / task, CIFAR_TASKS[task][1]
    lists = _lists(folder)
    assert [len(lists[s]) for s in SPLITS] == [40, 10, 50, 40]
    assert lists["train800val200"] == lists["train800"] + lists["val200"]
    paths = {s: {p for p, _ in rows} for s, rows in lists.items()}
    assert not paths["train800"] & paths["val200"] and not paths["train800val200"] & paths["test"]
    for rows in lists.values():
        assert all(0 <= int(y) < k for _, y in rows)
        assert all((folder / p).is_file() for p, _ in rows)
    sources = json.loads((folder / "sources.json").read_text())["images"]
    val5k, train45k = set(cifar10n_rows("val5k").tolist()), set(cifar10n_rows("train45k").tolist())
    train_used = [i for p in paths["train800val200"] for i in sources[p]["index"]]
    assert all(sources[p]["split"] == "train" for p in paths["train800val200"])
    assert set(train_used) <= val5k and not set(train_used) & train45k
    assert all(sources[p]["split"] == "test" for p in paths["test"])
    test_used = [i for p in paths["test"] for i in sources[p]["index"]]
    assert len(set(train_used)) == len(train_used) and len(set(test_used)) == len(test_used)  # no image twice
    train_members = {m for p in paths["train800val200"] for m in sources[p]["member"]}
    assert all(m.startswith("train/") for m in train_members)
    assert not train_members & {m for p in paths["test"] for m in sources[p]["member"]}


def test_labels_pixels_and_sources_agree(built):
    out, _ = built
    folder = out / "cifar10"
    sources = json.loads((folder / "sources.json").read_text())["images"]
    for split in SPLITS:
        for rel, y in _lists(folder)[split]:
            src = sources[rel]
            img = np.asarray(Image.open(folder / rel))
            assert img.shape == (32, 32, 3)
            assert np.abs(img.astype(int) - _colour(src["split"], src["index"][0])).max() <= 3
            clean = src["index"][0] % 10 if src["split"] == "train" else src["index"][0] // TEST_PER_CLASS
            assert int(y) == clean  # the clean label
    test_labels = [int(y) for _, y in _lists(folder)["test"]]
    assert np.bincount(test_labels, minlength=10).tolist() == [4] * 10  # class-balanced test sample
    shapes = {"cifar_rotation": (32, 32, 3), "cifar_location": (96, 96, 3), "cifar_count": (128, 128, 3)}
    for task, shape in shapes.items():
        rows = _lists(out / task)["train800"]
        assert np.asarray(Image.open(out / task / rows[0][0])).shape == shape
    sources = json.loads((out / "cifar_count" / "sources.json").read_text())["images"]
    assert all(len(sources[p]["index"]) == int(y) + 1 for p, y in _lists(out / "cifar_count")["test"])


@pytest.mark.parametrize("task", list(CIFAR_TASKS))
def test_folders_load_with_the_project_reader(built, task):
    out, summary = built
    t = custom_task(summary["tasks"][task]["spec"])
    assert (t.num_classes, t.flip, t.crop) == CIFAR_TASKS[task][1:]
    read = {}
    for split in SPLITS:
        ds = read[split] = folder_split(t, split, out, validate=False, folder=out / task)
        check_split(ds)
        img, y = ds[len(ds) - 1]
        assert img.mode == "RGB" and 0 <= y < t.num_classes
    check_disjoint(read)  # what tasks-cifar writes passes the sweep's check: no held-out image is trained on


def _digest(folder: Path) -> dict:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "cifar_tasks.json"
    }


def test_same_seed_same_files_other_seed_other_lists(built, data, tmp_path):
    out, _ = built
    build_cifar_tasks(data, tmp_path / "again", seed=0, test_size=TEST_SIZE, progress=None, sizes=SIZES)
    mine, again = _digest(out), _digest(tmp_path / "again")
    assert mine == again and any(k.endswith("train800.txt") for k in mine)  # lists, PNGs and sources.json
    build_cifar_tasks(data, tmp_path / "other", seed=1, test_size=TEST_SIZE, progress=None, sizes=SIZES)
    other = (tmp_path / "other" / "cifar10" / "train800.txt").read_text()
    assert other != (out / "cifar10" / "train800.txt").read_text()


def test_refuses_to_write_over_task_folders_and_bad_sizes(built, data, tmp_path):
    out, _ = built
    before = _digest(out)
    with pytest.raises(ValueError, match=r"already holds .*cifar10.*pass a new --out folder, or delete"):
        build_cifar_tasks(data, out, test_size=TEST_SIZE, progress=None, sizes=SIZES)
    assert _digest(out) == before
    (tmp_path / "x" / "cifar_count").mkdir(parents=True)
    (tmp_path / "x" / "cifar_count" / "mine.txt").write_text("not the builder's")
    with pytest.raises(ValueError, match="cifar_count"):
        build_cifar_tasks(data, tmp_path / "x", test_size=TEST_SIZE, progress=None, sizes=SIZES)
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["cifar_count"]  # nothing written
    with pytest.raises(ValueError, match="test_size 76 must lie in"):
        build_cifar_tasks(data, tmp_path / "y", test_size=76, progress=None, sizes=SIZES)
    with pytest.raises(FileNotFoundError, match="cifar10_jpeg.zip"):
        build_cifar_tasks(tmp_path, tmp_path / "z", progress=None, sizes=SIZES)


def test_cli_builds_the_tasks_and_reports_errors(data, tmp_path, monkeypatch):
    import harness.tasks.cifar as module

    monkeypatch.setattr(module, "build_cifar_tasks", functools.partial(module.build_cifar_tasks, sizes=(8, 2)))
    args = ["data", "tasks-cifar", "--data", str(data), "--out", str(tmp_path / "out"), "--test-size", "12"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "cifar_count=" in res.output and ":4:no-crop" in res.output and "demo_count" in res.output
    assert len((tmp_path / "out" / "cifar_location" / "test.txt").read_text().splitlines()) == 12
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1 and "already holds" in res.output and "Traceback" not in res.output
