"""A run folder's ``config.yaml`` against the config its run recorded when it trained (``run.json``'s ``config``:
:func:`harness.upstream.checkpoint.write_run_files`, :func:`~harness.upstream.checkpoint.record_resumed`, an import's
:func:`harness.importing.import_run`). Every reader of a run's settings (:func:`harness.runs.run_config`, and so
:func:`harness.runs.data_config`, export, report, ensemble, shift, import, fewshot, downstream, a resumed upstream run)
reads ``config.yaml``; a hand edit of it would otherwise be published as what the run was trained on (audit26 A26-01:
an exported card claimed clean labels and a 32-px input for a run trained at 16 px with 30 % pair-flip noise)."""

from __future__ import annotations

from pathlib import Path

from harness.io import quote, read_json

#: the settings of a run's ``config.yaml`` that legitimately differ from those its ``run.json`` recorded: a run restored
#: from its record (:func:`harness.records.restore_record`) takes its new folder as ``output_dir``; ``harness moved-data``
#: records an import's moved model as ``imported.source_absolute`` (:mod:`harness.moved_data`). The one list.
REWRITTEN = ("output_dir", "imported.source_absolute")


def config_differences(saved: dict, recorded: dict) -> "dict[str, tuple]":
    """``{key: (value in saved, value recorded)}`` for the flattened settings (``data.image_size``) that differ between
    two configs, but :data:`REWRITTEN`; a setting one lacks reads as None."""
    from harness.model_identity import flat_settings

    a, b = flat_settings(saved), flat_settings(recorded)
    keys = sorted((set(a) | set(b)) - set(REWRITTEN))
    return {k: (a.get(k), b.get(k)) for k in keys if a.get(k) != b.get(k)}


def check_recorded_config(run_dir: "str | Path", cfg: dict) -> dict:
    """``cfg`` (the run's ``config.yaml``, parsed) when it holds the settings its ``run.json`` recorded (its ``config``;
    :func:`config_differences`); a folder whose ``run.json`` records no config (none, an unreadable one, a run of an
    older version) is not compared. Cost: one small JSON file read per version of config.yaml (the caller caches).

    Raises:
        ValueError: naming config.yaml, run.json, each differing key with both values, and the fix (restore
            config.yaml's values; the run was trained with run.json's).
    """
    run_dir = Path(run_dir)
    meta = read_json(run_dir / "run.json")
    recorded = meta.get("config") if isinstance(meta, dict) else None
    if not isinstance(recorded, dict) or not isinstance(cfg, dict):
        return cfg
    differ = config_differences(cfg, recorded)
    if differ:
        listed = "; ".join(f"{k}: {v[0]!r} there, {v[1]!r} recorded" for k, v in differ.items())
        raise ValueError(
            f"{run_dir / 'config.yaml'} is not the config its run recorded when it trained ({run_dir / 'run.json'}'s "
            f"config): {quote(listed, 600)}; the config.yaml was edited since: put the recorded values back in "
            "config.yaml (the run's model, metrics and predictions are those of run.json's config), or train a new "
            "run with the settings you want"
        )
    return cfg
