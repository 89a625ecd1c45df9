"""The experiment file: its sections (methods, seeds, τ grid, budget, frontier, conditions,
multi-label study, downstream, shift) as dataclasses, and where experiment files are found."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from harness.experiment.upstream_ref import upstream_config_path as _upstream_config_path  # noqa: F401 (plan, report)
from harness.heads.options import TEMPERATURE_RANGE as TEMPERATURES  # a τ grid's values (a softmax's temperature)
from harness.rules import SEED, setting
from harness.shift.settings import ShiftSettings

EXPERIMENTS = Path(__file__).parent.parent / "experiments"
#: the most processes ``workers`` may start (each trains with cores / workers threads; more only queue)
MAX_WORKERS = 256
#: the upstream settings the experiment sets in every run's config itself (:func:`harness.experiment.plan._plan` puts
#: them after every override, so an override of one would be lost): key -> where the experiment takes it from
#: (``{seeds}``: the seeds key of the section the override is in)
RUN_KEYS = {
    "seed": "the seeds list ({seeds}: [{value}])",
    "output_dir": "runs_root=PATH (every run goes to <runs_root>/<name>/upstream/<run>)",
    "name": "the experiment's name (every run is named <name>_<run>)",
}
#: what the runs of an experiment write in ``<runs_root>/<name>/``
RUN_TREE = ("upstream", "downstream", "ensembles", "sessions.json", "step_cost.json")


@dataclass
class DownstreamSection:
    """Transfer of every upstream model (see :class:`harness.downstream.config.SweepSettings`)."""

    tasks: List[str] = setting(default_factory=lambda: ["demo"], distinct=True)
    preset: str = "demo"
    settings: Dict[str, Any] = field(default_factory=dict)


@dataclass
class MultilabelSection:
    """A second study on the same images with multi-label targets (the JFT-style case), reported in its own table:
    sigmoid heads trained on label sets, scored by prec@1, mAP and sigmoid NLL.

    Attributes:
        upstream_overrides: ``key=value`` overrides added to the experiment's (e.g. ``data.multilabel=true``).
        methods: method name -> head options (``link: sigmoid``); empty skips the study.
        seeds: seeds of every method.
        temperature_grid: τ grid of its noisy methods (chosen on held-out sigmoid NLL); empty keeps the head's τ.
    """

    upstream_overrides: List[str] = field(default_factory=list)
    methods: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    seeds: List[int] = setting(default_factory=list, distinct=True, **SEED)
    temperature_grid: List[float] = setting(default_factory=list, **TEMPERATURES)


#: what a frontier schedule may set, each a key or a section of keys: how the runs train (steps, optimiser, network,
#: the heads' training samples, the training batch), never the examples, labels or evaluation data (so that the points
#: are scored alike: variants._check_schedules)
SCHEDULE_KEYS = tuple(
    "train optim model.backbone model.backbone_kwargs model.head.train_mc_samples data.batch_size".split()
)


@dataclass
class FrontierSection:
    """Accuracy against CPU-minutes of candidate schedules: the first seed of each of ``methods`` (at its chosen τ)
    trained with each schedule's overrides, reported beside the experiment's own schedule (the chosen point). These runs
    are diagnostics: they come after the study and their time is reported apart.

    Attributes:
        methods: some of the experiment's methods (unset: ``[method]``; an empty list is refused, as it names none).
        method: the single method of older experiment files (unset: ``hom``); refused beside ``methods`` (audit19
            A19-08: one of the two was ignored).
        schedules: name -> ``key=value`` overrides of :data:`SCHEDULE_KEYS` (e.g. ``{"10 epochs": [train.epochs=10]}``).
        reference: a published figure to read the frontier against, with its protocol (epochs, which epoch is reported,
            network, training images), printed beside the frontier's own protocol.
    """

    method: Optional[str] = None
    schedules: Dict[str, List[str]] = field(default_factory=dict)
    methods: Optional[List[str]] = setting(None, distinct=True)
    reference: str = ""

    def names(self) -> "list[str]":
        """The frontier's methods: ``methods``, else ``[method]`` (``["hom"]`` when neither is given)."""
        return [self.method or "hom"] if self.methods is None else list(self.methods)


@dataclass
class BudgetSection:
    """Budget curves: the first seed of each of ``methods`` (at its chosen τ) trained for each of ``epochs`` (its own
    schedule of that length: warm-up and cosine decay scale with it), so top-1, NLL and ECE can be read against
    CPU-minutes. A run whose config equals one of the study's (the main schedule, or a τ-grid run at the chosen τ) is
    reused, not trained again.

    Attributes:
        methods: some of the experiment's methods, in order of priority (they are queued so).
        epochs: epoch counts of the curve.
    """

    methods: List[str] = setting(default_factory=list, distinct=True)
    epochs: List[int] = setting(default_factory=list, low=1, whole=True, distinct=True)


@dataclass
class ConditionSection:
    """Another training condition of the same methods (e.g. another kind of label noise): each of ``methods`` (names of
    the experiment's methods, at their chosen τ) trained for each of ``seeds`` with ``upstream_overrides`` added,
    compared against hom like the main study.

    Attributes:
        description: one line for the report.
        upstream_overrides: ``key=value`` overrides of the condition.
        methods: some of the experiment's methods (``hom`` among them for the comparison).
        seeds: seeds of every method.
        exploratory: empty for a condition declared before its runs; otherwise why it is exploratory (e.g. added after
            seeing results): its rows are labelled so in the summary.
    """

    description: str = ""
    upstream_overrides: List[str] = field(default_factory=list)
    methods: List[str] = setting(default_factory=list, distinct=True)
    seeds: List[int] = setting(default_factory=lambda: [0], distinct=True, **SEED)
    exploratory: str = ""


@dataclass
class SinglePairSection:
    """The crossed single-pair design of what Σ learns (:func:`harness.experiment.single_pair.single_pair_plan`): two
    conditions that put the same amount of noise on one class pair each, the pairs crossed, so that a pair's visual
    similarity cancels in the difference-in-differences Δ.

    Attributes:
        arms: the two condition names ``[D1, D2]``; arm i carries the noise on ``pairs[i]``.
        pairs: two class pairs by name, ``[[a, b], [c, d]]``.
        effect: |Δ| the paired t test must detect with ``power`` at level ``alpha``.
        margin: the equivalence margin of the two one-sided tests (TOST), in correlation units.
        alpha, power: the tests' level and the planned power.
        spread_from: the conditions whose per-seed spread of the pair correlations plans the seeds.
        spread: the spread measured in each of them when the design was registered (median over class pairs of the seed
            standard deviation of a pair's mean correlation); the largest plans the seeds.
        planned_seeds: the seeds per arm the calculation gave (checked against it by the tests).
        pilot_seeds, max_seeds: the variance-only re-estimation after ``pilot_seeds`` seeds per arm (the internal pilot:
            the standard deviation of the per-seed Δ, never its mean), which may raise the seeds per arm up to
            ``max_seeds``, never lower them.
    """

    arms: List[str] = field(default_factory=list)
    pairs: List[List[str]] = field(default_factory=list)
    effect: float = setting(0.12, low=0, low_open=True, high=4, note="correlation units: |Δ| <= 4")
    margin: float = setting(0.15, low=0, low_open=True, high=4, note="correlation units: |Δ| <= 4")
    alpha: float = setting(0.05, low=0, low_open=True, high=0.5, high_open=True, note="TOST's 1 - 2·alpha interval")
    power: float = setting(0.8, low=0, low_open=True, high=1, high_open=True)
    spread_from: List[str] = setting(default_factory=list, distinct=True)
    spread: Dict[str, float] = field(default_factory=dict)
    planned_seeds: int = setting(0, low=0, whole=True)
    pilot_seeds: int = setting(0, low=0, whole=True)
    max_seeds: int = setting(0, low=0, whole=True)


@dataclass
class TransferSection:
    """A transfer study of committed upstream models.

    Attributes:
        upstream: the experiment whose records (``<results_root>/<upstream>/records/``) hold the models.
        methods: method -> record names, one per upstream seed, in seed order (seeds are paired by position).
        reference: the method every comparison is against.
        primary: the methods of the primary family (each against ``reference``).
        secondary: further comparisons, method -> its reference (e.g. ``het_e30: hom_e30``), in the secondary family.
        data: the CIFAR-10N folder the tasks are built from; ``task_seed``, ``test_size``, ``sizes`` (train800, val200):
            their draw (:func:`harness.tasks.cifar.build_cifar_tasks`).
        ood: built-in tasks of the out-of-domain group (the digits DEMO tasks).
        preset, settings: the downstream recipe (:data:`harness.downstream.config.PRESETS` and overrides).
    """

    upstream: str = ""
    methods: Dict[str, List[str]] = setting(default_factory=dict, distinct=True)  # a record once per method
    reference: str = "hom"
    primary: List[str] = setting(default_factory=list, distinct=True)
    secondary: Dict[str, str] = field(default_factory=dict)
    data: str = "../shared/data/cifar10n"
    task_seed: int = setting(0, **SEED)
    test_size: int = setting(2000, low=1, whole=True)
    ood: List[str] = setting(default_factory=list, distinct=True)
    sizes: List[int] = setting(default_factory=lambda: [800, 200], low=1, whole=True, size=2, note="train, val")
    preset: str = "demo"
    settings: Dict[str, Any] = field(default_factory=dict)


@dataclass
class PrimaryEndpoint:
    """The experiment's primary endpoint, declared in the experiment file before its runs: the one comparison of each
    method against hom whose verdict is the study's answer, reported first and outside the family of secondary
    comparisons (which is adjusted for multiplicity).

    Attributes:
        metric: a metric of the run's metrics (``nll``, ``top1``, ``ece``, ``sigmoid_nll``, ...).
        split: ``heldout`` (the held-out split with its noisy labels, ``heldout_predictions.npz``) or ``eval`` (the
            evaluation split, ``predictions.npz``).
        declared: when the endpoint was declared (a date), printed on the primary line.
        prospective_for: the studies (``main`` or condition names) whose runs started after the declaration; the primary
            line says the others' rows are retrospective.
    """

    metric: str = "nll"
    split: str = setting(
        "heldout", choices=("heldout", "eval"), note="the held-out split with its noisy labels, or the evaluation split"
    )
    declared: str = ""
    prospective_for: List[str] = setting(default_factory=list, distinct=True)

    def __post_init__(self) -> None:
        """``declared`` is empty or a past day (:func:`harness.rules.check_day`)."""
        from harness.rules import check_day

        self.declared = check_day(self.declared, "primary.declared", "the endpoint was declared")


def class_pair(pair: Any) -> Any:
    """A class pair's identity for distinct ``confusable_pairs`` (:class:`harness.rules.Rule`'s ``same``): its set of
    class names (``[dog, cat]`` is ``[cat, dog]``). Raises ValueError for a pair of a class with itself, naming it."""
    names = [str(c) for c in pair]
    if len(names) == 2 and names[0] == names[1]:
        raise ValueError(f"the pair {names} names class {names[0]} twice: a pair holds two distinct classes")
    return frozenset(names)


@dataclass
class Experiment:
    """One experiment.

    Attributes:
        name: report folder ``results/<name>``; run folders under ``runs/<name>``.
        upstream_config: an upstream config: a path relative to the experiment file (as ``base:`` is; on the command
            line, to the current folder), a bare name of a built-in config in ``upstream/configs`` when no file of that
            name is beside the experiment file (both: refused), or ``builtin:NAME``
            (:mod:`harness.experiment.upstream_ref`).
        upstream_overrides: ``key=value`` overrides of that config for every run.
        methods: method name -> head options (replacing the config's ``model.head``); the key ``overrides`` holds the
            method's own ``key=value`` training settings (e.g. ``[train.loss=forward]`` for a forward-corrected hom
            baseline); the key ``tune`` (``{key: train.label_smoothing, values: [0.05, 0.1, 0.2, 0.4]}``) has one
            training setting chosen on the held-out split like a noisy head's τ.
        seeds: upstream seeds of every method.
        temperature_grid: τ values tried for every method whose head has noise (covariance not ``none``), on the first
            seed, chosen by held-out NLL; empty keeps the head's τ.
        grid_overrides: ``key=value`` overrides of the τ-grid runs only (a shorter schedule:
            ``[train.epochs=6, train.eval_every=6]``); then every seed of the chosen τ is trained at the study's own.
        grid_extensions: when the chosen τ lies on the edge of the values tried, the grid is extended past that edge
            (τ/2 below, 1.5τ above), at most this many times per method.
        ensemble_sizes: ensembles of the first n seeds of each method.
        multilabel: the optional multi-label study.
        frontier: optional candidate schedules, for accuracy against CPU-minutes.
        budget: optional budget curves (epochs against CPU-minutes, per method).
        conditions: optional further training conditions (name -> :class:`ConditionSection`), each compared against hom
            in its own section; their runs are under ``runs/<name>/upstream/`` as ``<condition>_<method>_s<seed>``.
        downstream: transfer settings; ``tasks: []`` skips the stage.
        covariance: run the covariance analysis in the report.
        runs_root, results_root: where the run folders and the report go (``harness run`` writes the report to
            ``<runs_root>/results`` unless it is given ``results_root=`` or ``--reference``).
        reference_root: where the committed reference reports and records are (``results``): ``harness run`` compares
            its report with ``<reference_root>/<name>/report.json`` and restores runs from the records there; ``harness
            run --reference`` writes the report there (the project's own regeneration).
        confusable_pairs: class pairs people are known to confuse (e.g. cat/dog); the report says how many of the top
            covariance pairs are among them. Each pair once, unordered, of two distinct classes (:func:`class_pair`).
        workers: jobs (upstream runs, shift predictions, transfers) run at once, each in its own process.
        shift: evaluation under distribution shift of every model and ensemble of the main study
            (:class:`harness.shift.ShiftSettings`: corrupted copies of the evaluation split, OOD sets), reported in the
            shift section; None (the default) skips the stage. The multi-label study (sigmoid heads) and the frontier
            runs are not evaluated under shift.
        evaluate_methods: the methods whose final runs get the shift predictions and the transfer (unset: all;
            :meth:`evaluated`).
        primary: the primary endpoint (:class:`PrimaryEndpoint`), declared before the runs.
        preregistration: free text written before the runs: what each condition tests and the read-out that decides it;
            printed in the report beside the outcome.
        sigma_readout: ``{permuted: <condition>, clean: <condition>}``: the conditions whose het models decide what Σ
            follows (:mod:`harness.experiment.sigma`); every het model of the main study and of these conditions is
            tested against its own noise and the main study's human noise.
        single_pair: the crossed single-pair design (:class:`SinglePairSection`), or None.
        transfer: a transfer study of another experiment's committed models (:class:`TransferSection`,
            :mod:`harness.experiment.transfer`); when set, ``harness run`` trains nothing upstream.
        replication: the name of an experiment that reruns this one on other seeds and another floating-point path (e.g.
            ``digits_replication``); when its report exists (``<results_root>/<name>/report.json``), each better/worse
            verdict of this report is marked replicated or fragile from it.
        records: keep a compact record of every finished upstream run (config, metrics, compressed predictions, final
            model; no checkpoints) in ``<results_root>/<name>/records/``, to commit as runs land; a rerun on a machine
            that lost ``runs/`` restores them instead of retraining.
    """

    name: str = "digits"
    upstream_config: str = "digits_base.yaml"
    upstream_overrides: List[str] = field(default_factory=list)
    methods: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    seeds: List[int] = setting(default_factory=lambda: [0], distinct=True, **SEED)
    temperature_grid: List[float] = setting(default_factory=list, **TEMPERATURES)
    grid_overrides: List[str] = field(default_factory=list)
    grid_extensions: int = setting(0, low=0, whole=True)
    ensemble_sizes: List[int] = setting(
        default_factory=list, low=2, whole=True, distinct=True, note="at most the seeds"
    )
    multilabel: MultilabelSection = field(default_factory=MultilabelSection)
    frontier: FrontierSection = field(default_factory=FrontierSection)
    budget: BudgetSection = field(default_factory=BudgetSection)
    conditions: Dict[str, ConditionSection] = field(default_factory=dict)
    downstream: DownstreamSection = field(default_factory=DownstreamSection)
    covariance: bool = True
    runs_root: str = "runs"
    results_root: str = "results"
    reference_root: str = "results"
    description: str = ""
    confusable_pairs: List[List[str]] = setting(default_factory=list, distinct=True, same=class_pair)
    workers: int = setting(
        1, low=1, high=MAX_WORKERS, whole=True, note="one process each; more than the CPU cores only queue"
    )
    shift: Optional[ShiftSettings] = None
    records: bool = False
    primary: PrimaryEndpoint = field(default_factory=PrimaryEndpoint)
    preregistration: str = ""
    sigma_readout: Dict[str, str] = field(default_factory=dict)
    single_pair: Optional[SinglePairSection] = None
    replication: str = ""
    transfer: Optional[TransferSection] = None
    evaluate_methods: Optional[List[str]] = setting(None, distinct=True)

    def evaluated(self) -> "list[str]":
        """The methods whose final runs get the shift predictions and the transfer: ``evaluate_methods``, or every
        method when it is unset."""
        return list(self.methods if self.evaluate_methods is None else self.evaluate_methods)

    def __post_init__(self) -> None:
        """The folders (:data:`ROOTS`) are not empty, a leading ``~`` expanded to the home folder.

        Raises:
            ValueError: an empty one, or one holding a ``$``, naming the key and the fix (:func:`check_root`).
        """
        for key in ROOTS:
            setattr(self, key, check_root(key, getattr(self, key)))


#: the experiment's folders, key -> what goes there (an empty one would put them in the working folder)
ROOTS = {
    "runs_root": "every run goes to <runs_root>/<name>/upstream/<run>",
    "results_root": "the report goes to <results_root>/<name>",
    "reference_root": "the committed reference report is <reference_root>/<name>/report.json",
}


def check_root(key: str, value: Any) -> str:
    """One of :data:`ROOTS` is not empty (``runs_root=`` on the command line gives None, ``runs_root: ''`` an empty
    string); returns it with a leading ``~`` expanded (:func:`harness.folder_paths.expand_home`: a YAML file or a
    quoted override reaches the harness unexpanded, and a folder literally named ``~`` would be made).

    Raises:
        ValueError: naming the key, what it holds and the fix: empty, or holding a ``$`` (nothing expands it).
    """
    from harness.folder_paths import expand_home

    if value is None or not str(value).strip():
        raise ValueError(
            f"{key} is empty ({key}={'' if value is None else repr(value)}): {key} must not be empty ({ROOTS[key]}): "
            f"give a folder, e.g. {key}={getattr(Experiment, key)}"
        )
    return expand_home(str(value), key)


def find_experiment(name_or_path: str) -> Path:
    """A path, or the name of a file in ``harness/experiments`` (``digits`` -> ``digits.yaml``).

    Raises:
        FileNotFoundError: neither (the message lists the built-in experiments), or a folder (the message lists the
            YAML files inside it).
    """
    p = Path(name_or_path)
    if p.is_file():
        return p
    if p.is_dir():
        inside = sorted(str(f) for f in p.glob("*.y*ml") if f.is_file())
        raise FileNotFoundError(
            f"experiment {name_or_path!r} is a folder, not an experiment file: give the YAML file inside it ("
            + (", ".join(inside[:5]) + (" ..." if len(inside) > 5 else "") if inside else "it holds none")
            + ")"
        )
    built_in = EXPERIMENTS / f"{name_or_path}.yaml"
    if built_in.is_file():
        return built_in
    names = sorted(f.stem for f in EXPERIMENTS.glob("*.yaml"))
    raise FileNotFoundError(f"no experiment {name_or_path!r}: give a YAML path or one of {', '.join(names)}")


def _noisy(head: dict) -> bool:
    return head.get("covariance", "low_rank") != "none"


#: the key that switches each optional section on: empty, the section is off, its other keys refused (section_rules.
#: check_grids_and_sections), but an override that empties it (``frontier.schedules={}``) turns the whole section off
SECTION_SWITCHES = {"budget": "methods", "frontier": "schedules", "multilabel": "methods", "downstream": "tasks"}


def load_experiment(name_or_path: Optional[str] = None, overrides: "tuple[str, ...]" = ()) -> Experiment:
    """Read an experiment file (default: the embedded digits experiment) with ``key=value`` overrides, each key once;
    an override that empties a section's switch (:data:`SECTION_SWITCHES`: ``frontier.schedules={}``) resets the
    whole section to its defaults.

    Raises:
        ValueError: a key set twice in ``overrides``, an empty folder (:func:`check_root`, ``runs_root=``), or what
            :func:`harness.config.load_config` refuses.
    """
    from harness.config import load_config

    given = {}
    for o in overrides if not isinstance(overrides, str) else ():
        key, _, value = str(o).partition("=")
        given[key.strip()] = value.strip()
        if key.strip() in ROOTS and not value.strip():
            check_root(key.strip(), None)  # refused here: OmegaConf reads the empty value as None
    path = find_experiment(name_or_path or "digits")
    exp = load_config(Experiment, path, overrides)
    exp.source_file = str(path)  # not a setting: where the messages say a key is set (audit23 A23-15)
    exp.upstream_config = str(_upstream_config_of(exp.upstream_config, path, "upstream_config" in given))
    for section, switch in SECTION_SWITCHES.items():  # frontier.schedules={} switches the frontier off, whole
        if given.get(f"{section}.{switch}") in ("{}", "[]"):
            off = type(getattr(exp, section))()
            setattr(off, switch, type(getattr(off, switch))())  # downstream's default tasks are ["demo"]: off is empty
            setattr(exp, section, off)
    return exp


def _upstream_config_of(ref: str, path: Path, overridden: bool) -> Path:
    """The file of ``upstream_config`` read from the experiment file ``path``: relative to the file of its ``base:``
    chain that sets it, to the current folder when ``overridden`` on the command line, the built-in when no file sets
    it (its default)."""
    from harness.experiment.upstream_ref import BUILT_IN, setting_file, upstream_config_path

    if overridden:
        return upstream_config_path(ref, None, "on the command line")
    where = setting_file(path, "upstream_config")
    if where is None:
        return upstream_config_path(BUILT_IN + ref)
    return upstream_config_path(ref, where.parent, f"in {where}")
