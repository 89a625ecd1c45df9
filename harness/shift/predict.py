"""Predicting the shift sets of run folders (one model in memory at a time) and averaging them for ensembles."""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from harness.folder_kinds import check_kind
from harness.io import path_under, read_json
from harness.runs import ensemble_members, ensemble_spec, run_summary
from harness.shift.sets import changed_ood, ood_images, spec_key, subset_rows, views, with_ood_sources
from harness.shift.settings import SCHEMA, ShiftSettings, check_settings, check_shift_data
from harness.shift.store import clear_sets, load_set, save_set

#: the lock of ``<run>/shift`` while :func:`predict_run` writes its sets (:class:`harness.io.RunLock`)
SHIFT_LOCK = ".lock"


def _predict(
    model: Any, images: np.ndarray, batch_size: int, bf16: bool, channels_last: bool, device: str = "cpu"
) -> "tuple[np.ndarray, Optional[np.ndarray]]":
    """Logits ``[n, K]`` (the head's output, as in the run's predictions) and, for heads with noise,
    the mean entropy ``[n]`` of the softmax of each of the head's MC samples (:meth:`sample_logits`,
    the samples its output averages; in row blocks of about 4M sampled logits)."""
    import torch

    from harness.data.batched import center_crop
    from harness.uncertainty.ood import expected_entropy

    head = model.head
    size = images.shape[1]
    noisy = head.covariance_type != "none"
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    logits, ent = [], []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            x = center_crop(torch.from_numpy(np.ascontiguousarray(images[start : start + batch_size])), size, size)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                feats = model.pre_logits(x.to(device).contiguous(memory_format=fmt))
            logits.append(head(feats).float().cpu().numpy())
            if noisy:
                rows = max(1, (1 << 22) // (head.eval_mc_samples * head.num_classes))
                for r in range(0, len(feats), rows):
                    lp = torch.log_softmax(head.sample_logits(feats[r : r + rows]).double(), dim=-1)  # [rows, S, K]
                    ent.append(expected_entropy(lp.transpose(0, 1).cpu().numpy()))
    return np.concatenate(logits).astype(np.float64), (np.concatenate(ent) if noisy else None)


def _check_shift_writable(folder: Path, kind: str) -> Path:
    """``folder``'s ``shift/`` (where its sets are written), checked to take new files before any prediction
    (:func:`harness.io.check_writable`); ``kind``: ``run`` or ``ensemble``, for the message.

    Raises:
        ValueError: naming the folder and the fix.
    """
    from harness.io import check_writable

    return check_writable(
        folder / "shift",
        f"the {kind} folder {str(folder)!r}: its shift/ (where harness shift writes its sets)",
        f"make {folder} writable, or copy the {kind} folder to a writable place and pass the copy",
    )


#: the settings that choose a run's shift subset, as a message names them (``--examples``, ``--seed``; the split is
#: the ShiftSettings' or the experiment's ``shift.split``: harness shift reads the run's evaluation split): sets of
#: another subset are not replaced without ``--overwrite`` (:func:`_check_same_subset`)
SUBSET_FLAGS = {"examples": "--examples {}", "seed": "--seed {}", "split": "split={}"}


def _check_same_subset(out: Path, settings: ShiftSettings, eval_split: str) -> None:
    """Refuse settings whose subset differs from the one the sets already in ``out`` (``<run>/shift``) were predicted
    on: predicting them would replace every set there (hours of ImageNet-C), not add to them (audit18 A18-04). The
    split is compared as read (unset: the run's ``eval_split``).

    Raises:
        ValueError: naming the sets, their subset's settings and the fix.
    """
    spec = read_json(out / "shift.json") or {}
    recorded, names = dict(spec.get("settings") or {}), sorted(spec.get("sets") or {})
    asked = asdict(settings)
    for both in (recorded, asked):
        both["split"] = both.get("split") or eval_split
    changed = [k for k in SUBSET_FLAGS if k in recorded and recorded[k] != asked[k]]
    if not names or not changed:
        return
    shown = [k for k in SUBSET_FLAGS if k in recorded and (k != "split" or k in changed)]  # the run's split: unsaid
    theirs = " ".join(SUBSET_FLAGS[k].format(recorded[k]) for k in shown)
    ours = " ".join(SUBSET_FLAGS[k].format(asked[k]) for k in changed)
    raise ValueError(
        f"{out} holds {', '.join(names)}, predicted on the subset of {theirs}, and this call asks for {ours}: its "
        f"sets would replace them all; give {theirs} to add sets to them, or --overwrite to replace them"
    )


def _check_run(run_dir: Path, settings: ShiftSettings, overwrite: bool = False) -> "tuple[dict, Any, list, Any]":
    """A finished single-label run and settings that fit its data: ``(config, data config, sets, split)``, the
    evaluated split built when ``examples`` needed its size (else None: built by the caller that predicts).

    Raises:
        FileNotFoundError: not a run folder, or no ``model.pt``.
        ValueError: a sigmoid (multi-label) model, settings that do not fit (:func:`check_settings`), a subset
            (``examples``) larger than the split, a ``shift/`` folder holding files harness shift did not write
            (without ``overwrite``), or one that cannot be written (:func:`_check_shift_writable`); sets of another
            subset there (without ``overwrite``: :func:`_check_same_subset`).
    """
    from harness.checkpoint_files import check_run_model
    from harness.data.sources import build_split
    from harness.runs import data_config, run_config

    cfg = run_config(run_dir)
    check_shift_data(data_config(run_dir), run_dir)  # before model.pt or any data is read
    if not (run_dir / "model.pt").is_file():
        raise FileNotFoundError(
            f"{str(run_dir)!r} has no model.pt: shift predictions come from a run's final model; "
            "pass a finished run folder (harness upstream writes model.pt when it ends)"
        )
    check_run_model(run_dir)  # the model.pt its predictions measured (audit20 A20-09)
    head_cfg = (cfg.get("model") or {}).get("head") or {}
    if head_cfg.get("link", "softmax") != "softmax":
        raise ValueError(
            f"{run_dir} is a multi-label (sigmoid) model: shift and OOD evaluation covers single-label "
            "softmax models; leave this run out"
        )
    out = _check_shift_writable(run_dir, "run")
    ours = {SHIFT_LOCK, SHIFT_LOCK + ".pid"}  # a writer's lock, left by a shift killed before its first set
    strays = out.is_dir() and any(f.name not in ours for f in out.iterdir())
    if strays and not (out / "shift.json").is_file() and not overwrite:
        raise ValueError(
            f"{out} exists and holds files harness shift did not write (no shift.json): move them, or "
            "give --overwrite (only the shift sets' own files are written there)"
        )
    data = data_config(run_dir)
    if not overwrite:
        _check_same_subset(out, settings, data.eval_split)
    sets, base = with_ood_sources(check_settings(settings, data, run_dir), data), None  # OOD: by images (A25-06)
    if settings.examples:
        split = settings.split or data.eval_split
        base = build_split(data, split)
        size = len(base)
        if settings.examples > size:
            raise ValueError(
                f"--examples {settings.examples} is more than the {size} images of {run_dir}'s split {split!r}: "
                f"pass --examples {size} or fewer (0: the whole split)"
            )
    return cfg, data, sets, base


def _set_key(
    run_dir: Path, cfg: dict, data: Any, description: str, split: str, rows: np.ndarray, settings: ShiftSettings
) -> dict:
    """What a run's shift sets were predicted from (``shift.json``'s ``key``; a changed one starts them over): the
    ``model.pt``'s digest, the head's Monte Carlo noise, the split and data (``description``), the subset ``rows``,
    the view, the seed and the corruption package's version."""
    from harness.data.cache import file_digest
    from harness.heads.noise_record import noise_definition_of
    from harness.shift.corruptions import package_version

    return {
        "model": file_digest(run_dir / "model.pt"),
        # predictions made with another Monte Carlo noise are made again (the head's, from the run's config: the
        # model itself loads after the data, so that bad data is refused first)
        "eval_noise": noise_definition_of(dict((cfg.get("model") or {}).get("head") or {})),
        "split": split,
        "data": description,
        "rows": hashlib.sha256(rows.tobytes()).hexdigest()[:16],
        "view": [data.image_size, data.eval_resize],
        "seed": settings.seed,
        "package": package_version(),
    }


def _load_run_model(run_dir: Path, train: dict, base: Any, device: str) -> "tuple[Any, bool]":
    """``(model, bf16)``: the run's ``model.pt`` in eval mode on ``device`` (channels-last when the run trained so),
    and whether to predict in bf16: the precision the run trained in (``metrics.json``), else its setting resolved on
    this machine (CPU only).

    Raises:
        ValueError: a ``model.pt`` whose number of classes is not that of the run's data ``base``.
    """
    import torch

    from harness.models import load_model
    from harness.training.precision import resolve as resolve_precision

    model = load_model(run_dir / "model.pt").eval().to(device)
    if model.head.num_classes != len(base.class_names):
        raise ValueError(
            f"{run_dir / 'model.pt'} has {model.head.num_classes} classes but the run's data "
            f"({base.description}) has {len(base.class_names)}: the model.pt is not this run's; put the "
            "run's own model.pt back (or rerun harness upstream)"
        )
    if train.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    # the precision the run trained in (metrics.json), else its setting resolved on this machine
    used = run_summary(run_dir).get("mixed_precision")
    bf16 = device == "cpu" and (used or resolve_precision(train.get("mixed_precision", "no"), "cpu")) == "bf16"
    return model, bf16


def _set_images(
    s: dict,
    ood: "Optional[tuple[np.ndarray, np.ndarray]]",
    clean: np.ndarray,
    rows: np.ndarray,
    targets: np.ndarray,
    seed: int,
    cache_dir: Any,
) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
    """``(images, index, targets)`` of one set ``s``: the clean subset (``clean``, its ``rows`` and ``targets``), the
    same images corrupted (:func:`harness.shift.corruptions.corrupted`, seeded with ``seed``, cached in
    ``cache_dir``), or the OOD set's images and indices already read (``ood``), with targets
    :data:`~harness.uncertainty.predictions.UNLABELLED`."""
    from harness.shift.corruptions import corrupted
    from harness.uncertainty.predictions import UNLABELLED

    if s["kind"] == "clean":
        return clean, rows, targets
    if s["kind"] == "corruption":
        return corrupted(clean, rows, s["corruption"], s["severity"], seed, cache_dir), rows, targets
    images, index = ood
    return images, index, np.full(len(index), UNLABELLED, dtype=np.int64)


def predict_run(
    run_dir: "str | Path",
    settings: ShiftSettings,
    progress: Callable[[str], None] = lambda s: None,
    device: str = "cpu",
    overwrite: bool = False,
) -> dict:
    """Write the shifted and OOD predictions of one run (see the module docstring); return its
    ``shift.json``. Sets already done with the same model, evaluation noise, data and settings are kept.

    Raises:
        FileNotFoundError: not a run folder, or no ``model.pt`` (an unfinished run).
        ValueError: bad settings (:func:`check_settings`), a sigmoid (multi-label) model, OOD data that cannot be
            read, or another ``harness shift`` writing this run's sets (:class:`harness.io.RunLock` on ``<run>/shift``).
    """
    from harness.data.sources import build_split
    from harness.io import RunLock, atomic_write_text, json_dumps
    from harness.provenance import provenance
    from harness.uncertainty.predictions import Predictions

    run_dir = Path(run_dir)
    cfg, data, sets, base = _check_run(run_dir, settings, overwrite)
    split = settings.split or data.eval_split
    base = build_split(data, split) if base is None else base
    rows = subset_rows(len(base), settings.examples, settings.seed)
    key = _set_key(run_dir, cfg, data, base.description, split, rows, settings)
    out = run_dir / "shift"
    busy = "another harness shift writes this run's shifted predictions; wait for it to finish"
    with RunLock(out, SHIFT_LOCK, what=busy):  # one writer of <run>/shift at a time
        spec = read_json(out / "shift.json")
        if spec is not None and spec.get("key") != key:
            old = list(spec.get("sets", {}))
            progress(f"[shift] {run_dir.name}: model, data or subset changed; removing {', '.join(old)}, starting over")
            clear_sets(run_dir, old)
            spec = None

        done = dict(spec.get("sets", {})) if spec else {}
        todo = [(n, s) for n, s in sets if done.get(n) != spec_key(s) or not (out / n / "predictions.npz").is_file()]
        for n, s in (t for t in todo if t[1]["kind"] == "ood" and t[0] in done):  # other images than stored (A25-06)
            progress(
                f"[shift] {run_dir.name}: {changed_ood(n, (spec.get('ood_images') or {}).get(n), s.get('images'))}"
            )
        record = {
            "schema": SCHEMA,
            "kind": "run",
            "key": key,
            "settings": asdict(settings),
            "examples": int(len(rows)),
            "eval_data": base.description,
            "class_names": list(base.class_names),
            "ood_images": {n: s["images"] for n, s in sets if "images" in s},  # what each OOD set read (A25-06)
            **provenance(),
        }

        def write_spec() -> None:
            atomic_write_text(
                out / "shift.json", json_dumps({**record, "sets": done, "order": [n for n, _ in sets]}, indent=1)
            )

        if not todo:
            write_spec()
            return {**record, "sets": done}
        clean = views(base, data, rows)
        targets = base.targets()[rows]
        ood = {
            name: ood_images(s["name"], s["data"], data, len(rows), settings.seed)  # read before the model loads
            for name, s in todo
            if s["kind"] == "ood"
        }
        train = cfg.get("train") or {}
        model, bf16 = _load_run_model(run_dir, train, base, device)
        for n, (name, s) in enumerate(todo, 1):
            images, index, y = _set_images(s, ood.get(name), clean, rows, targets, settings.seed, data.cache_dir)
            logits, ent = _predict(model, images, data.eval_batch_size, bf16, bool(train.get("channels_last")), device)
            preds = Predictions(
                logits, np.asarray(y), np.asarray(index), list(base.class_names), "softmax", str(out / name)
            )
            save_set(path_under(out, name), preds, ent)
            done[name] = spec_key(s)
            write_spec()
            progress(f"[shift] {run_dir.name}: {name} ({n} of {len(todo)})")
        del model
        return {**record, "sets": done}


def _check_members_data(ens_dir: Path) -> None:
    """Refuse an ensemble whose ``ensemble.json`` leaves its members' shift sets out (``harness ensemble
    --from-checkpoints --eval-data``: its members' sets are of their own data, not of its evaluation data).

    Raises:
        ValueError: naming the ensemble, why and the fix.
    """
    why = ((ensemble_spec(ens_dir) or {}).get("left_out") or {}).get("shift")
    if why:
        raise ValueError(
            f"{ens_dir} is an ensemble evaluated on other data than its members' (--eval-data): {why}, and harness "
            "shift predicts a run's sets on the run's own data; run harness shift on an ensemble built without "
            "--eval-data (or on the members themselves)"
        )


def average_ensemble(ens_dir: "str | Path", progress: Callable[[str], None] = lambda s: None) -> dict:
    """Average the members' shifted and OOD predictions of an ensemble folder (every set all members
    have, evaluated on the same images) with :func:`harness.uncertainty.ensembles.average`; ``mc.npz`` holds the
    mean member entropy. Returns the ensemble's ``shift.json``.

    Raises:
        FileNotFoundError: not an ensemble folder, or a member without shift predictions.
        ValueError: members' sets that differ in examples, classes or subset settings; an ensemble evaluated on
            other data than its members' (:func:`_check_members_data`); an ensemble built from a member's earlier
            weights (:func:`harness.ensemble_folder.check_members_unchanged`, audit24 A24-05).
    """
    from harness.ensemble_folder import check_members_unchanged
    from harness.io import atomic_write_text, json_dumps
    from harness.provenance import provenance
    from harness.uncertainty.ensembles import average
    from harness.uncertainty.ood import expected_entropy

    ens_dir = Path(ens_dir)
    _check_members_data(ens_dir)
    check_members_unchanged(ens_dir)  # the members' models now are the ensemble's (audit24 A24-05)
    members = ensemble_members(ens_dir)
    specs = []
    for m in members:
        spec = read_json(m / "shift" / "shift.json")
        if spec is None:
            raise FileNotFoundError(
                f"ensemble member {m} has no shift predictions: run harness shift on it (or on "
                "the ensemble folder, which evaluates its members first)"
            )
        specs.append(spec)
    ref = specs[0]
    for m, s in zip(members[1:], specs[1:]):
        for k in ("split", "data", "rows", "seed", "view", "package"):
            if s["key"][k] != ref["key"][k]:
                raise ValueError(
                    f"ensemble member {m} was evaluated under shift with another {k} ({s['key'][k]} vs "
                    f"{ref['key'][k]}): run harness shift on all members with the same settings"
                )
    names = [
        n
        for n in ref.get("order", ref["sets"])
        if n in ref["sets"] and all(s["sets"].get(n) == ref["sets"][n] for s in specs)
    ]
    out = ens_dir / "shift"
    done = {}
    for name in names:
        preds = [load_set(m / "shift" / name)[0] for m in members]
        ens = average(preds, str(out / name))
        mean_ent = expected_entropy([p.log_probs() for p in preds])
        save_set(path_under(out, name), ens, mean_ent)
        done[name] = ref["sets"][name]
    record = {
        "schema": SCHEMA,
        "kind": "ensemble",
        "members": [str(m) for m in members],
        "member_weights": (ensemble_spec(ens_dir) or {}).get("member_weights"),  # load_sets compares it
        "key": {k: ref["key"][k] for k in ("split", "data", "rows", "seed", "view", "package")},
        "settings": ref["settings"],
        "examples": ref["examples"],
        "eval_data": ref["eval_data"],
        "class_names": ref["class_names"],
        "sets": done,
        "order": names,
        **provenance(),
    }
    atomic_write_text(out / "shift.json", json_dumps(record, indent=1))
    progress(f"[shift] {ens_dir.name}: {len(names)} sets averaged over {len(members)} members")
    return record


def ensemble_sets(ens_dir: "str | Path") -> Optional[dict]:
    """After (re)building an ensemble folder (which clears its ``shift/``): average its members' shift
    sets when every member has them (:func:`average_ensemble`). Returns the ensemble's shift.json, or
    None."""
    ens_dir = Path(ens_dir)
    if all((m / "shift" / "shift.json").is_file() for m in ensemble_members(ens_dir)):
        return average_ensemble(ens_dir)
    return None


def predict_folders(
    folders: Sequence["str | Path"],
    settings: ShiftSettings,
    progress: Callable[[str], None] = print,
    device: str = "cpu",
    overwrite: bool = False,
) -> "list[dict]":
    """``harness shift``: predict every run folder (one model in memory at a time), then average every
    ensemble folder (its members are predicted first when needed). Returns each folder's shift.json.

    Raises:
        FileNotFoundError, ValueError: see :func:`predict_run` and :func:`average_ensemble` (an ensemble of a
            member's earlier weights among them), :func:`harness.folder_kinds.check_kind`; settings checked first.
    """
    from harness.ensemble_folder import check_members_unchanged

    check_settings(settings)
    folders = [Path(f) for f in folders]
    runs, ensembles = [], []
    for f in folders:
        check_kind(f, ("run", "import", "ensemble"), "run or ensemble")  # a sweep, a report...: named (A26-10/11)
        if (f / "ensemble.json").is_file():
            ensembles.append(f)
            runs += [m for m in ensemble_members(f) if m.resolve() not in {r.resolve() for r in runs}]
        elif (f / "config.yaml").is_file():
            if f.resolve() not in {r.resolve() for r in runs}:
                runs.append(f)
        else:
            raise FileNotFoundError(
                f"{str(f)!r} is neither a run folder (config.yaml, model.pt) nor an ensemble folder "
                "(ensemble.json); pass folders written by harness upstream or harness ensemble"
            )
    for r in runs:  # every folder is checked before the first (slow) prediction
        _check_run(r, settings, overwrite)
    for e in ensembles:
        _check_members_data(e)
        check_members_unchanged(e)
        _check_shift_writable(e, "ensemble")
    results = {r: predict_run(r, settings, progress, device, overwrite) for r in runs}
    out = [results[r] for r in runs if any(r.resolve() == f.resolve() for f in folders)]
    return out + [average_ensemble(e, progress) for e in ensembles]
