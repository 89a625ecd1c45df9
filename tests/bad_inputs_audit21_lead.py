"""Bad inputs found by the twenty-first reliability audit that the lead fixed (``audit21 <case id>``)."""

from __future__ import annotations

import click

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------------ A21-01: τ set on a built head
@bad_input(
    "heads",
    "head.fixed_temperature.fill_(-1.0) on a built HET head, then a call (audit21 A21-01: no error, every prediction "
    "flipped to the least probable class; NaN gave NaN log-probabilities; only save_pretrained refused it)",
    ValueError,
    r"^head\.fixed_temperature = -1\.0 \(the head's fixed temperature τ\) must be a finite number at least 0\.001 .*"
    r"a negative τ flips every prediction\); it was set on the built head: set it to a value the head takes",
)
def _negative_temperature_set(tmp):
    import pytest
    import torch

    from harness.heads import HeteroscedasticHead

    head = HeteroscedasticHead(in_features=8, num_classes=10, eval_seed=0, eval_mc_samples=4).eval()
    x = torch.randn(3, 8)
    head(x)
    head.fixed_temperature.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"fixed_temperature = nan"):
        head(x)
    head.fixed_temperature.fill_(2.0)
    head(x)  # a value the head takes: predicts
    head.fixed_temperature.fill_(-1.0)
    head(x)


# ------------------------------------------------------------------------------ A21-02: local-dir: of a model.pt
@bad_input(
    "sources",
    "harness import / fewshot --model local-dir:<a run's model.pt> (audit21 A21-02: told to give local-dir:<its "
    "folder>, which was refused in turn naming the file)",
    click.ClickException,
    r"local-dir:.*r/model\.pt: '.*r/model\.pt' is a harness model checkpoint, and local-dir: takes a folder written "
    r"by save_pretrained or a timm model folder: give the checkpoint as it is, '.*r/model\.pt' \(no prefix\)",
)
def _local_dir_of_model_pt(tmp):
    from harness.models import build_model, save_model

    save_model(build_model(dict(backbone="test_resnet", num_classes=10)).eval(), tmp / "r" / "model.pt")
    _cli("fewshot", "--model", f"local-dir:{tmp / 'r' / 'model.pt'}", "--tasks", "demo_digit", "--shots", "1",
         "--log-with", "none", "--out", str(tmp / "fs"))  # fmt: skip


# ------------------------------------------------------------------------------ A21-03: import of a timm folder
@handled(
    "sources",
    "harness import --model timm:local-dir:<a timm model folder> and local-dir:<it> (audit21 A21-03: 'unknown "
    "backbone local-dir:tf' and 'no checkpoint at local-dir:tf', though --help offers timm's sources)",
    r"^both spellings import the timm folder's classifier: the same logits as timm:NAME with its weights; 9 classes refused$",
)
def _import_timm_folder(tmp):
    import pytest
    import timm
    import torch
    from timm.models import save_for_hf

    from harness.sources import load_classifier

    net = timm.create_model("resnet10t", num_classes=10).eval()
    save_for_hf(net, str(tmp / "tf"), safe_serialization=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():  # the documented way before: timm:NAME with the weights file
        expected = load_classifier("timm:resnet10t", 10, weights=tmp / "tf" / "model.safetensors").eval()(x)
        for spelling in (f"timm:local-dir:{tmp / 'tf'}", f"local-dir:{tmp / 'tf'}"):
            model = load_classifier(spelling, 10).eval()
            assert torch.allclose(model(x), expected, atol=1e-5), spelling
            assert model.config.backbone == "resnet10t", model.config
    with pytest.raises(ValueError, match=r"predicts 10 classes \(its config\.json's\) and the data has 9"):
        load_classifier(f"local-dir:{tmp / 'tf'}", 9)
    with pytest.raises(ValueError, match=r"holds its own weights"):
        load_classifier(f"local-dir:{tmp / 'tf'}", 10, weights=tmp / "tf" / "model.safetensors")
    return "both spellings import the timm folder's classifier: the same logits as timm:NAME with its weights; 9 classes refused"


# ------------------------------------------------------------------------------ A21-06: a clock that cannot be real
@bad_input(
    "experiment",
    'sessions.json holding [{"start": 0, "last": <now>}] and a session inside another (audit21 A21-06: "Wall time: '
    '29932425.2 minutes", 57 years; overlapping sessions counted twice; a future session taken)',
    ValueError,
    r"sessions\.json \(the experiment's clock: .*\) holds \{'start': 0, .*\} as session 0, with a time before 2020 or "
    r"after tomorrow .*: the file is damaged; move it away",
)
def _unreal_clock(tmp):
    import time

    import pytest
    from bad_inputs_audit19_experiment import _run_with_clock

    now = time.time()
    inside = f'[{{"start": {now - 5000}, "last": {now - 10}}}, {{"start": {now - 4000}, "last": {now - 1000}}}]'
    with pytest.raises(ValueError, match=r"holds session 1 starting at .*, before session 0's last tick .*damaged"):
        _run_with_clock(tmp / "a", inside)
    with pytest.raises(ValueError, match=r"with a time before 2020 or after tomorrow"):
        _run_with_clock(tmp / "b", f'[{{"start": {now + 9e9}, "last": {now + 9e9 + 1}}}]')
    _run_with_clock(tmp, f'[{{"start": 0, "last": {now}, "excluded": 0}}]')


# ------------------------------------------------------------------------------ A21-08: a card's splits
@bad_input(
    "exports",
    "save_pretrained(trained_on={source: digits, train_split: train, eval_split: train}, metrics=...) (audit21 "
    "A21-08: rc 0, the model-index filed the training split's top-1 as the model's evaluation); also eval_split all "
    "and TFDS slices train[:80%] / train[70%:]",
    ValueError,
    r"^save_pretrained: trained_on\.eval_split=train is also trained_on\.train_split: the model would be scored on "
    r"the images it was trained on .*; a card's metrics are those of trained_on\.eval_split; give the data's settings",
)
def _card_of_training_split(tmp):
    import pytest

    from harness.models import build_model

    model = build_model(dict(backbone="test_resnet", num_classes=10))
    for data in (
        {"source": "digits", "train_split": "train", "eval_split": "all"},
        {"source": "tfds", "name": "cifar10", "train_split": "train[:80%]", "eval_split": "train[70%:]"},
        {"source": "digits", "train_split": "train", "eval_split": "test", "heldout_split": "all"},
    ):
        with pytest.raises(ValueError, match=r"^save_pretrained: trained_on\.\w+_split=\S+ (holds|shares)"):
            model.save_pretrained(tmp / "x", trained_on=data, metrics={"top1": 0.99})
        assert not (tmp / "x").exists()
    model.save_pretrained(tmp / "ok", trained_on={"source": "digits", "train_split": "train", "eval_split": "test"})
    model.save_pretrained(tmp / "x", trained_on={"source": "digits", "train_split": "train", "eval_split": "train"})


# ------------------------------------------------------------------------------ A21-10: a model where a run belongs
@bad_input(
    "runs",
    "harness shift / ensemble / report given an export folder, or a run's model.pt (audit21 A21-10: told to run "
    "harness upstream first, or click's 'Directory ... is a file', never harness import or the run's folder)",
    click.UsageError,
    r"'.*exp' is a model folder \(config\.json: an export written by save_pretrained, or a timm folder\), not a run "
    r"folder .*harness import --model local-dir:.*exp --data CONFIG --out FOLDER makes a run folder of it",
)
def _model_where_a_run_belongs(tmp):
    import pytest

    from harness.models import build_model, save_model

    model = build_model(dict(backbone="test_resnet", num_classes=10)).eval()
    save_model(model, tmp / "r" / "model.pt")
    (tmp / "r" / "config.yaml").write_text("data:\n  source: digits\n")
    save_model(model, tmp / "loose.pt")
    model.save_pretrained(tmp / "exp")
    for args in (["shift", "-m"], ["ensemble", "-m"], ["report"]):
        with pytest.raises(click.UsageError, match=r"r/model\.pt' is a run's model\.pt: give the folder itself, '.*r'"):
            _cli(*args, str(tmp / "r" / "model.pt"))
    with pytest.raises(click.UsageError, match=r"loose\.pt' is a file, not a run folder .*harness import --model"):
        _cli("report", str(tmp / "loose.pt"))
    _cli("shift", "-m", str(tmp / "exp"))


# ------------------------------------------------------------------------------ A21-15: bench --pack of a run folder
@bad_input(
    "bench",
    "harness bench device --pack <a run folder> (audit21 A21-15: advised to pack the data into the run folder, which "
    "harness data pack refuses)",
    click.ClickException,
    r"--pack .*r is the folder of a harness run \(it holds run\.json\), not a shard pack: give a folder harness data "
    r"pack wrote \(harness data pack SOURCE PACKDIR --split train, PACKDIR a new folder\)",
)
def _bench_pack_of_a_run(tmp):
    (tmp / "r").mkdir()
    (tmp / "r" / "run.json").write_text("{}")
    _cli("bench", "device", "--dry-run", "--pack", str(tmp / "r"), "--out", str(tmp / "dv"))


# ------------------------------------------------------------------------------ A21-09: a pack's negative limit
@bad_input(
    "data",
    "harness data pack digits PK --split val limit_eval=-5 (audit21 A21-09: rc 0, all but the last 5 examples packed "
    "as '(first -5)'; upstream, import and shift refuse the value)",
    click.ClickException,
    r"limit_eval must be >= 0 \(0 = all\), got -5",
)
def _pack_negative_limit(tmp):
    try:
        _cli("data", "pack", "digits", str(tmp / "pk"), "--shard-size", "100", "--split", "val", "limit_eval=-5")
    finally:
        assert not (tmp / "pk").exists()


# ------------------------------------------------------------------------------ A21-13: a TFDS version pinned
@bad_input(
    "data",
    "harness import of a model trained on TFDS cifar10's train split, with --data naming cifar10:3.0.2 (a pinned "
    "version) and eval_split train (audit21 A21-13: passed as other data; cifar10:3.*.* too)",
    ValueError,
    r"M was trained on the train split of tfds \(as it records\): data\.eval_split=train is also data\.train_split",
)
def _tfds_version_pinned(tmp):
    import pytest

    from harness.data.config import DataConfig
    from harness.model_identity import check_not_trained_on

    trained = {"source": "tfds", "name": "cifar10", "train_split": "train"}
    with pytest.raises(ValueError, match=r"images are part of data\.train_split=train"):
        check_not_trained_on(trained, DataConfig(source="tfds", name="cifar10:3.*.*", eval_split="train[:10%]"), "M")
    check_not_trained_on(trained, DataConfig(source="tfds", name="cifar100:3.0.2", eval_split="train"), "M")  # other
    check_not_trained_on(trained, DataConfig(source="tfds", name="cifar10:3.0.2", eval_split="train"), "M")


# ------------------------------------------------------------------------------ A21-16: an ensemble's replaced member
@bad_input(
    "ensemble",
    "harness ensemble --from-checkpoints of two runs, one whose model.pt was replaced by another run's (audit21 "
    "A21-16: rc 0, 'ensemble of 2' at 92% from members at 8% and 10%; harness shift refused the same)",
    click.ClickException,
    r"c1/model\.pt is not the model the run's metrics\.json and predictions measured \(its weights' digest is "
    r"\w+\.\.\., metrics\.json records \w+\.\.\.\): put the run's own model\.pt back",
)
def _ensemble_replaced_member(tmp):
    import shutil

    from bad_inputs_audit9_config import CONFIGS

    config = ["--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1", "train.log_with=[]"]
    for name, seed in (("c0", 0), ("c1", 1), ("g", 2)):
        _cli("upstream", "--no-progress", *config, "data.limit_train=64", "data.limit_eval=20", f"seed={seed}",
             f"output_dir={tmp / name}")  # fmt: skip
    shutil.copy(tmp / "g" / "model.pt", tmp / "c1" / "model.pt")
    try:
        _cli("ensemble", "-m", str(tmp / "c0"), "-m", str(tmp / "c1"), "--from-checkpoints", "--out", str(tmp / "e"))
    finally:
        assert not (tmp / "e").exists()
