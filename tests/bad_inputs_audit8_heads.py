"""Bad inputs found by the eighth reliability audit in the head: float16 evaluation, a τ loaded through the head's
own ``load_state_dict`` (``audit8 <case id>``)."""

from __future__ import annotations

import torch
import torch.nn as nn

from harness.heads import HeteroscedasticHead, hetify

from bad_inputs import bad_input, handled


def _fp16_gap(head: nn.Module, x: torch.Tensor) -> float:
    """max |Δ log p| between the head in float32 and in float16 (its outputs must be finite)."""
    ref = head.float()(x).log_softmax(-1)
    out = head.half()(x.half()).float()
    assert torch.isfinite(out).all(), out
    return float((out.log_softmax(-1) - ref).abs().max())


@handled(
    "head",
    "a noisy head halved to float16 in eval() (audit8 H02: every output NaN: the noise's 24-bit uniforms overflowed)",
    r"finite in float16 for diagonal, low_rank, parameter_efficient, pre_logits",
)
def _fp16_eval(tmp):
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    heads = {
        "diagonal": dict(covariance="diagonal"),
        "low_rank": dict(covariance="low_rank", num_factors=2),
        "parameter_efficient": dict(covariance="parameter_efficient", num_factors=2),
        "pre_logits": dict(covariance="low_rank", num_factors=2, noise_space="pre_logits"),
    }
    for kwargs in heads.values():
        head = HeteroscedasticHead(8, 5, train_mc_samples=10, eval_mc_samples=10, **kwargs).eval()
        assert _fp16_gap(head, x) < 0.05  # float16 rounding of the weights and logits, the same noise draws
    return f"finite in float16 for {', '.join(heads)}, within 0.05 of float32 in log p"


@handled(
    "head",
    "hetify, then the model halved to float16 in eval() (audit8 H03: NaN outputs)",
    r"hetified model finite in float16",
)
def _fp16_hetify(tmp):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.Linear(6, 5))
    hetify(model, layer="1", covariance="diagonal", train_mc_samples=4, eval_mc_samples=4)
    assert _fp16_gap(model.eval(), torch.randn(2, 8)) < 0.05
    return "hetified model finite in float16, within 0.05 of float32 in log p"


@bad_input(
    "head",
    "the head's own load_state_dict with fixed_temperature -1 (audit8 H18: sign-flipped outputs; 0: all NaN)",
    ValueError,
    r"load_state_dict: 1\.fixed_temperature = -1\.0 \(the head's fixed temperature τ\) must be a finite number at least 0\.001",
)
def _load_state_dict_tau(tmp):
    model = nn.Sequential(nn.Linear(8, 6), HeteroscedasticHead(6, 5, num_factors=2))
    state = model.state_dict()
    before = model[1].fixed_temperature.clone()
    try:
        model.load_state_dict({**state, "1.fixed_temperature": torch.tensor(-1.0)})
    finally:
        assert torch.equal(model[1].fixed_temperature, before)  # refused before anything was loaded


@bad_input(
    "export",
    "Classifier.save_pretrained(DIR, push_to_hb=True) (audit8 E30, the model's own save: a typo dropped)",
    ValueError,
    r"save_pretrained got unknown keyword argument\(s\) push_to_hb: it takes .*push_to_hub.*check the spelling",
)
def _save_pretrained_typo(tmp):
    from bad_inputs_schemas import _export

    from harness.models import Classifier

    model = Classifier.from_pretrained(_export(tmp, lambda c: None))
    try:
        model.save_pretrained(tmp / "again", push_to_hb=True)
    finally:
        assert not (tmp / "again").exists(), "an export was written"
