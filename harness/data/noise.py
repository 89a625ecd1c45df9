"""Synthetic label noise on single-label data: symmetric, pair-flip, a given confusion matrix, or
input-dependent flips between classes that look alike.

The noise is drawn once from its own seed, so every method of an experiment sees the same noisy
labels; :func:`inject_label_noise` returns a description (kind, rate, seed, the realised flip rate
and the empirical transition matrix) that the run stores in its metadata.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

KINDS = ("none", "symmetric", "pair_flip", "matrix", "input_dependent")
#: kinds with a nominal class-conditional transition matrix (:func:`transition_matrix`).
CLASS_CONDITIONAL = ("none", "symmetric", "pair_flip", "matrix")
#: inverse L2 strength of the reference classifier of ``input_dependent`` noise: regularised enough
#: that its probabilities on its own training images are not all near 0/1 (on digits at C = 1 most
#: images have ambiguity ~0 and, at rate 0.3, rate·a/mean(a) exceeds 1 for 9% of them; at 0.01 for 4%).
REFERENCE_C = 0.01


def check_noise_spec(noise: dict, source: str, array_sources: Sequence[str]) -> None:
    """A config's ``data.label_noise`` before any work: its keys, kind, seed and rate, and its transition matrix
    checked against its own size (the number of classes is not known yet). ``input_dependent`` noise needs a
    ``source`` among ``array_sources`` (those that hold their images in one array).

    Raises:
        ValueError: ``data.label_noise.<key> ...`` naming the fix.
    """
    from harness.rules import SEED, Rule

    kind = noise.get("kind", "none")
    if noise.get("seed") is not None and not Rule(**SEED).holds(noise["seed"]):
        raise ValueError(f"data.label_noise.seed must be {Rule(**SEED).describe()}, got {noise['seed']!r}")
    if not noise:
        return
    unknown = sorted(set(noise) - {"kind", "rate", "seed", "matrix", "permutation"})
    if unknown:
        raise ValueError(
            f"unknown data.label_noise key(s) {', '.join(unknown)}: it takes kind, rate, seed, matrix, permutation"
        )
    if kind not in KINDS:
        raise ValueError(f"unknown data.label_noise.kind {kind!r}: use one of {', '.join(KINDS)}")
    if kind == "input_dependent":
        if not 0.0 <= float(noise.get("rate", 0.0)) <= 1.0:
            raise ValueError(f"data.label_noise.rate must be in [0, 1], got {noise.get('rate')}")
        if noise.get("matrix") is not None or noise.get("permutation") is not None:
            raise ValueError(
                "data.label_noise.kind=input_dependent takes no matrix or permutation: its flips "
                "follow the image; drop them or use kind=matrix"
            )
        if source not in array_sources:
            raise ValueError(
                "data.label_noise.kind=input_dependent fits a classifier on the training images, which source "
                f"{source!r} does not hold in one array: use a source among {', '.join(array_sources)}, or a "
                f"class-conditional kind ({', '.join(k for k in CLASS_CONDITIONAL if k != 'none')})"
            )
        return
    matrix = noise.get("matrix")
    if kind == "matrix" and matrix is None:
        raise ValueError("data.label_noise.kind=matrix needs data.label_noise.matrix, a K x K row-stochastic matrix")
    try:
        perm = noise.get("permutation")
        size = len(matrix) if kind == "matrix" else (len(perm) if perm is not None else 2)
        transition_matrix(kind, size, float(noise.get("rate", 0.0)), matrix, perm)
    except (TypeError, ValueError) as e:
        raise ValueError(f"data.{e}" if str(e).startswith("label_noise") else f"data.label_noise: {e}") from e


def transition_matrix(
    kind: str,
    num_classes: int,
    rate: float = 0.0,
    matrix: Optional[Sequence[Sequence[float]]] = None,
    permutation: Optional[Sequence[int]] = None,
) -> np.ndarray:
    """Row-stochastic T ``[K, K]`` with T[c, j] = P(noisy = j | clean = c).

    - ``symmetric``: keep with 1 - rate, else a uniformly drawn *other* class (rate / (K-1) each);
    - ``pair_flip``: keep with 1 - rate, else the next class (c + 1) mod K (Han et al. 2018);
    - ``matrix``: the given matrix (rows must sum to 1).

    ``permutation`` (π, a list of K distinct class indices) moves the noise onto other classes:
    the result is T_π with T_π[π(c), π(j)] = T[c, j], the same noise rate and the same pair
    masses, carried by the classes π names (e.g. the heavy pairs of a human confusion matrix moved
    onto visually dissimilar classes, to tell label noise from visual similarity).

    ``input_dependent`` noise has none (its flip probability depends on the image, see
    :func:`inject_label_noise`); only its empirical matrix (:func:`empirical_transition`) exists.

    Raises:
        ValueError: unknown kind, ``input_dependent``, rate outside [0, 1], a malformed matrix, or a
            permutation that is not one of range(K).
    """
    t = _nominal_transition(kind, num_classes, rate, matrix)
    if permutation is None:
        return t
    pi = np.asarray(permutation)
    if pi.shape != (num_classes,) or sorted(pi.tolist()) != list(range(num_classes)):
        raise ValueError(
            f"label_noise.permutation must list each class index 0..{num_classes - 1} once "
            f"(π(c) for c = 0..{num_classes - 1}), got {list(permutation)}"
        )
    out = np.empty_like(t)
    out[np.ix_(pi, pi)] = t
    return out


def _nominal_transition(
    kind: str, num_classes: int, rate: float, matrix: Optional[Sequence[Sequence[float]]]
) -> np.ndarray:
    """:func:`transition_matrix` before any permutation."""
    k = num_classes
    if kind not in KINDS:
        raise ValueError(f"unknown label_noise kind {kind!r}: use one of {', '.join(KINDS)}")
    if kind not in CLASS_CONDITIONAL:
        raise ValueError(
            f"label_noise kind {kind!r} is not class-conditional (its flips depend on the image), so it "
            "has no nominal transition matrix: use the empirical one of the noisy labels "
            "(empirical_transition)"
        )
    if kind == "matrix":
        t = np.asarray(matrix, dtype=np.float64) if matrix is not None else None
        if t is None or t.shape != (k, k) or (t < 0).any() or not np.allclose(t.sum(1), 1.0, atol=1e-6):
            raise ValueError(
                f"label_noise.matrix must be a {k}x{k} row-stochastic matrix (non-negative rows summing to 1)"
            )
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


def empirical_transition(clean: np.ndarray, noisy: np.ndarray, num_classes: int) -> np.ndarray:
    """Row-stochastic ``[K, K]`` frequencies of (clean, noisy) label pairs: row c is the share of the
    examples of clean class c that carry each noisy label (a zero row for a class without examples).

    Args:
        clean, noisy: ``[N]`` class indices in [0, K).
    """
    t = np.zeros((num_classes, num_classes))
    np.add.at(t, (np.asarray(clean, dtype=np.int64), np.asarray(noisy, dtype=np.int64)), 1.0)
    return t / np.maximum(t.sum(axis=1, keepdims=True), 1.0)


def reference_probabilities(images: np.ndarray, labels: np.ndarray, num_classes: int, seed: int = 0) -> np.ndarray:
    """Class probabilities of the fixed reference classifier of ``input_dependent`` noise on its own
    training images: scikit-learn's ``LogisticRegression(C=REFERENCE_C, max_iter=1000,
    random_state=seed)`` (multinomial, L-BFGS) fitted on the flattened pixels, each standardised
    (``StandardScaler``), with the clean labels. It runs in one BLAS thread: the same probabilities
    whatever the machine's thread settings (so the same noisy labels for every method), and no
    oversubscription of cores busy with other runs (0.07 s on digits' 1,078 training images).

    Args:
        images: ``[N, ...]`` pixels (any shape per image; flattened).
        labels: ``[N]`` clean class indices in [0, K).
        num_classes: K (classes absent from ``labels`` get probability 0).
        seed: the noise seed.

    Returns:
        ``[N, K]`` float64 probabilities.

    Raises:
        ValueError: images and labels differ in number, or the labels hold fewer than 2 classes.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    from threadpoolctl import threadpool_limits

    labels = np.asarray(labels, dtype=np.int64)
    if len(images) != len(labels):
        raise ValueError(f"input_dependent label noise got {len(images)} images for {len(labels)} labels")
    present = np.unique(labels)
    if len(present) < 2:
        raise ValueError(
            "input_dependent label noise needs at least 2 classes among the training labels to fit its "
            "reference classifier; use more training examples (data.limit_train)"
        )
    x = StandardScaler().fit_transform(np.asarray(images, dtype=np.float64).reshape(len(labels), -1))
    probs = np.zeros((len(labels), num_classes))
    with threadpool_limits(limits=1):
        clf = LogisticRegression(C=REFERENCE_C, max_iter=1000, random_state=seed).fit(x, labels)
        probs[:, clf.classes_] = clf.predict_proba(x)
    return probs


def inject_label_noise(
    labels: np.ndarray,
    num_classes: int,
    kind: str = "none",
    rate: float = 0.0,
    seed: int = 0,
    matrix: Optional[Sequence[Sequence[float]]] = None,
    images: Optional[np.ndarray] = None,
    permutation: Optional[Sequence[int]] = None,
    stream: int = 0,
) -> "tuple[np.ndarray, dict]":
    """Resample each label from its row of the transition matrix, or (``input_dependent``) flip it
    with a probability that depends on its image.

    ``input_dependent``: the reference classifier (:func:`reference_probabilities`, seeded by
    ``seed``) is fitted on the images with the clean labels; for image x let p1 >= p2 be its two
    largest class probabilities, t(x) its top class and r(x) its runner-up. Its ambiguity is
    a(x) = 1 - (p1 - p2) in [0, 1], its flip probability q(x) = min(1, rate · a(x) / mean(a)) (so
    the mean flip rate is ``rate`` up to the clipping at 1), and its noisy label is r(x) with
    probability q(x) and the clean label y otherwise; when r(x) = y (the classifier is wrong) the
    flip goes to t(x) instead. The noise is thus input-dependent and correlated between classes
    that look alike, the setting HET models (Collier et al., CVPR 2021, Sec. 3); it has no nominal
    transition matrix, only the empirical one. (A construction of this harness, not a paper's.)

    Args:
        labels: ``[N]`` clean class indices.
        num_classes: K.
        kind, rate, matrix, permutation: see :func:`transition_matrix` (and above for
            ``input_dependent``, which takes no matrix or permutation).
        seed: noise seed (independent of the training seed).
        stream: 0 for the training split (``numpy.random.default_rng(seed)``); another split's
            labels are drawn from an independent stream ``default_rng([seed, stream])`` (the
            held-out split uses 1), so they are not the training labels' first draws again.
        images: ``[N, ...]`` pixels of the examples; used only (and required) by ``input_dependent``.

    Returns:
        (noisy labels ``[N]``, metadata dict with ``kind``, ``rate``, ``seed``, ``realised_rate`` and
        the empirical ``transition`` matrix as nested lists; ``input_dependent`` adds ``flip_prob``,
        the mean, min and max of q(x), and ``reference_train_accuracy``, the reference classifier's
        accuracy on the clean labels it was fitted on).

    Raises:
        ValueError: multi-label targets, a bad kind, rate or matrix, or ``input_dependent`` without
            ``images`` (or with images that do not match the labels).
    """
    labels = np.asarray(labels, dtype=np.int64)
    if labels.ndim != 1:
        raise ValueError("label noise applies to single-label data; multi-label targets cannot be flipped")
    rng = np.random.default_rng(seed if stream == 0 else [seed, stream])
    extra = {}
    if kind == "input_dependent":
        if matrix is not None or permutation is not None:
            raise ValueError("input_dependent label noise takes no matrix or permutation (its flips follow the image)")
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"label_noise.rate must be in [0, 1], got {rate}")
        if images is None:
            raise ValueError(
                "input_dependent label noise needs the training images: pass images=[N, ...] pixels "
                "(upstream runs take them from a source that holds its images in one array, digits "
                "or cifar10n)"
            )
        probs = reference_probabilities(images, labels, num_classes, seed)
        order = np.argsort(-probs, axis=1, kind="stable")
        top, runner_up = order[:, 0], order[:, 1]
        rows = np.arange(len(labels))
        ambiguity = 1.0 - (probs[rows, top] - probs[rows, runner_up])
        mean = ambiguity.mean()  # > 0 unless every image has p1 = 1 exactly
        q = np.minimum(1.0, rate * ambiguity / mean) if mean > 0 else np.zeros(len(labels))
        target = np.where(runner_up == labels, top, runner_up)
        noisy = np.where(rng.random(len(labels)) < q, target, labels).astype(np.int64)
        extra = {
            "flip_prob": {"mean": float(q.mean()), "min": float(q.min()), "max": float(q.max())},
            "reference_train_accuracy": float((top == labels).mean()),
        }
    else:
        t = transition_matrix(kind, num_classes, rate, matrix, permutation)
        cum = np.cumsum(t, axis=1)
        cum[:, -1] = 1.0
        noisy = (rng.random(len(labels))[:, None] > cum[labels]).sum(axis=1).astype(np.int64)
    if permutation is not None:
        extra["permutation"] = [int(c) for c in permutation]
    info = {
        "kind": kind,
        "rate": float(rate),
        "seed": int(seed),
        "realised_rate": float((noisy != labels).mean()) if len(labels) else 0.0,
        "transition": np.round(empirical_transition(labels, noisy, num_classes), 4).tolist(),
        **extra,
    }
    return noisy, info
