"""Bad inputs found by the eleventh reliability audit in files: a file-size limit (``ulimit -f``, a quota, the file
system's largest file: errno EFBIG) reached by a pack or a checkpoint, and an image folder whose class folder is a
link out of ``data.path`` (``audit11 <case id>``)."""

from __future__ import annotations

import contextlib
import os
import resource

import click
from PIL import Image

from bad_inputs import bad_input


@contextlib.contextmanager
def _file_size_limit(size: int):
    """A real ``ulimit -f`` of ``size`` bytes in this process (writes past it fail with EFBIG; Python ignores the
    SIGXFSZ that comes with them), the previous limit restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


# ------------------------------------------------------------------------------------------- EFBIG
@bad_input(
    "errors",
    "harness data pack under a file-size limit of 40 kB (ulimit -f) (audit11 A11-28: 'Error: [Errno 27] File too "
    "large', no file, no fix; harness report the same)",
    click.ClickException,
    r"file-size limit reached while writing \S*out/train/\S+\.tar: .*ulimit -f unlimited.*write to another disk "
    r"and run the same command again",
    before=False,
)
def _pack_file_size_limit(tmp):
    from bad_inputs_upstream import _cli

    try:
        with _file_size_limit(40_000):
            _cli("data", "pack", "digits", str(tmp / "out"), "--shard-size", "200")
    finally:
        assert not list((tmp / "out").rglob("*.tmp")), "a half-written temporary file was left"


@bad_input(
    "errors",
    "harness upstream under a file-size limit below the checkpoint's size (ulimit -f) (audit11 A11-29: a 67-line "
    "traceback, 'File too large' then torch's 'unexpected pos' RuntimeError)",
    OSError,
    r"file-size limit reached while writing \S*last\.pt: .*ulimit -f.*run the same command again",
    before=False,
)
def _checkpoint_file_size_limit(tmp):
    from bad_inputs_upstream import _run

    try:
        with _file_size_limit(60_000):  # the digits model's checkpoint is larger; config.yaml and run.json are not
            _run(tmp, "train.checkpoint_every=1", config="digits_hom.yaml")
    finally:
        assert (tmp / "run" / "config.yaml").is_file() and not list((tmp / "run").rglob("*.tmp"))


# ------------------------------------------------------------------------------------------- image folder
@bad_input(
    "data",
    "image_folder whose class folder train/b is a link to a folder outside data.path (audit11 A11-27: the images "
    "behind the link trained as class b, where a manifest refuses them)",
    ValueError,
    r"image folder '\S*imf/train': '\S*imf/train/b' is a link to '\S*elsewhere', outside data.path '\S*imf'.*"
    r"copy the images under data.path.*or set data.allow_outside_root=true",
)
def _image_folder_link_out(tmp):
    from harness.data.config import DataConfig
    from harness.data.sources import build_split

    for folder in ("imf/train/a", "elsewhere"):
        os.makedirs(tmp / folder)
        Image.new("RGB", (16, 16)).save(tmp / folder / "0.png")
    (tmp / "imf/train/b").symlink_to(tmp / "elsewhere")
    ok = build_split(DataConfig(source="image_folder", path=str(tmp / "imf"), allow_outside_root=True), "train")
    assert ok.class_names == ["a", "b"] and len(ok) == 2, "data.allow_outside_root=true reads the link"
    build_split(DataConfig(source="image_folder", path=str(tmp / "imf")), "train")
