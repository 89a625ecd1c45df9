"""Bad inputs found by the eleventh reliability audit in data packs, manifests and image reading (``audit11 <case
id>``): pack overrides of keys pack never reads or of another source than SOURCE, a manifest's ``classes.txt`` naming
one class twice (refused only after a whole training run), and an image above PIL's decompression-bomb limit ending
in a traceback."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from bad_inputs_audit8_packs import _manifest
from bad_inputs_audit9_config import CLI_ERROR
from bad_inputs_audit10_flags import _pack
from PIL import Image

from bad_inputs import bad_input


# ------------------------------------------------------------------------------ A11-09: keys pack does not read
@bad_input(
    "packs",
    "harness data pack digits OUT limit_train=20 image_size=64 (audit11 A11-09: packed at 8x8, index.json recorded "
    "image_size 64)",
    CLI_ERROR,
    r"image_size=64 is not read by harness data pack: a pack stores each image as the source holds it \(no resize, "
    r"augmentation or loader\).*remove image_size=64 from the overrides",
)
def _pack_image_size(tmp):
    _pack(tmp, "limit_train=20", "image_size=64")


@bad_input(
    "packs",
    "harness data pack digits OUT limit_train=20 batch_size=8 hflip=false (audit11 A11-09: loader and augmentation "
    "keys accepted, never read)",
    CLI_ERROR,
    r"batch_size=8 is not read by harness data pack.*data\.source=shards data\.batch_size=8.*remove batch_size=8",
)
def _pack_loader_keys(tmp):
    _pack(tmp, "limit_train=20", "batch_size=8", "hflip=false")


@bad_input(
    "packs",
    "harness data pack digits OUT limit_train=20 label_set=worse (audit11 A11-09: digits packed with their clean "
    "labels, index.json recorded label_set worse)",
    CLI_ERROR,
    r"data\.label_set=worse is read only by data\.source=cifar10n, and this run's source is digits: remove "
    r"data\.label_set",
)
def _pack_label_set_on_digits(tmp):
    _pack(tmp, "limit_train=20", "label_set=worse")


# ------------------------------------------------------------------------------ A11-10: SOURCE and source=
@bad_input(
    "packs",
    "harness data pack digits OUT source=manifest path=M (audit11 A11-10: the override won, the manifest was packed "
    "instead of digits)",
    CLI_ERROR,
    r"source=manifest in the overrides differs from SOURCE digits: one source is packed.*remove source=manifest to "
    r"pack digits, or give it as SOURCE \(harness data pack manifest OUT \.\.\.\)",
)
def _pack_source_override(tmp):
    m = _manifest(tmp, *({"path": f"img/{i}.png", "labels": [i % 2]} for i in range(4)))
    _pack(tmp, "source=manifest", f"path={m}")


# ------------------------------------------------------------------------------ A11-12: classes.txt
def _manifest_folder(tmp: Path, classes: str, first: "str | None" = None) -> Path:
    """The audit's ``mf``: 12 random 16x16 PNGs, train/val/test.jsonl of ``{"path": "img/i.png", "labels": [i % 4]}``
    (4 each), ``classes.txt`` of ``classes``; ``first`` (a file under ``img/``), the first training entry."""
    mf = tmp / "mf"
    (mf / "img").mkdir(parents=True)
    rng = __import__("numpy").random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype="uint8")).save(mf / "img" / f"{i}.png")
    for s, split in enumerate(("train", "val", "test")):
        rows = [{"path": f"img/{i}.png", "labels": [i % 4]} for i in range(4 * s, 4 * s + 4)]
        if first and split == "train":
            rows.insert(0, {"path": f"img/{first}", "labels": [0]})
        (mf / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (mf / "classes.txt").write_text(classes)
    return mf


def _upstream_manifest(tmp: Path, mf: Path) -> None:
    """The audit's ``harness upstream`` (digits_hom.yaml, one epoch) on the manifest ``mf`` (multi-label: a sigmoid
    head) into ``tmp/r``; refused as the data is read, before training: the run folder holds no file but its lock."""
    from bad_inputs_safety import upstream_cli

    try:
        upstream_cli(
            "train.epochs=1",
            f"output_dir={tmp / 'r'}",
            "data.source=manifest",
            f"data.path={mf}",
            "data.heldout_split=val",
            "data.label_noise=null",
            "data.batch_size=4",
            "model.head.link=sigmoid",
            "train.best_metric=sigmoid_nll",
            "train.log_with=[]",
        )
    finally:
        written = sorted(p.name for p in (tmp / "r").glob("*") if p.name != ".lock")
        assert not written, f"the run wrote {written} before the error"


@bad_input(
    "upstream",
    "harness upstream on a manifest whose classes.txt reads a b b d (audit11 A11-12: refused after the whole training "
    "run, as Predictions class_names[2], with Python code as the fix)",
    CLI_ERROR,
    r"mf/classes\.txt: class name 'b' is on line 2 \(class 1\) and line 3 \(class 2\): each class needs its own name "
    r".*rename one, e\.g\. b_2, or delete classes\.txt",
)
def _manifest_class_named_twice(tmp):
    _upstream_manifest(tmp, _manifest_folder(tmp, "a\nb\nb\nd\n"))


@bad_input(
    "packs",
    "harness data pack of a manifest whose classes.txt has a blank line between names (audit11 A11-12: the blank line "
    "was skipped, 3 names for 4 classes, and the message said to set data.num_classes)",
    CLI_ERROR,
    r"mf/classes\.txt line 2 is empty, between class names: line i \+ 1 names class i.*write the name of class 1 "
    r"there, or delete the line",
)
def _pack_manifest_blank_class_name(tmp):
    from bad_inputs_safety import _cli

    mf = _manifest_folder(tmp, "a\n\nc\nd\n")
    try:
        _cli("data", "pack", "manifest", str(tmp / "pk"), "--shard-size", "4", f"path={mf}")
    finally:
        assert not (tmp / "pk").exists(), "a pack folder was written"


# ------------------------------------------------------------------------------ A11-13: a decompression bomb
def _huge_png(path: Path, side: int = 13_400) -> None:
    """A valid black ``side`` x ``side`` grey PNG (13,400² = 179.6 Mpx, just above PIL's refusal at twice
    ``PIL.Image.MAX_IMAGE_PIXELS``, 179.0 Mpx), written row by row: 0.8 MB on disk, no image in memory."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    z, rows = zlib.compressobj(1), bytes(side + 1) * 100  # 100 rows of filter byte 0 and black pixels
    idat = b"".join(z.compress(rows) for _ in range(side // 100)) + z.flush()
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)  # 8-bit grey
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


BOMB = (
    r"cannot read image '.*mf/img/huge\.png' of manifest .* \(DecompressionBombError: Image size \(179560000 pixels\) "
    r"exceeds limit of 178956970 pixels.*\): PIL refuses an image this large as a possible decompression bomb; shrink "
    r"the image .*, or remove that file"
)


@bad_input(
    "upstream",
    "harness upstream on a manifest whose first training image is 13400x13400 pixels (audit11 A11-13: a 40-line "
    "traceback ending in PIL's DecompressionBombError)",
    (ValueError, CLI_ERROR),
    BOMB,
)
def _manifest_decompression_bomb(tmp):
    mf = _manifest_folder(tmp, "a\nb\nc\nd\n", first="huge.png")
    _huge_png(mf / "img" / "huge.png")
    _upstream_manifest(tmp, mf)


@bad_input(
    "packs",
    "harness data pack of a manifest holding a 13400x13400 pixel image (audit11 A11-13: a traceback ending in PIL's "
    "DecompressionBombError)",
    CLI_ERROR,
    BOMB,
    before=False,
)
def _pack_decompression_bomb(tmp):
    from bad_inputs_safety import _cli

    mf = _manifest_folder(tmp, "a\nb\nc\nd\n", first="huge.png")
    _huge_png(mf / "img" / "huge.png")
    _cli("data", "pack", "manifest", str(tmp / "pk"), "--shard-size", "4", f"path={mf}")
    assert not list(tmp.glob("pk/**/*.tar")), "a shard was written"
