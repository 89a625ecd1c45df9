"""Experiment trackers of ``harness upstream`` (``train.log_with``), ``harness downstream`` and ``harness fewshot``
(``--log-with``): accelerate's own (``accelerate.tracking``), nothing home-made.

Every command logs, to every tracker named:

- the whole resolved config as parameters, flattened to dotted keys (``optim.lr``, ``model.head.covariance``;
  lists, ``None`` and empty mappings as their JSON text, since trackers take scalars: :func:`flat_params`);
- its metrics at every evaluation (upstream: ``eval/<metric>`` per evaluation, ``train/loss`` and ``train/lr``
  every ``train.log_every`` steps, ``fewshot/<task>/<n>shot``; downstream: each fine-tune's val200 / test accuracy
  and NLL as it finishes; few-shot: each task's accuracy per shot count; MLflow writes ``@`` as ``_at_``,
  :func:`mlflow_key`);
- its final report: the metrics (``final/<metric>``), and the files (``metrics.json``, ``vtab.md``, ...) as
  artefacts where the tracker keeps files (MLflow ``log_artifact``, W&B ``run.save``), the tables as W&B tables
  and the Markdown as TensorBoard text (:func:`log_report`);
- with ``train.log_model`` (upstream), the run's ``save_pretrained`` folder as artefacts (:func:`log_model`).

Names (:data:`NAMES`) are accelerate's ``LoggerType`` values: ``tensorboard`` (the default; writes ``tb/`` in the
run or output folder), ``mlflow`` (``MLFLOW_TRACKING_URI``: a database such as ``sqlite:///path/mlflow.db``, or a
tracking server ``http://host:5000``, which must answer before any work; MLflow 3 refuses a file store, a folder or
``file:`` URI, unless ``MLFLOW_ALLOW_FILE_STORE=true``; ``databricks`` with a workspace configured; experiment
``MLFLOW_EXPERIMENT_NAME`` or the command's name), ``wandb`` (``WANDB_MODE=offline`` runs without a network; online,
an API key and a server that answers before any work; project ``WANDB_PROJECT`` or the command's name), ``aim``,
``comet_ml``, ``clearml``, ``dvclive``, ``swanlab``, ``trackio``. mlflow and wandb install with ``pip install
"het-harness[track]"``. Their settings are checked before any work (:mod:`harness.training.tracker_checks`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from harness.training.tracker_checks import (  # noqa: F401 -- the MLflow facts, re-exported where callers look
    LOCAL_STORE,
    MLFLOW_SCHEMES,
    check_tracking_uri,
    check_wandb,
    mlflow_version,
)

#: the tracker names accelerate knows (``accelerate.utils.LoggerType`` without ``all``)
NAMES = ("tensorboard", "mlflow", "wandb", "aim", "comet_ml", "clearml", "dvclive", "swanlab", "trackio")
#: the default of ``train.log_with`` and ``--log-with``
DEFAULT = ("tensorboard",)
#: the folders trackers write inside a run or sweep folder (``tb``: TensorBoard; ``wandb``: W&B without
#: ``WANDB_DIR``): the one list the stages' output-folder checks read
FOLDERS = ("tb", "wandb")
INSTALL = 'pip install "het-harness[track]" (in a checkout: pip install -e ".[track]")'


def parse_log_with(text: "str | Sequence[str] | None") -> "list[str]":
    """Tracker names from ``--log-with`` text (``mlflow,wandb``; ``none`` or empty: no tracker) or a list."""
    if text is None:
        return []
    items = text.split(",") if isinstance(text, str) else list(text)
    names = [str(n).strip().lower() for n in items if str(n).strip()]
    return [] if names in (["none"], ["off"]) else names


def check_names(names: Sequence[str], key: str = "--log-with") -> "list[str]":
    """Validate tracker names (no packages needed).

    Raises:
        ValueError: a name accelerate does not know, a repeated one, or ``none`` / ``off`` (no tracker) named with
            trackers (the message names ``key`` and the choices).
    """
    if isinstance(names, str):
        raise ValueError(f"{key} must be a list of tracker names, e.g. [tensorboard, mlflow]; got {names!r}")
    names = [str(n) for n in names]
    off = [n for n in names if n.lower() in ("none", "off")]
    if len(off) > 1:
        raise ValueError(f"{key} says no tracker {len(off)} times ({', '.join(off)}): give {off[0]} once")
    if off and len(off) < len(names):
        trackers = ",".join(n for n in names if n not in off)
        raise ValueError(
            f"{key}: {off[0]} (no tracker) cannot be combined with trackers ({', '.join(map(repr, names))}): give "
            f"{off[0]} alone for no tracking, or only the trackers ({trackers})"
        )
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(
            f"{key}: unknown tracker(s) {', '.join(map(repr, unknown))}: use {', '.join(NAMES)} "
            f"(accelerate's trackers), or an empty list for none"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{key} names a tracker twice: {names}")
    return names


def available(names: Sequence[str], key: str = "--log-with", note: Callable[[str], None] = print) -> "list[str]":
    """The trackers of ``names`` to start: all of them, each installed.

    A tracker whose package is missing stops the command before any work, except the default alone
    (``[tensorboard]``) without TensorBoard installed, which is left out with a ``note`` (tracking does not change
    what is computed).

    Raises:
        ValueError: an unknown name, or a named tracker that is not installed (the message names the install); an
            MLflow tracking URI that is no MLflow store, a database URL that cannot be opened, lies in a harness
            folder, is a file store the installed MLflow refuses, or a server that does not answer
            (:func:`harness.training.tracker_checks.check_tracking_uri`); a W&B mode wandb does not know, or an
            online W&B without an API key or a server that answers
            (:func:`harness.training.tracker_checks.check_wandb`).
    """
    from accelerate.tracking import get_available_trackers

    names = check_names(names, key)
    if "mlflow" in names:
        check_tracking_uri(key=key)
    if "wandb" in names:
        check_wandb(key=key)
    have = {str(t) for t in get_available_trackers()}
    missing = [n for n in names if n not in have]
    if missing and tuple(names) == DEFAULT:
        note(f"TensorBoard is not installed: no training curves ({key}=[] silences this; {INSTALL})")
        return []
    if missing:
        raise ValueError(
            f"{key} names {', '.join(missing)}, not installed here: {INSTALL}, or leave "
            f"{'it' if len(missing) == 1 else 'them'} out of {key}"
        )
    return names


@contextlib.contextmanager
def keep_rng() -> Any:
    """Restore the global Python, NumPy and torch (CPU) random states on exit, so whatever a tracker draws while it
    starts (run ids, ...) changes nothing the training draws afterwards."""
    import numpy as np
    import torch

    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        yield
    random.setstate(py)
    np.random.set_state(npy)


def flat_params(tree: Any, prefix: str = "") -> "dict[str, Any]":
    """A nested config as one level of ``dotted.key -> value``: numbers, strings and booleans as they are; lists,
    ``None`` and empty mappings as their JSON text (trackers take scalars; MLflow stores text anyway)."""
    if isinstance(tree, dict) and tree:
        out: "dict[str, Any]" = {}
        for k, v in tree.items():
            out.update(flat_params(v, f"{prefix}{k}."))
        return out
    key = prefix[:-1]
    if isinstance(tree, (bool, int, float, str)):
        return {key: tree}
    return {key: json.dumps(tree, default=str)}


def mlflow_key(name: str) -> str:
    """A metric name as MLflow takes it (alphanumerics, ``_ - . : /`` and spaces): ``@`` becomes ``_at_``
    (``prec@1`` -> ``prec_at_1``), any other character ``_``."""
    return re.sub(r"[^\w\-.: /]", "_", name.replace("@", "_at_"))


def _mlflow_tracker(base: type) -> type:
    """accelerate's MLflow tracker, logging the metric names :func:`mlflow_key` makes of the harness's
    (``prec@1`` is refused by MLflow)."""

    class MLflowMetrics(base):
        def log(self, values: dict, step: Optional[int] = None, **kwargs: Any) -> None:
            super().log({mlflow_key(k): v for k, v in values.items()}, step=step, **kwargs)

    return MLflowMetrics


def one_line(text: str, limit: int = 200) -> str:
    """``text`` (an error's message) on one line, its whitespace runs as single spaces, and at most ``limit``
    characters: a longer one is cut at the last word boundary before, and ends in `` ...``."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 4]
    cut = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return cut.rstrip(" ,;:(") + " ..."


#: the tracker methods that talk to a tracking service or store (accelerate's GeneralTracker and its subclasses)
_GUARDED = (
    "start",
    "store_init_configuration",
    "log",
    "log_images",
    "log_table",
    "log_artifact",
    "log_artifacts",
    "finish",
)


def _guarded(base: type) -> type:
    """``base`` (an accelerate tracker class) whose calls to its service can never end a run: the first failure is
    reported once on stderr, the tracker is turned off, and the run goes on (its metrics stay in the run folder);
    ``finish`` is still tried, so that the tracker's open run is closed (and not closed later by its library's exit
    hook, against whatever store is configured then)."""

    def method(name: str):
        def call(self, *args: Any, **kwargs: Any) -> Any:
            if getattr(self, "_harness_off", False) and name != "finish":  # finish still closes what it opened
                return None
            try:
                return getattr(super(guarded, self), name)(*args, **kwargs)
            except Exception as e:  # noqa: BLE001 -- any failure of a tracking service: report it, go on
                if getattr(self, "_harness_off", False):
                    return None  # reported once already
                self._harness_off = True
                print(
                    f"[tracking] {getattr(self, 'name', base.__name__)} failed in {name} ({type(e).__name__}: "
                    f"{one_line(str(e))}); it is turned off and the run goes on: its metrics stay in the run folder",
                    file=sys.stderr,
                    flush=True,
                )
                return None

        call.__name__ = name
        return call

    guarded = type(base.__name__, (base,), {n: method(n) for n in _GUARDED if hasattr(base, n)})
    return guarded


def build(names: Sequence[str], project: str, run_name: str, logging_dir: "str | Path") -> list:
    """accelerate tracker objects for ``names``: TensorBoard in ``<logging_dir>/tb``, MLflow experiment
    ``MLFLOW_EXPERIMENT_NAME`` or ``project`` with run ``run_name``, W&B project ``WANDB_PROJECT`` or ``project``, run
    ``run_name``, files under ``WANDB_DIR`` or ``logging_dir``; the others as accelerate starts them by name. Each is
    guarded (:func:`_guarded`): a tracker that fails is reported once and turned off, and never ends the run."""
    from accelerate.tracking import LOGGER_TYPE_TO_CLASS, MLflowTracker, TensorBoardTracker, WandBTracker

    out = []
    for name in names:
        if name == "tensorboard":
            out.append(_guarded(TensorBoardTracker)(FOLDERS[0], str(logging_dir)))
        elif name == "mlflow":
            out.append(_guarded(_mlflow_tracker(MLflowTracker))(experiment_name=project, run_name=run_name))
        elif name == "wandb":
            extra = {} if os.environ.get("WANDB_DIR") else {"dir": str(logging_dir)}
            out.append(_guarded(WandBTracker)(os.environ.get("WANDB_PROJECT", project), name=run_name, **extra))
        else:
            cls = _guarded(LOGGER_TYPE_TO_CLASS[name])
            out.append(cls(project, str(logging_dir)) if cls.requires_logging_directory else cls(project))
    return out


def log_report(
    trackers: Sequence[Any], files: Sequence["str | Path"] = (), tables: "Optional[dict[str, tuple[list, list]]]" = None
) -> None:
    """The final report to each tracker that keeps such things: ``files`` as artefacts (MLflow
    ``log_artifact``; W&B ``run.save``, offline too, as ``<folder name>/<file>``), ``tables``
    (``{name: (columns, rows)}``) as W&B tables, and Markdown files as TensorBoard text. Main process only
    (accelerate's trackers check it themselves)."""
    for tracker in trackers:
        name = getattr(tracker, "name", "")
        if name == "mlflow":
            for f in files:
                tracker.log_artifact(str(f))
        elif name == "wandb" and getattr(tracker, "run", None) is not None:
            for f in files:  # under the folder's name: W&B keeps its own config.yaml beside them
                tracker.run.save(str(f), base_path=str(Path(f).resolve().parent.parent), policy="now")
            for table, (columns, rows) in (tables or {}).items():
                tracker.log_table(table, columns=list(columns), data=[list(r) for r in rows])
        elif name == "tensorboard":
            text = {f"report/{Path(f).name}": Path(f).read_text() for f in files if str(f).endswith(".md")}
            if text:
                tracker.log(text)


def log_model(trackers: Sequence[Any], folder: "str | Path") -> None:
    """A model folder (a run's ``save_pretrained`` export: ``model.safetensors``, ``config.json``, ``README.md``) to
    each tracker that keeps files, as Lightning's ``log_model=True`` logs checkpoints: MLflow ``log_artifact`` of each
    file under the folder's name (``<run artefacts>/pretrained/...``); W&B ``run.save`` of each file, offline too, as
    ``<folder name>/<file>`` in the run's files; never the folder's lock files (:data:`harness.io.LOCK_FILES`). Other trackers keep no files and get nothing. Main process only
    (accelerate's trackers check it themselves); an MLflow failure is reported and turned off like any other
    (:func:`_guarded`).

    Raises:
        FileNotFoundError: ``folder`` is not a folder.
    """
    from harness.io import LOCK_FILES

    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"no model folder at {folder}: export the model first (save_pretrained)")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name not in LOCK_FILES)  # not the export's lock
    for tracker in trackers:
        name = getattr(tracker, "name", "")
        if name == "mlflow":
            for f in files:
                tracker.log_artifact(str(f), artifact_path=folder.name)
        elif name == "wandb" and getattr(tracker, "run", None) is not None:
            for f in files:
                tracker.run.save(str(f), base_path=str(folder.resolve().parent), policy="now")


class Tracking:
    """Trackers of a command that has no training ``Accelerator`` of its own (``harness downstream``, ``harness
    fewshot``): started with the config, logged to, given the report, finished.

    Args:
        names: tracker names (checked and installed: :func:`available`).
        project: the MLflow experiment / W&B project (unless the environment names one).
        run_name: the tracker run's name.
        logging_dir: where TensorBoard (``tb/``) and W&B files go.
        config: the whole resolved config (nested), logged flattened as parameters.
    """

    def __init__(
        self, names: Sequence[str], project: str, run_name: str, logging_dir: "str | Path", config: dict
    ) -> None:
        self.trackers = build(names, project, run_name, logging_dir)
        self.config = flat_params(config)

    def __enter__(self) -> "Tracking":
        with keep_rng():
            for t in self.trackers:
                t.start()
                t.store_init_configuration(self.config)
        return self

    def log(self, values: "dict[str, float]", step: Optional[int] = None) -> None:
        for t in self.trackers:
            t.log(values, step=step)

    def report(
        self,
        files: Sequence["str | Path"] = (),
        tables: "Optional[dict[str, tuple[list, list]]]" = None,
    ) -> None:
        log_report(self.trackers, files, tables)

    def __exit__(self, *exc: Any) -> None:
        for t in self.trackers:
            t.finish()
