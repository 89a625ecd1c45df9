"""Bad inputs found by the sixteenth reliability audit that the lead fixed (``audit16 <case id>``)."""

from __future__ import annotations

import click
from bad_inputs_audit8_experiment import TINY
from bad_inputs_audit9_config import CONFIGS
from bad_inputs_audit12_plan import _run as _experiment

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli, make_run


# ------------------------------------------------------------------------------ A16-01: held-out data and labels
@bad_input(
    "report",
    "harness report of two runs whose held-out predictions hold other labels (audit16 A16-01: rc 0, the calibration "
    "and per-class sections averaged one run on noisy held-out labels with one on clean ones)",
    click.ClickException,
    r"^hom seed 1 \(.*b/heldout_predictions\.npz\) saved predictions of another held-out split than hom seed 0 "
    r"\(.*a/heldout_predictions\.npz\): example index \d+ has "
    r"target .* \(different evaluation data or labels\); the report's calibration, temperature-scaling and per-class "
    r"sections read the held-out predictions, so report runs of one experiment together",
)
def _report_heldout_labels_differ(tmp):
    from harness.uncertainty.predictions import Predictions

    a, b = make_run(tmp / "a", seed=0, heldout=True), make_run(tmp / "b", seed=1, heldout=True)
    held = Predictions.load(b / "heldout_predictions.npz")
    noisy = (held.targets + 1) % len(held.class_names)  # the other run's held-out labels: every one flipped
    Predictions(held.logits, noisy, held.index, held.class_names, held.link, str(b)).save(b / "heldout_predictions.npz")
    try:
        _cli("report", str(a), str(b), "--out-root", str(tmp / "rep"), "--name", "r1", "--no-covariance")
    finally:
        assert not (tmp / "rep" / "r1" / "report.md").exists()


@bad_input(
    "report",
    "harness report of two runs of one method and one seed (runs/base and runs/clean: the same head, seed 0, other "
    "training labels) (audit16 A16-01: rc 0, two rows 'hom seed 0' told apart by nothing, averaged as seeds)",
    click.ClickException,
    r"^.*base and .*clean are both 'hom seed 0': the report names each entry by its method and seed .* and averages "
    r"a method's runs as its seeds.*report them apart \(harness report .*clean --name <another name>\)",
)
def _report_one_method_and_seed_twice(tmp):
    base = make_run(tmp / "base", seed=0)
    clean = make_run(tmp / "clean", seed=1)  # other predictions (another training), but seed 0 in its config
    (clean / "config.yaml").write_text((clean / "config.yaml").read_text().replace("seed: 1", "seed: 0"))
    try:
        _cli("report", str(base), str(clean), "--out-root", str(tmp / "rep"), "--name", "r2", "--no-covariance")
    finally:
        assert not (tmp / "rep" / "r2" / "report.md").exists()


@bad_input(
    "experiment",
    "an experiment with methods het4 and het8 (one head variant, 4 and 8 factors) (found with audit16 A16-01: the "
    "report names runs by head and loss, so both were 'het seed 0' and their rows merged as seeds of one method)",
    ValueError,
    r"^methods het4 and het8 both train a 'het' model \(one head variant and loss\): the report names a run by its "
    r"head and loss .* so their rows would merge; keep one in methods and study the other setting as a condition",
)
def _experiment_methods_named_alike(tmp):
    methods = "methods: {hom: {covariance: none}, het4: {covariance: low_rank, num_factors: 4}, het8: {covariance: "
    _experiment(
        tmp, "tn", "", TINY.replace("methods: {hom: {covariance: none}}", methods + "low_rank, num_factors: 8}}")
    )


# ------------------------------------------------------------------------------ A16-02 / A16-03: upstream settings
def _upstream(tmp, *overrides: str) -> None:
    """``harness upstream --config digits_hom.yaml OVERRIDES``; refused before the run folder is made."""
    try:
        _cli("upstream", "--config", str(CONFIGS / "digits_hom.yaml"), f"output_dir={tmp / 'run'}", *overrides)
    finally:
        assert not (tmp / "run").exists(), "work started before the error"


@bad_input(
    "upstream",
    "harness upstream --config digits_hom.yaml data.image_size=16, the config's eval_resize: 32 kept (audit16 A16-02: "
    "rc 0, top-1 31% against 99% with eval_resize=18: every metric scored on the centre quarter of each digit)",
    click.ClickException,
    r"^data\.eval_resize=32 with data\.image_size=16: the evaluation's centre crop keeps 50% of each image's side, "
    r"less than any training crop \(data\.crop_scale=0\.6 keeps at least 77%\).*give data\.eval_resize in \[16, 20\], "
    r"or data\.eval_resize=null",
)
def _eval_crop_narrower_than_training(tmp):
    _upstream(tmp, "data.image_size=16")


@handled(
    "upstream",
    "harness upstream data.image_size=16 data.eval_resize=20 (the widest crop the rule of audit16 A16-02 allows) and "
    "data.eval_resize=null: both accepted by the configuration check",
)
def _eval_crop_as_wide_as_training(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig, validate

    for size in ("20", "null"):
        overrides = ["data.image_size=16", f"data.eval_resize={size}", f"output_dir={tmp / size}"]
        validate(load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", overrides))
    return "eval_resize 20 and null accepted with image_size 16 (crop_scale 0.6: at least 77% of the side)"


@bad_input(
    "upstream",
    "harness upstream model.head_bias_init=5 with a softmax head (audit16 A16-03: rc 0, every metric equal to the run "
    "without it: one bias on every logit cancels in a softmax)",
    click.ClickException,
    r"^model\.head_bias_init=5 is read only by the sigmoid link, and this run's head has link softmax: .*remove "
    r"model\.head_bias_init, or set model\.head\.link=sigmoid",
)
def _bias_init_softmax(tmp):
    _upstream(tmp, "model.head_bias_init=5")


# ------------------------------------------------------------------------------ A16-09: an export inside a data pack
@bad_input(
    "outputs",
    "Classifier.save_pretrained('pk/train/exp'), pk/train a data pack's split folder (audit16 A16-09: the export "
    "written beside the pack's index.json and shards, where a few-shot, sweep or report folder is refused)",
    ValueError,
    r"^save_directory=.*pk/train/exp is inside the data pack split folder .*pk/train \(it holds index\.json\), which "
    r"would then hold save_pretrained's files beside its own",
)
def _save_pretrained_into_a_pack(tmp):
    import json

    from harness.data.shard_index import INDEX_FORMAT
    from harness.models import ModelConfig, build_model

    split = tmp / "pk" / "train"
    split.mkdir(parents=True)
    (split / "index.json").write_text(json.dumps({"format": INDEX_FORMAT}))  # what marks a pack's split folder
    (tmp / "mine").mkdir()
    (tmp / "mine" / "index.json").write_text('{"pages": 3}')  # a user's own index.json marks nothing
    model = build_model(ModelConfig("test_resnet", 10, {"covariance": "none"}))
    model.save_pretrained(tmp / "mine" / "exp")
    try:
        model.save_pretrained(split / "exp")
    finally:
        assert not (split / "exp").exists(), "an export written inside a pack's split folder"


# ------------------------------------------------------------------------------ A16-08: a declaration to come
@bad_input(
    "experiment",
    "primary={metric: nll, split: heldout, declared: 2099-01-01, prospective_for: [main]} (audit16 A16-08: rc 0, the "
    "report said 'declared 2099-01-01, before the runs' of runs trained in 2026)",
    ValueError,
    r"^primary\.declared=2099-01-01 is after today \(\d{4}-\d\d-\d\d, UTC\): the report reads the runs as started "
    r"after the declaration \(prospective\) from it, which a day to come cannot be; give the day the endpoint was "
    r"declared",
)
def _declared_in_the_future(tmp):
    _experiment(tmp, "tf", "primary: {metric: nll, split: heldout, declared: '2099-01-01', prospective_for: [main]}\n")
