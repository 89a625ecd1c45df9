"""Per-example predictions of a model or an ensemble, and their on-disk format (``predictions.npz``).

``predictions.npz`` (NumPy ``.npz``, no pickles): ``logits`` ``[N, K]`` float32 (for het models log p̄,
or logit p̄ for the sigmoid link), ``targets`` ``[N]`` ints or ``[N, K]`` multi-hot, ``index`` ``[N]``
example indices in the split, ``class_names`` ``[K]``, ``link`` and ``multilabel`` (0-dim).
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import harness.uncertainty.metrics as M
from harness.heads.options import LINKS
from harness.io import atomic_write_bytes
from harness.uncertainty.checks import as_array, as_float64, check_labels
from harness.uncertainty.multilabel import multilabel_metrics, sigmoid_nll

#: the target of every row of a set without labels (an OOD set of ``harness shift``)
UNLABELLED = -1


@dataclass
class Predictions:
    """Per-example outputs of one model (or ensemble) on one split, sorted by example index.

    Attributes:
        logits: ``[N, K]`` float64 (for het models log p̄, or logit p̄ for the sigmoid link). ``logits``,
            ``targets`` and ``index`` may be given as NumPy arrays, torch tensors (bfloat16 / float16 too) or lists:
            they are stored as NumPy arrays (:func:`harness.uncertainty.checks.as_float64` / ``as_array``, the
            metrics' one conversion).
        targets: ``[N]`` ints, or ``[N, K]`` multi-hot.
        index: ``[N]`` example indices in the split: unique integers (members of an ensemble and compared models
            are aligned by them).
        class_names: K names: a list (tuple, NumPy array) of str, stored as a list of str; names of another type
            (ints) are stored as ``str(name)``, as :meth:`load` reads them back.
        link: one of :data:`harness.heads.options.LINKS` (``softmax`` or ``sigmoid``).
        source: where they came from (run folder or ensemble).

    Raises:
        ValueError: (at construction) complex, meta-device or non-numeric logits (the one conversion), logits not
            ``[N, K]``, targets or index not N long, class_names given as one str or bytes (not a list of names) or
            holding a bytes name, an index that is not 1-D
            unique integers, a class-name count other than K, an empty or repeated class name, a link the heads do
            not have, softmax targets that are not integer class indices in ``[0, K)`` (the metrics' rule,
            :func:`harness.uncertainty.checks.check_labels`; or all :data:`UNLABELLED`: a set without labels, an OOD
            set, which no metric scores), or NaN logits (and softmax ``+inf`` ones:
            :meth:`check_finite`), so nothing built from them (a fitted temperature, a metric, a saved file) is
            computed from such predictions.
    """

    logits: np.ndarray
    targets: np.ndarray
    index: np.ndarray
    class_names: "list[str]"
    link: str
    source: str = ""

    def __post_init__(self) -> None:
        # the metrics' one conversion: torch tensors (bf16/half too) and lists become NumPy arrays, so every method
        # (fit_temperature, save, metrics) reads arrays; complex, meta-device or text logits are refused here
        self.logits = as_float64(self.logits, "Predictions logits")
        self.targets = as_array(self.targets, "Predictions targets")
        self.index = as_array(self.index, "Predictions index")
        z = self.logits
        if z.ndim != 2:
            raise ValueError(f"Predictions logits must be [N, K] (examples x classes), got shape {z.shape}")
        n, k = z.shape
        self.class_names = _as_names(self.class_names, k)
        if self.link not in LINKS:
            raise ValueError(
                f"Predictions link must be one of {', '.join(LINKS)} (the heads' links), got link={self.link!r}; "
                "pass the link of the head that produced the logits (model.head.link)"
            )
        if len(self.class_names) != k:
            raise ValueError(
                f"{len(self.class_names)} class_names for {k} classes (logits {z.shape}): give exactly one name "
                "per logit column, e.g. [str(k) for k in range(logits.shape[1])]"
            )
        if len(self.targets) != n:
            raise ValueError(f"{len(self.targets)} targets for {n} rows of logits: give one per example")
        index = self.index
        if index.ndim != 1 or len(index) != n or (n and index.dtype.kind not in "iu"):
            raise ValueError(
                f"Predictions index must be [N] = [{n}] integer example indices, got shape {index.shape} and dtype "
                f"{index.dtype}; pass np.arange(N) if the rows are the split in order"
            )
        _check_class_names(self.class_names)
        unlabelled = bool(n) and bool((self.targets == UNLABELLED).all())  # an OOD set
        if self.link == "softmax" and n and not unlabelled:  # the metrics' label rule: class indices in [0, K)
            try:
                check_labels(self.targets, n, k)
            except ValueError as e:
                raise ValueError(f"Predictions targets: {e}") from None
        self.check_finite()
        values, counts = np.unique(index, return_counts=True)
        if len(values) != n:
            raise ValueError(
                f"Predictions index holds {int((counts > 1).sum())} repeated example indices (first: "
                f"{int(values[np.argmax(counts > 1)])}): each row must be a different example (ensembles and "
                "comparisons align models by index); pass np.arange(N) if the rows are the split in order"
            )

    @property
    def multilabel(self) -> bool:
        return self.link == "sigmoid"

    @classmethod
    def load(cls, path: "str | Path") -> "Predictions":
        """Read a ``predictions.npz`` (or a run or ensemble folder holding one).

        Raises:
            FileNotFoundError: no predictions there.
            ValueError: a file that is not a predictions file, whose arrays disagree in N or K, that fails the
                constructor's checks, or holds NaN logits (:meth:`check_finite`); the message starts with the file.
        """
        path = Path(path)
        file = path / "predictions.npz" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(
                f"no predictions at {str(file)!r}; pass a finished run folder (it writes "
                "predictions.npz) or an ensemble folder"
            )
        try:
            with np.load(file, allow_pickle=False) as z:
                logits, targets, index, names, link = (
                    z["logits"],
                    z["targets"],
                    z["index"],
                    z["class_names"],
                    str(z["link"]),
                )
        except (KeyError, ValueError, OSError, EOFError, zipfile.BadZipFile) as e:  # BadZipFile: a truncated file
            raise ValueError(
                f"{file} is not a predictions file ({type(e).__name__}: {str(e)[:200]}); write it with "
                "Predictions.save (a run writes it when it ends)"
            ) from e
        n = len(index)
        if logits.ndim != 2 or logits.shape != (n, len(names)) or len(targets) != n or index.ndim != 1:
            raise ValueError(
                f"{file} is inconsistent: logits {logits.shape}, targets {targets.shape}, index {index.shape}, "
                f"{len(names)} class names (logits must be [N, K] for N examples and K classes); the file "
                "is damaged or was not written by the harness: re-predict the run (harness ensemble "
                "--from-checkpoints, or rerun it)"
            )
        order = np.argsort(index, kind="stable")
        try:
            preds = cls(
                logits.astype(np.float64)[order], targets[order], index[order], [str(c) for c in names], link, str(path)
            )
            preds.check_finite()
        except ValueError as e:
            raise ValueError(f"{file}: {e}") from e
        return preds

    def check_finite(self) -> None:
        """Refuse NaN logits (and ``+inf`` ones for the softmax link), naming the rows, before any metric.

        Raises:
            ValueError: NaN (or softmax ``+inf``) logits: a diverged or damaged run.
        """
        z = self.logits
        bad = np.isnan(z) | (z == np.inf) if self.link == "softmax" else np.isnan(z)
        rows = bad.any(axis=1)
        if rows.any():
            raise ValueError(
                f"logits hold NaN{' or +inf' if self.link == 'softmax' else ''} in {int(rows.sum())} of {len(z)} rows "
                f"(first: row {int(np.argmax(rows))}); they are not scored: the run diverged or the file was "
                "edited: re-predict the run (harness ensemble --from-checkpoints, or rerun it)"
            )

    def save(self, path: "str | Path") -> None:
        """Write ``predictions.npz`` atomically (logits as float32)."""
        buf = io.BytesIO()
        np.savez(
            buf,
            logits=self.logits.astype(np.float32),
            targets=self.targets,
            index=self.index,
            class_names=np.array(self.class_names),
            link=np.array(self.link),
            multilabel=np.array(self.multilabel),
        )
        atomic_write_bytes(path, buf.getvalue())

    def log_probs(self) -> np.ndarray:
        """softmax: log p ``[N, K]`` (rows sum to 1); sigmoid: per-class log P(y_k = 1)."""
        return M.log_softmax(self.logits) if self.link == "softmax" else M.log_sigmoid(self.logits)

    def metrics(self) -> "dict[str, float]":
        """The single-label metric suite (:mod:`harness.uncertainty.metrics`) or the multi-label one
        (:mod:`harness.uncertainty.multilabel`)."""
        if self.multilabel:
            return multilabel_metrics(self.logits, self.targets)
        return M.classification_metrics(self.log_probs(), self.targets)

    def nll(self) -> float:
        """Mean NLL in nats (summed over classes for the sigmoid link)."""
        return sigmoid_nll(self.logits, self.targets) if self.multilabel else M.nll(self.log_probs(), self.targets)


def _as_names(names: object, k: int) -> "list[str]":
    """``class_names`` as a list of str (``str(name)`` of each: ints as :meth:`Predictions.load` reads them back).

    Raises:
        ValueError: one str or bytes (each character would be a class), a bytes name, or no sequence of names.
    """
    fix = f"give a list of K = {k} names, one per logit column, e.g. [str(k) for k in range(logits.shape[1])]"
    if isinstance(names, (str, bytes)):
        example = list(names.decode(errors="replace") if isinstance(names, bytes) else names)
        fix += f" (or {example!r} if each character is a class)" if len(example) == k else ""
        raise ValueError(f"Predictions class_names={names[:80]!r} is one {type(names).__name__}: {fix}")
    try:
        names = list(names)  # type: ignore[call-overload]
    except TypeError:
        raise ValueError(
            f"Predictions class_names must be a list of names, got {type(names).__name__}: {fix}"
        ) from None
    for i, name in enumerate(names):
        if isinstance(name, bytes):
            raise ValueError(
                f"Predictions class_names[{i}] = {name!r} is bytes: give str names, e.g. [n.decode() for n in names]"
            )
    return [str(name) for name in names]


def _check_class_names(names: "list[str]") -> None:
    """Every class name non-empty and different from the others (reports and comparisons name classes by them).

    Raises:
        ValueError: an empty (or blank) name or a repeated one, naming it and its position.
    """
    seen: "dict[str, int]" = {}
    for i, name in enumerate(map(str, names)):
        if not name.strip():
            raise ValueError(
                f"Predictions class_names[{i}] is empty ({name!r}): give each class a name, e.g. "
                "[str(k) for k in range(logits.shape[1])]"
            )
        if name in seen:
            raise ValueError(
                f"Predictions class_names[{i}] = {name!r} repeats class_names[{seen[name]}]: each class needs its own "
                "name (reports and comparisons tell classes apart by name); e.g. [str(k) for k in range(K)]"
            )
        seen[name] = i
