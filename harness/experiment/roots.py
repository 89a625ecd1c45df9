"""An experiment's roots are not inside another experiment's folder (audit19 A19-17)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def check_outside_experiments(exp: Any) -> None:
    """``runs_root`` and ``results_root`` of ``exp`` lie neither in nor inside another experiment's folder
    (``<runs_root>/<name>``, marked by its clock: :data:`harness.folder_paths.EXPERIMENT_MARKS`, kind
    ``experiment``), whose runs or report would then hold this experiment's (moving or removing that folder to rerun
    its study would take this one's runs with it). This experiment's own folder may hold its results_root; several
    experiments may share one runs_root (it is marked by the lock only). Paths are compared resolved.

    Raises:
        ValueError: naming the key, its value, the other experiment's folder and the fix.
    """
    from harness.folder_paths import EXPERIMENT_MARKS

    files = [f for kind, marks in EXPERIMENT_MARKS if kind == "experiment" for f in marks]
    own = (Path(exp.runs_root) / exp.name).resolve()
    for key in ("runs_root", "results_root"):
        value = Path(getattr(exp, key)).resolve()
        for place in (value, *value.parents):
            if place == own or not files or not all((place / f).is_file() for f in files):
                continue
            raise ValueError(
                f"{key}={getattr(exp, key)} is {'' if place == value else 'inside '}the folder of another experiment, "
                f"{place} (it holds {' and '.join(files)}: experiment {place.name!r} of runs_root {place.parent}), "
                f"whose runs would then hold this experiment's folders (moving or removing it to rerun that study "
                f"would take them with it): give {key} a folder outside {place}, e.g. {key}={place.parent} (several "
                "experiments may share one runs_root)"
            )
