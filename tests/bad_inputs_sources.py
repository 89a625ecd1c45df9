"""Bad inputs of models from other sources and of this session's options: harness import, harness fewshot, the
downstream noisy head, step-based upstream schedules.

Every case runs the command as a user would (click's CliRunner, ``standalone_mode=False`` so the exception itself
is checked) in the temporary working folder.
"""

from pathlib import Path

import click
import torch

from bad_inputs import bad_input
from bad_inputs_downstream import downstream
from bad_inputs_upstream import _cli, _run

DIGITS = str(Path(__file__).resolve().parents[1] / "upstream" / "configs" / "digits_base.yaml")


def _timm_weights(tmp: Path, num_classes: int) -> str:
    import timm
    from safetensors.torch import save_file

    net = timm.create_model("test_resnet", num_classes=num_classes)
    path = tmp / f"w{num_classes}.safetensors"
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))
    return str(path)


@bad_input(
    "import",
    "weights whose classifier has 7 classes for data of 10",
    click.ClickException,
    r"do not fit .*shape mismatch .*\(7, 96\).*classifier has the data's 10 classes",
)
def import_wrong_classes(tmp):
    try:
        _cli(
            "import",
            "--model",
            "timm:test_resnet",
            "--weights",
            _timm_weights(tmp, 7),
            "--data",
            DIGITS,
            "--out",
            str(tmp / "imported"),
        )
    finally:
        assert not (tmp / "imported").exists(), "the run folder was written before the error"


@bad_input("import", "timm:NAME without --weights", click.ClickException, r"needs --weights FILE")
def import_no_weights(tmp):
    _cli("import", "--model", "timm:test_resnet", "--data", DIGITS, "--out", str(tmp / "imported"))


@bad_input("fewshot", "--shots 0", click.ClickException, r"whole numbers >= 1")
def fewshot_zero_shots(tmp):
    from bad_inputs_downstream import _upstream

    _cli("fewshot", "--model", _upstream(), "--tasks", "demo_digit", "--shots", "0", "--out", str(tmp / "fs"))


@bad_input(
    "downstream",
    "--head bogus (an unknown transfer head)",
    click.ClickException,
    r"unknown head 'bogus'.*hom, diag, het, pe",
)
def downstream_unknown_head(tmp):
    downstream("--tasks", "demo_digit", "--head", "bogus")


@bad_input("downstream", "--head het --temperatures 0,1 (a temperature of 0)", click.ClickException, r"temperatures")
def downstream_zero_temperature(tmp):
    downstream("--tasks", "demo_digit", "--head", "het", "--temperatures", "0,1")


@bad_input("upstream", "train.steps=0", ValueError, r"train.steps must be a whole number of optimiser steps >= 1")
def upstream_zero_steps(tmp):
    _run(tmp, "train.steps=0")


@bad_input("upstream", "optim.warmup_steps with optim.warmup_epochs", ValueError, r"both set")
def upstream_two_warmups(tmp):
    _run(tmp, "optim.warmup_steps=5", "optim.warmup_epochs=1")


@bad_input("upstream", "model.pretrained_file of another architecture", ValueError, r"do not fit")
def upstream_wrong_pretrained_file(tmp):
    import timm

    torch.save(timm.create_model("resnet10t", num_classes=0).state_dict(), tmp / "other.pth")
    _run(tmp, f"model.pretrained_file={tmp / 'other.pth'}")


@bad_input(
    "downstream",
    "--upstream local-dir:<a folder that does not exist>",
    click.ClickException,
    r"no folder at .*nope.* give the folder save_pretrained wrote",
)
def downstream_local_dir_missing(tmp):
    downstream("--upstream", f"local-dir:{tmp / 'nope'}", "--tasks", "demo_digit", "--out", str(tmp / "out"))


@bad_input(
    "downstream",
    "--upstream NAME that is no file, folder or source (the message lists every spelling)",
    click.ClickException,
    r"no upstream checkpoint at 'nope.pt'; give a harness model.pt, a folder "
    r"save_pretrained wrote \(or local-dir:PATH, hf-hub:ORG/NAME\)",
)
def downstream_unknown_source(tmp):
    downstream("--upstream", "nope.pt", "--tasks", "demo_digit", "--out", str(tmp / "out"))
