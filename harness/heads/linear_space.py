"""The eager chunk kernels of the MC average in linear space: fewer passes over ``[N, C, K]`` than log space.

The log-space kernels of :mod:`harness.heads.chunk` (a ``log_softmax`` and a ``logsumexp`` over the
samples, log-space weights in the backward pass) are exact for any p̄, but cost about twice the passes
over each chunk. Here the forward pass sums the probabilities themselves,

    softmax:  Σ_s p_{s,k},  p_s = exp(z_s − m_s) / Σ_j exp(z_{s,j} − m_s),  m_s = max_j z_{s,j}      [N, K]
    sigmoid:  Σ_s σ(z_{s,k})  and  Σ_s σ(−z_{s,k})                                                    [N, K] each

(the sum over the chunk's samples with the 1/Σ_j normalisation folded into one batched matmul), and the
backward pass forms d loss / d z in one sweep from coefficients of size ``[N, K]``:

    softmax:  dL/dz_{s,j} = p_{s,j} (a_j − Σ_k a_k p_{s,k}),   a_k = g_k / (S p̄_k)
    sigmoid:  dL/dz_{s,k} = σ(z_{s,k}) σ(−z_{s,k}) c_k,        c_k = (g1_k / p̄_k − g2_k / (1 − p̄_k)) / S

with g = dL/d log p̄ (and g2 = dL/d log(1 − p̄)). Both are exact as long as p̄ (and 1 − p̄) stay well inside
the dtype's range: a probability that underflows contributes at most ``tiny`` to a sum of S·p̄, a relative
error below e^(log tiny − log p̄). :func:`rows_out_of_range` marks the rows where some log p̄ is below
``log(tiny) + 25`` (−62 in float32, −683 in float64, e.g. at a tiny temperature); the caller recomputes
those rows with the log-space kernels, so the result is exact for every input.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

#: margin (in nats) above log(tiny) under which a row goes to the log-space kernels
RANGE_MARGIN = 25.0

#: (process id, pool, its number of threads): the chunk threads of this process
_POOL: "tuple[int, Optional[ThreadPoolExecutor], int]" = (-1, None, 0)


def _single_threaded(work: Callable, part: list):
    torch.set_num_threads(1)  # this pool thread only: OpenMP's and MKL's thread counts are per thread
    with torch.no_grad():
        return work(part)


def split_chunks(starts: "list[int]", device: torch.device, work: Callable[["list[int]"], object]) -> list:
    """``work(part)`` over the chunk starts, on CPU split round robin into one part per torch thread, each
    part run single-threaded in its own pool thread; the results in part order (a fixed order: deterministic).

    A chunk's operations are small (a few MiB each), and a multi-threaded operation ends at a barrier of all
    threads: on a CPU shared with other processes a descheduled thread stalls every one of the thousands of
    operations of a step. Chunks run whole by single threads wait for no one (measured on the bench's 2-core
    CPU under load: the step 2x faster in wall time). One workspace per part: its buffers add one chunk's
    worth of memory per extra thread, still flat in S. ``torch.set_num_threads(1)`` in a pool thread also sets the
    count that threads created later start with; the caller's count is set back once the parts are done.
    """
    workers = min(torch.get_num_threads(), len(starts)) if device.type == "cpu" else 1
    if workers < 2:
        return [work(starts)]
    global _POOL
    if _POOL[0] != os.getpid() or _POOL[2] < workers:  # a forked child cannot use its parent's
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=workers, thread_name_prefix="het-chunks"), workers)
    threads = torch.get_num_threads()
    try:
        futures = [_POOL[1].submit(_single_threaded, work, starts[i::workers]) for i in range(workers)]
        return [f.result() for f in futures]
    finally:  # torch keeps one process-wide count that new threads start from: give it back its value
        torch.set_num_threads(threads)


class Workspace:
    """Flat buffers reused chunk after chunk by one forward or backward pass (eager).

    A fresh ``[N, C, K]`` tensor of a few MiB is new memory from the allocator each time, and its page faults
    (the kernel zeroing every page) cost as much as an elementwise pass over it; the chunk loop asks the
    workspace instead, by name, for a contiguous tensor of the chunk's shape. A buffer named again is
    overwritten: a caller holds a chunk's tensors only until it asks for the next chunk's.
    """

    def __init__(self) -> None:
        self._flat: "dict[str, Tensor]" = {}

    def get(self, name: str, shape: Sequence[int], like: Tensor) -> Tensor:
        """A contiguous tensor of ``shape`` (dtype and device of ``like``), uninitialised, backed by buffer ``name``."""
        n = math.prod(shape)
        flat = self._flat.get(name)
        if flat is None or flat.numel() < n or flat.dtype != like.dtype or flat.device != like.device:
            flat = self._flat[name] = torch.empty(n, dtype=like.dtype, device=like.device)
        return flat[:n].view(*shape)


def chunk_sums(link: str, z: Tensor, ws: Workspace) -> "tuple[Tensor, ...]":
    """Σ over the chunk's samples of the per-sample probabilities, ``[N, C, K] -> [N, K]`` (one, or two for
    sigmoid: σ(z) and σ(−z)). ``z`` is consumed (overwritten in place); ``ws`` lends the sigmoid's buffer."""
    if link == "softmax":
        z.sub_(z.amax(dim=-1, keepdim=True)).exp_()  # exp(z - m_s), in (0, 1]
        inv = z.sum(dim=-1, keepdim=True).reciprocal_()  # 1 / Σ_j exp(z_j - m_s)   [N, C, 1]
        return (torch.bmm(inv.transpose(1, 2), z).squeeze(1),)  # Σ_s p_s in one batched matmul
    pos = torch.sigmoid(z, out=ws.get("sig", z.shape, z)).sum(dim=1)
    return pos, torch.sigmoid_(z.neg_()).sum(dim=1)


def rows_out_of_range(outs: "tuple[Tensor, ...]") -> Optional[Tensor]:
    """Indices ``[M]`` (int64) of the rows where some output ``log p̄`` (or log(1 − p̄)) ``[N, K]`` is below
    ``log(tiny) + RANGE_MARGIN`` of its dtype or not finite; None when there is none."""
    floor = math.log(torch.finfo(outs[0].dtype).tiny) + RANGE_MARGIN
    bad = torch.zeros(outs[0].shape[0], dtype=torch.bool, device=outs[0].device)
    for out in outs:
        bad |= ~(out >= floor).all(dim=-1)  # NaN compares False: it counts as out of range
    if not bool(bad.any()):
        return None
    return bad.nonzero().squeeze(1)


def grad_coefficients(
    link: str, shifted: "tuple[Tensor, ...]", grads: "tuple[Tensor, ...]", skip: Optional[Tensor]
) -> "tuple[Tensor, ...]":
    """The ``[N, K]`` coefficients of :func:`chunk_grad` (a for softmax, c for sigmoid; see the module docstring).

    Args:
        shifted: log Σ_s p_s = log p̄ + log S ``[N, K]`` (and log Σ_s (1 − p_s) for sigmoid).
        grads: incoming gradients of the outputs, ``[N, K]`` each.
        skip: row indices ``[M]`` left to the log-space kernels: their coefficients are 0 here.
    """
    if link == "softmax":
        coeffs = (grads[0] * torch.exp(-shifted[0]),)
    else:
        coeffs = (grads[0] * torch.exp(-shifted[0]) - grads[1] * torch.exp(-shifted[1]),)
    if skip is not None:
        coeffs = tuple(c.index_fill(0, skip, 0.0) for c in coeffs)
    return coeffs


def chunk_grad(link: str, z: Tensor, coeffs: "tuple[Tensor, ...]", ws: Workspace) -> Tensor:
    """d loss / d z ``[N, C, K]`` for one chunk of tempered logits ``z`` ``[N, C, K]`` (consumed), from the
    coefficients of :func:`grad_coefficients`; the result is the workspace's buffer ``"p"``."""
    if link == "softmax":
        a = coeffs[0].unsqueeze(-1)  # [N, K, 1]
        p = torch.softmax(z, -1, out=ws.get("p", z.shape, z))
        dot = torch.bmm(a.transpose(1, 2), p.transpose(1, 2)).transpose(1, 2)  # Σ_k a_k p_{s,k}  [N, C, 1]
        # (a row vector times a matrix: on the bench's CPU 2.4x faster than bmm(p, a), a matrix times a vector)
        return p.mul_(torch.sub(a.transpose(1, 2), dot, out=z))  # z's buffer holds a_k − <a, p_s>
    neg = torch.neg(z, out=ws.get("p", z.shape, z)).sigmoid_()
    return torch.sigmoid_(z).mul_(neg).mul_(coeffs[0].unsqueeze(1))
