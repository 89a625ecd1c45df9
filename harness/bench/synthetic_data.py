"""The synthetic split of ``harness bench data`` (:mod:`harness.bench.data`): ``N`` examples of 32x32 PNG images (a
pool of 1,000 random images, written byte for byte N times over, 1,000 files a folder), 10 classes, listed in a
``train.jsonl`` manifest (``data.source=manifest``, :func:`make_data`), and the same split packed as WebDataset
shards by :func:`harness.data.pack.pack` (``data.source=shards``, :func:`pack_data`).
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np

#: the two sources the synthetic split is measured as
SOURCES = ("manifest", "shards")
NUM_CLASSES = 10
POOL = 1_000
PER_FOLDER = 1_000


def make_data(root: Path, n: int, image_size: int = 32, seed: int = 0) -> dict:
    """Write ``n`` examples under ``root``: ``img/<folder>/<i>.png`` and ``train.jsonl`` (``{"path", "labels"}``).

    Image i is image ``i % 1000`` of a pool of random ``image_size`` x ``image_size`` RGB PNGs, its label that
    image's number mod 10.

    Returns:
        ``{"seconds", "image_bytes"}``: the time taken and the bytes of all image files.

    Raises:
        ValueError: ``n`` < 1.
    """
    from PIL import Image

    if n < 1:
        raise ValueError(f"the number of examples must be >= 1, got {n}")
    tic = time.perf_counter()
    rng = np.random.default_rng(seed)
    pool = []
    for _ in range(POOL):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (image_size, image_size, 3), dtype=np.uint8)).save(buf, "PNG")
        pool.append(buf.getvalue())
    root.mkdir(parents=True, exist_ok=True)
    total = 0
    with open(root / "train.jsonl", "w") as manifest:
        for i in range(n):
            folder = f"img/{i // PER_FOLDER:05d}"
            if i % PER_FOLDER == 0:
                (root / folder).mkdir(parents=True, exist_ok=True)
            data = pool[i % POOL]
            (root / folder / f"{i:07d}.png").write_bytes(data)
            total += len(data)
            manifest.write(json.dumps({"path": f"{folder}/{i:07d}.png", "labels": [i % POOL % NUM_CLASSES]}) + "\n")
    (root / "classes.txt").write_text("".join(f"c{c}\n" for c in range(NUM_CLASSES)))
    return {"seconds": time.perf_counter() - tic, "image_bytes": total}


def pack_data(manifest_dir: str, out: str, shard_size: int) -> dict:
    """Pack the manifest's train split into shards (in a fresh process): ``{"seconds", "shards", "shard_bytes"}``."""
    from harness.data.config import DataConfig
    from harness.data.pack import pack
    from harness.data.sources import build_split

    tic = time.perf_counter()
    index = pack(
        build_split(DataConfig(source="manifest", path=manifest_dir, multilabel=True), "train"),  # label sets
        Path(out) / "train",
        shard_size,
        prefix="train",
        progress=False,
    )
    size = sum(p.stat().st_size for p in (Path(out) / "train").glob("*.tar"))
    return {"seconds": time.perf_counter() - tic, "shards": len(index["shards"]), "shard_bytes": size}
