"""The ``harness`` command line (click). Stages add their subcommands here."""

from __future__ import annotations

from pathlib import Path

import click


#: what rerunning a command keeps after Ctrl-C, by command (the message the interrupted command ends with)
RESUMES = {
    "upstream": "rerun the same command to resume from the run's last checkpoint (checkpoints/last.pt, written at "
                "the end of every epoch and every train.checkpoint_every steps); the steps after it are redone",
    "run": "rerun the same command to resume: finished runs, shift predictions and fine-tuning runs are kept, and "
           "each interrupted training run continues from its last checkpoint",
    "downstream": "rerun the same command to resume the sweep: its finished fine-tuning runs are kept (runs.jsonl), "
                  "the interrupted one starts over",
    "import": "rerun the same command to start over: nothing is kept (the run folder is written once every "
              "prediction is done; stopped while it was written, it is left incomplete: delete it first)",
    "data pack": "rerun the same command to resume: finished shards are kept, the interrupted one is written again",
}


class _Main(click.Group):
    """The ``harness`` group and its subgroups: a missing optional package (:class:`harness.extras.MissingExtra`)
    ends any command with its one-line message (the ``pip install`` of its extra), and Ctrl-C with one line on
    what rerunning the command keeps (:data:`RESUMES`) and exit status 130 (128 + SIGINT, as a shell reports
    it), not a traceback."""

    group_class = type  # subgroups (harness data, harness bench) are of this class too

    def invoke(self, ctx: click.Context):
        from harness.extras import MissingExtra

        try:
            return super().invoke(ctx)
        except MissingExtra as e:
            raise click.ClickException(str(e)) from e
        except KeyboardInterrupt:
            names, c = [ctx.invoked_subcommand or ""], ctx
            while c.parent is not None:  # the command's path below ``harness``: "upstream", "data pack"
                names.insert(0, c.info_name)
                c = c.parent
            said = RESUMES.get(" ".join(n for n in names if n))
            click.echo("\ninterrupted" + (f": {said}" if said else ""), err=True)
            ctx.exit(130)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="het-harness")
def main() -> None:
    """Heteroscedastic (HET / HET-XL) classification: heads, pretraining, VTAB-1k transfer,
    ensembles and calibration reports."""


def _register_stages() -> None:
    """Each stage's own subcommands (``upstream``: pretraining)."""
    from harness.upstream.cli import upstream

    main.add_command(upstream)


_register_stages()


def _model_source(flag: str, dest: str, what: str, said_in: str):
    """The options that name a model from any source (harness.models.load_source): ``flag`` (a ``model.pt``,
    ``timm:NAME`` or ``torchvision:NAME``), ``--weights`` and ``--random-init``."""
    def wrap(f):
        f = click.option("--random-init", is_flag=True,
                         help=f"With timm:NAME or torchvision:NAME and no weights: random weights on purpose (said in "
                              f"{said_in}).")(f)
        f = click.option("--weights", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
                         help="With timm:NAME or torchvision:NAME: the weights file (.safetensors, a .pth/.pt state "
                              "dict, or for timm a BiT .npz).")(f)
        return click.option(flag, dest, required=True,
                            help=f"{what}: the model.pt of an upstream run; timm:NAME (any timm model name, e.g. "
                                 "timm:resnet50.a1_in1k) with --weights, or with timm's weights (downloaded as timm "
                                 "does; from the local cache only with HF_HUB_OFFLINE=1); timm:hf-hub:ORG/NAME or "
                                 "timm:local-dir:PATH (timm's sources); or torchvision:NAME with --weights.")(f)
    return wrap


def _source_folder(source: str, random_init: bool) -> str:
    """The default output folder name of a model source: ``timm_resnet18`` (``_random_init`` appended when
    asked), or the name of a ``model.pt``'s run folder."""
    if ":" in source and not Path(source).exists():  # timm:NAME, torchvision:NAME
        return source.replace(":", "_").replace("/", "_") + ("_random_init" if random_init else "")
    return Path(source).resolve().parent.name


@main.command()
@click.option("--members", "-m", "members", multiple=True, required=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A member run folder; repeat, or give several after one --members.")
@click.argument("more", nargs=-1, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Ensemble folder (default runs/ensembles/<name>).")
@click.option("--name", default=None, help="Ensemble name (default: first member's name + _ens).")
@click.option("--from-checkpoints", is_flag=True,
              help="Re-predict with each member's model.pt, one model in memory at a time.")
@click.option("--eval-data", type=click.Path(dir_okay=False, exists=True, path_type=Path), default=None,
              help="With --from-checkpoints: a config whose data section replaces the members' own.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--overwrite", is_flag=True,
              help="Write into an existing --out that holds other files (an ensemble never replaces files it did not "
                   "write).")
def ensemble(members, more, out, name, from_checkpoints, eval_data, device, overwrite) -> None:
    """Deep ensemble of run folders: averaged probabilities, member and ensemble metrics, Gibbs CE,
    ensemble gain, disagreement and KL to the ensemble. Given the folders of downstream sweeps (harness downstream
    --out, one per upstream model), the ensemble across those upstream models on every transfer task."""
    from harness.downstream.ensembles import ENSEMBLE_FILES, is_sweep, write_upstream_ensemble
    from harness.io import path_under
    from harness.runs import build_ensemble, data_from_file, predict_checkpoint
    from harness.shift.predict import ensemble_sets

    members = list(members) + list(more)
    name = name or f"{members[0].resolve().name}_ens"
    try:
        out = out or path_under("runs/ensembles", name)
    except ValueError as e:
        raise click.ClickException(f"--name: {e}") from e
    sweeps = [is_sweep(m) for m in members]
    if any(sweeps):
        if not all(sweeps) or from_checkpoints or eval_data:
            raise click.ClickException("downstream sweep folders ensemble only with other sweep folders, without "
                                       "--from-checkpoints or --eval-data: give only sweeps, or only run folders")
        mine = [out / f for f in ENSEMBLE_FILES]
        if out.is_dir() and not overwrite and any(p.name not in ENSEMBLE_FILES for p in out.iterdir()):
            raise click.ClickException(f"{out} holds other files: choose another --out, or --overwrite (only "
                                       f"{', '.join(ENSEMBLE_FILES)} are written)")
        try:
            result = write_upstream_ensemble(members, out)
        except (ValueError, OSError) as e:
            raise click.ClickException(str(e)) from e
        for g, v in result["groups"].items():
            click.echo(f"{g:12s} ensemble " + ", ".join(f"{k} {x:.4f}" for k, x in v["ensemble"].items())
                       + "; members " + ", ".join(f"{k} {x:.4f}" for k, x in v["members"].items()))
        click.echo(f"wrote {mine[1]} and {mine[0]}")
        return

    def repredict(run_dir):
        data = data_from_file(eval_data) if eval_data else None
        return predict_checkpoint(run_dir, data, device=device)

    try:
        spec = build_ensemble(members, out, from_checkpoints, repredict if from_checkpoints else None, overwrite)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e
    try:
        shifted = ensemble_sets(out)  # the members' shift predictions, averaged like the rest
    except (ValueError, OSError) as e:  # the ensemble itself is built; only its shift sets are missing
        shifted = None
        click.echo(f"warning: the ensemble is built, but its shift sets are not: {e}", err=True)
    s = spec["summary"]
    for key, vals in (("member mean", s["member_mean"]), ("ensemble", s["ensemble"])):
        click.echo(f"{key:12s} " + ", ".join(f"{k} {v:.4f}" for k, v in vals.items()))
    click.echo(f"Gibbs CE {s['gibbs_ce']:.4f}, ensemble NLL {s['ensemble_nll']:.4f}, gain {s['ensemble_gain']:.4f}, "
               f"disagreement {s['disagreement']:.4f}, mean KL {s['mean_kl_to_ensemble']:.4f}")
    if shifted:
        click.echo(f"shift sets averaged: {len(shifted['sets'])} (harness report shows them)")
    click.echo(f"ensemble folder: {out}")


@main.command(name="import", context_settings={"ignore_unknown_options": True})
@_model_source("--model", "source", "The model, trained on the data's classes (its own output layer is kept)",
               "run.json")
@click.option("--data", "data_file", required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="A config whose data section names the evaluation data (e.g. upstream/configs/cifar10n_base.yaml).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True, help="The new run folder.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--overwrite", is_flag=True,
              help="Write into an --out that holds other files, beside them (a file it did not write is never replaced).")
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def import_cmd(source, weights, random_init, data_file, out, device, overwrite, overrides) -> None:
    """A run folder for a model trained elsewhere (a timm or torchvision state dict with its classifier, or a
    harness model.pt): its predictions on the data's evaluation (and held-out) split, so that harness ensemble,
    harness shift and harness report take it like any upstream run. OVERRIDES are data keys, e.g. path=/data/x."""
    from harness.runs import data_from_file, import_run

    if random_init:
        raise click.ClickException("--random-init has no place here: an imported model is a trained one; give --weights")
    try:
        run_dir = import_run(source, data_from_file(data_file, overrides), out, weights, device, progress=click.echo,
                             overwrite=overwrite)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e
    import json

    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    click.echo(", ".join(f"{k} {v:.4f}" for k, v in metrics.items()) + f"; run folder: {run_dir}")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--name", default=None, help="Report name: results/<name>/ (default: first folder's name).")
@click.option("--out-root", type=click.Path(file_okay=False, path_type=Path), default=Path("results"),
              show_default=True)
@click.option("--no-covariance", is_flag=True, help="Skip the covariance analysis of het models.")
@click.option("--no-shift", is_flag=True, help="Leave out the distribution-shift section (harness shift predictions).")
@click.option("--top-pairs", type=click.IntRange(1), default=10, show_default=True)
@click.option("--screenshot", is_flag=True,
              help="Also render report.html in headless Chromium to report.png: the whole page, 1200 px wide.")
@click.option("--overwrite", is_flag=True,
              help="Write into an existing folder that holds other files (a report replaces only its own files).")
def report(paths, name, out_root, no_covariance, no_shift, top_pairs, screenshot, overwrite) -> None:
    """Markdown, HTML and JSON report of run and ensemble folders (Table 7 layout, calibration,
    reliability diagrams, covariance analysis; distribution shift where harness shift has run)."""
    from harness.report.build import build
    from harness.report.render import png_size
    from harness.report.render import screenshot as take_screenshot

    try:
        out = build(paths, name or paths[0].resolve().name, out_root, covariance=not no_covariance,
                    top_pairs=top_pairs, shift=not no_shift, overwrite=overwrite, progress=click.echo)
        click.echo(f"wrote {out / 'report.md'}, {out / 'report.html'}, {out / 'report.json'}")
        if screenshot:
            click.echo("[report] screenshot: the page measured, then captured whole in headless Chromium")
            png = take_screenshot(out / "report.html", out / "report.png")
            click.echo(f"wrote {png} ({'x'.join(map(str, png_size(png)))} px)")
    except (ValueError, OSError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e


def _severities(text: str) -> "list[int]":
    """``1-5`` or ``1,3,5`` -> integers (their range is checked by harness.shift.corruptions.resolve)."""
    try:
        if "-" in text.strip("-"):
            lo, hi = (int(v) for v in text.split("-"))
            return list(range(lo, hi + 1))
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: give severities as 1-5 or 1,3,5", param_hint="--severities") from None


@main.command()
@click.option("--members", "-m", "members", multiple=True, required=True,
              type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="A run or ensemble folder; repeat, or give several after one --members.")
@click.argument("more", nargs=-1, type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--corruptions", default="all", show_default=True,
              help="Comma-separated: all, families (noise, blur, weather, digital), corruption names (gaussian_noise, "
                   "frost, ...), or none.")
@click.option("--severities", default="1-5", show_default=True,
              help="Severities in 1-5: a range (1-5) or a list (1,3,5).")
@click.option("--examples", type=click.IntRange(0), default=0, show_default=True,
              help="A fixed random subset of the evaluation split, the same images in every set (0: all of it).")
@click.option("--ood", multiple=True, default=("gaussian", "blobs"), show_default=True,
              help="OOD set: gaussian or blobs (built in), or NAME:source=...,path=...,split=... with data keys "
                   "(image_folder, tfds, manifest, ...); repeat for several; --ood none for no OOD set.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Draws the subset; seeds the corruptions and the OOD sets.")
@click.option("--device", default="cpu", show_default=True)
@click.option("--overwrite", is_flag=True,
              help="Write into a folder's existing shift/ that holds other files (only the sets' own files are written).")
def shift(members, more, corruptions, severities, examples, ood, seed, device, overwrite) -> None:
    """Predictions under distribution shift: corrupted copies of the evaluation split (CIFAR-10-C-style, 15
    corruptions x 5 severities by default) and OOD sets, saved in each folder's shift/ as predictions.npz files;
    one model in memory at a time. Ensemble folders average their members' sets. harness report then adds the
    shift section (accuracy/NLL/ECE against severity, OOD detection, risk-coverage)."""
    from harness.shift.predict import predict_folders
    from harness.shift.results import entry_results
    from harness.shift.settings import ShiftSettings

    settings = ShiftSettings(corruptions=[c for c in corruptions.split(",") if c.strip()],
                             severities=_severities(severities), examples=examples, seed=seed,
                             ood=[o for o in ood if o.strip() and o.strip() != "none"])
    folders = list(members) + list(more)
    try:
        predict_folders(folders, settings, progress=click.echo, device=device, overwrite=overwrite)
        for f in folders:
            r = entry_results(f)
            mean = r["mean_corrupted"]
            line = f"{f}: clean top1 {r['sets']['clean']['top1']:.4f}"
            if mean:
                line += f"; corrupted mean top1 {mean['top1']:.4f}, NLL {mean['nll']:.4f}, ECE {mean['ece']:.4f}"
            line += "".join(f"; {n} AUROC (1 − max prob) {v['one_minus_max_prob']['auroc']:.4f}" for n, v in r["ood"].items())
            click.echo(line)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e


#: what harness downstream writes in its --out folder (``reliability_<group>.png`` too); ``predictions``, ``tb`` and
#: ``submitit`` may be made before ``sweep.json``
SWEEP_FILES = ("sweep.json", "runs.jsonl", "predictions", "vtab.md", "vtab.html", "vtab.json", "tb", "submitit", "jobs")


def _check_sweep_out(out: Path, overwrite: bool) -> None:
    """Refuse, before any work, an ``--out`` holding files harness downstream did not write (no ``sweep.json``):
    with ``overwrite`` the sweep writes beside them, never over one.

    Raises:
        ValueError: naming the files and the fix (harness.io.check_output_folder).
    """
    from harness.io import LOCK_FILES, check_output_folder

    ours = (out / "sweep.json").is_file() or (out.is_dir() and all(
        p.name in ("predictions", "tb", "submitit", *LOCK_FILES) for p in out.iterdir()))
    taken = SWEEP_FILES + tuple(p.name for p in out.glob("reliability_*.png")) if out.is_dir() else SWEEP_FILES
    check_output_folder(out, ours, taken, overwrite, "harness downstream", "--out")


@main.command()
@_model_source("--upstream", "upstream_ckpt", "The model", "vtab.md")
@click.option("--tasks", required=True, multiple=True,
              help="vtab1k, natural, specialized, structured, demo, task names, or a custom task "
                   "`NAME=FOLDER:K[:no-flip][:no-crop]` (a folder in the VTAB-1k folder format, K classes; no-flip / "
                   "no-crop turn those augmentations off); repeat or comma-separate.")
@click.option("--data-dir", default=None, help="TFDS data_dir, or the root of the folder format.")
@click.option("--data-format", type=click.Choice(["tfds", "folder"]), default="tfds", show_default=True)
@click.option("--preset", default="vtab_sweep", show_default=True, metavar="[vtab_sweep|bit_hyperrule|demo]",
              help="vtab_sweep: the VTAB-1k sweep, {0.001, 0.01} x {500, 2500} steps chosen on val200, batch 512; "
                   "bit_hyperrule: the published BiT-HyperRule (lr 0.003 at batch 512, 500 / 10k / 20k steps by "
                   "training-set size); demo: CPU-sized for the demo suite. The options below override it.")
@click.option("--lrs", default=None, help="Learning-rate grid, e.g. 0.001,0.01.")
@click.option("--steps", default=None, help="Steps grid, e.g. 500,2500.")
@click.option("--seeds", type=click.IntRange(1), default=None, help="Final runs per task.")
@click.option("--batch-size", type=click.IntRange(1), default=None, help="Examples per step (BiT: 512).")
@click.option("--micro-batch", type=click.IntRange(1), default=None,
              help="Examples per forward pass (gradient accumulation up to --batch-size).")
@click.option("--resolution", default=None, help="RESIZE,CROP instead of the BiT rule (e.g. 32,32).")
@click.option("--lr-batch", type=click.IntRange(1), default=None,
              help="Batch size the --lrs are given for; scaled linearly to --batch-size (BiT: 512).")
@click.option("--schedule", type=click.Choice(["staircase", "bit_hyperrule", "ta", "cosine"]), default=None,
              help="staircase: warm-up 20%, x0.1 at 40/60/80% of the steps (the VTAB sweep's); bit_hyperrule: the "
                   "BiT-HyperRule's; ta: task_adaptation defaults; cosine: big_vision-style. Default: the preset's.")
@click.option("--head", default=None, metavar="[hom|diag|het|pe]",
              help="The fresh transfer head. hom (default): the paper's Table 6 protocol, a zero-initialised linear "
                   "head; diag, het, pe: a heteroscedastic head (diagonal, low-rank with R = min(6, K), "
                   "parameter-efficient), beyond that protocol, its τ chosen on val200 with (lr, steps).")
@click.option("--temperatures", default=None,
              help="With --head diag/het/pe: the τ grid, e.g. 0.5,1,2 (default 0.5,1,2,3).")
@click.option("--allow-outside-paths", is_flag=True,
              help="Folder format: accept list paths outside the task folder (../x.jpg, /data/x.jpg). Off by "
                   "default, so a split list cannot make the harness read other files.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--channels-last", is_flag=True,
              help="NHWC activations: faster convolutions on CPUs and tensor cores, the same result up to rounding.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default results/downstream/<upstream run name>).")
@click.option("--overwrite", is_flag=True,
              help="Write into an --out that holds other files, beside them (a file it did not write is never replaced).")
@click.option("--executor", type=click.Choice(["local", "submitit-local", "slurm"]), default="local",
              show_default=True, help="In this process; one process per run (per GPU with --gpus); SLURM jobs.")
@click.option("--gpus", default="", help="submitit-local: GPU ids to spread runs over, e.g. 0,1,2,3.")
@click.option("--slurm", "slurm_opts", multiple=True, help="SLURM parameter key=value (slurm_partition=gpu ...).")
@click.option("--mixed-precision", type=click.Choice(["no", "auto", "bf16", "fp16"]), default="no", show_default=True,
              help="no: fp32; auto: bf16 where the device computes it natively (GPUs with bf16, CPUs with AVX512-BF16 "
                   "or AMX), else fp32; bf16; fp16 (GPUs only). Part of the recipe.")
@click.option("--log-with", default="tensorboard", show_default=True,
              help="Experiment trackers, comma-separated: tensorboard (<out>/tb), mlflow, wandb, ... (accelerate's); "
                   "none for no tracking. mlflow and wandb: pip install \"het-harness[track]\".")
def downstream(upstream_ckpt, tasks, data_dir, data_format, preset, lrs, steps, seeds, batch_size, micro_batch,
               resolution, lr_batch, schedule, allow_outside_paths, device, channels_last, out, executor, gpus,
               slurm_opts, weights, random_init, head, temperatures, overwrite, mixed_precision, log_with) -> None:
    """VTAB-1k transfer: fresh zero-initialised head, lr x steps sweep on val200 (or the BiT-HyperRule),
    final runs on train800val200 scored on test; checks every task's data first; resumes a killed sweep. Under
    accelerate launch (--num_processes N) the processes split the runs."""
    from harness.downstream.config import PRESETS, SweepSettings
    from harness.downstream.sweep import sweep
    from harness.upstream.trackers import parse_log_with

    def numbers(text, option, kind, example, count=None):
        if text is None:
            return None
        try:
            values = [kind(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values or (count is not None and len(values) != count):
            what = f"{count} comma-separated" if count else "comma-separated"
            unit = "whole numbers" if kind is int else "numbers"
            raise click.BadParameter(f"{option} {text!r}: expected {what} {unit}, e.g. {option} {example}",
                                     param_hint=option)
        return values

    names = [n for t in tasks for n in t.split(",") if n]
    given = {"lrs": numbers(lrs, "--lrs", float, "0.001,0.01"), "steps": numbers(steps, "--steps", int, "500,2500"),
             "seeds": seeds, "batch_size": batch_size, "micro_batch": micro_batch, "lr_batch": lr_batch,
             "schedule": schedule, "resolution": numbers(resolution, "--resolution", int, "160,128", count=2),
             "head": head, "temperatures": numbers(temperatures, "--temperatures", float, "0.5,1,2")}
    slurm = {}
    for opt in slurm_opts:
        key, eq, value = opt.partition("=")
        if not (key and eq):
            raise click.BadParameter(f"--slurm {opt!r}: expected key=value, e.g. --slurm slurm_partition=gpu",
                                     param_hint="--slurm")
        slurm[key] = int(value) if value.isdigit() else value
    if gpus:
        slurm["visible_gpus"] = numbers(gpus, "--gpus", int, "0,1,2,3")
    out = out or Path("results/downstream") / _source_folder(upstream_ckpt, random_init)
    try:
        settings = SweepSettings(**{**PRESETS[preset], **{k: v for k, v in given.items() if v is not None}},
                                 device=device, data_format=data_format, data_dir=data_dir,
                                 allow_outside_paths=allow_outside_paths, channels_last=channels_last,
                                 mixed_precision=mixed_precision)
        _check_sweep_out(out, overwrite)
        result = sweep(upstream_ckpt, names, out, settings, executor, slurm, progress=click.echo, weights=weights,
                       random_init=random_init, log_with=parse_log_with(log_with))
    except (ValueError, OSError) as e:  # OSError: missing data (FileNotFoundError), an unwritable --out
        raise click.ClickException(str(e)) from e
    click.echo(f"mean over {len(result['tasks'])} tasks: {100 * result['mean_over_tasks']:.2f}; wrote {out / 'vtab.md'}")


@main.command()
@_model_source("--model", "source", "The frozen model", "fewshot.md")
@click.option("--tasks", required=True, multiple=True,
              help="As harness downstream: vtab1k, natural, specialized, structured, demo, task names, or a custom task "
                   "NAME=FOLDER:K; repeat or comma-separate.")
@click.option("--shots", default="1,5,10,25", show_default=True,
              help="Training examples per class, comma-separated (big_vision's 1,5,10,25).")
@click.option("--data-dir", default=None, help="TFDS data_dir, or the root of the folder format.")
@click.option("--data-format", type=click.Choice(["tfds", "folder"]), default="tfds", show_default=True)
@click.option("--resolution", default=None,
              help="SIZE, or RESIZE,CROP as harness downstream (the images are resized to CROP); default the BiT rule's "
                   "crop: 128 below 96x96 pixels, else 480.")
@click.option("--allow-outside-paths", is_flag=True,
              help="Folder format: accept list paths outside the task folder (../x.jpg, /data/x.jpg).")
@click.option("--seed", type=int, default=0, show_default=True, help="Draws the shots and the held-out examples.")
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda or cuda:N.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default results/fewshot/<model name>).")
@click.option("--overwrite", is_flag=True,
              help="Write into an --out that holds other files, beside them (a file it did not write is never replaced).")
@click.option("--log-with", default="tensorboard", show_default=True,
              help="Experiment trackers, comma-separated: tensorboard (<out>/tb), mlflow, wandb, ... (accelerate's); "
                   "none for no tracking. mlflow and wandb: pip install \"het-harness[track]\".")
def fewshot(source, weights, random_init, tasks, shots, data_dir, data_format, resolution, allow_outside_paths, seed,
            device, out, overwrite, log_with) -> None:
    """Few-shot linear evaluation (big_vision's probe): frozen pre-logit features, closed-form ridge regression to
    ±1 one-hot targets on 1/5/10/25 examples per class of train800val200, λ chosen on held-out examples of that
    split (never on test), prec@1 on test; writes fewshot.json and fewshot.md."""
    from harness.downstream.config import SweepSettings
    from harness.downstream.fewshot import fewshot as run_fewshot
    from harness.upstream.trackers import parse_log_with

    def whole_numbers(text, option, example):
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            values = []
        if not values:
            raise click.BadParameter(f"{option} {text!r}: expected comma-separated whole numbers, e.g. {option} "
                                     f"{example}", param_hint=option)
        return values

    names = [n for t in tasks for n in t.split(",") if n]
    out = out or Path("results/fewshot") / _source_folder(source, random_init)
    try:
        settings = SweepSettings(device=device, data_format=data_format, data_dir=data_dir,
                                 allow_outside_paths=allow_outside_paths)
        result = run_fewshot(source, names, out, whole_numbers(shots, "--shots", "1,5,10,25"), settings, seed,
                             whole_numbers(resolution, "--resolution", "32") if resolution else None, weights,
                             random_init, progress=click.echo, overwrite=overwrite, log_with=parse_log_with(log_with))
    except (ValueError, OSError) as e:  # OSError: missing data or model (FileNotFoundError), an unwritable --out
        raise click.ClickException(str(e)) from e
    click.echo("mean over tasks: " + ", ".join(f"{s}-shot {100 * v:.2f}" for s, v in result["mean"].items())
               + f"; wrote {out / 'fewshot.md'}")


@main.command(name="run", context_settings={"ignore_unknown_options": True})
@click.argument("experiment", required=False)
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
@click.option("--no-train", is_flag=True,
              help="Train nothing: build the report from the runs that have finished (restored from records where "
                   "missing); conditions report the seeds they have, and the report lists the runs left out.")
@click.option("--sync-records", is_flag=True,
              help="Only save the records of finished runs (and restore missing run folders from records); "
                   "train nothing. For an experiment with records: true.")
def run_cmd(experiment, overrides, no_train, sync_records) -> None:
    """The main job: pretrain every method and seed, ensemble, transfer, and write one report.

    EXPERIMENT is a YAML path or a built-in name (default: digits, the embedded data). OVERRIDES are
    key=value pairs, e.g. seeds=[0,1] (`harness run seeds=[0,1]` overrides the default). Rerunning
    after an interruption redoes only what is missing.
    """
    from harness.experiment import load_experiment, run_experiment
    from harness.upstream.train import TrainingDiverged

    if experiment and "=" in experiment and not Path(experiment).exists():  # `harness run key=value`: the default
        experiment, overrides = None, (experiment, *overrides)

    try:
        exp = load_experiment(experiment, overrides)
        if sync_records:
            from harness.experiment import records_dir
            from harness.experiment.stages import sync_records_locked

            restored, saved = sync_records_locked(exp)  # under the experiment's lock; records verified first
            click.echo(f"records in {records_dir(exp)}: {saved} saved, {restored} run folder(s) restored")
            return
        out = run_experiment(exp, progress=click.echo, train=not no_train)
    except (ValueError, OSError, TrainingDiverged) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"report: {out / 'report.md'} and {out / 'report.html'}")


@main.group()
def bench() -> None:
    """Speed and memory benchmarks; each writes its table to results/bench/."""


@bench.command("heads")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--quick", is_flag=True, help="A tiny grid (seconds), for smoke tests.")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True, help="Timed steps per point.")
@click.option("--naive-budget-gib", type=float, default=8.0, show_default=True,
              help="Skip the naive implementation where it would need more memory than this.")
@click.option("--compile/--no-compile", "compiled", default=True, show_default=True,
              help="Also time torch.compile(head, fullgraph=True) in the main case (compiling takes minutes on a CPU).")
@click.option("--main-only", is_flag=True, help="Only the cases of the targets (S=1000, K=1000, and low rank at S=10).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("results/bench/heads.md"),
              show_default=True, help="Markdown table to write (a .json twin is written beside it).")
def bench_heads(device: str, quick: bool, repeats: int, naive_budget_gib: float, compiled: bool, main_only: bool,
                out: Path) -> None:
    """Forward+backward time and peak memory of every head variant, eager and compiled, vs a naive [B,S,K] one."""
    from harness.bench import heads

    try:
        heads.run(device=device, quick=quick, repeats=repeats, naive_budget_gib=naive_budget_gib, compiled=compiled,
                  main_only=main_only, out=out, progress=click.echo)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    click.echo(f"wrote {out}")



@bench.command("upstream")
@click.option("--images", type=click.IntRange(256), default=6400, show_default=True,
              help="Training images per throughput measurement (one epoch).")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True,
              help="Rounds of throughput measurements (every setting once a round).")
@click.option("--epochs", type=click.IntRange(0), default=2, show_default=True,
              help="Epochs of each short accuracy run over train45k (0: throughput only).")
@click.option("--backbone", "backbones", multiple=True, help="32 px backbones to measure (default: all four).")
@click.option("--data-path", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="CIFAR-10N folder (default ../shared/data/cifar10n).")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("results/bench/upstream.md"),
              show_default=True)
def bench_upstream(images: int, repeats: int, epochs: int, backbones: "tuple[str, ...]", data_path: "Path | None",
                   out: Path) -> None:
    """Training throughput on CPU, step by step (PIL -> array loader -> bf16 -> channels_last; target
    >= 4x the default), the 32 px backbones, and short-run accuracy of each."""
    from harness.upstream import bench as upstream_bench

    try:
        upstream_bench.run(images=images, repeats=repeats, epochs=epochs, data_path=data_path, out=out,
                           backbones=backbones or tuple(upstream_bench.BACKBONES), progress=click.echo)
    except FileNotFoundError as e:
        raise click.UsageError(str(e)) from e
    click.echo(f"wrote {out}")


@bench.command("data")
@click.option("--size", "sizes", type=click.IntRange(1), multiple=True,
              help="Examples N, repeatable (default: 10000, 100000 and 1000000).")
@click.option("--batch-size", type=click.IntRange(1), default=128, show_default=True,
              help="Loader batch and training batch.")
@click.option("--batches", type=click.IntRange(1), default=40, show_default=True, help="Loader batches timed.")
@click.option("--warmup", type=click.IntRange(0), default=5, show_default=True,
              help="Loader batches read before timing.")
@click.option("--steps", type=click.IntRange(1), default=20, show_default=True, help="Training steps timed.")
@click.option("--shard-size", type=click.IntRange(1), default=10_000, show_default=True, help="Examples per shard.")
@click.option("--repeats", type=click.IntRange(1), default=3, show_default=True,
              help="Measurements of each source and size, the sources in turn.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the data is generated (default: a new temporary folder); each size's data is deleted "
                   "after it is measured.")
@click.option("--keep", is_flag=True, help="Keep the generated data.")
@click.option("--max-minutes", type=click.FloatRange(0), default=0.0, show_default=True,
              help="Start no new size after this many minutes (0: no limit); sizes left out are listed.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("results/bench/data.md"),
              show_default=True, help="Markdown table to write (a .json twin is written beside it).")
def bench_data(sizes: "tuple[int, ...]", batch_size: int, batches: int, warmup: int, steps: int, shard_size: int,
               repeats: int, work_dir: "Path | None", keep: bool, max_minutes: float, out: Path) -> None:
    """Peak memory and loader throughput of the manifest and shard sources against the number of examples
    (synthetic 32 px PNGs), and the training step of the default small model."""
    from harness.bench import data as data_bench

    try:
        data_bench.run(sizes=sizes or data_bench.SIZES, batch_size=batch_size, batches=batches, warmup=warmup,
                       steps=steps, shard_size=shard_size, repeats=repeats, work_dir=work_dir, out=out,
                       max_minutes=max_minutes, keep=keep, progress=click.echo)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    click.echo(f"wrote {out}")


@bench.command("shards")
@click.option("--seeds", type=click.IntRange(1), default=2, show_default=True, help="Seeds 0..N-1, each on both paths.")
@click.option("--epochs", type=click.IntRange(1), default=2, show_default=True, help="Epochs of every run.")
@click.option("--config", "config", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("upstream/configs/cifar10n_hom.yaml"), show_default=True, help="The run config.")
@click.option("--data-path", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="CIFAR-10N folder (default ../shared/data/cifar10n).")
@click.option("--shard-size", type=click.IntRange(1), default=2500, show_default=True, help="Examples per shard.")
@click.option("--num-workers", type=click.IntRange(0), default=1, show_default=True,
              help="Loader workers of the shard runs.")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path),
              default=Path("runs/bench/shards_vs_array"), show_default=True, help="Shards and run folders.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("results/bench/shards_vs_array.md"), show_default=True)
def bench_shards(seeds: int, epochs: int, config: Path, data_path: "Path | None", shard_size: int, num_workers: int,
                 work_dir: Path, out: Path) -> None:
    """CIFAR-10N trained from shards (harness data pack, data.source=shards) vs the cached-array path on the same
    short schedule, several seeds each: clean-test top-1, its seed spread and the difference with its interval."""
    from harness.upstream import bench_shards

    try:
        bench_shards.run(seeds=tuple(range(seeds)), epochs=epochs, config=config, data_path=data_path,
                         shard_size=shard_size, num_workers=num_workers, work_dir=work_dir, out=out,
                         progress=click.echo)
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"wrote {out}")


@main.group()
def data() -> None:
    """Data preparation: sources converted for streaming."""


@data.command("pack", context_settings={"ignore_unknown_options": True})
@click.argument("source")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
@click.option("--shard-size", type=click.IntRange(1), required=True, help="Examples per shard.")
@click.option("--split", default=None, help="Split to pack (default: the config's train split).")
@click.option("--multilabel", is_flag=True, help="Label sets (cifar10n: the annotators' labels; else one-label sets).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the order of examples across shards.")
@click.option("--in-order", is_flag=True, help="Keep the source's order (default: a seeded shuffle across shards).")
@click.option("--overwrite", is_flag=True,
              help="Pack into a folder that holds other files, beside them (a file it did not write is never replaced).")
def data_pack(source, out, overrides, shard_size, split, multilabel, seed, in_order, overwrite) -> None:
    """Pack a split into WebDataset tar shards: OUT/<split>/<split>-000000.tar ... and OUT/<split>/index.json.

    SOURCE is a data config YAML (a run config's data section, or a data section alone) or a source name
    (digits, cifar10n, image_folder, tfds, manifest); OVERRIDES are data settings as key=value, e.g.
    path=../shared/data/cifar10n label_set=worse limit_train=1000. Rerun after an interruption, it writes
    only the missing shards. Read the result with data.source=shards data.path=OUT. A config with data.label_noise
    packs the noisy labels of the training (or held-out) split, drawn as a run draws them, and records the noise in
    index.json (data.label_noise=null packs the clean labels).
    """
    from harness.config import to_dict
    from harness.data.pack import noisy_split, pack, source_config
    from harness.data.sources import build_split
    from harness.io import path_under

    try:
        cfg = source_config(source, overrides, multilabel)
        split = split or cfg.train_split
        folder = path_under(out, split)
        ds, noise = noisy_split(cfg, split, build_split(cfg, split))
        if multilabel and not ds.multilabel:
            from harness.data.dataset import LabelSets

            ds = ds.with_labels(LabelSets.from_labels(ds.labels), f"{ds.description}, one-label sets")
        index = pack(ds, folder, shard_size, prefix=split, order_seed=None if in_order else seed,
                     source={"config": to_dict(cfg), "split": split}, label_noise=noise, overwrite=overwrite)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e
    click.echo(f"{index['num_examples']} examples of {ds.description} in {len(index['shards'])} shard(s): "
               f"{folder / index['shards'][0]['name']} ... and {folder / 'index.json'}")


@main.command()
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of lines.")
def env(as_json: bool) -> None:
    """Versions, devices and CPU features of this machine (bf16 native or emulated, AVX512/AMX): paste the output
    into a bug report."""
    import json

    from harness.env import describe, environment

    info = environment()
    click.echo(json.dumps(info, indent=1) if as_json else describe(info))


if __name__ == "__main__":
    main()
