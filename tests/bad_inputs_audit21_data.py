"""Bad inputs found by the twenty-first reliability audit in the data's splits (``audit21 <case id>``): an import of a
run's model.pt scored on its run's training folder, a split that reaches the training folder by another path, and
packs compared by their folders' names rather than the source splits they hold."""

from __future__ import annotations

import os
from pathlib import Path

from bad_inputs_audit9_config import CLI_ERROR, CONFIGS

from bad_inputs import bad_input
from bad_inputs_uncertainty import _cli


def _image_folder(root: Path) -> Path:
    """``root/{train,val,test}/{a,b}/*.png``: three random 16x16 images a class and split."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "val", "test"):
        for c in "ab":
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(3):
                Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(root / split / c / f"{i}.png")
    return root


def _train(out: str, *overrides: str) -> None:
    """A one-epoch run of ``digits_hom.yaml`` (the small test backbone) with ``overrides``, into ``out``."""
    _cli(
        "upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1",
        "train.log_with=[]", "model.backbone=test_resnet", "data.label_noise.kind=none", f"output_dir={out}",
        *overrides,
    )  # fmt: skip


_IMF = (
    "data.source=image_folder", "data.path=imf", "data.train_split=train", "data.eval_split=test",
    "data.heldout_split=val", "data.batch_size=4", "data.image_size=16", "data.eval_resize=16",
)  # fmt: skip
_VIEW = "  heldout_split: null\n  image_size: 16\n  eval_resize: 16\n"


# ------------------------------------------------------------------------------ A21-04: a run's model.pt by its run's data
@bad_input(
    "import",
    "harness import --model runs/imf/model.pt (a run trained on the image folder imf's train split) --data an image "
    "folder config of imf with eval_split=train (audit21 A21-04: rc 0, top1 0.5 on the 12 images the model trained "
    "on: model.pt's trained_on records no data.path, so the rule skipped it; ensemble --eval-data refused the same)",
    CLI_ERROR,
    r"runs/imf/model\.pt was trained on the train split of image_folder at .*imf/train \(as its run's "
    r"runs/imf/config\.yaml records\): data\.eval_split=train is also data\.train_split: the model would be scored on "
    r"the images it was trained on",
)
def _import_run_model_on_its_folder(tmp):
    import pytest

    _image_folder(tmp / "imf")
    _train("runs/imf", *_IMF)
    (tmp / "ete.yaml").write_text(f"data:\n  source: image_folder\n  path: imf\n  eval_split: test\n{_VIEW}")
    _cli("import", "--model", "runs/imf/model.pt", "--data", "ete.yaml", "--out", "imp")  # its test folder: taken
    (tmp / "etr.yaml").write_text(f"data:\n  source: image_folder\n  path: .\n  eval_split: imf/train\n{_VIEW}")
    # an import of the run's model.pt is that run's model: an ensemble of it is compared with the run's data too
    _train("runs/imf1", *_IMF, "seed=1")
    with pytest.raises(CLI_ERROR, match=r"member imp was trained on the train split of image_folder .*runs/imf/conf"):
        _cli("ensemble", "-m", "imp", "-m", "runs/imf1", "--from-checkpoints", "--eval-data", "etr.yaml", "--out", "e")
    _shift_of_import(tmp)
    (tmp / "etr.yaml").write_text(f"data:\n  source: image_folder\n  path: imf\n  eval_split: train\n{_VIEW}")
    _cli("import", "--model", "runs/imf/model.pt", "--data", "etr.yaml", "--out", "imp2")


def _shift_of_import(tmp):
    """harness shift of an import of runs/imf's model.pt (evaluated on another folder, imf2): its shift split and
    OOD sets are compared with the data the model was trained on (its run's), not only the import's data section."""
    import shutil

    import pytest

    from harness.runs import data_config
    from harness.shift.settings import ShiftSettings, check_settings

    shutil.copytree(tmp / "imf" / "test", tmp / "imf2" / "test")
    (tmp / "e2.yaml").write_text(f"data:\n  source: image_folder\n  path: imf2\n  eval_split: test\n{_VIEW}")
    _cli("import", "--model", "runs/imf/model.pt", "--data", "e2.yaml", "--out", "imp3")
    data = data_config("imp3")
    ood = ShiftSettings(corruptions=["none"], ood=["x:source=image_folder,path=imf,split=train,image_size=16"])
    with pytest.raises(ValueError, match=r"OOD set 'x' reads split train .*the data imp3's model was trained on"):
        check_settings(ood, data, "imp3")
    with pytest.raises(ValueError, match=r"split=\.\./imf/train \(shift\.split.*imp3 was trained on the train split"):
        check_settings(ShiftSettings(corruptions=["none"], split="../imf/train"), data, "imp3")
    check_settings(ShiftSettings(corruptions=["none"], ood=["x:source=image_folder,path=imf,split=val"]), data, "imp3")


# ------------------------------------------------------------------------------ A21-05: the folder actually read
@bad_input(
    "data",
    "image_folder data.path=imf, data.train_split=train with data.eval_split=../imf/train (or the absolute path of "
    "imf/train), and a shift OOD set path=.,split=imf/train of a run trained on imf's train (audit21 A21-05: rc 0, "
    "the splits compared by their text under data.path, so the training folder was scored as the test split, and as "
    "OOD images)",
    ValueError,
    r"data\.eval_split=\.\./imf/train is also data\.train_split=train \(data\.eval_split reads .*imf/train; "
    r"data\.train_split reads .*imf/train\): the model would be scored on the images it was trained on",
)
def _split_by_another_path(tmp):
    import pytest

    from harness.data.config import DataConfig, check_splits
    from harness.model_identity import check_not_trained_on
    from harness.shift.settings import ShiftSettings, check_settings

    _image_folder(tmp / "imf")
    imf = {"source": "image_folder", "path": "imf", "image_size": 16, "eval_resize": 16}
    absolute = os.path.abspath("imf/train")
    with pytest.raises(ValueError, match=r"data\.eval_split=/.*imf/train is also data\.train_split=train"):
        check_splits(DataConfig(**imf, train_split="train", eval_split=absolute, heldout_split=None))
    with pytest.raises(ValueError, match=r"data\.eval_split=\. holds data\.train_split=train's images"):
        check_splits(DataConfig(**imf, train_split="train", eval_split=".", heldout_split=None))
    check_splits(DataConfig(**imf, train_split="train", eval_split="test", heldout_split="val"))
    run = DataConfig(**imf, train_split="train", eval_split="test", heldout_split="val")
    ood = "x:source=image_folder,path=.,split=imf/train,image_size=16"
    with pytest.raises(ValueError, match=r"OOD set 'x' reads split imf/train .*the run's own training data"):
        check_settings(ShiftSettings(corruptions=["none"], ood=[ood]), run)
    check_settings(ShiftSettings(corruptions=["none"], ood=["x:source=image_folder,path=.,split=imf/val2"]), run)
    with pytest.raises(ValueError, match=r"trained on the train split of image_folder at .*data\.eval_split=imf/tr"):
        check_not_trained_on(
            {"source": "image_folder", "path": "imf", "train_split": "train"},
            DataConfig(**{**imf, "path": "."}, eval_split="imf/train", heldout_split=None),
            "m/model.pt",
        )
    check_splits(DataConfig(**imf, train_split="train", eval_split="../imf/train", heldout_split=None))


# ------------------------------------------------------------------------------ A21-07: a pack is the split it holds
@bad_input(
    "upstream",
    "data.source=shards data.path=pkall with data.train_split=all (a pack of digits' all) and data.eval_split=test "
    "(a pack of digits' test), and an import of a model trained on a pack of digits' train scored on digits' train "
    "(audit21 A21-07: rc 0, every test image a training image: the packs' folders compared by name, never by the "
    "source split their index.json records; model.pt's trained_on names no pack)",
    CLI_ERROR,
    r"data\.eval_split=test's images are part of data\.train_split=all \(data\.eval_split reads a pack of the test "
    r"split of digits, as its index\.json records; data\.train_split reads a pack of the all split of digits",
)
def _pack_splits_by_source(tmp):
    import pytest

    for split in ("train", "test"):
        _cli("data", "pack", "digits", "pk", "--shard-size", "600", "--split", split)
    _train("runs/pk", "data.source=shards", "data.path=pk", "data.eval_split=test", "data.heldout_split=null")
    (tmp / "etrain.yaml").write_text("data:\n  source: digits\n  eval_split: train\n  heldout_split: null\n")
    with pytest.raises(CLI_ERROR, match=r"runs/pk/model\.pt was trained on the train split of digits \(as its run's"):
        _cli("import", "--model", "runs/pk/model.pt", "--data", "etrain.yaml", "--out", "imp")
    for split in ("all", "test"):
        _cli("data", "pack", "digits", "pkall", "--shard-size", "600", "--split", split)
    _train("runs/pkall", "data.source=shards", "data.path=pkall", "data.train_split=all", "data.eval_split=test",
           "data.heldout_split=null")  # fmt: skip
