"""The reading plan of a pack of shards split across ranks and data-loader workers (:mod:`harness.data.shards`
reads the stream by it): which shards each (rank, worker) slot reads, ``shards[rank::world_size][worker::workers]``
(webdataset's ``split_by_node`` then ``split_by_worker``); how many examples each slot yields per epoch with
``drop_last``, so that every rank makes the same number of whole batches (:func:`batch_limits`); and where a
mid-epoch resume starts, in rounds of the loader's workers (:func:`resume_point`, after the turns
``torch.utils.data.DataLoader`` takes between its workers).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _slots(n_shards: int, world_size: int, workers: int) -> "list[list[list[int]]]":
    """``slots[r][w]``: the shards (positions in the index's order) of worker w of rank r."""
    return [[list(range(n_shards))[r::world_size][w::workers] for w in range(workers)] for r in range(world_size)]


def batch_limits(
    counts: Sequence[int], world_size: int, workers: int, batch_size: int, multiple: int = 1
) -> "list[list[int]]":
    """Examples each (rank, worker) slot yields per epoch so that every rank makes the same number of whole batches.

    Each worker batches its own stream (``torch.utils.data.DataLoader`` with an iterable dataset), so a slot
    yields a multiple of ``batch_size``: slot (r, w) holding n examples can give n // batch_size batches; every
    rank gets T = the smallest of the ranks' sums rounded down to a multiple of ``multiple`` (the gradient
    accumulation steps, so that an epoch ends on an optimiser step), taken from its fullest workers first.

    Returns:
        ``limits[r][w]``: examples (a multiple of ``batch_size``).

    Raises:
        ValueError: some rank cannot make ``multiple`` whole batches.
    """
    batches = [
        [sum(counts[i] for i in slot) // batch_size for slot in rank]
        for rank in _slots(len(counts), world_size, workers)
    ]
    multiple = max(1, int(multiple))
    target = min(sum(b) for b in batches) // multiple * multiple
    if target == 0:
        raise ValueError(
            f"with {len(counts)} shards of {sum(counts)} examples over {world_size} rank(s) x {workers} "
            f"worker(s), some rank cannot fill {multiple} batch(es) of {batch_size}: lower the batch "
            "size, the gradient accumulation steps or the number of workers, or pack smaller shards"
        )
    for b in batches:
        while sum(b) > target:
            b[int(np.argmax(b))] -= 1
    return [[v * batch_size for v in b] for b in batches]


def resume_point(per_worker: Sequence[int], n: int) -> "tuple[int, int]":
    """Where the first ``n`` batches of a ``DataLoader`` over an iterable dataset end, in rounds of its workers.

    ``torch.utils.data.DataLoader`` (``in_order=True``, its default) hands out batch requests to its workers in
    turn (worker 0, 1, ..., K-1, 0, ...), passing over workers whose iterable dataset has ended, and returns the
    batches in request order; so batch j of worker w comes in round j, and the loader's stream is round 0 of every
    worker, then round 1 of every worker that has a second batch, and so on; a new iterator starts at worker 0.

    Args:
        per_worker: ``[K]`` batches each worker yields this epoch (one entry with 0 loader workers).
        n: batches already taken from the loader, 0 <= n <= sum(per_worker).

    Returns:
        ``(rounds, rest)``: the first ``n`` batches are every worker's first ``min(c_w, rounds)`` batches and then
        ``rest`` batches of round ``rounds`` (0 <= rest < the workers that have a batch in that round). A loader
        whose workers skip their first ``min(c_w, rounds)`` batches starts at round ``rounds``, worker 0: drop
        its first ``rest`` batches and it continues as the uninterrupted stream.

    Raises:
        ValueError: ``n`` outside [0, sum(per_worker)].
    """
    per_worker = [int(c) for c in per_worker]
    if not 0 <= n <= sum(per_worker):
        raise ValueError(
            f"cannot skip {n} batches of an epoch of {sum(per_worker)}: the checkpoint does not match "
            "this data (resume with the pack, batch size, ranks and workers it was written with)"
        )
    lo, hi = 0, max(per_worker, default=0)  # the largest number of whole rounds r with sum(min(c, r)) <= n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if sum(min(c, mid) for c in per_worker) <= n else (lo, mid - 1)
    return lo, n - sum(min(c, lo) for c in per_worker)
