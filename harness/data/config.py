"""The data config: which source to read, where, and how to feed it (the ``data`` section of a run).

The readers that act on it: :func:`harness.data.sources.build_split`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from harness.rules import MAX_IMAGE_SIDE, check_unread_keys, setting

SOURCES = ("digits", "cifar10n", "image_folder", "tfds", "manifest")
#: sources read as a stream (no random access): WebDataset tar shards, :mod:`harness.data.shards`
STREAM_SOURCES = ("shards",)
#: how a split is decoded and augmented (``data.loader``; :mod:`harness.data.batched`)
LOADERS = ("auto", "array", "pil")
#: cifar10n's training label sets (``data.label_set``; its ``<name>_label`` columns, :mod:`harness.data.sources`)
LABEL_SETS = ("clean", "aggre", "random1", "random2", "random3", "worse")
#: the data keys that say which data a split is (the source, where it is, its labels and classes) and where and how its
#: images may be read from: every reader of a split reads them (a run; an evaluation,
#: :data:`harness.data.eval_keys.EVAL_KEYS`; ``harness data pack``, :data:`harness.data.pack_source.PACK_KEYS`)
WHICH_DATA_KEYS = (
    "source",
    "path",
    "name",
    "heldout_split",
    "label_set",
    "multilabel",
    "num_classes",
    "image_key",
    "label_key",
    "cache_dir",
    "allow_outside_root",
)
#: sources whose splits hold their images in one array (``ImageDataset.pixels``): ``data.loader=auto`` reads them with
#: the ``array`` loader, and ``input_dependent`` label noise needs them
ARRAY_SOURCES = ("digits", "cifar10n")
#: the data keys each source reads that some other does not (:func:`check_data`; :mod:`harness.data.sources`,
#: :mod:`harness.data.packed_split`, :mod:`harness.data.shards`): set for a source that does not read it, such a key is
#: refused rather than saved in the run's config and ignored
SOURCE_KEYS = {
    "digits": (),
    "cifar10n": ("path", "label_set", "multilabel"),
    "image_folder": ("path", "allow_outside_root"),
    "tfds": ("path", "name", "image_key", "label_key"),
    "manifest": ("path", "multilabel", "allow_outside_root"),
    "shards": ("path", "multilabel", "shuffle_buffer"),
}


@dataclass
class DataConfig:
    """Which data to read and how to feed it.

    Attributes:
        source: one of ``digits``, ``cifar10n``, ``image_folder``, ``tfds``, ``manifest``; or ``shards``
            (WebDataset tar shards written by ``harness data pack``, read as a stream by
            :func:`harness.data.shards.shard_loader`, not by :func:`~harness.data.sources.build_split`).
        path: data location (cifar10n folder, image folder root, manifest file, TFDS data_dir; for
            ``shards`` a folder holding ``<split>/index.json``, or a shard pattern such as
            ``/data/in21k/{split}-{000000..000999}.tar`` beside an ``index.json``).
        name: TFDS dataset name (``imagenet2012``, ``imagenet21k``...).
        train_split, eval_split: split names (per source; see :func:`harness.data.sources.build_split`).
        heldout_split: optional held-out split (e.g. digits ``val``) on which the final model's
            predictions are also saved, for post-hoc calibration (temperature scaling).
        label_set: cifar10n training labels (``clean``, ``aggre``, ``random1..3``, ``worse``); no other source
            reads it (:func:`check_data`).
        multilabel: the targets are label sets (multi-hot ``[K]``, a sigmoid model's) rather than single class
            ids; read by cifar10n (the set of the three annotators' labels), manifest (each line's ``labels`` list
            as a set, ``[]`` an image of no class; false, the default, reads exactly one label a line as the
            class and refuses a line of none or several, :mod:`harness.data.manifest`) and shards (single labels
            read as one-label sets); any other source refuses it (:data:`SOURCE_KEYS`).
        num_classes: manifest / tfds override of K (default: read from the data).
        image_key, label_key: TFDS feature names.
        label_noise: synthetic noise on single-label training data, see ``harness.data.noise`` (``{}`` or
            null: none).
        image_size, eval_resize, crop_scale, hflip: augmentation (see ``harness.data.transforms``).
        crop_padding: p > 0 replaces the random resized crop by a random translation of up to p
            pixels (``RandomCrop(size, padding=p)``, the CIFAR augmentation of He et al. 2016); below
            ``image_size`` (:func:`check_data`).
        loader: ``array`` decodes the split once into a uint8 array (cached on disk for zip
            sources) and augments whole batches as tensor ops (``harness.data.batched``); ``pil``
            decodes and transforms each image on every epoch, in ``num_workers`` processes (any
            source, any image size); ``auto`` takes ``array`` where the source supports it
            (digits, cifar10n) and ``pil`` elsewhere.
        cache_dir: folder of the decoded-image cache (default ``$HARNESS_CACHE`` or ``~/.cache/harness``).
        allow_outside_root: let manifest entries name images outside the manifest's folder (``../``, absolute
            paths), and an image folder's links point out of ``path``; off by default, so a list or a folder from
            elsewhere cannot read arbitrary files.
        batch_size, eval_batch_size, num_workers: loader settings (batch per process; workers of
            the ``pil`` loader).
        limit_train, limit_eval: use only the first N examples (quick runs); 0 = all.
        shuffle_buffer: ``shards``: examples held in each loader worker's shuffle buffer (0: shard
            order shuffled only).
    """

    source: str = setting("digits", choices=SOURCES + STREAM_SOURCES)
    path: Optional[str] = None
    name: Optional[str] = None
    train_split: str = "train"
    eval_split: str = "test"
    heldout_split: Optional[str] = None
    label_set: str = setting("clean", choices=LABEL_SETS)
    multilabel: bool = False
    num_classes: Optional[int] = setting(None, low=1, whole=True, note="or null: read from the data")
    image_key: str = "image"
    label_key: str = "label"
    label_noise: Optional[dict] = field(default_factory=dict)
    image_size: int = setting(32, low=1)
    eval_resize: Optional[int] = None
    crop_scale: float = setting(0.08, low=0, low_open=True, high=1)
    hflip: bool = True
    crop_padding: int = setting(0, low=0, high=MAX_IMAGE_SIDE, whole=True, note="0 = none")
    loader: str = setting("auto", choices=LOADERS)
    cache_dir: Optional[str] = None
    allow_outside_root: bool = False
    batch_size: int = setting(64, low=1)
    eval_batch_size: int = setting(256, low=1)
    num_workers: int = setting(0, low=0, note="0 = none")
    limit_train: int = setting(0, low=0, note="0 = all")
    limit_eval: int = setting(0, low=0, note="0 = all")
    shuffle_buffer: int = setting(1000, low=0, whole=True, note="0: shard order shuffled only")

    def __post_init__(self) -> None:
        """``label_noise: null`` means no noise (as ``{}``); ``path`` and ``cache_dir`` are local paths or
        ``file:``/``http(s):`` URLs (:func:`harness.io.check_location`: a ``pipe:`` URL would run a shell command),
        a leading ``~`` expanded and a ``$`` refused (:func:`harness.folder_paths.expand_home`: a YAML file or a quoted
        override is not expanded by a shell, and a folder literally named ``~`` would be made)."""
        from harness.folder_paths import expand_home
        from harness.io import check_location

        if self.label_noise is None:
            self.label_noise = {}
        self.path = expand_home(check_location(self.path, "data.path"), "data.path")
        self.cache_dir = expand_home(check_location(self.cache_dir, "data.cache_dir"), "data.cache_dir")


def loader_kind(d: DataConfig) -> str:
    """The loader that reads ``d``'s splits: ``shards`` for a stream source, ``array`` for ``data.loader=array`` or
    ``auto`` with an :data:`ARRAY_SOURCES` source, else ``pil`` (:func:`harness.data.batched.make_loader`)."""
    if d.source in STREAM_SOURCES:
        return "shards"
    if d.loader == "array" or (d.loader == "auto" and d.source in ARRAY_SOURCES):
        return "array"
    return "pil"


def check_noise_models(d: DataConfig) -> None:
    """No synthetic ``label_noise`` over CIFAR-10N's human label sets: two noise models stacked (neither the CIFAR-10N
    benchmark nor the synthetic study). The rule of a run (:func:`check_data`) and of a pack
    (:func:`harness.data.pack_source.source_config`), whose shards would keep the stacked labels.

    Raises:
        ValueError: naming both keys, their values and the two fixes.
    """
    kind = (d.label_noise or {}).get("kind", "none")
    if d.source == "cifar10n" and d.label_set != "clean" and kind != "none":
        raise ValueError(
            f"data.label_noise.kind={kind} with data.label_set={d.label_set}: the synthetic noise would flip the "
            f"CIFAR-10N human labels ({d.label_set}) again, two noise models stacked (neither the CIFAR-10N benchmark "
            "nor the synthetic study, and a report names one); set data.label_noise=null for the human labels alone, "
            "or data.label_set=clean for synthetic noise on the clean labels"
        )


def check_data(d: DataConfig) -> None:
    """The rules that relate data settings (each one's range is declared beside it): a key of one source
    (:data:`SOURCE_KEYS`: ``path``, ``label_set``, ``multilabel``, ``name``, ...) set away from its default only for a
    source that reads it; the image sizes (:func:`_check_image_sizes`: ``eval_resize`` at least ``image_size``, its
    centre crop no narrower than the training crops); ``crop_scale`` only without ``crop_padding`` (the random
    translation replaces the random resized crop); ``num_workers`` only where the ``pil`` or the shard loader reads the data (:func:`loader_kind`);
    ``crop_padding`` below ``image_size`` (a shift by a whole image can leave nothing of it in the crop, and the padded
    batch grows as (side + 2p)²); for ``shards``, a path and none of the settings that need the split in memory;
    three different splits for training, evaluation and held-out predictions (:func:`check_splits`); no synthetic
    ``label_noise`` over CIFAR-10N's human label sets (:func:`check_noise_models`).

    Raises:
        ValueError: naming the key, its value, the rule and the fix.
    """
    check_unread_keys(d, "data", "source", SOURCE_KEYS, "source")
    check_splits(d)
    check_noise_models(d)
    if d.source in STREAM_SOURCES:
        _check_shards(d)
    _check_image_sizes(d)
    if d.crop_padding >= d.image_size:
        raise ValueError(
            f"data.crop_padding={d.crop_padding} must be below data.image_size={d.image_size}: a random shift by up "
            f"to {d.crop_padding} px can move the whole image out of the crop (CIFAR's augmentation shifts 32 px "
            "images by 4); give a few pixels, or 0 for the random resized crop"
        )
    default = DataConfig()
    if d.crop_padding and d.crop_scale != default.crop_scale:
        raise ValueError(
            f"data.crop_scale={d.crop_scale:g} is read only by the random resized crop, which "
            f"data.crop_padding={d.crop_padding} replaces by a random translation: remove data.crop_scale (where a "
            f"config file sets it, data.crop_scale={default.crop_scale:g} restores its default), or set "
            "data.crop_padding=0 for the random resized crop"
        )
    if d.num_workers and loader_kind(d) == "array":
        raise ValueError(
            f"data.num_workers={d.num_workers} is read only by the pil loader, and this run reads "
            f"data.source={d.source} with the array loader (data.loader={d.loader}: whole batches augmented as tensor "
            "ops in the training process): remove data.num_workers, or set data.loader=pil"
        )


def _check_image_sizes(d: DataConfig) -> None:
    """``image_size`` and ``eval_resize`` at most :data:`~harness.rules.MAX_IMAGE_SIDE`, ``eval_resize`` at least
    ``image_size`` (the evaluation resizes the shorter side to it, then centre-crops ``image_size``), and a given
    ``eval_resize`` shows the evaluation no less of each image than training sees: the random resized crop keeps at
    least ``crop_scale`` of the area (``sqrt(crop_scale)`` of the side), the evaluation's centre crop
    ``image_size / eval_resize`` of the side (audit16 A16-02: a config's ``eval_resize: 32`` kept with
    ``data.image_size=16`` evaluated the middle quarter of each digit, a view never trained on). Not with
    ``crop_padding`` (a random translation at full scale), nor with ``eval_resize`` null (``image_size / 0.875``).

    Raises:
        ValueError: naming the keys, their values, the rule and the sizes to give.
    """
    if d.image_size > MAX_IMAGE_SIDE:
        raise ValueError(
            f"data.image_size={d.image_size} exceeds {MAX_IMAGE_SIDE} px: a batch of {d.batch_size} such "
            f"images would not fit in memory; use the model's input size (e.g. 32, 224)"
        )
    if d.eval_resize is None:
        return
    if not d.image_size <= d.eval_resize <= MAX_IMAGE_SIDE:
        raise ValueError(
            f"data.eval_resize={d.eval_resize} must be at least data.image_size={d.image_size} (the evaluation "
            f"resizes the shorter side to it, then centre-crops data.image_size) and at most {MAX_IMAGE_SIDE}: "
            f"give a size in [{d.image_size}, {MAX_IMAGE_SIDE}], or null for data.image_size / 0.875"
        )
    widest = int(d.image_size / d.crop_scale**0.5 + 1e-9)  # the largest eval_resize whose crop keeps sqrt(crop_scale)
    if not d.crop_padding and d.eval_resize > widest:
        raise ValueError(
            f"data.eval_resize={d.eval_resize} with data.image_size={d.image_size}: the evaluation's centre crop keeps "
            f"{d.image_size / d.eval_resize:.0%} of each image's side, less than any training crop "
            f"(data.crop_scale={d.crop_scale:g} keeps at least {d.crop_scale**0.5:.0%}), so the model is scored on a "
            f"view it never trained on; give data.eval_resize in [{d.image_size}, {widest}], or data.eval_resize=null "
            "(data.image_size / 0.875; where a config file sets eval_resize for another image_size, set both)"
        )


def check_splits(d: DataConfig, training: bool = True) -> None:
    """The training, evaluation and held-out splits are three different splits with no image in common (audit12
    A12-01; audit19 A19-01: by the images they hold, :func:`harness.data.splits.split_relation`, not by name: digits'
    ``all`` holds ``train``, ``val`` and ``test``, cifar10n's ``train`` holds ``train45k`` and ``val5k``; audit20
    A20-01: TFDS slices of one split by their ranges, ``train[:80%]`` shares images with ``train[70%:]``; audit21
    A21-05: a folder's or manifest's splits by the folder or file read under ``data.path``, ``../imf/train`` or an
    absolute path is ``train``; A21-07: a pack's splits as the source splits their index.json records, a pack of
    digits' ``all`` holds one of its ``test``): a held-out
    split that is (or shares images with) the evaluation split fits the calibration (temperature, τ) on the test
    images, one that is the training split on images the model has fit; evaluating on the training split reports
    training accuracy as test accuracy. Without ``training`` (an evaluation of a model trained elsewhere: ``harness
    import``, audit13 A13-15) only the held-out and evaluation splits are compared.

    Raises:
        ValueError: naming both keys, both splits, how they relate (and what each reads, where its name does not say
            it) and the fix.
    """
    from harness.data.splits import read_as, split_relation

    path = getattr(d, "path", None)  # a card's trained_on records none (harness.export_rules): compared by name
    pairs = [("eval_split", "train_split"), ("heldout_split", "eval_split"), ("heldout_split", "train_split")]
    for key, other in pairs if training else pairs[1:2]:
        a, b = getattr(d, key), getattr(d, other)
        how = split_relation(d.source, a, b, path)
        if how is not None:
            reads = [(k, read_as(d.source, path, v)) for k, v in ((key, a), (other, b))]
            # what each reads, where their names do not tell how they relate (../imf/train, a pack's folder)
            shown = (
                "; ".join(f"data.{k} reads {r}" for k, r in reads if r) if split_relation(d.source, a, b) != how else ""
            )
            raise split_refusal(key, a, other, b, how, shown)


def split_refusal(key: str, a: str, other: str, b: str, how: str, reads: str = "") -> ValueError:
    """The refusal of ``data.<key>=a``, which relates to ``data.<other>=b`` as ``how``
    (:func:`harness.data.splits.split_relation`), ``reads`` saying what each split reads where its name does not
    (:func:`harness.data.splits.read_as`): the words of :func:`check_splits`, which
    :func:`harness.model_identity.check_not_trained_on` shares (``other`` then the model's training split)."""
    same = {
        "is": f"data.{key}={a} is also data.{other}" + (f"={b}" if a != b else ""),
        "holds": f"data.{key}={a} holds data.{other}={b}'s images",
        "is part of": f"data.{key}={a}'s images are part of data.{other}={b}",
    }.get(how, f"data.{key}={a} {how} data.{other}={b}") + (f" ({reads})" if reads else "")
    if key == "eval_split":
        return ValueError(
            f"{same}: the model would be scored on the images it was trained on (training accuracy reported as "
            f"test accuracy): give a split of its own, sharing no image with data.{other} (digits: test; "
            "cifar10n: test; tfds: another split, or slices whose percent ranges do not overlap, e.g. train[:90%] "
            "and train[90%:]; an image folder, manifest or pack: another folder, file or pack naming none of its images, "
            "neither linked (symbolic or hard links) nor listed again)"
        )
    role = "evaluation" if other == "eval_split" else "training"
    return ValueError(
        f"{same}: the held-out predictions (on which temperature scaling and a τ grid are fitted) would be "
        f"the {role} images, not held out: give a split of its own (digits: val; cifar10n: val5k with "
        f"train45k; tfds: a slice whose range does not overlap), sharing no image with data.{other}, or "
        "data.heldout_split=null for none"
    )


def _check_shards(d: DataConfig) -> None:
    """The data settings of ``data.source=shards`` (see :func:`check_data`): read as a stream by
    :func:`harness.data.shards.shard_loader`, so without the settings that need random access or the labels in
    memory."""
    if not d.path:
        raise ValueError(
            "data.source=shards needs data.path: the folder harness data pack wrote (holding "
            "<split>/index.json), or a shard pattern beside an index.json"
        )
    if d.loader == "array":
        raise ValueError(
            "data.loader=array decodes a whole split into one array, which shards (read as a stream) "
            "cannot give: set data.loader=auto (or pil) with data.source=shards"
        )
    if d.limit_train or d.limit_eval:
        raise ValueError(
            "data.limit_train / data.limit_eval do not apply to shards: pack the examples you want "
            "(harness data pack SOURCE OUT limit_train=N), or set them to 0"
        )
    if d.label_noise and d.label_noise.get("kind", "none") != "none":
        raise ValueError(
            "data.label_noise is drawn over the labels of a split held in memory, which shards (read as "
            "a stream) are not: train on the source it was packed from, or unset data.label_noise"
        )
