"""The data keys an evaluation reads (harness.data.eval_keys): one list for harness import and harness shift's OOD
sets, the others training-only."""

import dataclasses

import pytest

from harness.data.config import DataConfig
from harness.data.eval_keys import EVAL_KEYS, TRAINING_KEYS, check_eval_keys
from harness.shift.settings import ShiftSettings, check_settings, ood_data, ood_keys


def test_every_data_key_is_read_by_an_evaluation_or_by_training_only():
    fields = [f.name for f in dataclasses.fields(DataConfig)]
    assert sorted(EVAL_KEYS + tuple(TRAINING_KEYS)) == sorted(fields)
    assert set(ood_keys()) < set(EVAL_KEYS) and "limit_eval" in ood_keys() and "eval_batch_size" not in ood_keys()


def test_import_overrides():
    cfg = DataConfig(source="digits", limit_eval=5)
    check_eval_keys(["data.limit_eval=5", "eval_batch_size=8"], cfg, "harness import", ("test",))
    with pytest.raises(ValueError, match=r"batch_size=8 is not read by harness import.*give eval_batch_size=8"):
        check_eval_keys(["batch_size=8"], cfg, "harness import", ("test",))
    with pytest.raises(ValueError, match=r"data\.path=/x is read only by data\.source="):
        check_eval_keys(["path=/x"], DataConfig(source="digits", path="/x"), "harness import", ("test",))
    c10n = DataConfig(source="cifar10n", path="/x", label_set="worse")
    check_eval_keys(["label_set=worse"], c10n, "harness import", ("test", "val5k"))  # val5k reads it
    with pytest.raises(ValueError, match=r"label_set=worse is read only on cifar10n's training splits"):
        check_eval_keys(["label_set=worse"], c10n, "harness import", ("test", None))


def test_ood_limit_eval_limits_any_split_and_other_splits_of_the_run_data_are_refused(tmp_path):
    run = DataConfig(source="digits", image_size=32, heldout_split="val")
    cfg, split = ood_data({"source": "digits", "split": "train", "limit_eval": "7"}, run)
    from harness.data.sources import build_split

    assert split == "train" and len(build_split(cfg, split)) == 7
    for split, what in (("val", "held-out"), ("train", "training"), ("test", "evaluation")):
        with pytest.raises(ValueError, match=f"with the run's own {what} data"):
            check_settings(ShiftSettings(corruptions=[], ood=[f"x:source=digits,split={split}"]), run)
    (tmp_path / "f").mkdir()
    other = DataConfig(source="image_folder", path=str(tmp_path / "f"), image_size=32)
    with pytest.raises(ValueError, match="with the run's own evaluation data"):  # the same folder by another spelling
        check_settings(ShiftSettings(corruptions=[], ood=[f"x:source=image_folder,path={tmp_path}/f/."]), other)
    check_settings(ShiftSettings(corruptions=[], ood=[f"x:source=image_folder,path={tmp_path}"]), other)
