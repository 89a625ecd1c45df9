"""Predictions under distribution shift: corrupted and out-of-distribution sets, saved per set.

For a finished run folder, :func:`predict_run` re-predicts with the run's ``model.pt`` (one model in
memory) on:

- ``clean``: a fixed subset of the evaluation split (``examples`` images drawn once with ``seed``;
  all of them with ``examples: 0``), as the model sees it (the evaluation view: resize and centre
  crop to ``data.image_size``, as uint8);
- ``<corruption>-<severity>``: the same images corrupted (:mod:`harness.corruptions`: the 15
  CIFAR-10-C / ImageNet-C corruptions, severities 1-5, seeded per example, cached);
- ``ood-<name>``: an out-of-distribution set: a built-in far-OOD set that needs no files
  (``gaussian``: i.i.d. Gaussian pixel noise, mean 0.5 and standard deviation 0.25 of the [0, 1]
  range, clipped; ``blobs``: scikit-image's ``binary_blobs`` shapes in two random colours, the
  "Gaussian" and "Blobs" anomalies of Hendrycks, Mazeika & Dietterich, ICLR 2019, Sec. 4.2, with our
  parameters), or any data source (``image_folder``, ``tfds``, ``manifest``, ``digits``,
  ``cifar10n``) given as ``NAME:source=...,path=...,split=...``; as many images as the clean set.

Each set is saved as ``<run>/shift/<set>/predictions.npz`` (the format of a run's own
predictions, :class:`harness.runs.Predictions`; OOD targets are -1) and, for heads with noise,
``mc.npz``: the mean over the head's Monte Carlo samples of the entropy of each sample's softmax (for
the mutual information, :mod:`harness.ood`). ``<run>/shift/shift.json`` records the settings and
which sets are done (rewritten after each set): a killed evaluation resumes, a finished one is not
redone, and a changed model, split or subset starts over. :func:`average_ensemble` averages the
members' sets of an ensemble folder with :func:`harness.ensembles.average`, as ``harness ensemble``
does, into ``<ensemble>/shift/`` (``mc.npz`` then holds the mean member entropy).

Reports read the sets back with :func:`load_sets`; nothing is re-predicted to redo a report.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

SCHEMA = "harness.shift/1"
BUILT_IN_OOD = ("gaussian", "blobs")
CLEAN = "clean"
OOD_PREFIX = "ood-"


@dataclass
class ShiftSettings:
    """What to evaluate under shift (an experiment's ``shift`` section; ``harness shift`` options).

    Attributes:
        corruptions: ``all``, families (``noise``, ``blur``, ``weather``, ``digital``) or corruption
            names (:func:`harness.corruptions.resolve`); ``[]`` for none.
        severities: integers in 1-5.
        examples: size of the fixed random subset of the evaluation split used for every set (0:
            the whole split).
        seed: draws the subset, seeds the corruptions and the built-in OOD sets.
        ood: OOD sets: ``gaussian``, ``blobs`` (built in), or ``NAME:key=value,...`` with data keys
            (``source``, ``path``, ``name``, ``split``, ...; see :class:`harness.data.sources.DataConfig`).
        split: the in-distribution split (default: the run's evaluation split).
    """

    corruptions: List[str] = field(default_factory=lambda: ["all"])
    severities: List[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])
    examples: int = 0
    seed: int = 0
    ood: List[str] = field(default_factory=lambda: list(BUILT_IN_OOD))
    split: Optional[str] = None


def parse_ood(spec: str) -> "tuple[str, Dict[str, str]]":
    """``gaussian`` / ``blobs`` -> ``(name, {})``; ``NAME:key=value,key=value`` -> ``(NAME, {key: value})``.

    Raises:
        ValueError: an empty name, an unknown built-in without data keys, or a malformed pair.
    """
    name, _, rest = str(spec).partition(":")
    name = name.strip()
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"OOD set {spec!r}: give a name (a plain word), e.g. gaussian, blobs or "
                         "svhn:source=tfds,name=svhn_cropped,path=/data/tfds,split=test")
    keys: "Dict[str, str]" = {}
    for pair in filter(None, (p.strip() for p in rest.split(","))):
        k, eq, v = pair.partition("=")
        if not (k.strip() and eq):
            raise ValueError(f"OOD set {spec!r}: {pair!r} is not key=value; write e.g. "
                             f"{name}:source=image_folder,path=/data/ood,split=test")
        keys[k.strip()] = v.strip()
    if not keys and name not in BUILT_IN_OOD:
        raise ValueError(f"unknown built-in OOD set {name!r}: use {' or '.join(BUILT_IN_OOD)}, or give a data source, "
                         f"e.g. {name}:source=image_folder,path=/data/{name},split=test")
    return name, keys


def _ood_data(keys: "Dict[str, str]", run_data: Any) -> "tuple[Any, str]":
    """The OOD source's :class:`DataConfig` (the run's view settings) and split.

    Raises:
        ValueError: unknown keys or values, or a view size other than the model's.
    """
    from harness.config import load_config
    from harness.data.sources import DataConfig

    keys = dict(keys)
    split = keys.pop("split", "test")
    for k in ("image_size", "eval_resize"):
        if k in keys and str(keys[k]) != str(getattr(run_data, k)):
            raise ValueError(f"OOD set {k}={keys[k]} differs from the model's data.{k}={getattr(run_data, k)}: OOD "
                             f"images are shown to the model at its own input size; drop {k} from the OOD set")
    view = {"image_size": run_data.image_size, "eval_resize": run_data.eval_resize, "loader": run_data.loader}
    if "source" not in keys:
        raise ValueError(f"OOD set keys {sorted(keys)}: name the data source, e.g. source=image_folder,path=/data/ood")
    try:
        cfg = load_config(DataConfig, None, [f"{k}={v}" for k, v in keys.items()], base=view)
    except ValueError as e:
        raise ValueError(f"OOD set: {e} (keys are those of the data section, plus split)") from e
    return cfg, split


def check_settings(settings: ShiftSettings, data: Any = None) -> "list[tuple[str, Any]]":
    """Validate settings before any work; return the sets ``[(name, spec)]``: ``clean``, the corrupted
    sets, then the OOD sets. With the run's ``data`` (:class:`~harness.data.sources.DataConfig`), the
    image size and the OOD sets' data keys are checked too (their files are read only when used).

    Raises:
        ValueError: unknown corruptions or severities, a negative ``examples``, malformed OOD sets,
            repeated OOD names, or images smaller than the corruptions accept.
    """
    from harness.corruptions import MIN_SIDE, resolve, set_name

    if settings.examples < 0:
        raise ValueError(f"shift examples must be >= 0 (0: the whole split), got {settings.examples}")
    pairs = resolve(settings.corruptions, settings.severities)
    image_size = None if data is None else data.image_size
    if pairs and image_size is not None and image_size < MIN_SIDE:
        raise ValueError(f"data.image_size {image_size} is below the {MIN_SIDE} px the corruptions need: evaluate "
                         f"corruptions at data.image_size >= {MIN_SIDE}, or set corruptions: []")
    sets: "list[tuple[str, Any]]" = [(CLEAN, {"kind": "clean"})]
    sets += [(set_name(c, s), {"kind": "corruption", "corruption": c, "severity": s}) for c, s in pairs]
    seen = set()
    for spec in settings.ood:
        name, keys = parse_ood(spec)
        if name in seen:
            raise ValueError(f"OOD set name {name!r} is given twice: give each OOD set its own name")
        seen.add(name)
        if keys and data is not None:
            _ood_data(keys, data)
        sets.append((OOD_PREFIX + name, {"kind": "ood", "name": name, "data": keys}))
    return sets


# ----------------------------------------------------------------------------------- images
def subset_rows(n: int, examples: int, seed: int) -> np.ndarray:
    """Sorted row numbers of a fixed random subset of ``examples`` of ``n`` (all of them for 0 or >= n)."""
    if not examples or examples >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[:examples])


def views(base: Any, data: Any, rows: np.ndarray) -> np.ndarray:
    """The evaluation view of ``rows`` of a split as uint8 ``[n, S, S, 3]``: resize the short side to
    ``data.eval_resize`` (default S / 0.875) and centre crop S = ``data.image_size``, as the model
    sees it. Sources with a decoded array (digits, cifar10n; :mod:`harness.data.cache`) go through
    the whole-batch view (:func:`harness.data.batched.center_crop`), others image by image with PIL.

    Raises:
        ValueError: an image cannot be read, or no rows.
    """
    import torch

    from harness.data.batched import center_crop

    if not len(rows):
        raise ValueError(f"no images to evaluate in {base.description}")
    size = data.image_size
    pixels = base.pixels(data.cache_dir) if data.loader != "pil" else None
    if pixels is not None:
        out = []
        for start in range(0, len(rows), 1024):
            x = center_crop(torch.from_numpy(np.ascontiguousarray(pixels[rows[start:start + 1024]])), size,
                            data.eval_resize)
            out.append((x * 0.5 + 0.5).mul_(255).round_().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy())
        return np.concatenate(out)
    from torchvision.transforms import v2

    view = v2.Compose([v2.Resize(data.eval_resize or int(round(size / 0.875)), antialias=True), v2.CenterCrop(size)])
    return np.stack([np.asarray(view(base[int(i)][0]), dtype=np.uint8) for i in rows])


def synthetic_ood(kind: str, n: int, size: int, seed: int = 0) -> np.ndarray:
    """A built-in far-OOD set, uint8 ``[n, size, size, 3]``, seeded per image.

    ``gaussian``: i.i.d. N(0.5, 0.25²) per pixel and channel on [0, 1], clipped. ``blobs``:
    ``skimage.data.binary_blobs`` (blob size 0.2 of the side, half the area) in a random foreground
    and background colour. After the synthetic anomalies of Hendrycks, Mazeika & Dietterich (ICLR
    2019, Sec. 4.2); the parameters are ours.

    Raises:
        ValueError: an unknown kind.
    """
    from harness.data.loading import mix_seeds

    if kind not in BUILT_IN_OOD:
        raise ValueError(f"unknown built-in OOD set {kind!r}: use {' or '.join(BUILT_IN_OOD)}")
    tag = zlib.crc32(kind.encode())
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    for i in range(n):
        rng = np.random.default_rng(mix_seeds(seed, tag, i))
        if kind == "gaussian":
            img = np.clip(rng.normal(0.5, 0.25, (size, size, 3)), 0, 1)
        else:
            from skimage.data import binary_blobs

            mask = binary_blobs(length=size, blob_size_fraction=0.2, n_dim=2, volume_fraction=0.5,
                                rng=int(rng.integers(2**31)))[..., None]
            fg, bg = rng.random(3), rng.random(3)
            img = np.where(mask, fg, bg)
        out[i] = np.round(img * 255)
    return out


def ood_images(name: str, keys: "Dict[str, str]", run_data: Any, n: int, seed: int) -> "tuple[np.ndarray, np.ndarray]":
    """The images ``[m, S, S, 3]`` uint8 and example indices ``[m]`` of one OOD set: ``n`` built-in
    images, or a fixed random subset of up to ``n`` images of a data source's split.

    Raises:
        ValueError: bad keys (:func:`_ood_data`), or a split without images.
        FileNotFoundError: the source's data is missing.
    """
    from harness.data.sources import build_split

    if not keys:
        return synthetic_ood(name, n, run_data.image_size, seed), np.arange(n)
    cfg, split = _ood_data(keys, run_data)
    try:
        base = build_split(cfg, split)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"OOD set {name!r} (source {cfg.source}, split {split!r}): {e}; point the OOD set's "
                                "path and split at images") from e
    if not len(base):
        raise ValueError(f"OOD set {name!r} ({base.description}) has no images: point it at a split with images")
    rows = subset_rows(len(base), n, seed)
    return views(base, cfg, rows), rows


# ------------------------------------------------------------------------------- prediction
def _spec_key(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _predict(model: Any, images: np.ndarray, batch_size: int, bf16: bool, channels_last: bool, device: str = "cpu"
             ) -> "tuple[np.ndarray, Optional[np.ndarray]]":
    """Logits ``[n, K]`` (the head's output, as in the run's predictions) and, for heads with noise,
    the mean entropy ``[n]`` of the softmax of each of the head's MC samples (:meth:`sample_logits`,
    the samples its output averages; in row blocks of about 4M sampled logits)."""
    import torch

    from harness.data.batched import center_crop
    from harness.ood import expected_entropy

    head = model.head
    size = images.shape[1]
    noisy = head.covariance_type != "none"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    logits, ent = [], []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            x = center_crop(torch.from_numpy(np.ascontiguousarray(images[start:start + batch_size])), size, size)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                feats = model.pre_logits(x.to(device).contiguous(memory_format=fmt))
            logits.append(head(feats).float().cpu().numpy())
            if noisy:
                rows = max(1, (1 << 22) // (head.eval_mc_samples * head.num_classes))
                for r in range(0, len(feats), rows):
                    lp = torch.log_softmax(head.sample_logits(feats[r:r + rows]).double(), dim=-1)  # [rows, S, K]
                    ent.append(expected_entropy(lp.transpose(0, 1).cpu().numpy()))
    return np.concatenate(logits).astype(np.float64), (np.concatenate(ent) if noisy else None)


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def _save_set(folder: Path, preds: Any, mean_entropy: Optional[np.ndarray]) -> None:
    import io

    from harness.io import atomic_write_bytes

    if mean_entropy is not None:
        buf = io.BytesIO()
        np.savez(buf, index=preds.index, mean_entropy=mean_entropy.astype(np.float64))
        atomic_write_bytes(folder / "mc.npz", buf.getvalue())
    elif (folder / "mc.npz").is_file():
        (folder / "mc.npz").unlink()
    preds.save(folder / "predictions.npz")


def _check_run(run_dir: Path, settings: ShiftSettings) -> "tuple[dict, Any, list]":
    """A finished single-label run and settings that fit its data: ``(config, data config, sets)``.

    Raises:
        FileNotFoundError: not a run folder, or no ``model.pt``.
        ValueError: a sigmoid (multi-label) model, or settings that do not fit (:func:`check_settings`).
    """
    from harness.runs import data_config, run_config

    cfg = run_config(run_dir)
    if not (run_dir / "model.pt").is_file():
        raise FileNotFoundError(f"{str(run_dir)!r} has no model.pt: shift predictions come from a run's final model; "
                                "pass a finished run folder (harness upstream writes model.pt when it ends)")
    head_cfg = (cfg.get("model") or {}).get("head") or {}
    if head_cfg.get("link", "softmax") != "softmax":
        raise ValueError(f"{run_dir} is a multi-label (sigmoid) model: shift and OOD evaluation covers single-label "
                         "softmax models; leave this run out")
    data = data_config(run_dir)
    return cfg, data, check_settings(settings, data)


def predict_run(run_dir: "str | Path", settings: ShiftSettings, progress: Callable[[str], None] = lambda s: None,
                device: str = "cpu") -> dict:
    """Write the shifted and OOD predictions of one run (see the module docstring); return its
    ``shift.json``. Sets already done with the same model, data and settings are kept.

    Raises:
        FileNotFoundError: not a run folder, or no ``model.pt`` (an unfinished run).
        ValueError: bad settings (:func:`check_settings`), a sigmoid (multi-label) model, or OOD
            data that cannot be read.
    """
    import torch

    from harness.corruptions import corrupted, package_version
    from harness.data.cache import file_digest
    from harness.data.sources import build_split
    from harness.io import atomic_write_text, json_dumps
    from harness.models import load_model
    from harness.precision import resolve as resolve_precision
    from harness.provenance import provenance
    from harness.runs import Predictions

    run_dir = Path(run_dir)
    cfg, data, sets = _check_run(run_dir, settings)
    split = settings.split or data.eval_split
    base = build_split(data, split)
    rows = subset_rows(len(base), settings.examples, settings.seed)
    key = {"model": file_digest(run_dir / "model.pt"), "split": split, "data": base.description,
           "rows": hashlib.sha256(rows.tobytes()).hexdigest()[:16], "view": [data.image_size, data.eval_resize],
           "seed": settings.seed, "package": package_version()}
    out = run_dir / "shift"
    spec = _read_json(out / "shift.json")
    if spec is not None and spec.get("key") != key:
        progress(f"[shift] {run_dir.name}: model, data or subset changed; starting over")
        shutil.rmtree(out)
        spec = None
    done = dict(spec.get("sets", {})) if spec else {}
    todo = [(n, s) for n, s in sets if done.get(n) != _spec_key(s) or not (out / n / "predictions.npz").is_file()]
    record = {"schema": SCHEMA, "kind": "run", "key": key, "settings": asdict(settings), "examples": int(len(rows)),
              "eval_data": base.description, "class_names": list(base.class_names), **provenance()}

    def write_spec() -> None:
        atomic_write_text(out / "shift.json", json_dumps({**record, "sets": done, "order": [n for n, _ in sets]},
                                                         indent=1))

    if not todo:
        write_spec()
        return {**record, "sets": done}
    clean = views(base, data, rows)
    targets = base.targets()[rows]
    ood = {name: ood_images(s["name"], s["data"], data, len(rows), settings.seed)  # read before the model loads
           for name, s in todo if s["kind"] == "ood"}
    train = cfg.get("train") or {}
    model = load_model(run_dir / "model.pt").eval().to(device)
    if train.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    # the precision the run trained in (metrics.json), else its setting resolved on this machine
    used = (_read_json(run_dir / "metrics.json") or {}).get("mixed_precision")
    bf16 = device == "cpu" and (used or resolve_precision(train.get("mixed_precision", "no"), "cpu")) == "bf16"
    for n, (name, s) in enumerate(todo, 1):
        if s["kind"] == "clean":
            images, index, y = clean, rows, targets
        elif s["kind"] == "corruption":
            images = corrupted(clean, rows, s["corruption"], s["severity"], settings.seed, data.cache_dir)
            index, y = rows, targets
        else:
            images, index = ood[name]
            y = np.full(len(index), -1, dtype=np.int64)
        logits, ent = _predict(model, images, data.eval_batch_size, bf16, bool(train.get("channels_last")), device)
        preds = Predictions(logits, np.asarray(y), np.asarray(index), list(base.class_names), "softmax",
                            str(out / name))
        _save_set(out / name, preds, ent)
        done[name] = _spec_key(s)
        write_spec()
        progress(f"[shift] {run_dir.name}: {name} ({n} of {len(todo)})")
    del model
    return {**record, "sets": done}


def _members(ens_dir: Path) -> "list[Path]":
    spec = _read_json(ens_dir / "ensemble.json")
    if not spec or not spec.get("members"):
        raise FileNotFoundError(f"{str(ens_dir)!r} is not an ensemble folder (no ensemble.json listing members); "
                                "build it with harness ensemble")
    return [Path(m) for m in spec["members"]]


def average_ensemble(ens_dir: "str | Path", progress: Callable[[str], None] = lambda s: None) -> dict:
    """Average the members' shifted and OOD predictions of an ensemble folder (every set all members
    have, evaluated on the same images) with :func:`harness.ensembles.average`; ``mc.npz`` holds the
    mean member entropy. Returns the ensemble's ``shift.json``.

    Raises:
        FileNotFoundError: not an ensemble folder, or a member without shift predictions.
        ValueError: members' sets that differ in examples, classes or subset settings.
    """
    from harness.ensembles import average
    from harness.io import atomic_write_text, json_dumps
    from harness.ood import expected_entropy
    from harness.provenance import provenance

    ens_dir = Path(ens_dir)
    members = _members(ens_dir)
    specs = []
    for m in members:
        spec = _read_json(m / "shift" / "shift.json")
        if spec is None:
            raise FileNotFoundError(f"ensemble member {m} has no shift predictions: run harness shift on it (or on "
                                    "the ensemble folder, which evaluates its members first)")
        specs.append(spec)
    ref = specs[0]
    for m, s in zip(members[1:], specs[1:]):
        for k in ("split", "data", "rows", "seed", "view", "package"):
            if s["key"][k] != ref["key"][k]:
                raise ValueError(f"ensemble member {m} was evaluated under shift with another {k} ({s['key'][k]} vs "
                                 f"{ref['key'][k]}): run harness shift on all members with the same settings")
    names = [n for n in ref.get("order", ref["sets"])
             if n in ref["sets"] and all(s["sets"].get(n) == ref["sets"][n] for s in specs)]
    out = ens_dir / "shift"
    done = {}
    for name in names:
        preds = [load_set(m / "shift" / name)[0] for m in members]
        ens = average(preds, str(out / name))
        mean_ent = expected_entropy([p.log_probs() for p in preds])
        _save_set(out / name, ens, mean_ent)
        done[name] = ref["sets"][name]
    record = {"schema": SCHEMA, "kind": "ensemble", "members": [str(m) for m in members],
              "key": {k: ref["key"][k] for k in ("split", "data", "rows", "seed", "view", "package")},
              "settings": ref["settings"], "examples": ref["examples"], "eval_data": ref["eval_data"],
              "class_names": ref["class_names"], "sets": done, "order": names, **provenance()}
    atomic_write_text(out / "shift.json", json_dumps(record, indent=1))
    progress(f"[shift] {ens_dir.name}: {len(names)} sets averaged over {len(members)} members")
    return record


def ensemble_sets(ens_dir: "str | Path") -> Optional[dict]:
    """After (re)building an ensemble folder (which clears its ``shift/``): average its members' shift
    sets when every member has them (:func:`average_ensemble`). Returns the ensemble's shift.json, or
    None."""
    ens_dir = Path(ens_dir)
    if all((m / "shift" / "shift.json").is_file() for m in _members(ens_dir)):
        return average_ensemble(ens_dir)
    return None


def load_set(folder: "str | Path") -> "tuple[Any, Optional[np.ndarray]]":
    """One saved set: its :class:`~harness.runs.Predictions` and the components' mean entropy
    ``[N]`` (None for a model without noise).

    Raises:
        FileNotFoundError: no predictions in ``folder``.
    """
    from harness.runs import Predictions

    folder = Path(folder)
    preds = Predictions.load(folder)
    ent = None
    if (folder / "mc.npz").is_file():
        with np.load(folder / "mc.npz", allow_pickle=False) as z:
            order = np.argsort(z["index"], kind="stable")
            ent = z["mean_entropy"][order]
    return preds, ent


def load_sets(folder: "str | Path") -> "Optional[tuple[dict, dict]]":
    """The ``shift.json`` of a run or ensemble folder and its sets ``{name: (predictions, mean
    entropy)}`` in the recorded order; None if the folder has no shift predictions."""
    spec = _read_json(Path(folder) / "shift" / "shift.json")
    if spec is None:
        return None
    names = [n for n in spec.get("order", spec["sets"]) if n in spec["sets"]]
    return spec, {n: load_set(Path(folder) / "shift" / n) for n in names}


def predict_folders(folders: Sequence["str | Path"], settings: ShiftSettings, progress: Callable[[str], None] = print,
             device: str = "cpu") -> "list[dict]":
    """``harness shift``: predict every run folder (one model in memory at a time), then average every
    ensemble folder (its members are predicted first when needed). Returns each folder's shift.json.

    Raises:
        FileNotFoundError, ValueError: see :func:`predict_run` and :func:`average_ensemble`; settings
            are checked before any work.
    """
    check_settings(settings)
    folders = [Path(f) for f in folders]
    runs, ensembles = [], []
    for f in folders:
        if (f / "ensemble.json").is_file():
            ensembles.append(f)
            runs += [m for m in _members(f) if m.resolve() not in {r.resolve() for r in runs}]
        elif (f / "config.yaml").is_file():
            if f.resolve() not in {r.resolve() for r in runs}:
                runs.append(f)
        else:
            raise FileNotFoundError(f"{str(f)!r} is neither a run folder (config.yaml, model.pt) nor an ensemble "
                                    "folder (ensemble.json); pass folders written by harness upstream or harness "
                                    "ensemble")
    for r in runs:  # every folder is checked before the first (slow) prediction
        _check_run(r, settings)
    results = {r: predict_run(r, settings, progress, device) for r in runs}
    out = [results[r] for r in runs if any(r.resolve() == f.resolve() for f in folders)]
    return out + [average_ensemble(e, progress) for e in ensembles]
