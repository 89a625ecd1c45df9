"""Uncertainty: metrics, calibration, ensembles, OOD, covariance analysis and the statistics that compare them."""
