"""The settings of a shift evaluation: which corrupted and OOD sets, on how many images, with which seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from harness.data.config import SOURCES, STREAM_SOURCES
from harness.io import check_name
from harness.rules import SEED, check_rules, setting

SCHEMA = "harness.shift/1"
BUILT_IN_OOD = ("gaussian", "blobs")
CLEAN = "clean"
OOD_PREFIX = "ood-"
#: the data section's split keys, which an OOD set does not read: its images come from its own ``split=``
SPLIT_KEYS = ("eval_split", "train_split", "heldout_split")
#: the keys an evaluation reads (:data:`harness.data.eval_keys.EVAL_KEYS`) that an OOD set does not, and why (it is
#: only scored: its images, never its labels, shown to the model at the run's own view and in the run's batches)
OOD_UNREAD = {
    "label_set": "cifar10n's training labels, and an OOD set's labels are never read (only its images are scored)",
    "multilabel": "multi-label targets, and an OOD set's labels are never read (only its images are scored)",
    "eval_batch_size": "a loader's batch, and an OOD set's images are predicted in the run's own batches (its "
    "data.eval_batch_size)",
    "num_workers": "the pil loader's worker processes, and an OOD set's images are read in the shift process itself",
}


@dataclass
class ShiftSettings:
    """What to evaluate under shift (an experiment's ``shift`` section; ``harness shift`` options).

    Attributes:
        corruptions: ``all``, families (``noise``, ``blur``, ``weather``, ``digital``) or corruption
            names (:func:`harness.shift.corruptions.resolve`); ``[]`` for none.
        severities: integers in 1-5.
        examples: size of the fixed random subset of the evaluation split used for every set (0:
            the whole split).
        seed: draws the subset, seeds the corruptions and the built-in OOD sets.
        ood: OOD sets: ``gaussian``, ``blobs`` (built in), or ``NAME:key=value,...`` with data keys
            (``source``, ``path``, ``name``, ``split``, ...: :func:`ood_keys`; see
            :class:`harness.data.config.DataConfig`), other data than the run's own.
        split: the in-distribution split (default: the run's evaluation split).
    """

    corruptions: List[str] = field(default_factory=lambda: ["all"])
    severities: List[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    examples: int = setting(0, low=0, whole=True, note="0: the whole split")
    seed: int = setting(0, **SEED)
    ood: List[str] = field(default_factory=lambda: list(BUILT_IN_OOD))
    split: Optional[str] = None


def parse_ood(spec: str) -> "tuple[str, Dict[str, str]]":
    """``gaussian`` / ``blobs`` -> ``(name, {})``; ``NAME:key=value,key=value`` -> ``(NAME, {key: value})``.

    Raises:
        ValueError: an empty name, several names in one spec, a built-in's name given data keys, an unknown
            built-in without data keys, a malformed pair, a key given twice, or ``eval_split``/``train_split``/
            ``heldout_split`` (:data:`SPLIT_KEYS`: the set's split is ``split=``).
    """
    name, _, rest = str(spec).partition(":")
    name = name.strip()
    if not name:
        raise ValueError(
            f"OOD set {spec!r}: give a name (a plain word), e.g. gaussian, blobs or "
            "svhn:source=tfds,name=svhn_cropped,path=/data/tfds,split=test"
        )
    if "," in name:
        repeated = " ".join(f"--ood {n.strip()}" for n in name.split(",") if n.strip())
        raise ValueError(
            f"OOD set {spec!r} names several sets in one: repeat --ood for each set (e.g. {repeated}), or in a "
            "config give one list entry per set"
        )
    check_name(name, "OOD set name")
    keys: "Dict[str, str]" = {}
    for pair in filter(None, (p.strip() for p in rest.split(","))):
        k, eq, v = pair.partition("=")
        if not (k.strip() and eq):
            raise ValueError(
                f"OOD set {spec!r}: {pair!r} is not key=value; write e.g. "
                f"{name}:source=image_folder,path=/data/ood,split=test"
            )
        k = k.strip()
        if k in keys:
            raise ValueError(
                f"OOD set {spec!r} sets {k} twice ({k}={keys[k]} and {k}={v.strip()}): only the last would count; "
                f"keep one"
            )
        if k in SPLIT_KEYS:
            raise ValueError(
                f"OOD set {spec!r}: {k}={v.strip()} is not read for an OOD set, whose images come from split= "
                f"(default test): write split={v.strip()} instead of {k}={v.strip()}"
            )
        keys[k] = v.strip()
    if keys and name in BUILT_IN_OOD:
        raise ValueError(
            f"OOD set {spec!r} gives data keys to the name of the built-in set {name!r}, which would then hold "
            f"other images under its name: name your set otherwise (not {' or '.join(BUILT_IN_OOD)}), e.g. "
            f"{name}_data:{rest.strip()}"
        )
    if not keys and name not in BUILT_IN_OOD:
        raise ValueError(
            f"unknown built-in OOD set {name!r}: use {' or '.join(BUILT_IN_OOD)}, or give a data source, "
            f"e.g. {name}:source=image_folder,path=/data/{name},split=test"
        )
    return name, keys


def ood_keys() -> "tuple[str, ...]":
    """The data keys an OOD set reads (besides ``split``): those of any evaluation
    (:data:`harness.data.eval_keys.EVAL_KEYS`) but the split keys (:data:`SPLIT_KEYS`) and :data:`OOD_UNREAD`."""
    from harness.data.eval_keys import EVAL_KEYS

    return tuple(k for k in EVAL_KEYS if k not in SPLIT_KEYS and k not in OOD_UNREAD)


def ood_data(keys: "Dict[str, str]", run_data: Any, name: Optional[str] = None) -> "tuple[Any, str]":
    """The OOD source's :class:`DataConfig` (the run's view settings) and split; ``limit_eval`` limits that split
    whichever it is (the data's ``train_split`` too). ``name`` names the set in the messages.

    Raises:
        ValueError: unknown keys, values outside the data section's rules (:func:`harness.rules.check_rules`, as
            the upstream config is checked), a view size other than the model's, a key an OOD set does not read
            (not in :func:`ood_keys`: ``batch_size``, ``hflip``, ``label_noise``, ``limit_train``, ``label_set``...),
            or a key its source does not read (:data:`harness.data.config.SOURCE_KEYS`: ``path`` on digits).
    """
    from dataclasses import replace

    from harness.config import load_config
    from harness.data.config import DataConfig
    from harness.data.eval_keys import check_eval_keys

    keys = dict(keys)
    split = keys.pop("split", "test")
    for k in ("image_size", "eval_resize"):
        if k in keys and str(keys[k]) != str(getattr(run_data, k)):
            raise ValueError(
                f"OOD set {k}={keys[k]} differs from the model's data.{k}={getattr(run_data, k)}: OOD "
                f"images are shown to the model at its own input size; drop {k} from the OOD set"
            )
    view = {"image_size": run_data.image_size, "eval_resize": run_data.eval_resize, "loader": run_data.loader}
    if "source" not in keys:
        raise ValueError(f"OOD set keys {sorted(keys)}: name the data source, e.g. source=image_folder,path=/data/ood")
    try:
        cfg = load_config(DataConfig, None, [f"{k}={v}" for k, v in keys.items()], base=view)
        check_rules(cfg)  # the ranges the upstream config's data section is held to (e.g. limit_eval >= 0)
    except ValueError as e:
        raise ValueError(f"OOD set: {e} (keys are those of the data section, plus split)") from e
    try:
        pairs = [f"{k}={v}" for k, v in keys.items()]
        check_eval_keys(pairs, cfg, "harness shift for an OOD set", (split,), ood_keys(), OOD_UNREAD)
    except ValueError as e:
        raise ValueError(f"OOD set{'' if name is None else ' ' + repr(name)}: {e}") from None
    if split == cfg.train_split:  # build_split limits the data's train_split by limit_train
        cfg = replace(cfg, limit_train=cfg.limit_eval)
    if cfg.source == "manifest":  # an OOD set's labels are never read: a line of any label list (none too) is taken
        cfg = replace(cfg, multilabel=True)
    return cfg, split


def _check_other_data(name: str, cfg: Any, split: str, data: Any, eval_split: str) -> None:
    """An OOD set is not the run's own data: none of the images its ``split`` reads is in the run's evaluation,
    training or held-out split, compared as the images each reads (:func:`harness.data.splits.images_of`: the same
    source, and TFDS ``name``; a folder or manifest by the folder or file read, ``(path / split).resolve()``, so
    ``path=.,split=imf/train`` is the run's ``imf`` + ``train``: audit21 A21-05).

    Raises:
        ValueError: naming the set, the run's data, the rule and the fix.
    """
    from harness.data.splits import images_of, images_relation, split_location

    ood = images_of(cfg.source, cfg.name, cfg.path, split)
    own = {"eval_split": eval_split, "train_split": data.train_split, "heldout_split": data.heldout_split}
    for key, value in own.items():
        # the same split, or one holding the other (digits' all, an image folder holding the split's folder)
        if images_relation(ood, images_of(data.source, data.name, data.path, value)) is not None:
            what = {"eval_split": "evaluation", "train_split": "training", "heldout_split": "held-out"}[key]
            where = split_location(cfg.source, cfg.path, split)
            raise ValueError(
                f"OOD set {name!r} reads split {split} of data.source={cfg.source}{f' ({where})' if where else ''}, "
                f"which shares images with the run's own {what} data (data.{key}={value}): an OOD set holds images "
                f"the model was not trained to classify, and the run's own images scored as OOD give a meaningless "
                f"AUROC; point it at other data (another source or path), or drop the OOD set {name!r}"
            )


def _check_repeats(corruptions: "list[str]", severities: "list[int]") -> None:
    """No corruption named twice (``gaussian_noise,gaussian_noise``, or ``noise,gaussian_noise``: the family holds
    it) and no severity twice: each set is scored once, and the repeat would be dropped without a word. The names
    and severities are known ones (:func:`harness.shift.corruptions.resolve` checked them).

    Raises:
        ValueError: naming the option, the value given twice and the fix.
    """
    from harness.shift.corruptions import families, standard_corruptions

    given = [c for c in corruptions if c != "none"]
    fam, by = families(), {}
    for i, item in enumerate(given):
        for c in standard_corruptions() if item == "all" else fam.get(item, [item]):
            if c in by:
                held = [f"{h} holds it" for h in dict.fromkeys((by[c], item)) if h != c]
                repeated = item if item in given[:i] else c
                raise ValueError(
                    f"corruptions (--corruptions) {','.join(corruptions)!r} name {repeated} twice"
                    + (f" ({', '.join(held)})" if repeated == c and held else "")
                    + ": each corrupted set is scored once, and the repeat would be dropped without a word; name "
                    f"{repeated} once"
                )
            by[c] = item
    twice = [s for i, s in enumerate(severities) if s in severities[:i]]
    if twice:
        raise ValueError(
            f"severities (--severities) {','.join(map(str, severities))!r} name {twice[0]} twice: each corrupted set is "
            f"scored once, and the repeat would be dropped without a word; give each severity once"
        )


def check_shift_data(data: Any, folder: "str | Path" = "the run") -> None:
    """Refuse, before any work, a run (``folder``) whose data (:class:`~harness.data.config.DataConfig`) is read as a
    stream (``data.source=shards``): shift re-predicts the evaluation split's images by index
    (:func:`harness.run_streams.check_read_by_index`, the rule every command that does so calls; audit16 A16-05).

    Raises:
        ValueError: naming the run, the source, the rule and the fix.
    """
    from harness.run_streams import check_read_by_index

    check_read_by_index(
        data,
        folder,
        "harness shift",
        "re-predicts the evaluation split's images by index (the same corrupted images and --examples subset for "
        "every model)",
        f"leave {folder} out of harness shift (or drop an experiment's shift section): harness report reports it "
        "without the shift section; to evaluate it under shift, train it on the data source its shards were packed "
        "from (data.source and data.path of that source) and shift that run",
    )


def check_split(split: str, data: Any) -> None:
    """The in-distribution ``split`` the shift sets are drawn from is scored as the run's evaluation split, so it is
    held to the evaluation split's rule (:func:`harness.data.config.check_splits`: not the training split, nor the
    held-out split the calibration was fitted on, nor a split holding either; audit19 A19-13).

    Raises:
        ValueError: naming ``split``, the rule (check_splits' words, read as ``data.eval_split={split}``) and the fix.
    """
    import dataclasses

    from harness.data.config import check_splits

    try:
        check_splits(dataclasses.replace(data, eval_split=split))
    except ValueError as e:
        raise ValueError(
            f"split={split} (the experiment's shift.split, ShiftSettings.split: the split the shift sets are drawn "
            f"from, read as the run's evaluation split would be, so the rule of data.eval_split holds): {e}; or leave "
            f"the split unset (the run's evaluation split, {data.eval_split})"
        ) from None


def check_settings(
    settings: ShiftSettings, data: Any = None, folder: "str | Path" = "the run"
) -> "list[tuple[str, Any]]":
    """Validate settings before any work; return the sets ``[(name, spec)]``: ``clean``, the corrupted
    sets, then the OOD sets. With the run's ``data`` (:class:`~harness.data.config.DataConfig`), the
    image size and the OOD sets' data keys are checked too (their files are read only when used), and the data
    must be read by index (:func:`check_shift_data`; ``folder`` names the run).

    Raises:
        ValueError: unknown corruptions or severities, a corruption or a severity named twice (in a family too),
            ``none`` named with corruptions or with OOD sets, a negative ``examples``, malformed OOD sets, repeated OOD
            names, an OOD set of the run's own data (its source and one of its splits) or of a stream source
            (``source=shards``), a run's data read as a stream, images smaller than the corruptions accept, or a
            ``split`` that is (or holds) the run's training or held-out split (:func:`check_split`).
    """
    from harness.shift.corruptions import MIN_SIDE, resolve, set_name

    if data is not None:
        check_shift_data(data, folder)
    try:
        check_rules(settings)
    except ValueError as e:
        raise ValueError(f"shift.{e}") from None
    if data is not None and settings.split is not None:
        check_split(settings.split, data)
    named = [str(c).strip() for c in settings.corruptions if str(c).strip()]
    if "none" in named and len(named) > 1:
        others = ",".join(c for c in named if c != "none")
        raise ValueError(
            f"corruptions (--corruptions) {','.join(named)!r} names none (no corrupted set) with corruptions: give "
            f"none alone for the clean set only, or only the corruptions ({others})"
        )
    pairs = resolve(settings.corruptions, settings.severities)
    _check_repeats(named, list(settings.severities))
    image_size = None if data is None else data.image_size
    if pairs and image_size is not None and image_size < MIN_SIDE:
        raise ValueError(
            f"data.image_size {image_size} is below the {MIN_SIDE} px the corruptions need: evaluate "
            f"corruptions at data.image_size >= {MIN_SIDE}, or set corruptions: []"
        )
    sets: "list[tuple[str, Any]]" = [(CLEAN, {"kind": "clean"})]
    sets += [(set_name(c, s), {"kind": "corruption", "corruption": c, "severity": s}) for c, s in pairs]
    specs = [str(o).strip() for o in settings.ood if str(o).strip()]
    if "none" in specs and len(specs) > 1:
        raise ValueError(
            f"OOD sets (--ood) {specs!r} name none (no OOD set) beside other sets: give --ood none alone for no "
            "OOD set, or only the sets you want"
        )
    seen, oods = set(), []
    for spec in specs:  # harness shift passes --ood none alone as []
        name, keys = parse_ood(spec)
        if keys.get("source", "").strip() in STREAM_SOURCES:
            raise ValueError(
                f"OOD set {spec!r}: source={keys['source'].strip()} is read as a stream, and an OOD set's images are "
                f"drawn by index (a fixed random subset, the same for every model): give a source read by index "
                f"({', '.join(SOURCES)}), e.g. {name}:source=image_folder,path=/data/{name},split=test"
            )
        if name in seen:
            raise ValueError(f"OOD set name {name!r} is given twice: give each OOD set its own name")
        seen.add(name)
        if keys and data is not None:
            ood_cfg, ood_split = ood_data(keys, data, name)
            _check_other_data(name, ood_cfg, ood_split, data, settings.split or data.eval_split)
            oods.append((name, ood_cfg, ood_split))
        if name == "blobs" and not keys:  # a missing optional package is named before any work
            from harness.extras import require

            require("skimage.data", "the blobs OOD set")
        sets.append((OOD_PREFIX + name, {"kind": "ood", "name": name, "data": keys}))
    if data is not None:
        _check_imported_model(folder, data, settings.split, oods)
    return sets


def _check_imported_model(folder: Any, data: Any, split: Optional[str], oods: list) -> None:
    """For an imported run (``harness import``'s folder, whose data section is its evaluation data, not its model's
    training data): the shift's ``split`` and OOD sets (``[(name, data config, split)]``) share no image with the data
    its model was trained on (:func:`harness.importing.trained_data`: the model's record, or the run's data section
    where it is a run's own model.pt: audit21 A21-04), by the images each reads
    (:func:`harness.data.splits.images_of`). An upstream run's own training split is checked by
    :func:`check_split` and :func:`_check_other_data`.

    Raises:
        ValueError: naming the split or OOD set, the model's training data, the rule and the fix.
    """
    import dataclasses
    from pathlib import Path

    if not isinstance(folder, (str, Path)) or not (Path(folder) / "config.yaml").is_file():
        return
    from harness.data.splits import images_of, images_relation
    from harness.importing import trained_data
    from harness.model_identity import check_not_trained_on
    from harness.runs import run_config

    cfg = run_config(folder)
    if "imported" not in cfg:
        return
    trained, whence = trained_data(Path(folder) / "model.pt", cfg.get("trained_on") or None)
    if not trained or not trained.get("train_split"):
        return
    if split is not None:
        try:
            check_not_trained_on(
                trained, dataclasses.replace(data, eval_split=split, heldout_split=None), str(folder), whence
            )
        except ValueError as e:
            raise ValueError(f"split={split} (shift.split, the split the shift sets are drawn from): {e}") from None
    mine = images_of(trained.get("source"), trained.get("name"), trained.get("path"), trained["train_split"])
    for name, ood, ood_split in oods:
        if images_relation(images_of(ood.source, ood.name, ood.path, ood_split), mine) is not None:
            raise ValueError(
                f"OOD set {name!r} reads split {ood_split} of data.source={ood.source}, which shares images with the "
                f"data {folder}'s model was trained on (its {trained['train_split']} split of {trained['source']}, "
                f"{whence}): the model's own training images scored as OOD give a meaningless AUROC; point it at "
                f"other data (another source or path), or drop the OOD set {name!r}"
            )
