"""What a path given as an output folder is before anything is written there: :func:`check_folder_path`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import NamedTuple


def check_folder_path(folder: "str | os.PathLike", what: str) -> Path:
    """``folder`` as a Path if it is a folder or does not exist yet; refuse a file and a broken symbolic link (a link
    to a path that does not exist: ``mkdir`` would raise a bare ``FileExistsError`` on it).

    Args:
        folder: the output folder given.
        what: who takes it, for the messages (``"save_pretrained"``).

    Raises:
        ValueError: a file, or a broken symbolic link (naming its target and the fixes).
    """
    folder = Path(folder)
    if folder.is_symlink() and not folder.exists():
        raise ValueError(
            f"{folder} is a broken symbolic link (to {os.readlink(folder)!r}, which does not exist): remove the link "
            f"or create the folder it points to, or give {what} another folder"
        )
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{folder} is a file: give {what} a folder")
    return folder


def expand_home(value: "str | os.PathLike | None", key: str) -> "str | None":
    """A path setting from a config (``output_dir``, ``data.path``, ``data.cache_dir``, ``model.pretrained_file``) or a
    file or folder option of the command line (``--out``, ``--out-root``, the ``OUT`` of harness data pack: ``key``
    starting with ``-``, or an argument's upper-case name) as a string with a leading ``~`` expanded to the home folder,
    as a shell would have done (a YAML file, a quoted override or option value, or one after ``--out=`` reaches the
    harness unexpanded, and a folder literally named ``~`` would be made); None passes. The one rule of every path a
    user gives (:class:`harness.path_options.LocalPath` applies it to the options).

    Raises:
        ValueError: a ``$NAME`` or ``${NAME}`` in it (no shell expands it here: a folder literally named so would be
            made), naming the key or option, the value and the fix (the value with this environment's variables
            written out, where they are all set).
    """
    if value is None:
        return None
    value = os.fspath(value)
    if "$" in value:
        written = os.path.expanduser(os.path.expandvars(value))
        example = f", e.g. {written}" if "$" not in written else ""
        if key.startswith("-") or key.isupper():  # a command-line option or argument
            after = f", nor after {key}=" if key.startswith("-") else ""
            raise ValueError(
                f"{key} {value!r} holds a $: nothing expands variables here (the shell does not in a quoted value"
                f"{after}), so it would name a file or folder literally called so: write the path out{example}"
            )
        raise ValueError(
            f"{key}={value!r} holds a $: nothing expands variables in a setting from a file or a quoted override, "
            f"so a folder literally named so would be made: write the folder out{example} (on a command line, "
            "unquoted, the shell expands $HOME)"
        )
    return os.path.expanduser(value) if value.startswith("~") else value


def check_no_control(value: str, key: str) -> str:
    """``value`` (a path setting) if it holds no control character (newline, tab, carriage return, NUL... ASCII 0-31
    and 127): a file name holding one is invisible in a listing and breaks line-based logs, and YAML folds a newline
    of a plain scalar into a space, so the folder made is not the one asked for.

    Raises:
        ValueError: naming the key, the value, the character and the fix.
    """
    bad = next((c for c in value if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        shown = repr(value) if len(value) <= 80 else repr(value[:80]) + "..."
        raise ValueError(
            f"{key} {shown} holds the control character {bad!r}: a path setting cannot hold one (a name with it is "
            "invisible in a listing, and a newline in an override is read as a space): remove it"
        )
    return value


#: what marks a folder as the output of a harness command: ``(kind, files)``, the folder holding all of ``files``
#: (a run of harness upstream or harness import: ``run.json``, or, as harness report and harness ensemble read one,
#: ``config.yaml`` with ``model.pt`` or ``predictions.npz``; an export: what ``save_pretrained`` writes)
OUTPUT_MARKS = (
    ("run", ("run.json",)),
    ("run", ("config.yaml", "model.pt")),
    ("run", ("config.yaml", "predictions.npz")),
    ("downstream sweep", ("sweep.json",)),
    ("downstream sweep", ("vtab.json",)),
    ("ensemble", ("ensemble.json",)),
    ("report", ("report.json",)),
    ("few-shot", ("fewshot.json",)),
    ("export", ("config.json", "model.safetensors")),
)
#: the lock file in an experiment's runs_root that one ``harness run`` holds from its checks to its report (the file
#: stays when it ends)
EXPERIMENT_LOCK = ".harness-run.lock"
#: what marks the folders of an experiment (``harness run``): ``<runs_root>/<name>`` by the clock of its sessions, and
#: ``runs_root`` by its lock file. No other command's output folder is one of them (:func:`check_not_other_output`);
#: unlike :data:`OUTPUT_MARKS` they are not refused as the parents of an output folder (the experiment's own runs,
#: sweeps and ensembles lie inside them)
EXPERIMENT_MARKS = (("experiment", ("sessions.json",)), ("experiment runs_root", (EXPERIMENT_LOCK,)))
#: what marks a data pack's split folder (``harness data pack``): the file and the ``format`` its JSON holds (a file
#: of that name alone is common, so its content is read); :mod:`harness.data.shard_index` reads the same two values
PACK_INDEX = ("index.json", "harness-webdataset-1")


class OutputKind(NamedTuple):
    """What marks a harness output folder: its ``kind`` and the ``files`` of :data:`OUTPUT_MARKS` it holds."""

    kind: str
    files: "tuple[str, ...]"

    @property
    def holds(self) -> str:
        """The marking files as a message names them (``"config.json and model.safetensors"``)."""
        return " and ".join(self.files)


def output_kind(folder: "str | os.PathLike") -> "OutputKind | None":
    """What marks ``folder`` as a harness output folder (:data:`OUTPUT_MARKS`: ``OutputKind("run", ("run.json",))``;
    a data pack's split folder by its index, :data:`PACK_INDEX`), or None for any other folder (or a path that is no
    folder)."""
    folder = Path(folder)
    kind = _marked(folder, OUTPUT_MARKS)
    if kind is not None:
        return kind
    index = folder / PACK_INDEX[0]
    if index.is_file():
        try:
            fmt = json.loads(index.read_text(encoding="utf-8")).get("format")
        except (OSError, ValueError, AttributeError):  # not JSON, not an object: not a pack's index
            fmt = None
        if fmt == PACK_INDEX[1]:
            return OutputKind("data pack split", (PACK_INDEX[0],))
    return None


def harness_folder_kind(folder: "str | os.PathLike") -> "OutputKind | None":
    """What marks ``folder`` as a folder a harness command wrote: another command's output (:func:`output_kind`) or an
    experiment's folder (:data:`EXPERIMENT_MARKS`); None for any other folder."""
    return output_kind(folder) or _marked(Path(folder), EXPERIMENT_MARKS)


def _marked(folder: Path, marks: "tuple[tuple[str, tuple[str, ...]], ...]") -> "OutputKind | None":
    """The first of ``marks`` (``(kind, files)``) whose files ``folder`` holds all of, else None."""
    for kind, files in marks:
        if all((folder / f).is_file() for f in files):
            return OutputKind(kind, files)
    return None


def check_not_other_output(folder: "str | os.PathLike", what: str, flag: str, writes: "tuple[str, ...]" = ()) -> None:
    """``folder`` is not the output folder of another harness command (a run, a sweep, an ensemble, a report, a
    few-shot result, an export: :func:`output_kind`; an experiment's folders, :data:`EXPERIMENT_MARKS`, audit18
    A18-03), even with ``--overwrite``, which adds a command's files beside
    the user's own, never beside another command's output (one folder, one command's output). A folder marked by a
    file the command writes itself (``writes``) is of its own kind, left to the command's own check.

    Raises:
        ValueError: naming ``flag``, the folder, what marks it and the fix.
    """
    kind = harness_folder_kind(folder)
    if kind is not None and not set(kind.files) & set(writes):
        raise ValueError(
            f"{flag} {folder} is the {kind.kind} folder of another harness command (it holds {kind.holds}): {what} writes "
            f"a folder of its own, even with --overwrite (one folder holds one command's output): choose another "
            f"{flag}"
        )


def _shown(path: Path) -> str:
    """``path`` relative to the working folder where it lies inside it, else absolute."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def check_outside_outputs(
    folder: "str | os.PathLike",
    option: str,
    writer: str,
    inputs: "dict[Path, str] | None" = None,
    shown: "str | None" = None,
    fix: "str | None" = None,
) -> Path:
    """An output folder is a folder of its own: never inside the folder of a harness command's output (a run, an
    export, a downstream sweep, an ensemble, a report, a few-shot result: :func:`output_kind`), whose files it would
    then be mixed with, nor inside a folder the command reads (``inputs``). The one rule of every writer's output
    folder (harness upstream's ``output_dir``, import, fewshot, downstream and ensemble's ``--out``, report's
    ``--out-root``), checked before any work. ``folder`` itself being such a folder is the writers' own check (their
    own earlier output is taken, another's refused: :func:`harness.io.check_output_folder`), as is the parent of a
    run; ``folder`` being one of the ``inputs`` itself is refused here (audit23 A23-06: ``--overwrite`` wrote a pack
    beside the class folders of the split it read). Paths are compared resolved (``runs/a/../a/x`` is inside
    ``runs/a``).

    Args:
        folder: the output folder given (it may not exist yet).
        option: the option or key that chose it (``--out``, ``--out-root``, ``output_dir``).
        writer: the command, for the message (``harness import``).
        inputs: resolved folders the command reads -> how the message names them (``"the member"``).
        shown: how the message names the option and its value (default ``--out DIR`` or ``output_dir=DIR``).
        fix: the message's fix (default: a folder for ``option`` outside the one it is inside, e.g. its sibling);
            ``{folder}`` in it is replaced by that folder.

    Returns:
        ``folder`` as a Path.

    Raises:
        ValueError: naming the option, the value, the folder it is inside with what marks it, and the fix.
    """
    folder = Path(folder)
    if shown is None:
        shown = f"{option} {folder}" if option.startswith("-") else f"{option}={folder}"
    real = folder.resolve()
    for place in (real, *real.parents):
        kind = output_kind(place) if place != real else None  # the folder itself: the writer's own check
        if inputs and place in inputs:
            where = f"{inputs[place]} {_shown(place)}" + (" itself" if place == real else "")
        elif kind is not None:
            where = f"the {kind.kind} folder {_shown(place)} (it holds {kind.holds})"
        else:
            continue
        sibling = place.parent / (real.name if place != real else f"{real.name}_out")
        raise ValueError(
            f"{shown} is {'' if place == real else 'inside '}{where}, which would then hold {writer}'s files beside "
            "its own (an output folder holds only the files of the command that writes it): "
            + (fix or f"give {option} a folder outside it, e.g. {_shown(sibling)}").replace("{folder}", _shown(place))
        )
    # a class folder of an image folder that no input names (audit26 A26-16); a harness folder's plots are its own
    among = images_in(real) if output_kind(real) is None else None
    if among is not None:
        place, image = among
        raise ValueError(
            f"{shown} is {'' if place == real else 'inside '}{_shown(place)}, a folder of images ({image.name} is one): "
            f"an image folder reads every image under a class folder, so {writer}'s image files (its reliability "
            f"plots) would join that data set, --overwrite or not; give {option} a folder outside that image folder "
            "(a folder of its own holds no images, nor is a split or class folder of one)"
        )
    return folder


def images_in(real: Path) -> "tuple[Path, Path] | None":
    """``(real, image)`` when the folder ``real`` (resolved) directly holds an image file (torchvision's
    ``IMG_EXTENSIONS``, what an image folder's class folder is read by), one such file; None when it does not (or does
    not exist yet). Its parent is not looked at: a working folder holding a picture is no data set (a new folder
    inside a class folder is not seen). The harness's own plots (``reliability_*.png``, which a report and a sweep
    write into their folder) are not counted: a rerun into that folder (a sweep's resume) is not refused for them.
    Cost: one folder listing, stopped at its first image."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    def is_image(e: os.DirEntry) -> bool:
        own = e.name.startswith("reliability_") and e.name.endswith(".png")
        return not own and e.name.lower().endswith(IMG_EXTENSIONS) and e.is_file()

    try:
        with os.scandir(real) as entries:
            image = next((e for e in entries if is_image(e)), None)
    except OSError:  # not there (yet), not a folder, not readable
        return None
    return None if image is None else (real, Path(image.path))
