"""Uncertainty: metrics, calibration, ensembles, OOD, covariance analysis and the statistics that compare them.

The public API, importable from here (``from harness.uncertainty import ece, ECE``):

- array metrics over whole ``[N, K]`` predictions (:mod:`~harness.uncertainty.metrics`): accuracy, NLL, Brier,
  ECE, MCE, adaptive ECE, classwise ECE, RMS calibration error and their suite; the multi-label metrics and theirs
  (:mod:`~harness.uncertainty.multilabel`);
- OOD detection and selective prediction (:mod:`~harness.uncertainty.ood`): uncertainty scores, FPR at 95% TPR,
  AUROC/AUPR, the risk-coverage curve and AURC;
- streaming metrics (:mod:`~harness.uncertainty.streaming`): torchmetrics ``Metric`` classes that equal the array
  metrics batch by batch, with distributed sync. They are loaded on first access (PEP 562 ``__getattr__``), so
  ``import harness.uncertainty`` never imports torchmetrics, which the core install leaves out; they are listed in
  ``__all__`` only where torchmetrics is installed, so ``from harness.uncertainty import *`` works without it.

- ``Predictions`` (:mod:`~harness.uncertainty.predictions`), temperature scaling
  (:mod:`~harness.uncertainty.calibration`), the post-hoc calibrators beside it (:mod:`~harness.uncertainty.calibrators`:
  vector and Dirichlet scaling, netcal's binning and beta calibration) and deep ensembles
  (:mod:`~harness.uncertainty.ensembles`).
The statistics (:mod:`~harness.uncertainty.stats`, :mod:`~harness.uncertainty.compare`) and the Σ analysis
(:mod:`~harness.uncertainty.covariance`, which imports the heads) stay in their modules: importing this package
loads NumPy only.
"""

from harness.uncertainty.calibration import fit_temperature, scale
from harness.uncertainty.calibrators import CALIBRATORS, EPS, calibrate, fit_dirichlet, fit_vector_scaling
from harness.uncertainty.ensembles import average, check_compatible, summarize
from harness.uncertainty.metrics import (
    METRICS,
    NUM_BINS,
    accuracy,
    adaptive_ece,
    brier,
    calibration_error,
    classification_metrics,
    classwise_ece,
    ece,
    log_sigmoid,
    log_softmax,
    mce,
    nll,
    reliability_bins,
    rms_calibration_error,
    top_label,
)
from harness.uncertainty.multilabel import (
    macro_map,
    micro_ap,
    multilabel_metrics,
    multilabel_top_label,
    multilabel_top_label_ece,
    prec_at_1,
    sigmoid_nll,
)
from harness.uncertainty.ood import (
    SCORES,
    aurc,
    entropy,
    expected_entropy,
    fpr_at_tpr,
    mutual_information,
    ood_metrics,
    risk_coverage,
    uncertainty_scores,
)
from harness.uncertainty.predictions import Predictions

#: the streaming metric classes of :mod:`harness.uncertainty.streaming`, loaded on first access
STREAMING = (
    "ECE",
    "MCE",
    "AdaptiveECE",
    "RMSCalibrationError",
    "ClasswiseECE",
    "NLL",
    "Brier",
    "AURC",
    "FPR95",
)


def _torchmetrics_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torchmetrics") is not None


__all__ = [
    # array metrics (harness.uncertainty.metrics, harness.uncertainty.multilabel)
    "METRICS",
    "NUM_BINS",
    "accuracy",
    "nll",
    "brier",
    "ece",
    "mce",
    "adaptive_ece",
    "rms_calibration_error",
    "classwise_ece",
    "calibration_error",
    "reliability_bins",
    "top_label",
    "log_softmax",
    "log_sigmoid",
    "prec_at_1",
    "sigmoid_nll",
    "micro_ap",
    "macro_map",
    "multilabel_top_label",
    "multilabel_top_label_ece",
    "classification_metrics",
    "multilabel_metrics",
    # OOD detection and selective prediction (harness.uncertainty.ood)
    "SCORES",
    "entropy",
    "expected_entropy",
    "mutual_information",
    "uncertainty_scores",
    "fpr_at_tpr",
    "ood_metrics",
    "risk_coverage",
    "aurc",
    # predictions, temperature scaling and ensembles
    "Predictions",
    "fit_temperature",
    "scale",
    "average",
    "check_compatible",
    "summarize",
    # post-hoc calibrators (harness.uncertainty.calibrators)
    "CALIBRATORS",
    "EPS",
    "calibrate",
    "fit_dirichlet",
    "fit_vector_scaling",
] + (list(STREAMING) if _torchmetrics_installed() else [])


def __getattr__(name: str):
    """The streaming metric classes (:data:`STREAMING`), imported with torchmetrics on first access.

    Raises:
        ImportError: torchmetrics is not installed (the message names the install command).
        AttributeError: any other unknown name.
    """
    if name in STREAMING:
        from harness.uncertainty import streaming

        return getattr(streaming, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
