"""The 19 VTAB-1k tasks: TFDS names and versions, label transforms, class counts, splits, augmentation.

The table follows google-research/task_adaptation (``task_adaptation/data/*.py``), with the TFDS
versions Visual Prompt Tuning used (Jia et al., ECCV 2022). Every task has:

- ``train800``: the first 800 examples of the train source (``train[:800]``);
- ``val200``: 200 examples of the val source (a TFDS slice; sNORB takes it from ``test``);
- ``train800val200``: both (1,000 examples), for the final fit;
- ``test``: the full test part (CLEVR uses TFDS ``validation``; EuroSAT and Resisc45 the last 20%
  of ``train``; dSprites the last 10%; sNORB the second half of ``test``).

Label transforms map a decoded TFDS example (a dict of NumPy values) to a class index.

TFDS versions: each task names a version pattern (``dtd:3.*.*``); the reader records the version
actually read. KITTI is pinned exactly to 3.2.0 (:data:`KITTI_TFDS`): task_adaptation pins 3.1.0,
which TFDS releases of 2021 could no longer generate; its maintainer states that 3.2.0 yields the
same data (google-research/task_adaptation#18) and VPT used 3.2.0. The pattern ``3.*.*`` would
also admit 3.3.0 ("added labels for the occluded feature"), whose examples are not vouched for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

GROUPS = ("natural", "specialized", "structured")
SPLITS = ("train800", "val200", "train800val200", "test")
SPLIT_SIZES = {"train800": 800, "val200": 200, "train800val200": 1000}


def _field(key: str) -> Callable[[Mapping], int]:
    def label(example: Mapping) -> int:
        return int(example[key])

    label.__doc__ = f"``example[{key!r}]`` as is."
    return label


def clevr_count(example: Mapping) -> int:
    """Number of objects in the scene minus 3 (scenes hold 3 to 10 objects -> 8 classes)."""
    return len(np.asarray(example["objects"]["size"])) - 3


CLEVR_DISTANCE_EDGES = (0.0, 8.0, 8.5, 9.0, 9.5, 10.0, 100.0)


def clevr_distance(example: Mapping) -> int:
    """Depth of the closest object, d = min over objects of ``pixel_coords[:, 2]``, binned into
    (0, 8], (8, 8.5], (8.5, 9], (9, 9.5], (9.5, 10], (10, 100]: the index of the last edge
    strictly below d (task_adaptation ``clevr.py``)."""
    d = float(np.min(np.asarray(example["objects"]["pixel_coords"])[:, 2]))
    below = [i for i, e in enumerate(CLEVR_DISTANCE_EDGES) if e < d]
    if not below:
        raise ValueError(f"CLEVR closest-object depth {d} is not positive; the scene annotation is malformed")
    return below[-1]


KITTI_TFDS = "kitti:3.2.0"  # see the module docstring: same data as task_adaptation's 3.1.0
KITTI_VEHICLE_TYPES = 3  # TFDS kitti object types 0, 1, 2 = Car, Van, Truck
KITTI_DISTANCE_EDGES = (-100.0, 8.0, 20.0, 999.0)


def kitti_distance(example: Mapping) -> int:
    """Distance class of the closest vehicle (Car, Van, Truck): d = min z-location over vehicles,
    (-100, 8] -> 0, (8, 20] -> 1, (20, 999] -> 2, no vehicle (d = 1000) -> 3
    (task_adaptation ``kitti.py``, ``closest_vehicle_distance``)."""
    objects = example["objects"]
    types = np.asarray(objects["type"]).reshape(-1)
    z = np.asarray(objects["location"]).reshape(-1, 3)[:, 2]
    vehicles = z[types < KITTI_VEHICLE_TYPES]
    d = float(vehicles.min()) if vehicles.size else 1000.0
    for i, (lo, hi) in enumerate(zip(KITTI_DISTANCE_EDGES[:-1], KITTI_DISTANCE_EDGES[1:])):
        if lo < d <= hi:
            return i
    return 3


def dsprites_x_position(example: Mapping) -> int:
    """x-position (32 values) floor-divided by 32 / 16 = 2 -> 16 classes."""
    return int(np.floor(int(example["label_x_position"]) / (32 / 16)))


def dsprites_orientation(example: Mapping) -> int:
    """Orientation (40 values) floor-divided by 40 / 16 = 2.5 -> 16 classes."""
    return int(np.floor(int(example["label_orientation"]) / (40 / 16)))


@dataclass(frozen=True)
class Task:
    """One VTAB-1k task.

    Attributes:
        name: harness name (``caltech101``, ``clevr_count``, ``dsprites_loc`` ...).
        group: ``natural``, ``specialized`` or ``structured``.
        tfds: TFDS dataset name and version pattern (``clevr:3.*.*``); ``tfds_version`` the one
            VPT used.
        num_classes: K.
        label: example dict -> class index.
        val200: TFDS slice of the val200 examples.
        test: TFDS split or slice of the test part; ``test_size`` its size.
        train: train source of train800 (first 800 examples).
        flip, crop: whether random horizontal flips / random crops are allowed (off where they
            change the label: positions, orientations, counts, distances, digits).
        aliases: other names for the task (PEFT folder names, VTAB names).
    """

    name: str
    group: str
    tfds: str
    tfds_version: str
    num_classes: int
    label: Callable[[Mapping], int]
    val200: str
    test: str
    test_size: Optional[int]
    train: str = "train"
    flip: bool = True
    crop: bool = True
    aliases: Sequence[str] = ()

    def split(self, name: str) -> "list[str]":
        """TFDS split expressions that make up ``name`` (one of :data:`SPLITS`), concatenated in order.

        Raises:
            ValueError: unknown split name.
        """
        if name not in SPLITS:
            raise ValueError(f"unknown VTAB-1k split {name!r}: use one of {', '.join(SPLITS)}")
        train800 = f"{self.train}[:800]"
        return {
            "train800": [train800],
            "val200": [self.val200],
            "train800val200": [train800, self.val200],
            "test": [self.test],
        }[name]

    def expected_size(self, name: str) -> Optional[int]:
        """800 / 200 / 1000 / the test size (None where unverified)."""
        return SPLIT_SIZES.get(name, self.test_size if name == "test" else None)


def _t(name, group, tfds, version, k, val200, test, test_size, label="label", **kw) -> Task:
    fn = label if callable(label) else _field(label)
    return Task(name, group, tfds, version, k, fn, val200, test, test_size, **kw)


TASKS: "dict[str, Task]" = {
    t.name: t
    for t in [
        _t("caltech101", "natural", "caltech101:3.*.*", "3.0.1", 102, "train[2754:2954]", "test", 6084),
        _t(
            "cifar100",
            "natural",
            "cifar100:3.*.*",
            "3.0.2",
            100,
            "train[45000:45200]",
            "test",
            10000,
            aliases=("cifar", "cifar-100"),
        ),
        _t("dtd", "natural", "dtd:3.*.*", "3.0.1", 47, "validation[:200]", "test", 1880),
        _t(
            "oxford_flowers102",
            "natural",
            "oxford_flowers102:2.*.*",
            "2.1.1",
            102,
            "validation[:200]",
            "test",
            6149,
            aliases=("flowers102", "flowers"),
        ),
        _t(
            "oxford_iiit_pet",
            "natural",
            "oxford_iiit_pet:3.*.*",
            "3.2.0",
            37,
            "train[2944:3144]",
            "test",
            3669,
            aliases=("pets", "oxford_pet"),
        ),
        _t("sun397", "natural", "sun397/tfds:4.*.*", "4.0.0", 397, "validation[:200]", "test", 21750),
        _t(
            "svhn",
            "natural",
            "svhn_cropped:3.*.*",
            "3.0.0",
            10,
            "train[65931:66131]",
            "test",
            26032,
            flip=False,
            aliases=("svhn_cropped",),
        ),
        _t(
            "patch_camelyon",
            "specialized",
            "patch_camelyon:2.*.*",
            "2.0.0",
            2,
            "validation[:200]",
            "test",
            32768,
            aliases=("camelyon", "pcam"),
        ),
        _t("eurosat", "specialized", "eurosat/rgb:2.*.*", "2.0.0", 10, "train[16200:16400]", "train[21600:]", 5400),
        _t("resisc45", "specialized", "resisc45:3.*.*", "3.0.0", 45, "train[18900:19100]", "train[25200:]", 6300),
        _t(
            "diabetic_retinopathy",
            "specialized",
            "diabetic_retinopathy_detection/btgraham-300:3.*.*",
            "3.0.0",
            5,
            "validation[:200]",
            "test",
            42670,
            aliases=("retinopathy", "diabetic_retinopathy_detection"),
        ),
        _t(
            "clevr_count",
            "structured",
            "clevr:3.*.*",
            "3.1.0",
            8,
            "train[63000:63200]",
            "validation",
            15000,
            label=clevr_count,
            crop=False,
            aliases=("clevr_count_all", "clevr(task=count_all)"),
        ),
        _t(
            "clevr_dist",
            "structured",
            "clevr:3.*.*",
            "3.1.0",
            6,
            "train[63000:63200]",
            "validation",
            15000,
            label=clevr_distance,
            crop=False,
            aliases=("clevr_closest_object_distance",),
        ),
        _t("dmlab", "structured", "dmlab:2.0.1", "2.0.1", 6, "validation[:200]", "test", 22735),
        _t(
            "kitti_dist",
            "structured",
            KITTI_TFDS,
            "3.2.0",
            4,
            "validation[:200]",
            "test",
            711,
            label=kitti_distance,
            crop=False,
            aliases=("kitti", "kitti_closest_vehicle_distance"),
        ),
        _t(
            "dsprites_loc",
            "structured",
            "dsprites:2.*.*",
            "2.0.0",
            16,
            "train[589824:590024]",
            "train[663552:]",
            73728,
            label=dsprites_x_position,
            flip=False,
            crop=False,
            aliases=("dsprites_location", "dsprites_xpos"),
        ),
        _t(
            "dsprites_ori",
            "structured",
            "dsprites:2.*.*",
            "2.0.0",
            16,
            "train[589824:590024]",
            "train[663552:]",
            73728,
            label=dsprites_orientation,
            flip=False,
            crop=False,
            aliases=("dsprites_orientation",),
        ),
        _t(
            "smallnorb_azi",
            "structured",
            "smallnorb:2.*.*",
            "2.0.0",
            18,
            "test[:200]",
            "test[50%:]",
            12150,
            label="label_azimuth",
            flip=False,
            aliases=("smallnorb_azimuth", "snorb_azim"),
        ),
        _t(
            "smallnorb_ele",
            "structured",
            "smallnorb:2.*.*",
            "2.0.0",
            9,
            "test[:200]",
            "test[50%:]",
            12150,
            label="label_elevation",
            aliases=("smallnorb_elevation", "snorb_elev"),
        ),
    ]
}

_ALIASES = {a.lower(): t.name for t in TASKS.values() for a in (t.name, *t.aliases)}


def get_task(name: str) -> Task:
    """Task by name or alias (case-insensitive).

    Raises:
        ValueError: unknown name (the message lists the tasks).
    """
    key = _ALIASES.get(name.lower())
    if key is None:
        raise ValueError(
            f"unknown VTAB-1k task {name!r}: use one of {', '.join(TASKS)} (or natural, specialized, "
            "structured, vtab1k)"
        )
    return TASKS[key]


def resolve_tasks(names: Sequence[str]) -> "list[Task]":
    """Expand ``vtab1k`` (all 19), group names and task names/aliases, in table order, without repeats."""
    chosen: "list[str]" = []
    for n in names:
        low = n.lower()
        if low in ("vtab1k", "vtab", "all"):
            picks = list(TASKS)
        elif low in GROUPS:
            picks = [t.name for t in TASKS.values() if t.group == low]
        else:
            picks = [get_task(n).name]
        chosen += [p for p in picks if p not in chosen]
    return [TASKS[c] for c in chosen]
