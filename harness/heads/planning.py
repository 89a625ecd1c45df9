"""How one call of the HET head draws its noise and chunks its samples (:func:`plan_noise`), eager or compiling.

Split from :mod:`harness.heads.sampling`, which re-exports every name here.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from harness.heads.noise import CounterNoise, counter_bank, counter_key, seeded_noise
from harness.heads.options import BANK_ROWS
from harness.heads.rows import MIN_SAMPLES

__all__ = [
    "ACCELERATOR_CHUNK_SCALE",
    "AUTO_CHUNK_ELEMENTS",
    "FRESH_CHUNK_ELEMENTS",
    "auto_chunk_size",
    "chunk_elements",
    "plan_noise",
]

#: elements of one ``[N, chunk, K]`` tensor of the evaluation bank when the chunk size is chosen
#: automatically (4 MiB of float32); it fixes the bank's chunks and row blocks (see :func:`plan_noise`).
AUTO_CHUNK_ELEMENTS = 1 << 20
#: the same for fresh noise (training): 8 MiB of float32 per ``[N, chunk, K]`` tensor, i.e. 32
#: samples of B = 64, K = 1000. Larger chunks mean fewer, larger operations: on the bench's 2-core
#: CPU, chunks of 32 samples step 1.3x faster than chunks of 16 under load, while the peak memory
#: stays under 0.2 of the naive implementation's (``results/bench/heads.md``).
FRESH_CHUNK_ELEMENTS = 1 << 21
#: how many times larger a chunk is on an accelerator (CUDA, MPS, ...): there a chunk of a few MiB is a handful of
#: microseconds of work behind each of its kernel launches, so the step is launch-bound. Measured on an H200
#: (``results/bench/device.md``: B = 64, D = 2048, K = 1000, S = 1000, forward + backward): at the CPU's chunks
#: the low-rank head took 38 ms against the naive implementation's 5 ms; ``results/bench/device-chunks.md``
#: gives the time and memory of each chunk size there. The memory stays flat in S beyond one chunk.
ACCELERATOR_CHUNK_SCALE = 16


def chunk_elements(elements: int, device: torch.device) -> int:
    """The element budget ``elements`` (:data:`AUTO_CHUNK_ELEMENTS` or :data:`FRESH_CHUNK_ELEMENTS`) on
    ``device``: as given on the CPU, :data:`ACCELERATOR_CHUNK_SCALE` times larger elsewhere."""
    return elements if device.type == "cpu" else elements * ACCELERATOR_CHUNK_SCALE


def auto_chunk_size(num_rows: int, width: int, num_samples: int, elements: int = AUTO_CHUNK_ELEMENTS) -> int:
    """Chunk size so that one ``[num_rows, chunk, width]`` tensor has about ``elements`` elements (1M)."""
    return max(1, min(num_samples, elements // max(1, num_rows * width)))


def plan_noise(head, h: Tensor, s: int, seed: Optional[int]) -> "tuple":
    """Noise and chunking of one call of a :class:`~harness.heads.HeteroscedasticHead` over features
    ``h`` ``[N, D]`` and S samples.

    Seeded evaluation (``eval()`` mode and a seed from ``seed`` or ``eval_seed``) uses the
    evaluation noise bank: noise shared by all rows (leading dim 1), with a chunk size that
    depends only on S, the widths and ``mc_chunk_size``, never on N, so each sample's
    noise and each row's computation are the same whatever the batch. With the automatic
    chunk size the rows are processed in blocks of about AUTO_CHUNK_ELEMENTS / (chunk·width)
    rows, which keeps the memory of a chunk flat in the batch size as in training.
    Otherwise the noise is fresh (``seed`` if given, else drawn from torch's global RNG), per
    row unless ``share_samples_across_batch``, with chunks of about FRESH_CHUNK_ELEMENTS; on an accelerator both
    budgets are :data:`ACCELERATOR_CHUNK_SCALE` times larger (:func:`chunk_elements`). On the CPU a HET-XL head whose
    single row's chunk reaches :data:`~harness.heads.rows.MIN_SAMPLES` samples draws it row by row and is
    computed row by row (:mod:`harness.heads.rows`: one product fewer in the backward pass).

    Inside ``torch.compile`` the noise is :class:`~harness.heads.noise.CounterNoise` keyed by a
    tensor (drawn in the graph from the global RNG, or made from the seed): an element's noise
    depends on its indices only, so the bank needs neither a fixed chunk size nor row blocks.
    The eager bank is that same counter-based noise (:func:`~harness.heads.noise.counter_bank`, drawn
    once and kept), so eager and compiled seeded evaluation average the same samples
    (:data:`~harness.heads.noise.EVAL_NOISE`); fresh noise (training, ``eval_seed=None``) stays
    torch's generators in eager.

    Returns:
        ``(noise, chunk, row_block, key)``: a noise function (eager: :func:`~harness.heads.noise.counter_bank`
        for the bank, else :func:`~harness.heads.noise.seeded_noise`) or a
        :class:`~harness.heads.noise.CounterNoise` (compiling), samples per chunk (<= S), rows per block
        (None: all rows at once), and the counter key (None in eager).
    """
    bank = not head.training and (seed is not None or head.eval_seed is not None)
    if bank and seed is None:
        seed = head.eval_seed
    width = max(head.num_classes, head.noise_width)
    shared = bank or head.share_samples_across_batch
    scalar = head.diag_noise == "shared_scalar"
    if torch.compiler.is_compiling():
        if seed is None:  # in-graph draw from the global RNG: reproducible via manual_seed
            key = torch.randint(0, 2**31 - 1, (), dtype=torch.int64, device=h.device)
        else:
            key = torch.tensor(counter_key(seed), dtype=torch.int64, device=h.device)
        rows = h.shape[0] if isinstance(h.shape[0], int) else BANK_ROWS  # a dynamic batch: a static chunk
        chunk = head.mc_chunk_size or auto_chunk_size(rows, width, s, chunk_elements(FRESH_CHUNK_ELEMENTS, h.device))
        return CounterNoise(shared, head.noise_width, head.num_factors, scalar), min(chunk, s), None, key
    if seed is None:
        seed = int(torch.randint(0, 2**62, (), device="cpu"))  # global RNG: reproducible via manual_seed
    row_block = None
    if head.mc_chunk_size is not None:
        chunk = head.mc_chunk_size
    elif bank:
        budget = chunk_elements(AUTO_CHUNK_ELEMENTS, h.device)
        chunk = auto_chunk_size(BANK_ROWS, width, s, budget)
        row_block = max(1, budget // (chunk * width))
    else:
        chunk = auto_chunk_size(h.shape[0], width, s, chunk_elements(FRESH_CHUNK_ELEMENTS, h.device))
    by_row = not (bank or shared or scalar) and h.device.type == "cpu" and _row_by_row(head, h.shape[0], width, s)
    if by_row:
        chunk = auto_chunk_size(1, width, s, FRESH_CHUNK_ELEMENTS)
    if bank:
        noise = counter_bank(
            seed,
            head.noise_width,
            head.num_factors,
            diag_scalar=scalar,
            num_samples=s,
            device=h.device,
            dtype=h.dtype,
        )
        return noise, min(chunk, s), row_block, None
    noise = seeded_noise(
        seed,
        h.shape[0],
        head.noise_width,
        head.num_factors,
        shared=shared,
        diag_scalar=scalar,
        device=h.device,
        dtype=h.dtype,
        by_row=by_row,
    )
    return noise, min(chunk, s), row_block, None


def _row_by_row(head, num_rows: int, width: int, s: int) -> bool:
    """Whether a call with fresh, per-row noise goes row by row (:mod:`harness.heads.rows`): HET-XL (noise on the
    pre-logits), the chunk size automatic, two rows or more, and one row's chunk at least
    :data:`~harness.heads.rows.MIN_SAMPLES` samples long."""
    return (
        head.noise_space == "pre_logits"
        and head.mc_chunk_size is None
        and num_rows >= 2
        and auto_chunk_size(1, width, s, FRESH_CHUNK_ELEMENTS) >= MIN_SAMPLES
    )
