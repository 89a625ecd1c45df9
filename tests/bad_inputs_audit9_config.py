"""Bad inputs found by the ninth reliability audit in configs, experiment files, manifests and the entry point
(``audit9 <case id>``): schedule keys that do nothing, a type error's wrong fix, method options overridden and keys
repeated without a word, manifest labels and encodings, a Ctrl-C during the imports. Every refusal comes before any
work."""

from __future__ import annotations

import sys
from pathlib import Path
from unittest import mock

import click
from bad_inputs_audit8_experiment import _run
from bad_inputs_audit8_packs import _manifest, _pack_manifest

from bad_inputs import bad_input, handled

CLI_ERROR = click.ClickException
CONFIGS = Path(__file__).resolve().parents[1] / "upstream" / "configs"


def _upstream(tmp: Path, *overrides: str) -> None:
    """``harness upstream --no-progress --config digits_hom.yaml train.epochs=1 ... overrides`` (the audit's
    ``up[hom]``); it must refuse before the run folder is made."""
    from harness.cli import main

    quick = ["train.epochs=1", "data.limit_train=128", "data.limit_eval=64", f"output_dir={tmp / 'r'}"]
    try:
        main(
            ["upstream", "--no-progress", "--config", str(CONFIGS / "digits_hom.yaml"), *quick, *overrides],
            standalone_mode=False,
        )
    finally:
        assert not (tmp / "r").exists(), "work started before the error"


# ------------------------------------------------------------------------------ C15, C16, U05: optim keys
@bad_input(
    "upstream",
    "optim.schedule=step without decay points (audit9 C15: trained at a constant rate under a step schedule)",
    CLI_ERROR,
    r"optim\.schedule=step decays .* none are given.*set optim\.decay_epochs .* or optim\.decay_steps",
)
def _step_without_points(tmp):
    _upstream(tmp, "optim.schedule=step")


@bad_input(
    "upstream",
    "optim.decay_epochs=[0.5,0.2] under schedule=cosine (audit9 C16: saved in config.yaml and unused)",
    CLI_ERROR,
    r"optim\.decay_epochs=\[0\.5, 0\.2\] is read only by optim\.schedule=step.*schedule is cosine: remove "
    r"optim\.decay_epochs, or use optim\.schedule=step",
)
def _decay_points_under_cosine(tmp):
    _upstream(tmp, "optim.decay_epochs=[0.5,0.2]")


@bad_input(
    "upstream",
    "optim.schedule=[cosine], a list for a string key (audit9 U05: told to give a list, e.g. [0, 1])",
    CLI_ERROR,
    r"optim\.schedule: .*it takes a string: one of step, cosine, constant, not a list",
)
def _schedule_as_list(tmp):
    _upstream(tmp, "optim.schedule=[cosine]")


# ------------------------------------------------------------------------------ X01-X03: experiment overrides
@bad_input(
    "experiment",
    "methods.hom.overrides=[model.head.covariance=low_rank] (audit9 X01: the method named hom trained a low-rank head)",
    ValueError,
    r"methods\.hom\.overrides sets model\.head\.covariance .*which method 'hom' defines itself \(covariance: none\).*"
    r"define another method",
)
def _method_covariance_overridden(tmp):
    _run(tmp, "methods.hom.overrides=[model.head.covariance=low_rank]")


@bad_input(
    "experiment",
    "upstream_overrides set model.head.covariance=diagonal (audit9 X02: the method named hom trained a diagonal head)",
    ValueError,
    r"upstream_overrides sets model\.head\.covariance \(model\.head\.covariance=diagonal\), which method 'hom' "
    r"defines itself",
)
def _shared_covariance_override(tmp):
    _run(
        tmp,
        "upstream_overrides=[train.epochs=1,data.limit_train=128,data.limit_eval=64,model.head.covariance=diagonal]",
    )


@bad_input(
    "experiment",
    "train.epochs twice in upstream_overrides (audit9 X03: the last value won without a word)",
    ValueError,
    r"upstream_overrides set train\.epochs twice \(train\.epochs=1 and train\.epochs=2\): only the last would count",
)
def _repeated_experiment_override(tmp):
    _run(tmp, "upstream_overrides=[train.epochs=1,data.limit_train=128,data.limit_eval=64,train.epochs=2]")


@bad_input(
    "upstream",
    "harness upstream with train.epochs given twice (audit9 X03: the last value won without a word)",
    CLI_ERROR,
    r"the overrides set train\.epochs twice \(train\.epochs=1 and train\.epochs=3\): only the last would count",
)
def _repeated_cli_override(tmp):
    _upstream(tmp, "train.epochs=3")


# ------------------------------------------------------------------------------ K01: Ctrl-C during the imports
class _Interrupted:
    """A meta-path finder that raises KeyboardInterrupt on importing ``module`` (a Ctrl-C while torch loads)."""

    def __init__(self, module: str = "harness.cli") -> None:
        self.module = module

    def find_spec(self, name, path=None, target=None):
        if name == self.module:
            raise KeyboardInterrupt
        return None


def _exit_when_interrupted(module: str, call, meta_path: list) -> "tuple[object, str]":
    """``call()`` with the harness.cli modules unloaded and a Ctrl-C on importing ``module`` (``meta_path`` after
    the interrupting finder): its exit status and what it wrote on stderr."""
    import io

    err, code = io.StringIO(), None
    modules = {k: v for k, v in sys.modules.items() if k != "harness.cli" and not k.startswith("harness.cli.")}
    with mock.patch.dict(sys.modules, modules, clear=True):
        with mock.patch.object(sys, "meta_path", [_Interrupted(module), *meta_path]):
            with mock.patch.object(sys, "stderr", err), mock.patch.object(sys, "argv", ["harness.cli", "--version"]):
                try:
                    call()
                except SystemExit as e:
                    code = e.code
    assert code == 130 and err.getvalue() == "interrupted\n", (code, err.getvalue())
    return code, err.getvalue().strip()


@handled(
    "cli",
    "Ctrl-C while the harness command imports torch (audit9 K01: a KeyboardInterrupt traceback, rc -2)",
    r"exit 130, 'interrupted'",
)
def _interrupt_during_imports(tmp):
    import tomllib

    from harness.__main__ import main

    code, err = _exit_when_interrupted("harness.cli", main, [])
    scripts = tomllib.loads((CONFIGS.parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["harness"] == "harness.__main__:main", scripts
    return f"exit {code}, {err!r}"


@handled(
    "cli",
    "Ctrl-C while python -m harness.cli imports torch (audit9 K01, its second spelling: a KeyboardInterrupt traceback)",
    r"exit 130, 'interrupted'; import harness\.cli alone imports no torch",
)
def _interrupt_during_module_imports(tmp):
    import runpy
    import subprocess

    def run() -> None:
        runpy.run_module("harness.cli", run_name="__main__", alter_sys=True)

    code, err = _exit_when_interrupted("harness.cli.app", run, list(sys.meta_path))
    probe = "import sys, harness.cli; print('torch' in sys.modules)"
    light = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert light == "False", light  # the package is light: the Ctrl-C handling comes before torch's import
    return f"exit {code}, {err!r}; import harness.cli alone imports no torch"


# ------------------------------------------------------------------------------ N04, N05, N07, N08: manifests
@bad_input(
    "data",
    'harness data pack of a manifest with "labels": ["1"] (audit9 N04: a JSON string coerced to label 1)',
    CLI_ERROR,
    r"train\.jsonl line 2: label '1' is not a class id \(a JSON string\): JSON label ids must be JSON integers; "
    r"write 1",
)
def _string_label(tmp):
    rows = [{"path": "img/0.png", "labels": [0]}, {"path": "img/1.png", "labels": ["1"]}]
    _pack_manifest(tmp, _manifest(tmp, *rows))


@bad_input(
    "data",
    "harness data pack of a CSV manifest row img/0.png,0 0 (audit9 N05: packed as labels [0, 0])",
    CLI_ERROR,
    r"train\.csv line 1: label 0 is listed twice in one entry \(\[0, 0\]\); list each label once",
)
def _repeated_label(tmp):
    m = _manifest(tmp)
    (m / "train.jsonl").unlink()
    (m / "train.csv").write_text("img/0.png,0 0\nimg/1.png,1\n")
    _pack_manifest(tmp, m)


@handled(
    "data",
    "a CSV manifest saved with a UTF-8 byte-order mark (audit9 N07: the first image read as '\\ufeffimg/0.png')",
    r"img/0\.png read",
)
def _bom_manifest(tmp):
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    m = _manifest(tmp)
    (m / "train.jsonl").unlink()
    (m / "train.csv").write_bytes("img/0.png,0\nimg/1.png,1\n".encode("utf-8-sig"))
    ds = build_split(DataConfig(source="manifest", path=str(m), num_classes=3), "train")
    assert len(ds) == 2 and ds[0][0] is not None
    return "img/0.png read (the BOM dropped)"


@bad_input(
    "data",
    "a CSV manifest in UTF-16 (audit9 N08: \"'utf-8' codec can't decode byte 0xff\" without the file)",
    ValueError,
    r"train\.csv is not UTF-8 text .*a manifest must be UTF-8; save it as UTF-8",
)
def _utf16_manifest(tmp):
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    m = _manifest(tmp)
    (m / "train.jsonl").unlink()
    (m / "train.csv").write_bytes("img/0.png,0\nimg/1.png,1\n".encode("utf-16"))
    build_split(DataConfig(source="manifest", path=str(m), num_classes=3), "train")
