"""Bad inputs found by the twelfth reliability audit in the experiment file (``audit12 <case id>``): folders with a
``~`` or a ``$``, the single-pair design and the Σ read-out read only under conditions (and checked only at the
report), and transfer settings passed unchecked to the sweep. Every refusal comes before any work."""

from __future__ import annotations

import os
from pathlib import Path

from bad_inputs_audit8_experiment import TINY

from bad_inputs import bad_input, handled

#: the audit's sp.yaml: two conditions d1, d2 of the tiny experiment
CONDITIONS = (
    "conditions:\n  d1: {upstream_overrides: [data.label_noise.seed=1], methods: [hom], seeds: [0]}\n"
    "  d2: {upstream_overrides: [data.label_noise.seed=2], methods: [hom], seeds: [0]}\n"
)
PAIR = 'single_pair: {arms: [d1, d2], pairs: [["0", "1"], ["2", "3"]], spread_from: [d1], spread: {d1: 0.05}}\n'


def _sp(tmp: Path, extra: str, *overrides: str) -> None:
    """``harness run sp.yaml`` (the tiny experiment, its conditions d1 and d2, and ``extra``) with ``overrides``; it
    must refuse before any run folder is made."""
    from harness.experiment import load_experiment, run_experiment

    (tmp / "sp.yaml").write_text(TINY.replace("name: tiny", "name: sp") + CONDITIONS + extra)
    roots = (f"runs_root={tmp / 'r'}", f"results_root={tmp / 'res'}")
    try:
        run_experiment(load_experiment(str(tmp / "sp.yaml"), (*roots, *overrides)), progress=lambda s: None)
    finally:
        assert not (tmp / "r" / "sp" / "upstream").exists(), "work started before the error"


# ------------------------------------------------------------------------------ A12-02: runs_root=~/x, $HOME/x
@handled(
    "experiment",
    "runs_root=~/NAME quoted or in the YAML file (audit12 A12-02: the runs went to $HOME/NAME, the lock, "
    "sessions.json and downstream/ to a folder literally named ./~/NAME)",
    r"the home folder",
)
def _runs_root_tilde(tmp):
    from harness.experiment import load_experiment

    (tmp / "tiny.yaml").write_text(TINY + "results_root: ~/audit12_res\n")
    exp = load_experiment(str(tmp / "tiny.yaml"), ("runs_root=~/audit12_rr", "reference_root=~/audit12_ref"))
    home = os.path.expanduser("~")
    for key in ("runs_root", "results_root", "reference_root"):
        value = getattr(exp, key)
        assert value.startswith(home) and "~" not in value, (key, value)
    return "~/audit12_rr, ~/audit12_res and ~/audit12_ref read as folders of the home folder (nothing is made)"


@bad_input(
    "experiment",
    "runs_root=$HOME/NAME quoted (audit12 A12-02: refused as method 'hom': output_dir=..., a key never written)",
    ValueError,
    r"^runs_root='\$HOME/audit12_rr' holds a \$: nothing expands variables .*write the folder out",
)
def _runs_root_dollar(tmp):
    from harness.experiment import load_experiment

    (tmp / "tiny.yaml").write_text(TINY)
    load_experiment(str(tmp / "tiny.yaml"), ("runs_root=$HOME/audit12_rr",))


# ------------------------------------------------------------------------------ A12-04, A12-12: read only under ...
@bad_input(
    "experiment",
    "single_pair without sigma_readout (audit12 A12-04: rc 0, the design silently dropped from the report)",
    ValueError,
    r"single_pair=\{arms: \['d1', 'd2'\].* is read only with sigma_readout .*remove single_pair, or give "
    r"sigma_readout",
)
def _single_pair_without_readout(tmp):
    _sp(tmp, PAIR)


@bad_input(
    "experiment",
    "sigma_readout and single_pair with covariance: false (audit12 A12-12: rc 0, both pre-registered sections "
    "dropped from the report without a word)",
    ValueError,
    r"single_pair=.* is read only by the covariance analysis \(covariance: true\), and this experiment has "
    r"covariance: false.*remove single_pair, or set covariance: true",
)
def _single_pair_without_covariance(tmp):
    _sp(tmp, PAIR + "sigma_readout: {clean: d1}\ncovariance: false\n")


@bad_input(
    "experiment",
    "sigma_readout.clean with covariance: false (audit12 A12-12: rc 0, the Σ read-out dropped without a word)",
    ValueError,
    r"sigma_readout\.clean=d1 is read only by the covariance analysis .*remove sigma_readout\.clean, or set "
    r"covariance: true",
)
def _readout_without_covariance(tmp):
    _sp(tmp, "sigma_readout: {clean: d1}\ncovariance: false\n")


# ------------------------------------------------------------------------------ A12-05: single_pair checked late
@bad_input(
    "experiment",
    "single_pair.pairs naming cat and dog on digits (audit12 A12-05: refused only at the report, after every run "
    "trained)",
    ValueError,
    r"single_pair\.pairs names 'cat', 'dog', not classes of the data \(its classes: 0, 1, .*name pairs of its classes",
)
def _single_pair_unknown_classes(tmp):
    _sp(tmp, PAIR.replace('["0", "1"]', "[cat, dog]") + "sigma_readout: {clean: d1}\n")


@bad_input(
    "experiment",
    "single_pair.arms=[d1, d2, d1] (audit12 A12-05: 'too many values to unpack (expected 2)' at the report, after "
    "the training)",
    ValueError,
    r"single_pair\.arms=\['d1', 'd2', 'd1'\] must be two distinct condition names",
)
def _single_pair_three_arms(tmp):
    _sp(tmp, PAIR.replace("[d1, d2]", "[d1, d2, d1]") + "sigma_readout: {clean: d1}\n")


@bad_input(
    "experiment",
    "single_pair.pairs=[[0, 0], [2, 3]] (audit12 A12-05: a pair of one class, never checked)",
    ValueError,
    r"single_pair\.pairs=\[\['0', '0'\], \['2', '3'\]\] must be two pairs of two distinct class names",
)
def _single_pair_pair_of_one(tmp):
    _sp(tmp, PAIR.replace('["0", "1"]', '["0", "0"]') + "sigma_readout: {clean: d1}\n")


@bad_input(
    "experiment",
    "single_pair.spread_from naming no condition (audit12 A12-05: never checked)",
    ValueError,
    r"single_pair\.spread_from names 'nope', which is not a condition of this experiment \(d1, d2\)",
)
def _single_pair_spread_from(tmp):
    _sp(tmp, PAIR.replace("spread_from: [d1]", "spread_from: [nope]") + "sigma_readout: {clean: d1}\n")


@bad_input(
    "experiment",
    "single_pair.pilot_seeds=5 with max_seeds=2 (audit12 A12-05: never checked; the pilot could only lower the seeds)",
    ValueError,
    r"single_pair\.pilot_seeds=5 is more than single_pair\.max_seeds=2 .*give max_seeds >= pilot_seeds",
)
def _single_pair_pilot_over_max(tmp):
    _sp(tmp, PAIR, "sigma_readout={clean: d1}", "single_pair.pilot_seeds=5", "single_pair.max_seeds=2")


# ------------------------------------------------------------------------------ A12-09: transfer.settings
def _transfer(tmp: Path, settings: str) -> None:
    """``harness run tr2.yaml``, a transfer study with ``transfer.settings: {settings}``; it must refuse before any
    work (the experiment's lock, a record restored)."""
    from harness.experiment import load_experiment
    from harness.experiment.transfer import run_transfer

    (tmp / "tr2.yaml").write_text(
        f"name: tr2\nruns_root: {tmp / 'r'}\nresults_root: {tmp / 'res'}\nreference_root: {tmp / 'ref'}\n"
        "transfer: {upstream: tiny, methods: {hom: [hom_s0]}, preset: demo, settings: " + settings + "}\n"
    )
    try:
        run_transfer(load_experiment(str(tmp / "tr2.yaml")), progress=lambda s: None)
    finally:
        assert not (tmp / "r").exists(), "work started before the error"


@bad_input(
    "experiment",
    "transfer.settings with an unknown key bogus (audit12 A12-09: a Python traceback, TypeError: "
    "SweepSettings.__init__() got an unexpected keyword argument 'bogus')",
    ValueError,
    r"^transfer\.settings: .*unexpected keyword argument 'bogus'; see harness\.downstream\.config\.SweepSettings",
)
def _transfer_settings_unknown(tmp):
    _transfer(tmp, "{lrs: [0.01], steps: [2], seeds: 1, bogus: 1}")


@bad_input(
    "experiment",
    "transfer.settings.lrs=[-1] (audit12 A12-09: the message named --lrs, not transfer.settings.lrs)",
    ValueError,
    r"^transfer\.settings\.lrs=\[-1\]: learning rates .*must be a non-empty list of positive numbers",
)
def _transfer_settings_bad_value(tmp):
    _transfer(tmp, "{lrs: [-1], steps: [2], seeds: 1}")
