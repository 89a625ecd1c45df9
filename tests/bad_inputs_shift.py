"""Bad inputs of the distribution-shift tools: corruptions, OOD sets, ``harness shift``, the experiment's
shift section and the shift report.

Run folders are built by hand (config.yaml, predictions.npz, metrics.json and a placeholder model.pt
that no case loads), so no case trains anything: every refusal comes before a model is read.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import numpy as np

from bad_inputs import bad_input, bad_settings


def _run(folder: str, model: bool = True, link: str = "softmax", image_size: int = 32, seed: int = 0) -> Path:
    """A digits run folder by hand (32 px evaluation view; ``seed``: its predictions); ``model.pt`` is a placeholder."""
    from harness.io import atomic_write_text

    from bad_inputs_uncertainty import make_run

    folder = make_run(folder, seed)
    atomic_write_text(
        folder / "config.yaml",
        f"seed: {seed}\nmodel:\n  head:\n    covariance: none\n    link: {link}\n"
        f"data:\n  source: digits\n  image_size: {image_size}\n"
        "  eval_resize: 32\n",
    )
    if model:
        (folder / "model.pt").write_bytes(b"placeholder: no case loads it")
    return folder


def _shift(*args: str) -> None:
    """``harness shift ARGS`` as a user runs it; a refusal raises its ClickException."""
    from harness.cli import main

    main(["shift", *args], standalone_mode=False)


def _options(tmp_path, options):
    """``harness shift --members RUN OPTION VALUE`` on a finished run."""
    _shift("--members", str(_run("a")), *options)


# BadParameter (malformed option values) is a ClickException too; the table shows the type raised
bad_settings(
    "shift",
    "{}",
    _options,
    [
        (
            "an unknown corruption name (harness shift --corruptions fros)",
            ("--corruptions", "gaussian_noise,fros"),
            r"unknown corruption 'fros': use all, a family \(noise, blur, weather, digital\) or one of gaussian_noise",
        ),
        (
            "a severity outside 1-5 (harness shift --severities 3-6)",
            ("--severities", "3-6"),
            r"corruption severity 6 is not one of 1, 2, 3, 4, 5.*give severities between 1 and 5",
        ),
        (
            "severities that are not numbers (harness shift --severities high)",
            ("--severities", "high"),
            r"'high': give severities as 1-5 or 1,3,5",
        ),
        (
            "an unknown built-in OOD set (--ood svhn)",
            ("--ood", "svhn"),
            r"unknown built-in OOD set 'svhn': use gaussian or blobs, or give a data source, "
            r"e\.g\. svhn:source=image_folder",
        ),
        (
            "an OOD set spec that is not key=value (--ood x:source)",
            ("--ood", "x:source"),
            r"'source' is not key=value; write e\.g\. x:source=image_folder,path=/data/ood,split=test",
        ),
    ],
    error=click.ClickException,
)


@bad_input(
    "shift",
    "a member folder without model.pt (an unfinished run)",
    click.ClickException,
    match=r"'a' has no model\.pt: shift predictions come from a run's final model; pass a finished run folder",
)
def _no_model(tmp_path):
    _shift("--members", str(_run("a", model=False)), "--corruptions", "frost")


@bad_input(
    "shift",
    "a folder that is neither a run nor an ensemble",
    click.ClickException,
    match=r"neither a run folder .* nor an ensemble folder",
)
def _not_a_run(tmp_path):
    Path("plain").mkdir()
    _shift("--members", "plain")


@bad_input(
    "shift",
    "a multi-label (sigmoid) model",
    click.ClickException,
    match=r"multi-label \(sigmoid\) model: shift and OOD evaluation covers single-label softmax models",
)
def _sigmoid(tmp_path):
    _shift("--members", str(_run("a", link="sigmoid")))


@bad_input(
    "shift",
    "images below 32 px with corruptions (data.image_size 16)",
    click.ClickException,
    match=r"data\.image_size 16 is below the 32 px the corruptions need",
)
def _small_images(tmp_path):
    _shift("--members", str(_run("a", image_size=16)), "--corruptions", "frost")


@bad_input(
    "shift",
    "an OOD set at another image size than the model's (image_size=64)",
    click.ClickException,
    match=r"OOD set image_size=64 differs from the model's data\.image_size=32.*drop image_size",
)
def _ood_size(tmp_path):
    Path("ood/test/a").mkdir(parents=True)
    _shift(
        "--members", str(_run("a")), "--corruptions", "none", "--ood", "x:source=image_folder,path=ood,image_size=64"
    )


@bad_input(
    "shift",
    "an OOD split with no images",
    click.ClickException,
    match=r"OOD set 'x' \(source image_folder, split 'test'\): .*point the OOD set's path and split at images",
)
def _ood_empty(tmp_path):
    Path("ood/test/a").mkdir(parents=True)
    _shift("--members", str(_run("a")), "--corruptions", "none", "--ood", "x:source=image_folder,path=ood")


@bad_input(
    "shift",
    "an OOD data key the data section does not have (--ood x:source=tfds,dataset=svhn)",
    click.ClickException,
    match=r"OOD set: .*dataset.*keys are those of the data section, plus split",
)
def _ood_key(tmp_path):
    _shift("--members", str(_run("a")), "--ood", "x:source=tfds,dataset=svhn")


@bad_input(
    "shift",
    "the same OOD name twice (--ood blobs --ood blobs)",
    click.ClickException,
    match=r"OOD set name 'blobs' is given twice",
)
def _ood_twice(tmp_path):
    _shift("--members", str(_run("a")), "--ood", "blobs", "--ood", "blobs")


@bad_input(
    "shift",
    "an experiment whose shift section names an unknown corruption (harness run)",
    ValueError,
    match=r"shift: unknown corruption 'gaussian'",
)
def _experiment_corruption(tmp_path):
    from harness.experiment import load_experiment, validate_experiment

    validate_experiment(load_experiment("digits", ("shift.corruptions=[gaussian]",)))


@bad_input(
    "shift",
    "an experiment whose shift section has a negative examples count (harness run)",
    ValueError,
    match=r"shift\.examples must be a whole number >= 0 \(0: the whole split\), got -5",
)
def _experiment_examples(tmp_path):
    from harness.experiment import load_experiment, validate_experiment

    validate_experiment(load_experiment("digits", ("shift.examples=-5",)))


@bad_input(
    "shift",
    "a report of runs evaluated under shift on different subsets (harness report)",
    click.ClickException,
    match=r"was evaluated under shift on other examples than .*same settings",
)
def _report_subsets(tmp_path):
    from harness.cli import main
    from harness.io import atomic_write_text
    from harness.uncertainty.predictions import Predictions

    for seed, (name, rows) in enumerate((("a", np.arange(0, 20)), ("b", np.arange(10, 30)))):
        run = _run(name, seed=seed)
        p = Predictions.load(run)
        for s in ("clean", "frost-1"):
            Predictions(p.logits[rows], p.targets[rows], rows, p.class_names, "softmax").save(
                run / "shift" / s / "predictions.npz"
            )
        atomic_write_text(
            run / "shift" / "shift.json",
            json.dumps(
                {
                    "sets": {"clean": "x", "frost-1": "y"},
                    "order": ["clean", "frost-1"],
                    "examples": 20,
                    "eval_data": "synthetic",
                    "settings": {},
                    "key": {},
                }
            ),
        )
    main(["report", "a", "b", "--name", "r"], standalone_mode=False)
