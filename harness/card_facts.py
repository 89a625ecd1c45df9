"""What an export's card states by the model it describes (``card_info``, :class:`harness.models.Classifier`): the
facts of the head (:data:`HEAD_FACTS`) and of the backbone, kept only while the weights and the head's evaluation
options they were measured with are the model's (``card_weights``, :func:`card_state`, recorded where ``card_info``
is filled: ``load_model``, ``from_pretrained``, a save); :func:`card_for_weights` leaves out, with a warning, what
no longer holds (audit19 A19-03: other weights; audit21 A21-11: other evaluation options).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

#: what ``card_info`` says of the head (its measured metrics, class names, the τ folded into its classifier, the
#: layout it was last written in): dropped when the head is replaced (:func:`backbone_card`); ``trained_on`` stays
HEAD_FACTS = ("metrics", "label_names", "folded_temperature", "layout")


def backbone_card(card_info: dict) -> dict:
    """What of ``card_info`` still holds once the head is replaced (``reset_classifier``, ``replace_head``): its
    ``trained_on`` (the backbone's data), without :data:`HEAD_FACTS` (the old head's metrics, class names, folded τ,
    layout), which a card would otherwise state for an untrained head (audit18 A18-06)."""
    return {k: v for k, v in card_info.items() if k not in HEAD_FACTS}


def module_digest(module: Any) -> str:
    """The SHA-256 of a module's weights (:func:`tensors_digest` of its ``state_dict``)."""
    return tensors_digest(module.state_dict())


def tensors_digest(tensors: "Mapping[str, Any]") -> str:
    """The SHA-256 of named tensors, by name (the order of a ``state_dict`` or a safetensors file does not count):
    each entry's name, dtype, shape and bytes (read in place for a contiguous CPU tensor; others copied one at a time
    to the CPU)."""
    import hashlib

    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(tensors.items(), key=lambda item: item[0]):
        tensor = tensor.detach()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        if tensor.numel():
            digest.update(tensor.cpu().contiguous().reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def weights_digests(model: Any) -> "dict[str, str]":
    """``{"backbone": sha256, "head": sha256}`` of a model's weights now (:func:`module_digest`)."""
    return {"backbone": module_digest(model.backbone), "head": module_digest(model.head)}


def evaluation_options(head: Any) -> dict:
    """The options a head's evaluation predicts with now (:data:`harness.heads.checks.MEASURED_OPTIONS`, read
    from the head: ``head.eval_mc_samples = 1`` since it was built), ``share_samples_across_batch`` as the evaluation
    uses it (a seeded evaluation always shares its noise bank: True); ``{}`` for a head without noise (which reads
    none of them) or no head."""
    from harness.heads import HeteroscedasticHead
    from harness.heads.checks import MEASURED_OPTIONS

    if not isinstance(head, HeteroscedasticHead) or head.noise_form is None:
        return {}
    now = {k: getattr(head, k) for k in MEASURED_OPTIONS}
    if now.get("eval_seed") is not None:
        now["share_samples_across_batch"] = True
    return now


def card_state(model: Any) -> dict:
    """A model's ``card_weights``: :func:`weights_digests`, as ``evaluation`` the head's :func:`evaluation_options`
    now and as ``preprocessing`` the input normalisation the model applies (its config's; audit24 A24-04), recorded where its ``card_info`` is filled (``load_model``, ``from_pretrained``, a
    save): what the card's metrics were measured with."""
    return {
        **weights_digests(model),
        "evaluation": evaluation_options(model.head),
        "preprocessing": dict(model.config.preprocessing),
    }


def _option_changes(recorded: Optional[dict], now: dict) -> "list[str]":
    """``["eval_mc_samples 100 -> 1", ...]``: the evaluation options that differ from those recorded (none where
    nothing was recorded)."""
    if recorded is None:
        return []
    return [f"{k} {recorded.get(k)!r} -> {now.get(k)!r}" for k in {**recorded, **now} if recorded.get(k) != now.get(k)]


def stale_facts(info: dict, recorded: Optional[dict], now: dict, given: "tuple[str, ...]" = ()) -> "tuple[dict, str]":
    """``(info kept, why or "")``: of card facts ``info`` recorded for the weights and evaluation options ``recorded``
    (:func:`card_state`'s form: ``backbone`` / ``head`` digests, ``evaluation``; None or missing parts: not recorded,
    kept), what still describes a model whose state is ``now``: where the backbone's or the head's weights differ,
    the metrics (of the whole model) go, with :data:`HEAD_FACTS` (class names, folded τ) where the head changed and
    ``trained_on`` (the backbone's data) where the backbone did; where the head's evaluation options or the input
    preprocessing (audit24 A24-04) differ
    (``eval_mc_samples``, ``clip_eps``, ``eval_seed``: :func:`evaluation_options`), the metrics go (audit21 A21-11).
    ``given``: facts the caller states anew (kept, not named). ``why`` names what was dropped and why."""
    recorded = recorded or {}
    changed = [part for part in ("backbone", "head") if recorded.get(part) not in (None, now[part])]
    options = _option_changes(recorded.get("evaluation"), now["evaluation"])
    options += [f"preprocessing.{c}" for c in _option_changes(recorded.get("preprocessing"), now.get("preprocessing"))]
    drop = {"metrics"} if changed or options else set()
    drop |= set(HEAD_FACTS) if "head" in changed else set()
    drop |= {"trained_on"} if "backbone" in changed else set()
    dropped = sorted(k for k in drop - set(given) if info.get(k) not in (None, {}, []) and k != "layout")
    why = []
    if dropped and changed:
        why.append(f"the {' and '.join(changed)} weights differ from those they were measured with")
    if dropped and options:
        why.append(
            f"the evaluation options differ from those its metrics were measured with (the head's or the input "
            f"preprocessing: {', '.join(options)})"
        )
    said = f"{'; and '.join(why)}: its {', '.join(dropped)} are left out" if dropped else ""
    return {k: v for k, v in info.items() if k not in drop}, said


def card_for_weights(model: Any, given: "tuple[str, ...]" = ()) -> "tuple[dict, dict, Optional[str]]":
    """``(card_info, card_state now, warning or None)``: ``model.card_info`` without what no longer describes the
    model (audit19 A19-03, :func:`stale_facts`): the weights and evaluation options ``model.card_weights`` recorded
    against those now (``load_state_dict``, ``model.head.loc = ...``, further training,
    ``model.head.eval_mc_samples = 1`` since from_pretrained / load_model or the last save). ``given``: the facts the
    caller states anew. Without recorded digests (a model built here, its ``card_info`` set by hand) everything is
    kept."""
    now = card_state(model)
    info, said = stale_facts(model.card_info, getattr(model, "card_weights", None), now, given)
    note = None
    if said:
        note = (
            f"save_pretrained: since from_pretrained / load_model or the last save (load_state_dict, a new layer, "
            f"further training, an option set on the head), {said} of the export; pass trained_on= / metrics= "
            "measured for this model to state them, or set the head's options back before saving"
        )
    return info, now, note


def export_state_facts(body: "Mapping[str, Any]", head_tensors: "Mapping[str, Any]", model: Any) -> dict:
    """What an export's ``config.json`` records as ``harness.measured`` (its card facts' weights, evaluation options
    and input normalisation; audit23 A23-05/16, audit24 A24-04): :func:`tensors_digest` of the backbone's and the
    head's tensors as the file holds them (:func:`harness.hub.split_tensors`), the head's :func:`evaluation_options`
    and the model config's ``preprocessing``."""
    return {
        "backbone": tensors_digest(body),
        "head": tensors_digest(head_tensors),
        "evaluation": evaluation_options(model.head),
        "preprocessing": dict(model.config.preprocessing),
    }


def loaded_card(info: dict, recorded: Optional[dict], now: dict, model_id: str) -> dict:
    """The ``card_info`` of an export read back: its ``config.json`` facts ``info`` without those whose weights or
    evaluation options (``harness.measured``, ``recorded``) differ from the file's now (:func:`export_state_facts`;
    a ``model.safetensors`` replaced, the head's ``eval_mc_samples`` edited in ``config.json``: audit23 A23-05/16),
    with a warning (:func:`stale_facts`). An export without ``harness.measured`` (an older harness) keeps them."""
    import warnings

    kept, said = stale_facts(info, recorded, now)
    if said:
        warnings.warn(
            f"Classifier.from_pretrained({model_id!r}): config.json's card facts no longer describe the model read "
            f"({said} of its card_info): give the folder save_pretrained wrote, unchanged, or pass metrics= / "
            "trained_on= measured for this model when saving it",
            stacklevel=4,
        )
    return kept


def keep_backbone_facts(old: Any, new: Any) -> None:
    """``new`` (``old``'s backbone under a new head) takes ``old``'s :func:`backbone_card` and the recorded digest of
    its backbone (``card_weights``), so a later change of the backbone's weights still drops ``trained_on``."""
    new.card_info = backbone_card(old.card_info)
    backbone = (getattr(old, "card_weights", None) or {}).get("backbone")
    new.card_weights = {"backbone": backbone} if backbone else None
