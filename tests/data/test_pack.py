"""Packing sources into WebDataset shards: CIFAR-10N's annotator label sets, TFDS, the data config of a source."""

import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.data.config import DataConfig
from harness.data.pack import pack
from harness.data.pack_source import source_config
from harness.data.shards import ShardDataset, shard_files
from harness.data.sources import build_split

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "cifar10n"


@pytest.mark.skipif(not (SHARED / "cifar10n_labels.npz").is_file(), reason="CIFAR-10N is not in ../shared/data")
def test_cifar10n_multilabel_pack_keeps_every_annotators_label(tmp_path):
    cfg = DataConfig(source="cifar10n", path=str(SHARED), multilabel=True, limit_train=200)
    ds = build_split(cfg, "train")
    index = pack(ds, tmp_path, 64, prefix="train", progress=False)
    labels = np.load(SHARED / "cifar10n_labels.npz")
    annotators = np.stack([labels[f"random_label{a}"][:200] for a in (1, 2, 3)], axis=1)
    expected = [set(row.tolist()) for row in annotators]
    urls, counts, _ = shard_files(str(tmp_path))
    got = {i: set(np.flatnonzero(target).tolist()) for _, target, i in ShardDataset(urls, 10, True, counts)}
    assert sorted(got) == list(range(200))
    assert all(got[i] == expected[i] for i in range(200))  # each example's set: all three annotators' labels
    assert sum(len(s) > 1 for s in expected) > 50  # the annotators disagree often: sets, not single labels
    assert index["multilabel"] and index["num_examples"] == 200
    assert index["label_counts"] == np.bincount([c for s in expected for c in s], minlength=10).tolist()
    assert sum(s["labels"] for s in index["shards"]) == sum(len(s) for s in expected)


@pytest.mark.parametrize("multilabel", [False, True])
def test_a_manifest_packs_as_it_reads_and_the_shards_give_the_same_targets(tmp_path, multilabel):
    """Audit 14 (A14-10): a manifest's pack records the label type data.multilabel read (single labels by default,
    label sets with multilabel=true, an empty list an image of no class), and the shards give every example the
    target the manifest gives it."""
    import json

    from PIL import Image

    from harness.data.shards import shard_loader

    man = tmp_path / "man"
    (man / "img").mkdir(parents=True)
    lines = [{"path": f"img/{i}.png", "labels": [i % 3]} for i in range(7)]
    if multilabel:
        lines[1]["labels"], lines[5]["labels"] = [0, 2], []
    for i in range(7):
        Image.new("RGB", (6, 6), (30 * i, 0, 0)).save(man / "img" / f"{i}.png")
    (man / "train.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    cfg = source_config("manifest", [f"path={man}", f"multilabel={str(multilabel).lower()}"])
    ds = build_split(cfg, "train")
    index = pack(ds, tmp_path / "pk" / "train", 3, prefix="train", progress=False)
    assert index["multilabel"] is multilabel and index["num_examples"] == 7
    assert index["label_counts"] == ([4, 1, 2] if multilabel else [3, 2, 2])
    shards = DataConfig(source="shards", path=str(tmp_path / "pk"), image_size=6, eval_batch_size=7)
    images, targets, rows = next(iter(shard_loader(shards, "train", train=False)[0]))
    assert sorted(rows.tolist()) == list(range(7))  # every example once, in the pack's order
    assert targets[rows.argsort()].tolist() == ds.targets().tolist()  # ints, or multi-hot rows ([5]: all 0)
    assert targets.dtype == (torch.float32 if multilabel else torch.int64)


def test_tfds_source_packs_as_png(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=6, policy=tfds.testing.MockPolicy.USE_CODE):
        ds = build_split(DataConfig(source="tfds", name="cifar10"), "train")
        pack(ds, tmp_path, 2, progress=False)
        urls, counts, index = shard_files(str(tmp_path))
        got = list(ShardDataset(urls, index["num_classes"], False, counts, shuffle=False))
        assert sorted(i for _, _, i in got) == list(range(6))
        for image, label, i in got:
            assert label == ds[i][1] and np.array_equal(np.asarray(image), np.asarray(ds[i][0]))
    with tarfile.open(urls[0]) as t:
        assert sorted(Path(n).suffix for n in t.getnames()) == [".cls", ".cls", ".png", ".png"]


def test_source_config_takes_a_run_configs_data_section_or_a_source_name(tmp_path):
    cfg = source_config(str(ROOT / "upstream" / "configs" / "cifar10n_multilabel_het.yaml"), ["data.path=/x"])
    assert (cfg.source, cfg.path, cfg.multilabel, cfg.train_split) == ("cifar10n", "/x", True, "train45k")  # via base:
    (tmp_path / "d.yaml").write_text("source: manifest\npath: /m\n")
    assert source_config(str(tmp_path / "d.yaml"), ["limit_train=3"], multilabel=True).limit_train == 3
    assert source_config("image_folder", ["path=/f"]).path == "/f"
    (tmp_path / "s.yaml").write_text("source: shards\npath: /s\n")
    with pytest.raises(ValueError, match="already shards"):
        source_config(str(tmp_path / "s.yaml"))
    with pytest.raises(ValueError, match="unknown source"):
        source_config("imagenet")


def test_source_config_refuses_keys_pack_does_not_read_and_a_second_source(tmp_path):
    """Audit 11 (A11-09, A11-10): overrides pack never applied (image_size, label_set on digits) and a source= other
    than SOURCE were accepted, and index.json recorded them."""
    assert source_config("digits", ["source=digits", "limit_train=5", "label_noise=null"]).limit_train == 5
    assert source_config("digits", [], multilabel=True).multilabel  # --multilabel: one-label sets of any source
    for override, match in [
        ("image_size=64", r"image_size=64 is not read by harness data pack.*remove image_size=64 from the overrides"),
        ("data.crop_scale=0.5", r"crop_scale=0.5 is not read by harness data pack"),
        ("loader=pil", r"loader=pil is not read by harness data pack"),
        ("num_workers=2", r"num_workers=2 is not read"),
        ("eval_split=val", r"eval_split=val is not read by harness data pack.*give --split val"),
        ("label_set=worse", r"data\.label_set=worse is read only by data\.source=cifar10n"),
        ("multilabel=true", r"data\.multilabel=true is read only by data\.source=cifar10n or manifest or shards"),
        ("source=manifest", r"source=manifest in the overrides differs from SOURCE digits.*remove source=manifest"),
    ]:
        with pytest.raises(ValueError, match=match):
            source_config("digits", [override])
    (tmp_path / "d.yaml").write_text("source: manifest\npath: /m\n")
    with pytest.raises(
        ValueError, match=r"source=digits in the overrides differs from data\.source=manifest of SOURCE "
    ):
        source_config(str(tmp_path / "d.yaml"), ["source=digits"])
    # a run config's own training settings are the run's: packed from as before
    cfg = source_config(str(ROOT / "upstream" / "configs" / "digits_hom.yaml"), ["limit_train=5"])
    assert (cfg.image_size, cfg.crop_scale, cfg.limit_train) == (32, 0.6, 5)


def _index(folder: Path) -> dict:
    import json

    return json.loads((folder / "index.json").read_text())


def test_pack_of_a_config_with_label_noise_packs_the_noisy_labels_a_run_trains_on(tmp_path):
    """Audit (item 10): harness data pack of a config with label noise packed the clean labels without a word."""
    from click.testing import CliRunner

    from harness.cli import main
    from harness.data.noise import inject_label_noise

    config = ROOT / "upstream" / "configs" / "digits_hom.yaml"  # 30% pair-flip noise on the training split
    result = CliRunner().invoke(main, ["data", "pack", str(config), str(tmp_path / "p"), "--shard-size", "300"])
    assert result.exit_code == 0, result.output
    index = _index(tmp_path / "p" / "train")
    assert index["label_noise"]["kind"] == "pair_flip" and 0.2 < index["label_noise"]["realised_rate"] < 0.4
    clean = build_split(DataConfig(source="digits"), "train")
    noisy, _ = inject_label_noise(clean.labels, 10, kind="pair_flip", rate=0.3, seed=0)  # as the run draws them
    urls, counts, _ = shard_files(str(tmp_path / "p"), "train")
    got = {i: y for _, y, i in ShardDataset(urls, 10, False, counts, shuffle=False)}
    assert [got[i] for i in range(len(clean))] == noisy.tolist() != clean.labels.tolist()
    # the held-out split from the noise's second stream (as harness.upstream.train draws it); the evaluation split clean
    result = CliRunner().invoke(
        main, ["data", "pack", str(config), str(tmp_path / "p"), "--shard-size", "400", "--split", "test"]
    )
    assert result.exit_code == 0 and _index(tmp_path / "p" / "test")["label_noise"] is None
    result = CliRunner().invoke(
        main, ["data", "pack", str(config), str(tmp_path / "p"), "--shard-size", "400", "--split", "val"]
    )
    held = build_split(DataConfig(source="digits"), "val").labels
    assert result.exit_code == 0 and _index(tmp_path / "p" / "val")["label_noise"]["realised_rate"] > 0.2
    urls, counts, _ = shard_files(str(tmp_path / "p"), "val")
    got = {i: y for _, y, i in ShardDataset(urls, 10, False, counts, shuffle=False)}
    assert [got[i] for i in range(len(held))] == inject_label_noise(
        held, 10, kind="pair_flip", rate=0.3, seed=0, stream=1
    )[0].tolist()
    # data.label_noise=null: no noise, the clean labels
    result = CliRunner().invoke(
        main, ["data", "pack", str(config), str(tmp_path / "c"), "data.label_noise=null", "--shard-size", "300"]
    )
    assert result.exit_code == 0, result.output
    urls, counts, _ = shard_files(str(tmp_path / "c"), "train")
    got = {i: y for _, y, i in ShardDataset(urls, 10, False, counts, shuffle=False)}
    assert [got[i] for i in range(len(clean))] == clean.labels.tolist()
    assert _index(tmp_path / "c" / "train")["label_noise"] is None


def test_pack_refuses_a_folder_of_someone_elses_files_and_overwrite_never_replaces_them(tmp_path):
    ds = build_split(DataConfig(source="digits", limit_train=40), "train")
    out = tmp_path / "train"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds files harness data pack did not write \(notes\.txt\)"):
        pack(ds, out, 20, prefix="train", progress=False)
    (out / "index.json").write_text("{}")  # not an index: refused as before
    with pytest.raises(ValueError, match="holds an index.json this command did not write"):
        pack(ds, out, 20, prefix="train", progress=False, overwrite=True)
    (out / "index.json").unlink()
    (out / "train-000001.json").write_text("mine too")
    assert pack(ds, out, 20, prefix="train", progress=False, overwrite=True)["complete"]
    assert (out / "notes.txt").read_text() == "mine" and (out / "train-000001.json").read_text() == "mine too"
    assert pack(ds, out, 20, prefix="train", progress=False)["complete"]  # its own pack now: a rerun is a no-op
