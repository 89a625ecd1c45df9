"""Commands on run folders: ``harness ensemble``, ``import``, ``report`` and ``shift``."""

from __future__ import annotations

from pathlib import Path

import click

from harness.cli.options import LocalPath, _model_source, overwrite_option, seed_option
from harness.path_options import RunFolder

#: the folders harness ensemble takes: run folders (upstream runs, imports), or the folders of downstream sweeps
_MEMBER_KINDS = ("run", "import", "downstream sweep")


@click.command()
@click.option(
    "--members",
    "-m",
    "members",
    multiple=True,
    required=True,
    type=RunFolder(_MEMBER_KINDS, "run or sweep"),
    help="A member run folder; repeat, or give several after one --members.",
)
@click.argument("more", nargs=-1, type=RunFolder(_MEMBER_KINDS, "run or sweep"))
@click.option(
    "--out",
    type=LocalPath(file_okay=False, path_type=Path),
    default=None,
    help="Ensemble folder (default runs/ensembles/<name>).",
)
@click.option(
    "--name",
    default=None,
    help="Ensemble name: the folder runs/ensembles/<name> (default: first member's name + _ens).",
)
@click.option(
    "--from-checkpoints", is_flag=True, help="Re-predict with each member's model.pt, one model in memory at a time."
)
@click.option(
    "--eval-data",
    type=LocalPath(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="With --from-checkpoints: a config whose data section replaces the members' own.",
)
@click.option("--device", default="cpu", show_default=True, help="With --from-checkpoints: cpu, cuda or cuda:N.")
@click.option(
    "--overwrite",
    is_flag=True,
    help="Write into an existing --out that holds other files (an ensemble never replaces files it did not write).",
)
def ensemble(members, more, out, name, from_checkpoints, eval_data, device, overwrite) -> None:
    """Deep ensemble of run folders: averaged probabilities, member and ensemble metrics, Gibbs CE,
    ensemble gain, disagreement and KL to the ensemble. Given the folders of downstream sweeps (harness downstream
    --out, one per upstream model), the ensemble across those upstream models on every transfer task."""
    from harness.downstream.ensembles import is_sweep
    from harness.ensemble_folder import build_ensemble, check_ensemble_out
    from harness.io import check_writable, path_under
    from harness.shift.predict import ensemble_sets

    members = list(members) + list(more)
    if name is not None and out is not None:
        raise click.UsageError(
            f"--name {name} names the default folder runs/ensembles/{name} and is kept nowhere else, and --out {out} "
            "gives the folder: drop --name, or drop --out"
        )
    name = name or f"{members[0].resolve().name}_ens"
    try:
        out = out or path_under("runs/ensembles", name)
    except ValueError as e:
        raise click.ClickException(f"--name: {e}") from e
    try:
        _check_out_outside_members(out, members, name, eval_data)
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    sweeps = [is_sweep(m) for m in members]
    if any(sweeps):
        if not all(sweeps) or from_checkpoints or eval_data or device != "cpu":
            raise click.ClickException(
                "downstream sweep folders ensemble only with other sweep folders, without "
                "--from-checkpoints, --eval-data or --device: give only sweeps, or only run folders"
            )
        return _ensemble_sweeps(members, out, overwrite)
    if eval_data and not from_checkpoints:
        raise click.UsageError(
            f"--eval-data {eval_data} goes with --from-checkpoints: without it the members' saved predictions, on "
            "their own data, are averaged and no other data is read; add --from-checkpoints, or leave out --eval-data"
        )
    if device != "cpu" and not from_checkpoints:
        raise click.UsageError(
            f"--device {device} goes with --from-checkpoints: without it the members' saved predictions are averaged "
            "and no model runs on any device; add --from-checkpoints, or leave out --device"
        )
    try:
        check_ensemble_out(out, overwrite)  # before --eval-data is read
        check_writable(out, f"--out {out}", "--out ...")
        repredict, data = _repredictor(eval_data, device) if from_checkpoints else (None, None)
        spec = build_ensemble(members, out, from_checkpoints, repredict, overwrite, eval_data=data, device=device)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e
    for what, why in (spec.get("left_out") or {}).items():  # --eval-data: the members' own data's parts (A18-08)
        click.echo(f"left out ({what}): {why}")
    shifted = None
    try:
        if "shift" not in (spec.get("left_out") or {}):
            shifted = ensemble_sets(out)  # the members' shift predictions, averaged like the rest
    except (ValueError, OSError) as e:  # the ensemble itself is built; only its shift sets are missing
        click.echo(f"warning: the ensemble is built, but its shift sets are not: {e}", err=True)
    s = spec["summary"]
    for key, vals in (("member mean", s["member_mean"]), ("ensemble", s["ensemble"])):
        click.echo(f"{key:12s} " + ", ".join(f"{k} {v:.4f}" for k, v in vals.items()))
    click.echo(
        f"Gibbs CE {s['gibbs_ce']:.4f}, ensemble NLL {s['ensemble_nll']:.4f}, gain {s['ensemble_gain']:.4f}, "
        f"disagreement {s['disagreement']:.4f}, mean KL {s['mean_kl_to_ensemble']:.4f}"
    )
    if shifted:
        click.echo(f"shift sets averaged: {len(shifted['sets'])} (harness report shows them)")
    click.echo(f"ensemble folder: {out}")


def _check_out_outside_members(out: Path, members: "list[Path]", name: str, eval_data: "Path | None" = None) -> None:
    """``harness ensemble --out`` is not inside a member, nor inside any run, sweep, export or other harness output
    folder (the one rule of every writer: :func:`harness.folder_paths.check_outside_outputs`), nor a member itself,
    nor inside (or) a split folder of the members' data or of ``eval_data``'s (the ``--eval-data`` file:
    :func:`harness.ensemble_folder.data_folders`, audit23 A23-07), or of the data an imported member's model was
    trained with (:func:`harness.importing.models_data`, audit25 A25-01); ``--out`` another run folder itself is refused by
    :func:`harness.ensemble_folder.check_ensemble_out`. An ``eval_data`` file that cannot be read adds no folder here
    (its reading, later, names the problem).

    Raises:
        ValueError: naming ``--out``, the member or folder it lies in, and the fix.
    """
    from harness.data.eval_keys import data_from_file
    from harness.ensemble_folder import data_folders
    from harness.folder_paths import check_outside_outputs
    from harness.importing import models_data

    try:
        data = data_from_file(eval_data, flag="--eval-data") if eval_data else None
    except (ValueError, OSError):
        data = None

    if any(out.resolve() == m.resolve() for m in members):  # build_ensemble's rule, before the lock is taken there
        raise ValueError(
            f"the ensemble folder {str(out)!r} is one of the members: writing there would replace the "
            "member's predictions; choose another --out"
        )
    check_outside_outputs(
        out,
        "--out",
        "harness ensemble",
        inputs={**models_data(members), **data_folders(members, data), **{m.resolve(): "the member" for m in members}},
        fix=f"give --out a folder outside every member and run folder (and their data), e.g. runs/ensembles/{name}",
    )


def _repredictor(eval_data: "Path | None", device: str):
    """``(repredict(run_dir) -> Predictions, None)`` for ``harness ensemble --from-checkpoints`` on the members' own
    data, or ``(None, DataConfig)``: ``--eval-data``'s data section, which :func:`harness.ensemble_folder.build_ensemble`
    re-predicts on (its evaluation and held-out splits: :func:`harness.ensemble_folder.eval_predictors`). The device is
    checked first.

    Raises:
        ValueError: a device this machine cannot run on; an --eval-data file without a data section, or bad data.
    """
    from harness.data.eval_keys import data_from_file
    from harness.runs import predict_checkpoint
    from harness.training.precision import check_device

    check_device(device)
    if eval_data:
        return None, data_from_file(eval_data, flag="--eval-data")

    def repredict(run_dir):
        return predict_checkpoint(run_dir, device=device)

    return repredict, None


def _ensemble_sweeps(members: "list[Path]", out: Path, overwrite: bool) -> None:
    """``harness ensemble`` of downstream sweep folders: the ensemble across upstream models on every task."""
    from harness.downstream.ensembles import ENSEMBLE_FILES, write_upstream_ensemble

    mine = [out / f for f in ENSEMBLE_FILES]
    if out.is_dir() and not overwrite and any(p.name not in ENSEMBLE_FILES for p in out.iterdir()):
        raise click.ClickException(
            f"{out} holds other files: choose another --out, or --overwrite (only "
            f"{', '.join(ENSEMBLE_FILES)} are written)"
        )
    try:
        result = write_upstream_ensemble(members, out)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e
    for g, v in result["groups"].items():
        click.echo(
            f"{g:12s} ensemble "
            + ", ".join(f"{k} {x:.4f}" for k, x in v["ensemble"].items())
            + "; members "
            + ", ".join(f"{k} {x:.4f}" for k, x in v["members"].items())
        )
    click.echo(f"wrote {mine[1]} and {mine[0]}")


@click.command(name="import", context_settings={"ignore_unknown_options": True})
@_model_source(
    "--model",
    "source",
    "The model, trained on the data's classes (its own output layer is kept)",
    "run.json",
    random_init=False,  # an imported model is a trained one: --random-init is refused, and not offered in --help
)
@click.option(
    "--data",
    "data_file",
    required=True,
    type=LocalPath(dir_okay=False, exists=True, path_type=Path),
    help="A config whose data section names the evaluation data (e.g. upstream/configs/cifar10n_base.yaml).",
)
@click.option("--out", type=LocalPath(file_okay=False, path_type=Path), required=True, help="The new run folder.")
@click.option("--device", default="cpu", show_default=True)
@overwrite_option
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def import_cmd(source, weights, random_init, data_file, out, device, overwrite, overrides) -> None:
    """A run folder for a model trained elsewhere (a timm or torchvision state dict with its classifier, or a
    harness model.pt): its predictions on the data's evaluation (and held-out) split, so that harness ensemble,
    harness shift and harness report take it like any upstream run. OVERRIDES are data keys, e.g. path=/data/x."""
    from harness.data.eval_keys import data_from_file
    from harness.importing import import_run
    from harness.training.precision import check_device

    if random_init:
        raise click.ClickException(
            "--random-init has no place here: an imported model is a trained one; give --weights"
        )
    try:
        check_device(device)  # before the data is read
        run_dir = import_run(
            source, data_from_file(data_file, overrides), out, weights, device, progress=click.echo, overwrite=overwrite
        )
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e
    import json

    metrics = json.loads((run_dir / "metrics.json").read_text())["metrics"]
    click.echo(", ".join(f"{k} {v:.4f}" for k, v in metrics.items()) + f"; run folder: {run_dir}")


@click.command()
@click.argument("paths", nargs=-1, required=True, type=RunFolder())
@click.option("--name", default=None, help="Report name: results/<name>/ (default: first folder's name).")
@click.option("--out-root", type=LocalPath(file_okay=False, path_type=Path), default=Path("results"), show_default=True)
@click.option("--no-covariance", is_flag=True, help="Skip the covariance analysis of het models.")
@click.option("--no-shift", is_flag=True, help="Leave out the distribution-shift section (harness shift predictions).")
@click.option(
    "--top-pairs",
    type=click.IntRange(1),
    help="Class pairs the covariance analysis of a het model lists [default: 10].",
)
@click.option(
    "--screenshot",
    is_flag=True,
    help="Also render report.html in headless Chromium to report.png: the whole page, 1200 px wide.",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Write into an existing folder that holds other files (a report replaces only its own files).",
)
@click.option(
    "--calibrators",
    default="",
    help="Post-hoc calibrators fitted on each entry's held-out split, comma-separated: temperature, vector, "
    "dirichlet, histogram, isotonic, bbq, beta (netcal: the calibrate extra); their NLL/ECE rows with intervals.",
)
def report(paths, name, out_root, no_covariance, no_shift, top_pairs, screenshot, overwrite, calibrators) -> None:
    """Markdown, HTML and JSON report of run and ensemble folders (Table 7 layout, calibration,
    reliability diagrams, covariance analysis; distribution shift where harness shift has run)."""
    from harness.ensemble_folder import data_folders
    from harness.folder_paths import check_outside_outputs
    from harness.importing import models_data
    from harness.io import check_name
    from harness.report.browser import check_browser, png_size
    from harness.report.browser import screenshot as take_screenshot
    from harness.report.build import build

    name = paths[0].resolve().name if name is None else name
    try:
        check_name(name, "report name")  # --name "" or ../x: refused before its folder is looked at
        check_outside_outputs(
            out_root / name,
            "--out-root",
            "harness report",
            inputs={**models_data(paths), **data_folders(paths), **{p.resolve(): "the input folder" for p in paths}},
            shown=f"--out-root {out_root} (with --name {name}: the report folder {out_root / name})",
            fix="give --out-root a folder outside {folder}, e.g. results (the default)",
        )
        if screenshot:  # a browser that cannot render is found before the report is built, not after
            check_browser()
        out = build(
            paths,
            name,
            out_root,
            covariance=not no_covariance,
            top_pairs=top_pairs if _given("top_pairs") else None,  # given: refused where nothing reads it
            shift=not no_shift,
            overwrite=overwrite,
            progress=click.echo,
            calibrators=[c for c in calibrators.split(",") if c.strip()],
        )
        click.echo(f"wrote {out / 'report.md'}, {out / 'report.html'}, {out / 'report.json'}")
        if screenshot:
            click.echo("[report] screenshot: the page measured, then captured whole in headless Chromium")
            png = take_screenshot(out / "report.html", out / "report.png")
            click.echo(f"wrote {png} ({'x'.join(map(str, png_size(png)))} px)")
    except (ValueError, OSError, RuntimeError) as e:
        raise click.ClickException(str(e)) from e


def _given(name: str) -> bool:
    """Whether the option ``name`` (its parameter name) of the running command was given on the command line (or by
    an environment variable), not left at its default."""
    source = click.get_current_context().get_parameter_source(name)
    return source not in (None, click.core.ParameterSource.DEFAULT, click.core.ParameterSource.DEFAULT_MAP)


def _severities(text: str) -> "list[int]":
    """``1-5`` or ``1,3,5`` -> integers (their range is checked by harness.shift.corruptions.resolve)."""
    try:
        if "-" in text.strip("-"):
            lo, hi = (int(v) for v in text.split("-"))
            if lo > hi:
                raise click.BadParameter(
                    f"{text!r} runs from high to low, so it holds no severity: write {hi}-{lo}",
                    param_hint="--severities",
                )
            return list(range(lo, hi + 1))
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: give severities as 1-5 or 1,3,5", param_hint="--severities") from None


@click.command()
@click.option(
    "--members",
    "-m",
    "members",
    multiple=True,
    required=True,
    type=RunFolder(),
    help="A run or ensemble folder; repeat, or give several after one --members.",
)
@click.argument("more", nargs=-1, type=RunFolder())
@click.option(
    "--corruptions",
    default="all",
    show_default=True,
    help="Comma-separated: all, families (noise, blur, weather, digital), corruption names (gaussian_noise, "
    "frost, ...), or none.",
)
@click.option(
    "--severities", default="1-5", show_default=True, help="Severities in 1-5: a range (1-5) or a list (1,3,5)."
)
@click.option(
    "--examples",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="A fixed random subset of the evaluation split, the same images in every set (0: all of it).",
)
@click.option(
    "--ood",
    multiple=True,
    default=("gaussian", "blobs"),
    show_default=True,
    help="OOD set: gaussian or blobs (built in), or NAME:source=...,path=...,split=... with data keys "
    "(image_folder, tfds, manifest, ...); repeat for several; --ood none for no OOD set.",
)
@seed_option("Draws the subset; seeds the corruptions and the OOD sets.")
@click.option("--device", default="cpu", show_default=True)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Write into a folder's existing shift/ that holds other files (only the sets' own files are written).",
)
def shift(members, more, corruptions, severities, examples, ood, seed, device, overwrite) -> None:
    """Predictions under distribution shift: corrupted copies of the evaluation split (CIFAR-10-C-style, 15
    corruptions x 5 severities by default) and OOD sets, saved in each folder's shift/ as predictions.npz files;
    one model in memory at a time. Ensemble folders average their members' sets. harness report then adds the
    shift section (accuracy/NLL/ECE against severity, OOD detection, risk-coverage)."""
    from harness.shift.predict import predict_folders
    from harness.shift.results import entry_results
    from harness.shift.settings import ShiftSettings
    from harness.training.precision import check_device

    named = [c.strip() for c in corruptions.split(",") if c.strip()]
    if _given("severities") and all(c == "none" for c in named):
        raise click.UsageError(
            f"--severities {severities} sets the corrupted sets' severities, and --corruptions {corruptions!r} runs "
            "no corruption: drop --severities, or name corruptions (e.g. --corruptions gaussian_noise)"
        )
    settings = ShiftSettings(
        corruptions=[c for c in corruptions.split(",") if c.strip()],
        severities=_severities(severities),
        examples=examples,
        seed=seed,
        ood=[] if [o.strip() for o in ood] == ["none"] else [o for o in ood if o.strip()],  # none + others: refused
    )
    folders = list(members) + list(more)
    try:
        check_device(device)
        predict_folders(folders, settings, progress=click.echo, device=device, overwrite=overwrite)
        for f in folders:
            r = entry_results(f)
            mean = r["mean_corrupted"]
            line = f"{f}: clean top1 {r['sets']['clean']['top1']:.4f}"
            if mean:
                line += f"; corrupted mean top1 {mean['top1']:.4f}, NLL {mean['nll']:.4f}, ECE {mean['ece']:.4f}"
            line += "".join(
                f"; {n} AUROC (1 − max prob) {v['one_minus_max_prob']['auroc']:.4f}" for n, v in r["ood"].items()
            )
            click.echo(line)
    except (ValueError, OSError) as e:
        raise click.ClickException(str(e)) from e
