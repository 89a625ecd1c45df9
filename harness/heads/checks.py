"""The value checks of a :class:`~harness.heads.het.HeteroscedasticHead`'s arguments.

The constructor checks their types first (:func:`~harness.heads.options.check_option_types`) and the named choices
(covariance, link, noise space...) against their tables in :mod:`~harness.heads.options`; these check the numbers,
in the order the constructor calls them, each with a ``ValueError`` that names the option and the fix.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any, Optional, Sequence

import torch

from harness.heads.options import (
    DEFAULT_NUM_FACTORS,
    MAX_MC_SAMPLES,
    TEMPERATURE_RULE,
    check_option_types,
    temperature_in_range,
)
from harness.rules import SEED, Rule

#: the rule of a Monte Carlo sample count S: the head's ``train_mc_samples`` / ``eval_mc_samples`` and a call's
#: ``mc_samples`` (a bool or a fraction is no count: 2.7 is not truncated to 2)
MC_SAMPLES = Rule(
    low=1,
    high=MAX_MC_SAMPLES,
    whole=True,
    text=f"a whole number in [1, {MAX_MC_SAMPLES:,}]",
    note="the paper trains with 1000 samples",
)
_SEED = Rule(**SEED)


def _holds(rule: Rule, value: object) -> bool:
    """``rule.holds(value)`` for a whole-number rule, without its ``math.isfinite`` on an int (always finite), which
    ``torch.compile`` cannot trace once it has made a call's int argument symbolic."""
    if not (isinstance(value, numbers.Integral) and not isinstance(value, bool)):
        return rule.holds(value)  # refused by a whole-number rule: a fraction, a bool, text...
    low, high = rule.low, rule.high
    return (low is None or (value > low if rule.low_open else value >= low)) and (
        high is None or (value < high if rule.high_open else value <= high)
    )


def check_mc_samples(name: str, value: object) -> int:
    """``value`` as a count of Monte Carlo samples, by :data:`MC_SAMPLES`.

    Raises:
        ValueError: ``<name> must be a whole number in [1, 1,000,000] ..., got <value>: <fix>``.
    """
    if not _holds(MC_SAMPLES, value):
        raise ValueError(
            f"{name} must be {MC_SAMPLES.describe()}, got {value!r} ({type(value).__name__}): give an integer count"
        )
    return int(value)


def check_seed(name: str, value: object, none: str) -> None:
    """``value`` a seed of :data:`harness.rules.SEED` (numpy's range), or None, which means ``none``.

    Raises:
        ValueError: ``<name> must be a whole number in [0, 2**32 - 1] ..., got <value>`` (a negative seed, one of
            2**32 or more, a fraction or a bool, which torch would wrap, fold or truncate to another seed).
    """
    if value is not None and not _holds(_SEED, value):
        raise ValueError(
            f"{name} must be {_SEED.describe()}, or None ({none}), got {value!r} ({type(value).__name__}): give a "
            "seed in that range"
        )


def check_sizes(in_features: int, num_classes: int, link: str) -> "tuple[int, int]":
    """``(in_features, num_classes)`` of a head, both >= 1; a softmax over one class is refused (its probability is 1
    whatever the input: nothing to learn, NLL 0).

    Raises:
        ValueError: a size below 1, or ``num_classes=1`` with the softmax link, naming the fix.
    """
    if in_features < 1 or num_classes < 1:
        raise ValueError(f"in_features and num_classes must be >= 1, got {in_features} and {num_classes}")
    if num_classes == 1 and link == "softmax":
        raise ValueError(
            "num_classes=1 with link='softmax': a softmax over one class is 1 whatever the input (nothing to learn, "
            "NLL 0); use link='sigmoid' for one binary label, or give every class (num_classes >= 2)"
        )
    return int(in_features), int(num_classes)


def resolved_num_factors(covariance: str, num_factors: Optional[int], width: int, noise_space: str) -> int:
    """R of a variant with factors: ``num_factors``, or min(DEFAULT_NUM_FACTORS, W) (the paper's ImageNet rank)
    when None; W = ``width``, K for HET and D for HET-XL (``noise_space="pre_logits"``).

    Raises:
        ValueError: R outside [1, W].
    """
    if num_factors is None:
        num_factors = min(DEFAULT_NUM_FACTORS, width)
    if not (1 <= int(num_factors) <= width):
        what = "D (in_features)" if noise_space == "pre_logits" else "K (num_classes)"
        raise ValueError(
            f"num_factors must be an integer in [1, {width}] = [1, {what}] for covariance="
            f"{covariance!r}, got {num_factors}; use covariance='diagonal' for no factors"
        )
    return int(num_factors)


def check_sampling_options(
    train_mc_samples: int,
    eval_mc_samples: int,
    mc_chunk_size: Optional[int],
    clip_eps: Optional[float],
    eval_seed: Optional[int],
) -> None:
    """The Monte Carlo options: S in [1, :data:`~harness.heads.options.MAX_MC_SAMPLES`] in training and in evaluation,
    a chunk size >= 1 (None: automatic), ``clip_eps`` in (0, 0.5) (None: exact log space), ``eval_seed`` a seed of
    :data:`harness.rules.SEED`'s range (None: fresh noise each call).

    Raises:
        ValueError: the first option out of range, named.
    """
    values = dict(train_mc_samples=train_mc_samples, eval_mc_samples=eval_mc_samples, mc_chunk_size=mc_chunk_size)
    for name, value in {**values, "clip_eps": clip_eps, "eval_seed": eval_seed}.items():
        check_sampling_option(name, value)


def check_sampling_option(name: str, value: object) -> None:
    """One Monte Carlo option of :func:`check_sampling_options` (of the right type already:
    :func:`~harness.heads.options.check_option_types`); any other name passes.

    Raises:
        ValueError: ``<name> must be <its range>, got <value>``.
    """
    if name in ("train_mc_samples", "eval_mc_samples"):
        check_mc_samples(name, value)
    elif name == "mc_chunk_size" and value is not None and int(value) < 1:
        raise ValueError(f"mc_chunk_size must be >= 1 or None (automatic), got {value}")
    elif name == "clip_eps" and value is not None and not (0.0 < value < 0.5):
        raise ValueError(f"clip_eps must be in (0, 0.5) or None (exact log space), got {value}")
    elif name == "eval_seed":
        check_seed("eval_seed", value, "fresh noise each call")


#: the head's options a user may change on a built head, kept as attributes of the same name (the Monte Carlo
#: settings: ``head.eval_mc_samples = 5``); each call checks them (:func:`check_live_options`), as
#: ``save_pretrained`` does (``harness.model_config.LIVE_HEAD_OPTIONS`` reads this list)
LIVE_OPTIONS = (
    "train_mc_samples",
    "eval_mc_samples",
    "share_samples_across_batch",
    "mc_chunk_size",
    "eval_seed",
    "clip_eps",
)
#: the live options that change what a head with noise predicts in evaluation, so what its metrics measured
#: (``train_mc_samples`` is read in training only; ``mc_chunk_size`` splits the samples for memory): an export's card
#: keeps its metrics only under the values they were measured with (:func:`harness.card_facts.card_for_weights`)
MEASURED_OPTIONS = ("eval_mc_samples", "share_samples_across_batch", "eval_seed", "clip_eps")
#: the head's options that change nothing a model trains, with what each sets: only its evaluation or its memory
#: reads them (``train_mc_samples``, ``share_samples_across_batch`` and ``clip_eps`` shape the training loss); an
#: experiment's conditions, schedules, tune grids and methods may not differ in these alone (audit21 A21-12)
UNTRAINED_OPTIONS = {
    "eval_mc_samples": "how many Monte Carlo samples a noisy head averages in evaluation, not what a run trains",
    "eval_seed": "the seed of a noisy head's evaluation noise, not what a run trains",
    "mc_chunk_size": "how many of a noisy head's samples are drawn at once (its peak memory), not what a run trains",
}
#: the head's options fixed when it is built (its layers, its noise and its saved config follow them), kept as
#: attributes of the same name: :class:`FixedOptions` refuses a change of one on a built head
FIXED_OPTIONS = (
    "in_features",
    "num_classes",
    "covariance_type",
    "link",
    "num_factors",
    "learn_temperature",
    "temperature_bounds",
    "noise_space",
    "noise_width",
    "noise_form",
    "diag_noise",
    "pe_noise_bias",
)

_live_values = operator.attrgetter(*LIVE_OPTIONS)


def check_live_options(head: Any, signature_of: Any) -> None:
    """The head's :data:`LIVE_OPTIONS` as they are now (``head.clip_eps = 2.0`` after it was built), by its
    constructor's rules (``signature_of``: its ``__init__``, whose annotations give the types): a few checks of
    Python scalars at a call of ``forward`` / ``sample_logits`` whose values are not the very objects the last call
    checked (eager; compiled, when traced).

    The head's fixed τ (the buffer ``fixed_temperature``, ``head.fixed_temperature.fill_(2.0)``) is checked too, at
    every eager call where it lies on the CPU (a read of one number; on an accelerator the read would wait for the
    device at every step, so there it is checked where it is loaded and saved: :func:`register_fixed_temperature`,
    :func:`harness.model_config.live_temperature`).

    Raises:
        ValueError: ``<the constructor's message for the first option out of range>; head.<option> was set on the
            built head: set it to a value the head takes``; ``head.fixed_temperature = <τ> must be
            <TEMPERATURE_RULE> ...`` (audit21 A21-01: a negative τ flipped every prediction).
    """
    compiling = torch.compiler.is_compiling()  # checked when traced: its guards hold the values
    if not compiling:
        _check_temperature_now(head)
    if compiling:
        values = {name: getattr(head, name) for name in LIVE_OPTIONS}
    else:
        state, now = vars(head), _live_values(head)
        checked = state.get("_checked_live_options")
        if checked is not None and all(map(operator.is_, now, checked)):
            return  # the very values checked at the last call: nothing set since
        values = dict(zip(LIVE_OPTIONS, now))
    for name, value in values.items():
        try:
            check_option_types(signature_of, {name: value})
            check_sampling_option(name, value)
        except ValueError as e:
            raise ValueError(f"{e}; head.{name} was set on the built head: set it to a value the head takes") from None
    if not compiling:
        state["_checked_live_options"] = now  # not an attribute set: no module state, no mutation for torch.compile


def _check_temperature_now(head: Any) -> None:
    """The fixed τ of ``head`` as it is now, where it lies on the CPU (see :func:`check_live_options`)."""
    tau = getattr(head, "fixed_temperature", None)
    if tau is None or tau.device.type != "cpu" or getattr(head, "learn_temperature", False):
        return
    value = float(tau)
    if not temperature_in_range(value):
        raise ValueError(
            f"head.fixed_temperature = {value!r} (the head's fixed temperature τ) must be {TEMPERATURE_RULE} (0 gives "
            "NaN logits, a negative τ flips every prediction); it was set on the built head: set it to a value the "
            "head takes (head.fixed_temperature.fill_(1.0)), or build the head with the temperature you want"
        )


class FixedOptions:
    """The mixin of a head that refuses a change of its :data:`FIXED_OPTIONS` once it is built (the constructor
    sets each once; setting the value it has is allowed); the :data:`LIVE_OPTIONS` are checked when the head is
    called (:func:`check_live_options`), others (modules, parameters, buffers) are ``nn.Module``'s.

    Raises:
        ValueError: ``head.<option> is fixed when the head is built ...: build a new head with <option>=<value>``.
    """

    def __setattr__(self, name: str, value: Any) -> None:
        if name in FIXED_OPTIONS and name in self.__dict__ and not _same(self.__dict__[name], value):
            option = "covariance" if name == "covariance_type" else name
            raise ValueError(
                f"head.{name} = {value!r}: {option} is fixed when the head is built (its layers, noise and saved "
                f"config follow it; this head has {self.__dict__[name]!r}): build a new head with {option}="
                f"{value!r} (hetify the original model again), or leave it"
            )
        super().__setattr__(name, value)


def _same(a: object, b: object) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 -- a value that cannot be compared is no match
        return False


def checked_temperature_bounds(
    learn_temperature: bool, temperature: Optional[float], temperature_bounds: Sequence[float]
) -> "tuple[float, float]":
    """``temperature_bounds`` as floats ``(lo, hi)``, once the temperature the head will use is checked: a learned
    τ needs finite bounds with 0 < lo < hi and starts strictly inside them (at ``temperature``, or None: their
    midpoint), a fixed τ a finite ``temperature`` > 0 (None: 1).

    Raises:
        ValueError: bounds or temperature out of range.
    """
    if not (isinstance(temperature_bounds, (list, tuple)) and len(temperature_bounds) == 2):
        raise ValueError(
            f"temperature_bounds must be 2 numbers (lower, upper), got {temperature_bounds!r}; e.g. (0.3, 3.0)"
        )
    lo, hi = (float(b) for b in temperature_bounds)
    if not (temperature_in_range(lo) and temperature_in_range(hi) and lo < hi):  # a bound is never meaningless
        raise ValueError(
            f"temperature_bounds must be (lower, upper) with lower < upper, each {TEMPERATURE_RULE}, got ({lo}, {hi}); "
            "e.g. (0.3, 3.0)"
        )
    if learn_temperature and temperature is not None and not lo < temperature < hi:
        raise ValueError(
            f"temperature={temperature} is where the learned τ starts: it must lie strictly inside "
            f"temperature_bounds ({lo:g}, {hi:g}); give a start inside them, widen the bounds, or leave temperature "
            "unset to start at their midpoint"
        )
    if temperature is None:
        return lo, hi
    if not learn_temperature and not temperature_in_range(temperature):
        raise ValueError(
            f"temperature must be {TEMPERATURE_RULE} (larger ones flatten every prediction to uniform), got "
            f"{temperature}"
        )
    return lo, hi


def register_fixed_temperature(head: torch.nn.Module, temperature: Optional[float]) -> None:
    """Give ``head`` its fixed τ, the buffer ``fixed_temperature`` (0-dim; None: 1.0), and a ``load_state_dict``
    pre-hook that refuses a stored τ outside the one rule (:func:`~harness.heads.options.temperature_in_range`):
    0 gives NaN logits, a negative τ flips them, a huge one makes every prediction uniform. ``from_pretrained`` and
    ``load_model`` check the same value with the file named (:func:`harness.weights.check_temperatures`).

    Raises (at ``load_state_dict``):
        ValueError: ``<prefix>fixed_temperature = <τ> ... must be <TEMPERATURE_RULE>`` with the fix.
    """
    head.register_buffer("fixed_temperature", torch.tensor(1.0 if temperature is None else float(temperature)))
    head.register_load_state_dict_pre_hook(_check_fixed_temperature)  # module level: the head pickles (torch.save)


def _check_fixed_temperature(module: Any, state_dict: dict, prefix: str, *_: Any) -> None:
    """The ``load_state_dict`` pre-hook of :func:`register_fixed_temperature`."""
    value = state_dict.get(prefix + "fixed_temperature")
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.is_meta:
        return  # a missing or misshapen key is load_state_dict's own error
    if not temperature_in_range(float(value)):
        raise ValueError(
            f"load_state_dict: {prefix}fixed_temperature = {float(value)!r} (the head's fixed temperature τ) must "
            f"be {TEMPERATURE_RULE} (0 gives NaN logits, a negative τ flips them); load the state_dict this head "
            "saved, unchanged, or build the head with the temperature you want"
        )
