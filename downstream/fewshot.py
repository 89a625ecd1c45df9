"""``harness fewshot``: few-shot linear evaluation of a frozen model on downstream tasks, written to
``fewshot.json`` and ``fewshot.md`` and logged to trackers.

The probe itself (the tasks read, the shots drawn, the features and the ridge solver) is the library's:
:mod:`harness.tasks.probe` and :mod:`harness.tasks.fewshot`; the upstream few-shot monitor uses the same code.
Bad input (an unknown task, shots < 1, more shots than a class of the pool has examples, missing data, the output
folder) is refused before any feature is extracted. :func:`fewshot` writes its files atomically.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from harness.downstream.config import MAX_RESOLUTION, SweepSettings
from harness.downstream.sweep import upstream_record
from harness.downstream.table import _data_text, _model_text
from harness.folder_paths import check_outside_outputs
from harness.importing import trained_read_folders
from harness.io import RunLock, atomic_write_text, check_output_folder, check_writable, json_dumps, read_json
from harness.provenance import changed_since
from harness.rules import SEED, Rule
from harness.tasks.fewshot import HELDOUT_PER_CLASS, L2_GRID, check_shots
from harness.tasks.probe import POOL_SPLIT, TEST_SPLIT, evaluate_tasks, prepare_tasks
from harness.tasks.taskset import changed_task_data, expand_tasks, task_data, task_read_folders, task_record
from harness.tasks.trained_images import FEWSHOT_SCORED, check_scored_not_trained
from harness.training.precision import check_device
from harness.training.trackers import available

#: big_vision's shot counts (``configs/common_fewshot.py``)
DEFAULT_SHOTS = (1, 5, 10, 25)
SCHEMA = "harness.fewshot/1"
#: what a fewshot refused for another one writing its --out is told (:class:`harness.io.RunLock`)
BUSY = "another harness fewshot writes its results there; wait for it to finish, or give another --out"


def _resolution(resolution: "Optional[int | Sequence[int]]") -> Optional[int]:
    """The evaluation side from ``SIZE`` or ``(RESIZE, CROP)`` (the view resizes to the crop)."""
    if resolution is None:
        return None
    values = [resolution] if isinstance(resolution, (int, np.integer)) else list(resolution)
    if not (
        1 <= len(values) <= 2
        and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) and 1 <= v <= MAX_RESOLUTION for v in values
        )
        and values[-1] <= values[0]
    ):
        raise ValueError(
            f"resolution (--resolution) must be SIZE or RESIZE,CROP: whole numbers in [1, {MAX_RESOLUTION}] (pixels) "
            f"with CROP <= RESIZE, e.g. 32 or 160,128; got {resolution!r}"
        )
    return int(values[-1])


#: the study's keys an earlier fewshot.json may not hold (written before they were recorded): compared when it does
_RECORDED_SINCE = ("upstream_weights", "task_list", "resolution", "task_data", "task_lists")


def _check_same_study(earlier: dict, now: dict, out: Path) -> None:
    """The results in ``out`` (``earlier``, its ``fewshot.json``) are of the same model, seed and shots as ``now``, so a
    rerun replaces them with the same study. The model is its record (:func:`harness.downstream.sweep.upstream_record`)
    and, for a harness ``model.pt``, the digest of its weights (``upstream_weights``,
    :func:`harness.model_identity.weights_digest`, as a sweep's ``sweep.json`` records it): a file replaced or trained
    again under the same path is another study (audit23 A23-21: its results replaced the earlier model's without
    ``--overwrite``); so are other tasks (custom task folders resolved), another resolution or task data (audit24
    A24-06); results that recorded none of those (an earlier version) are compared by the rest.

    Raises:
        ValueError: naming what differs, both values (both digests) and the fixes (another ``--out``, or
            ``--overwrite``).
    """
    lists = changed_task_data(
        earlier.get("task_lists"), now.get("task_lists") or {}, "its fewshot.json", "the study ran"
    )
    if lists:  # a task's folder or list files changed: other data under the same names (audit25 A25-08)
        raise ValueError(
            f"{out} holds the few-shot results of other task data ({lists}): this study would replace them; give "
            "it another --out, or --overwrite to replace them"
        )
    now = {k: v for k, v in now.items() if k != "task_lists"}  # compared above, by task and file
    differ = changed_since(earlier, now, always=[k for k in now if k not in _RECORDED_SINCE])
    if not differ:
        return
    other = any(k == "source" for k, _, _ in differ)  # another model: its weights are not this file's (A26-02)
    digest = {"there": earlier.get("upstream_weights"), "now": now.get("upstream_weights")}
    said = "; ".join(
        f"the model: {was!r} there"
        + (f" (weights digest {str(digest['there'])[:12]}...)" if digest["there"] else "")
        + f", {value!r} now"
        + (f" ({str(digest['now'])[:12]}...)" if digest["now"] else "")
        if k == "source"
        else f"the weights of {now['source']}: digest {str(was)[:12]}... there, {str(value)[:12]}... now "
        "(the model.pt was replaced or trained again)"
        if k == "upstream_weights"
        else f"{k}: {was!r} there, {value!r} now"
        for k, was, value in differ
        if not (other and k == "upstream_weights")
    )
    raise ValueError(
        f"{out} holds the few-shot results of another {'model' if other else 'study'} ({said}): they would be "
        "replaced; give another --out, or --overwrite to replace them"
    )


def fewshot(
    source: str,
    tasks: Sequence[str],
    out: "str | Path",
    shots: Sequence[int] = DEFAULT_SHOTS,
    settings: Optional[SweepSettings] = None,
    seed: int = 0,
    resolution: "Optional[int | Sequence[int]]" = None,
    weights: "Optional[str | Path]" = None,
    random_init: bool = False,
    heldout: int = HELDOUT_PER_CLASS,
    progress: Callable[[str], None] = print,
    overwrite: bool = False,
    log_with: Sequence[str] = (),
) -> dict:
    """Few-shot linear evaluation of a model on ``tasks``; writes ``<out>/fewshot.json`` and ``<out>/fewshot.md``.

    Everything is checked before any feature is extracted: the shots, the resolution, the device
    (``settings.device``), the output folder, the model (loaded once, by :func:`harness.models.load_source`), the
    tasks and all four splits of each, and that every class of each task's ``train800val200`` has more examples
    than the largest shot count.

    Args:
        source: a harness ``model.pt``, ``timm:NAME`` or ``torchvision:NAME`` (:func:`harness.models.load_source`).
        tasks: task names, groups, ``demo``, custom lines (:func:`harness.tasks.probe.prepare_tasks`).
        out: the output folder.
        shots: shot counts (default 1, 5, 10, 25, big_vision's).
        settings: the data settings and the device (:class:`harness.downstream.config.SweepSettings`).
        seed: the draw of the shots.
        resolution: ``SIZE`` or ``(RESIZE, CROP)``: the images are resized to the crop (default: the BiT rule's).
        weights, random_init: see :func:`harness.models.load_source`.
        heldout: held-out examples per class, to choose λ on.
        progress: called with a line per step from the model's load on (the tasks read, each task's features and
            accuracies).
        log_with: trackers (:mod:`harness.training.trackers`; the CLI's default is TensorBoard, in ``<out>/tb``),
            given the settings as parameters, each task's accuracy per shot count, the means and the files.
        overwrite: write into an ``out`` that holds other files, beside them (never replacing a file this command
            did not write), and replace its own earlier results of another model, seed or shots (a rerun of the same
            study replaces them without it).

    Returns:
        The ``fewshot.json`` content: ``{"schema", "source", "upstream_weights" (a harness model.pt's weights
        digest, else None), "preprocessing", "method", "seed", "shots", "tasks",
        "mean"}`` (``mean``: per shot count, the mean test accuracy over tasks).

    Raises:
        ValueError: bad shots, seed, resolution, device, task or data; weights that do not fit; an unwritable ``out``,
            or one holding files of others (without ``overwrite``; with it, others' fewshot.json or fewshot.md), or the
            results of another model (another source, or a harness model.pt whose weights changed: audit23 A23-21),
            seed or shots (without ``overwrite``); an ``out`` inside a run, an export or
            another harness output folder (:func:`harness.folder_paths.check_outside_outputs`); another harness
            fewshot writing ``out`` (its lock, :class:`harness.io.RunLock`, is held from the first feature to the
            last file; the message names the holder and :data:`BUSY`); a task's test list naming an image the
            harness model.pt was trained on (:func:`harness.tasks.trained_images.check_scored_not_trained`).
        FileNotFoundError: no such model, weights file or data.
    """
    from harness.sources import load_source

    shots = check_shots(shots, "--shots")
    if not Rule(**SEED).holds(seed):
        raise ValueError(f"--seed must be {Rule(**SEED).describe()}, got {seed!r}")
    size = _resolution(resolution)
    settings = settings or SweepSettings()
    check_device(settings.device)
    chosen = expand_tasks(tasks)  # task names before the model: a typo costs no load
    # not inside a run, an export or another output folder, nor inside a task's folder or the model's data (A25-01)
    read = {**trained_read_folders(source, "--model"), **task_read_folders(chosen, settings)}
    check_outside_outputs(out, "--out", "harness fewshot", read)
    out = check_writable(out, f"--out {out}", "--out DIR")
    _check_out(out, overwrite, None)
    log_with = available(list(log_with), "--log-with", progress)
    study = {"source": upstream_record(source, weights, random_init), "seed": seed, "shots": shots}
    data_dir = str(Path(settings.data_dir).expanduser().resolve()) if settings.data_dir else None
    # the tasks, resolution and task data are the study's too (audit24 A24-06: others replaced results unasked)
    study.update(task_list=task_record(chosen), resolution=size, task_data=[settings.data_format, data_dir])
    study["task_lists"] = task_data(chosen, settings)  # each task's folder and list digests, as a sweep's (A25-08)
    if isinstance(study["source"], str):  # a harness model.pt: its weights, so a changed file is another study
        from harness.model_identity import weights_digest

        study["upstream_weights"] = weights_digest(study["source"])  # as a sweep records it (audit23 A23-21)
    check_scored_not_trained(source, chosen, settings, FEWSHOT_SCORED, "--model")  # audit22 A22-07
    _check_out(out, overwrite, study)
    progress(f"[fewshot] loading the model {source}")
    model = load_source(source, weights, random_init).to(settings.device)
    prepared = prepare_tasks(tasks, shots, settings, seed, heldout, progress=progress)
    with RunLock(out, what=BUSY):  # one writer of --out at a time, from the first feature to the last file
        _check_out(out, overwrite, study)  # again: a fewshot that finished meanwhile is seen
        return _evaluate(model, prepared, size, settings, study, heldout, tasks, out, log_with, progress)


def _check_out(out: Path, overwrite: bool, study: Optional[dict]) -> None:
    """``out`` may take the results: it holds no files of others (without ``overwrite``; never others' fewshot.json or
    fewshot.md), and results there of another ``study`` (source and weights, seed, shots; None: not compared) only with
    ``overwrite``.

    Raises:
        ValueError: :func:`harness.io.check_output_folder`'s and :func:`_check_same_study`'s.
    """
    earlier = read_json(Path(out) / "fewshot.json") or {}
    ours = earlier.get("schema") == SCHEMA
    check_output_folder(out, ours, ("fewshot.json", "fewshot.md"), overwrite, "harness fewshot", "--out")
    if ours and not overwrite and study is not None:
        _check_same_study(earlier, study, Path(out))


def _evaluate(model, prepared, size, settings, study, heldout, tasks, out, log_with, progress) -> dict:
    """The body of :func:`fewshot` under ``out``'s lock: the features and probes, the files and the trackers."""
    results = evaluate_tasks(model, prepared, size, settings.device, progress=progress)
    mean = {str(s): float(np.mean([r["shots"][str(s)]["prec@1"] for r in results.values()])) for s in study["shots"]}
    result = {
        "schema": SCHEMA,
        "source": study["source"],
        "upstream_weights": study.get("upstream_weights"),
        "preprocessing": dict(model.config.preprocessing),
        "method": {
            "probe": "closed-form ridge regression to 2*onehot-1 on the standardised features with a "
            "constant bias feature of 100 (big_vision few-shot)",
            "lam_grid": list(L2_GRID),
            "lam_chosen_on": f"held-out examples of {POOL_SPLIT}, disjoint from the shots",
            "heldout_per_class": heldout,
            "pool": POOL_SPLIT,
            "test": TEST_SPLIT,
        },
        "seed": study["seed"],
        "shots": study["shots"],
        **{k: study[k] for k in ("task_list", "resolution", "task_data", "task_lists")},
        "tasks": results,
        "mean": mean,
    }
    write_result(result, Path(out))
    if log_with:
        _track(log_with, result, Path(out), {"tasks": list(tasks), "resolution": size, "settings": asdict(settings)})
    return result


def _track(names: Sequence[str], result: dict, out: Path, extra: dict) -> None:
    """The few-shot result to the trackers ``names``: the settings as parameters, each task's accuracy and λ per
    shot count (one step per task), the means, ``fewshot.md`` / ``fewshot.json`` and the table."""
    from harness.training.trackers import Tracking

    config = {
        "source": result["source"],
        "seed": result["seed"],
        "shots": result["shots"],
        **extra,
        "method": result["method"],
    }
    with Tracking(names, "harness-fewshot", out.name, out, config) as tracking:
        for step, (task, r) in enumerate(result["tasks"].items(), 1):
            tracking.log(
                {f"{task}/{s}shot/{k}": v[k] for s, v in r["shots"].items() for k in ("prec@1", "lam")}, step=step
            )
        tracking.log({f"mean/{s}shot/prec@1": v for s, v in result["mean"].items()}, step=len(result["tasks"]) + 1)
        columns = ["task", "classes", "px", *(f"{s}-shot" for s in result["shots"])]
        rows = [
            [task, r["num_classes"], r["resolution"], *(r["shots"][str(s)]["prec@1"] for s in result["shots"])]
            for task, r in result["tasks"].items()
        ]
        tracking.report([out / "fewshot.md", out / "fewshot.json"], {"fewshot": (columns, rows)})


def write_result(result: dict, out: Path) -> None:
    """``fewshot.json`` and ``fewshot.md`` (the command, machine and versions, the model, the method and one row per
    task: test accuracy and the λ chosen at each shot count), each written atomically."""
    from harness.provenance import markdown_header, provenance

    prov = provenance()
    shots = result["shots"]
    m = result["method"]
    lines = [
        markdown_header("Few-shot linear evaluation", prov),
        _model_text(result["source"], result.get("preprocessing") or {}),
        "",
        f"Probe: frozen pre-logit features; {m['probe']}. The shots are drawn from {m['pool']} (seed "
        f"{result['seed']}); λ is chosen from 2^-10 .. 2^19 on up to {m['heldout_per_class']} more examples per "
        f"class of {m['pool']}, disjoint from the shots; the accuracy (prec@1) is on {m['test']}. Each cell: "
        "test prec@1 in % (λ chosen).",
        "",
        "| task | classes | px | " + " | ".join(f"{s}-shot" for s in shots) + " | data read |",
        "|---|---|---|" + "---|" * len(shots) + "---|",
    ]
    for name, r in result["tasks"].items():
        cells = [f"{100 * r['shots'][str(s)]['prec@1']:.2f} ({r['shots'][str(s)]['lam']:g})" for s in shots]
        lines.append(
            f"| {name} | {r['num_classes']} | {r['resolution']} | "
            + " | ".join(cells)
            + f" | {_data_text(r['data'])} |"
        )
    lines.append(
        f"| mean over {len(result['tasks'])} tasks | | | "
        + " | ".join(f"{100 * result['mean'][str(s)]:.2f}" for s in shots)
        + " | |"
    )
    atomic_write_text(out / "fewshot.json", json_dumps({"provenance": prov, **result}, indent=1))
    atomic_write_text(out / "fewshot.md", "\n".join(lines) + "\n")
