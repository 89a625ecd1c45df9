"""Bad inputs found by the tenth reliability audit that the lead fixed (``audit10 <case id>``)."""

from __future__ import annotations

import io

import torch

from bad_inputs import handled


@handled(
    "heads",
    "torch.save of a whole head with a fixed τ, and of a hetified model (audit10 H22, H28: a pickle traceback, the "
    "load_state_dict check was a local function)",
    r"both pickled and read back: the same outputs; a stored τ = 0 still refused at load_state_dict",
)
def _pickle_head(tmp):
    import timm

    from harness.heads import HeteroscedasticHead, hetify

    head = HeteroscedasticHead(8, 3, num_factors=2, temperature=2.0).eval()
    model = hetify(timm.create_model("test_resnet.r160_in1k", pretrained=False, num_classes=3), num_factors=2).eval()
    x, images = torch.randn(2, 8), torch.randn(1, 3, 32, 32)
    for module, inputs in ((head, x), (model, images)):
        buf = io.BytesIO()
        torch.save(module, buf)
        buf.seek(0)
        back = torch.load(buf, weights_only=False).eval()
        with torch.no_grad():
            assert torch.equal(module(inputs), back(inputs))
    state = head.state_dict()
    state["fixed_temperature"] = torch.tensor(0.0)
    try:
        back = torch.load(io.BytesIO(_saved(head)), weights_only=False)
        back.load_state_dict(state)
    except ValueError as e:
        assert "fixed_temperature = 0.0" in str(e), e
    else:
        raise AssertionError("a stored τ = 0 was loaded")
    return "both pickled and read back: the same outputs; a stored τ = 0 still refused at load_state_dict"


def _saved(module: torch.nn.Module) -> bytes:
    buf = io.BytesIO()
    torch.save(module, buf)
    return buf.getvalue()
