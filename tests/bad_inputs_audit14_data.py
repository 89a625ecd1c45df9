"""Bad inputs found by the fourteenth reliability audit in data sources (``audit14 <case id>``): a manifest of single
labels always read as label sets (a softmax model could not be trained on a manifest at all), ``data.multilabel``
refused for a manifest, and a line with no label packed silently."""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np
from PIL import Image

from bad_inputs import bad_input, handled
from bad_inputs_safety import _cli, upstream_cli

#: the audit's tiny softmax run on a manifest (digits_hom.yaml, one epoch, 16 px)
MANIFEST_RUN = (
    "train.epochs=1",
    "train.log_with=[]",
    "data.num_classes=2",
    "data.image_size=16",
    "data.eval_resize=16",
    "data.batch_size=4",
    "data.heldout_split=null",
    "data.label_noise.kind=none",
)


def _man(tmp: Path, *extra: dict) -> Path:
    """The audit's manifest folder ``man``: ``img/0..7.png`` (label 0), ``img/b0..b7.png`` (label 1), ``img/c.png``;
    ``train.jsonl`` and ``test.jsonl`` of one label a line (test: copies ``img/t*.png``, other files than the
    training images, which a test list may not name: audit23 A23-09), ``extra`` lines appended to ``train.jsonl``."""
    man = tmp / "man"
    (man / "img").mkdir(parents=True)
    lines, tests = [], []
    for i in range(8):
        for t in ("", "t"):
            Image.new("RGB", (8, 8), (30 * i, 0, 0)).save(man / "img" / f"{t}{i}.png")
            Image.new("RGB", (8, 8), (0, 30 * i, 0)).save(man / "img" / f"{t}b{i}.png")
        lines += [{"path": f"img/{i}.png", "labels": [0]}, {"path": f"img/b{i}.png", "labels": [1]}]
        tests += [{"path": f"img/t{i}.png", "labels": [0]}, {"path": f"img/tb{i}.png", "labels": [1]}]
    Image.new("RGB", (8, 8)).save(man / "img" / "c.png")
    (man / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tests))
    (man / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (*lines, *extra)))
    return man


# ------------------------------------------------------------------------------ A14-10: a manifest of single labels
@handled(
    "data",
    "harness upstream (softmax) on a manifest of one label a line, and on its pack (audit14 A14-10: refused, "
    "'multi-label data needs the sigmoid link': every manifest was read as label sets)",
    r"^a softmax model trains on a single-label manifest \(integer targets\) and on its pack: the same 16 examples "
    r"and targets$",
)
def _softmax_on_a_single_label_manifest(tmp):
    man = _man(tmp)
    upstream_cli(*MANIFEST_RUN, "data.source=manifest", f"data.path={man}", f"output_dir={tmp / 'runs' / 'man2'}")
    for split in ("train", "test"):
        _cli("data", "pack", "manifest", str(tmp / "mpk"), "--shard-size", "50", "--split", split, f"path={man}")
        assert json.loads((tmp / "mpk" / split / "index.json").read_text())["multilabel"] is False
    upstream_cli(*MANIFEST_RUN, "data.source=shards", f"data.path={tmp / 'mpk'}", f"output_dir={tmp / 'runs' / 'pk'}")
    a, b = (np.load(tmp / "runs" / r / "predictions.npz") for r in ("man2", "pk"))
    assert a["targets"].dtype.kind == "i" and a["targets"].tolist() == [0, 1] * 8, a["targets"]
    assert a["index"].tolist() == b["index"].tolist() == list(range(16))
    assert a["targets"].tolist() == b["targets"].tolist()
    return (
        "a softmax model trains on a single-label manifest (integer targets) and on its pack: the same 16 examples "
        "and targets"
    )


@bad_input(
    "data",
    'harness data pack manifest of one label a line plus a line {"path": "img/c.png", "labels": []} (audit14 A14-10: '
    "rc 0, 17 examples packed as label sets, index.json multilabel: true)",
    click.ClickException,
    r"man/train\.jsonl line 17 lists no label: data\.multilabel=false \(the default\) reads a manifest as single-label "
    r"data, exactly one label id a line, .*give the image's class .*or set data\.multilabel=true if the list holds "
    r"label sets \(an empty list: an image of no class",
)
def _pack_single_label_manifest_with_an_empty_line(tmp):
    man = _man(tmp, {"path": "img/c.png", "labels": []})
    try:
        _cli("data", "pack", "manifest", str(tmp / "mpk"), "--shard-size", "50", f"path={man}", "num_classes=2")
    finally:
        assert not (tmp / "mpk").exists() or not list((tmp / "mpk").rglob("*.tar")), "a shard was written"


@bad_input(
    "upstream",
    'harness upstream (softmax) on a manifest of one label a line but a line {"labels": [0, 1]} (audit14 A14-10: '
    "'multi-label data needs the sigmoid link: set model.head.link=sigmoid', naming neither the manifest nor why)",
    click.ClickException,
    r"man/train\.jsonl line 17 lists 2 labels \[0, 1\]: data\.multilabel=false \(the default\) reads a manifest as "
    r"single-label data.*keep the one label that is its class, or set data\.multilabel=true if the list holds label "
    r"sets \(several labels a line; multi-hot targets, trained with model\.head\.link=sigmoid\)",
)
def _upstream_single_label_manifest_with_two_labels(tmp):
    man = _man(tmp, {"path": "img/c.png", "labels": [0, 1]})
    try:
        upstream_cli(*MANIFEST_RUN, "data.source=manifest", f"data.path={man}", f"output_dir={tmp / 'r'}")
    finally:
        written = sorted(p.name for p in (tmp / "r").glob("*") if p.name != ".lock")
        assert not written, f"the run wrote {written} before the error"


@handled(
    "data",
    'harness data pack manifest multilabel=true of a manifest with a line {"labels": []}, and data.multilabel=false '
    "(audit14 A14-10: data.multilabel refused for a manifest, 'read only by data.source=cifar10n or shards')",
    r"^data\.multilabel=true packs label sets \(the empty list an image of no class, index\.json multilabel: true\); "
    r"data\.multilabel=false reads class ids$",
)
def _manifest_reads_data_multilabel(tmp):
    from harness.data.pack_source import source_config
    from harness.data.sources import build_split

    man = _man(tmp, {"path": "img/c.png", "labels": []})
    _cli("data", "pack", "manifest", str(tmp / "mpk"), "--shard-size", "50", f"path={man}", "multilabel=true")
    index = json.loads((tmp / "mpk" / "train" / "index.json").read_text())
    assert index["multilabel"] is True and index["num_examples"] == 17 and index["label_counts"] == [8, 8], index
    assert index["source"]["config"]["multilabel"] is True
    (man / "train.jsonl").write_text("\n".join((man / "train.jsonl").read_text().splitlines()[:-1]) + "\n")
    ds = build_split(source_config("manifest", [f"path={man}", "multilabel=false"]), "train")
    assert not ds.multilabel and ds.labels.tolist() == [0, 1] * 8
    return (
        "data.multilabel=true packs label sets (the empty list an image of no class, index.json multilabel: true); "
        "data.multilabel=false reads class ids"
    )
