"""WebDataset shards: packing any source, reading back exactly once per epoch across ranks and workers."""

import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from PIL import Image

from harness.cli import main
from harness.data.config import DataConfig
from harness.data.pack import pack
from harness.data.shard_plan import batch_limits, resume_point
from harness.data.shards import ShardDataset, ShardLoader, shard_files, shard_loader
from harness.data.sources import build_split
from harness.data.transforms import eval_transform, train_transform

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data" / "cifar10n"
CLASSES = ("ant", "bee", "cat")


def _folder(root: Path, per_class: int = 8) -> Path:
    """An image folder of 3 x ``per_class`` random 12x10 images, every third one a JPEG (kept as its bytes)."""
    rng = np.random.default_rng(0)
    for c in CLASSES:
        (root / "train" / c).mkdir(parents=True)
        for i in range(per_class):
            img = Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8))
            img.save(root / "train" / c / (f"{i}.jpg" if i % 3 == 0 else f"{i}.png"))
    return root


def _packed(tmp_path: Path, shard_size: int, **kw) -> "tuple[object, Path, dict]":
    ds = build_split(DataConfig(source="image_folder", path=str(_folder(tmp_path / "src"))), "train")
    out = tmp_path / "shards"
    return ds, out, pack(ds, out, shard_size, prefix="train", progress=False, **kw)


def _read(urls, counts, **kw) -> list:
    return list(ShardDataset(urls, len(CLASSES), False, counts, **kw))


def test_pack_and_read_back_every_example_once_with_its_pixels_and_label(tmp_path):
    ds, out, index = _packed(tmp_path, 5)
    assert [s["examples"] for s in index["shards"]] == [5, 5, 5, 5, 4] and index["num_examples"] == 24
    assert index["label_counts"] == [8, 8, 8] and index["class_names"] == list(CLASSES) and not index["multilabel"]
    urls, counts, _ = shard_files(str(out))
    for kw in ({"shuffle": False}, {"shuffle": True, "shuffle_buffer": 7, "seed": 3}):
        got = _read(urls, counts, **kw)
        assert sorted(i for _, _, i in got) == list(range(24))  # every example exactly once
        for image, label, i in got:
            source_image, source_label = ds[i]
            assert label == source_label
            assert np.array_equal(np.asarray(image), np.asarray(source_image))
    # encoded JPEGs are stored as they were: the shard member's bytes are the source file's
    with tarfile.open(urls[0]) as t:
        members = {m.name: t.extractfile(m).read() for m in t.getmembers()}
    jpg = next(n for n in members if n.endswith(".jpg"))
    assert members[jpg] == Path(ds.load_image.paths[int(jpg[:-4])]).read_bytes()


def test_two_ranks_by_two_workers_read_disjoint_sets_covering_the_data(tmp_path, monkeypatch):
    _, out, _ = _packed(tmp_path, 3)  # 8 shards of 3
    urls, counts, _ = shard_files(str(out))
    seen = {}
    for rank in (0, 1):
        ds = ShardDataset(urls, 3, False, counts, rank=rank, world_size=2, num_workers=2, seed=5, shuffle_buffer=4)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
        seen[rank] = [int(i) for _, _, i in loader]
        assert len(seen[rank]) == len(set(seen[rank])) == len(ds) == 12
    assert not set(seen[0]) & set(seen[1]) and set(seen[0]) | set(seen[1]) == set(range(24))
    # the rank read from the environment (as webdataset's split_by_node does) gives the same split
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    env = ShardDataset(urls, 3, False, counts, num_workers=2, seed=5, shuffle_buffer=4)
    assert [int(i) for _, _, i in torch.utils.data.DataLoader(env, batch_size=None, num_workers=2)] == seen[1]


def test_drop_last_gives_every_rank_the_same_number_of_whole_batches(tmp_path):
    _, out, _ = _packed(tmp_path, 5)  # shards of 5, 5, 5, 5, 4: rank 0 holds 14 examples, rank 1 holds 10
    urls, counts, _ = shard_files(str(out))
    assert batch_limits(counts, 2, 2, 2) == [[4, 4], [4, 4]]
    seen, batches = [], []
    for rank in (0, 1):
        ds = ShardDataset(
            urls,
            3,
            False,
            counts,
            eval_transform(8),
            rank=rank,
            world_size=2,
            num_workers=2,
            batch_size=2,
            drop_last=True,
        )
        loader = torch.utils.data.DataLoader(ds, batch_size=2, drop_last=True, num_workers=2)
        got = [b[2].tolist() for b in loader]
        assert all(len(b) == 2 for b in got) and len(got) == len(loader)
        batches.append(len(got))
        seen += [i for b in got for i in b]
    assert batches == [4, 4] and len(seen) == len(set(seen)) == 16


def test_resume_point_follows_the_loaders_turns_between_workers():
    assert resume_point([4, 4, 3], 0) == (0, 0) and resume_point([4, 4, 3], 5) == (1, 2)
    # worker 1 has one batch: rounds 0 and 1 take 3 + 2 batches, then worker 0's and worker 2's third
    assert resume_point([4, 1, 3], 6) == (2, 1) and resume_point([4, 1, 3], 8) == (4, 0)
    assert resume_point([5], 3) == (3, 0)
    with pytest.raises(ValueError, match="cannot skip 9 batches"):
        resume_point([4, 4], 9)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("workers", [0, 3])
def test_a_stream_resumed_after_n_batches_is_the_rest_of_the_uninterrupted_one(tmp_path, workers):
    """8 shards of 3 over 3 workers hold 9, 9 and 6 examples: 4, 4 and 3 batches of 2, the loader taking them in
    turn (worker 0, 1, 2, 0, ...). Resumed after any n batches, the loader yields batches n, n + 1, ... of the
    epoch: the same examples, order and augmentation."""
    _, out, _ = _packed(tmp_path, 3)
    urls, counts, _ = shard_files(str(out))
    ds = ShardDataset(
        urls,
        3,
        False,
        counts,
        train_transform(8, 0.5, True),
        seed=4,
        shuffle_buffer=5,
        batch_size=2,
        drop_last=True,
        num_workers=workers,
    )
    loader = ShardLoader(ds, batch_size=2, drop_last=True, num_workers=workers)
    ds.use_epoch(2)
    full = list(loader)
    assert len(full) == len(loader) == (11 if workers else 12)
    for n in range(1, len(full) + 1) if not workers else (1, 2, 3, 5, 8, 9, 10, 11):
        ds.use_epoch(2, skip_batches=n)
        rest = list(loader)
        assert len(rest) == len(full) - n
        for (x, y, i), (fx, fy, fi) in zip(rest, full[n:]):
            assert torch.equal(i, fi) and torch.equal(y, fy) and torch.equal(x, fx)
    with pytest.raises(ValueError, match="cannot skip"):
        ds.use_epoch(2, skip_batches=len(full) + 1)


def test_shuffle_is_seeded_by_seed_and_epoch(tmp_path):
    _, out, _ = _packed(tmp_path, 4)
    urls, counts, _ = shard_files(str(out))

    def order(seed: int, epoch: int = 0) -> list:
        ds = ShardDataset(urls, 3, False, counts, seed=seed, shuffle_buffer=10)
        ds.use_epoch(epoch)
        return [i for _, _, i in ds]

    first = order(1)
    assert first == order(1) and sorted(first) == list(range(24))
    assert first != order(2) and first != order(1, epoch=1) and first != sorted(first)


def test_brace_expanded_shard_patterns(tmp_path):
    _, out, _ = _packed(tmp_path, 5)
    urls, counts, _ = shard_files(f"{out}/{{split}}-{{000000..000004}}.tar", "train")
    assert urls == shard_files(str(out))[0] and counts == [5, 5, 5, 5, 4]
    part, part_counts, _ = shard_files(f"{out}/train-{{000001..000002}}.tar")
    assert [Path(u).name for u in part] == ["train-000001.tar", "train-000002.tar"]
    assert len(_read(part, part_counts, shuffle=False)) == 10
    with pytest.raises(ValueError, match="not listed"):
        shard_files(f"{out}/train-{{000004..000005}}.tar")


def test_interrupted_pack_leaves_only_whole_shards_and_resumes(tmp_path):
    ds, out, index = _packed(tmp_path, 5, order_seed=None)
    clean = {p.name: p.read_bytes() for p in out.glob("*.tar")}
    broken_dir = tmp_path / "again"
    victim = Path(ds.load_image.paths[12])  # in the third shard (source order)
    good = victim.read_bytes()
    victim.write_bytes(b"not an image")
    with pytest.raises(ValueError, match="cannot read image"):
        pack(ds, broken_dir, 5, prefix="train", order_seed=None, progress=False)
    assert sorted(p.name for p in broken_dir.glob("*.tar")) == ["train-000000.tar", "train-000001.tar"]
    assert not [p for p in broken_dir.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(ValueError, match="interrupted"):
        shard_files(str(broken_dir))
    victim.write_bytes(good)
    before = (broken_dir / "train-000000.tar").stat().st_mtime_ns
    assert pack(ds, broken_dir, 5, prefix="train", order_seed=None, progress=False)["complete"]
    assert (broken_dir / "train-000000.tar").stat().st_mtime_ns == before  # kept, not rewritten
    assert {p.name: p.read_bytes() for p in broken_dir.glob("*.tar")} == clean  # the same bytes as one clean pack
    with pytest.raises(ValueError, match="differs in shard_size"):
        pack(ds, broken_dir, 6, prefix="train", order_seed=None, progress=False)


def test_bad_input_names_the_fix(tmp_path):
    ds, out, _ = _packed(tmp_path, 5)
    urls, counts, _ = shard_files(str(out))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        shard_files(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no index.json"):
        shard_files(str(tmp_path / "empty"), "train")
    with pytest.raises(ValueError, match=r"5 shard\(s\) cannot be split across 2 rank\(s\) x 3"):
        ShardDataset(urls, 3, False, counts, rank=0, world_size=2, num_workers=3)
    for size in (0, -1, 2.5):
        with pytest.raises(ValueError, match="shard_size must be a whole number >= 1"):
            pack(ds, tmp_path / "x", size, progress=False)
    with pytest.raises(ValueError, match="nothing to pack"):
        pack(ds.head(0), tmp_path / "x", 5, progress=False)
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "a.tar").write_bytes(b"")
    with pytest.raises(ValueError, match="tar files without an index.json"):
        pack(ds, tmp_path / "foreign", 5, progress=False)
    with pytest.raises(ValueError, match="read as a stream"):
        build_split(DataConfig(source="shards", path=str(out)), "train")


def test_cli_pack_and_the_shard_loader(tmp_path):
    result = CliRunner().invoke(
        main, ["data", "pack", "digits", str(tmp_path), "--shard-size", "100", "--split", "val"]
    )
    assert result.exit_code == 0, result.output
    import json

    from harness.data.pack_source import PACK_KEYS

    recorded = json.loads((tmp_path / "val" / "index.json").read_text())["source"]["config"]
    assert recorded["source"] == "digits" and set(recorded) <= set(PACK_KEYS)  # no image_size: the pack applied none
    cfg = DataConfig(
        source="shards",
        path=str(tmp_path),
        image_size=8,
        batch_size=32,
        eval_batch_size=100,
        hflip=False,
        crop_scale=0.5,
    )
    loader, ds = shard_loader(cfg, "val", train=False)
    batches = list(loader)
    assert batches[0][0].shape == (100, 3, 8, 8) and batches[0][0].min() >= -1 and batches[0][0].max() <= 1
    assert sorted(torch.cat([b[2] for b in batches]).tolist()) == list(range(360))  # all 360 once
    labels = {int(i): int(y) for b in batches for y, i in zip(b[1], b[2])}
    assert [labels[i] for i in range(360)] == build_split(DataConfig(source="digits"), "val").labels.tolist()
    train, train_ds = shard_loader(cfg, "val", train=True, seed=1)
    got = list(train)
    assert len(got) == len(train) == 360 // 32 and all(len(b[2]) == 32 for b in got)
    assert Counter(torch.cat([b[2] for b in got]).tolist()).most_common(1)[0][1] == 1
    result = CliRunner().invoke(main, ["data", "pack", "cifar11", str(tmp_path), "--shard-size", "1"])
    assert result.exit_code != 0 and "unknown source 'cifar11'" in result.output


# --- a pack is checked: names inside its folder, counts and labels as its index says, no shell -----------------------
def _edit_index(folder: Path, change) -> None:
    import json

    index = json.loads((folder / "index.json").read_text())
    change(index)
    (folder / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize(
    "name", ["../other/test-000000.tar", "../../etc/passwd", "/etc/passwd", "sub/train-000000.tar", "train-000000.txt"]
)
def test_a_shard_name_that_is_not_a_plain_tar_file_in_the_pack_folder_is_refused(tmp_path, name):
    """Audit K08b, K08, K09: index.json names were used unchecked (a run trained on the test split, exit 0)."""
    _, out, _ = _packed(tmp_path, 5)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "test-000000.tar").write_bytes((out / "train-000000.tar").read_bytes())
    _edit_index(out, lambda i: i["shards"][0].update(name=name))
    with pytest.raises(ValueError, match=r"lists a shard named .*: a pack lists only plain \.tar file names inside"):
        shard_files(str(out))


def test_a_shard_that_is_a_link_out_of_the_pack_folder_is_refused(tmp_path):
    _, out, _ = _packed(tmp_path, 5)
    outside = tmp_path / "outside.tar"
    (out / "train-000000.tar").rename(outside)
    (out / "train-000000.tar").symlink_to(outside)
    with pytest.raises(ValueError, match="lists a shard named 'train-000000.tar'"):
        shard_files(str(out))


def test_a_pipe_url_never_runs_and_is_refused_by_name(tmp_path, monkeypatch):
    """Audit N07, N07b: data.path "pipe:..." went to webdataset's gopen, which ran it through the shell."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "PIPE_RAN"
    for path in (f"pipe:touch {marker}; echo /x.tar", f"pipe:touch {marker} #/x.tar"):
        with pytest.raises(ValueError, match=r"is a pipe: URL, which the harness does not open"):
            shard_files(path, "train")
        with pytest.raises(ValueError, match=r"is a pipe: URL"):
            DataConfig(source="shards", path=path)
        with pytest.raises(ValueError, match=r"shard 'pipe:.*is a pipe: URL"):
            ShardDataset([path], 3, False)
    assert not marker.exists() and not (tmp_path / "index.json").exists()


def test_an_inconsistent_index_is_refused_before_reading(tmp_path):
    _, out, _ = _packed(tmp_path, 5)
    _edit_index(out, lambda i: i.update(class_names=["ant", "bee"]))
    with pytest.raises(ValueError, match=r"index\.json is inconsistent \(num_classes 3 but 2 class names"):
        shard_files(str(out))
    _edit_index(out, lambda i: i.update(class_names=list(CLASSES), num_examples=23))
    with pytest.raises(ValueError, match=r"num_examples 23 is not the sum of the shards' 24"):
        shard_files(str(out))


def test_a_shard_holding_other_counts_or_labels_than_its_index_is_named(tmp_path):
    """Audit K05: the index's counts and label digests were never compared with what is read."""
    _, out, index = _packed(tmp_path, 5)
    assert all(len(s["labels_sha256"]) == 64 for s in index["shards"])
    _edit_index(out, lambda i: i["shards"][1].update(examples=4))  # an undercount (and the total to match)
    _edit_index(out, lambda i: i.update(num_examples=23))
    urls, counts, idx = shard_files(str(out))
    with pytest.raises(ValueError, match=r"shard .*train-000001\.tar holds 5 examples where its index says 4"):
        _read(urls, counts, shuffle=False, digests=[s["labels_sha256"] for s in idx["shards"]])
    _edit_index(
        out,
        lambda i: (
            i["shards"][1].update(examples=5),
            i.update(num_examples=24),
            i["shards"][2].update(labels_sha256="0" * 64),
        ),
    )
    urls, counts, idx = shard_files(str(out))
    with pytest.raises(ValueError, match=r"the labels of shard .*train-000002\.tar do not match the labels_sha256"):
        _read(urls, counts, shuffle=False, digests=[s["labels_sha256"] for s in idx["shards"]])


def _retar(shard: Path, rename) -> None:
    """Rewrite a shard with its members renamed by ``rename(name) -> name``."""
    with tarfile.open(shard) as t:
        members = [(m, t.extractfile(m).read()) for m in t.getmembers()]
    with tarfile.open(shard, "w") as t:
        for m, data in members:
            m.name = rename(m.name)
            t.addfile(m, __import__("io").BytesIO(data))


@pytest.mark.parametrize("bad", ["../../escaped", "sub/000001"])
def test_a_tar_member_name_with_a_slash_or_dots_is_refused_naming_the_shard(tmp_path, bad):
    """Audit K04: a member ../../escaped.png reached the collate as a string key (a traceback mid-training)."""
    _, out, _ = _packed(tmp_path, 5)
    first = sorted(out.glob("*.tar"))[0]
    key = tarfile.open(first).getnames()[0].split(".")[0]
    _retar(first, lambda n: n.replace(key, bad) if n.startswith(key) else n)
    urls, counts, _ = shard_files(str(out))
    with pytest.raises(ValueError, match=r"shard .*train-000000\.tar has a member named .*member names with '/' or"):
        _read(urls, counts, shuffle=False)
    assert not list(tmp_path.parent.glob("escaped*"))


def test_a_file_that_is_not_a_tar_is_named_not_a_traceback(tmp_path):
    _, out, _ = _packed(tmp_path, 5)
    urls, counts, _ = shard_files(str(out))  # read before the shard is replaced, as a stream reads its list once
    (out / "train-000003.tar").write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 40)
    with pytest.raises(ValueError, match=r"shard .*train-000003\.tar cannot be read as a tar file"):
        _read(urls, counts, shuffle=False)


def test_a_shard_cut_short_is_refused_before_reading_and_packed_again(tmp_path):
    """Audit 13 A13-10: each shard's size is in index.json, so a damaged shard is named before any work, and the
    same pack command writes it anew (byte-identical: the pack is deterministic)."""
    ds, out, index = _packed(tmp_path, 5)
    shard = out / "train-000003.tar"
    whole = shard.read_bytes()
    assert index["shards"][3]["bytes"] == len(whole)
    shard.write_bytes(whole[:5000])
    with pytest.raises(ValueError, match=r"train-000003\.tar is 5000 bytes, and .*index\.json records \d+: it is "):
        shard_files(str(out))
    pack(ds, out, 5, prefix="train", progress=False)
    assert shard.read_bytes() == whole
