"""Bad inputs found by the tenth reliability audit that the lead fixed (``audit10 <case id>``)."""

from __future__ import annotations

import io

import torch

from bad_inputs import bad_input, handled


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


@bad_input(
    "heads",
    "HeteroscedasticHead(D, 1) and hetify of a 1-output layer with the softmax link (audit10 H11, K08: a softmax over "
    "one class, log p = 0 for every input, trained and scored without a word)",
    ValueError,
    r"num_classes=1 with link='softmax': a softmax over one class is 1 whatever the input \(nothing to learn, NLL 0\); "
    r"use link='sigmoid' for one binary label, or give every class \(num_classes >= 2\)",
)
def _one_class_softmax(tmp):
    from harness.heads import HeteroscedasticHead, hetify

    assert HeteroscedasticHead(8, 1, link="sigmoid", num_factors=1)(torch.randn(2, 8)).shape == (2, 1)
    try:
        HeteroscedasticHead(8, 1, num_factors=1)
    except ValueError:
        pass
    else:
        raise AssertionError("a one-class softmax head was built")
    hetify(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)), layer="1", num_factors=1)
