"""Checking a whole experiment before any work: its settings (methods, seeds, workers, grids, the budget,
frontier and condition sections), every upstream config of every study (each method, seed and τ, as
:func:`harness.experiment.plan._plan` builds them), the shift and multi-label studies, the settings that need the
data's number of classes, the downstream settings and the output folders (the report's apart from the runs')."""

from __future__ import annotations

from pathlib import Path

from harness.experiment.config import ROOTS, RUN_KEYS, RUN_TREE, Experiment, check_root
from harness.experiment.plan import _Plan, _plan, untrained_settings
from harness.experiment.run_inputs import check_prospective, check_run_inputs, planned_configs
from harness.experiment.run_names import check_run_folders
from harness.experiment.section_rules import check_grids_and_sections
from harness.experiment.transfer_checks import check_downstream
from harness.experiment.upstream_ref import upstream_config_path
from harness.experiment.variants import check_variant_configs, split_untrained
from harness.rules import check_rules


def validate_experiment(exp: Experiment) -> "dict[str, _Plan]":
    """Check the whole experiment before any work: the rules declared on its fields
    (:mod:`harness.experiment.config`), then what relates them: methods, seeds, ensembles, the report's folder apart
    from the runs', no override of a setting the experiment sets per run (:data:`RUN_KEYS`), every upstream config
    (each method, seed and τ), no two methods with the same runs, no two planned runs with one run folder
    (:func:`~harness.experiment.run_names.check_run_folders`), the multi-label study and the downstream settings
    (checked whether or not the stage has tasks; with tasks, no fine-tuning pass of one image for a BatchNorm
    backbone: :func:`~harness.experiment.transfer_checks.check_downstream`), a condition that changes nothing
    (:func:`~harness.experiment.variants.check_variant_configs`), what every planned run reads, alike for the main
    study's and a condition's, frontier schedule's or budget curve's (its backbone, weights file, data and number of
    classes: :func:`~harness.experiment.run_inputs.check_run_inputs`), the runs of the studies the primary endpoint is
    prospective for started after its declaration (:func:`~harness.experiment.run_inputs.check_prospective`), and
    ``runs_root`` and ``results_root`` outside any other command's output folder
    (:func:`harness.folder_paths.check_outside_outputs`) and any other experiment's folder
    (:func:`~harness.experiment.roots.check_outside_experiments`).

    Returns:
        The plans of the studies (``main``, and ``multilabel`` when it has methods).

    Raises:
        ValueError: the first problem found; the message names the setting and the fix.
    """
    from harness.downstream.config import PRESETS
    from harness.experiment.roots import check_outside_experiments
    from harness.folder_paths import check_outside_outputs
    from harness.io import check_location, check_writable, path_under

    if exp.transfer is not None:
        raise ValueError(
            f"experiment {exp.name!r} is a transfer study of committed models (its `transfer:` section): "
            "run it with `harness run` or harness.experiment.transfer.run_transfer"
        )

    check_rules(exp)
    for key in ROOTS:  # set after loading (harness run sets results_root): ~ expanded, $ refused, naming the key
        setattr(exp, key, check_root(key, getattr(exp, key)))
    for key in ("runs_root", "results_root"):
        check_location(getattr(exp, key), key)
    exp.upstream_config = str(upstream_config_path(exp.upstream_config))  # absolute from here on

    _check_methods_and_seeds(exp)
    _check_roots(exp)
    check_outside_experiments(exp)  # not inside another experiment's folder (audit19 A19-17)
    for key in ("runs_root", "results_root"):  # not inside another command's output folder (a run, a sweep...)
        value = getattr(exp, key)
        shown = f"{key}={value} (this experiment's folder {path_under(value, exp.name)})"
        check_outside_outputs(
            path_under(value, exp.name), key, "harness run", shown=shown, fix=f"give {key} a folder outside {{folder}}"
        )
    _check_run_keys(exp)
    _check_method_keys(exp)
    check_grids_and_sections(exp)
    root = path_under(exp.runs_root, exp.name)
    plans = {"main": _plan(exp, root, "", exp.methods, exp.seeds, exp.temperature_grid, [], exp.grid_overrides)}
    if exp.shift is not None:
        _check_shift(exp, plans["main"])
    ml = exp.multilabel
    if ml.methods:
        if not ml.seeds:
            raise ValueError("multilabel.seeds is empty: give at least one seed")
        plans["multilabel"] = _plan(
            exp, root, "multilabel_", ml.methods, ml.seeds, ml.temperature_grid, ml.upstream_overrides
        )
        for folder, cfg in plans["multilabel"].configs.items():
            if cfg.model.head.get("link") != "sigmoid":
                raise ValueError(
                    f"multilabel study run {folder}: set link: sigmoid in its head (label sets need the sigmoid link)"
                )
    for study, plan in plans.items():
        _check_distinct_methods(plan, "multilabel.methods" if study == "multilabel" else "methods")
    variants = check_variant_configs(exp, plans["main"])  # and a condition that changes nothing
    check_run_folders(exp, plans)
    _check_report_names(plans["main"])
    configs = planned_configs(plans, variants)
    _check_finished_runs(configs)
    pairs = {
        "confusable_pairs": exp.confusable_pairs,
        "single_pair.pairs": exp.single_pair.pairs if exp.single_pair else [],
    }
    check_run_inputs(configs, pairs)  # every run's data, backbone and K alike
    check_prospective(exp.primary, plans, variants)  # runs called prospective started after the declaration
    check_downstream(exp, PRESETS, plans["main"])
    for what, folder in (("runs_root", exp.runs_root), ("results_root", exp.results_root)):
        check_writable(folder, f"{what} {str(folder)!r}", f"{what}=...")
    from harness.report.build import report_folder

    # refuses a folder another writer owns, or the report of another experiment's runs, before any work
    report_folder(
        exp.results_root,
        exp.name,
        overwrite=None,
        elsewhere="give the experiment another results_root=PATH",
        inputs_under=path_under(exp.runs_root, exp.name),
    )
    return plans


def _check_methods_and_seeds(exp: Experiment) -> None:
    """The methods and their names, the seeds, ``evaluate_methods`` and the ensemble sizes (at most the seeds); a
    value repeated in a list is refused before, by the fields' own rule (``distinct``, :func:`harness.rules.check_rules`)."""
    if not exp.methods:
        raise ValueError("the experiment names no methods: add e.g. methods: {hom: {covariance: none}}")
    _check_names(exp)
    _check_references(exp)
    if not exp.seeds:
        raise ValueError("seeds is empty: give at least one seed, e.g. seeds: [0]")
    if exp.evaluate_methods == []:  # unset is every method; an empty list would silently read as all too
        raise ValueError(
            "evaluate_methods=[] names no method: for no shift predictions and transfers, leave out the shift section "
            "and give downstream.tasks=[]; for every method, leave evaluate_methods unset"
        )
    unknown = [m for m in exp.evaluate_methods or [] if m not in exp.methods]
    if unknown:
        raise ValueError(f"evaluate_methods {', '.join(unknown)} not among the methods {', '.join(exp.methods)}")
    if any(n > len(exp.seeds) for n in exp.ensemble_sizes):
        raise ValueError(
            f"ensemble_sizes {exp.ensemble_sizes} must be at most the number of seeds ({len(exp.seeds)}): "
            "add seeds or drop the larger ensembles"
        )


def _check_shift(exp: Experiment, main: _Plan) -> None:
    """The shift section against the main study's configs: softmax links only, its settings for their data (a
    ``shift.split`` not any run's training or held-out split: :func:`harness.shift.settings.check_split`), and
    ``shift.examples`` at most the images of the split the sets are drawn from (each run's data; read now, not
    after the training).

    Raises:
        ValueError: naming the key, the value and the fix.
    """
    from harness.data.sources import build_split
    from harness.shift.settings import check_settings, check_split

    cfgs = list(main.configs.values())
    if any(cfg.model.head.get("link", "softmax") != "softmax" for cfg in cfgs):
        raise ValueError(
            "shift: the main study's methods must use the softmax link (shift evaluation covers "
            "single-label models); drop the shift section or the sigmoid method"
        )
    sizes = {}  # each distinct data of the runs -> (the split, its size, a run of that data)
    try:
        check_settings(exp.shift, cfgs[0].data)
        for cfg in cfgs if exp.shift.examples or exp.shift.split is not None else []:
            if exp.shift.split is not None:  # every run's splits (audit19 A19-13), not only the first's
                check_split(exp.shift.split, cfg.data)
            split = exp.shift.split or cfg.data.eval_split
            if repr((cfg.data, split)) not in sizes:
                sizes[repr((cfg.data, split))] = split, len(build_split(cfg.data, split)), cfg.output_dir
    except ValueError as e:
        raise ValueError(f"shift: {e}") from e
    for split, size, run in sizes.values():
        if exp.shift.examples > size:
            raise ValueError(
                f"shift.examples={exp.shift.examples} is more than the {size} images of split {split!r} that the "
                f"shift sets are drawn from (run {run}'s data, its limits applied): give shift.examples={size} or "
                "fewer (0: the whole split)"
            )


def _check_names(exp: Experiment) -> None:
    """Every name that becomes a folder name (:func:`harness.io.check_name`)."""
    from harness.io import check_name

    check_name(exp.name, "experiment name")
    for section, names in (
        ("method", exp.methods),
        ("multilabel method", exp.multilabel.methods),
        ("condition", exp.conditions),
    ):
        for n in names:
            check_name(n, f"{section} name")
    for name, cond in exp.conditions.items():
        for m in cond.methods:
            check_name(f"{name}_{m}", f"condition {name!r} run name")
    if exp.replication:
        check_name(exp.replication, "replication (an experiment's name)")
        from harness.experiment.config import find_experiment

        try:  # the report reads its description (and the user runs it by that name)
            find_experiment(exp.replication)
        except FileNotFoundError as e:
            raise ValueError(
                f"replication {exp.replication!r} names no experiment ({e}); give the name of the experiment that "
                "reruns this one, or leave replication unset"
            ) from None


def _check_references(exp: Experiment) -> None:
    """What one section says of another: the studies ``primary``, ``sigma_readout`` and ``single_pair`` name exist;
    the read-out's keys; the single-pair spreads; ``confusable_pairs`` are pairs."""
    from harness.experiment.sigma import READOUTS

    studies = ["main", *exp.conditions]
    named = [
        ("primary.prospective_for", list(exp.primary.prospective_for), studies),
        ("sigma_readout", list(exp.sigma_readout.values()), list(exp.conditions)),
        ("single_pair.arms", list(exp.single_pair.arms) if exp.single_pair else [], list(exp.conditions)),
    ]
    for key, names, known in named:
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(
                f"{key} names {', '.join(map(repr, unknown))}, which is not "
                f"{'main or ' if 'main' in known else ''}a condition of this experiment "
                f"({', '.join(exp.conditions) or 'it has none'}): name one of them"
            )
    if set(exp.sigma_readout) - set(READOUTS):
        raise ValueError(f"sigma_readout takes the keys {', '.join(READOUTS)}, got {sorted(exp.sigma_readout)}")
    spread = {k: v for k, v in (exp.single_pair.spread if exp.single_pair else {}).items() if not 0 < v <= 1}
    if spread:
        raise ValueError(
            f"single_pair.spread {spread} must be in (0, 1] each (a seed standard deviation of a mean correlation): "
            "give the spreads measured when the design was registered"
        )
    bad_pairs = [p for p in exp.confusable_pairs if len(p) != 2]
    if bad_pairs:
        raise ValueError(f"confusable_pairs must be pairs of class names, e.g. [[cat, dog]], got {bad_pairs}")


def _override_lists(exp: Experiment) -> "list[tuple[str, list, str]]":
    """Every list of upstream ``key=value`` overrides in the experiment: (its key, the list, the seeds key of its
    section)."""
    ml = exp.multilabel
    return [
        ("upstream_overrides", exp.upstream_overrides, "seeds"),
        ("grid_overrides", exp.grid_overrides, "seeds"),
        *((f"methods.{m}.overrides", h.get("overrides", []), "seeds") for m, h in exp.methods.items()),
        ("multilabel.upstream_overrides", ml.upstream_overrides, "multilabel.seeds"),
        *(
            (f"multilabel.methods.{m}.overrides", h.get("overrides", []), "multilabel.seeds")
            for m, h in ml.methods.items()
        ),
        *(
            (f"conditions.{c}.upstream_overrides", s.upstream_overrides, f"conditions.{c}.seeds")
            for c, s in exp.conditions.items()
        ),
        *((f"frontier.schedules.{n}", o, "seeds") for n, o in exp.frontier.schedules.items()),
    ]


def _check_run_keys(exp: Experiment) -> None:
    """No override list sets a key the experiment sets for every run itself (:data:`RUN_KEYS`: the seed, the run's
    folder and name), which would be lost without a word.

    Raises:
        ValueError: naming the list, the override and where to set it instead.
    """
    from harness.io import quote

    for where, overrides, seeds in _override_lists(exp):
        if not isinstance(overrides, (list, tuple)):
            continue  # not a list: refused with its own message when the runs are planned
        for o in overrides:
            key, _, value = str(o).partition("=")
            if key.strip() in RUN_KEYS:
                instead = RUN_KEYS[key.strip()].format(seeds=seeds, value=value.strip())
                raise ValueError(
                    f"{where} sets {key.strip()} ({quote(str(o), 80)}), which the experiment sets for every run "
                    f"itself, so it would be ignored: drop it and set {instead}"
                )


def _check_method_keys(exp: Experiment) -> None:
    """No override list sets a key twice (:func:`harness.config.check_distinct_keys`), nor a head option a method it
    applies to defines itself in its entry (``methods: {hom: {covariance: none}}`` owns ``model.head.covariance``):
    the method named hom would train another head without a word.

    Raises:
        ValueError: naming the list, the key (and the method) and the fix.
    """
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    from harness.config import check_distinct_keys
    from harness.experiment.plan import _head_overrides
    from harness.io import quote

    for where, overrides, _ in _override_lists(exp):
        if not isinstance(overrides, (list, tuple)):
            continue  # not a list: refused with its own message when the runs are planned
        check_distinct_keys([str(o) for o in overrides], where)
        section = exp.multilabel.methods if where.startswith("multilabel.") else exp.methods
        if where.split(".")[-1] == "overrides":  # a method's own list: that method only
            section = {where.split(".")[-2]: section.get(where.split(".")[-2], {})}
        for o in overrides:
            try:
                head = _head_overrides([str(o)])
            except (OmegaConfBaseException, YAMLError, TypeError, KeyError):  # refused with its own message later
                continue
            for method, entry in section.items():
                owned = [k for k in head if k in (entry or {}) and k not in ("overrides", "tune")]
                if owned:
                    k = owned[0]
                    raise ValueError(
                        f"{where} sets model.head.{k} ({quote(str(o), 80)}), which method {method!r} defines itself "
                        f"({k}: {entry[k]}), so the method named {method} would train another head: drop it, and "
                        f"define another method for that head (methods: {{{method}_{k}: {{{k}: ...}}}})"
                    )


def _check_roots(exp: Experiment) -> None:
    """The report's folder (``<results_root>/<name>``) and the runs' folder (``<runs_root>/<name>``) are apart: not
    the same folder, the runs not inside the report's folder (it would hold files no report wrote), the report's
    folder not inside what the runs write (:data:`RUN_TREE`). A report folder elsewhere inside the runs' folder, or
    roots inside each other with the two folders apart (e.g. ``results_root=<runs_root>/results``), is fine.

    Raises:
        ValueError: naming both keys, both folders and the fix.
    """
    report = (Path(exp.results_root) / exp.name).resolve()
    runs = (Path(exp.runs_root) / exp.name).resolve()
    if report == runs:
        how = "is also the runs' folder"
    elif runs.is_relative_to(report):
        how = "holds the runs' folder"
    elif report.is_relative_to(runs) and report.relative_to(runs).parts[0] in RUN_TREE:
        how = f"lies in the runs' {report.relative_to(runs).parts[0]} inside"
    else:
        return
    raise ValueError(
        f"runs_root={exp.runs_root} and results_root={exp.results_root}: the report's folder {report} {how} "
        f"{runs}, so the report would collide with the runs: give results_root a folder apart from runs_root, "
        "e.g. runs_root=runs results_root=results"
    )


def _check_distinct_methods(plan: _Plan, key: str) -> None:
    """No two methods of a study train the same runs (the same head options, overrides and grid, but for the settings
    that change nothing a run trains: :func:`harness.experiment.plan.untrained_settings`, e.g. ``eval_seed`` or
    ``mc_chunk_size`` in their entries, audit21 A21-12): both would be trained, and the report would count one model
    as two methods (or refuse the second as a copy of the first).

    Raises:
        ValueError: naming both methods, the settings they differ in (with what each sets) and the fix.
    """
    runs = {
        m: [plan.configs[f] for f in (plan.grid[m].values() if m in plan.grid else (f"{m}_s{s}" for s in plan.seeds))]
        for m in plan.heads
    }
    names = list(runs)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pairs = [(split_untrained(x), split_untrained(y)) for x, y in zip(runs[a], runs[b])]
            if len(runs[a]) != len(runs[b]) or any(x[0] != y[0] for x, y in pairs):
                continue
            (_, x), (_, y) = pairs[0]
            differ = [k for k in {**x, **y} if x.get(k) != y.get(k)]
            if not differ:
                raise ValueError(
                    f"{key} {a} and {b} have the same settings (head options, overrides and grid), so they would "
                    "train the same model twice and the report would count it as two: drop one, or make them differ"
                )
            what = untrained_settings()
            value = lambda v, k: repr(v[k]) if k in v else "unset"  # noqa: E731
            shown = "; ".join(f"{k} ({value(x, k)} vs {value(y, k)}: it sets {what[k]})" for k in differ)
            raise ValueError(
                f"{key} {a} and {b} differ only in {shown}, so they would train the same model twice and the report "
                "would count it as two methods: drop one, or make them differ in a setting they train"
            )


def _check_report_names(plan: _Plan) -> None:
    """No two methods of the main study train runs the report names alike: it names a run and an ensemble by its
    head and loss (:func:`harness.runs.config_method`: ``het seed 0``, ``het ensemble of 3``) and averages the runs
    of one name as seeds, so two methods of one head and loss (``het`` with 4 and with 8 factors) would merge.

    Raises:
        ValueError: naming both methods, the name they share and the fix.
    """
    from harness.runs import config_method

    named: "dict[str, str]" = {}
    for m in plan.heads:
        cfg = plan.configs[next(iter(plan.grid[m].values())) if m in plan.grid else f"{m}_s{plan.seeds[0]}"]
        name = config_method(dict(cfg.model.head), cfg.train.loss)
        if name in named:
            raise ValueError(
                f"methods {named[name]} and {m} both train a {name!r} model (one head variant and loss): the report "
                f"names a run by its head and loss ({name!r} seed 0, {name!r} ensemble of 3) and averages the runs of "
                "one name as seeds, so their rows would merge; keep one in methods and study the other setting as a "
                f"condition (conditions.<name>: {{upstream_overrides: [...], methods: [{named[name]}]}}), or in an "
                "experiment of its own"
            )
        named[name] = m


def _check_finished_runs(configs: dict) -> None:
    """Every planned run folder (``configs``: :func:`~harness.experiment.run_inputs.planned_configs`, the studies' and
    the conditions', schedules' and budget curves') that holds a run started on the data its ``data.path`` names from
    this working folder (:func:`harness.upstream.checkpoint.check_data_folder`, audit23 A23-03); one that holds a
    finished run (``metrics.json`` and ``model.pt``) has predictions that read and a ``model.pt`` that is the model
    they and its metrics measured (:func:`harness.upstream.train.check_finished_run`; audit22 A22-10: a replaced
    model.pt was "already complete", then transferred and re-evaluated as the run's): found here, before any run
    trains, not when its turn comes or at the report (audit13 A13-13).

    Raises:
        ValueError: naming the run folder, the file and the fixes.
    """
    from pathlib import Path

    from harness.upstream.checkpoint import check_data_folder
    from harness.upstream.train import check_finished_run

    for cfg in configs.values():
        run = Path(cfg.output_dir)
        if (run / "config.yaml").is_file():
            check_data_folder(run, cfg.data.source, cfg.data.path)
        if (run / "metrics.json").is_file() and (run / "model.pt").is_file():
            check_finished_run(run)
