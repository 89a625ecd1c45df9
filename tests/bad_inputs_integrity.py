"""The second reliability audit's cases (2026-11-25; ``(audit ID)`` in each description): a config string that would
run a command, a lock that would delete a neighbour's files, packs that lead out of their folder or disagree with
their index, experiment overrides that were dropped, records restored unchecked, schedules that never start, and the
smaller ones. Each gets a clear error before any work (or, where the work reads the input, one naming the file), or
the right result (a ``handled`` case, which checks it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import numpy as np

from bad_inputs import ROOT, bad_input, bad_settings, handled
from bad_inputs_safety import _cli, upstream_cli

CONFIGS = ROOT / "upstream" / "configs"
CLI_ERROR = click.ClickException
MARKER = "PIPE_RAN"


def _defaults(defaults: "list[str]", overrides: "tuple[str, ...]") -> "list[str]":
    """The ``key=value`` defaults whose key the case's overrides do not set (a key is given once, as a user would)."""
    given = {o.split("=", 1)[0] for o in overrides}
    return [d for d in defaults if d.split("=", 1)[0] not in given]


def _upstream_cli(tmp: Path, *overrides: str, config: str = "digits_hom.yaml") -> None:
    """``harness upstream`` as a user types it; the run folder must not exist after a refusal."""
    try:
        upstream_cli(
            *_defaults(["train.epochs=1", "data.limit_train=64", f"output_dir={tmp / 'run'}"], overrides),
            *overrides,
            config=config,
        )
    finally:
        assert not (tmp / MARKER).exists(), "a shell command ran"


def _experiment(tmp: Path, *overrides: str, text: "str | None" = None):
    from bad_inputs_safety import _experiment as run

    run(tmp, *overrides, text=text)


# ------------------------------------------------------------------------------ item 1: no config runs a command
@bad_input(
    "security",
    'data.path="pipe:touch X; echo /x.tar" on the command line of harness upstream (audit N07)',
    CLI_ERROR,
    r"data\.path 'pipe:touch .*' is a pipe: URL, which the harness does not open \(webdataset would "
    r"run it as a shell command\)",
)
def _pipe_cli(tmp):
    _upstream_cli(tmp, "data.source=shards", f"data.path=pipe:touch {tmp / MARKER}; echo /x.tar", "data.label_noise={}")


@bad_input(
    "security",
    'data.path "pipe:..." in a config file that names a base: file (audit N07b)',
    CLI_ERROR,
    r"data\.path 'pipe:.*' is a pipe: URL",
)
def _pipe_config_file(tmp):
    (tmp / "pipe_up.yaml").write_text(
        f"base: {CONFIGS / 'digits_hom.yaml'}\ndata:\n  source: shards\n  path: "
        f'"pipe:touch {tmp / MARKER}; echo /x.tar"\n  label_noise: null\n'
    )
    try:
        _cli("upstream", "--no-progress", "--config", str(tmp / "pipe_up.yaml"), f"output_dir={tmp / 'run'}")
    finally:
        assert not (tmp / MARKER).exists(), "a shell command ran"


@bad_input(
    "security",
    'a run folder\'s config.yaml whose data.path is "pipe:..." (harness shift reads it)',
    CLI_ERROR,
    r"data\.path 'pipe:.*' is a pipe: URL",
)
def _pipe_run_config(tmp):
    from bad_inputs_safety import _model_pt
    from bad_inputs_uncertainty import make_run

    run = make_run(tmp / "a")
    _model_pt(run / "model.pt", 3)
    (run / "config.yaml").write_text(
        f'data:\n  source: shards\n  path: "pipe:touch {tmp / MARKER}; echo /x.tar"\n'
        "model:\n  head:\n    covariance: none\n"
    )
    try:
        _cli("shift", "-m", str(run), "--corruptions", "none", "--ood", "none")
    finally:
        assert not (tmp / MARKER).exists(), "a shell command ran"


bad_settings(
    "security",
    "a URL scheme the harness does not open: {}",
    lambda tmp, o: _upstream_cli(tmp, o),
    [
        (
            "data.path=gs://bucket/shards (gsutil)",
            "data.path=gs://bucket/shards",
            r"data\.path 'gs://bucket/shards' is a gs: URL, which the harness does not",
        ),
        (
            "model.pretrained_file=pipe:cat x",
            "model.pretrained_file=pipe:cat x",
            r"model\.pretrained_file 'pipe:cat x' is a "
            r"pipe: URL",
        ),
        ("output_dir=s3://bucket/run", "output_dir=s3://bucket/run", r"output_dir 's3://bucket/run' is a s3: URL"),
        ("data.cache_dir=hf://x", "data.cache_dir=hf://x", r"data\.cache_dir 'hf://x' is a hf: URL"),
    ],
    CLI_ERROR,
)


@bad_input(
    "security",
    "an experiment whose runs_root is pipe:... (harness run)",
    ValueError,
    r"runs_root 'pipe:touch .*' is a pipe: URL",
)
def _pipe_runs_root(tmp):
    from harness.experiment import load_experiment, run_experiment

    exp = load_experiment("digits", (f"runs_root=pipe:touch {tmp / MARKER}", f"results_root={tmp / 'results'}"))
    run_experiment(exp, progress=lambda s: None)


@bad_input(
    "security",
    "harness data pack with path=pipe:... as a data override",
    CLI_ERROR,
    r"data\.path 'pipe:.*' is a pipe: URL",
)
def _pipe_pack(tmp):
    _cli("data", "pack", "manifest", str(tmp / "pk"), f"path=pipe:touch {tmp / MARKER}", "--shard-size", "5")


@bad_input(
    "security",
    "a shard pattern with a pipe: part (data.path=a.tar::pipe:...)",
    ValueError,
    r"data\.path 'pipe:.*' is a pipe: URL",
)
def _pipe_pattern(tmp):
    from harness.data.shard_index import shard_files

    shard_files(f"{tmp}/a.tar::pipe:touch {tmp / MARKER}", "train")


@bad_input(
    "security",
    'a manifest entry "pipe:touch X" (an image path that is a URL)',
    ValueError,
    r"m/train: image path \(entry 2\) 'pipe:touch .*' is a pipe: URL, which the harness does not open",
)
def _pipe_manifest(tmp):
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    (tmp / "m").mkdir()
    (tmp / "m" / "train.jsonl").write_text(
        json.dumps({"path": "a.png", "labels": [0]})
        + "\n"
        + json.dumps({"path": f"pipe:touch {tmp / MARKER}", "labels": [1]})
        + "\n"
    )
    try:
        build_split(DataConfig(source="manifest", path=str(tmp / "m")), "train")
    finally:
        assert not (tmp / MARKER).exists(), "a shell command ran"


# ------------------------------------------------------------------------------ item 2: a lock cleans only its own
@handled(
    "locks",
    "harness upstream's lock on a folder that holds the user's .notes.tmp and sub/.draft.tmp (audit N05)",
    r"kept",
)
def _lock_user_tmp(tmp):
    from harness.io import RunLock

    users = [tmp / "parent" / ".notes.tmp", tmp / "parent" / "sub" / ".draft.tmp"]
    users[1].parent.mkdir(parents=True)
    for f in users:
        f.write_text("mine")
    orphan = tmp / "parent" / ".config.yaml.abcd1234.tmp"
    orphan.write_text("a killed write of this folder's writer")
    with RunLock(tmp / "parent"):
        pass
    assert all(f.read_text() == "mine" for f in users) and not orphan.exists()
    return ".notes.tmp and sub/.draft.tmp kept; only the writer's own orphan (.config.yaml.abcd1234.tmp) removed"


@handled(
    "locks", "a lock taken on the parent folder of another run that is writing a checkpoint (audit N05b)", r"intact"
)
def _lock_neighbour(tmp):
    from harness.io import RunLock

    live = tmp / "race" / "a" / "checkpoints"
    live.mkdir(parents=True)
    (tmp / "race" / "a" / ".lock").write_text("")
    in_flight = live / ".last.pt.4im1kov4.tmp"
    in_flight.write_bytes(b"half a checkpoint")
    with RunLock(tmp / "race", subfolders=("checkpoints",)):
        pass
    assert in_flight.read_bytes() == b"half a checkpoint"
    return "the other run's in-flight checkpoints/.last.pt.4im1kov4.tmp is intact (nothing below the folder is removed)"


# ------------------------------------------------------------------------------ item 3: packs are checked
def _pack(tmp: Path, name: str = "pk") -> Path:
    """A tiny digits pack (40 examples, 4 shards of 10): ``tmp/name/train``."""
    from harness.data.config import DataConfig
    from harness.data.pack import pack
    from harness.data.sources import build_split

    out = tmp / name / "train"
    pack(build_split(DataConfig(source="digits", limit_train=40), "train"), out, 10, prefix="train", progress=False)
    return out


def _edit_index(folder: Path, change) -> None:
    index = json.loads((folder / "index.json").read_text())
    change(index)
    (folder / "index.json").write_text(json.dumps(index))


def _read_pack(folder: Path) -> list:
    from harness.data.shards import ShardDataset, shard_files

    urls, counts, index = shard_files(str(folder))
    return list(
        ShardDataset(urls, 10, False, counts, shuffle=False, digests=[s.get("labels_sha256") for s in index["shards"]])
    )


_NAMES = r"lists a shard named .*: a pack lists only plain \.tar file names inside its own folder"
bad_settings(
    "packs",
    "index.json naming a shard {}",
    lambda tmp, name: (
        _edit_index(_pack(tmp), lambda i: i["shards"][0].update(name=name)),
        _read_pack(tmp / "pk" / "train"),
    ),
    [
        (
            "../../other/test/test-000000.tar (another pack's test split; audit K08b)",
            "../../other/test/test-000000.tar",
            _NAMES,
        ),
        ("/etc/passwd (audit K09)", "/etc/passwd", _NAMES),
        ("pipe:touch x (a URL)", "pipe:touch x", _NAMES),
        ("sub/train-000000.tar (below the folder)", "sub/train-000000.tar", _NAMES),
    ],
)


@bad_input("packs", "a shard that is a link to a file outside the pack folder", ValueError, _NAMES)
def _shard_link(tmp):
    out = _pack(tmp)
    (out / "train-000000.tar").rename(tmp / "outside.tar")
    (out / "train-000000.tar").symlink_to(tmp / "outside.tar")
    _read_pack(out)


@bad_input(
    "packs",
    "index.json with 5 class names for 10 classes (audit K06, K06b)",
    ValueError,
    r"index\.json is inconsistent \(num_classes 10 but 5 class names",
)
def _index_classes(tmp):
    out = _pack(tmp)
    _edit_index(out, lambda i: i.update(class_names=i["class_names"][:5]))
    _read_pack(out)


@bad_input(
    "packs",
    "index.json whose total disagrees with its shards' counts",
    ValueError,
    r"num_examples 50 is not the sum of the shards' 40",
)
def _index_total(tmp):
    out = _pack(tmp)
    _edit_index(out, lambda i: i.update(num_examples=50))
    _read_pack(out)


@bad_input(
    "packs",
    "index.json counting 9 examples in a shard of 10 (audit K05)",
    ValueError,
    r"shard .*train-000001\.tar holds 10 examples where its index says 9",
    before=False,
)
def _index_undercount(tmp):
    out = _pack(tmp)
    _edit_index(out, lambda i: (i["shards"][1].update(examples=9), i.update(num_examples=39)))
    _read_pack(out)


@bad_input(
    "packs",
    "a shard whose labels were changed after packing (its labels_sha256 differs)",
    ValueError,
    r"the labels of shard .*train-000002\.tar do not match the labels_sha256 its index records",
    before=False,
)
def _shard_labels(tmp):
    import tarfile

    out = _pack(tmp)
    shard = out / "train-000002.tar"
    with tarfile.open(shard) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    with tarfile.open(shard, "w") as t:
        for m, data in members:
            if m.name.endswith(".cls"):
                data = str((int(data) + 1) % 10).encode()
                m.size = len(data)
            t.addfile(m, __import__("io").BytesIO(data))
    _read_pack(out)


def _retar(shard: Path, old: str, new: str) -> None:
    import io
    import tarfile

    with tarfile.open(shard) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    with tarfile.open(shard, "w") as t:
        for m, data in members:
            m.name = m.name.replace(old, new)
            t.addfile(m, io.BytesIO(data))


@bad_input(
    "packs",
    "a tar member named ../../escaped.png (audit K04)",
    ValueError,
    r"shard .*train-000000\.tar has a member named '\.\./\.\./escaped'.*member names with '/' or '\.\.' are "
    r"refused",
    before=False,
)
def _member_traversal(tmp):
    out = _pack(tmp)
    key = __import__("tarfile").open(out / "train-000000.tar").getnames()[0].split(".")[0]
    _retar(out / "train-000000.tar", key, "../../escaped")
    try:
        _read_pack(out)
    finally:
        assert not list(tmp.parent.glob("escaped*")), "a member was written outside"


@bad_input(
    "packs",
    "a tar member whose key is not a row number (photo.png)",
    ValueError,
    r"example 'photo' of .*train-000000\.tar: its key is not a row number",
    before=False,
)
def _member_key(tmp):
    out = _pack(tmp)
    key = __import__("tarfile").open(out / "train-000000.tar").getnames()[0].split(".")[0]
    _retar(out / "train-000000.tar", key, "photo")
    _read_pack(out)


@bad_input(
    "packs",
    "a shard replaced by a text file",
    ValueError,
    r"shard .*train-000003\.tar is \d+ bytes, and .*index\.json records \d+: it is damaged \(cut short, or replaced\); "
    r"run the same harness data pack command again",
)
def _shard_not_tar(tmp):
    out = _pack(tmp)
    (out / "train-000003.tar").write_text("root:x:0:0:root:/root:/bin/bash\n" * 40)
    _read_pack(out)


@handled(
    "packs", "harness data pack of a config with 30% pair-flip label noise (audit item 10)", r"noisy labels packed"
)
def _pack_noise(tmp):
    from click.testing import CliRunner

    from harness.cli import main
    from harness.data.config import DataConfig
    from harness.data.noise import inject_label_noise
    from harness.data.sources import build_split

    res = CliRunner().invoke(
        main,
        [
            "data",
            "pack",
            str(CONFIGS / "digits_hom.yaml"),
            str(tmp / "pk"),
            "limit_train=80",
            "--shard-size",
            "20",
            "--in-order",
        ],
    )
    assert res.exit_code == 0, res.output
    index = json.loads((tmp / "pk" / "train" / "index.json").read_text())
    clean = build_split(DataConfig(source="digits", limit_train=80), "train").labels
    noisy = inject_label_noise(clean, 10, kind="pair_flip", rate=0.3, seed=0)[0]
    got = {i: y for _, y, i in _read_pack(tmp / "pk" / "train")}
    assert [got[i] for i in range(80)] == noisy.tolist() and index["label_noise"]["kind"] == "pair_flip"
    return (
        f"the noisy labels packed, as a run draws them ({index['label_noise']['realised_rate']:.1%} flipped), "
        "recorded in index.json as label_noise"
    )


@handled("packs", "harness data pack with data.label_noise=null", r"clean labels")
def _pack_noise_null(tmp):
    from click.testing import CliRunner

    from harness.cli import main

    res = CliRunner().invoke(
        main,
        [
            "data",
            "pack",
            str(CONFIGS / "digits_hom.yaml"),
            str(tmp / "pk"),
            "limit_train=40",
            "data.label_noise=null",
            "--shard-size",
            "20",
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads((tmp / "pk" / "train" / "index.json").read_text())["label_noise"] is None
    return "no noise: the clean labels packed (index.json label_noise: null)"


@bad_input(
    "outputs",
    "harness data pack into a folder holding the user's notes.txt",
    CLI_ERROR,
    r"holds files harness data pack did not write \(notes\.txt\): choose another OUT folder .*--overwrite",
)
def _pack_user_folder(tmp):
    (tmp / "pk" / "train").mkdir(parents=True)
    (tmp / "pk" / "train" / "notes.txt").write_text("mine")
    try:
        _cli("data", "pack", "digits", str(tmp / "pk"), "limit_train=40", "--shard-size", "20")
    finally:
        assert (tmp / "pk" / "train" / "notes.txt").read_text() == "mine"
        assert sorted(p.name for p in (tmp / "pk" / "train").iterdir()) == ["notes.txt"]


@handled("outputs", "harness data pack --overwrite into a folder holding the user's notes.txt", r"beside")
def _pack_user_folder_overwrite(tmp):
    (tmp / "pk" / "train").mkdir(parents=True)
    (tmp / "pk" / "train" / "notes.txt").write_text("mine")
    _cli("data", "pack", "digits", str(tmp / "pk"), "limit_train=40", "--shard-size", "20", "--overwrite")
    assert (tmp / "pk" / "train" / "notes.txt").read_text() == "mine"
    assert (tmp / "pk" / "train" / "index.json").is_file()
    return "the pack written beside notes.txt, which is unchanged"


def _user_run_folder(tmp: Path) -> Path:
    run = tmp / "run"
    run.mkdir()
    for name in ("model.pt", "metrics.json", "predictions.npz"):
        (run / name).write_text(f"my {name}")
    return run


@bad_input(
    "outputs",
    "harness upstream into a folder holding the user's model.pt, metrics.json, predictions.npz (audit N06)",
    CLI_ERROR,
    r"holds metrics\.json, model\.pt, predictions\.npz that harness upstream did not write: even with --overwrite they "
    r"are not replaced; move them, or choose another output_dir",
)
def _upstream_user_files(tmp):
    run = _user_run_folder(tmp)
    try:
        upstream_cli(
            "train.epochs=1",
            f"output_dir={run}",
        )
    finally:
        assert all((run / n).read_text() == f"my {n}" for n in ("model.pt", "metrics.json", "predictions.npz"))
        assert sorted(p.name for p in run.iterdir()) == ["metrics.json", "model.pt", "predictions.npz"]


@bad_input(
    "outputs",
    "harness upstream --overwrite into a folder holding the user's model.pt",
    CLI_ERROR,
    r"holds metrics\.json, model\.pt, predictions\.npz that harness upstream did not write: even with "
    r"--overwrite they are not replaced",
)
def _upstream_user_files_overwrite(tmp):
    run = _user_run_folder(tmp)
    try:
        upstream_cli(
            "train.epochs=1",
            "--overwrite",
            f"output_dir={run}",
        )
    finally:
        assert all((run / n).read_text() == f"my {n}" for n in ("model.pt", "metrics.json", "predictions.npz"))


@bad_input(
    "outputs",
    "harness upstream with output_dir the parent folder of another run (audit N05b)",
    CLI_ERROR,
    r"holds files harness upstream did not write \(a\)",
)
def _upstream_parent_folder(tmp):
    live = tmp / "race" / "a" / "checkpoints"
    live.mkdir(parents=True)
    (live / ".last.pt.4im1kov4.tmp").write_bytes(b"half a checkpoint")
    try:
        upstream_cli(
            "train.epochs=1",
            f"output_dir={tmp / 'race'}",
        )
    finally:
        assert (live / ".last.pt.4im1kov4.tmp").read_bytes() == b"half a checkpoint"


# ------------------------------------------------------------------------------ item 4: overrides reach the runs
def _tiny(tmp: Path, methods: str, *overrides: str):
    from harness.experiment import load_experiment

    (tmp / "tiny.yaml").write_text(
        f"name: tiny\nupstream_overrides: [train.epochs=1]\nmethods: {methods}\nseeds: [0]\ndownstream: {{tasks: []}}\n"
    )
    return load_experiment(
        str(tmp / "tiny.yaml"), (f"runs_root={tmp / 'runs'}", f"results_root={tmp / 'res'}", *overrides)
    )


HET = "{het: {covariance: low_rank, num_factors: 2, train_mc_samples: 5, eval_mc_samples: 5}}"


@bad_input(
    "experiment",
    "upstream_overrides=[model.head.bogus=1] (audit Y10)",
    ValueError,
    r"method 'hom': unknown head option\(s\) model\.head\.bogus",
)
def _head_bogus(tmp):
    from harness.experiment import run_experiment

    run_experiment(
        _tiny(tmp, "{hom: {covariance: none}}", "upstream_overrides=[model.head.bogus=1]"), progress=lambda s: None
    )


@handled(
    "experiment",
    "upstream_overrides=[train.epochs=1,model.head.temperature=0.25] with a het method (audit Y11)",
    r"temperature: 0\.25",
)
def _head_temperature(tmp):
    from harness.config import to_yaml
    from harness.experiment import validate_experiment

    exp = _tiny(tmp, HET, "upstream_overrides=[train.epochs=1,model.head.temperature=0.25]")
    text = to_yaml(validate_experiment(exp)["main"].configs["het_s0"])
    assert "temperature: 0.25" in text and "num_factors: 2" in text
    return "the run's config.yaml has temperature: 0.25 over the method's head (num_factors 2 kept)"


@bad_input(
    "experiment",
    "a method's own overrides: [model.head.num_factors=7], a key its entry sets (audit Y12; since audit9 X01 refused: "
    "the method named het would train another head)",
    ValueError,
    r"methods\.het\.overrides sets model\.head\.num_factors .*which method 'het' defines itself \(num_factors: 2\)",
)
def _head_method_override(tmp):
    from harness.experiment import validate_experiment

    own = HET.replace("}}", ", overrides: [model.head.num_factors=7]}}")
    validate_experiment(_tiny(tmp, own))


@bad_input(
    "experiment",
    "model.head.temperature in upstream_overrides beside a temperature_grid",
    ValueError,
    r"method 'het': model\.head\.temperature=0\.25 in the overrides would replace the τ the temperature_grid "
    r"chooses",
)
def _head_temperature_grid(tmp):
    from harness.experiment import validate_experiment

    validate_experiment(
        _tiny(
            tmp,
            HET,
            "temperature_grid=[0.5,1.0]",
            "upstream_overrides=[train.epochs=1,model.head.temperature=0.25,data.heldout_split=val]",
        )
    )


# ------------------------------------------------------------------------------ item 5: records verified
def _finished_run(tmp: Path, name: str = "hom_s0") -> Path:
    """A finished run folder by hand: a tiny model.pt, predictions on 40 examples of 3 classes and the metrics.json
    computed from them, as a run writes them."""
    from harness.uncertainty.predictions import Predictions

    from bad_inputs_safety import _model_pt
    from bad_inputs_uncertainty import make_run

    run = make_run(tmp / "runs" / name, heldout=True)
    _model_pt(run / "model.pt", 3)
    (run / "config.yaml").write_text(
        f"name: {name}\noutput_dir: {run}\nseed: 0\nmodel:\n  head:\n    covariance: none\n"
    )
    (run / "run.json").write_text("{}")
    metrics = {
        "metrics": Predictions.load(run).metrics(),
        "heldout_metrics": Predictions.load(run / "heldout_predictions.npz").metrics(),
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    return run


def _record(tmp: Path) -> Path:
    from harness.records import save_record

    assert save_record(_finished_run(tmp), tmp / "records" / "hom_s0")
    return tmp / "records" / "hom_s0"


def _reverse_logits(path: Path) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["logits"] = arrays["logits"][:, ::-1].copy()
    np.savez_compressed(path, **arrays)


def _restore(record: Path, tmp: Path, expected: "str | None" = None) -> None:
    from harness.records import restore_record

    try:
        restore_record(record, tmp / "restored" / "hom_s0", expected)
    finally:
        assert not (tmp / "restored").exists(), "a run folder was restored before the error"


@bad_input(
    "records",
    "a record whose predictions.npz was altered, still a valid file (audit Q_rec2_tamper)",
    ValueError,
    r"record .*hom_s0: predictions\.npz does not match the SHA-256 written with the record.*git checkout",
)
def _record_tampered(tmp):
    record = _record(tmp)
    _reverse_logits(record / "predictions.npz")
    _restore(record, tmp)


@bad_input(
    "records",
    "a record without hashes (written before they existed) whose predictions were altered",
    ValueError,
    r"record\.json is missing, so its files cannot be checked .*harness run EXPERIMENT --sync-records",
)
def _record_legacy_tampered(tmp):
    record = _record(tmp)
    (record / "record.json").unlink()
    _reverse_logits(record / "predictions.npz")
    _restore(record, tmp)


@bad_input(
    "records",
    "a record whose predictions.npz is cut in half (audit Q_rec2_trunc)",
    ValueError,
    r"predictions\.npz (does not match the SHA-256|cannot be read)",
)
def _record_truncated(tmp):
    record = _record(tmp)
    data = (record / "predictions.npz").read_bytes()
    (record / "predictions.npz").write_bytes(data[: len(data) // 2])
    _restore(record, tmp)


@bad_input(
    "records",
    "a record without hashes whose predictions.npz is cut in half",
    ValueError,
    r"record\.json is missing, so its files cannot be checked .*harness run EXPERIMENT --sync-records",
)
def _record_legacy_truncated(tmp):
    record = _record(tmp)
    (record / "record.json").unlink()
    data = (record / "predictions.npz").read_bytes()
    (record / "predictions.npz").write_bytes(data[: len(data) // 2])
    _restore(record, tmp)


@bad_input(
    "records",
    "a record without hashes whose predictions.npz holds a pickled object array (audit Q_rec2_evil)",
    ValueError,
    r"record\.json is missing, so its files cannot be checked .*harness run EXPERIMENT --sync-records",
)
def _record_pickle(tmp):
    record = _record(tmp)
    (record / "record.json").unlink()
    with np.load(record / "predictions.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["logits"] = np.array([{"x": 1}], dtype=object)
    np.savez(record / "predictions.npz", **arrays)
    _restore(record, tmp)


@bad_input(
    "records",
    "a record whose model.pt is cut in half (audit Q_rec2_truncmodel)",
    ValueError,
    r"model\.pt does not match the SHA-256",
)
def _record_model_truncated(tmp):
    record = _record(tmp)
    data = (record / "model.pt").read_bytes()
    (record / "model.pt").write_bytes(data[: len(data) // 2])
    _restore(record, tmp)


@bad_input(
    "records",
    "a record without hashes whose model.pt is cut in half",
    ValueError,
    r"record\.json is missing, so its files cannot be checked .*harness run EXPERIMENT --sync-records",
)
def _record_legacy_model_truncated(tmp):
    record = _record(tmp)
    (record / "record.json").unlink()
    data = (record / "model.pt").read_bytes()
    (record / "model.pt").write_bytes(data[: len(data) // 2])
    _restore(record, tmp)


@bad_input(
    "records",
    "a record whose config.yaml says another schedule than the experiment plans (audit Q_rec2_othercfg)",
    ValueError,
    r"record .*hom_s0 holds a run of another config than this experiment plans for hom_s0",
)
def _record_other_config(tmp):
    record = _record(tmp)
    planned = tmp / "restored" / "hom_s0"
    _restore(
        record, tmp, expected=f"name: hom_s0\noutput_dir: {planned}\nseed: 1\nmodel:\n  head:\n    covariance: none\n"
    )


@handled("records", "records restored into another runs_root (audit Q01)", r"restored")
def _record_other_root(tmp):
    from omegaconf import OmegaConf

    from harness.records import restore_record

    record = _record(tmp)
    assert OmegaConf.load(record / "config.yaml").output_dir == "hom_s0"  # relative inside the record
    other = tmp / "elsewhere" / "runs" / "hom_s0"
    assert restore_record(record, other) and OmegaConf.load(other / "config.yaml").output_dir == str(other)
    return "restored with output_dir set to the new folder (records hold it relative: the run folder's name)"


@bad_input(
    "records",
    "a record without record.json whose predictions and metrics were changed together (audit "
    "2026-11-27: verified by its metrics alone, blessed with fresh hashes, reported)",
    ValueError,
    r"record\.json is missing, so its files cannot be checked .*harness run EXPERIMENT --sync-records",
)
def _record_no_hashes(tmp):
    import json

    record = _record(tmp)
    (record / "record.json").unlink()
    _reverse_logits(record / "predictions.npz")
    metrics = json.loads((record / "metrics.json").read_text())
    from harness.uncertainty.predictions import Predictions

    metrics["metrics"] = Predictions.load(record / "predictions.npz").metrics()  # consistent with the changed file
    (record / "metrics.json").write_text(json.dumps(metrics))
    _restore(record, tmp)


@bad_input(
    "records",
    "a record.json that leaves out model.pt, beside a damaged model.pt (audit 2026-11-27)",
    ValueError,
    r"model\.pt not in record\.json: a file the record holds must be hashed",
)
def _record_partial_hashes(tmp):
    import json

    record = _record(tmp)
    hashes = json.loads((record / "record.json").read_text())
    del hashes["files"]["model.pt"]
    (record / "record.json").write_text(json.dumps(hashes))
    data = (record / "model.pt").read_bytes()
    (record / "model.pt").write_bytes(data[: len(data) // 2])
    _restore(record, tmp)


@bad_input(
    "records",
    "harness run --sync-records while a harness run uses the runs_root (audit Q10)",
    CLI_ERROR,
    r"is being written by another process .*sync the records when it has finished",
)
def _sync_locked(tmp):
    from harness.experiment.stages import EXPERIMENT_LOCK
    from harness.io import RunLock

    with RunLock(tmp / "runs", name=EXPERIMENT_LOCK, clean=False):  # stands for the running harness run
        _cli(
            "run",
            "digits",
            "--sync-records",
            f"runs_root={tmp / 'runs'}",
            f"results_root={tmp / 'results'}",
            "records=true",
        )


# ------------------------------------------------------------------------------ item 7: schedules that never start
bad_settings(
    "upstream",
    "{} (audit item 7)",
    lambda tmp, o: _upstream_cli(tmp, *o.split()),
    [
        (
            "optim.warmup_steps=50 with train.steps=5 (T02)",
            "optim.warmup_epochs=0 train.steps=5 optim.warmup_steps=50",
            r"optim\.warmup_steps=50 is longer than the training \(train\.steps=5\): the learning rate would never reach",
        ),
        (
            "optim.warmup_epochs=5 with train.epochs=1 (T07)",
            "optim.warmup_epochs=5",
            r"optim\.warmup_epochs=5 is longer than the training \(train\.epochs=1\)",
        ),
        (
            "optim.decay_steps=[100] with train.steps=5 (T05)",
            "optim.warmup_epochs=0 train.steps=5 optim.schedule=step optim.decay_steps=[100]",
            r"optim\.decay_steps \[100\] lie at or past the end of the training \(train\.steps=5\)",
        ),
        (
            "optim.decay_epochs=[3] with train.epochs=1",
            "optim.schedule=step optim.decay_epochs=[3] optim.warmup_epochs=0",
            r"optim\.decay_epochs \[3\.0\] lie at or past the end of the training \(train\.epochs=1\)",
        ),
        (
            "model.head.temperature=1e-30 (P6e)",
            "model.head.temperature=1e-30",
            r"model\.head\.temperature=1e-30 is below 0\.01: the logits are divided by τ",
        ),
        ("seed=4294967296 (2**32)", "seed=4294967296", r"seed must be a whole number in \[0, 2\*\*32 - 1\]"),
        (
            "optim.warmup_steps=1000 with train.epochs=1: mixed units (audit 2026-11-27 item 5)",
            "optim.warmup_epochs=0 optim.warmup_steps=1000",
            r"optim\.warmup_steps=1000 counts optimiser steps but the training is counted in epochs \(train\.epochs=1\)"
            r": give it as optim\.warmup_epochs, or the training's length as train\.steps",
        ),
        (
            "optim.decay_steps=[100000] with train.epochs=1: mixed units (audit 2026-11-27 item 5)",
            "optim.schedule=step optim.decay_steps=[100000]",
            r"optim\.decay_steps=\[100000\] counts optimiser steps but the training is counted in epochs",
        ),
        (
            "optim.decay_epochs=[1] with train.steps=5: mixed units",
            "optim.warmup_epochs=0 train.steps=5 optim.schedule=step optim.decay_epochs=[1]",
            r"optim\.decay_epochs=\[1\.0\] counts epochs but the training is counted in optimiser steps",
        ),
        (
            "data.eval_resize=-1: distorted evaluation images (audit 2026-11-27 item 5)",
            "data.eval_resize=-1",
            r"data\.eval_resize=-1 must be at least data\.image_size=\d+ .*or null for data\.image_size / 0\.875",
        ),
        (
            "data.eval_resize below data.image_size",
            "data.image_size=32 data.eval_resize=16",
            r"data\.eval_resize=16 must be at least data\.image_size=32",
        ),
        (
            "model.head.temperature=inf: text, not infinity (audit 2026-11-27 item 9)",
            "model.head.temperature=inf",
            r"model\.head: temperature must be a number, got 'inf' \(str\): .*\.inf is infinity and inf is text",
        ),
        (
            "model.head_bias_init=nan (audit 2026-11-27 item 9: NaN that passed validation)",
            "model.head_bias_init=nan",
            r"model\.head_bias_init must be in \[-100, 100\] \(or null: the layer's own.*\), got nan",
        ),
        (
            "model.head.learn_temperature=2 (a number for a switch)",
            "model.head.learn_temperature=2",
            r"model\.head: learn_temperature must be true or false, got 2 \(int\)",
        ),
    ],
    CLI_ERROR,
)


# ------------------------------------------------------------------------------ items 9, 10
bad_settings(
    "experiment",
    "`harness run` with {} (audit item 10)",
    lambda tmp, o: _experiment(tmp, o),
    [
        (
            "workers=100000000000000000000 (Y03)",
            "workers=100000000000000000000",
            r"workers must be a whole number in \[1, 256\]",
        ),
        (
            "seeds=[99999999999999999999] (Y04)",
            "seeds=[99999999999999999999]",
            r"seeds must be a whole number in \[0, 2\*\*32 - 1\]",
        ),
        ("seeds=[4294967296] (Y05)", "seeds=[4294967296]", r"seeds must be a whole number in \[0, 2\*\*32 - 1\]"),
    ],
)


@bad_input(
    "ensembles",
    "harness ensemble --from-checkpoints with a member's model.pt of 20 classes for 10 (audit P5b)",
    CLI_ERROR,
    r"model\.pt has 20 classes but the data .* has 10: the model is not one of this data's",
)
def _ensemble_wrong_k(tmp):
    from bad_inputs_safety import _model_pt

    for name, k in (("a", 10), ("b", 20)):
        run = tmp / name
        run.mkdir()
        _model_pt(run / "model.pt", k)
        (run / "config.yaml").write_text(
            "data:\n  source: digits\n  limit_eval: 20\nmodel:\n  head:\n    covariance: none\n"
        )
    try:
        _cli("ensemble", "--from-checkpoints", "-m", str(tmp / "a"), "-m", str(tmp / "b"), "--out", str(tmp / "ens"))
    finally:
        assert not (tmp / "ens").exists(), "an ensemble folder was written"


@bad_input(
    "ensembles",
    "harness report of a het run whose model.pt has 20 classes for its 5 (audit P5c)",
    CLI_ERROR,
    r"model\.pt has 20 classes but .*predictions\.npz have 5: the model\.pt is not this run's",
)
def _report_wrong_k(tmp):
    from harness.models import ModelConfig, build_model, save_model

    from bad_inputs_uncertainty import make_run

    run = make_run(tmp / "a", covariance="low_rank")
    save_model(
        build_model(ModelConfig("test_resnet", 20, {"covariance": "low_rank", "num_factors": 2})), run / "model.pt"
    )
    try:
        _cli("report", str(run), "--out-root", str(tmp / "results"), "--name", "r")
    finally:
        assert not (tmp / "results" / "r").exists(), "a half-written report folder was left"


@bad_input(
    "import",
    "harness import of weights that predict NaN (audit I13, I13b)",
    CLI_ERROR,
    r"(weight tensor\(s\) hold NaN or infinite values|log_probs holds NaN in \d+ of \d+ rows)",
)
def _import_nan(tmp):
    import torch

    from harness.models import ModelConfig, build_model

    model = build_model(ModelConfig("test_resnet", 10, {"covariance": "none"}))
    state = {
        k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
        for k, v in model.backbone.state_dict().items()
    }
    state.update({"fc.weight": torch.zeros(10, model.head.in_features), "fc.bias": torch.zeros(10)})
    from safetensors.torch import save_file

    save_file(state, str(tmp / "nan.safetensors"))
    data = tmp / "data.yaml"
    data.write_text("data:\n  source: digits\n  limit_eval: 30\n")
    try:
        _cli(
            "import",
            "--model",
            "timm:test_resnet",
            "--weights",
            str(tmp / "nan.safetensors"),
            "--data",
            str(data),
            "--out",
            str(tmp / "imp"),
        )
    finally:
        assert not (tmp / "imp").exists(), "a half-written run folder was left (it would block the rerun)"


def _import(tmp: Path, *extra: str) -> None:
    from bad_inputs_safety import _model_pt

    data = tmp / "data.yaml"
    data.write_text("data:\n  source: digits\n  limit_eval: 30\n")
    _cli("import", "--model", str(_model_pt(tmp / "model.pt")), "--data", str(data), "--out", str(tmp / "imp"), *extra)


@bad_input(
    "outputs",
    "harness import --out holding the user's notes.txt (audit I14)",
    CLI_ERROR,
    r"holds files harness import did not write \(notes\.txt\): choose another --out, or give --overwrite",
)
def _import_user_files(tmp):
    (tmp / "imp").mkdir()
    (tmp / "imp" / "notes.txt").write_text("mine")
    try:
        _import(tmp)
    finally:
        assert sorted(os.listdir(tmp / "imp")) == ["notes.txt"] and (tmp / "imp" / "notes.txt").read_text() == "mine"


@bad_input(
    "outputs",
    "harness import --overwrite onto the user's model.pt",
    CLI_ERROR,
    r"holds model\.pt that harness import did not write: even with --overwrite they are not replaced",
)
def _import_user_files_overwrite(tmp):
    (tmp / "imp").mkdir()
    (tmp / "imp" / "model.pt").write_text("my model")
    try:
        _import(tmp, "--overwrite")
    finally:
        assert (tmp / "imp" / "model.pt").read_text() == "my model"


@bad_input(
    "fewshot",
    "harness fewshot --out holding the user's fewshot.md and fewshot.json (audit F08)",
    CLI_ERROR,
    r"holds fewshot\.json, fewshot\.md that harness fewshot did not write: even with --overwrite they are not replaced; "
    r"move them, or choose another --out",
)
def _fewshot_user_files(tmp):
    from bad_inputs_safety import _model_pt

    (tmp / "out").mkdir()
    for name in ("fewshot.md", "fewshot.json"):
        (tmp / "out" / name).write_text("mine")
    try:
        _cli(
            "fewshot",
            "--model",
            str(_model_pt(tmp / "model.pt")),
            "--tasks",
            "demo_digit",
            "--shots",
            "1",
            "--out",
            str(tmp / "out"),
        )
    finally:
        assert all((tmp / "out" / n).read_text() == "mine" for n in ("fewshot.md", "fewshot.json"))


@bad_input(
    "fewshot",
    "harness fewshot --overwrite onto the user's fewshot.md",
    CLI_ERROR,
    r"holds fewshot\.md that harness fewshot did not write: even with --overwrite",
)
def _fewshot_user_files_overwrite(tmp):
    from bad_inputs_safety import _model_pt

    (tmp / "out").mkdir()
    (tmp / "out" / "fewshot.md").write_text("mine")
    try:
        _cli(
            "fewshot",
            "--model",
            str(_model_pt(tmp / "model.pt")),
            "--tasks",
            "demo_digit",
            "--shots",
            "1",
            "--out",
            str(tmp / "out"),
            "--overwrite",
        )
    finally:
        assert (tmp / "out" / "fewshot.md").read_text() == "mine"


@bad_input(
    "fewshot",
    "harness fewshot --seed -1 (audit F09: the message named --shots)",
    CLI_ERROR,
    r"-1 is not in the range 0<=x<=4294967295",
)
def _fewshot_seed(tmp):
    from bad_inputs_safety import _model_pt

    _cli(
        "fewshot",
        "--model",
        str(_model_pt(tmp / "model.pt")),
        "--tasks",
        "demo_digit",
        "--shots",
        "1",
        "--seed",
        "-1",
        "--out",
        str(tmp / "out"),
    )


@bad_input(
    "fewshot",
    "harness fewshot on a 1-class task (audit F04: the message named --shots)",
    CLI_ERROR,
    r"task one has 1 class: a few-shot probe tells classes apart",
)
def _fewshot_one_class(tmp):
    from PIL import Image

    from bad_inputs_safety import _model_pt

    task = tmp / "one"
    (task / "img").mkdir(parents=True)
    for i in range(12):
        Image.new("RGB", (8, 8), (i * 20, 0, 0)).save(task / "img" / f"{i}.png")
    for split, rows in (
        ("train800", range(0, 4)),
        ("val200", range(4, 6)),
        ("train800val200", range(0, 6)),
        ("test", range(6, 12)),
    ):
        (task / f"{split}.txt").write_text("".join(f"img/{i}.png 0\n" for i in rows))
    _cli(
        "fewshot",
        "--model",
        str(_model_pt(tmp / "model.pt")),
        "--tasks",
        f"one={task}:1",
        "--data-format",
        "folder",
        "--shots",
        "1",
        "--resolution",
        "32",
        "--out",
        str(tmp / "out"),
    )


def _downstream(tmp: Path, *extra: str) -> None:
    from bad_inputs_safety import _model_pt

    _cli(
        "downstream",
        "--upstream",
        str(_model_pt(tmp / "model.pt")),
        "--tasks",
        "demo_digit",
        "--preset",
        "demo",
        "--out",
        str(tmp / "out"),
        *extra,
    )


@bad_input(
    "outputs",
    "harness downstream --out holding the user's vtab.md",
    CLI_ERROR,
    r"holds vtab\.md that harness downstream did not write: even with --overwrite they are not replaced; move them, "
    r"or choose another --out",
)
def _downstream_user_files(tmp):
    (tmp / "out").mkdir()
    (tmp / "out" / "vtab.md").write_text("mine")
    try:
        _downstream(tmp)
    finally:
        assert (tmp / "out" / "vtab.md").read_text() == "mine" and sorted(os.listdir(tmp / "out")) == ["vtab.md"]


@bad_input(
    "outputs",
    "harness downstream --overwrite onto the user's vtab.md",
    CLI_ERROR,
    r"holds vtab\.md that harness downstream did not write: even with --overwrite they are not replaced",
)
def _downstream_user_files_overwrite(tmp):
    (tmp / "out").mkdir()
    (tmp / "out" / "vtab.md").write_text("mine")
    try:
        _downstream(tmp, "--overwrite")
    finally:
        assert (tmp / "out" / "vtab.md").read_text() == "mine"


@bad_input(
    "downstream",
    "harness downstream --head het --temperatures 1e300 (audit H09: a file-name rule refused it)",
    CLI_ERROR,
    r"temperatures \(--temperatures\) must be a non-empty list, each a finite number at least 0\.001 and at most 1000",
)
def _downstream_huge_temperature(tmp):
    try:
        _downstream(tmp, "--head", "het", "--temperatures", "1e300")
    finally:
        assert not (tmp / "out").exists(), "the sweep folder was written before the error"


@handled("submitit", "the command that submitted a submitit-local job is killed (audit B07, B07b)", r"stops")
def _submitter_gone(tmp):
    import subprocess
    import sys
    import time

    from harness.upstream.launch import SubmitterWatch

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    watch = SubmitterWatch(child.pid, interval=0.05).start()
    child.wait()
    deadline = time.monotonic() + 10
    while not watch.is_set() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert watch.is_set() and os.getpid() != child.pid
    return (
        "each task of the job watches its submitter (SubmitterWatch); once it is gone the job saves its state at "
        "the next step and stops, lock released, not requeued (tests/upstream/test_submitter_gone.py kills one); "
        "the same command resumes"
    )
