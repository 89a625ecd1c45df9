"""The options of a heteroscedastic head, their defaults, the layers they create and how those are initialised.

Layer names follow edward2 (``edward2/tensorflow/layers/heteroscedastic.py``): ``loc`` (μ), ``diag``
(d(x)), and each variant's own (:data:`~harness.heads.variants.VARIANTS`: ``scale`` for V(x), low rank;
``scale_het`` / ``scale_hom`` for v(x) and V of the parameter-efficient head).
"""

from __future__ import annotations

import collections.abc
import inspect
import math
import numbers
import typing
from typing import Callable, Optional, Sequence

from torch import nn

from harness.heads.variants import (  # noqa: F401 -- the registry's names, read here by the head's options
    COVARIANCES,
    DEFAULT_NUM_FACTORS,
    TRANSFER_HEADS,
    TRANSFER_NUM_FACTORS,
    VARIANTS,
    CovarianceVariant,
    has_factors,
    noise_layers,
    variant,
)

#: the built-in variants' layers whose output depends on the input and sets the noise: d(x), V(x) (low-rank), v(x)
#: (PE); :func:`~harness.heads.variants.noise_layers` gives them over every registered variant
INPUT_DEPENDENT_NOISE_LAYERS = noise_layers(input_dependent_only=True)
#: every built-in layer that produces the noise covariance (the PE head adds its homoscedastic factor matrix V)
NOISE_LAYERS = noise_layers()
LINKS = ("softmax", "sigmoid")
NOISE_SPACES = ("logits", "pre_logits")
DIAG_NOISES = ("independent", "shared_scalar")
INITS = ("keras", "flax", "torch")
#: the largest temperature τ a head takes (larger ones flatten every prediction to uniform; the references' grids stop
#: at 5): the head, an experiment's τ grids and the transfer heads read it
MAX_TEMPERATURE = 1000.0
#: the smallest, symmetric to :data:`MAX_TEMPERATURE` (1 / 1000): smaller ones sharpen every prediction to one-hot and
#: overflow the logits (a τ of 1e-310 gives inf); upstream training has its own, stricter lower bound
MIN_TEMPERATURE = 1.0 / MAX_TEMPERATURE
#: the range of a fixed temperature τ, ``MIN_TEMPERATURE <= τ <= MAX_TEMPERATURE``, as a :func:`harness.rules.setting`
#: range (the config schemas read it) and in words (every message that refuses a τ says it)
TEMPERATURE_RANGE = dict(low=MIN_TEMPERATURE, high=MAX_TEMPERATURE)
TEMPERATURE_RULE = f"a finite number at least {MIN_TEMPERATURE:g} and at most {MAX_TEMPERATURE:g}"


def temperature_in_range(tau: object) -> bool:
    """Whether ``tau`` is a fixed temperature a head takes (:data:`TEMPERATURE_RANGE`): a real number (not a bool),
    finite, ``MIN_TEMPERATURE <= tau <= MAX_TEMPERATURE``. The one rule: the head's constructor, weights files, a
    saved head's τ, an experiment's and a transfer's τ grids, and post-hoc scaling
    (:func:`harness.uncertainty.calibration.scale`, :func:`~harness.uncertainty.calibration.fit_temperature`'s
    bounds) read it."""
    return (
        isinstance(tau, numbers.Real)
        and not isinstance(tau, bool)
        and math.isfinite(tau)
        and MIN_TEMPERATURE <= tau <= MAX_TEMPERATURE
    )


#: the most Monte Carlo samples a head takes per call (the paper trains with 1000; 10^9 would run for days with no
#: output)
MAX_MC_SAMPLES = 1_000_000
#: d(x) = softplus(.) + MIN_SCALE (``MIN_SCALE_MONTE_CARLO`` of edward2 ``edward2/tensorflow/layers/heteroscedastic.py``).
MIN_SCALE = 1e-3
#: default bounds of a learned temperature (the defaults of edward2 ``edward2/tensorflow/layers/heteroscedastic.py``).
DEFAULT_TEMPERATURE_BOUNDS = (0.3, 3.0)
#: ``covariance()`` refuses to build more elements than this unless ``max_elements`` is raised.
MAX_DENSE_COVARIANCE_ELEMENTS = 1 << 27
#: nominal rows of the evaluation noise bank's automatic chunk size: its chunk is the one a
#: BANK_ROWS-row batch would get, whatever the real batch size (see :func:`~harness.heads.sampling.plan_noise`).
BANK_ROWS = 64


def _choice(name: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}: use one of {', '.join(map(repr, allowed))}")
    return value


def _kind(hint: object) -> "tuple[str, bool]":
    """(the kind a head option's annotation asks for: ``int``, ``float``, ``bool``, ``str`` or ``floats``; whether
    None is allowed) from ``Optional[int]``, ``float``, ``Sequence[float]``..."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = type(None) in typing.get_args(hint)
    if optional and len(args) == 1:
        return _kind(args[0])[0], True
    if typing.get_origin(hint) in (collections.abc.Sequence, list, tuple):
        return "floats", False
    return getattr(hint, "__name__", str(hint)), False


#: the named choices of the head's string options, listed in their type error's fix
_NAMED = {
    "covariance": tuple(VARIANTS),
    "link": LINKS,
    "noise_space": NOISE_SPACES,
    "diag_noise": DIAG_NOISES,
    "init": INITS,
}
_WHAT = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "str": "a name",
    "floats": "a list of numbers",
}


#: the kinds of a head constructor's options (:func:`_kind` of each annotation), by constructor: resolved when a head
#: is first built (eagerly), read by each call of a built head too (compiled as well, where typing cannot be traced)
_KINDS: "dict[Callable, dict[str, tuple[str, bool]]]" = {}


def option_kinds(signature_of: Callable) -> "dict[str, tuple[str, bool]]":
    """``{option: (kind, None allowed)}`` of ``signature_of``'s annotated arguments (:func:`_kind`), resolved once."""
    kinds = _KINDS.get(signature_of)
    if kinds is None:
        kinds = _KINDS[signature_of] = {n: _kind(h) for n, h in typing.get_type_hints(signature_of).items()}
    return kinds


def check_option_types(signature_of: Callable, values: "dict[str, object]") -> None:
    """Each of ``values`` (a head's arguments) of the type its annotation in ``signature_of`` gives, before any value
    is compared or converted: ``2.7`` is no count, ``True`` no number, ``"inf"`` (YAML reads ``inf`` as text,
    ``.inf`` as infinity) no temperature, ``"yes"`` no switch.

    Raises: ValueError naming the option, the value, its type and what it must be.
    """
    kinds = option_kinds(signature_of)
    for name, value in values.items():
        if name not in kinds or value is None and kinds[name][1]:
            continue
        kind, optional = kinds[name]
        number = isinstance(value, numbers.Real) and not isinstance(value, bool)
        ok = {
            "int": isinstance(value, numbers.Integral) and not isinstance(value, bool),
            "float": number,
            "bool": isinstance(value, bool),
            "str": isinstance(value, str),
            "floats": isinstance(value, (list, tuple))
            and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value),
        }.get(kind, True)
        if not ok:
            fix = "give an integer" if kind == "int" else f"give {_WHAT[kind]}"
            if name in _NAMED:
                fix = f"give one of {', '.join(map(repr, _NAMED[name]))}"
            if isinstance(value, str) and value.strip().lstrip("+-").lower() in ("inf", "infinity", "nan"):
                fix += " (in YAML .inf is infinity and inf is text; a head needs finite values here)"
            if optional:
                fix += " (or None: the default)"
            raise ValueError(f"{name} must be {_WHAT[kind]}, got {value!r} ({type(value).__name__}): {fix}")


def _names(keep: Callable[[CovarianceVariant], bool]) -> str:
    return ", ".join(n for n, v in VARIANTS.items() if keep(v))


def _noise(c: dict) -> "Optional[tuple[str, str]]":
    if variant(c["covariance"]).form is None:
        noisy = _names(lambda v: v.form is not None)
        return f"covariance={c['covariance']!r} draws no noise", f"choose a noisy covariance ({noisy})"
    return None


def _factors(c: dict) -> "Optional[tuple[str, str]]":
    if not variant(c["covariance"]).has_factors:
        return f"covariance={c['covariance']!r} has none", "choose covariance='low_rank'"
    return None


def _shared_v(c: dict) -> "Optional[tuple[str, str]]":
    if variant(c["covariance"]).form != "parameter_efficient":
        return f"covariance={c['covariance']!r} has no shared V", "choose covariance='parameter_efficient'"
    return None


def _learned(c: dict) -> "Optional[tuple[str, str]]":
    if not c["learn_temperature"]:
        return "learn_temperature is False (τ stays fixed at temperature)", "set learn_temperature=True"
    return None


def _flax(c: dict) -> "Optional[tuple[str, str]]":
    return (f"the head has init={c['init']!r}", "set init='flax'") if c["init"] != "flax" else _noise(c)


_NOISY = "a head that draws noise"
#: the head options that only some configurations read: option -> (what it is for, ``unused(config)``: None when the
#: head's configuration (its arguments by name) reads it, else (why not, the other fix)). Every other option
#: (``covariance``, ``link``, ``temperature``, ``learn_temperature``, ``init``) is read by every head. The one rule
#: (:func:`check_unused_options`): such an option given a value other than its default, where unused, is refused.
OPTION_USES: "dict[str, tuple[str, Callable[[dict], Optional[tuple[str, str]]]]]" = {
    "num_factors": ("a head with factors ({factors})", _factors),
    "noise_space": (f"{_NOISY} (where its noise is added)", _noise),
    "train_mc_samples": (f"{_NOISY} (its Monte Carlo samples in training)", _noise),
    "eval_mc_samples": (f"{_NOISY} (its Monte Carlo samples in evaluation)", _noise),
    "share_samples_across_batch": (f"{_NOISY} (one draw of its noise for the whole batch)", _noise),
    "mc_chunk_size": (f"{_NOISY} (how many of its samples are drawn at once)", _noise),
    "eval_seed": (f"{_NOISY} (the seed of its evaluation noise)", _noise),
    "clip_eps": (f"{_NOISY} (the clipping of its Monte Carlo average)", _noise),
    "diag_noise": (f"{_NOISY} (how its diagonal noise is drawn)", _noise),
    "pe_noise_bias": ("the parameter-efficient head (the bias of its shared V)", _shared_v),
    "temperature_bounds": ("a learned temperature (the range of the learned τ)", _learned),
    "cov_init_scale": ("a noisy head's covariance layers (their initial scale, only used with init='flax')", _flax),
}


def check_unused_options(signature_of: Callable, values: "dict[str, object]", given: "Sequence[str]" = ()) -> None:
    """The one rule of options a configuration does not read (:data:`OPTION_USES`): each of ``values`` (a head's
    arguments, already of the right types and in range; one left out takes its default in ``signature_of``) given a
    value other than its default, or named in ``given`` (the options the user's overrides name, at any value:
    :func:`harness.rules.given_keys`), must be used by the head those values build (``train_mc_samples`` by a head
    that draws noise, ``pe_noise_bias`` by a parameter-efficient one, ``temperature_bounds`` by a learned τ...).

    Raises:
        ValueError: ``<option>=<value> is for <what>; <why not>: leave <option> unset (its default, <default>), or
            <fix>`` for the first option given a value its head does not use.
    """
    defaults = {n: p.default for n, p in inspect.signature(signature_of).parameters.items()}
    values = {**{n: d for n, d in defaults.items() if d is not inspect.Parameter.empty}, **values}
    for name, (what, unused) in OPTION_USES.items():
        value = values.get(name, defaults.get(name))
        if (tuple(value) if isinstance(value, list) else value) == defaults.get(name) and name not in given:
            continue
        why = unused(values)
        if why is not None:
            what = what.format(factors=_names(lambda v: v.has_factors))
            raise ValueError(
                f"{name}={value!r} is for {what}; {why[0]}: leave {name} unset (its default, {defaults.get(name)!r}), "
                f"or {why[1]}"
            )


def init_parameters(module: nn.Module, init: str, cov_init_scale: Optional[float]) -> None:
    """Initialise every ``nn.Linear`` of a head in place: ``"keras"`` (glorot-uniform kernels, zero biases; TF
    reference), ``"flax"`` (truncated lecun-normal, the covariance layers scaled by ``cov_init_scale``; JAX
    reference) or ``"torch"`` (leave ``nn.Linear``'s defaults).

    Raises:
        ValueError: ``cov_init_scale`` not in (0, 100] (given without ``init="flax"``: the head's
            :func:`check_unused_options` refuses it first).
    """
    if cov_init_scale is not None and not 0 < cov_init_scale <= 100:
        raise ValueError(
            f"cov_init_scale must be a finite number > 0 (at most 100: the references use 0.01-1; larger ones give "
            f"non-finite logits), used with init='flax', got {cov_init_scale!r}: give e.g. 0.1, or leave it unset"
        )
    if init == "torch":
        return
    cov_layers = {id(getattr(module, n)) for n in noise_layers(input_dependent_only=True) if hasattr(module, n)}
    for layer in module.modules():
        if not isinstance(layer, nn.Linear):
            continue
        if init == "keras":
            nn.init.xavier_uniform_(layer.weight)
        else:  # flax: variance_scaling(c, fan_in, truncated_normal), c = 1 (lecun) by default
            c = cov_init_scale if (cov_init_scale is not None and id(layer) in cov_layers) else 1.0
            std = math.sqrt(c / layer.in_features) / 0.87962566103423978  # truncation correction
            nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
        if layer.bias is not None:
            nn.init.zeros_(layer.bias)


def count_head_parameters(
    in_features: int,
    num_classes: int,
    covariance: str,
    num_factors: int = 0,
    noise_space: str = "logits",
    learn_temperature: bool = False,
    pe_noise_bias: bool = True,
) -> int:
    """Closed-form parameter count of a head (from the layer shapes; the paper's ResNet-152 counts, Table 1 and Appendix E, are tested).

    With D in, K out, R factors, W = K (HET) or D (HET-XL): (D+1)K for μ, (D+1)W for d(x) in every noisy head,
    and the variant's own layers (:attr:`~harness.heads.variants.CovarianceVariant.count`): low_rank (D+1)WR;
    parameter_efficient (D+1)W + (R+1)W (RW without the PE bias); +1 for a learned τ.

    Raises:
        ValueError: an unknown covariance.
    """
    v = variant(covariance)
    d1, k = in_features + 1, num_classes
    w = in_features if noise_space == "pre_logits" else num_classes
    n = d1 * k
    if v.form is not None:
        n += d1 * w + v.count(d1, w, num_factors, pe_noise_bias)
    return n + (1 if learn_temperature else 0)
