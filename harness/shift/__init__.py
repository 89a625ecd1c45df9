"""Predictions under distribution shift: corrupted and out-of-distribution sets, saved per set.

For a finished run folder, :func:`harness.shift.predict.predict_run` re-predicts with the run's ``model.pt`` (one model in
memory) on:

- ``clean``: a fixed subset of the evaluation split (``examples`` images drawn once with ``seed``;
  all of them with ``examples: 0``), as the model sees it (the evaluation view: resize and centre
  crop to ``data.image_size``, as uint8);
- ``<corruption>-<severity>``: the same images corrupted (:mod:`harness.shift.corruptions`: the 15
  CIFAR-10-C / ImageNet-C corruptions, severities 1-5, seeded per example, cached);
- ``ood-<name>``: an out-of-distribution set: a built-in far-OOD set that needs no files
  (``gaussian``: i.i.d. Gaussian pixel noise, mean 0.5 and standard deviation 0.25 of the [0, 1]
  range, clipped; ``blobs``: scikit-image's ``binary_blobs`` shapes in two random colours, the
  "Gaussian" and "Blobs" anomalies of Hendrycks, Mazeika & Dietterich, ICLR 2019, Sec. 4.2, with our
  parameters), or any data source (``image_folder``, ``tfds``, ``manifest``, ``digits``,
  ``cifar10n``) given as ``NAME:source=...,path=...,split=...``; as many images as the clean set.

Each set is saved as ``<run>/shift/<set>/predictions.npz`` (the format of a run's own
predictions, :class:`harness.uncertainty.predictions.Predictions`; OOD targets are -1) and, for heads with noise,
``mc.npz``: the mean over the head's Monte Carlo samples of the entropy of each sample's softmax (for
the mutual information, :mod:`harness.uncertainty.ood`). ``<run>/shift/shift.json`` records the settings and
which sets are done (rewritten after each set): a killed evaluation resumes, a finished one is not
redone, and a changed model, split or subset starts over. :func:`harness.shift.predict.average_ensemble` averages the
members' sets of an ensemble folder with :func:`harness.uncertainty.ensembles.average`, as ``harness ensemble``
does, into ``<ensemble>/shift/`` (``mc.npz`` then holds the mean member entropy).

Reports read the sets back with :func:`harness.shift.store.load_sets`; nothing is re-predicted to redo a report.
"""
