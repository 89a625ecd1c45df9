"""Per-example predictions, deep ensembles and post-hoc temperature scaling.

Predictions are what a run saves (``predictions.npz``): logits ``[N, K]`` (for het models the
log of the MC-averaged probability, or its inverse sigmoid), targets, example indices, class names
and the link. Ensembles average member *probabilities* in log space (protocol.md Sec. 7):
softmax members ``log p = LSE_m log_softmax(l_m) - log M``; sigmoid members per class and outcome.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from harness import metrics as M
from harness.io import atomic_write_bytes, atomic_write_text


@dataclass
class Predictions:
    """Per-example outputs of one model (or ensemble) on one split, sorted by example index.

    Attributes:
        logits: ``[N, K]`` float64.
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
        """Read a ``predictions.npz`` (or a run folder holding one).

        Raises:
            FileNotFoundError: no predictions there.
        """
        path = Path(path)
        file = path / "predictions.npz" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"no predictions at {str(file)!r}; pass a finished run folder (it writes "
                                    "predictions.npz) or an ensemble folder")
        with np.load(file, allow_pickle=False) as z:
            order = np.argsort(z["index"], kind="stable")
            return cls(z["logits"].astype(np.float64)[order], z["targets"][order], z["index"][order],
                       [str(c) for c in z["class_names"]], str(z["link"]), str(path))

    def save(self, path: "str | Path") -> None:
        buf = io.BytesIO()
        np.savez(buf, logits=self.logits.astype(np.float32), targets=self.targets, index=self.index,
                 class_names=np.array(self.class_names), link=np.array(self.link),
                 multilabel=np.array(self.multilabel))
        atomic_write_bytes(path, buf.getvalue())

    def log_probs(self) -> np.ndarray:
        """softmax: log p ``[N, K]`` (rows sum to 1); sigmoid: per-class log P(y_k = 1)."""
        return M.log_softmax(self.logits) if self.link == "softmax" else M.log_sigmoid(self.logits)

    def metrics(self) -> "dict[str, float]":
        """The single-label or multi-label metric suite of :mod:`harness.metrics`."""
        if self.multilabel:
            return M.multilabel_metrics(self.logits, self.targets)
        return M.classification_metrics(self.log_probs(), self.targets)

    def nll(self) -> float:
        return M.sigmoid_nll(self.logits, self.targets) if self.multilabel else M.nll(self.log_probs(), self.targets)


def check_compatible(members: Sequence[Predictions]) -> None:
    """Members must share the label space, link, examples and targets.

    Raises:
        ValueError: naming the first member that differs and how.
    """
    if not members:
        raise ValueError("an ensemble needs at least one member")
    ref = members[0]
    for m in members[1:]:
        what = None
        if m.class_names != ref.class_names:
            what = (f"{len(m.class_names)} classes {m.class_names[:3]}... vs {len(ref.class_names)} "
                    f"{ref.class_names[:3]}... (different label space)")
        elif m.link != ref.link:
            what = f"link {m.link!r} vs {ref.link!r}"
        elif m.index.shape != ref.index.shape or not np.array_equal(m.index, ref.index):
            what = f"{len(m.index)} evaluation examples vs {len(ref.index)} (different evaluation data)"
        elif not np.array_equal(m.targets, ref.targets):
            what = "different targets for the same examples (different evaluation data or labels)"
        if what:
            raise ValueError(f"member {m.source} does not match {ref.source}: {what}; ensemble only models "
                             "evaluated on the same split of the same data")


def average(members: Sequence[Predictions], source: str = "ensemble") -> Predictions:
    """Ensemble predictions: members' probabilities averaged (in log space).

    softmax: logits = LSE_m log_softmax(l_m) - log M (a normalised log p̄);
    sigmoid: logits = [LSE_m log σ(l_m) - log M] - [LSE_m log σ(-l_m) - log M] = logit(p̄).
    Source: protocol.md Sec. 7 (UB ``log_average_softmax_probs`` / ``log_average_sigmoid_probs``).
    """
    check_compatible(members)
    log_m = math.log(len(members))
    if members[0].link == "softmax":
        logits = np.logaddexp.reduce(np.stack([m.log_probs() for m in members]), axis=0) - log_m
    else:
        pos = np.logaddexp.reduce(np.stack([M.log_sigmoid(m.logits) for m in members]), axis=0) - log_m
        neg = np.logaddexp.reduce(np.stack([M.log_sigmoid(-m.logits) for m in members]), axis=0) - log_m
        logits = pos - neg
    return replace(members[0], logits=logits, source=source)


def _mean_kl_to_ensemble(members: Sequence[Predictions], ens: Predictions) -> float:
    """Mean over members and examples of KL(p_m || p_ens) (summed over classes; Bernoulli per class
    for sigmoid members)."""
    if ens.link == "softmax":
        lq = ens.log_probs()
        return float(np.mean([(np.exp(lp) * (lp - lq)).sum(1).mean() for lp in (m.log_probs() for m in members)]))
    lq1, lq0 = M.log_sigmoid(ens.logits), M.log_sigmoid(-ens.logits)
    kls = []
    for m in members:
        lp1, lp0 = M.log_sigmoid(m.logits), M.log_sigmoid(-m.logits)
        kls.append((np.exp(lp1) * (lp1 - lq1) + np.exp(lp0) * (lp0 - lq0)).sum(1).mean())
    return float(np.mean(kls))


def summarize(members: Sequence[Predictions]) -> dict:
    """Everything the ensemble report shows (protocol.md Sec. 7).

    Returns:
        ``members`` (per-member metrics), ``member_mean`` / ``member_std`` (over members),
        ``ensemble`` (metrics of the averaged probabilities), ``gibbs_ce`` (mean member NLL),
        ``ensemble_gain`` (Gibbs CE - ensemble NLL, >= 0 by Jensen), ``disagreement`` (mean over
        member pairs of the share of examples whose argmax differs), ``disagreement_over_error``
        (that divided by the ensemble's error rate) and ``mean_kl_to_ensemble``.
    """
    ens = average(members)
    per = [m.metrics() for m in members]
    keys = per[0].keys()
    gibbs = float(np.mean([m.nll() for m in members]))
    ens_nll = ens.nll()
    argmax = [m.logits.argmax(1) for m in members]
    pairs = list(itertools.combinations(range(len(members)), 2))
    disagreement = float(np.mean([(argmax[i] != argmax[j]).mean() for i, j in pairs])) if pairs else 0.0
    ens_metrics = ens.metrics()
    error = 1.0 - ens_metrics.get("top1", ens_metrics.get("prec@1", 0.0))
    return {
        "size": len(members), "sources": [m.source for m in members], "members": per,
        "member_mean": {k: float(np.mean([p[k] for p in per])) for k in keys},
        "member_std": {k: float(np.std([p[k] for p in per], ddof=1)) if len(per) > 1 else 0.0 for k in keys},
        "ensemble": ens_metrics, "gibbs_ce": gibbs, "ensemble_nll": ens_nll, "ensemble_gain": gibbs - ens_nll,
        "disagreement": disagreement, "disagreement_over_error": disagreement / error if error > 0 else float("nan"),
        "mean_kl_to_ensemble": _mean_kl_to_ensemble(members, ens),
    }


# --------------------------------------------------------------------------- temperature scaling
def fit_temperature(preds: Predictions, max_iter: int = 200) -> float:
    """Post-hoc temperature T > 0 minimising the NLL of ``logits / T`` on held-out predictions
    (Guo et al. 2017), by L-BFGS on log T. For sigmoid links, per-class BCE summed over classes.

    Het logits are log p̄ (or logit p̄); scaling them is the same post-hoc map as for any classifier.
    """
    z = torch.as_tensor(preds.logits, dtype=torch.float64)
    y = torch.as_tensor(preds.targets)
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([log_t], lr=0.5, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        scaled = z / log_t.exp()
        if preds.multilabel:
            loss = torch.nn.functional.binary_cross_entropy_with_logits(scaled, y.double(), reduction="sum") / len(z)
        else:
            loss = torch.nn.functional.cross_entropy(scaled, y.long())
        loss.backward()
        return loss

    opt.step(closure)
    return float(log_t.detach().exp())


def scale(preds: Predictions, temperature: float) -> Predictions:
    """``logits / temperature``."""
    return replace(preds, logits=preds.logits / temperature, source=f"{preds.source} (T={temperature:.3f})")


def load_heldout(run_dir: "str | Path") -> Optional[Predictions]:
    """A run's ``heldout_predictions.npz`` if it saved one (``data.heldout_split``), else None."""
    path = Path(run_dir) / "heldout_predictions.npz"
    return Predictions.load(path) if path.is_file() else None


def build_ensemble(members: Sequence["str | Path"], out: "str | Path", from_checkpoints: bool = False,
                   evaluate=None) -> dict:
    """Ensemble run folders and write ``out/ensemble.json``, ``out/predictions.npz`` (and
    ``out/heldout_predictions.npz`` when every member has held-out predictions).

    Args:
        members: run folders.
        from_checkpoints: re-predict with each member's ``model.pt`` (one model in memory at a
            time) through ``evaluate(run_dir) -> Predictions`` instead of reading saved predictions.

    Raises:
        ValueError: members that differ in label space, link or evaluation data; fewer than 2.
    """
    from harness.provenance import provenance
    from harness.runs import method_name, run_config  # harness.runs imports this module

    if len(members) < 2:
        raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
    preds = [evaluate(m) if from_checkpoints else Predictions.load(m) for m in members]
    summary = summarize(preds)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    average(preds, str(out)).save(out / "predictions.npz")
    held = [load_heldout(m) for m in members]
    if all(h is not None for h in held):
        average(held, str(out)).save(out / "heldout_predictions.npz")
    methods = sorted({method_name(run_config(m).get("model", {}).get("head", {})) for m in members})
    meta_path = Path(members[0]) / "metrics.json"
    data = json.loads(meta_path.read_text()).get("eval_data", "") if meta_path.is_file() else ""
    spec = {"schema": "harness.ensemble/1", "method": "+".join(methods),
            "members": [str(Path(m).resolve()) for m in members], "from_checkpoints": from_checkpoints,
            "data": data, "summary": summary, **provenance()}
    atomic_write_text(out / "ensemble.json", json.dumps(spec, indent=1))
    return spec
