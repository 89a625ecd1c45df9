"""Bad inputs found by the thirteenth reliability audit in the keys a run's choices do not read (``audit13 A13-16``):
a key of another loss, optimiser, source or covariance named in the overrides at its default value passed the rule
that compared values with the default, so the user who asked for ε = 0.1 label smoothing (the usual ε, and the
default) without ``train.loss=label_smoothing`` trained with none. A key the overrides name is now refused at any
value; a config file (a built-in one, or a run's config.yaml) that lists every default still loads."""

from __future__ import annotations

from bad_inputs_audit8_experiment import _run
from bad_inputs_audit9_config import CLI_ERROR, CONFIGS, _upstream
from bad_inputs_audit10_flags import _pack

from bad_inputs import bad_input, handled

_UNREAD = "named in the overrides, it is refused at its default too"


# ------------------------------------------------------------------------------ A13-16: a named key at its default
@bad_input(
    "upstream",
    "train.label_smoothing=0.1 (its default) without train.loss=label_smoothing (audit13 A13-16: rc 0, trained with "
    "the plain NLL, predictions byte-identical to the run without it; 0.2 was refused)",
    CLI_ERROR,
    r"train\.label_smoothing=0\.1 is read only by train\.loss=label_smoothing, and this run's loss is nll: remove "
    r"train\.label_smoothing, or use train\.loss=label_smoothing \(" + _UNREAD,
)
def _label_smoothing_at_default(tmp):
    _upstream(tmp, "train.log_with=[]", "train.label_smoothing=0.1")


@bad_input(
    "upstream",
    "optim.name=adamw optim.momentum=0.9 (SGD's momentum at its default; audit13 A13-16: accepted, AdamW ran without "
    "it)",
    CLI_ERROR,
    r"optim\.momentum=0\.9 is read only by optim\.name=sgd, and this run's optimiser is adamw: remove optim\.momentum, "
    r"or use optim\.name=sgd \(" + _UNREAD,
)
def _momentum_at_default_under_adamw(tmp):
    _upstream(tmp, "optim.name=adamw", "optim.momentum=0.9")


@bad_input(
    "upstream",
    "optim={name: adamw, betas: [0.9, 0.999], momentum: 0.9} (a whole section naming SGD's momentum at its default; "
    "audit13 A13-16)",
    CLI_ERROR,
    r"optim\.momentum=0\.9 is read only by optim\.name=sgd, and this run's optimiser is adamw",
)
def _momentum_in_a_section_override(tmp):
    _upstream(tmp, "optim={name: adamw, betas: [0.9, 0.999], momentum: 0.9}")


@bad_input(
    "upstream",
    "model.head.train_mc_samples=1000 (its default) on digits_hom's covariance=none (audit13 A13-16: accepted, the "
    "head draws no samples)",
    CLI_ERROR,
    r"model\.head: train_mc_samples=1000 is for a head that draws noise .*covariance='none' draws no noise: leave "
    r"train_mc_samples unset \(its default, 1000\), or choose a noisy covariance",
)
def _head_option_at_default(tmp):
    _upstream(tmp, "model.head.train_mc_samples=1000")


@bad_input(
    "upstream",
    "data.label_set=clean (its default) on digits (audit13 A13-16: accepted, only cifar10n reads it)",
    CLI_ERROR,
    r"data\.label_set=clean is read only by data\.source=cifar10n, and this run's source is digits: remove "
    r"data\.label_set, or use data\.source=cifar10n \(" + _UNREAD,
)
def _label_set_at_default(tmp):
    _upstream(tmp, "data.label_set=clean")


@bad_input(
    "packs",
    "harness data pack digits OUT limit_train=20 label_set=clean (its default; audit13 A13-16: packed, index.json "
    "recorded a label set digits do not have)",
    CLI_ERROR,
    r"data\.label_set=clean is read only by data\.source=cifar10n, and this run's source is digits",
)
def _pack_label_set_at_default(tmp):
    _pack(tmp, "limit_train=20", "label_set=clean")


@bad_input(
    "experiment",
    "upstream_overrides naming train.label_smoothing=0.1 without train.loss=label_smoothing (audit13 A13-16: the "
    "study's runs trained with the plain NLL)",
    ValueError,
    r"train\.label_smoothing=0\.1 is read only by train\.loss=label_smoothing, and this run's loss is nll",
)
def _experiment_label_smoothing_at_default(tmp):
    _run(tmp, "upstream_overrides=[train.epochs=1,data.limit_train=128,data.limit_eval=64,train.label_smoothing=0.1]")


@handled(
    "config",
    "a config file listing every default (digits_hom.yaml resolved, as a run's config.yaml: optim.betas under sgd, "
    "train.label_smoothing under nll), and train.label_smoothing=0.1 over a file's 0.3 (the restore fix the refusal "
    "names) (audit13 A13-16: only the overrides' keys count at any value)",
    r"loads: .*config\.yaml.*restored",
)
def _file_listing_defaults_loads(tmp):
    import yaml

    from harness.config import load_config, to_yaml
    from harness.upstream.config import UpstreamConfig, validate

    cfg = load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", [f"output_dir={tmp / 'r'}"])
    text = to_yaml(cfg)
    listed = yaml.safe_load(text)
    assert listed["optim"]["betas"] == [0.9, 0.999] and listed["train"]["label_smoothing"] == 0.1, listed
    (tmp / "config.yaml").write_text(text)
    again = load_config(UpstreamConfig, tmp / "config.yaml")
    validate(again)
    assert again == cfg
    (tmp / "own.yaml").write_text(f"base: {CONFIGS / 'digits_hom.yaml'}\ntrain: {{label_smoothing: 0.3}}\n")
    restored = load_config(UpstreamConfig, tmp / "own.yaml", ["train.label_smoothing=0.1", f"output_dir={tmp / 'o'}"])
    validate(restored)
    assert restored.train.label_smoothing == 0.1 and restored.train.loss == "nll"
    assert not (tmp / "r").exists() and not (tmp / "o").exists()
    return "loads: digits_hom resolved as a run's config.yaml validates; label_smoothing 0.3 -> 0.1 restored"
