"""Bad inputs found by the fifteenth reliability audit that the lead fixed (``audit15 <case id>``)."""

from __future__ import annotations

import click
import numpy as np
from bad_inputs_audit9_config import CONFIGS

from bad_inputs import bad_input
from bad_inputs_downstream import _upstream as _harness_model


# ------------------------------------------------------------------------------ A15-01: one label, multi-label
@bad_input(
    "uncertainty",
    "harness.uncertainty.multilabel.multilabel_metrics of [10, 1] logits, a maximally wrong binary model (audit15 "
    "A15-01: prec@1, micro_ap and macro_map 1.0, the advice of the single-label K = 1 refusal followed)",
    ValueError,
    r"^logits have K = 1 label \(shape \(10, 1\)\): the multi-label metrics score the examples that have a positive "
    r"label.*for one binary label, give its two classes' log-probabilities \[log\(1 - p\), log p\]",
)
def _multilabel_one_label(tmp):
    from harness.uncertainty import multilabel

    y = np.array([1, 0] * 5)
    multilabel.multilabel_metrics(np.where(y == 1, -8.0, 8.0)[:, None], y[:, None])


# ------------------------------------------------------------------------------ A15-03: a run's training state
def _state(tmp) -> str:
    """``tmp/k9/checkpoints/last.pt``: a run's training state as the upstream stage writes it (its format marker; a
    killed run's only file of its model), beside a finished ``k9/run.json``."""
    import torch

    from harness.upstream.checkpoint import STATE_FORMAT

    (tmp / "k9" / "checkpoints").mkdir(parents=True)
    (tmp / "k9" / "run.json").write_text("{}\n")
    torch.save({"format": STATE_FORMAT, "model": {}}, tmp / "k9" / "checkpoints" / "last.pt")
    return str(tmp / "k9" / "checkpoints" / "last.pt")


#: how every refusal names a training state, and what to give instead
_STATE = (
    r"'.*k9/checkpoints/last\.pt' is the training state of the harness run .*k9 \(the point it resumes from\), not a "
)


@bad_input(
    "import",
    "harness import --model timm:test_resnet --weights <run>/checkpoints/last.pt (audit15 A15-03: after the split was "
    "read and the model built, 'do not fit the model ...', advising other classes or other data)",
    click.ClickException,
    r"^--weights: " + _STATE + r"model: give .*k9/model\.pt \(written when the run ends\) or .*k9/checkpoints/best\.pt"
    r".*as --model",
)
def _import_state_as_weights(tmp):
    from harness.cli import main

    main(["import", "--model", "timm:test_resnet", "--weights", _state(tmp), "--data", str(CONFIGS / "digits_hom.yaml"),
          "--out", str(tmp / "imp"), "limit_eval=20"], standalone_mode=False)  # fmt: skip


@bad_input(
    "fewshot",
    "harness fewshot --model <run>/checkpoints/last.pt (audit15 A15-03: 'is not a harness model checkpoint ...; write "
    "it with harness.models.save_model', which a stopped run's user cannot act on)",
    click.ClickException,
    _STATE + r"model: give .*k9/model\.pt \(written when the run ends\) or .*best\.pt, or finish the run by giving its "
    r"harness upstream command again",
)
def _fewshot_state_as_model(tmp):
    from harness.cli import main

    main(["fewshot", "--model", _state(tmp), "--tasks", "demo_digit", "--log-with", "none", "--shots", "1",
          "--out", str(tmp / "fs")], standalone_mode=False)  # fmt: skip


@bad_input(
    "upstream",
    "model.pretrained_file=<run>/checkpoints/last.pt (audit15 A15-03: 'build the model with the config the checkpoint "
    "was written with (harness.models.load_model does)', which an upstream config cannot do)",
    ValueError,
    r"^model\.pretrained_file='.*k9/checkpoints/last\.pt' is the training state of the harness run .*k9 .*not a "
    r"backbone's weights: finish the run .*export_run\('.*k9', '.*k9_export'\).*k9_export/model\.safetensors",
)
def _pretrained_file_state(tmp):
    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig, validate

    path = _state(tmp)
    validate(load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", [f"model.pretrained_file={path}"]))


@bad_input(
    "upstream",
    "model.pretrained_file=<run>/checkpoints/best.pt (audit15 A15-03: the export advised was export_run('<run>/"
    "checkpoints', '<run>/checkpoints_export'), which export_run itself refuses)",
    ValueError,
    r"^model\.pretrained_file='.*k9/checkpoints/best\.pt' is a harness run's model\.pt .*export_run\('[^']*k9', "
    r"'[^']*k9_export'\)",
)
def _pretrained_file_best(tmp):
    import shutil

    from harness.config import load_config
    from harness.upstream.config import UpstreamConfig, validate

    (tmp / "k9" / "checkpoints").mkdir(parents=True)
    shutil.copy(_harness_model(), tmp / "k9" / "checkpoints" / "best.pt")
    path = tmp / "k9" / "checkpoints" / "best.pt"
    validate(load_config(UpstreamConfig, CONFIGS / "digits_hom.yaml", [f"model.pretrained_file={path}"]))


# ------------------------------------------------------------------------------ A15-09: partial_mantel's arguments
def _three_matrices():
    """Three symmetric 6 x 6 matrices of random values."""
    rng = np.random.default_rng(1)
    return [(lambda a: a + a.T)(rng.random((6, 6))) for _ in range(3)]


@bad_input(
    "uncertainty",
    "harness.uncertainty.mantel.partial_mantel(x, y, z, n_perm=-5) (audit15 A15-09: p_value -0.25; n_perm=0 gave "
    "1.0 and n_perm=2.5 ran 2 permutations, which mantel refuses)",
    ValueError,
    r"^n_perm must be an integer >= 1, got -5; 9999 is usual$",
)
def _partial_mantel_negative_permutations(tmp):
    from harness.uncertainty import mantel

    x, y, z = _three_matrices()
    for n_perm in (0, 2.5):
        try:
            mantel.partial_mantel(x, y, z, n_perm=n_perm)
        except ValueError as e:
            assert "n_perm must be an integer >= 1" in str(e), e
        else:
            raise AssertionError(f"n_perm={n_perm} accepted")
    mantel.partial_mantel(x, y, z, n_perm=-5)


@bad_input(
    "uncertainty",
    "harness.uncertainty.mantel.partial_mantel(x, y, 2x + 1) (audit15 A15-09: rho nan, p_value 0.0, 'significant', "
    "with a NumPy warning)",
    ValueError,
    r"^the pair ranks of x are a linear function of z's .*the partial correlation of x and y given z is undefined: "
    r"give a z that does not determine x",
)
def _partial_mantel_z_determines_x(tmp):
    from harness.uncertainty import mantel

    x, y, _ = _three_matrices()
    mantel.partial_mantel(x, y, 2 * x + 1, n_perm=999)


# ------------------------------------------------------------------------------ A15-11: --overwrite into another output
@bad_input(
    "outputs",
    "harness fewshot --out <a downstream sweep folder> --overwrite (audit15 A15-11: rc 0, fewshot.md and fewshot.json "
    "written beside sweep.json: one folder two commands' outputs; the refusal without --overwrite advised it)",
    click.ClickException,
    r"--out .*dsl is the downstream sweep folder of another harness command \(it holds sweep\.json\): harness fewshot "
    r"writes a folder of its own, even with --overwrite .*choose another --out",
)
def _fewshot_overwrite_into_a_sweep(tmp):
    from harness.cli import main

    (tmp / "dsl").mkdir()
    (tmp / "dsl" / "sweep.json").write_text("{}\n")  # what marks a downstream sweep folder
    try:
        main(["fewshot", "--model", _harness_model(), "--tasks", "demo_digit", "--log-with", "none", "--shots", "1",
              "--out", str(tmp / "dsl"), "--overwrite"], standalone_mode=False)  # fmt: skip
    finally:
        assert not (tmp / "dsl" / "fewshot.json").exists(), "a few-shot result written into the sweep folder"


@bad_input(
    "outputs",
    "harness ensemble --out <a few-shot folder> --overwrite (audit15 A15-11: rc 0, ensemble.json and predictions "
    "written beside fewshot.json)",
    click.ClickException,
    r"--out .*fs7 is the few-shot folder of another harness command \(it holds fewshot\.json\): harness ensemble "
    r"writes a folder of its own, even with --overwrite",
)
def _ensemble_overwrite_into_fewshot(tmp):
    from harness.cli import main

    from bad_inputs_uncertainty import make_run

    a, b = make_run(tmp / "a", seed=0), make_run(tmp / "b", seed=1)
    (tmp / "fs7").mkdir()
    (tmp / "fs7" / "fewshot.json").write_text("{}\n")  # what marks a few-shot folder
    try:
        main(["ensemble", "-m", str(a), "-m", str(b), "--out", str(tmp / "fs7"), "--overwrite"], standalone_mode=False)
    finally:
        assert not (tmp / "fs7" / "ensemble.json").exists(), "an ensemble written into the few-shot folder"


# ------------------------------------------------------------------------------ A15-10: two tasks-cifar on one --out
@bad_input(
    "outputs",
    "harness data tasks-cifar --out tc while another tasks-cifar writes tc (audit15 A15-10: the second wrote its "
    "images, then a 40-line traceback, OSError: Directory not empty)",
    ValueError,
    r"tc is being written by another process \(PID .*\): another harness data tasks-cifar is writing there; wait for "
    r"it to finish, or give another --out",
)
def _tasks_cifar_twice_at_once(tmp):
    from unittest import mock

    from harness.io import RunLock
    from harness.tasks import cifar

    with (
        mock.patch("harness.data.sources.build_split", return_value=list(range(10))),  # the data, read before the lock
        mock.patch("harness.data.sources.cifar10n_rows", return_value=np.arange(10)),
        mock.patch.object(cifar, "_Part"),
        mock.patch.object(cifar, "_check_sizes"),
        mock.patch.object(cifar, "_write_tasks", side_effect=AssertionError("written beside the other build")),
        RunLock(tmp / "tc", what="the other tasks-cifar"),  # the other build, still writing
    ):
        cifar.build_cifar_tasks(tmp / "cifar10n", tmp / "tc", test_size=5)
