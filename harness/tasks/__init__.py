"""The downstream tasks as a library: the VTAB-1k catalogue (:mod:`harness.tasks.catalogue`), their readers
(:mod:`harness.tasks.readers` for TFDS, :mod:`harness.tasks.folder_format` for split lists), the built-in demo tasks
(:mod:`harness.tasks.demo`), task names and data checks (:mod:`harness.tasks.taskset`), the views a transfer sees
(:mod:`harness.tasks.views`), the few-shot solver (:mod:`harness.tasks.fewshot`) and probe
(:mod:`harness.tasks.probe`), the CIFAR-10 task builder (:mod:`harness.tasks.cifar`), and the rule that a task's
scored lists name no image the model trained on (:mod:`harness.tasks.trained_images`).

``harness downstream`` fine-tunes on these tasks; ``harness upstream``'s few-shot monitor probes them."""
