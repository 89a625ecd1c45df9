"""Bad inputs found by the twentieth reliability audit in the HET head's Python API (``audit20 <case id>``): an
option set on a built head (what hetify's own refusal advises: "... or set its options on the head") that its
constructor refuses, taken at the call with Python's raw errors or wrong outputs."""

from __future__ import annotations

import torch

from bad_inputs import bad_input, handled

#: each value the constructor refuses, set on a built head instead: (option, value, what happened before)
_LIVE = [
    ("clip_eps", 2.0, "no error, log-probabilities moved by up to 5.9 nats"),
    ("clip_eps", -1.0, "ValueError: math domain error"),
    ("mc_chunk_size", 0, "ValueError: range() arg 3 must not be zero"),
    ("mc_chunk_size", -5, "TypeError: 'NoneType' object is not iterable"),
    ("eval_seed", 1.5, "accepted: other noise"),
    ("eval_seed", -1, "accepted: other noise"),
    ("eval_seed", "x", "ValueError: invalid literal for int()"),
    ("share_samples_across_batch", "yes", "accepted as true"),
    ("eval_mc_samples", 2.5, "refused, named"),
]


def _head(**options):
    from harness.heads.het import HeteroscedasticHead

    return HeteroscedasticHead(in_features=8, num_classes=10, eval_seed=0, **options).eval()


# ------------------------------------------------------------------------------ A20-08: options set on a built head
@bad_input(
    "heads",
    "head.clip_eps = 2.0 on a built HeteroscedasticHead, then head(x) (audit20 A20-08: no error, log-probabilities "
    "moved by up to 5.9 nats; the constructor and save_pretrained refuse clip_eps=2.0)",
    match=r"^clip_eps must be in \(0, 0\.5\) or None \(exact log space\), got 2\.0; head\.clip_eps was set on the "
    r"built head: set it to a value the head takes$",
)
def _clip_eps_set(tmp):
    head = _head()
    x = torch.randn(4, 8)
    head(x)
    head.clip_eps = 2.0
    head(x)


@bad_input(
    "heads",
    "model.fc.mc_chunk_size = 0 on a hetify'd model, then model(x) (audit20 A20-08: ValueError: range() arg 3 must "
    "not be zero, naming no option)",
    match=r"^mc_chunk_size must be >= 1 or None \(automatic\), got 0; head\.mc_chunk_size was set on the built head",
)
def _chunk_set_on_hetified(tmp):
    from torch import nn

    from harness.heads import hetify

    model = nn.Sequential()
    model.add_module("fc", nn.Linear(8, 10))
    model = hetify(model, layer="fc", covariance="low_rank", num_factors=2)
    model.fc.mc_chunk_size = 0
    model(torch.randn(4, 8))


@handled(
    "heads",
    "each value the constructor refuses, set as an attribute on built heads (HET, HET-XL, PE, hetify's 1x1-conv "
    "head) and called by forward and sample_logits (audit20 A20-08: clip_eps -1 'math domain error', mc_chunk_size "
    "0 / -5 raw Python errors, eval_seed 1.5 / -1 accepted, eval_seed 'x' int()'s ValueError); fixed options "
    "(link, noise_space, num_factors, covariance) changed on a built head (accepted: outputs of another model than "
    "its layers and saved config)",
    r"refused, named: \d+ values on 4 heads by forward and sample_logits; fixed options refused at the set; "
    r"eval_mc_samples 5, eval_seed None, mc_chunk_size 3 and a learned τ's parameter still set and used",
)
def _every_option_set(tmp):
    from torch import nn

    from harness.heads import hetify

    conv = hetify(nn.Sequential(nn.Conv2d(8, 10, 1)), layer="0", covariance="diagonal")[0].eval()
    heads = {
        "het": _head(),
        "het-xl": _head(noise_space="pre_logits", num_factors=3),
        "pe": _head(covariance="parameter_efficient", num_factors=2),
        "conv": conv,
    }
    refused = 0
    for kind, head in heads.items():
        x = torch.randn(2, 8, 1, 1) if kind == "conv" else torch.randn(2, 8)
        for name, value, before in _LIVE:
            for call in ("forward", "sample_logits"):
                old = getattr(head, name)
                setattr(head, name, value)
                try:
                    head(x) if call == "forward" else head.sample_logits(torch.randn(2, 8), mc_samples=4)
                except ValueError as e:
                    assert str(e).startswith(f"{name} must be") and f"head.{name} was set on the built head" in str(
                        e
                    ), (
                        kind,
                        name,
                        e,
                    )
                    refused += 1
                else:
                    raise AssertionError(f"{kind}: head.{name} = {value!r} taken by {call} (before: {before})")
                finally:
                    setattr(head, name, old)
        head(x)  # every option back to a value it takes
    for name, value in [("link", "sigmoid"), ("noise_space", "pre_logits"), ("num_factors", 3)]:
        head = _head()
        try:
            setattr(head, name, value)
        except ValueError as e:
            assert f"{name} is fixed when the head is built" in str(e) and f"{name}={value!r}" in str(e), e
        else:
            raise AssertionError(f"head.{name} = {value!r} changed a built head")
    try:
        _head().covariance_type = "diagonal"
    except ValueError as e:
        assert "covariance is fixed when the head is built" in str(e), e
    else:
        raise AssertionError("head.covariance_type changed a built head")
    head = _head(learn_temperature=True)
    head.link, head.eval_mc_samples, head.eval_seed, head.mc_chunk_size = "softmax", 5, None, 3  # allowed
    head.temperature_logit = nn.Parameter(torch.tensor(0.5))
    head.loc = nn.Linear(8, 10)
    out = head(torch.randn(2, 8))
    assert out.shape == (2, 10) and torch.isfinite(out).all() and "temperature_logit" in dict(head.named_parameters())
    return (
        f"refused, named: {refused} values on {len(heads)} heads by forward and sample_logits; fixed options refused "
        "at the set; eval_mc_samples 5, eval_seed None, mc_chunk_size 3 and a learned τ's parameter still set and used"
    )
