"""Bad inputs found by the tenth reliability audit in the typed configs (``audit10 <case id>``): a crop padding without
a bound, settings that the chosen loss, optimiser or source does not read, a number for a switch, a whole number in
exponent notation and a list where a mapping is expected. Every refusal comes before any work."""

from __future__ import annotations

from pathlib import Path

from bad_inputs_audit8_experiment import TINY
from bad_inputs_audit9_config import CLI_ERROR, _upstream

from bad_inputs import bad_input


def _experiment(tmp: Path, line: str, new: str) -> None:
    """``harness run tiny.yaml``, the audit's tiny experiment file with its ``line`` replaced by ``new``; it must refuse
    before any run folder is made."""
    from harness.experiment import load_experiment, run_experiment

    assert line in TINY
    (tmp / "tiny.yaml").write_text(TINY.replace(line, new))
    roots = (f"runs_root={tmp / 'r'}", f"results_root={tmp / 'res'}")
    try:
        run_experiment(load_experiment(str(tmp / "tiny.yaml"), roots), progress=lambda s: None)
    finally:
        assert not (tmp / "r").exists() and not (tmp / "res").exists(), "work started before the error"


# ------------------------------------------------------------------------------ A10-01: crop padding
@bad_input(
    "upstream",
    "data.crop_padding=100000 (audit10 A10-01: a 7.7 TB allocation traceback after the run folder was written)",
    CLI_ERROR,
    r"data\.crop_padding must be a whole number in \[0, 1024\] \(0 = none\), got 100000",
)
def _crop_padding_huge(tmp):
    _upstream(tmp, "data.crop_padding=100000")


@bad_input(
    "upstream",
    "data.crop_padding=32 with data.image_size=32 (audit10 A10-01: a shift that can leave nothing of the image)",
    CLI_ERROR,
    r"data\.crop_padding=32 must be below data\.image_size=32: .*give a few pixels, or 0",
)
def _crop_padding_image_size(tmp):
    _upstream(tmp, "data.crop_padding=32", "data.image_size=32")


# ------------------------------------------------------------------------------ A10-02, A10-05: keys not read
@bad_input(
    "upstream",
    "train.label_smoothing=0.3 with train.loss=nll (audit10 A10-02: saved in config.yaml, never read)",
    CLI_ERROR,
    r"train\.label_smoothing=0\.3 is read only by train\.loss=label_smoothing, and this run's loss is nll: remove "
    r"train\.label_smoothing, or use train\.loss=label_smoothing",
)
def _label_smoothing_unread(tmp):
    _upstream(tmp, "train.label_smoothing=0.3")


@bad_input(
    "upstream",
    "optim.name=adamw optim.momentum=0.5 (audit10 A10-05: saved in config.yaml, never read)",
    CLI_ERROR,
    r"optim\.momentum=0\.5 is read only by optim\.name=sgd, and this run's optimiser is adamw: remove "
    r"optim\.momentum, or use optim\.name=sgd",
)
def _momentum_under_adamw(tmp):
    _upstream(tmp, "optim.name=adamw", "optim.momentum=0.5")


@bad_input(
    "upstream",
    "optim.betas=[0.5,0.5] under optim.name=sgd (audit10 A10-05: the default run's metrics exactly)",
    CLI_ERROR,
    r"optim\.betas=\[0\.5, 0\.5\] is read only by optim\.name=adamw, and this run's optimiser is sgd: remove "
    r"optim\.betas, or use optim\.name=adamw",
)
def _betas_under_sgd(tmp):
    _upstream(tmp, "optim.betas=[0.5,0.5]")


# ------------------------------------------------------------------------------ A10-03: label_set
@bad_input(
    "upstream",
    "data.label_set=bogus on digits (audit10 A10-03: accepted and ignored)",
    CLI_ERROR,
    r"data\.label_set must be one of clean, aggre, random1, random2, random3, worse, got 'bogus'",
)
def _label_set_bogus(tmp):
    _upstream(tmp, "data.label_set=bogus")


@bad_input(
    "upstream",
    "data.label_set=worse on digits (audit10 A10-03: only cifar10n reads it; the run trained on digits' labels)",
    CLI_ERROR,
    r"data\.label_set=worse is read only by data\.source=cifar10n, and this run's source is digits: remove "
    r"data\.label_set, or use data\.source=cifar10n",
)
def _label_set_not_cifar10n(tmp):
    _upstream(tmp, "data.label_set=worse")


# ------------------------------------------------------------------------------ A10-04: a number for a switch
@bad_input(
    "upstream",
    "data.hflip=2 (audit10 A10-04: read as true, the result changed)",
    CLI_ERROR,
    r"override 'data\.hflip=2'\): data\.hflip must be true or false, got 2 \(int\).*give true or false",
)
def _hflip_number(tmp):
    _upstream(tmp, "data.hflip=2")


@bad_input(
    "upstream",
    "train.channels_last=2 (audit10 A10-04: read as true without a word)",
    CLI_ERROR,
    r"train\.channels_last must be true or false, got 2 \(int\)",
)
def _channels_last_number(tmp):
    _upstream(tmp, "train.channels_last=2")


@bad_input(
    "experiment",
    "records: 2 in an experiment file (audit10 A10-04: read as true, results/<name>/records/ written)",
    ValueError,
    r"invalid config \(config .*tiny\.yaml\): records must be true or false, got 2 \(int\)",
)
def _records_number(tmp):
    _experiment(tmp, "records: false", "records: 2")


# ------------------------------------------------------------------------------ A10-06: 1e9 for a whole number
@bad_input(
    "upstream",
    "data.eval_batch_size=1e9 (audit10 A10-06: told to give a whole number, which 1e9 is)",
    CLI_ERROR,
    r"data\.eval_batch_size: .*YAML reads 1e9 as a float \(it has an exponent or a decimal point\); write the whole "
    r"number without them: 1000000000",
)
def _exponent_for_int(tmp):
    _upstream(tmp, "data.eval_batch_size=1e9")


# ------------------------------------------------------------------------------ A10-11: list for a mapping
@bad_input(
    "experiment",
    "methods: {hom: [none]} (audit10 A10-11: told to give a list, which it was)",
    ValueError,
    r"methods\.hom: .*give a mapping of settings, one by one \(methods\.hom\.covariance=none\) or whole "
    r"\(methods\.hom=\{covariance: none\}\)",
)
def _method_as_list(tmp):
    _experiment(tmp, "methods: {hom: {covariance: none}}", "methods: {hom: [none]}")
