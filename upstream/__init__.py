"""upstream: pretraining of heteroscedastic and baseline classifiers (added by the upstream stage)."""
