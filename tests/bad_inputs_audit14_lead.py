"""Bad inputs found by the fourteenth reliability audit that the lead fixed (``audit14 <case id>``): messages of the
statistics and uncertainty API that named the wrong parameter or no member, and from_pretrained keywords it did not
read."""

from __future__ import annotations

import click
import numpy as np

from bad_inputs import bad_input


def _preds(k: int = 4, n: int = 30, link: str = "softmax", seed: int = 0):
    """A model's predictions (logits drawn with ``seed``) of ``n`` examples over ``k`` classes, as a user builds them
    (``source`` left at its default)."""
    from harness.uncertainty.predictions import Predictions

    logits = np.random.default_rng(seed).normal(size=(n, k)).astype(np.float32)
    targets = np.random.default_rng(0).integers(0, k, n)  # one evaluation set: the same labels for every model
    names = [f"c{i}" for i in range(k)]
    return Predictions(logits=logits, targets=targets, index=np.arange(n), class_names=names, link=link)


# ------------------------------------------------------------------------------ A14-02: alpha named as confidence
@bad_input(
    "uncertainty",
    "harness.uncertainty.power.paired_t_power(1.0, 10, 0.5, alpha=1.5) (audit14 A14-02: 'confidence must lie "
    "strictly in (0, 1) ...; pass e.g. 0.95 for 95%', advice that gives a test at level 95%)",
    ValueError,
    r"^alpha must lie strictly in \(0, 1\), got 1\.5; pass e\.g\. 0\.05$",
)
def _power_alpha_out_of_range(tmp):
    from harness.uncertainty import power

    power.paired_t_power(1.0, 10, 0.5, alpha=1.5)


@bad_input(
    "uncertainty",
    "harness.uncertainty.power.tost_power(1.0, 10, 0.5, alpha=2) (audit14 A14-02)",
    ValueError,
    r"^alpha must lie strictly in \(0, 1\), got 2; pass e\.g\. 0\.05$",
)
def _tost_alpha_out_of_range(tmp):
    from harness.uncertainty import power

    power.tost_power(1.0, 10, 0.5, alpha=2)


# ------------------------------------------------------------------------------ A14-03: members named by no source
@bad_input(
    "uncertainty",
    "harness.uncertainty.ensembles.average of three user-built Predictions, the third of another link (audit14 "
    "A14-03: 'member  does not match : link ...', naming no member)",
    ValueError,
    r"^member 3 of 3 does not match member 1 of 3: link 'sigmoid' vs 'softmax'",
)
def _ensemble_members_without_source(tmp):
    from harness.uncertainty import ensembles

    ensembles.average([_preds(), _preds(seed=1), _preds(link="sigmoid", seed=2)])


@bad_input(
    "uncertainty",
    "harness.uncertainty.calibrators.calibrate(['temperature'], <5-class held-out>, <4-class user-built Predictions>) "
    "(audit14 A14-03: 'predictions () have 4 classes ...')",
    ValueError,
    r"^predictions have 4 classes, the held-out predictions the calibrator was fitted on 5: apply it to predictions "
    r"of the same model",
)
def _calibrate_without_source(tmp):
    from harness.uncertainty import calibrators

    calibrators.calibrate(["temperature"], _preds(k=5), _preds())


# ------------------------------------------------------------------------------ A14-07: from_pretrained keywords
@bad_input(
    "export",
    "Classifier.from_pretrained(export, num_classes=5) (audit14 A14-07: the 10-class model returned without a word; "
    "also head=..., strict=False, a typo: every keyword huggingface_hub passed on was dropped)",
    ValueError,
    r"^Classifier\.from_pretrained got keyword argument\(s\) num_classes, strict it does not read: it loads the export "
    r"as it was saved .*replace_head\(model, num_classes=K",
)
def _from_pretrained_unread_keywords(tmp):
    from harness.models import Classifier, ModelConfig, build_model

    build_model(ModelConfig("test_resnet", 10, {"covariance": "none"})).save_pretrained(tmp / "export")
    assert Classifier.from_pretrained(tmp / "export", map_location="cpu").config.num_classes == 10  # its own options
    Classifier.from_pretrained(tmp / "export", num_classes=5, strict=False)


# ------------------------------------------------------------------------------ A14-12: stacked noise in a pack
@bad_input(
    "packs",
    "harness data pack cifar10n OUT label_set=worse label_noise.kind=symmetric label_noise.rate=0.2 (audit14 A14-12: "
    "rc 0, the human 'worse' labels flipped again and baked into the shards; A13-24's rule covered harness upstream)",
    click.ClickException,
    r"data\.label_noise\.kind=symmetric with data\.label_set=worse: the synthetic noise would flip the CIFAR-10N human "
    r"labels \(worse\) again.*set data\.label_noise=null for the human labels alone, or data\.label_set=clean",
)
def _pack_cifar10n_human_and_synthetic_noise(tmp):
    from harness.cli import main

    args = ["label_set=worse", "label_noise.kind=symmetric", "label_noise.rate=0.2", "limit_train=100"]
    try:
        main(
            ["data", "pack", "cifar10n", str(tmp / "pk"), "--shard-size", "50", f"path={tmp}", *args],
            standalone_mode=False,
        )
    finally:
        assert not (tmp / "pk").exists(), "a pack written before the refusal"


# ------------------------------------------------------------------------------ A14-13: one class, streaming
@bad_input(
    "uncertainty",
    "streaming NLL fed [5, 1] logits, one class (audit14 A14-13: 0.0, a perfect score, from NLL, Brier, ECE, MCE, "
    "AdaptiveECE and AURC; the array metrics refused K = 1)",
    ValueError,
    r"^preds has K = 1 class \(shape \(5, 1\)\): a softmax over one class is p = 1 whatever the input, so every "
    r"single-label metric would be perfect .*give every class's log-probability \(K >= 2\)",
)
def _streaming_one_class(tmp):
    import torch

    from harness.uncertainty import streaming

    for metric in (streaming.Brier(), streaming.ECE(), streaming.AURC()):
        try:
            metric.update(torch.zeros(5, 1), torch.zeros(5, dtype=torch.long))
        except ValueError as e:
            assert "K = 1 class" in str(e), e
        else:
            raise AssertionError(f"{type(metric).__name__} took one class")
    streaming.NLL().update(torch.randn(5, 1), torch.zeros(5, dtype=torch.long))


# ------------------------------------------------------------------------------ A14-01: a pack inside a run
@bad_input(
    "packs",
    "harness data pack digits runs/base --split train, runs/base a finished run (audit14 A14-01: rc 0, a train/ pack "
    "of 3 shards written into the run folder)",
    click.ClickException,
    r"^OUT .*base \(its split folder .*base/train\) is inside the run folder .*base \(it holds run\.json\), which "
    r"would then hold harness data pack's files beside its own .*give OUT a folder outside",
)
def _pack_into_a_run(tmp):
    from harness.cli import main

    (tmp / "base").mkdir()
    (tmp / "base" / "run.json").write_text("{}\n")  # what marks a harness run folder
    try:
        main(
            ["data", "pack", "digits", str(tmp / "base"), "--shard-size", "500", "--split", "train"],
            standalone_mode=False,
        )
    finally:
        assert not (tmp / "base" / "train").exists(), "a pack written into the run"


# ------------------------------------------------------------------------------ A14-11: --keep without --work-dir
@bad_input(
    "bench",
    "harness bench data --keep without --work-dir (audit14 A14-11: rc 0, the data kept in a random "
    "/tmp/harness-bench-data-* folder that no output line or table named)",
    click.UsageError,
    r"^--keep keeps the generated data, and without --work-dir it would be kept in a new folder .*give --work-dir DIR",
)
def _bench_data_keep_without_work_dir(tmp):
    from harness.cli import main

    args = ["--size", "200", "--keep", "--batch-size", "16", "--batches", "1", "--warmup", "0", "--steps", "1"]
    main(["bench", "data", *args, "--repeats", "1", "--out", str(tmp / "bd.md")], standalone_mode=False)
