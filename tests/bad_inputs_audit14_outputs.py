"""Bad inputs found by the fourteenth reliability audit in the writers of output folders (``audit14 <case id>``):
harness bench's output files and folders written inside a run folder, and two exports into one folder at once."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import click
import pytest
from bad_inputs_audit13_writers import _run

from bad_inputs import bad_input, handled
from bad_inputs_safety import _cli

INSIDE_RUN = r"is inside the run folder .*runs/base \(it holds run\.json\), which would then hold {}'s files"


def _fake_run(tmp: Path) -> Path:
    """A finished run folder as the rule sees one (``run.json``): enough for a refusal before any work."""
    run = tmp / "runs" / "base"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}\n")
    return run


def _nothing_but(folder: Path, names: "set[str]") -> None:
    assert {p.name for p in folder.iterdir()} == names, (
        f"written into {folder}: {sorted(p.name for p in folder.iterdir())}"
    )


# ------------------------------------------------------------------------------ A14-01: bench outputs inside a run
@bad_input(
    "outputs",
    "harness bench heads --quick --repeats 1 --no-compile --out runs/base/h.md (audit14 A14-01: h.md and h.json "
    "written into the finished run runs/base without a word)",
    click.UsageError,
    r"--out .*runs/base/h\.md " + INSIDE_RUN.format(r"harness bench heads") + r" .*: give --out a file outside "
    r".*runs/base",
)
def _bench_heads_into_run(tmp):
    run = _fake_run(tmp)
    try:
        _cli("bench", "heads", "--quick", "--repeats", "1", "--no-compile", "--out", str(run / "h.md"))
    finally:
        _nothing_but(run, {"run.json"})


@bad_input(
    "outputs",
    "harness bench device --dry-run --part correctness --out runs/base/dev (audit14 A14-01: a dev/ folder with "
    "device.md and device.json written into the run; coverage, data, shards and upstream's --out and --work-dir the same)",
    click.UsageError,
    r"--out .*runs/base/dev " + INSIDE_RUN.format(r"harness bench device") + r" .*: give --out a folder outside "
    r".*runs/base",
)
def _bench_device_into_run(tmp):
    run = _fake_run(tmp)
    others = [
        ("--out", "coverage", "--sims", "10", "--setting", "image-dominated", "--out", str(run / "cov.md")),
        ("--work-dir", "data", "--size", "10", "--work-dir", str(run / "w"), "--out", str(tmp / "data.md")),
        ("--out", "data", "--size", "10", "--out", str(run / "data.md")),
        ("--work-dir", "shards", "--work-dir", str(run / "w"), "--out", str(tmp / "s.md")),
        ("--out", "shards", "--out", str(run / "s.md")),
        ("--out", "upstream", "--out", str(run / "u.md")),
    ]
    try:
        for option, *args in others:
            with pytest.raises(click.UsageError, match=f"{option} .* is inside the run folder .*: give {option} a"):
                _cli("bench", *args)
        _cli("bench", "device", "--dry-run", "--part", "correctness", "--out", str(run / "dev"))
    finally:
        _nothing_but(run, {"run.json"})


# ------------------------------------------------------------------------------ A14-06: two exports into one folder
@bad_input(
    "outputs",
    "harness.runs.export_run(run, 'exc') while another export writes exc (audit14 A14-06: no lock; both exports "
    "passed the 'export of another model' check, one was silently lost)",
    ValueError,
    r"exc is being written by another process \(PID .*\): another export is being written there; wait for it to "
    r"finish, or save into another folder than .*exc",
)
def _export_twice_at_once(tmp):
    from harness.io import RunLock
    from harness.runs import export_run

    run = _run(tmp / "runs" / "s1", seed=1)
    with RunLock(tmp / "exc", what="the other export"):  # another process's export, still writing
        try:
            export_run(run, tmp / "exc")
        finally:
            _nothing_but(tmp / "exc", {".lock", ".lock.pid"})  # the other writer's lock only


@handled(
    "outputs",
    "an export folder holding the lock's .lock file after save_pretrained (audit14 A14-06: the export's lock): "
    "still an export, loaded, rewritten by its own model, refused to another, never pushed to the hub",
    r"export with \.lock: loads, counts as an export, rerun passes, another model refused, \.lock not uploaded, "
    r"a failed save into a new folder leaves none",
)
def _export_with_its_lock_file(tmp):
    import huggingface_hub
    import torch

    from harness.folder_paths import output_kind
    from harness.models import Classifier, load_model
    from harness.runs import export_run

    base, s1 = _run(tmp / "runs" / "base"), _run(tmp / "runs" / "s1", seed=1)
    out = export_run(base, tmp / "exc")
    _nothing_but(out, {".lock", "config.json", "model.safetensors", "README.md"})
    assert output_kind(out) == ("export", ("config.json", "model.safetensors"))
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        assert torch.allclose(Classifier.from_pretrained(out)(x), load_model(base / "model.pt").eval()(x), atol=1e-5)
    export_run(base, out)  # the same model again: a rerun, the .lock no file of another writer
    with pytest.raises(ValueError, match=r"exc holds an export of another model .* pass overwrite=True to replace it"):
        export_run(s1, out)
    pushed = {}

    def upload_folder(self, repo_id, folder_path, **kwargs):
        pushed.update(files={p.name for p in Path(folder_path).iterdir()}, ignore=kwargs.get("ignore_patterns"))
        return "commit-url"

    repo = huggingface_hub.RepoUrl("https://huggingface.co/someone/m")
    with (
        mock.patch.object(huggingface_hub.HfApi, "create_repo", lambda self, repo_id, **kw: repo),
        mock.patch.object(huggingface_hub.HfApi, "upload_folder", upload_folder),
    ):
        Classifier.from_pretrained(out).push_to_hub("someone/m", ignore_patterns="*.txt")
    assert ".lock" in pushed["files"] and {"*.txt", ".lock", ".lock.pid"} <= set(pushed["ignore"]), pushed
    features = load_model(base / "model.pt")
    features.reset_classifier(0)
    with pytest.raises(ValueError, match="no head"):
        features.save_pretrained(tmp / "features")
    assert not (tmp / "features").exists(), "a folder only the lock made, left behind"
    return (
        "export with .lock: loads, counts as an export, rerun passes, another model refused, .lock not uploaded, "
        "a failed save into a new folder leaves none"
    )
