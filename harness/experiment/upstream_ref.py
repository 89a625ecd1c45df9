"""Where an experiment's ``upstream_config`` is: the one rule for reading its value.

- ``builtin:NAME``: the package's built-in config ``NAME`` (``upstream/configs``);
- an absolute path (a leading ``~`` expanded): that file;
- a path with a folder part (``./NAME``, ``sub/NAME``, ``../NAME``): relative to the file that names it (the
  experiment file, or the file of its ``base:`` chain that sets it), as ``base:`` is; given on the command line or in
  Python, relative to the current folder;
- a bare name (``digits_base.yaml``): the file of that name beside the experiment file, else the built-in of that
  name; both existing is refused (the user's file would shadow the built-in, or the reverse, without a word).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

#: the spelling of a built-in config when a file beside the experiment has its name
BUILT_IN = "builtin:"


def built_in_configs() -> Path:
    """The folder of the package's built-in upstream configs (``upstream/configs``)."""
    import harness.upstream as upstream

    return Path(upstream.__file__).parent / "configs"


def upstream_config_path(ref: str, folder: "Optional[Path]" = None, where: str = "") -> Path:
    """The upstream config file ``ref`` (an experiment's ``upstream_config``) names (see the module's rule).

    Args:
        ref: the value.
        folder: the folder ``ref`` is relative to (the folder of the file that names it); None: the current folder
            (a value from the command line or from Python).
        where: where the value was written, for the messages (e.g. ``in exps/e.yaml``; empty: not said).

    Returns:
        The file's path (absolute).

    Raises:
        ValueError: an empty value, a URL, a ``$`` or a control character (:func:`harness.io.check_location`,
            :func:`harness.folder_paths.expand_home`), or a bare name that is both a file beside the experiment and a
            built-in config (naming both and the two explicit spellings).
        FileNotFoundError: no such file (naming where it was looked for).
    """
    from harness.folder_paths import expand_home
    from harness.io import check_location

    at = f" ({where})" if where else ""
    ref = str(ref or "").strip()
    if not ref:
        raise ValueError(
            f"upstream_config is empty{at}: give an upstream config, e.g. upstream_config: digits_base.yaml"
        )
    if ref.startswith(BUILT_IN):
        name = ref[len(BUILT_IN) :].strip()
        target = built_in_configs() / name
        if "/" in name or "\\" in name or not name or not target.is_file():
            raise FileNotFoundError(
                f"upstream_config={ref}{at}: {name!r} is not a built-in config (builtin:NAME takes one of "
                f"{_built_ins()}): give one of them, or a path to your file"
            )
        return target.resolve()
    path = Path(expand_home(check_location(ref, "upstream_config"), "upstream_config"))
    local = (path if path.is_absolute() else Path(folder or ".") / path).resolve()
    built_in = built_in_configs() / ref
    bare = not path.is_absolute() and "/" not in ref and "\\" not in ref
    if bare and local.is_file() and built_in.is_file() and local != built_in.resolve():
        place = "in the current folder" if folder is None else "beside the experiment file"
        raise ValueError(
            f"upstream_config={ref}{at} names both {local}, {place}, and the built-in config {ref} "
            f"({built_in_configs()}): a bare name is the file {place}, else the built-in, so one would shadow the "
            f"other without a word: write upstream_config: ./{ref} for your file, or upstream_config: {BUILT_IN}{ref} "
            "for the built-in"
        )
    if local.is_file():
        return local
    if bare and built_in.is_file():
        return built_in.resolve()
    relative = "" if path.is_absolute() else f" (relative to {'the current folder' if folder is None else folder})"
    looked = f"neither {local}{relative} nor a built-in config ({_built_ins()})" if bare else f"no {local}{relative}"
    raise FileNotFoundError(
        f"upstream_config={ref}{at} names no file: {looked}: fix the path (a path is relative to the file that names "
        "it, as base: is), or give a built-in's name"
    )


def _built_ins() -> str:
    """The built-in configs' names, the first 12 (the folder after them)."""
    names = sorted(f.name for f in built_in_configs().glob("*.yaml"))
    return ", ".join(names[:12]) + (f", ... in {built_in_configs()}" if len(names) > 12 else "")


def setting_file(path: Path, key: str) -> "Optional[Path]":
    """The file of the chain ``path`` and its ``base:`` files whose own settings hold ``key`` (the last one read, as
    the settings are merged: ``path`` before its base); None if none does (the key keeps its default). The chain was
    read and checked already (:func:`harness.config.load_config`)."""
    from omegaconf import OmegaConf

    layer = OmegaConf.load(path)
    if key in layer:
        return path
    base = layer.get("base")
    return setting_file(path.parent / str(base), key) if base else None
