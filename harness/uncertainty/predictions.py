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
from harness.io import atomic_write_bytes
from harness.uncertainty.multilabel import multilabel_metrics, sigmoid_nll


@dataclass
class Predictions:
    """Per-example outputs of one model (or ensemble) on one split, sorted by example index.

    Attributes:
        logits: ``[N, K]`` float64 (for het models log p̄, or logit p̄ for the sigmoid link).
        targets: ``[N]`` ints, or ``[N, K]`` multi-hot.
        index: ``[N]`` example indices in the split.
        class_names: K names.
        link: ``softmax`` or ``sigmoid``.
        source: where they came from (run folder or ensemble).
    """

    logits: np.ndarray
    targets: np.ndarray
    index: np.ndarray
    class_names: "list[str]"
    link: str
    source: str = ""

    @property
    def multilabel(self) -> bool:
        return self.link == "sigmoid"

    @classmethod
    def load(cls, path: "str | Path") -> "Predictions":
        """Read a ``predictions.npz`` (or a run or ensemble folder holding one).

        Raises:
            FileNotFoundError: no predictions there.
            ValueError: a file that is not a predictions file, or whose arrays disagree in N or K.
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
        return cls(
            logits.astype(np.float64)[order], targets[order], index[order], [str(c) for c in names], link, str(path)
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
