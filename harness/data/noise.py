"""Synthetic label noise on single-label data: symmetric, pair-flip, or a given confusion matrix.

The noise is drawn once from its own seed, so every method of an experiment sees the same noisy
labels; :func:`inject_label_noise` returns a description (kind, rate, seed, the realised flip rate
and the empirical transition matrix) that the run stores in its metadata.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

KINDS = ("none", "symmetric", "pair_flip", "matrix")


def transition_matrix(kind: str, num_classes: int, rate: float = 0.0,
                      matrix: Optional[Sequence[Sequence[float]]] = None) -> np.ndarray:
    """Row-stochastic T ``[K, K]`` with T[c, j] = P(noisy = j | clean = c).

    - ``symmetric``: keep with 1 - rate, else a uniformly drawn *other* class (rate / (K-1) each);
    - ``pair_flip``: keep with 1 - rate, else the next class (c + 1) mod K (Han et al. 2018);
    - ``matrix``: the given matrix (rows must sum to 1).

    Raises:
        ValueError: unknown kind, rate outside [0, 1], or a malformed matrix.
    """
    k = num_classes
    if kind not in KINDS:
        raise ValueError(f"unknown label_noise kind {kind!r}: use one of {', '.join(KINDS)}")
    if kind == "matrix":
        t = np.asarray(matrix, dtype=np.float64) if matrix is not None else None
        if t is None or t.shape != (k, k) or (t < 0).any() or not np.allclose(t.sum(1), 1.0, atol=1e-6):
            raise ValueError(f"label_noise.matrix must be a {k}x{k} row-stochastic matrix (non-negative rows "
                             "summing to 1)")
        return t
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"label_noise.rate must be in [0, 1], got {rate}")
    if kind == "none" or rate == 0.0:
        return np.eye(k)
    if kind == "symmetric":
        if k < 2:
            raise ValueError("symmetric noise needs at least 2 classes")
        t = np.full((k, k), rate / (k - 1))
        np.fill_diagonal(t, 1.0 - rate)
        return t
    t = (1.0 - rate) * np.eye(k)
    t[np.arange(k), (np.arange(k) + 1) % k] += rate
    return t


def inject_label_noise(labels: np.ndarray, num_classes: int, kind: str = "none", rate: float = 0.0,
                       seed: int = 0, matrix: Optional[Sequence[Sequence[float]]] = None
                       ) -> "tuple[np.ndarray, dict]":
    """Resample each label from its row of the transition matrix.

    Args:
        labels: ``[N]`` clean class indices.
        num_classes: K.
        kind, rate, matrix: see :func:`transition_matrix`.
        seed: noise seed (independent of the training seed).

    Returns:
        (noisy labels ``[N]``, metadata dict with ``kind``, ``rate``, ``seed``, ``realised_rate`` and
        the empirical ``transition`` matrix as nested lists).
    """
    labels = np.asarray(labels, dtype=np.int64)
    if labels.ndim != 1:
        raise ValueError("label noise applies to single-label data; multi-label targets cannot be flipped")
    t = transition_matrix(kind, num_classes, rate, matrix)
    rng = np.random.default_rng(seed)
    cum = np.cumsum(t, axis=1)
    cum[:, -1] = 1.0
    noisy = (rng.random(len(labels))[:, None] > cum[labels]).sum(axis=1).astype(np.int64)
    empirical = np.zeros((num_classes, num_classes))
    np.add.at(empirical, (labels, noisy), 1.0)
    empirical /= np.maximum(empirical.sum(axis=1, keepdims=True), 1.0)
    info = {"kind": kind, "rate": float(rate), "seed": int(seed),
            "realised_rate": float((noisy != labels).mean()) if len(labels) else 0.0,
            "transition": np.round(empirical, 4).tolist()}
    return noisy, info
