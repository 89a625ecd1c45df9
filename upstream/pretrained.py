"""``model.pretrained_file``: a backbone's weights, checked as every location is and as the file it is (not a harness
run's ``model.pt``: :func:`harness.checkpoint_files.checkpoint_kind`, which ``--weights`` reads too), in
:func:`harness.upstream.config.validate` (before any work) and again as the model is built
(:func:`harness.upstream.parts.build_training`). Apart from both so that the config imports no training part."""

from __future__ import annotations

from typing import Optional


def pretrained_file_setting(path: Optional[str]) -> Optional[str]:
    """``model.pretrained_file`` as a run reads it: a location (:func:`harness.io.check_location`), ``~`` expanded and
    ``$`` refused (:func:`harness.folder_paths.expand_home`), not a harness run's ``model.pt``
    (:func:`check_pretrained_file`).

    Raises:
        ValueError: naming model.pretrained_file, the value and the fix.
    """
    from harness.folder_paths import expand_home
    from harness.io import check_location

    path = expand_home(check_location(path, "model.pretrained_file"), "model.pretrained_file")
    check_pretrained_file(path)
    return path


def check_pretrained_file(path: Optional[str]) -> None:
    """``model.pretrained_file`` takes a backbone's weights (a state dict file, an export's ``model.safetensors``),
    not a harness run's ``model.pt`` (:func:`harness.models.save_model`, format
    :data:`harness.checkpoint_files.CHECKPOINT_FORMAT`; recognised by :func:`harness.checkpoint_files.checkpoint_kind`, the one
    recognition ``--weights`` reads too): that holds the whole model, its backbone's tensors under ``backbone.``, its
    config and head, and would be met by a key mismatch whose fix an upstream config cannot follow. A file that is no
    checkpoint is left to the weights reader (:func:`harness.weights.read_state`), which names what is wrong with it.

    Raises:
        ValueError: a harness checkpoint (a model's, or a run's training state), naming the key, the file and the
            fix (finish and export the run, give its ``model.safetensors``).
    """
    from harness.checkpoint_files import CHECKPOINT_FORMAT, checkpoint_kind, run_folder

    kind = checkpoint_kind(path)
    if kind is None:
        return
    run = run_folder(path)
    out = run.parent / f"{run.name}_export"
    export = (
        f"export the run (python -c \"from harness.runs import export_run; export_run('{run}', '{out}')\") and give "
        f"model.pretrained_file={out}/model.safetensors"
    )
    if kind == "state":
        raise ValueError(
            f"model.pretrained_file={path!r} is the training state of the harness run {run} (the point it resumes "
            f"from), not a backbone's weights: finish the run (give its harness upstream command again), then {export}"
        )
    raise ValueError(
        f"model.pretrained_file={path!r} is a harness run's model.pt (format {CHECKPOINT_FORMAT!r}: the whole "
        f"model, its backbone's tensors under backbone., with its head and config), and model.pretrained_file "
        f"takes a backbone's weights: {export}"
    )
