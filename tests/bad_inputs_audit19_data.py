"""Bad inputs found by the nineteenth reliability audit in the data's splits and limits, a run's resumption and an
ensemble's members (``audit19 <case id>``): splits that share images under other names, a limit above a split's
size, a resume with another evaluation batch, and one model's weights given as two members."""

from __future__ import annotations

import json
import shutil

import click
from bad_inputs_audit9_config import CLI_ERROR, CONFIGS, _upstream

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------------ A19-01: splits by their images
@bad_input(
    "upstream",
    "data.eval_split=all, data.train_split=all, data.heldout_split=all of digits (audit19 A19-01: rc 0, `all` holds "
    "train, val and test, so the model was scored on (or trained on, or calibrated on) its other splits' images)",
    CLI_ERROR,
    r"data\.eval_split=all holds data\.train_split=train's images: the model would be scored on the images it was "
    r"trained on .*give a split of its own, sharing no image with data\.train_split",
)
def _digits_all(tmp):
    import pytest

    with pytest.raises(CLI_ERROR, match=r"data\.eval_split=test's images are part of data\.train_split=all"):
        _upstream(tmp, "data.train_split=all")
    with pytest.raises(CLI_ERROR, match=r"data\.heldout_split=all holds data\.eval_split=test's images: .*not held"):
        _upstream(tmp, "data.heldout_split=all")
    _upstream(tmp, "data.eval_split=all")


@bad_input(
    "data",
    "cifar10n data.train_split=train with data.heldout_split=val5k, and a model.pt trained on train45k imported "
    "with eval_split=train (audit19 A19-01: rc 0; 25 of 256 training rows were val5k rows, the temperature fitted on "
    "training images)",
    ValueError,
    r"data\.heldout_split=val5k's images are part of data\.train_split=train: the held-out predictions .*would be "
    r"the training images, not held out",
)
def _cifar10n_parts(tmp):
    import pytest

    from harness.data.config import DataConfig, check_splits
    from harness.model_identity import check_not_trained_on

    c10 = {"source": "cifar10n", "path": str(tmp)}
    check_splits(DataConfig(**c10, train_split="train45k", heldout_split="val5k"))  # disjoint parts: accepted
    trained = {"source": "cifar10n", "train_split": "train45k"}
    with pytest.raises(ValueError, match=r"trained on the train45k split .*data\.eval_split=train holds data\.train_"):
        check_not_trained_on(trained, DataConfig(**c10, eval_split="train"), "m/model.pt")
    check_splits(DataConfig(**c10, train_split="train", heldout_split="val5k"))


@handled(
    "data",
    "splits_overlap for the OOD set's own-data rule (audit19 A19-01: harness shift --ood 'x:source=digits,split=all' "
    "of a digits run scored its training images as out-of-distribution)",
    r"overlaps: all/train all/test cifar10n train/val5k; apart: train/val train45k/val5k",
)
def _splits_overlap(tmp):
    from harness.data.splits import splits_overlap

    assert splits_overlap("digits", "all", "train") and splits_overlap("digits", "test", "all")
    assert splits_overlap("cifar10n", "train", "val5k") and splits_overlap("tfds", "train", "train[:90%]")
    assert not splits_overlap("digits", "train", "val") and not splits_overlap("cifar10n", "train45k", "val5k")
    assert not splits_overlap("digits", "train", None) and not splits_overlap("cifar10n", "train", "test")
    return "overlaps: all/train all/test cifar10n train/val5k; apart: train/val train45k/val5k"


def _tiny_run(tmp, overrides: list, **run_kw) -> None:
    """Train (or resume, or find finished) the small digits run ``tmp/r`` of ``digits_hom.yaml`` with ``overrides``
    after the usual tiny settings (those it sets, in place of the tiny ones); ``run_kw`` go to the upstream's ``run``."""
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig
    from harness.upstream.train import run

    base = ["train.epochs=1", "data.limit_train=64", "data.limit_eval=32", "train.log_with=[]"]
    base = [b for b in base if b.split("=")[0] not in {o.split("=")[0] for o in overrides}]
    base += ["model.backbone=test_resnet", f"output_dir={tmp / 'r'}", *overrides]
    run(load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", base), **{"progress": False, **run_kw})


# ------------------------------------------------------------------------------ A19-10: resume with a reading key
@handled(
    "upstream",
    "a checkpointed run resumed with data.eval_batch_size=32 and train.log_every=7 (audit19 A19-10: refused as 'a "
    "different config', advising to delete the folder and its checkpoints)",
    r"resumed with eval_batch_size 32, log_every 7; run\.json says 256 -> 32",
)
def _resume_reading_keys(tmp):
    import yaml

    _tiny_run(tmp, ["train.epochs=2"], stop_after_steps=1)
    assert (tmp / "r" / "checkpoints" / "last.pt").is_file() and not (tmp / "r" / "model.pt").exists()
    _tiny_run(tmp, ["train.epochs=2", "data.eval_batch_size=32", "train.log_every=7"])
    cfg = yaml.safe_load((tmp / "r" / "config.yaml").read_text())
    assert (cfg["data"]["eval_batch_size"], cfg["train"]["log_every"]) == (32, 7), cfg
    resumed = json.loads((tmp / "r" / "run.json").read_text())["resumed"]
    assert resumed[0]["changed"]["data.eval_batch_size"] == [256, 32], resumed
    assert (tmp / "r" / "model.pt").is_file()
    return "resumed with eval_batch_size 32, log_every 7; run.json says 256 -> 32"


# ------------------------------------------------------------------------------ A19-11: one model as two members
@bad_input(
    "ensemble",
    "harness ensemble of a run and a folder holding the same model.pt weights, scored at another eval_resize "
    "(audit19 A19-11: rc 0, 'an ensemble of 2' with a gain and 4% disagreement, one model at two views)",
    click.ClickException,
    r"members '.*a' and '.*b' hold the same weights \(their model\.pt files' state dicts are equal: a run and an "
    r"import of its model\.pt.*keep one of them",
)
def _same_weights(tmp):
    _ensemble_at_two_views(tmp, same_weights=True)


@bad_input(
    "ensemble",
    "harness ensemble of two models evaluated at other views (eval_resize 32 and null) of the same split (audit19 "
    "A19-11: the compatibility check compared descriptions that do not name the view)",
    click.ClickException,
    r"member '.*b' was evaluated at data\.image_size=32, data\.eval_resize=32 \(resize 32\) and member '.*a' at "
    r"data\.image_size=32, data\.eval_resize=None \(resize 37\): .*evaluate the members at one view",
)
def _other_views(tmp):
    _ensemble_at_two_views(tmp, same_weights=False)


def _ensemble_at_two_views(tmp, same_weights: bool) -> None:
    """``harness ensemble --from-checkpoints`` of two small runs, the second evaluated at eval_resize 32 (and given
    the first's weights when ``same_weights``); the call must fail and write nothing."""
    from bad_inputs_audit6_runs import _checkpoint_runs

    members = _checkpoint_runs(tmp)
    if same_weights:
        shutil.copyfile(tmp / "a" / "model.pt", tmp / "b" / "model.pt")
    cfg = (tmp / "b" / "config.yaml").read_text().replace("  limit_eval: 20\n", "  limit_eval: 20\n  eval_resize: 32\n")
    (tmp / "b" / "config.yaml").write_text(cfg)
    try:
        _cli("ensemble", *members, "--from-checkpoints", "--out", str(tmp / "e"))
    finally:
        assert not (tmp / "e").exists()


# ------------------------------------------------------------------------------ A19-12: a limit above the split
@handled(
    "exports",
    "data.limit_eval=1000 for digits' 359-image test split, then export_run (audit19 A19-12: the card named "
    "test[:1000] and 'its first 1000 examples' for the whole split)",
    r"^a limit is at most that many: limit_eval=1000 read the whole test split, and the card names test, limit_train "
    r"100 cut the training split and is stated$",
)
def _limit_above_split(tmp):
    from harness.runs import export_run

    config = ["--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1", "train.log_with=[]"]
    limits = ["data.limit_train=100", "data.limit_eval=1000"]
    _cli("upstream", "--no-progress", *config, *limits, f"output_dir={tmp / 'r'}")
    assert json.loads((tmp / "r" / "run.json").read_text())["num_eval"] == 359
    export_run(tmp / "r", tmp / "exp")
    card = (tmp / "exp" / "README.md").read_text()
    seen = json.loads((tmp / "exp" / "config.json").read_text())["harness"]["trained_on"]
    assert "test[:" not in card and "split: test\n" in card and "first 1000" not in card, card
    assert "limit_eval" not in seen and seen["limit_train"] == 100, seen
    return (
        "a limit is at most that many: limit_eval=1000 read the whole test split, and the card names test, "
        "limit_train 100 cut the training split and is stated"
    )
