"""What every planned upstream run of an experiment reads, checked before any work and alike for every run: the main
and multi-label studies' runs (each seed, each value of a grid), every condition's, frontier schedule's and budget
curve's (:func:`harness.experiment.variants.check_variant_configs`), each of which the upstream stage's own check has
validated (its backbone and weights file included: :func:`harness.model_config.check_backbone`). Here, what needs the
data: the evaluation split of each run's data reads (``data.path`` given and present, the split there, a pack's index
for shards: :func:`harness.run_streams.read_split`), and the settings that need the data's number of classes fit it;
so a typo in a condition's or a schedule's overrides is refused before the main study trains, not when that run's
turn comes (audit16 A16-04)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.data.eval_keys import EVAL_KEYS
from harness.experiment.plan import _Plan
from harness.heads.variants import has_factors
from harness.rules import EARLIEST_DAY


def planned_configs(plans: "dict[str, _Plan]", variants: "dict[str, Any]") -> "dict[str, Any]":
    """Every planned config by the run it is: ``run <folder>`` of each study's plan (``run multilabel_<folder>`` for
    the multi-label study), the main study's first, then ``variants`` (the later runs'
    :func:`~harness.experiment.variants.check_variant_configs` built, by the section they come from)."""
    runs = {
        f"run {'' if study == 'main' else study + '_'}{folder}": cfg
        for study, plan in plans.items()
        for folder, cfg in plan.configs.items()
    }
    return {**runs, **variants}


def check_run_inputs(configs: "dict[str, Any]", pairs: "dict[str, list[list[str]]]") -> None:
    """What each planned run reads, one rule for every run (the main study's, a condition's, a frontier schedule's...):
    the evaluation split of its data (read once per distinct evaluation, :data:`harness.data.eval_keys.EVAL_KEYS`: a
    missing or absent ``data.path``, an unknown split or source; the split's K classes) and its training and held-out
    splits (read once each: an unknown split name), ``model.num_classes`` (unset or K) and the head's ``num_factors`` (at most K for
    noise on the logits); and the class names ``pairs`` gives (``confusable_pairs``, ``single_pair.pairs``) are
    classes of the first run's data (the main study's).

    Args:
        configs: the upstream configs by the run they are (:func:`planned_configs`), the main study's first.
        pairs: lists of class-name pairs by their key.

    Raises:
        ValueError: ``<the run>: <the problem>``, the problem naming the setting and the fix; FileNotFoundError
            the same for data that is not where ``data.path`` says (as :func:`harness.run_streams.read_split`
            raises it).
    """
    from harness.run_streams import read_split

    classes: "dict[str, list[str]]" = {}  # repr of a data section -> the class names of its evaluation split
    read: "set[str]" = set()  # the other splits read, by their data section and name
    for where, cfg in configs.items():
        data = repr([getattr(cfg.data, k) for k in EVAL_KEYS])  # what the evaluation split depends on
        if data not in classes:
            split = _prefixed(where, read_split, cfg.data, cfg.data.eval_split)
            classes[data] = [str(c) for c in split.class_names]
        for name in (cfg.data.train_split, cfg.data.heldout_split):  # each split a run reads (audit17 A17-01)
            if name is not None and name != cfg.data.eval_split and f"{data} {name}" not in read:
                read.add(f"{data} {name}")
                _prefixed(where, read_split, cfg.data, name)
        _check_k(where, cfg, len(classes[data]))
    names = next(iter(classes.values()), [])
    for key, given in pairs.items():
        unknown = sorted({str(c) for pair in given for c in pair} - set(names))
        if unknown:
            raise ValueError(
                f"{key} names {', '.join(map(repr, unknown))}, not classes of the data (its classes: "
                f"{', '.join(names[:20])}{' ...' if len(names) > 20 else ''}): name pairs of its classes, e.g. "
                f"[[{names[0]}, {names[-1]}]]"
            )


def _prefixed(where: str, check: Any, *args: Any) -> Any:
    """``check(*args)``, its ValueError or FileNotFoundError prefixed with the run it was raised for."""
    try:
        return check(*args)
    except (ValueError, FileNotFoundError) as e:
        raise type(e)(f"{where}: {e}") from None


def _check_k(where: str, cfg: Any, k: int) -> None:
    """``model.num_classes`` (unset, or the data's ``k``) and the head's ``num_factors`` (at most ``k`` for noise on the
    logits: rank at most K) of the run ``where``.

    Raises:
        ValueError: naming the run, the key, the value, the data's K and the fix.
    """
    if cfg.model.num_classes and cfg.model.num_classes != k:
        raise ValueError(
            f"{where}: model.num_classes={cfg.model.num_classes} but the data has {k} classes; leave "
            "model.num_classes unset"
        )
    head = cfg.model.head
    r = head.get("num_factors")
    if (
        r is not None
        and has_factors(head.get("covariance", "low_rank"))
        and head.get("noise_space", "logits") == "logits"
        and int(r) > k
    ):
        raise ValueError(
            f"{where}: model.head.num_factors={r} exceeds the {k} classes of the data (noise on the logits has rank "
            f"at most K): use num_factors <= {k}"
        )


def check_prospective(primary: Any, plans: "dict[str, _Plan]", variants: "dict[str, Any]") -> None:
    """The studies ``primary.prospective_for`` names started after ``primary.declared``: each of their planned runs
    (the main study's plan's configs; a condition's, from ``variants`` by their ``conditions.<name>, ...`` labels)
    that has run started on or after the declared day (its ``run.json`` date, UTC: :func:`run_day`), and one yet to
    run (no ``run.json``) starts today (audit17 A17-04: a day after the runs' own made the report say "before the
    runs").

    Raises:
        ValueError: naming the run, the day it started (or starts), the declared day and the two fixes; a run.json
            whose date does not read (:func:`run_day`).
    """
    import datetime

    if not primary.declared or not primary.prospective_for:
        return
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    named = [("main", f"run {folder}", cfg) for folder, cfg in plans["main"].configs.items()]
    named += [
        (n, where, cfg)
        for where, cfg in variants.items()
        for n in primary.prospective_for
        if where.startswith(f"conditions.{n}, ")
    ]
    for study, where, cfg in named:
        if study not in primary.prospective_for:
            continue
        meta = Path(cfg.output_dir) / "run.json"
        fix = f"restore it, or take {study} out of primary.prospective_for (its rows then read as retrospective)"
        day = run_day(meta, f"{where}: ", fix) if meta.exists() else None
        started = "started on" if day else "would start today,"
        day = day or today
        if day < primary.declared:
            raise ValueError(
                f"primary.declared={primary.declared} with primary.prospective_for naming {study}, but {where} "
                f"{started} {day}, before the declaration, so the report would call its runs prospective: give the "
                f"day the endpoint was declared, or take {study} out of primary.prospective_for (its rows then read "
                "as retrospective)"
            )


def run_day(meta: Path, where: str = "", fix: str = "restore it") -> str:
    """The day (``YYYY-MM-DD``, UTC) a run started, from its ``run.json``'s ``date`` as the harness writes it
    (``YYYY-MM-DD HH:MM UTC``, :func:`harness.provenance.provenance`), checked as every recorded day is
    (:func:`harness.rules.check_day`: from :data:`harness.rules.EARLIEST_DAY` to tomorrow, UTC).

    Raises:
        ValueError: ``where`` then the file, what is wrong (no file that reads, no ``date``, another spelling, a day
            before 2020 or to come: audit23 A23-13, a date the report could not read certified runs as prospective),
            and ``fix``.
    """
    import json
    import re

    from harness.io import quote
    from harness.rules import check_day

    try:
        date = json.loads(meta.read_text(encoding="utf-8")).get("date")
    except (OSError, ValueError, AttributeError) as e:
        raise ValueError(
            f"{where}{meta} does not read as a run's record ({type(e).__name__}) and the day the run started is read "
            f"from its date: the file is damaged: {fix}"
        ) from None
    found = re.fullmatch(r"(\d{4}-\d{2}-\d{2}) \d{2}:\d{2} UTC", str(date)) if isinstance(date, str) else None
    try:
        if found is None:
            raise ValueError("not the harness's spelling")
        return check_day(found.group(1), "date", "the run started")
    except ValueError as e:
        raise ValueError(
            f"{where}{meta} records date={quote(repr(date), 60)}, not a day the run can have started (the harness "
            f"writes YYYY-MM-DD HH:MM UTC, from {EARLIEST_DAY} to today; {str(e).split(':')[0]}): the file is "
            f"damaged: {fix}"
        ) from None
