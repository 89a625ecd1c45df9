"""The downstream (transfer) stage of an experiment, checked before any work
(:func:`harness.experiment.validate.validate_experiment` calls :func:`check_downstream`): its preset and settings,
its tasks' data, no fine-tuning pass of one image for a transferred backbone with BatchNorm, and no task
scoring the transferred runs' training images."""

from __future__ import annotations

from typing import Any

from harness.experiment.config import Experiment
from harness.experiment.plan import _Plan
from harness.experiment.section_rules import sweep_settings


def check_downstream(exp: Experiment, presets: dict, main: _Plan) -> None:
    """The downstream preset and settings (their keys and values, whether or not the stage runs), then, when it has
    tasks, the device, task names and all four splits of every task (their data), and no fine-tuning pass of one
    image for a backbone with BatchNorm (:func:`_check_batch_norm`).

    Args:
        exp: the experiment.
        presets: the downstream presets by name (:data:`harness.downstream.config.PRESETS`).
        main: the main study's plan, as validated (its final runs are the ones transferred).

    Raises:
        ValueError: naming the key (``downstream.preset``, ``downstream.settings.<key>``, ``downstream: <task>``), the
            value and the fix.
    """
    from harness.tasks.taskset import check_tasks, expand_tasks
    from harness.training.precision import check_device

    if exp.downstream.preset not in presets:
        raise ValueError(f"unknown downstream.preset {exp.downstream.preset!r}: use one of {', '.join(presets)}")
    settings = sweep_settings(exp.downstream.preset, exp.downstream.settings, "downstream.settings")
    if not exp.downstream.tasks:
        return
    try:
        check_device(settings.device)
        sizes = check_tasks(expand_tasks(exp.downstream.tasks), settings)
    except (ValueError, FileNotFoundError) as e:
        raise ValueError(f"downstream: {e}") from e
    _check_batch_norm(exp, main, settings, sizes)
    _check_trained_images(exp, main, settings)


def _check_trained_images(exp: Experiment, main: _Plan, settings: Any) -> None:
    """No task's scored list (val200, test) names an image the transferred runs will train on (their data's
    ``train_split``: an image folder's folder, or the images a manifest, or a pack of one, lists:
    :func:`harness.tasks.trained_images.data_folder`, audit23 A23-08), as the sweep refuses once the transfer
    starts (audit22 A22-07), after the upstream training.

    Raises:
        ValueError: ``downstream: `` and the list file and line, the image, the run and the fix.
    """
    from dataclasses import asdict

    from harness.tasks.taskset import expand_tasks
    from harness.tasks.trained_images import SWEEP_SCORED, check_lists, data_folder

    evaluated = [m for m in exp.methods if m in exp.evaluated()]
    folders = [f for m in evaluated for f in (main.grid[m].values() if m in main.grid else [f"{m}_s{exp.seeds[0]}"])]
    for folder in folders:
        data = asdict(main.configs[folder].data)
        trained = data_folder(data, f"as the experiment's run {folder} reads it")
        try:
            check_lists(
                trained,
                expand_tasks(exp.downstream.tasks),
                settings,
                SWEEP_SCORED,
                f"the experiment's run {folder} trains on",
            )
        except ValueError as e:
            raise ValueError(f"downstream: {e}") from e


def _check_batch_norm(exp: Experiment, main: _Plan, settings: Any, sizes: dict) -> None:
    """The transfer's fine-tuning passes (``downstream.settings.micro_batch`` images, at most ``batch_size``, and
    a task's whole training split where it is smaller: ``sizes``, :func:`harness.tasks.taskset.check_tasks`) have 2
    images or more when a transferred model's backbone has BatchNorm layers, as the sweep refuses them once the
    transfer starts (:func:`harness.downstream.sweep.sweep`), after the upstream training. Each distinct backbone of
    the evaluated methods' runs is built on PyTorch's meta device (nothing allocated, no weights read), as
    :func:`harness.upstream.batch_norm.check_batch_norm` builds it; an ``hf-hub:``/``local-dir:`` backbone, or one
    that cannot be built there, is left to the sweep.

    Raises:
        ValueError: naming downstream.settings.micro_batch (or the task and its split), the backbone, a BatchNorm
            layer and the fix.
    """
    from harness.downstream.sweep import check_split_passes
    from harness.training.loop import check_batch_norm_batch
    from harness.upstream.batch_norm import meta_batch_norm_layers

    micro = min(settings.micro_batch, settings.batch_size)
    smallest = min((n for splits in sizes.values() for s, n in splits.items() if s.startswith("train")), default=2)
    if micro >= 2 and smallest >= 2:
        return
    evaluated = [m for m in exp.methods if m in exp.evaluated()]
    folders = [f for m in evaluated for f in (main.grid[m].values() if m in main.grid else [f"{m}_s{exp.seeds[0]}"])]
    backbones = {repr((c.model.backbone, c.model.backbone_kwargs)): c.model for c in map(main.configs.get, folders)}
    for model in backbones.values():
        layers, owner = meta_batch_norm_layers(model), f"backbone {model.backbone} (of the upstream models transferred)"
        check_batch_norm_batch(
            layers,
            micro,
            f"downstream.settings.micro_batch={settings.micro_batch} is the images of one fine-tuning forward pass "
            f"(downstream.settings.batch_size={settings.batch_size} accumulates passes)",
            "use downstream.settings.micro_batch=2 or more, and a downstream.settings.batch_size it divides",
            owner,
        )
        check_split_passes(layers, micro, sizes, owner, f"downstream.settings.micro_batch={micro}")
