"""Bad inputs found by the twentieth reliability audit that the lead fixed (``audit20 <case id>``)."""

from __future__ import annotations

import click
from bad_inputs_audit9_config import CONFIGS

from bad_inputs import bad_input, handled
from bad_inputs_uncertainty import _cli


# ------------------------------------------------------------------------------ A20-09: another model.pt in a run
@bad_input(
    "runs",
    "a run folder whose model.pt was replaced by another run's, then harness shift, export_run and harness report "
    "(audit20 A20-09: rc 0, the other weights exported and shifted with the run's metrics and training data)",
    click.ClickException,
    r"^.*bx/model\.pt is not the model the run's metrics\.json and predictions measured \(its weights' digest is "
    r"\w+\.\.\., metrics\.json records \w+\.\.\.\): put the run's own model\.pt back, or train the run again",
)
def _replaced_model(tmp):
    import shutil

    import pytest

    from harness.runs import export_run

    config = ["--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1", "train.log_with=[]"]
    for name, seed in (("a", 0), ("b", 1)):
        _cli("upstream", "--no-progress", *config, "data.limit_train=100", f"seed={seed}", f"output_dir={tmp / name}")
    shutil.copytree(tmp / "a", tmp / "bx")
    shutil.copy(tmp / "b" / "model.pt", tmp / "bx" / "model.pt")
    with pytest.raises(ValueError, match=r"bx/model\.pt is not the model the run's metrics\.json"):
        export_run(tmp / "bx", tmp / "exp")
    assert not (tmp / "exp").exists()
    export_run(tmp / "a", tmp / "exp_a")  # its own model.pt: exported
    _cli("shift", "-m", str(tmp / "bx"), "--corruptions", "gaussian_noise", "--severities", "1", "--ood", "none")


# ------------------------------------------------------------------------------ A20-11: few-shot every N steps alone
@handled(
    "upstream",
    "train.fewshot_every_steps=2 with train.fewshot_every 0 (audit20 A20-11: accepted, and the monitor never ran: its "
    "tasks were read only with fewshot_every)",
    r"^the few-shot monitor probed at steps and after the last epoch: \d+ records$",
)
def _fewshot_by_steps_alone(tmp):
    config = ["--config", str(CONFIGS / "digits_hom.yaml"), "train.epochs=1", "train.log_with=[]"]
    monitor = ["train.fewshot_every_steps=2", "train.fewshot_tasks=[demo_digit]", "train.fewshot_shots=[1]"]
    _cli("upstream", "--no-progress", *config, "data.limit_train=256", "data.limit_eval=20", *monitor,
         f"output_dir={tmp / 'r'}")  # fmt: skip
    lines = (tmp / "r" / "fewshot.jsonl").read_text().splitlines()
    assert len(lines) >= 2, lines
    return f"the few-shot monitor probed at steps and after the last epoch: {len(lines)} records"
