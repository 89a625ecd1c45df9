"""The ``harness data`` tool group: data preparation, ``harness data pack`` (sources converted into WebDataset shards
for streaming) and ``harness data tasks-cifar`` (VTAB-1k-style transfer tasks built from CIFAR-10)."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource

from harness.cli.group import _Main
from harness.cli.options import LocalPath, PathText, seed_option


@click.group(cls=_Main)
def data() -> None:
    """Data preparation: sources converted for streaming."""


@data.command("pack", context_settings={"ignore_unknown_options": True})
@click.argument("source", type=PathText())
@click.argument("out", type=LocalPath(file_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
@click.option("--shard-size", type=click.IntRange(1), required=True, help="Examples per shard.")
@click.option("--split", default=None, help="Split to pack (default: the config's train split).")
@click.option(
    "--multilabel",
    is_flag=True,
    help="Label sets (cifar10n: the annotators' labels; manifest: each line's labels; else one-label sets).",
)
@seed_option("Seed of the order of examples across shards.")
@click.option(
    "--in-order",
    is_flag=True,
    help="Keep the source's order (default: a seeded shuffle across shards); not with --seed.",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Pack into a folder that holds other files, beside them (a file it did not write is never replaced).",
)
def data_pack(source, out, overrides, shard_size, split, multilabel, seed, in_order, overwrite) -> None:
    """Pack a split into WebDataset tar shards: OUT/<split>/<split>-000000.tar ... and OUT/<split>/index.json.

    SOURCE is a data config YAML (a run config's data section, or a data section alone) or a source name
    (digits, cifar10n, image_folder, tfds, manifest); OVERRIDES are data settings as key=value, e.g.
    path=../shared/data/cifar10n label_set=worse limit_train=1000. Rerun after an interruption, it writes
    only the missing shards. Read the result with data.source=shards data.path=OUT. A config with data.label_noise
    packs the noisy labels of the training (or held-out) split, drawn as a run draws them, and records the noise in
    index.json (data.label_noise=null packs the clean labels); asked of another split, it is refused (a run config's
    noise on its evaluation split packs that split's clean labels, as the run scores it). OUT/<split> lies outside
    every harness output folder and outside the folder it packs (data.path and the split read), even with --overwrite.
    """
    from harness.data.pack import noisy_split, pack
    from harness.data.pack_source import read_settings_of, source_config
    from harness.data.sources import build_split
    from harness.data.splits import read_folders
    from harness.folder_paths import check_not_other_output, check_outside_outputs
    from harness.io import path_under

    if in_order and click.get_current_context().get_parameter_source("seed") is not ParameterSource.DEFAULT:
        raise click.UsageError(
            f"--seed {seed} orders the examples across shards, and --in-order keeps the source's order: the seed would "
            "be unused; give --in-order alone, or --seed without --in-order"
        )
    try:
        cfg = source_config(source, overrides, multilabel, split)  # label noise on a split that draws none refused
        split = split or cfg.train_split
        folder = path_under(out, split)
        check_outside_outputs(  # nor the folder it packs, nor in it: --overwrite neither (audit23 A23-06)
            folder,
            "OUT",
            "harness data pack",
            read_folders(cfg.source, cfg.path, (split,), root=True),
            shown=f"OUT {out} (its split folder {folder})",
            fix="give OUT a folder outside {folder}",
        )
        check_not_other_output(out, "harness data pack", "OUT")  # an experiment's runs_root, a run... (A18-03)
        ds, noise = noisy_split(cfg, split, build_split(cfg, split))
        if multilabel and not ds.multilabel:
            from harness.data.dataset import LabelSets

            ds = ds.with_labels(LabelSets.from_labels(ds.labels), f"{ds.description}, one-label sets")
        index = pack(
            ds,
            folder,
            shard_size,
            prefix=split,
            order_seed=None if in_order else seed,
            source={"config": read_settings_of(cfg), "split": split},
            label_noise=noise,
            overwrite=overwrite,
        )
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(
        f"{index['num_examples']} examples of {ds.description} in {len(index['shards'])} shard(s): "
        f"{folder / index['shards'][0]['name']} ... and {folder / 'index.json'}"
    )


@data.command("tasks-cifar")
@click.option(
    "--data",
    "data_path",
    type=LocalPath(file_okay=False, path_type=Path),
    required=True,
    help="The cifar10n folder (cifar10_jpeg.zip, cifar10n_labels.npz).",
)
@click.option(
    "--out",
    type=LocalPath(file_okay=False, path_type=Path),
    required=True,
    help="Folder to write the task folders in (a task folder that exists must be empty).",
)
@seed_option("Seed of every draw.")
@click.option("--test-size", type=click.IntRange(1), default=2000, show_default=True, help="Test examples per task.")
def data_tasks_cifar(data_path: Path, out: Path, seed: int, test_size: int) -> None:
    """Build VTAB-1k-style transfer tasks from CIFAR-10 (cifar10, cifar_rotation, cifar_location, cifar_count):
    training images from the upstream held-out split val5k, test images from the CIFAR-10 test split, written as
    OUT/<task>/{train800,val200,train800val200,test}.txt and PNGs. Use them as custom tasks NAME=FOLDER:K (the lines
    are printed and saved in OUT/cifar_tasks.json). OUT is not, and lies outside, every run, export and other harness
    output folder (:func:`harness.folder_paths.check_outside_outputs`), and the --data folder it reads."""
    from harness.folder_paths import check_not_other_output, check_outside_outputs
    from harness.tasks.cifar import build_cifar_tasks

    try:
        reads = {data_path.resolve(): "the cifar10n folder --data"}  # nor in the folder it reads (audit23 A23-06)
        check_outside_outputs(out, "--out", "harness data tasks-cifar", reads)  # not inside a run, export or sweep
        check_not_other_output(out, "harness data tasks-cifar", "--out")  # nor such a folder (an experiment's) itself
        summary = build_cifar_tasks(data_path, out, seed=seed, test_size=test_size, progress=click.echo)
    except (ValueError, FileNotFoundError) as e:
        raise click.ClickException(str(e)) from e
    for name, task in summary["tasks"].items():
        click.echo(f"{task['spec']}  ({task['group']}, {task['sizes']})")
    click.echo(f"ood tasks (built in): {' '.join(summary['groups']['ood'])}; summary in {out / 'cifar_tasks.json'}")
