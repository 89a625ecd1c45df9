"""Bad weight files given to ``harness import``, ``harness downstream`` and ``harness fewshot`` (``--weights``): each
must get the clean error a bad ``model.pt`` gets (a click error naming the file and the fix, before any work, no
traceback, no file contents quoted, no pickled code run), and an import refused leaves no folder behind.

Every case runs the command as a user would (click's CliRunner, ``standalone_mode=False`` so the exception itself is
checked) in the temporary working folder; the files are written there.
"""

import os
import pickle
from pathlib import Path

import click
import numpy as np
import torch
from click.testing import CliRunner

from bad_inputs import bad_input

DIGITS = str(Path(__file__).resolve().parents[1] / "upstream" / "configs" / "digits_base.yaml")
READ = r"cannot be read as (a weights file|the \.npz weights of timm:test_resnet) \(\w+\); give a state dict"
NPZ = r"(NumPy \.npz archive|cannot be read as the \.npz weights of timm:test_resnet \(\w+\)).*give a state dict"
MARKER = "PICKLE_RAN"


class _Payload:
    """An object whose unpickling runs a shell command (what ``weights_only=True`` must refuse)."""

    def __reduce__(self):
        return os.system, (f"touch {MARKER}",)


def _state(tmp: Path) -> dict:
    import timm

    torch.manual_seed(0)
    return {k: v.contiguous() for k, v in timm.create_model("test_resnet", num_classes=10).state_dict().items()}


def _write(tmp: Path, kind: str) -> Path:
    """A bad weights file of ``kind`` in ``tmp``."""
    from safetensors.torch import save_file

    if kind.startswith(("truncated", "empty")):
        suffix = ".safetensors" if kind.endswith("safetensors") else ".pth"
        good = tmp / f"good{suffix}"
        save_file(_state(tmp), str(good)) if suffix == ".safetensors" else torch.save(_state(tmp), good)
        data = good.read_bytes()
        path = tmp / f"bad{suffix}"
        path.write_bytes(data[: len(data) // 2] if kind.startswith("truncated") else b"")
    elif kind == "pickle .pth":
        path = tmp / "bad.pth"
        torch.save({"conv1.weight": _Payload()}, path)
    elif kind == "pickle .safetensors":
        path = tmp / "bad.safetensors"
        path.write_bytes(pickle.dumps({"conv1.weight": _Payload()}))
    elif kind == "npz":
        path = tmp / "bad.npz"
        np.savez(path, conv1=np.zeros((3, 3)))
    elif kind == "passwd link":
        path = tmp / "bad.pth"
        os.symlink("/etc/passwd", path)
    elif kind == "int64":
        path = tmp / "int.safetensors"
        save_file(
            {k: (v * 100).to(torch.int64) if v.is_floating_point() else v for k, v in _state(tmp).items()}, str(path)
        )
    elif kind == "NaN":
        path = tmp / "nan.safetensors"
        state = _state(tmp)
        state["fc.weight"] = torch.full_like(state["fc.weight"], float("nan"))
        save_file(state, str(path))
    else:
        raise AssertionError(kind)
    return path


def _invoke(tmp: Path, args: "list[str]", out: Path) -> None:
    """Run ``harness ARGS``; re-raise its exception after checking that nothing was written, no pickled code ran
    and no line of /etc/passwd is quoted."""
    from harness.cli import main

    try:
        CliRunner().invoke(main, args, standalone_mode=False, catch_exceptions=False)
    except BaseException as e:
        assert "root:" not in str(e), "the message quotes the file"
        raise
    finally:
        assert not (tmp / MARKER).exists(), "a pickled command ran"
        assert not out.exists(), f"{out} was written before the error"


def _import(tmp: Path, kind: str) -> None:
    out = tmp / "imported"
    _invoke(
        tmp,
        [
            "import",
            "--model",
            "timm:test_resnet",
            "--weights",
            str(_write(tmp, kind)),
            "--data",
            DIGITS,
            "--out",
            str(out),
        ],
        out,
    )


def _downstream(tmp: Path, kind: str) -> None:
    out = tmp / "out"
    _invoke(
        tmp,
        [
            "downstream",
            "--upstream",
            "timm:test_resnet",
            "--weights",
            str(_write(tmp, kind)),
            "--tasks",
            "demo_digit",
            "--lrs",
            "0.05",
            "--steps",
            "1",
            "--batch-size",
            "8",
            "--micro-batch",
            "8",
            "--resolution",
            "32,32",
            "--out",
            str(out),
        ],
        out,
    )


def _fewshot(tmp: Path, kind: str) -> None:
    out = tmp / "fs"
    _invoke(
        tmp,
        [
            "fewshot",
            "--model",
            "timm:test_resnet",
            "--weights",
            str(_write(tmp, kind)),
            "--tasks",
            "demo_digit",
            "--shots",
            "1",
            "--out",
            str(out),
        ],
        out,
    )


KINDS = {
    "truncated .pth": READ,
    "truncated .safetensors": READ,
    "empty (0-byte) .pth": READ,
    "empty (0-byte) .safetensors": READ,
    "pickle .pth": READ,
    "pickle .safetensors": READ,
    "npz": NPZ,
    "passwd link": READ,
    "NaN": r"NaN or infinite values \(first: fc\.weight\).*finite values",
    "int64": r"tensor\(s\) of another kind than the model's \(conv1\.0\.weight is int64, the model's is float32.*not an "
    r"integer or quantised copy",
}
WHAT = {
    "truncated .pth": "a truncated .pth",
    "truncated .safetensors": "a truncated .safetensors",
    "empty (0-byte) .pth": "an empty (0-byte) .pth",
    "empty (0-byte) .safetensors": "an empty (0-byte) .safetensors",
    "pickle .pth": "a .pth whose pickle runs a shell command (never run)",
    "pickle .safetensors": "a pickle (running a shell command) named .safetensors (never run)",
    "npz": "an .npz of arbitrary arrays",
    "passwd link": "a .pth that is a symlink to /etc/passwd (not quoted)",
    "NaN": "a .safetensors with NaN weights (no half-written folder left)",
    "int64": "a .safetensors whose float tensors are stored as int64 (audit 2026-11-27 N03/N19: cast without a word)",
}

for _command, _run in (("import", _import), ("downstream", _downstream), ("fewshot", _fewshot)):
    for _kind, _match in KINDS.items():
        _file_kind = _kind.replace("empty (0-byte)", "empty")
        bad_input(_command, f"--weights: {WHAT[_kind]}", click.ClickException, _match)(
            lambda tmp, run=_run, kind=_file_kind: run(tmp, kind)
        )
