"""Training services every stage shares: the accelerate loop (:mod:`harness.training.loop`), the trackers
(:mod:`harness.training.trackers`), the precision and device rules (:mod:`harness.training.precision`) and the
one prediction loop (:func:`harness.training.predict.predict_logits`).

``harness upstream`` and ``harness downstream`` both train through these modules and never import each other."""
