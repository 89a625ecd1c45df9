"""Bad inputs found by the twentieth reliability audit in the data's splits, an import's data and a finished run's
requested monitors (``audit20 <case id>``): TFDS slices of one split that overlap, a pack of a model's own training
split, training-only keys of an import's data file, and settings a finished run does not apply."""

from __future__ import annotations

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------------ A20-01: TFDS slices by their ranges
@bad_input(
    "data",
    "tfds data.train_split=train[:80%] with data.eval_split=train[70%:], a held-out train[40%:50%] inside "
    "train[:50%], and train[0:90%] beside train[:90%] (audit20 A20-01: every check passed, two slices of one split "
    "were never compared: 10% of the evaluation images were training images)",
    ValueError,
    r"data\.eval_split=train\[70%:\] shares images with data\.train_split=train\[:80%\]: the model would be scored on "
    r"the images it was trained on",
)
def _tfds_slices(tmp):
    import pytest

    from harness.data.config import DataConfig, check_splits
    from harness.data.splits import split_relation

    def tf(**kw):
        return DataConfig(source="tfds", name="cifar10", **kw)

    with pytest.raises(ValueError, match=r"heldout_split=train\[40%:50%\]'s images are part of data\.train_split"):
        check_splits(tf(train_split="train[:50%]", eval_split="train[50%:]", heldout_split="train[40%:50%]"))
    with pytest.raises(ValueError, match=r"heldout_split=train\[0:90%\] is also data\.train_split=train\[:90%\]"):
        check_splits(tf(train_split="train[:90%]", eval_split="test", heldout_split="train[0:90%]"))
    with pytest.raises(ValueError, match=r"eval_split=train\[-100:\] may share images with data\.train_split"):
        check_splits(tf(train_split="train[:100]", eval_split="train[-100:]", heldout_split=None))
    check_splits(tf(train_split="train[:90%]", eval_split="test", heldout_split="train[90%:]"))  # disjoint: accepted
    check_splits(tf(train_split="train[:1000]", eval_split="train[1000:1500]", heldout_split="validation"))
    assert split_relation("tfds", "train[ :90%]", "train[:90%]") == "is"
    assert split_relation("tfds", "train[-10%:]", "train[:90%]") is None
    assert split_relation("tfds", "train[:10%]+test", "test[:5%]") == "holds"
    assert split_relation("tfds", "all", "test") == "holds"
    check_splits(tf(train_split="train[:80%]", eval_split="train[70%:]", heldout_split=None))


# ------------------------------------------------------------------------------ A20-02: a pack is what it was packed from
@bad_input(
    "data",
    "harness import of a model trained on digits' train split with data.source=shards, a harness data pack of that "
    "same train split (audit20 A20-02: rc 0, top1 0.9787 on the 1,078 images it trained on, reported as an import's "
    "evaluation: the source digits differs from shards, so the rule returned)",
    ValueError,
    r"m/model\.pt was trained on the train split of digits \(as it records\) \(data\.path=.* is a pack of digits, as "
    r"its index\.json records\): data\.eval_split=train is also data\.train_split",
)
def _import_own_pack(tmp):
    import pytest

    from harness.data.config import DataConfig
    from harness.model_identity import check_not_trained_on

    pk = tmp / "pk"
    for split in ("train", "test"):
        _cli("data", "pack", "digits", str(pk), "--shard-size", "500", "--split", split)
    trained = {"source": "digits", "train_split": "train"}
    check_not_trained_on(trained, DataConfig(source="shards", path=str(pk), eval_split="test"), "m/model.pt")
    # a model trained on the pack: digits' own train split is the pack's
    with pytest.raises(ValueError, match=r"trained on the train split of digits .*eval_split=train is also"):
        check_not_trained_on(
            {"source": "shards", "path": str(pk), "train_split": "train"},
            DataConfig(source="digits", eval_split="train", heldout_split=None),
            "m/model.pt",
        )
    check_not_trained_on(trained, DataConfig(source="shards", path=str(pk), eval_split="train"), "m/model.pt")


# ------------------------------------------------------------------------------ A20-05: what a finished run does not do
@handled(
    "upstream",
    "harness upstream on a finished run with train.fewshot_every=1, train.fewshot_tasks=[demo_digit] and "
    "train.log_model=true (audit20 A20-05: 'already complete; nothing to do', without a word that the few-shot "
    "monitor and the export were not done)",
    r"finished run: names train\.fewshot_every=1, train\.log_model=True, harness fewshot and export_run",
)
def _finished_run_monitors(tmp):
    import contextlib
    import io

    from bad_inputs_audit19_data import _tiny_run

    _tiny_run(tmp, [])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        more = ["train.fewshot_every=1", "train.fewshot_tasks=[demo_digit]", "train.fewshot_shots=[1]"]
        _tiny_run(tmp, [*more, "train.log_model=true"], progress=True)
    line = out.getvalue()
    assert "already complete" in line and "train.fewshot_every=1" in line and "train.log_model=True" in line, line
    assert f"harness fewshot --model {tmp / 'r'}/model.pt" in line and "export_run(" in line, line
    assert not (tmp / "r" / "fewshot.jsonl").exists()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _tiny_run(tmp, ["data.eval_batch_size=16"], progress=True)
    assert out.getvalue().strip().endswith("nothing to do"), out.getvalue()  # a reading key: nothing to name
    return "finished run: names train.fewshot_every=1, train.log_model=True, harness fewshot and export_run"


# ------------------------------------------------------------------------------ A20-07: an import's data file
@handled(
    "data",
    "harness import --data FILE whose data section sets label_noise {kind: pair_flip, rate: 0.5}, limit_train: 10 "
    "(audit20 A20-07: rc 0, clean-label held-out metrics beside a config.yaml saying pair_flip 0.5), and crop_scale: "
    "[0.5, 1.0] (the type error blamed 'the defaults')",
    r"evaluation config: no label noise \(warned\), limit_train 0; a type error names the --data file",
)
def _import_training_keys(tmp):
    import pytest

    from harness.data.eval_keys import data_from_file

    f = tmp / "enz.yaml"
    f.write_text(
        "data:\n  source: digits\n  eval_split: test\n  heldout_split: val\n  limit_train: 10\n"
        "  label_noise: {kind: pair_flip, rate: 0.5}\n"
    )
    with pytest.warns(UserWarning, match=r"enz\.yaml: data\.label_noise=.*pair_flip.* is not applied: an evaluation"):
        cfg = data_from_file(f)
    assert (cfg.label_noise, cfg.limit_train, cfg.eval_split, cfg.heldout_split) == ({}, 0, "test", "val"), cfg
    bad = tmp / "ecs.yaml"
    bad.write_text("data:\n  source: digits\n  crop_scale: [0.5, 1.0]\n")
    with pytest.raises(ValueError, match=r"invalid config \(the data section of --eval-data .*ecs\.yaml\): crop_sc"):
        data_from_file(bad, flag="--eval-data")
    return "evaluation config: no label noise (warned), limit_train 0; a type error names the --data file"


# ------------------------------------------------------------------------------ A20-13: an image folder's split by path
@bad_input(
    "data",
    "image_folder data.train_split=train with data.eval_split=train/ (also ./train, train/../train) (audit20 A20-13: "
    "rc 0, run.json names imf/train as both the training and the evaluation data: scored on its training images)",
    ValueError,
    r"data\.eval_split=train/ is also data\.train_split=train: the model would be scored on the images it was "
    r"trained on",
)
def _image_folder_spellings(tmp):
    import pytest

    from harness.data.config import DataConfig, check_splits

    def imf(**kw):
        return DataConfig(source="image_folder", path=str(tmp), **kw)

    for spelling in ("./train", "train/../train"):
        with pytest.raises(ValueError, match=rf"eval_split={spelling}\b.* is also data\.train_split=train"):
            check_splits(imf(train_split="train", eval_split=spelling, heldout_split=None))
    with pytest.raises(ValueError, match=r"heldout_split=train/cat's images are part of data\.train_split=train"):
        check_splits(imf(train_split="train", eval_split="test", heldout_split="train/cat"))
    check_splits(imf(train_split="train", eval_split="test", heldout_split="val"))  # three folders: accepted
    check_splits(imf(train_split="train", eval_split="train/", heldout_split=None))
