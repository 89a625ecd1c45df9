"""Optional dependencies: which extra of the ``het-harness`` distribution brings each one, and the one
import helper that names the extra when a module is missing.

The core install (``pip install het-harness``) holds what the head, the metrics, upstream training and
the reports need. Features that need a larger stack import it on first use through :func:`require`, so a
missing package is reported as the command that installs it, not as a bare ``ImportError``:

| extra | packages | for |
|---|---|---|
| ``vtab`` | tensorflow-datasets | VTAB-1k tasks from TFDS, ``data.source=tfds`` |
| ``shift`` | imagecorruptions-imaug, scikit-image | ``harness shift``: the corruptions, the blobs OOD set |
| ``shards`` | webdataset | ``harness data pack``, ``data.source=shards`` |
| ``track`` | tensorboard (and the other trackers) | training curves of ``harness upstream`` |
| ``slurm`` | submitit | ``--executor submitit-local`` and ``--executor slurm`` |
| ``metrics`` | torchmetrics | the streaming metrics (:mod:`harness.uncertainty.streaming`) |
| ``calibrate`` | netcal | ``harness report --calibrators`` (binning, isotonic, BBQ, beta, vector scaling) |
| ``prepare`` | tensorflow | preparing TFDS data sets (reading them needs no TensorFlow) |
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

DISTRIBUTION = "het-harness"

#: importable module -> (the extra that installs it, the package pip installs)
EXTRAS = {
    "tensorflow_datasets": ("vtab", "tensorflow-datasets"),
    "imagecorruptions": ("shift", "imagecorruptions-imaug"),
    "skimage": ("shift", "scikit-image"),
    "webdataset": ("shards", "webdataset"),
    "tensorboard": ("track", "tensorboard"),
    "submitit": ("slurm", "submitit"),
    "torchmetrics": ("metrics", "torchmetrics"),
    "netcal": ("calibrate", "netcal"),
    "tensorflow": ("prepare", "tensorflow"),
}


class MissingExtra(ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


def install_hint(extra: str) -> str:
    """The install commands of ``extra``: from PyPI, and from a checkout."""
    return f'pip install "{DISTRIBUTION}[{extra}]" (in a checkout: pip install -e ".[{extra}]")'


def missing_message(module: str, feature: str) -> str:
    """What :func:`require` says when ``module`` is not installed."""
    extra, package = EXTRAS[module.split(".")[0]]
    return (
        f"the {package} package is not installed (needed for {feature}; the core install leaves it out): "
        f"{install_hint(extra)}"
    )


def available(module: str) -> bool:
    """Whether ``module`` (a top-level module name) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, feature: str) -> ModuleType:
    """Import an optional ``module`` (e.g. ``"tensorflow_datasets"``, ``"skimage.data"``) for ``feature`` (what
    needs it, e.g. ``"reading VTAB-1k tasks from TFDS"``).

    Returns:
        The imported module.

    Raises:
        MissingExtra: ``module``'s top-level package is not installed; the message names the extra
            (:data:`EXTRAS`) and the ``pip install`` command. An ImportError raised *inside* an installed
            package (a broken installation) propagates unchanged.
        KeyError: ``module`` is not an optional dependency listed in :data:`EXTRAS` (a programming error).
    """
    top = module.split(".")[0]
    if top not in EXTRAS:
        raise KeyError(f"{module!r} is not an optional dependency of {DISTRIBUTION}: add it to harness.extras.EXTRAS")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != top:
            raise
        raise MissingExtra(missing_message(module, feature)) from e


def extra_packages() -> "dict[str, dict[str, str]]":
    """``{extra: {package: installed version or "not installed"}}`` for every extra of the installed distribution,
    read from its own metadata (``Requires-Dist`` with its ``extra == "..."`` markers), so that no package name is
    written twice; an extra that only names other extras (``all``, ``test``'s ``het-harness[all]``) lists its own
    packages only. Empty when the distribution is not installed (a source tree on ``sys.path``).
    """
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return {}
    out: "dict[str, dict[str, str]]" = {e: {} for e in dist.metadata.get_all("Provides-Extra") or []}
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.name == DISTRIBUTION:
            continue
        for extra in out:
            if req.marker.evaluate({"extra": extra}):
                try:
                    out[extra][req.name] = metadata.version(req.name)
                except metadata.PackageNotFoundError:
                    out[extra][req.name] = "not installed"
    return out
