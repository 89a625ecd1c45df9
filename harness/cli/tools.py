"""The ``harness bench`` tool group: speed and memory benchmarks, each writing its table to ``results/bench/``
(the ``harness data`` group is :mod:`harness.cli.preparation`)."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.group import _Main
from harness.cli.options import FiniteFloat, LocalPath


def _outside_outputs(ctx: click.Context, param: click.Parameter, value: "Path | None") -> "Path | None":
    """The callback of every bench output option (:func:`_output`): refuse, when the command line is read (before any
    work), a file or folder inside a run, export or other harness output folder, by the one rule of every writer's
    output (:func:`harness.folder_paths.check_outside_outputs`), naming the option.

    Raises:
        click.UsageError: naming the option, its value, the folder it is inside with what marks it, and the fix.
    """
    from harness.folder_paths import check_outside_outputs

    if value is None:
        return value
    option, kind = param.opts[0], "folder" if not param.type.file_okay else "file"
    try:
        check_outside_outputs(
            value, option, f"harness bench {ctx.info_name}", fix=f"give {option} a {kind} outside {{folder}}"
        )
    except ValueError as e:
        raise click.UsageError(str(e), ctx) from e
    return value


def _output(*decls: str, folder: bool = False, **kwargs):
    """A bench command's output option: a file (``folder``: a folder), :class:`LocalPath`, checked by
    :func:`_outside_outputs`."""
    kind = {"file_okay": False} if folder else {"dir_okay": False}
    return click.option(*decls, type=LocalPath(path_type=Path, **kind), callback=_outside_outputs, **kwargs)


@click.group(cls=_Main)
def bench() -> None:
    """Speed and memory benchmarks; each writes its table to results/bench/."""


@bench.command("heads")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--quick", is_flag=True, help="A tiny grid (seconds), for smoke tests (not with --main-only).")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True, help="Timed steps per point.")
@click.option(
    "--naive-budget-gib",
    type=FiniteFloat(0),
    default=8.0,
    show_default=True,
    help="Skip the naive implementation where it would need more memory than this.",
)
@click.option(
    "--compile/--no-compile",
    "compiled",
    default=True,
    show_default=True,
    help="Also time torch.compile(head, fullgraph=True) in the main case (compiling takes minutes on a CPU).",
)
@click.option("--main-only", is_flag=True, help="Only the cases of the targets (S=1000, K=1000, and low rank at S=10).")
@_output(
    "--out",
    default=Path("results/bench/heads.md"),
    show_default=True,
    help="Markdown table to write (a .json twin is written beside it).",
)
@click.option(
    "--before",
    "before",
    type=LocalPath(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="A harness source tree of an earlier version (mkdir DIR && git archive <commit> harness | "
    "tar -x -C DIR): its head is timed too, side by side, at S=1000 (a before/after table).",
)
def bench_heads(
    device: str,
    quick: bool,
    repeats: int,
    naive_budget_gib: float,
    compiled: bool,
    main_only: bool,
    out: Path,
    before: "Path | None",
) -> None:
    """Forward+backward time and peak memory of every head variant, eager and compiled, vs a naive [B,S,K] one."""
    from harness.bench import heads

    try:
        heads.run(
            device=device,
            quick=quick,
            repeats=repeats,
            naive_budget_gib=naive_budget_gib,
            compiled=compiled,
            main_only=main_only,
            out=out,
            progress=click.echo,
            before_src=None if before is None else str(before.resolve()),
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    click.echo(f"wrote {out}")


@bench.command("coverage")
@click.option("--sims", type=click.IntRange(10), default=2000, show_default=True, help="Simulated studies per setting.")
@click.option("--setting", "settings", multiple=True, help="Only these settings (repeatable; default: all).")
@_output(
    "--out",
    default=Path("results/bench/coverage.md"),
    show_default=True,
    help="Markdown table to write (a .json twin is written beside it).",
)
def bench_coverage(sims: int, settings: "tuple[str, ...]", out: Path) -> None:
    """Coverage of the seeds-and-images 95% interval (top-1, NLL, ECE) on simulated studies, per setting."""
    from harness.bench import coverage

    try:
        coverage.run(sims=sims, out=out, settings=settings or None, progress=click.echo)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    click.echo(f"wrote {out}")


@bench.command("upstream")
@click.option(
    "--images",
    type=click.IntRange(256),
    default=6400,
    show_default=True,
    help="Training images per throughput measurement (one epoch).",
)
@click.option(
    "--repeats",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="Rounds of throughput measurements (every setting once a round), and of the step's profile.",
)
@click.option(
    "--epochs",
    type=click.IntRange(0),
    default=2,
    show_default=True,
    help="Epochs of each short accuracy run over train45k (0: throughput only).",
)
@click.option(
    "--backbone", "backbones", multiple=True, help="32 px backbones to measure, repeatable (default: all five)."
)
@click.option(
    "--data-path",
    type=LocalPath(file_okay=False, path_type=Path),
    default=None,
    help="CIFAR-10N folder (default ../shared/data/cifar10n).",
)
@_output(
    "--out",
    default=None,
    help="Where to write [default: results/bench/upstream.md; with --breakdown-only "
    "results/bench/upstream-breakdown.md].",
)
@click.option(
    "--breakdown-only",
    is_flag=True,
    help="Only profile where one training step's time goes, fp32 against bf16 (--repeats rounds, about 30 s each).",
)
def bench_upstream(
    images: int,
    repeats: int,
    epochs: int,
    backbones: "tuple[str, ...]",
    data_path: "Path | None",
    out: "Path | None",
    breakdown_only: bool,
) -> None:
    """Training throughput on CPU, step by step (PIL -> array loader -> bf16 -> channels_last; target
    >= 4x the default), the 32 px backbones, short-run accuracy of each, and where one step's time goes in
    fp32 and bf16."""
    from harness.upstream import bench as upstream_bench

    if breakdown_only:
        ctx = click.get_current_context()
        given = [
            f"--{name.replace('_', '-').rstrip('s') if name == 'backbones' else name.replace('_', '-')}"
            for name in ("images", "epochs", "backbones")
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        ]
        if given:
            raise click.UsageError(
                f"{', '.join(given)} set what the throughput and accuracy parts measure, which --breakdown-only "
                "skips: drop them, or drop --breakdown-only"
            )
    out = out or Path("results/bench/upstream-breakdown.md" if breakdown_only else "results/bench/upstream.md")
    try:
        upstream_bench.run(
            images=images,
            repeats=repeats,
            epochs=epochs,
            data_path=data_path,
            out=out,
            backbones=backbones or tuple(upstream_bench.BACKBONES),
            progress=click.echo,
            breakdown_only=breakdown_only,
        )
    except (FileNotFoundError, ValueError) as e:
        raise click.UsageError(str(e)) from e
    click.echo(f"wrote {out}")


@bench.command("data")
@click.option(
    "--size",
    "sizes",
    type=click.IntRange(1),
    multiple=True,
    help="Examples N, repeatable (default: 10000, 100000 and 1000000).",
)
@click.option(
    "--batch-size", type=click.IntRange(1), default=128, show_default=True, help="Loader batch and training batch."
)
@click.option("--batches", type=click.IntRange(1), default=40, show_default=True, help="Loader batches timed.")
@click.option(
    "--warmup", type=click.IntRange(0), default=5, show_default=True, help="Loader batches read before timing."
)
@click.option("--steps", type=click.IntRange(1), default=20, show_default=True, help="Training steps timed.")
@click.option("--shard-size", type=click.IntRange(1), default=10_000, show_default=True, help="Examples per shard.")
@click.option(
    "--repeats",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="Measurements of each source and size, the sources in turn.",
)
@_output(
    "--work-dir",
    folder=True,
    default=None,
    help="Where the data is generated (default: a new temporary folder); each size's data is deleted "
    "after it is measured.",
)
@click.option("--keep", is_flag=True, help="Keep the generated data (in --work-dir, which it needs).")
@click.option(
    "--max-minutes",
    type=FiniteFloat(0),
    default=0.0,
    show_default=True,
    help="Start no new size after this many minutes (0: no limit); sizes left out are listed.",
)
@_output(
    "--out",
    default=Path("results/bench/data.md"),
    show_default=True,
    help="Markdown table to write (a .json twin is written beside it).",
)
def bench_data(
    sizes: "tuple[int, ...]",
    batch_size: int,
    batches: int,
    warmup: int,
    steps: int,
    shard_size: int,
    repeats: int,
    work_dir: "Path | None",
    keep: bool,
    max_minutes: float,
    out: Path,
) -> None:
    """Peak memory and loader throughput of the manifest and shard sources against the number of examples
    (synthetic 32 px PNGs), and the training step of the default small model."""
    from harness.bench import data as data_bench

    try:
        data_bench.run(
            sizes=sizes or data_bench.SIZES,
            batch_size=batch_size,
            batches=batches,
            warmup=warmup,
            steps=steps,
            shard_size=shard_size,
            repeats=repeats,
            work_dir=work_dir,
            out=out,
            max_minutes=max_minutes,
            keep=keep,
            progress=click.echo,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    click.echo(f"wrote {out}")


@bench.command("shards")
@click.option("--seeds", type=click.IntRange(1), default=2, show_default=True, help="Seeds 0..N-1, each on both paths.")
@click.option("--epochs", type=click.IntRange(1), default=2, show_default=True, help="Epochs of every run.")
@click.option(
    "--config",
    "config",
    type=LocalPath(dir_okay=False, path_type=Path),
    default=Path("upstream/configs/cifar10n_hom.yaml"),
    show_default=True,
    help="The run config.",
)
@click.option(
    "--data-path",
    type=LocalPath(file_okay=False, path_type=Path),
    default=None,
    help="CIFAR-10N folder (default ../shared/data/cifar10n).",
)
@click.option("--shard-size", type=click.IntRange(1), default=2500, show_default=True, help="Examples per shard.")
@click.option(
    "--num-workers", type=click.IntRange(0), default=1, show_default=True, help="Loader workers of the shard runs."
)
@_output(
    "--work-dir",
    folder=True,
    default=Path("runs/bench/shards_vs_array"),
    show_default=True,
    help="Shards and run folders.",
)
@_output(
    "--out",
    default=Path("results/bench/shards_vs_array.md"),
    show_default=True,
)
def bench_shards(
    seeds: int,
    epochs: int,
    config: Path,
    data_path: "Path | None",
    shard_size: int,
    num_workers: int,
    work_dir: Path,
    out: Path,
) -> None:
    """CIFAR-10N trained from shards (harness data pack, data.source=shards) vs the cached-array path on the same
    short schedule, several seeds each: clean-test top-1, its seed spread and the difference with its interval."""
    from harness.upstream import bench_shards

    try:
        bench_shards.run(
            seeds=tuple(range(seeds)),
            epochs=epochs,
            config=config,
            data_path=data_path,
            shard_size=shard_size,
            num_workers=num_workers,
            work_dir=work_dir,
            out=out,
            progress=click.echo,
        )
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"wrote {out}")


def _device_finetune(upstream: str, train, test, settings: dict) -> float:
    """The transfer part's fine-tune: ``harness downstream``'s own, with ``FinetuneConfig(**settings)``; its top-1.
    (Module level, so that it reaches a fresh process; the library never imports a stage, so the command hands
    it to :func:`harness.bench.device.run`.)"""
    from harness.downstream.finetune import FinetuneConfig, finetune

    return finetune(upstream, train, test, FinetuneConfig(**settings))[0]


@bench.command("device")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Every part end to end on the CPU at tiny sizes (seconds): checks the code, not the device.",
)
@click.option(
    "--full",
    is_flag=True,
    help="Also the optional part, beyond the first part's 4 minutes on a GPU: every head case compiled in fp32 "
    "and bf16, and the plain loop compiled.",
)
@click.option(
    "--part",
    "parts",
    type=click.Choice(["correctness", "transfer", "head", "train", "loader"]),
    multiple=True,
    help="Only these parts (repeatable; default: all, in the order correctness, transfer, head, train, loader).",
)
@click.option(
    "--pack",
    type=LocalPath(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="The shard pack the loader part reads (a folder `harness data pack` wrote, with a train split; default: "
    "the digits training split, packed for the check).",
)
@click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="auto: CUDA where torch sees a GPU, else the CPU (with a note); the CPU for --dry-run.",
)
@_output(
    "--out",
    folder=True,
    default=None,
    help="Folder to write device.md and device.json in (default: results/bench; with --dry-run a new temporary "
    "folder, and never results/bench).",
)
def bench_device(
    dry_run: bool, full: bool, parts: "tuple[str, ...]", pack: "Path | None", device: str, out: "Path | None"
) -> None:
    """Check the harness on the accelerator torch sees: the head vs the naive [B,S,K] one, ResNet-50 training
    throughput (hom, het, a plain PyTorch loop; eager and compiled), the downstream fine-tune step rate,
    correctness (determinism, resume, device vs CPU evaluation) and the shard loader's rate; at most 4 minutes on
    one H100."""
    import tempfile

    from harness.bench import device as device_bench

    committed = Path("results/bench")
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="harness-device-dry-")) if dry_run else committed
    elif dry_run and out.resolve() == committed.resolve():
        raise click.UsageError(
            f"--dry-run would overwrite the measured {committed}/device.md: give another --out (or none: a "
            "temporary folder)"
        )
    try:
        result = device_bench.run(
            out,
            dry_run=dry_run,
            full=full,
            parts=parts or device_bench.PARTS,
            device=device,
            finetune=_device_finetune,
            progress=click.echo,
            pack=None if pack is None else str(pack),
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    failed = device_bench.failed_parts(result)
    if failed:
        raise click.ClickException(f"part(s) {', '.join(failed)} failed (see {out / 'device.md'})")
    click.echo(f"wrote {out / 'device.md'} and {out / 'device.json'}")
