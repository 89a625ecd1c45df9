"""Bad inputs found by the twenty-fourth reliability audit (``audit24 <case id>``) on the lead's surfaces."""

from __future__ import annotations

import json

import click

from bad_inputs import bad_input


# ------------------------------------------------------------------------------ A24-06: other tasks into fewshot's --out
@bad_input(
    "downstream",
    "harness fewshot --out fsX again with other --tasks, or another --resolution (audit24 A24-06: rc 0, the earlier "
    "tasks' results replaced without --overwrite, while another model, seed or shots was refused as another study)",
    click.ClickException,
    r"^.*fsX holds the few-shot results of another study \(resolution: None there, 16 now\): they would be replaced; "
    r"give another --out, or --overwrite to replace them",
)
def _fewshot_other_tasks(tmp):
    from bad_inputs_uncertainty import _cli

    def fewshot(*more):
        args = ("--model", "timm:resnet10t", "--random-init", "--shots", "1", "--log-with", "none", "--out")
        _cli("fewshot", *args, str(tmp / "fsX"), *more)

    fewshot("--tasks", "demo_digit")
    fewshot("--tasks", "demo_digit")  # the same study again: replaced, as a rerun
    try:
        fewshot("--tasks", "demo_count")
    except click.ClickException as e:
        assert "task_list: ['demo_digit'] there, ['demo_count'] now" in str(e), str(e)
    else:
        raise AssertionError("other tasks replaced the results without --overwrite")
    assert json.loads((tmp / "fsX" / "fewshot.json").read_text())["task_list"] == ["demo_digit"]
    fewshot("--tasks", "demo_digit", "--resolution", "16")
