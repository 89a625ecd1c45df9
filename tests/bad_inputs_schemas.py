"""Bad inputs found by the fourth reliability audit (2026-11-28, issue 42: "validate by schema"): values the schemas
did not yet hold (cross-field rules, backbone options, an export's config.json, a record's record.json, the head's
arguments, the spellings of a model source) and the type errors of ``key=value`` overrides."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bad_inputs import bad_input, bad_settings, handled
from bad_inputs_safety import _cli, _experiment, _model_pt

UP = "upstream/configs/digits_base.yaml"


def _upstream(tmp: Path, *overrides: str) -> None:
    """``harness upstream`` on the digits base config: it must refuse before the run folder is made."""
    from bad_inputs import ROOT

    out = tmp / "run"
    try:
        _cli("upstream", "--no-progress", "--config", str(ROOT / UP), f"output_dir={out}", *overrides)
    finally:
        assert not out.exists(), "the run folder was made before the error"


bad_settings(
    "upstream",
    "harness upstream with {} (audit 2026-11-28)",
    _upstream,
    [
        (
            "optim.min_lr above optim.lr (U32: the cosine schedule raised the lr)",
            "optim.min_lr=1.0",
            r"optim\.min_lr=1 is above optim\.lr=0\.05: the cosine schedule would raise",
        ),
        ("data.num_classes=-3 (U06: trained)", "data.num_classes=-3", r"data\.num_classes must be a whole number >= 1"),
        (
            "a fractional data.label_noise.seed (U29: a SeedSequence traceback)",
            "data.label_noise.seed=1.5",
            r"data\.label_noise\.seed must be a whole number in \[0, 2\*\*32 - 1\]",
        ),
        (
            "model.backbone_kwargs.drop_rate=.nan (U08: a dropout traceback after the run folder was written)",
            "model.backbone_kwargs.drop_rate=.nan",
            r"model\.backbone_kwargs\.drop_rate must be in \[0, 1\), got nan",
        ),
        (
            "model.backbone_kwargs.in_chans=0 (U13: a convolution traceback)",
            "model.backbone_kwargs.in_chans=0",
            r"model\.backbone_kwargs\.in_chans = 0: the harness cannot use it: the harness feeds 3-channel \(RGB\) images",
        ),
        (
            "model.head.num_factors=.nan (sweep: 'cannot convert float NaN to integer')",
            "model.head.num_factors=.nan",
            r"model\.head: num_factors must be a whole number >= 1 \(or null: the default\), got nan",
        ),
        (
            "model.head.num_factors=0 (sweep: the advice named a stand-in K of 2)",
            "model.head.num_factors=0",
            r"model\.head: num_factors must be a whole number >= 1",
        ),
        (
            "model.num_classes=10**12 (sweep: a storage-overflow RuntimeError)",
            "model.num_classes=1000000000000",
            r"model\.num_classes must be a whole number in \[1, 1000000\]",
        ),
        (
            "train.epochs=1.5 on the command line (U02: the base file was blamed)",
            "train.epochs=1.5",
            r"invalid config \(override 'train\.epochs=1\.5'\): train\.epochs: .* give a whole number",
        ),
    ],
    error=(ValueError, click.ClickException),
)

bad_settings(
    "experiment",
    "`harness run` with {} (audit 2026-11-28)",
    lambda tmp, o: _experiment(tmp, o),
    [
        (
            "a condition seed given twice (X05: one run counted twice, a zero-width interval)",
            "conditions.input_dependent.seeds=[0,0]",
            r"conditions\.input_dependent\.seeds \[0, 0\] repeats a value",
        ),
        ("ensemble_sizes=[3,3] (X27: duplicated rows)", "ensemble_sizes=[3,3]", r"ensemble_sizes \[3, 3\] repeats"),
        (
            "primary.prospective_for naming no study (X08: printed as prospective)",
            "primary.prospective_for=[nope]",
            r"primary\.prospective_for names 'nope', which is not main or a condition",
        ),
        (
            "sigma_readout naming no condition (X18: ignored)",
            "sigma_readout.permuted=nope",
            r"sigma_readout names 'nope', which is not a condition",
        ),
        ("replication=../x (X24: never checked as a name)", "replication=../x", r"replication .*plain name"),
        (
            "a shift seed of -1 (X11: numpy's message after training)",
            "shift.seed=-1",
            r"shift\.seed must be a whole number in \[0, 2\*\*32 - 1\]",
        ),
        (
            "a method's overrides given as one string (X17: read character by character)",
            "methods.hom.overrides=train.epochs=1",
            r"methods\.hom\.overrides must be a list of key=value settings, got 'train\.epochs=1'",
        ),
        (
            "downstream.settings.clip_grad_norm=.nan (X22: the key was not qualified)",
            "downstream.settings.clip_grad_norm=.nan",
            r"downstream\.settings\.clip_grad_norm must be > 0 .*got nan \(numbers must be finite\)",
        ),
        (
            "shift.split=bogus (X13: refused only after the training)",
            "shift.split=bogus",
            r"shift: unknown digits split 'bogus'",
        ),
        (
            "temperature_grid=[.inf] (X30: the rule text did not say finite)",
            "temperature_grid=[.inf]",
            r"temperature_grid must be in \[0\.001, 1000\], got \[inf\] \(numbers must be finite\)",
        ),
        (
            "temperature_grid=[1e12,1,2] (sweep: blamed a run folder's name)",
            "temperature_grid=[1e12,1.0,2.0]",
            r"temperature_grid must be in \[0\.001, 1000\], got \[1000000000000\.0, 1\.0, 2\.0\]",
        ),
        (
            "a frontier schedule with train.epochs=.nan (X03: the frontier was not named)",
            "frontier.schedules={a: [train.epochs=.nan]}",
            r"frontier\.schedules\.a: invalid config \(override 'train\.epochs=\.nan'\): train\.epochs: .*whole number",
        ),
        (
            "a condition's optim.lr=-1 (the condition is named first)",
            "conditions.input_dependent.upstream_overrides=[optim.lr=-1]",
            r"conditions\.input_dependent: method 'hom': optim\.lr must be in \(0, 100\] .*, got -1",
        ),
        (
            "seeds=0, not a list (X20: an AnyNode message)",
            "seeds=0",
            r"invalid config \(override 'seeds=0'\): seeds: .*give a list, e\.g\. \[0, 1\]",
        ),
    ],
)


@bad_input(
    "experiment",
    "a transfer study with one split size (X25: an IndexError in the task builder)",
    match=r"transfer\.sizes must be 2 numbers, each a whole number >= 1",
)
def _transfer_sizes(tmp):
    from harness.experiment import load_experiment
    from harness.experiment.transfer import run_transfer

    exp = load_experiment("cifar10n_transfer", (f"runs_root={tmp / 'runs'}", "transfer.sizes=[800]"))
    run_transfer(exp, progress=lambda s: None)
    assert not (tmp / "runs").exists()


def _export(tmp: Path, edit) -> Path:
    """A het export (save_pretrained) whose config.json is changed by ``edit(config)``."""
    from harness.models import ModelConfig, build_model

    model = build_model(ModelConfig("test_resnet", 10, {"covariance": "low_rank", "num_factors": 2}))
    model.save_pretrained(tmp / "export")
    path = tmp / "export" / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    return tmp / "export"


def _from_pretrained(tmp: Path, edit) -> None:
    from harness.models import Classifier

    Classifier.from_pretrained(_export(tmp, edit))


for _what, _edit, _match in [
    (
        "backbone_kwargs.in_chans=-1 (E09: a negative-dimension traceback)",
        lambda c: c["harness"]["model"].update(backbone_kwargs={"in_chans": -1}),
        r"config\.json: backbone_kwargs\.in_chans = -1: the harness cannot use it: the harness feeds 3-channel",
    ),
    (
        "a head that is a list (E18: a ** TypeError)",
        lambda c: c["harness"]["model"].update(head=[]),
        r"config\.json: the stored model config has head = \[\], not a mapping",
    ),
    (
        "preprocessing.interpolation='bogus' (E06: loaded, failed late in a sweep)",
        lambda c: c["harness"]["model"].update(preprocessing={"interpolation": "bogus"}),
        r"preprocessing\.interpolation must be one of nearest, .*bicubic.*, got 'bogus'",
    ),
    (
        "folded_temperature=-2 (E11: loaded into the card)",
        lambda c: c["harness"].update(folded_temperature=-2),
        r"harness\.folded_temperature = -2 must be null or a finite number > 0",
    ),
    (
        "head temperature NaN (E01: the message named no file)",
        lambda c: c["harness"]["model"]["head"].update(temperature=float("nan")),
        r"config\.json: its stored model config does not build a model \(temperature must be a finite",
    ),
]:
    bad_input("export", f"Classifier.from_pretrained of an export whose config.json has {_what}", match=_match)(
        lambda tmp, edit=_edit: _from_pretrained(tmp, edit)
    )


@handled("sources", "Classifier.from_pretrained('local-dir:FOLDER') (S-a: huggingface_hub's HFValidationError)")
def _from_pretrained_local_dir(tmp):
    from harness.models import Classifier

    model = Classifier.from_pretrained(f"local-dir:{_export(tmp, lambda c: None)}")
    assert model.num_classes == 10
    return "loaded: local-dir:PATH is the folder, as for every other command"


@bad_input(
    "sources",
    "Classifier.from_pretrained of a model.pt file (S-b: huggingface_hub's HFValidationError)",
    match=r"is a file: Classifier\.from_pretrained takes the folder .*harness\.models\.load_model",
)
def _from_pretrained_model_pt(tmp):
    from harness.models import Classifier

    Classifier.from_pretrained(_model_pt(tmp / "model.pt"))


@bad_input(
    "sources",
    "Classifier.from_pretrained('timm:test_resnet') (S-b: huggingface_hub's HFValidationError)",
    match=r"names a backbone, not a harness export: load it with harness\.sources\.load_source",
)
def _from_pretrained_timm(tmp):
    from harness.models import Classifier

    Classifier.from_pretrained("timm:test_resnet")


@bad_input(
    "downstream",
    "--batch-size 30 --micro-batch 8 (D07: trained 4 x 8 = 32 examples a step, recorded 30)",
    (ValueError, click.ClickException),
    r"batch_size=30 is not a multiple of micro_batch=8: .* e\.g\. 6",
)
def _micro_batch(tmp):
    _cli(
        "downstream",
        "--upstream",
        str(_model_pt(tmp / "model.pt")),
        "--tasks",
        "demo_rotation",
        "--batch-size",
        "30",
        "--micro-batch",
        "8",
        "--out",
        str(tmp / "out"),
    )
    assert not (tmp / "out").exists()


@bad_input(
    "import",
    "harness import with limit_eval=-3 (I08: scored 356 of 359 images, rc 0)",
    (ValueError, click.ClickException),
    r"limit_eval must be",
)
def _import_limit(tmp):
    from bad_inputs import ROOT

    _cli(
        "import",
        "--model",
        str(_model_pt(tmp / "model.pt")),
        "--data",
        str(ROOT / UP),
        "--out",
        str(tmp / "o"),
        "limit_eval=-3",
    )


@bad_input(
    "head",
    "HeteroscedasticHead with 3 temperature_bounds (H06: a bare unpack error)",
    match=r"temperature_bounds must be 2 numbers \(lower, upper\), got \(0\.3, 3, 5\)",
)
def _three_bounds(tmp):
    from harness.heads import HeteroscedasticHead

    HeteroscedasticHead(8, 5, learn_temperature=True, temperature_bounds=(0.3, 3, 5))


@bad_input(
    "head",
    "HeteroscedasticHead with init='flax', cov_init_scale=inf (H12: a RuntimeError at initialisation)",
    match=r"cov_init_scale must be a finite number > 0 .*got inf",
)
def _infinite_scale(tmp):
    from harness.heads import HeteroscedasticHead

    HeteroscedasticHead(8, 5, init="flax", cov_init_scale=float("inf"))


@bad_input("head", "hetify of a string (K07: an AttributeError)", TypeError, r"hetify takes a torch\.nn\.Module")
def _hetify_string(tmp):
    from harness.heads import hetify

    hetify("resnet", layer="fc")


@bad_input("integrity", "a record.json cut short (RC01: reported as missing)", match=r"record\.json is not valid JSON")
def _record_json_cut(tmp):
    from harness.records import HASHES_FILE, save_record, verify_record

    from bad_inputs_uncertainty import make_run

    run = make_run(tmp / "run")
    (run / "model.pt").write_bytes(b"weights")
    assert save_record(run, tmp / "rec")
    text = (tmp / "rec" / HASHES_FILE).read_text()
    (tmp / "rec" / HASHES_FILE).write_text(text[: len(text) // 2])
    verify_record(tmp / "rec")


@bad_input(
    "sources",
    "harness downstream --upstream RUN_FOLDER (D04: advice about config.json only)",
    (FileNotFoundError, ValueError, click.ClickException),
    r"this folder holds a harness model\.pt: give .*model\.pt' itself",
)
def _run_folder_source(tmp):
    run = tmp / "run"
    run.mkdir()
    _model_pt(run / "model.pt")
    _cli("downstream", "--upstream", str(run), "--tasks", "demo_rotation", "--out", str(tmp / "out"))


@bad_input(
    "head",
    "HeteroscedasticHead with temperature_bounds=(0, 3) and a fixed τ (sweep: accepted, unused)",
    match=r"temperature_bounds must be \(lower, upper\) with lower < upper, each a finite number at least 0\.001 and at most 1000, got \(0\.0, 3\.0\)",
)
def _unused_bounds(tmp):
    from harness.heads import HeteroscedasticHead

    HeteroscedasticHead(8, 5, temperature_bounds=(0, 3))


@bad_input(
    "downstream",
    "FinetuneConfig(resolution=[0, 32]) from Python (sweep: accepted; only the sweep's settings checked it)",
    match=r"resolution must be 2 numbers, each a whole number >= 1 \(resize, crop\), got \[0, 32\]",
)
def _finetune_resolution(tmp):
    from harness.downstream.finetune import FinetuneConfig

    FinetuneConfig(resolution=[0, 32])
