"""The VTAB-1k task registry and its label transforms (hand-made examples with known attributes)."""

import numpy as np
import pytest

from harness.tasks.catalogue import (
    TASKS,
    clevr_count,
    clevr_distance,
    dsprites_orientation,
    dsprites_x_position,
    get_task,
    kitti_distance,
    resolve_tasks,
)


def test_registry_has_the_19_tasks_in_their_groups():
    assert len(TASKS) == 19
    groups = [t.group for t in TASKS.values()]
    assert (groups.count("natural"), groups.count("specialized"), groups.count("structured")) == (7, 4, 8)
    assert (
        sum(t.num_classes for t in TASKS.values())
        == 102 + 100 + 47 + 102 + 37 + 397 + 10 + 2 + 10 + 45 + 5 + 8 + 6 + 6 + 4 + 16 + 16 + 18 + 9
    )


def test_split_rules_and_special_cases():
    assert get_task("cifar100").split("train800val200") == ["train[:800]", "train[45000:45200]"]
    assert get_task("clevr_count").split("test") == ["validation"]
    assert get_task("smallnorb_azi").split("val200") == ["test[:200]"]
    assert get_task("smallnorb_ele").split("test") == ["test[50%:]"]
    assert get_task("eurosat").split("test") == ["train[21600:]"] and get_task("resisc45").test_size == 6300
    assert get_task("dsprites_loc").split("test") == ["train[663552:]"]
    assert [get_task("dtd").expected_size(s) for s in ("train800", "val200", "train800val200", "test")] == [
        800,
        200,
        1000,
        1880,
    ]
    with pytest.raises(ValueError, match="unknown VTAB-1k split"):
        get_task("dtd").split("train1000")


def test_names_aliases_and_groups():
    assert get_task("Pets").name == "oxford_iiit_pet" and get_task("kitti").name == "kitti_dist"
    assert [t.name for t in resolve_tasks(["specialized"])] == [
        "patch_camelyon",
        "eurosat",
        "resisc45",
        "diabetic_retinopathy",
    ]
    assert len(resolve_tasks(["vtab1k", "dtd"])) == 19
    with pytest.raises(ValueError, match="unknown VTAB-1k task 'imagenet'"):
        get_task("imagenet")


def test_label_preserving_augmentation_flags():
    assert not get_task("dsprites_loc").flip and not get_task("dsprites_loc").crop
    assert not get_task("clevr_count").crop and not get_task("svhn").flip
    assert get_task("cifar100").flip and get_task("cifar100").crop


def test_clevr_count_scene_of_five_objects_is_label_two():
    scene = {"objects": {"size": np.zeros(5, int), "pixel_coords": np.ones((5, 3))}}
    assert clevr_count(scene) == 2
    assert clevr_count({"objects": {"size": np.zeros(10, int)}}) == 7


@pytest.mark.parametrize(
    "depths,label",
    [
        ([12.0, 9.2, 30.0], 3),
        ([7.9], 0),
        ([8.0], 0),
        ([8.01], 1),
        ([9.5, 20.0], 3),
        ([9.51], 4),
        ([10.0], 4),
        ([55.0], 5),
    ],
)
def test_clevr_closest_object_distance_bins(depths, label):
    coords = np.array([[0.0, 0.0, d] for d in depths])
    assert clevr_distance({"objects": {"pixel_coords": coords}}) == label


def _kitti(types, zs):
    return {"objects": {"type": np.array(types), "location": np.array([[0.0, 0.0, z] for z in zs]).reshape(-1, 3)}}


@pytest.mark.parametrize(
    "types,zs,label",
    [
        ([], [], 3),  # no object at all: no vehicle
        ([3, 4], [2.0, 5.0], 3),  # pedestrians and cyclists only: no vehicle
        ([0, 3], [5.0, 1.0], 0),  # car at 5 m (a closer pedestrian does not count)
        ([1], [8.0], 0),  # van exactly at 8 m: (-100, 8]
        ([2, 0], [15.0, 30.0], 1),  # truck at 15 m
        ([0], [25.0], 2),  # car at 25 m
    ],
)
def test_kitti_closest_vehicle_distance(types, zs, label):
    assert kitti_distance(_kitti(types, zs)) == label


def test_dsprites_binning_into_16_classes():
    assert [dsprites_x_position({"label_x_position": x}) for x in (0, 1, 2, 3, 30, 31)] == [0, 0, 1, 1, 15, 15]
    assert [dsprites_orientation({"label_orientation": o}) for o in (0, 2, 3, 5, 38, 39)] == [0, 0, 1, 2, 15, 15]


def test_plain_label_fields():
    assert get_task("smallnorb_azi").label({"label_azimuth": 17, "label_elevation": 3}) == 17
    assert get_task("smallnorb_ele").label({"label_azimuth": 17, "label_elevation": 3}) == 3
    assert get_task("dtd").label({"label": np.int64(46)}) == 46


def test_demo_suite_is_labelled_deterministic_and_sized_like_vtab():
    from harness.tasks.demo import DEMO_TASKS, demo_split

    assert all(t.group == "demo" and t.name.startswith("demo_") for t in DEMO_TASKS.values())
    for task in DEMO_TASKS.values():
        sizes = {s: len(demo_split(task, s)) for s in ("train800", "val200", "train800val200", "test")}
        assert sizes == {"train800": 800, "val200": 200, "train800val200": 1000, "test": 500}
        a, b = demo_split(task, "val200"), demo_split(task, "val200")
        assert np.array_equal(a.labels, b.labels) and np.array_equal(np.asarray(a[3][0]), np.asarray(b[3][0]))
        assert set(np.unique(demo_split(task, "train800").labels)) == set(range(task.num_classes))
    count = demo_split(DEMO_TASKS["demo_count"], "test")
    img, y = count[0]
    assert img.size == (32, 32) and 0 <= y < 4
    # the count label is the number of pasted digits: non-empty 8x8 slots of the 4x4 grid
    pixels = np.asarray(img.convert("L"))
    filled = sum(pixels[8 * r : 8 * r + 8, 8 * c : 8 * c + 8].any() for r in range(4) for c in range(4))
    assert filled == y + 1
    with pytest.raises(ValueError, match="not a demo task"):
        demo_split(get_task("dtd"), "test")
