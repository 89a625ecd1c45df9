"""Bad inputs found by the thirteenth reliability audit in the command line's paths and the upstream run's files
(``audit13 <case id>``): a file or folder option holding a ``~`` or a ``$`` the shell did not expand (a folder
literally named so was made), a harness run's ``model.pt`` as ``model.pretrained_file``, and a finished run whose
predictions file is damaged (skipped as complete, met only by the report)."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

from bad_inputs_audit8_experiment import TINY
from bad_inputs_audit9_config import CLI_ERROR, CONFIGS

from bad_inputs import bad_input, handled

QUICK = ["train.epochs=1", "data.limit_train=100", "data.limit_eval=50", "train.log_with=[]"]


def _harness(tmp: Path, *args: str) -> None:
    """``harness ARGS`` in-process with ``HOME=tmp/home``; no folder named ``~`` or ``$HOME`` may be made."""
    from harness.cli import main

    (tmp / "home").mkdir(exist_ok=True)
    try:
        with mock.patch.dict(os.environ, {"HOME": str(tmp / "home")}):
            main(list(args), standalone_mode=False)
    finally:
        assert not (tmp / "~").exists() and not (tmp / "$HOME").exists(), "a folder literally named ~ or $HOME"


def _upstream(tmp: Path, folder: str, *overrides: str) -> None:
    """``harness upstream --config digits_hom.yaml`` (1 epoch, 100 examples) into ``tmp/folder``."""
    from harness.cli import main

    args = ["upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), *QUICK]
    main([*args, f"output_dir={tmp / folder}", *overrides], standalone_mode=False)


# ------------------------------------------------------------------------------ A13-01: ~ and $ in path options
@bad_input(
    "cli",
    "harness downstream --out '$HOME/a13ds' (audit13 A13-01: rc 0, the sweep written into a folder literally named "
    "$HOME in the current folder)",
    CLI_ERROR,
    r"^--out '\$HOME/a13ds' holds a \$: nothing expands variables here \(the shell does not in a quoted value, nor "
    r"after --out=\).*write the path out, e.g. .*/home/a13ds$",
)
def _downstream_out_dollar(tmp):
    _harness(tmp, "downstream", "--upstream", "runs/base/model.pt", "--tasks", "demo_digit", "--preset", "demo",
             "--steps", "2", "--seeds", "1", "--log-with", "none", "--out", "$HOME/a13ds")  # fmt: skip


@bad_input(
    "cli",
    "harness data pack digits '$HOME/a13pk' (audit13 A13-01: rc 0, the shards written into ./$HOME/a13pk)",
    CLI_ERROR,
    r"^OUT '\$HOME/a13pk' holds a \$: nothing expands variables here .*e\.g\. .*/home/a13pk$",
)
def _pack_out_dollar(tmp):
    _harness(tmp, "data", "pack", "digits", "$HOME/a13pk", "--shard-size", "50", "limit_train=100")


@bad_input(
    "cli",
    "harness report '~/a13run' --out-root '~/a13rr', a run folder that is not there (audit13 A13-01: the ~ taken "
    "literally, as report --out-root '~/a13rr' made ./~/a13rr)",
    CLI_ERROR,
    r"(Directory|Path) '.*/home/a13run' does not exist",
)
def _report_home_expanded(tmp):
    _harness(tmp, "report", "~/a13run", "--out-root", "~/a13rr")


@handled(
    "cli",
    "harness data pack digits '~/a13pk' (audit13 A13-01: rc 0, the shards written into ./~/a13pk, not the home "
    "folder's a13pk)",
    r"packed into HOME/a13pk",
)
def _pack_out_home(tmp):
    _harness(tmp, "data", "pack", "digits", "~/a13pk", "--shard-size", "50", "limit_train=100")
    assert (tmp / "home" / "a13pk" / "train" / "index.json").is_file()
    return "packed into HOME/a13pk, no folder named ~ made"


# ------------------------------------------------------------------------------ A13-12: a harness model.pt as weights
@bad_input(
    "upstream",
    "model.pretrained_file=<a harness run's model.pt> (audit13 A13-12: refused as weights that 'do not fit the "
    "model', advising harness.models.load_model, which an upstream config cannot do)",
    CLI_ERROR,
    r"model\.pretrained_file='.*base/model\.pt' is a harness run's model\.pt \(format 'harness\.model/1'.*takes a "
    r"backbone's weights: export the run \(.*export_run\('.*base', '.*base_export'\)\"\) and give "
    r"model\.pretrained_file=.*base_export/model\.safetensors",
)
def _pretrained_file_checkpoint(tmp):
    from harness.models import ModelConfig, build_model, save_model

    (tmp / "base").mkdir()
    save_model(build_model(ModelConfig("test_resnet", 10, {"covariance": "none"})), tmp / "base" / "model.pt")
    try:
        _upstream(tmp, "pf1", f"model.pretrained_file={tmp / 'base' / 'model.pt'}")
    finally:
        assert not (tmp / "pf1").exists(), "the run folder was made before the refusal (validate refuses it)"


# ------------------------------------------------------------------------------ A13-13: a damaged predictions.npz
def _damage(file: Path) -> None:
    file.write_bytes(file.read_bytes()[:400])


@bad_input(
    "experiment",
    "harness run of an experiment whose finished run's predictions.npz is truncated (audit13 A13-13: 'already "
    "complete', the damaged file met only by the report after every other stage, on every rerun)",
    ValueError,
    r"r/tiny/upstream/hom_s0 is a finished run \(metrics\.json, model\.pt\), but .*hom_s0/predictions\.npz is not a "
    r"predictions file \(BadZipFile.*restore the file, or write the predictions again from its model\.pt without "
    r"training \(.*reevaluate\('.*hom_s0', force=True\).*or delete .*hom_s0 to train it again",
)
def _experiment_damaged_predictions(tmp):
    from harness.experiment import load_experiment, run_experiment

    (tmp / "tiny.yaml").write_text(TINY)
    roots = (f"runs_root={tmp / 'r'}", f"results_root={tmp / 'res'}")
    run_experiment(load_experiment(str(tmp / "tiny.yaml"), roots), progress=lambda s: None)
    _damage(tmp / "r" / "tiny" / "upstream" / "hom_s0" / "predictions.npz")
    (tmp / "res").rename(tmp / "res_first")
    try:
        run_experiment(load_experiment(str(tmp / "tiny.yaml"), roots), progress=lambda s: None)
    finally:
        assert not (tmp / "res" / "tiny" / "report.md").exists(), "the report was built"


@bad_input(
    "upstream",
    "harness upstream into its finished run folder whose heldout_predictions.npz is truncated (audit13 A13-13: "
    "'already complete; nothing to do', the file met only by what reads it)",
    CLI_ERROR,
    r"run is a finished run .*but .*run/heldout_predictions\.npz is not a predictions file.*reevaluate\(.*or delete",
)
def _upstream_damaged_heldout(tmp):
    _upstream(tmp, "run")
    _damage(tmp / "run" / "heldout_predictions.npz")
    _upstream(tmp, "run")
