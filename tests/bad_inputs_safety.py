"""Bad inputs that would escape a folder, clobber another writer's files, run twice at once, redirect loading,
or pass silently: names, outputs, locks, settings checked before any work, loaded files.

Every case here does what a careless or hostile user would do; none trains a model (refusals come first).
"""

from __future__ import annotations

import errno
import io
import json
import os
from pathlib import Path

import click

from bad_inputs import ROOT, bad_input, bad_settings
from bad_inputs_uncertainty import make_run

CLI_ERROR = click.ClickException


def _cli(*args: str) -> None:
    from harness.cli import main

    main(list(args), standalone_mode=False)


def upstream_cli(*settings: str, config: str = "digits_hom.yaml") -> None:
    """``harness upstream --no-progress --config upstream/configs/<config> SETTINGS`` as a user types it (the catalogue's
    one spelling of an upstream command; each case gives its own settings, output_dir among them)."""
    _cli("upstream", "--no-progress", "--config", str(ROOT / "upstream" / "configs" / config), *settings)


def _experiment(tmp: Path, *overrides: str, text: "str | None" = None) -> None:
    """``harness run`` on the digits experiment (or the experiment file ``text``) with its folders two levels
    inside ``tmp`` (so a name with ``../../`` would still land inside ``tmp``): it must refuse before any run
    folder is made, and nothing named ``escaped*`` may appear anywhere under ``tmp``."""
    from harness.experiment import load_experiment, run_experiment

    name = "digits"
    if text is not None:
        (tmp / "exp.yaml").write_text(text)
        name = str(tmp / "exp.yaml")
    base = tmp / "a" / "b"
    overrides = tuple(o.replace("{tmp}", str(tmp)) for o in overrides)
    roots = [f"runs_root={base / 'runs'}", f"results_root={base / 'results'}"]
    given = {o.split("=", 1)[0] for o in overrides}  # a key is given once, as a user would
    exp = load_experiment(name, (*[r for r in roots if r.split("=", 1)[0] not in given], *overrides))
    try:
        run_experiment(exp, progress=lambda s: None)
    finally:
        assert not (base / "runs" / "digits").exists(), "work started before the error"
        assert not list(tmp.rglob("escaped*")), "a name escaped its folder"


def _read_only(tmp: Path) -> Path:
    """A folder nothing can be written under, for root too: a path below a regular file."""
    (tmp / "file").write_text("")
    return tmp / "file" / "below"


def _model_pt(path: Path, classes: int = 10, **config) -> Path:
    """A real harness model.pt of a tiny digits model, its stored config changed by ``config``."""
    import torch

    from harness.models import ModelConfig, build_model, save_model

    model = build_model(ModelConfig("test_resnet", classes, {"covariance": "none"}))
    save_model(model, path)
    if config:
        payload = torch.load(path, weights_only=True)
        payload["config"] = {**payload["config"], **config}
        torch.save(payload, path)
    return path


# ------------------------------------------------------------------------------------------------ names
_NAMES = "a name that would leave its folder: {}"
bad_settings(
    "names",
    _NAMES,
    lambda tmp, o: _experiment(tmp, o),
    [
        (
            "experiment name=../../escaped (harness run)",
            "name=../../escaped",
            r"experiment name '\.\./\.\./escaped' must be "
            r"a plain name",
        ),
        (
            "experiment name=/tmp/escaped (absolute)",
            "name={tmp}/escaped",
            r"experiment name '/.*/escaped' must be a plain",
        ),
        ("experiment name='' (empty)", "name=''", r"experiment name '' must be a plain name"),
        ("experiment name=.hidden (starts with a dot)", "name=.hidden", r"experiment name '\.hidden' must be a plain"),
        ("experiment name with a space", "name='my run'", r"experiment name 'my run' must be a plain name"),
    ],
)


@bad_input(
    "names",
    "a method named ../../../../escaped_method in an experiment file (harness run)",
    match=r"method name '\.\./\.\./\.\./\.\./escaped_method' must be a plain name",
)
def _method_escape(tmp):
    _experiment(
        tmp,
        text="base: " + str(ROOT / "harness" / "experiments" / "digits.yaml") + "\nmethods:\n"
        "  ../../../../escaped_method: {covariance: none}\n",
    )


@bad_input(
    "names", "a method name with a slash (methods: {het/v2: ...})", match=r"method name 'het/v2' must be a plain"
)
def _method_slash(tmp):
    _experiment(tmp, "methods={het/v2: {covariance: low_rank}}")


@bad_input(
    "names", "a condition named ../x (conditions: {../x: ...})", match=r"condition name '\.\./x' must be a plain"
)
def _condition_escape(tmp):
    _experiment(
        tmp,
        text="base: " + str(ROOT / "harness" / "experiments" / "digits.yaml") + "\nconditions:\n"
        "  ../x: {methods: [hom], seeds: [0]}\n",
    )


@bad_input("names", "a multi-label method named ../ml", match=r"multilabel method name '\.\./ml' must be a plain name")
def _multilabel_escape(tmp):
    _experiment(
        tmp,
        text="base: " + str(ROOT / "harness" / "experiments" / "digits.yaml") + "\nmultilabel:\n"
        "  seeds: [0]\n  methods:\n    ../ml: {covariance: none, link: sigmoid}\n",
    )


@bad_input(
    "names",
    "an ensemble name ../../x (harness ensemble --name)",
    CLI_ERROR,
    r"--name: name '\.\./\.\./x' must be a plain name",
)
def _ensemble_name(tmp):
    make_run("a", 0), make_run("b", 1)
    _cli("ensemble", "--members", "a", "b", "--name", "../../x")


@bad_input(
    "names",
    "a report name /tmp/x (harness report --name, absolute)",
    CLI_ERROR,
    r"report name '/tmp/x' must be a plain name",
)
def _report_absolute(tmp):
    make_run("a", 0)
    _cli("report", "a", "--name", "/tmp/x", "--out-root", "results", "--no-covariance")


@bad_input(
    "names",
    "an OOD set named ../x (harness shift --ood ../x:source=...)",
    CLI_ERROR,
    r"OOD set name '\.\./x' must be a plain name",
)
def _ood_escape(tmp):
    from bad_inputs_shift import _run

    _cli("shift", "--members", str(_run("a")), "--ood", "../x:source=image_folder,path=/data")


@bad_input(
    "names",
    "an OOD set name with a space (--ood 'my set:source=...')",
    CLI_ERROR,
    r"OOD set name 'my set' must be a plain name",
)
def _ood_space(tmp):
    from bad_inputs_shift import _run

    _cli("shift", "--members", str(_run("a")), "--ood", "my set:source=image_folder,path=/data")


@bad_input(
    "names",
    "a custom task name .hidden (harness downstream --tasks .hidden=FOLDER:K)",
    CLI_ERROR,
    r"custom task name '\.hidden' must be a plain name",
)
def _task_hidden(tmp):
    from bad_inputs_downstream import downstream, task_folder

    downstream("--tasks", f".hidden={task_folder(tmp)}:5")


@bad_input(
    "names",
    "a link inside the runs folder that leads out of it (runs/digits -> /tmp)",
    match=r"leads outside .* \(through a link\)",
)
def _link_escape(tmp):
    (tmp / "runs").mkdir()
    (tmp / "elsewhere").mkdir()
    (tmp / "runs" / "digits").symlink_to(tmp / "elsewhere")
    from harness.experiment import load_experiment, run_experiment

    exp = load_experiment("digits", (f"runs_root={tmp / 'runs'}", f"results_root={tmp / 'results'}"))
    try:
        run_experiment(exp, progress=lambda s: None)
    finally:
        assert not any((tmp / "elsewhere").iterdir()), "a run was written through the link"


# ------------------------------------------------------------------------------------------------ outputs
@bad_input(
    "outputs",
    "harness ensemble --out a finished run folder that is not a member",
    CLI_ERROR,
    r"--out c is a run folder: an ensemble there would replace the run's predictions",
)
def _ensemble_into_run(tmp):
    make_run("a", 0), make_run("b", 1), make_run("c", 2)
    before = (Path("c") / "predictions.npz").read_bytes()
    try:
        _cli("ensemble", "--members", "a", "b", "--out", "c")
    finally:
        assert (Path("c") / "predictions.npz").read_bytes() == before, "the run's predictions were replaced"


@bad_input(
    "outputs",
    "harness ensemble --out a folder holding the user's own files",
    CLI_ERROR,
    r"holds files no ensemble wrote \(no ensemble\.json\).*--overwrite",
)
def _ensemble_into_user_folder(tmp):
    make_run("a", 0), make_run("b", 1)
    Path("mine").mkdir()
    Path("mine/notes.txt").write_text("mine")
    _cli("ensemble", "--members", "a", "b", "--out", "mine")


@bad_input(
    "outputs",
    "harness ensemble --out --overwrite a folder holding someone else's predictions.npz",
    CLI_ERROR,
    r"holds predictions\.npz that no ensemble wrote: even with --overwrite",
)
def _ensemble_overwrite_foreign(tmp):
    make_run("a", 0), make_run("b", 1)
    Path("mine").mkdir()
    Path("mine/predictions.npz").write_bytes(b"someone else's")
    try:
        _cli("ensemble", "--members", "a", "b", "--out", "mine", "--overwrite")
    finally:
        assert Path("mine/predictions.npz").read_bytes() == b"someone else's"


@bad_input(
    "outputs",
    "harness ensemble --out below a file (cannot be written)",
    CLI_ERROR,
    r"--out .* cannot be written .*choose a writable folder",
)
def _ensemble_unwritable(tmp):
    make_run("a", 0), make_run("b", 1)
    _cli("ensemble", "--members", "a", "b", "--out", str(_read_only(tmp)))


@bad_input(
    "outputs",
    "harness report into a folder holding the user's own files",
    CLI_ERROR,
    r"results/mine exists and holds files no report wrote.*--overwrite",
)
def _report_into_user_folder(tmp):
    make_run("a", 0)
    Path("results/mine").mkdir(parents=True)
    Path("results/mine/paper.tex").write_text("mine")
    try:
        _cli("report", "a", "--name", "mine", "--out-root", "results", "--no-covariance")
    finally:
        assert sorted(p.name for p in Path("results/mine").iterdir()) == ["paper.tex"]


@bad_input(
    "outputs",
    "harness report --overwrite into a folder holding the user's own report.md and report.json "
    "(audit 2026-11-27 R27: both were replaced)",
    CLI_ERROR,
    r"results/mine holds report\.md, report\.json that no report wrote: even with --overwrite they are not "
    r"replaced",
)
def _report_overwrite_user_report(tmp):
    make_run("a", 0)
    Path("results/mine").mkdir(parents=True)
    for name in ("report.md", "report.json"):
        Path("results/mine", name).write_text("USER DATA")
    try:
        _cli("report", "a", "--name", "mine", "--out-root", "results", "--no-covariance", "--overwrite")
    finally:
        assert all(Path("results/mine", n).read_text() == "USER DATA" for n in ("report.md", "report.json"))
        assert sorted(p.name for p in Path("results/mine").iterdir()) == ["report.json", "report.md"]


@bad_input(
    "outputs",
    "harness report --out-root below a file (cannot be written)",
    CLI_ERROR,
    r"Not a directory|cannot be written",
)
def _report_unwritable(tmp):
    make_run("a", 0)
    _cli("report", "a", "--name", "r", "--out-root", str(_read_only(tmp)), "--no-covariance")


@bad_input(
    "outputs",
    "harness shift on a run whose shift/ holds the user's own files",
    CLI_ERROR,
    r"shift exists and holds files harness shift did not write.*--overwrite",
)
def _shift_into_user_folder(tmp):
    from bad_inputs_shift import _run

    run = _run("a")
    (run / "shift").mkdir()
    (run / "shift" / "notes.txt").write_text("mine")
    _cli("shift", "--members", str(run), "--corruptions", "frost")


@bad_input(
    "outputs",
    "harness run whose results/<name> holds the user's own files",
    ValueError,
    r"results/digits exists and holds files no report wrote",
)
def _experiment_results_taken(tmp):
    (tmp / "a" / "b" / "results" / "digits").mkdir(parents=True)
    (tmp / "a" / "b" / "results" / "digits" / "draft.md").write_text("mine")
    _experiment(tmp)


# ------------------------------------------------------------------------------------------------ locks
@bad_input(
    "locks",
    "a second `harness run` in a runs_root another harness run is using",
    ValueError,
    r"being written by another process \(PID \d+, .*one harness run at a time uses a runs_root",
)
def _second_experiment(tmp):
    from harness.experiment.stages import EXPERIMENT_LOCK
    from harness.io import RunLock

    with RunLock(tmp / "a" / "b" / "runs", name=EXPERIMENT_LOCK, clean=False):  # stands for the other harness run
        _experiment(tmp)


# ------------------------------------------------------------------------------------------ checked first
bad_settings(
    "checks",
    "`harness run` with {} (refused before any run)",
    lambda tmp, o: _experiment(tmp, o),
    [
        (
            "methods: [] (a list, not a mapping)",
            "methods=[]",
            r"override methods=\[\]: .*a list where a mapping is expected",
        ),
        ("seeds=[0,1 (an unclosed list)", "seeds=[0,1", r"override seeds=\[0,1: the value of seeds is not valid YAML"),
        ("a negative seed", "seeds=[-1]", r"seeds must be a whole number in \[0, 2\*\*32 - 1\]"),
        ("an unknown downstream task", "downstream.tasks=[cifar1000]", r"downstream: .*cifar1000"),
        (
            "optim.weight_decay=-1",
            "upstream_overrides=[optim.weight_decay=-1]",
            r"optim\.weight_decay must be in \[0, 1\]",
        ),
        (
            "optim.decay_factor=-1",
            "upstream_overrides=[optim.decay_factor=-1]",
            r"optim\.decay_factor must be in \(0, 1\]",
        ),
        ("optim.lr=0", "upstream_overrides=[optim.lr=0]", r"optim\.lr must be in \(0, 100\]"),
        (
            "num_factors above the number of classes",
            "methods.het.num_factors=50",
            r"num_factors=50 exceeds the 10 classes of the data",
        ),
        (
            "model.num_classes other than the data's",
            "upstream_overrides=[model.num_classes=20]",
            r"model\.num_classes=20 but the data has 10 classes",
        ),
        (
            "data.image_size=100000",
            "upstream_overrides=[data.image_size=100000]",
            r"data\.image_size=100000 exceeds 1024",
        ),
        ("workers=0", "workers=0", r"workers must be a whole number in \[1, 256\]"),
    ],
)


@bad_input(
    "checks",
    "`harness run` with runs_root below a file (cannot be written; refused before any run)",
    match=r"runs_root .* cannot be written .*runs_root=\.\.\.",
)
def _runs_root_unwritable(tmp):
    from harness.experiment import load_experiment, run_experiment

    exp = load_experiment("digits", (f"runs_root={_read_only(tmp)}", f"results_root={tmp / 'results'}"))
    run_experiment(exp, progress=lambda s: None)


@bad_input(
    "checks",
    "`harness run` with results_root below a file (refused before any run, not at the report)",
    match=r"results_root .* cannot be written .*results_root=\.\.\.",
)
def _results_root_unwritable(tmp):
    _experiment(tmp, f"results_root={_read_only(tmp)}")


@bad_input(
    "checks", "`harness run` with a downstream task whose folder does not exist", ValueError, r"downstream: .*birds"
)
def _downstream_missing_folder(tmp):
    _experiment(tmp, f"downstream.tasks=[birds={tmp / 'nowhere' / 'birds'}:5]")


def _upstream(tmp: Path, override: str) -> None:
    from bad_inputs_upstream import _config_case

    _config_case(tmp, override)


bad_settings(
    "checks",
    "upstream config setting `{}`",
    _upstream,
    [
        ("optim.weight_decay=-1", "optim.weight_decay=-1", r"optim\.weight_decay must be in \[0, 1\] .*, got -1"),
        ("optim.cov_weight_decay=-0.1", "optim.cov_weight_decay=-0.1", r"optim\.cov_weight_decay must be in \[0, 1\]"),
        ("optim.decay_factor=0", "optim.decay_factor=0", r"optim\.decay_factor must be in \(0, 1\]"),
        ("optim.decay_factor=2", "optim.decay_factor=2", r"optim\.decay_factor must be in \(0, 1\]"),
        ("optim.lr=nan", "optim.lr=nan", r"optim\.lr must be in \(0, 100\] .*, got nan"),
        ("optim.momentum=1.5", "optim.momentum=1.5", r"optim\.momentum must be in \[0, 1\)"),
        ("optim.min_lr=-1", "optim.min_lr=-1", r"optim\.min_lr must be >= 0"),
        ("optim.clip_grad_norm=0", "optim.clip_grad_norm=0", r"optim\.clip_grad_norm must be > 0"),
        ("optim.betas=[0.9] (one beta)", "optim.betas=[0.9]", r"optim\.betas must be two numbers"),
        ("optim.decay_epochs=[-1]", "optim.decay_epochs=[-1]", r"optim\.decay_epochs must be >= 0"),
        ("seed=-1", "seed=-1", r"seed must be a whole number in \[0, 2\*\*32 - 1\]"),
        ("data.image_size=5000", "data.image_size=5000", r"data\.image_size=5000 exceeds 1024 px"),
        (
            "an override whose list is not closed (decay_epochs=[3,6)",
            "optim.decay_epochs=[3,6",
            r"the value of optim\.decay_epochs is not valid YAML",
        ),
    ],
)


@bad_input(
    "checks",
    "harness shift with a model.pt of 20 classes in a 10-class run folder",
    CLI_ERROR,
    r"has 20 classes but the run's data .* has 10: the model\.pt is not this run's",
)
def _shift_wrong_model(tmp):
    from bad_inputs_shift import _run

    run = _run("a")
    _model_pt(run / "model.pt", classes=20)
    try:
        _cli("shift", "--members", str(run), "--corruptions", "frost", "--examples", "8")
    finally:
        assert not (run / "shift" / "clean" / "predictions.npz").exists()


@bad_input(
    "checks",
    "a predictions.npz with fewer logit rows than labels (harness report)",
    CLI_ERROR,
    r"predictions\.npz is inconsistent: logits \(30, 5\), targets \(40,\)",
)
def _short_logits(tmp):
    import numpy as np

    run = make_run("a", 0)
    with np.load(run / "predictions.npz") as z:
        parts = {k: z[k] for k in z.files}
    parts["logits"] = parts["logits"][:30]
    np.savez(run / "predictions.npz", **parts)
    _cli("report", "a", "--name", "r", "--out-root", "results", "--no-covariance")


@bad_input(
    "checks", "a predictions.npz without logits (harness ensemble)", CLI_ERROR, r"is not a predictions file \(KeyError"
)
def _no_logits(tmp):
    import numpy as np

    make_run("a", 0), make_run("b", 1)
    np.savez("b/predictions.npz", index=np.arange(3))
    _cli("ensemble", "--members", "a", "b", "--out", "ens")


# ------------------------------------------------------------------------------------------- errors
@bad_input(
    "errors",
    "disk full inside torch.save of a checkpoint (torch's 'unexpected pos' RuntimeError)",
    OSError,
    r"disk full while writing .*last\.pt.*run the same command again",
    before=False,
)
def _torch_disk_full(tmp):
    """The real torch error: its writer fails on a full disk (a buffered file whose device refuses bytes after
    the first 500, as ENOSPC does) and torch raises ``RuntimeError: ... unexpected pos``."""
    import harness.io

    from bad_inputs_upstream import _run

    class Full(io.RawIOBase):
        def __init__(self, fd):
            self.fd, self.n = fd, 0

        def writable(self):
            return True

        def write(self, b):
            if self.n + len(b) > 500:
                raise OSError(errno.ENOSPC, "No space left on device")
            self.n += len(b)
            return os.write(self.fd, bytes(b))

        def fileno(self):
            return self.fd

    real = harness.io.os.fdopen

    def fdopen(fd, mode="r", *a, **k):
        if "last.pt" in os.readlink(f"/proc/self/fd/{fd}"):
            return io.BufferedWriter(Full(fd), buffer_size=256)
        return real(fd, mode, *a, **k)

    harness.io.os.fdopen = fdopen
    try:
        _run(tmp, "train.checkpoint_every=1")
    finally:
        harness.io.os.fdopen = real
        assert not list((tmp / "run").rglob("*.tmp")), "a half-written temporary file was left"


@bad_input(
    "errors",
    "upstream_config: /etc/passwd (not a config; no line of it is printed)",
    ValueError,
    r"invalid config /etc/passwd: it holds an entry that is not a setting of UpstreamConfig .*content is not "
    r"shown",
)
def _passwd(tmp):
    if not Path("/etc/passwd").is_file():  # elsewhere: a file of the same shape
        (tmp / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
        target = tmp / "passwd"
    else:
        target = Path("/etc/passwd")
    try:
        _experiment(tmp, f"upstream_config={target}")
    except ValueError as e:
        assert "root" not in str(e).replace(str(target), ""), "the error quotes the file"
        if target != Path("/etc/passwd"):
            raise ValueError(str(e).replace(str(target), "/etc/passwd")) from None
        raise


# ----------------------------------------------------------------------------------------- loading
def _load(tmp: Path, **config) -> None:
    from harness.models import load_model

    load_model(_model_pt(tmp / "model.pt", **config))


bad_settings(
    "loading",
    "a model.pt whose stored config {}",
    lambda tmp, c: _load(tmp, **c),
    [
        (
            "sets backbone_kwargs.checkpoint_path (timm would open that file)",
            {"backbone_kwargs": {"checkpoint_path": "/etc/shadow"}},
            r"sets backbone_kwargs\.checkpoint_path = '/etc/shadow'",
        ),
        (
            "sets backbone_kwargs.pretrained_cfg_overlay (a file to load)",
            {"backbone_kwargs": {"pretrained_cfg_overlay": {"file": "/tmp/x.pth"}}},
            r"sets backbone_kwargs\.pretrained_cfg_overlay",
        ),
        (
            "sets backbone_kwargs.pretrained_cfg (a config that names weights to load)",
            {"backbone_kwargs": {"pretrained_cfg": "x"}},
            r"sets backbone_kwargs\.pretrained_cfg",
        ),
        ("has an extra top-level key", {"loader": "custom"}, r"stored model config has keys"),
        (
            "has an unknown head option",
            {"head": {"covariance": "none", "exec": "x"}},
            r"unknown head options \['exec'\]",
        ),
        ("has a non-integer num_classes", {"num_classes": "10"}, r"needs a backbone name and an integer num_classes"),
        ("has a preprocessing entry that is a path", {"preprocessing": {"mean": "/etc/x"}}, r"has preprocessing"),
    ],
)


@bad_input(
    "loading",
    "a JSON config with a path where a model.pt is expected (harness downstream)",
    CLI_ERROR,
    r"cannot be read as a harness model checkpoint",
)
def _json_as_model(tmp):
    from bad_inputs_downstream import downstream

    Path("model.pt").write_text(json.dumps({"config": {"backbone_kwargs": {"checkpoint_path": "/etc/shadow"}}}))
    downstream("--upstream", "model.pt", "--tasks", "demo")
