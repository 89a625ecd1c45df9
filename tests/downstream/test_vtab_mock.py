"""Issue acceptance: every one of the 19 VTAB-1k tasks fine-tuned from a tiny upstream checkpoint through
TFDS mock data (the real feature schemas, label transforms applied, splits sliced as the registry
says), producing the VTAB table; and the same through the folder format written here."""

import json
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from harness.downstream.config import SweepSettings
from harness.downstream.sweep import sweep
from harness.models import build_model, save_model
from harness.tasks.catalogue import TASKS
from harness.tasks.readers import tfds_split

tfds = pytest.importorskip("tensorflow_datasets")
MOCK_FULL = 50  # size of an unsliced mock split (the real test splits are far larger)
TINY = dict(lrs=[0.05], steps=[2], seeds=1, batch_size=32, micro_batch=32, resolution=[32, 32])


def _slice_length(expr: str) -> int:
    """Length of a TFDS split expression over mock splits of MOCK_FULL examples, honouring absolute
    slices (train[:800] -> 800, train[63000:63200] -> 200) and percentages."""
    m = re.fullmatch(r"\w+(?:\[(-?\d*)(%?):(-?\d*)(%?)\])?", expr)
    assert m, expr
    lo, lo_pct, hi, hi_pct = m.groups()
    if lo is None:
        return MOCK_FULL
    if lo_pct or hi_pct:
        a = int(lo or 0) * MOCK_FULL // 100
        b = int(hi) * MOCK_FULL // 100 if hi else MOCK_FULL
        return b - a
    if hi:
        return int(hi) - int(lo or 0)
    return MOCK_FULL


class _FakeSource:
    def __init__(self, features, n, seed):
        from tensorflow_datasets.testing.mocking import RandomFakeGenerator

        self.gen = RandomFakeGenerator(features, n, constant_dynamic_shape=True, seed=seed)
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.gen[i]


@pytest.fixture
def mock_tfds():
    requested = []

    def as_data_source(builder, split, decoders=None, deserialize_method=None, **kwargs):
        requested.append((builder.name, split))
        return _FakeSource(builder.info.features, _slice_length(split), seed=len(requested))

    with tfds.testing.mock_data(policy=tfds.testing.MockPolicy.USE_CODE, as_data_source_fn=as_data_source):
        yield requested


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    model = build_model(
        dict(backbone="test_resnet", num_classes=10, head=dict(covariance="parameter_efficient", num_factors=2))
    )
    return str(save_model(model, tmp_path_factory.mktemp("up") / "model.pt"))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:TFDS has no version oxford_iiit_pet")  # recorded: see the test below
def test_every_task_through_tfds_mock_data(mock_tfds, upstream, tmp_path):
    result = sweep(
        upstream, ["vtab1k"], tmp_path, SweepSettings(**TINY, check_test_size=False), progress=lambda s: None
    )
    assert len(result["tasks"]) == 19 and result["vtab1k_score"] is not None
    assert set(result["groups"]) == {"natural", "specialized", "structured"}
    assert result["vtab1k_score"] == pytest.approx(np.mean([v["mean"] for v in result["tasks"].values()]))
    for task in TASKS.values():  # the registry's slices were the ones read
        for split in ("train800", "val200", "test"):
            for expr in task.split(split):
                assert (task.tfds.split(":")[0].split("/")[0], expr) in mock_tfds, (task.name, expr)
        assert (tmp_path / "predictions" / f"{task.name}_seed0.npz").is_file()
    assert "VTAB-1k score (19-task mean)" in (tmp_path / "vtab.md").read_text()


def test_label_transforms_are_applied_to_mock_examples(mock_tfds):
    clevr = tfds_split(TASKS["clevr_count"], "val200", None)
    assert set(clevr.labels.tolist()) == {7}  # the fake scenes hold 10 objects each -> 10 - 3
    dspr = tfds_split(TASKS["dsprites_ori"], "val200", None)
    assert dspr.labels.max() < 16 and dspr[0][0].mode == "RGB"
    with pytest.raises(ValueError, match="VTAB-1k expects"):
        tfds_split(TASKS["dtd"], "test", None)  # the mock test split has 50 examples, not 1,880


def test_folder_format_tasks_written_here(upstream, tmp_path):
    root = tmp_path / "vtab-1k"
    rng = np.random.default_rng(0)
    tasks = {"dtd": 47, "kitti": 4}  # "kitti" is the folder name of kitti_dist
    for folder, k in tasks.items():
        (root / folder / "images").mkdir(parents=True)
        images = [Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)) for _ in range(4)]
        for split in ("train800", "val200", "test"):  # each split its own copies: no test image is trained on
            for i, image in enumerate(images):
                image.save(root / folder / "images" / f"{split}_{i}.png")
        sizes = {"train800": 800, "val200": 200, "test": 60}
        # line i: images/<split>_<i>.png, a copy of image i % 4 (a file of its own: a list names each image once)
        lines = {s: [f"images/{s}_{i}.png {rng.integers(0, k)}\n" for i in range(n)] for s, n in sizes.items()}
        for s, n in sizes.items():
            for i in range(4, n):
                shutil.copyfile(
                    root / folder / "images" / f"{s}_{i % 4}.png", root / folder / "images" / f"{s}_{i}.png"
                )
        lines["train800val200"] = lines["train800"] + lines["val200"]  # VTAB-1k's union, one label an image
        for split, listed in lines.items():
            (root / folder / f"{split}.txt").write_text("".join(listed))
    settings = SweepSettings(**TINY, data_format="folder", data_dir=str(root), check_test_size=False)
    result = sweep(upstream, ["dtd", "kitti_dist"], tmp_path / "out", settings, progress=lambda s: None)
    assert set(result["tasks"]) == {"dtd", "kitti_dist"} and result["vtab1k_score"] is None


def test_the_tfds_version_read_is_recorded_in_runs_and_tables(mock_tfds, upstream, tmp_path):
    with pytest.warns(UserWarning, match=r"no version oxford_iiit_pet:3\.\*\.\*"):
        result = sweep(
            upstream,
            ["pets", "kitti_dist", "dtd"],
            tmp_path,
            SweepSettings(**TINY, check_test_size=False),
            progress=lambda s: None,
        )
    read = {t: {(d["name"], d["version"], d["fallback"]) for d in v["data"]} for t, v in result["tasks"].items()}
    assert read == {
        "oxford_iiit_pet": {("oxford_iiit_pet", "4.0.0", True)},  # the installed TFDS has no 3.x
        "kitti_dist": {("kitti", "3.2.0", False)},  # pinned exactly: not 3.3.0
        "dtd": {("dtd", "3.0.1", False)},
    }
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert {(r["task"], d["version"]) for r in records for d in r["data"]} == {
        ("oxford_iiit_pet", "4.0.0"),
        ("kitti_dist", "3.2.0"),
        ("dtd", "3.0.1"),
    }
    assert json.loads((tmp_path / "vtab.json").read_text())["tasks"]["kitti_dist"]["data"][0]["pinned"] == "kitti:3.2.0"
    md = (tmp_path / "vtab.md").read_text()
    assert "TFDS oxford_iiit_pet 4.0.0 (pinned oxford_iiit_pet:3.*.* not available)" in md
    assert "| TFDS kitti 3.2.0 |" in md and "| TFDS dtd 3.0.1 |" in md
