"""The model card ``README.md`` of an export (:func:`model_card`, from :data:`CARD_TEMPLATE`; written by
:meth:`harness.models.Classifier.save_pretrained` beside :mod:`harness.hub`'s files and signed with its digest line):
what the model is, its head, τ, data and metrics, how to load it, and what it states beyond the model's own config:
its size (parameter count and GMACs of one image), the Hugging Face hub's metadata for its results (``model-index``
through huggingface_hub's ``EvalResult``, and ``datasets``) and the citation of the method. Like :mod:`harness.hub`,
it reads a model through its attributes (``config``, ``card_info``, ``backbone``) and never imports the model class."""

from __future__ import annotations

from typing import Any, Optional

import torch

from harness.export_rules import noisy_labels, split_limit, split_slice
from harness.hub import _signed, input_normalisation

#: the card's citation block: the HET paper (README.md, "How to cite")
CITATION = """@inproceedings{collier2021correlated,
  title     = {Correlated Input-Dependent Label Noise in Large-Scale Image Classification},
  author    = {Collier, Mark and Mustafa, Basil and Kokiopoulou, Efi and Jenatton, Rodolphe and Berent, Jesse},
  booktitle = {Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)},
  year      = {2021},
  eprint    = {2105.10305},
  archivePrefix = {arXiv}
}"""

CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ title }}

{{ summary }}

| | |
|---|---|
{% for key, value in facts %}| {{ key }} | {{ value }} |
{% endfor %}
{% if metrics %}
## Metrics

{{ measured_on }}

| metric | value |
|---|---|
{% for key, value in metrics %}| {{ key }} | {{ value }} |
{% endfor %}{% endif %}
## Use

```python
from harness.models import Classifier

model = Classifier.from_pretrained("{{ repo_id | default('ORG/NAME', true) }}")  # or the folder
logits = model(images)  # images [B, 3, H, W] normalised to [-1, 1] ((pixels - 0.5) / 0.5)
```
{% if timm_layout %}
In plain timm (no harness needed; inputs normalised with the `pretrained_cfg` mean and std):

```python
import timm

model = timm.create_model("local-dir:PATH", pretrained=True)  # or "hf-hub:{{ repo_id | default('ORG/NAME', true) }}"
```
{% endif %}
Method: heteroscedastic classification (HET), Collier et al., CVPR 2021, arXiv:2105.10305.

## Citation

```bibtex
{{ citation }}
```
"""


def input_size(model: torch.nn.Module) -> "tuple[int, int, int]":
    """``(C, H, W)`` of one input image: the training data's ``image_size`` (``card_info['trained_on']``), else the
    backbone's ``pretrained_cfg['input_size']``, else (3, 224, 224)."""
    size = (model.card_info.get("trained_on") or {}).get("image_size")
    if isinstance(size, int) and size > 0:
        return (3, size, size)
    cfg = getattr(model.backbone, "pretrained_cfg", None) or {}
    return tuple(int(v) for v in (cfg.get("input_size") or (3, 224, 224)))


def count_macs(model: torch.nn.Module, size: "Optional[tuple[int, int, int]]" = None) -> Optional[float]:
    """Multiply-accumulates of one forward pass of one image ``[1, *size]`` (default :func:`input_size`) in eval
    mode, in GMACs (10⁹): torch's ``torch.utils.flop_counter.FlopCounterMode``, which counts matrix multiplications
    and convolutions at 2 FLOPs per multiply-accumulate (and no element-wise op), halved. The HET head's Monte Carlo
    samples at evaluation (``eval_mc_samples``) are part of the pass. The random streams and the modules' training
    flags are left as they were. None where the forward pass fails (a ``RuntimeError``: an input size the backbone
    does not take)."""
    from torch.utils.flop_counter import FlopCounterMode

    size = size or input_size(model)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    modes = {m: m.training for m in model.modules()}
    counter = FlopCounterMode(display=False)
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad(), counter:
            model.eval()(torch.zeros(1, *size, device=device))
    except RuntimeError:
        return None
    finally:
        for m, mode in modes.items():
            m.training = mode
    return counter.get_total_flops() / 2 / 1e9


def size_facts(model: torch.nn.Module) -> "list[tuple[str, str]]":
    """The card's rows on model size: the parameter count (every parameter, trainable or not) and the GMACs of one
    image (:func:`count_macs`)."""
    n = sum(p.numel() for p in model.parameters())
    c, h, w = input_size(model)
    macs = count_macs(model, (c, h, w))
    return [
        ("parameters", f"{n:,} ({n / 1e6:.2f} M)"),
        (
            f"GMACs per {h}x{w} image",
            "not measured" if macs is None else f"{macs:.4g} (torch FlopCounterMode; matmuls and convolutions)",
        ),
    ]


#: metric of ``card_info['metrics']`` -> (model-index ``metric.type``, ``metric.name``); others keep their own name
EVAL_METRICS = {
    "top1": ("accuracy", "top-1 accuracy"),
    "nll": ("nll", "negative log-likelihood (nats)"),
    "ece": ("ece", "expected calibration error (15 bins)"),
    "brier": ("brier", "Brier score"),
}


def card_results(model: torch.nn.Module) -> dict:
    """``ModelCardData`` arguments of the hub's metadata: ``datasets`` (the training data's ``name`` or ``source``)
    and, with metrics recorded, ``eval_results`` (huggingface_hub ``EvalResult``, the card's ``model-index``): each
    numeric metric on the evaluation split (``heldout_<metric>`` on the held-out split; ``test[:50]``, the Hugging
    Face datasets' spelling of its first 50 examples, where ``trained_on`` records ``limit_eval``), task
    ``image-classification``, and the ``model_name`` the hub asks for beside them; a metric of a split whose labels
    the run read noisy (:func:`harness.export_rules.noisy_labels`: a held-out split the run drew ``label_noise`` on)
    is left out, as the model-index names the split alone (audit19 A19-02). Empty without the data."""
    from huggingface_hub import EvalResult

    data = model.card_info.get("trained_on") or {}
    dataset = data.get("name") or data.get("source")
    if not dataset:
        return {}
    results = []
    for key, value in (model.card_info.get("metrics") or {}).items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        held = key.startswith("heldout_")
        if noisy_labels(data, "heldout_split" if held else "eval_split"):
            continue  # against labels the run made noisy: the model-index would state them as the split's own
        metric = key[len("heldout_") :] if held else key
        kind, label = EVAL_METRICS.get(metric, (metric, metric))
        split = split_slice(data, "heldout_split" if held else "eval_split")  # test[:50]: its first 50 (A18-13)
        results.append(
            EvalResult(
                task_type="image-classification",
                dataset_type=str(dataset),
                dataset_name=str(dataset),
                dataset_split=str(split) if split else None,
                metric_type=kind,
                metric_name=f"{label}, held-out split" if held else label,
                metric_value=float(value),
            )
        )
    out: dict = {"datasets": [str(dataset)]}
    if results:
        head = (model.config.head or {}).get("covariance", "low_rank")
        out.update(eval_results=results, model_name=f"{model.config.backbone} ({head} head)")
    return out


def data_fact(data: dict) -> str:
    """The card's "trained on" row: each setting of ``trained_on`` as ``key value``, a split cut to its first N
    examples with them (``train_split train (first 100 examples: limit_train)``,
    :func:`harness.export_rules.split_limit`), a limit of no recorded split as itself; "not recorded" without any (a
    model trained elsewhere, or an import: nothing false is stated)."""
    shown = {k: v for k, v in data.items() if v not in (None, {}, "")}
    cuts = {key: split_limit(shown, key)[1:] for key in ("train_split", "eval_split", "heldout_split")}
    stated = {limit for limit, n in cuts.values() if limit}
    items = []
    for key, value in shown.items():
        limit, n = cuts.get(key, (None, None))
        if key not in stated:  # a limit is stated with its split
            items.append(f"{key} {value}" + (f" (first {n} examples: {limit})" if limit else ""))
    return ", ".join(items) or "not recorded"


def measured_on(data: dict) -> str:
    """The line above the card's metrics table: the data they were measured on (``trained_on``'s dataset and
    evaluation split, ``test[:50]`` for its first 50 examples: :func:`harness.export_rules.split_slice`; the held-out
    split of ``heldout_*``), each with the noisy labels it was read with (:func:`harness.export_rules.noisy_labels`:
    those metrics are left out of the model-index), or that it is not recorded."""
    dataset, split = data.get("name") or data.get("source"), split_slice(data, "eval_split")
    if not (dataset and split):
        return "The data these metrics were measured on is not recorded."

    def against(split_key: str) -> str:
        noisy = noisy_labels(data, split_key)
        return f", against its {noisy}, not the split's own labels (left out of the model-index)" if noisy else ""

    held = split_slice(data, "heldout_split")
    _, key, n = split_limit(data, "eval_split")
    limit = f" (its first {n} examples: {key})" if key else ""
    line = f"Measured on `{split}` of {dataset}{limit}{against('eval_split')}"
    return line + (f"; `heldout_*` on `{held}`{against('heldout_split')}." if held else ".")


def metric_rows(card_info: dict) -> "list[tuple[str, Any]]":
    """The card's metrics table: each recorded metric (a float to 4 decimals), a metric of a split read with noisy
    labels named so (``heldout_top1 (noisy labels)``, :func:`harness.export_rules.noisy_labels`)."""
    data = card_info.get("trained_on") or {}
    rows = []
    for key, value in (card_info.get("metrics") or {}).items():
        if not isinstance(value, (int, float, str)):
            continue
        noisy = noisy_labels(data, "heldout_split" if key.startswith("heldout_") else "eval_split")
        rows.append((f"{key} (noisy labels)" if noisy else key, f"{value:.4f}" if isinstance(value, float) else value))
    return rows


def model_card(model: torch.nn.Module, **kwargs: Any):
    """The model card of an export: huggingface_hub's ``ModelCard.from_template`` on :data:`CARD_TEMPLATE` (what the
    model is, its head, τ, data and metrics, how to load it); ``kwargs`` go to the template (``repo_id``)."""
    from huggingface_hub import ModelCard, ModelCardData

    cfg, info = model.config, model.card_info
    head = cfg.head or {}
    timm_layout = info.get("layout") == "timm"
    mean, std = input_normalisation(model, "timm" if timm_layout else "het_head")
    inside = ""
    if not timm_layout and getattr(model, "renormalise", False):
        inside = f" (the backbone's own, {cfg.preprocessing['mean']}, {cfg.preprocessing['std']}, applied inside)"
    data = info.get("trained_on") or {}
    facts = [
        ("backbone", f"`{cfg.backbone}`"),
        ("classes", cfg.num_classes),
        ("head", f"{head.get('covariance', 'low_rank')} covariance, {head.get('link', 'softmax')} link"),
        ("temperature τ", head.get("temperature", 1.0)),
        ("input normalisation (mean, std; config.json's pretrained_cfg)", f"{mean}, {std}{inside}"),
        ("trained on", data_fact(data)),
        ("loads in plain timm", "yes" if timm_layout else "no (a heteroscedastic head: use the harness)"),
        *size_facts(model),
    ]
    metrics = metric_rows(info)
    card_data = ModelCardData(
        library_name="timm" if timm_layout else "het-harness",
        license="apache-2.0",
        pipeline_tag="image-classification",
        tags=["image-classification", "heteroscedastic", "het-harness", "model_hub_mixin"]
        + (["timm"] if timm_layout else []),
        **card_results(model),
    )
    kind = head.get("covariance", "low_rank")
    title = f"{cfg.backbone} with a " + (
        "homoscedastic (linear) head" if kind == "none" else f"{kind} heteroscedastic head"
    )
    summary = (
        f"A {cfg.num_classes}-class image classifier exported by het-harness: a `{cfg.backbone}` backbone and a "
        + (
            "homoscedastic (linear) head, stored as the plain timm model."
            if timm_layout
            else "heteroscedastic output head (Monte Carlo average of a tempered softmax over correlated logit noise)."
        )
    )
    card = ModelCard.from_template(
        card_data,
        template_str=CARD_TEMPLATE,
        title=title,
        summary=summary,
        facts=facts,
        metrics=metrics,
        measured_on=measured_on(data),
        timm_layout=timm_layout,
        citation=CITATION,
        **kwargs,
    )
    return ModelCard(_signed(str(card)))
