"""Standard-normal noise of the HET head, reproducible chunk by chunk so the backward pass can regenerate it.

Two sources, both keyed by a seed and the samples' indices:

- :func:`seeded_noise` (eager training, and evaluation with ``eval_seed=None``): torch's generators, seeded
  per chunk from ``(seed, start)``, never stored; the CPU draw is split over two threads
  (:func:`fill_standard_normal`).
- :class:`CounterNoise`: a counter-based generator written in tensor ops, ``ε = f(key, sample, row, column)``,
  so the noise is a pure function of a seed *tensor* and the indices. It needs no ``torch.Generator``
  (which the compiler cannot trace), lets inductor fuse the draw into the kernels that consume it, and
  regenerates exactly in the backward pass. Inside ``torch.compile`` every draw is counter-based; a
  *seeded evaluation* (the evaluation bank, ``eval_seed``) is counter-based eager too
  (:func:`counter_bank`), so eager and compiled evaluation average the same samples
  (:data:`EVAL_NOISE` names this definition; results record it).

Source of the counter-based design: Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"
(SC 2011: counter-based generators, a bijective mix of a counter and a key); the mixing function is
Thomas Mueller's 32-bit integer hash (``x = ((x >> 16) ^ x) * 0x45d9f3b`` twice, then a last
``x ^= x >> 16``), Box and Muller (1958) turn two uniforms into a normal.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import Tensor

# (start, length) -> (eps_factors [N|1, C, R] or None, eps_diag [N|1, C, W|1])
NoiseFn = Callable[[int, int], "tuple[Optional[Tensor], Tensor]"]

_POOL: "tuple[int, Optional[ThreadPoolExecutor]]" = (-1, None)


def fill_standard_normal(out: Tensor, gens: "list[torch.Generator]") -> None:
    """Fill ``out`` [A, B, C] with N(0, 1): its two halves (rows, or samples if one row) from
    ``gens[0]`` and ``gens[1]``. The values depend only on the generators, never on the thread
    count; on a multi-core CPU the halves are drawn in parallel (torch's CPU normal sampler is
    single-threaded and is the costliest step of the eager head). Eager only: never traced."""
    dim = 0 if out.shape[0] > 1 else 1
    if out.shape[dim] < 2:
        out.normal_(generator=gens[0])
        return
    half = out.shape[dim] // 2
    parts = (out.narrow(dim, 0, half), out.narrow(dim, half, out.shape[dim] - half))
    if out.device.type != "cpu" or torch.get_num_threads() < 2 or out.numel() < (1 << 16):
        for part, gen in zip(parts, gens):
            part.normal_(generator=gen)
        return
    global _POOL
    if _POOL[0] != os.getpid():  # a forked child cannot use its parent's threads
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=1, thread_name_prefix="het-noise"))
    other = _POOL[1].submit(parts[1].normal_, generator=gens[1])
    parts[0].normal_(generator=gens[0])
    other.result()


def seeded_noise(
    seed: int,
    num_rows: int,
    width: int,
    num_factors: int,
    *,
    shared: bool,
    diag_scalar: bool,
    device: torch.device,
    dtype: torch.dtype,
    by_row: bool = False,
) -> NoiseFn:
    """Standard-normal noise for chunk ``(start, length)``, reproducible from ``(seed, start)`` (eager).

    Each chunk draws from its own generators seeded by ``seed`` and the chunk's first sample
    index, so the backward pass regenerates exactly the forward noise without storing it.

    Args:
        seed: base seed of this forward call (non-negative int).
        num_rows: N, rows of the batch (ignored when ``shared``).
        width: W, noise width (K for HET, D for HET-XL).
        num_factors: R, or 0 when there are no factors.
        shared: one draw per sample broadcast over the batch (leading dim 1). The draw then
            depends only on ``(seed, start, length)`` and the widths, never on ``num_rows``: the
            head's evaluation noise bank relies on this (``HeteroscedasticHead``, ``eval_seed``).
        diag_scalar: one scalar per sample for the diagonal term instead of W independent
            normals (the rank-1 "diagonal" of edward2 ``edward2/jax/nn/heteroscedastic_lib.py``).
        by_row: each row's chunk from its own generators, seeded by ``(seed, start, row)``, for the row-by-row
            driver of :mod:`harness.heads.rows` (with ``shared=False``): the function then also has
            ``noise.row(row, start, length, ws=None)``, one row's ``[1, length, ...]`` tensors, and
            ``noise(start, length)`` stacks every row's.

    Returns:
        ``noise(start, length, ws=None) -> (eps_factors [N|1, length, R] or None, eps_diag [N|1, length, W|1])``;
        with a :class:`~harness.heads.linear_space.Workspace` ``ws`` the draw fills its buffers ``"eps_f"``
        and ``"eps_d"`` (the same values), overwritten by the next call with the same workspace (by row: ``ws``
        is taken by ``noise.row`` only).

    Raises:
        ValueError: ``by_row`` with ``shared``.
    """
    if by_row and shared:
        raise ValueError("seeded_noise: by_row=True draws each row's own noise; it cannot be shared (shared=True)")
    rows = 1 if shared else num_rows
    diag_width = 1 if diag_scalar else width

    def draw(base: int, rows: int, length: int, ws) -> "tuple[Optional[Tensor], Tensor]":
        gens = [torch.Generator(device=device) for _ in range(2)]
        for part, gen in enumerate(gens):
            gen.manual_seed((base + part) % (1 << 63))
        # diagonal noise first, so every variant sees the same ε_W for the same seed
        like = torch.empty(0, device=device, dtype=dtype)
        shape = (rows, length, diag_width)
        eps_diag = torch.empty(shape, device=device, dtype=dtype) if ws is None else ws.get("eps_d", shape, like)
        fill_standard_normal(eps_diag, gens)
        eps_factors = None
        if num_factors > 0:
            shape = (rows, length, num_factors)
            eps_factors = torch.empty(shape, device=device, dtype=dtype) if ws is None else ws.get("eps_f", shape, like)
            eps_factors.normal_(generator=gens[0])
        return eps_factors, eps_diag

    if not by_row:

        def noise(start: int, length: int, ws=None) -> "tuple[Optional[Tensor], Tensor]":
            return draw((seed * 1_000_003 + start) * 2, rows, length, ws)

        noise.takes_workspace = True  # type: ignore[attr-defined]
        return noise

    def row(index: int, start: int, length: int, ws=None) -> "tuple[Optional[Tensor], Tensor]":
        return draw(((seed * 1_000_003 + start) * 1_000_033 + index + 1) * 2, 1, length, ws)

    def stacked(start: int, length: int, ws=None) -> "tuple[Optional[Tensor], Tensor]":
        parts = [row(index, start, length) for index in range(num_rows)]
        return (None if num_factors == 0 else torch.cat([p[0] for p in parts])), torch.cat([p[1] for p in parts])

    stacked.row = row  # type: ignore[attr-defined]
    return stacked


# ---------------------------------------------------------------------------------------------- counter-based
_MASK = 0xFFFFFFFF
_MIX = 0x45D9F3B  # < 2**31, so every product of a 32-bit value fits in int64 (no overflow anywhere)
_GOLDEN = 0x9E3779B9


def mix32(x: Tensor) -> Tensor:
    """Mueller's 32-bit integer hash, a bijection of [0, 2**32), on int64 tensors holding 32-bit values."""
    x = ((x >> 16) ^ x) * _MIX & _MASK
    x = ((x >> 16) ^ x) * _MIX & _MASK
    return (x >> 16) ^ x


def counter_key(seed: int) -> int:
    """A 32-bit key from a Python int seed of any size (its bits folded in), for :class:`CounterNoise`."""
    seed = int(seed) % (1 << 64)
    key = 0
    for word in (seed & _MASK, seed >> 32):
        key = _mix_int(key ^ _mix_int((word + _GOLDEN) & _MASK))
    return key


def _mix_int(x: int) -> int:
    x = ((x >> 16) ^ x) * _MIX & _MASK
    x = ((x >> 16) ^ x) * _MIX & _MASK
    return (x >> 16) ^ x


def counter_normals(key: Tensor, samples: Tensor, rows: int, columns: Tensor, dtype: torch.dtype) -> Tensor:
    """Standard normals ``[rows, C, M]``: element (n, s, m) is a function of (key, samples[s], n, columns[m]) only.

    Args:
        key: 0-dim int64 tensor in [0, 2**32).
        samples: ``[C]`` int64 global sample indices.
        rows: number of rows (1 for noise shared across the batch).
        columns: ``[M]`` int64 column indices (distinct per stream: the diagonal and the factor
            noise use disjoint ranges).
        dtype: floating dtype of the result.

    Two 24-bit uniforms per element from the hash of the counter, then Box-Muller:
    ε = sqrt(-2 ln u1) cos(2π u2), u1 in (0, 1], |ε| <= 5.9.
    """
    base = mix32(key ^ mix32((samples.view(1, -1, 1) * 2 + 1) & _MASK))  # [1, C, 1]
    if rows > 1:
        base = mix32(base ^ torch.arange(rows, device=samples.device, dtype=torch.int64).view(-1, 1, 1))
    col = columns.view(1, 1, -1) * 2
    h1 = mix32(base ^ col)
    h2 = mix32(base ^ (col + 1))
    # the uniforms need 24 bits: float32 (or float64) whatever ``dtype``, else float16 overflows (2**24 > 65504: NaN)
    # and bfloat16 keeps 8 bits of them; so every dtype draws the same ε, rounded once at the end
    work = dtype if dtype == torch.float64 else torch.float32
    u1 = ((h1 >> 8).to(work) + 0.5) * (2.0**-24)
    u2 = (h2 >> 8).to(work) * (2.0**-24)
    return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos((2.0 * math.pi) * u2)).to(dtype)


@dataclass(frozen=True)
class CounterNoise:
    """The noise of one call drawn from a key tensor (inside ``torch.compile``; see the module docstring).

    Attributes mirror :func:`seeded_noise`: ``shared`` (one draw per sample broadcast over the
    rows, leading dim 1: then the noise does not depend on the batch at all), ``width`` (W),
    ``num_factors`` (R, 0 for none), ``diag_scalar``. ``draw(key, samples, rows, dtype)`` gives
    ``(eps_factors [rows|1, C, R] or None, eps_diag [rows|1, C, W|1])`` for the ``[C]`` sample indices,
    the same values whatever the chunking (each element depends on its indices only).
    """

    shared: bool
    width: int
    num_factors: int
    diag_scalar: bool

    def draw(self, key: Tensor, samples: Tensor, rows: int, dtype: torch.dtype) -> "tuple[Optional[Tensor], Tensor]":
        dev, rows = samples.device, 1 if self.shared else rows
        diag_cols = torch.arange(1 if self.diag_scalar else self.width, device=dev, dtype=torch.int64)
        eps_diag = counter_normals(key, samples, rows, diag_cols, dtype)
        eps_factors = None
        if self.num_factors > 0:  # columns after the diagonal's: a disjoint stream
            cols = torch.arange(self.width, self.width + self.num_factors, device=dev, dtype=torch.int64)
            eps_factors = counter_normals(key, samples, rows, cols, dtype)
        return eps_factors, eps_diag


# ---------------------------------------------------------------------------------------------- evaluation bank
#: The definition of the seeded evaluation noise (the bank of a head in ``eval()`` mode with ``eval_seed`` or
#: ``seed=``), eager and compiled alike: :func:`counter_normals` under the key :func:`counter_key` of the seed, the
#: diagonal's columns first and the factors' after them (:class:`CounterNoise`), one draw shared by the rows.
#: Results record it (``metrics.json``'s ``eval_noise``); its version changes with anything that changes a draw.
EVAL_NOISE = "counter/1"
#: the most bytes the eager evaluation banks kept for reuse hold together (least recently used dropped first); a
#: bank larger than this is drawn chunk by chunk at every call instead
BANK_CACHE_BYTES = 256 * 2**20
#: elements drawn at once while a bank is built (bounds its int64 temporaries: 8 bytes each, a few alive)
_BUILD_ELEMENTS = 1 << 18

_BANKS: "OrderedDict[tuple, tuple[Optional[Tensor], Tensor]]" = OrderedDict()
_BANKS_LOCK = threading.Lock()


def clear_bank_cache() -> None:
    """Drop every evaluation bank kept by :func:`counter_bank` (their memory, on any device, is freed)."""
    with _BANKS_LOCK:
        _BANKS.clear()


def _bank_bytes(bank: "tuple[Optional[Tensor], Tensor]") -> int:
    return sum(t.numel() * t.element_size() for t in bank if t is not None)


def _build_bank(
    noise: CounterNoise, key: int, num_samples: int, device: torch.device, dtype: torch.dtype
) -> "tuple[Optional[Tensor], Tensor]":
    """The whole bank ``(eps_factors [1, S, R] or None, eps_diag [1, S, W|1])``, drawn in slices of samples.
    Built outside inference mode and without autograd, so the tensors may later meet tensors that need gradients."""
    key_t = torch.tensor(key, dtype=torch.int64, device=device)
    diag_width = 1 if noise.diag_scalar else noise.width
    step = max(1, _BUILD_ELEMENTS // (diag_width + noise.num_factors))
    with torch.inference_mode(False), torch.no_grad():
        eps_diag = torch.empty((1, num_samples, diag_width), device=device, dtype=dtype)
        eps_factors = None
        if noise.num_factors > 0:
            eps_factors = torch.empty((1, num_samples, noise.num_factors), device=device, dtype=dtype)
        for start in range(0, num_samples, step):
            stop = min(num_samples, start + step)
            f, d = noise.draw(key_t, torch.arange(start, stop, device=device, dtype=torch.int64), 1, dtype)
            eps_diag[:, start:stop] = d
            if eps_factors is not None:
                eps_factors[:, start:stop] = f
    return eps_factors, eps_diag


def counter_bank(
    seed: int,
    width: int,
    num_factors: int,
    *,
    diag_scalar: bool,
    num_samples: int,
    device: torch.device,
    dtype: torch.dtype,
) -> NoiseFn:
    """The evaluation bank drawn eagerly: exactly the noise :class:`CounterNoise` draws inside ``torch.compile`` for
    the same seed (:data:`EVAL_NOISE`), shared by the rows (leading dim 1).

    The bank depends only on its arguments, never on the batch, so it is drawn once and kept: up to
    :data:`BANK_CACHE_BYTES` over all banks (least recently used dropped first; :func:`clear_bank_cache` frees
    them), and a bank larger than that is drawn chunk by chunk at every call. Drawing it in eager tensor ops costs
    10-20x what torch's generator takes for the same normals on a CPU (measured on the bench's 2-core AMD EPYC at
    load 8: 130-570 ms against 12-28 ms for S = 1000 samples of 1015 or 2063 normals), which a kept bank pays once
    per process instead of a draw per batch.

    Args:
        seed: the evaluation seed (any int; folded into a 32-bit key by :func:`counter_key`).
        width: W, noise width (K for HET, D for HET-XL).
        num_factors: R, or 0 when there are no factors.
        diag_scalar: one scalar per sample for the diagonal term (``diag_noise="shared_scalar"``).
        num_samples: S.
        device, dtype: of the noise (the head's features').

    Returns:
        ``noise(start, length, ws=None) -> (eps_factors [1, length, R] or None, eps_diag [1, length, W|1])``, views
        of the kept bank (callers only read them) or fresh tensors; ``ws`` is ignored.
    """
    noise = CounterNoise(True, int(width), int(num_factors), bool(diag_scalar))
    key = counter_key(seed)
    element = torch.empty((), dtype=dtype).element_size()
    size = num_samples * ((1 if diag_scalar else width) + num_factors) * element
    if size > BANK_CACHE_BYTES:
        key_t = torch.tensor(key, dtype=torch.int64, device=device)

        def draw(start: int, length: int, ws=None) -> "tuple[Optional[Tensor], Tensor]":
            samples = torch.arange(start, start + length, device=device, dtype=torch.int64)
            return noise.draw(key_t, samples, 1, dtype)

        return draw
    name = (key, noise, num_samples, dtype, str(torch.device(device)))
    with _BANKS_LOCK:
        bank = _BANKS.get(name)
        if bank is None:
            bank = _BANKS[name] = _build_bank(noise, key, num_samples, device, dtype)
            total = sum(_bank_bytes(b) for b in _BANKS.values())
            while total > BANK_CACHE_BYTES:
                total -= _bank_bytes(_BANKS.popitem(last=False)[1])
        _BANKS.move_to_end(name)
    eps_factors, eps_diag = bank

    def views(start: int, length: int, ws=None) -> "tuple[Optional[Tensor], Tensor]":
        stop = start + length
        return (None if eps_factors is None else eps_factors[:, start:stop]), eps_diag[:, start:stop]

    return views
