"""Bad inputs found by the twelfth reliability audit that the lead fixed (``audit12 <case id>``): two commands writing
one folder at once, and names from an experiment file that left their root."""

from __future__ import annotations

import click

from bad_inputs import bad_input
from bad_inputs_safety import _cli
from bad_inputs_shift import _run


# ------------------------------------------------------------------------------ A12-06: two shifts on one run
@bad_input(
    "shift",
    "harness shift on a run while another harness shift writes its sets (audit12 A12-06: both rc 0, one's 'starting "
    "over' cleared the other's sets, shift.json the second's)",
    click.ClickException,
    r"shift is being written by another process .*another harness shift writes this run's shifted predictions; wait "
    r"for it to finish",
)
def _shift_twice_at_once(tmp):
    from harness.io import RunLock

    run = _run(str(tmp / "run"))
    with RunLock(run / "shift", what="the other shift"):  # the other harness shift, still writing
        try:
            _cli("shift", "-m", str(run), "--corruptions", "gaussian_noise", "--severities", "1", "--ood", "none")
        finally:
            assert not (run / "shift" / "shift.json").exists(), "sets were written beside the other writer's"
