"""The transfer study of an experiment's committed upstream models (``transfer:`` in an experiment file;
``harness run cifar10n_transfer``): the question of the paper's Table 6, whether HET-pretrained backbones transfer
better with a fresh homoscedastic head.

Nothing upstream is trained: each model named in ``transfer.methods`` is restored from the upstream experiment's
records (verified against their hashes). The tasks are built once by :func:`harness.tasks.cifar.build_cifar_tasks`
(VTAB-1k form, training lists from the upstream held-out split, test lists from the test split) and the built-in
digits DEMO tasks join them as an out-of-domain group. Every model is transferred through the same sweep as
``harness downstream`` (:func:`harness.downstream.sweep.sweep`: selection on val200, final fit on train800val200,
the test split chooses nothing), the same recipe for every model, ``workers`` at a time, resumable.

The primary endpoint (declared in the experiment file before any transfer run) is the VTAB-1k-style score, the mean
test top-1 over the tasks, each method against the reference, with one interval over upstream seeds and test
images, Holm over the primary comparisons; per-group scores and the other comparisons form the secondary family
(Holm together). NLL and ECE per task (of each transfer's ensemble over its fine-tuning seeds) form a third,
exploratory family, added after the transfer runs had started and reported as such. The numbers and the report are
:mod:`harness.experiment.transfer_report`'s.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from harness.experiment.config import TransferSection
from harness.tasks.demo import DEMO_TASKS


def validate_transfer(t: TransferSection) -> None:
    """Every name refers to something that exists, checked before any work.

    Raises:
        ValueError: an empty study, an unknown method in ``primary``/``secondary``, a comparison of a method with
            itself (``reference`` in ``primary``, a ``secondary`` pair ``a: a``), two methods holding one record (one
            model under two names: :func:`_check_own_records`), unequal seed counts in a comparison, an unknown OOD
            task or preset (the message names the key and the fix).
    """
    from harness.downstream.config import PRESETS

    if not t.upstream or not t.methods:
        raise ValueError(
            "transfer.upstream and transfer.methods are required: name the experiment whose records hold "
            "the models and the record names of each method"
        )
    from harness.io import check_name

    check_name(t.upstream, "transfer.upstream")  # a folder name under the results roots, never a path out of them
    for method, records in t.methods.items():
        for record in records:  # runs/upstream/<record> is written, <root>/<upstream>/records/<record> read
            check_name(record, f"transfer.methods.{method} record")
    pairs = [(m, t.reference) for m in t.primary] + list(t.secondary.items())
    for m, ref in pairs:
        for name in (m, ref):
            if name not in t.methods:
                raise ValueError(
                    f"transfer: {name!r} is compared but is not in transfer.methods ({', '.join(t.methods)})"
                )
        if m == ref:
            key = (
                f"transfer.primary=[{', '.join(t.primary)}] holds transfer.reference={ref}, so it"
                if m in t.primary
                else f"transfer.secondary.{m}={ref}"
            )
            fix = (
                f"remove {m} from transfer.primary (every primary method is compared with transfer.reference={ref}), "
                "or set transfer.reference to another method"
                if m in t.primary
                else f"give {m} another method as its reference, or remove transfer.secondary.{m}"
            )
            raise ValueError(
                f"{key} compares {m} with itself ({m} − {ref}: the difference is 0 by construction, reported as "
                f"'no detectable difference' and counted in its family's Holm adjustment): a comparison is of two "
                f"methods: {fix}"
            )
        if len(t.methods[m]) != len(t.methods[ref]):
            raise ValueError(
                f"transfer: {m} has {len(t.methods[m])} records and {ref} {len(t.methods[ref])}; "
                "pair them seed by seed (one record per upstream seed each)"
            )
    _check_own_records(t)
    unknown = [n for n in t.ood if n not in DEMO_TASKS]
    if unknown:
        raise ValueError(f"transfer.ood: unknown task(s) {unknown}; use some of {', '.join(DEMO_TASKS)}")
    if t.preset not in PRESETS:
        raise ValueError(f"transfer.preset={t.preset!r}: use one of {', '.join(PRESETS)}")


def _check_own_records(t: TransferSection) -> None:
    """No record is listed by two methods of ``transfer.methods``: a record is one upstream model, so a method listing
    another's records would be that method again under another name (compared with it, a difference of 0 by
    construction; a record repeated within one method is refused by the field's rule of distinct values).

    Raises:
        ValueError: naming both methods' keys, the records they share and the fix.
    """
    owner: "dict[str, str]" = {}  # record -> the first method listing it
    for method, records in t.methods.items():
        shared = [r for r in records if r in owner]
        if shared:
            first = owner[shared[0]]
            raise ValueError(
                f"transfer.methods.{method}=[{', '.join(records)}] lists record(s) {', '.join(shared)} of "
                f"transfer.methods.{first}=[{', '.join(t.methods[first])}]: a record is one upstream model and belongs to one "
                f"method, so one model would count as both {method} and {first} (their difference 0 by construction "
                f"where they share it): give transfer.methods.{method} its own records (one per "
                f"upstream seed), or remove it"
            )
        owner.update({r: method for r in records})


def _restore(t: TransferSection, roots: "list[Path]", runs: Path, progress: Callable[[str], None]) -> "dict[str, Path]":
    """Each record of ``t.methods`` restored (verified) into ``runs/upstream/<record>``, found in the first of
    ``roots`` (this run's results, then the reference's) that holds it; record -> run folder."""
    from harness.records import restore_record

    out = {}
    for name in dict.fromkeys(r for rs in t.methods.values() for r in rs):
        held = [root / t.upstream / "records" / name for root in roots]
        rec, run = next((r for r in held if (r / "model.pt").is_file()), held[-1]), runs / "upstream" / name
        if not (rec / "model.pt").is_file():
            raise FileNotFoundError(
                f"transfer: no record {rec} with a model.pt; the upstream experiment "
                f"{t.upstream!r} must have finished that run (harness run {t.upstream})"
            )
        if restore_record(rec, run):
            progress(f"[transfer] restored {name} from {rec}")
        out[name] = run
    return out


def _tasks(t: TransferSection, runs: Path, progress: Callable[[str], None]) -> "tuple[list[str], dict]":
    """The task lines and groups: the CIFAR tasks (built into ``runs/tasks`` on first use) and the OOD tasks."""
    from harness.tasks.cifar import build_cifar_tasks

    root = runs / "tasks"
    summary_file = root / "cifar_tasks.json"
    if summary_file.is_file():
        summary = json.loads(summary_file.read_text())
    else:
        summary = build_cifar_tasks(
            t.data, root, seed=t.task_seed, test_size=t.test_size, progress=progress, sizes=tuple(t.sizes)
        )
    specs = [task["spec"] for task in summary["tasks"].values()]
    groups = {g: list(ts) for g, ts in summary["groups"].items() if g != "ood"}
    groups["ood"] = list(t.ood)
    return specs + list(t.ood), groups


def finished_section(t: TransferSection, folders: "dict[str, Path]") -> "tuple[TransferSection, list[str]]":
    """The study restricted to the methods whose every transfer has finished (its sweep wrote ``vtab.json``), with
    the comparisons that wait for the others (``"a − b"``).

    Raises:
        ValueError: no transfer of the reference method has finished (nothing to compare yet).
    """
    done = {m for m, recs in t.methods.items() if all((folders[r] / "vtab.json").is_file() for r in recs)}
    if t.reference not in done:
        raise ValueError(
            f"the transfers of the reference method {t.reference!r} have not all finished: nothing to compare yet; "
            "run the study without --no-train to run them"
        )
    wanted = [(m, t.reference) for m in t.primary] + list(t.secondary.items())
    pending = [f"{a} − {b}" for a, b in wanted if a not in done or b not in done]
    section = replace(
        t,
        methods={m: recs for m, recs in t.methods.items() if m in done},
        primary=[m for m in t.primary if m in done],
        secondary={a: b for a, b in t.secondary.items() if a in done and b in done},
    )
    return section, pending


def run_transfer(exp: Any, progress: Callable[[str], None] = print, train: bool = True) -> Path:
    """Run (or finish) the transfer study of ``exp.transfer`` and write ``<results_root>/<name>/report.{md,json}``;
    returns the report folder. A rerun transfers only what is missing (each sweep resumes itself). With ``train``
    False nothing is fine-tuned: the report holds the methods whose transfers have finished
    (:func:`finished_section`) and names the comparisons still pending.

    Raises:
        ValueError: a bad study (:func:`validate_transfer`), or the sweep's own errors (checked before its runs).
        FileNotFoundError: a missing record or data folder.
    """
    from harness.experiment.section_rules import sweep_settings
    from harness.experiment.stages import EXPERIMENT_LOCK, _transfer_one
    from harness.io import RunLock
    from harness.rules import check_rules
    from harness.workers import Workers

    t = exp.transfer
    check_rules(exp)  # the rules declared on the experiment's fields, its transfer section's among them
    validate_transfer(t)
    from harness.experiment.roots import check_outside_experiments

    check_outside_experiments(exp)  # not inside another experiment's folder (audit19 A19-17)
    runs = Path(exp.runs_root) / exp.name
    settings = sweep_settings(t.preset, t.settings, "transfer.settings")  # before any work, naming the key
    with RunLock(
        exp.runs_root,
        name=EXPERIMENT_LOCK,
        clean=False,
        what="one harness run at a time uses a runs_root: wait for it to finish or stop it",
    ):
        models = _restore(t, [Path(exp.results_root), Path(exp.reference_root)], runs, progress)
        specs, groups = _tasks(t, runs, progress)
        if train:
            progress(
                f"[transfer] {len(models)} upstream models x {len(specs)} tasks ({t.preset} recipe), "
                f"{exp.workers} at a time"
            )
            with Workers(exp.workers) as workers:
                workers.expect(len(models))
                for name, run in models.items():
                    workers.submit(
                        "downstream",
                        name,
                        _transfer_one,
                        (str(run / "model.pt"), specs, str(runs / "downstream" / name), settings),
                    )
                workers.wait(progress)
        folders = {n: runs / "downstream" / n for n in models}
        if not train:  # the sweeps read as they are: each still of its model and its tasks' data as they are now
            from harness.downstream.sweep import check_finished

            for name, run in models.items():
                if (folders[name] / "vtab.json").is_file():
                    check_finished(str(run / "model.pt"), specs, folders[name], settings)
        section, pending = finished_section(t, folders)
        if pending:
            progress(f"[transfer] pending (transfers not finished): {', '.join(pending)}")
        from harness.experiment.transfer_report import write_report

        return write_report(exp, folders, groups, settings, section, pending)
