"""Rules declared beside each field of a config schema, checked in one place, with one message format.

A schema field that takes a range or a set of names declares it with :func:`setting` (a ``dataclasses.field`` whose
metadata holds a :class:`Rule`); :func:`check_rules` walks a config (its nested dataclasses too) and refuses the first
value that breaks its rule, before any work::

    epochs: int = setting(10, low=1)
    crop_scale: float = setting(0.08, low=0, low_open=True, high=1)
    loader: str = setting("auto", choices=("auto", "array", "pil"))

The message is always ``<key> must be <rule>, got <value>`` (with the rule's note and fix when it has them), e.g.
``train.epochs must be >= 1, got 0``. Numbers must be finite (NaN and infinity break every range); a list's rule
applies to each element; a list declared ``distinct=True`` holds each value once (``same``: what makes two values one,
e.g. an unordered pair). Rules that relate two settings (the schedule's unit, resize >= crop) stay in the stage's
``validate``, which runs :func:`check_rules` first; a key that only some choices of another read (``optim.betas``,
read by ``optim.name=adamw``) is refused under the others by :func:`check_unread_keys`, set away from its default or
named by the user's overrides at any value (:func:`mark_given`, :func:`given_keys`). A bool setting takes true or
false only (:func:`is_switch`, run by :func:`harness.config.load_config` on every schema).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence


@dataclass(frozen=True)
class Rule:
    """The values a setting takes: a range (``low``/``high``, open or closed ends; a whole number with ``whole``) or
    one of ``choices``; ``size``: a list of exactly that many values, each in the range; ``text`` replaces the
    generated description; ``note`` follows it in brackets (what None or 0 means); ``fix`` follows the value (what to
    do); ``distinct``: a list (or each list of a mapping) holds each value once, where a repeat would be dropped or
    counted twice without a word; ``same``: a value's identity for ``distinct`` (default: the value itself; values
    of one identity are repeats), raising ValueError (what is wrong) for a value that repeats within itself."""

    low: Optional[float] = None
    low_open: bool = False
    high: Optional[float] = None
    high_open: bool = False
    whole: bool = False
    choices: "tuple[str, ...]" = ()
    size: int = 0
    text: str = ""
    note: str = ""
    fix: str = ""
    distinct: bool = False
    same: Optional[Callable[[Any], Any]] = None

    def bounds(self) -> bool:
        """Whether the rule holds each value to a range or to choices (a rule of distinct values alone does not)."""
        ranged = (self.low is not None, self.high is not None, self.whole, self.choices, self.size, self.text)
        return not self.distinct or any(ranged)

    def describe(self) -> str:
        if self.text:
            what = self.text
        elif self.choices:
            what = "one of " + ", ".join(self.choices)
        else:
            lo, hi = (
                None if b is None else f"{int(b)}" if float(b).is_integer() else f"{b:g}" for b in (self.low, self.high)
            )
            what = "a whole number " if self.whole else ""
            if lo is not None and hi is not None:
                what += f"in {'(' if self.low_open else '['}{lo}, {hi}{')' if self.high_open else ']'}"
            elif lo is not None:
                what += f"{'>' if self.low_open else '>='} {lo}"
            elif hi is not None:
                what += f"{'<' if self.high_open else '<='} {hi}"
        if self.size:
            what = f"{self.size} numbers, each " + (what or "finite")
        return what + (f" ({self.note})" if self.note else "")

    def holds(self, value: Any) -> bool:
        if self.choices:
            return value in self.choices
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
            return False
        if self.whole and not isinstance(value, numbers.Integral):
            return False
        lo, hi = self.low, self.high
        return (lo is None or (value > lo if self.low_open else value >= lo)) and (
            hi is None or (value < hi if self.high_open else value <= hi)
        )


#: the rule of every seed (numpy's seed range): ``seed: int = setting(0, **SEED)``
SEED = dict(low=0, high=2**32 - 1, whole=True, text="a whole number in [0, 2**32 - 1]", note="numpy's seed range")
#: the largest learning rate either stage takes (the references' lie below 1; larger ones diverge in the first steps)
MAX_LEARNING_RATE = 100.0
#: the rule of every learning rate: ``lr: float = setting(0.1, **LEARNING_RATE)``
LEARNING_RATE = dict(low=0, low_open=True, high=MAX_LEARNING_RATE, note="the references' lie below 1")
#: the rule of every weight decay (an L2 weight above 1 drives every weight to 0 within a few steps)
WEIGHT_DECAY = dict(low=0, high=1, note="the references' lie in [1e-5, 0.1]")
#: the largest image side (pixels) either stage resizes to: upstream's ``data.image_size`` / ``data.eval_resize``,
#: the transfers' ``--resolution`` (ImageNet-scale models see 224-512 px; a bigger value is a typo that would only
#: fail when the first image or batch is allocated: a side of 10^5 px is 30 GB an image)
MAX_IMAGE_SIDE = 1024


def is_switch(value: Any) -> bool:
    """Whether ``value`` is what a bool setting takes: ``true`` or ``false`` (a bool; the text ``"true"`` /
    ``"false"``, and an OmegaConf interpolation ``${...}``, which resolves to one). The one rule of every bool field
    of every schema (:func:`harness.config.load_config` runs it on each layer before OmegaConf, which would read any
    number but 0, and words such as ``yes`` or ``on``, as true)."""
    if isinstance(value, bool):
        return True
    return isinstance(value, str) and (value.strip().lower() in ("true", "false") or value.startswith("${"))


def switch_error(key: str, value: Any) -> str:
    """The message for a bool setting ``key`` given ``value`` (not :func:`is_switch`), in the one format of a rule."""
    return (
        f"{key} must be true or false, got {value!r} ({type(value).__name__}): a number or a word is no switch "
        "(OmegaConf would turn it into true or false without a word); give true or false"
    )


def setting(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, **rule: Any) -> Any:
    """A dataclass field with its :class:`Rule` (keyword arguments) in its metadata."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"rule": Rule(**rule)})


def check_rules(config: Any, prefix: str = "") -> None:
    """Check every declared rule of ``config`` (a dataclass instance; nested ones under ``<field>.``, those of a
    dict under ``<field>.<key>.``); None passes (a field that takes None says so in its type).

    Raises:
        ValueError: ``<key> must be <rule>, got <value>[: <fix>]`` for the first value that breaks its rule.
    """
    for f in dataclasses.fields(config):
        value, key = getattr(config, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            check_rules(value, key + ".")
            continue
        if isinstance(value, dict) and value and all(dataclasses.is_dataclass(v) for v in value.values()):
            for name, item in value.items():
                check_rules(item, f"{key}.{name}.")
            continue
        rule = f.metadata.get("rule")
        if rule is None or value is None:
            continue
        if rule.distinct:
            check_distinct(key, value, rule.same)
        if not rule.bounds():
            continue
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        wrong_size = rule.size and not (isinstance(value, (list, tuple)) and len(value) == rule.size)
        if wrong_size or not all(rule.holds(v) for v in items):
            infinite = any(isinstance(v, float) and not math.isfinite(v) for v in items)
            raise ValueError(
                f"{key} must be {rule.describe()}, got {value!r}"
                + (" (numbers must be finite)" if infinite else "")
                + (f": {rule.fix}" if rule.fix else "")
            )


def check_distinct(key: str, value: Any, same: Optional[Callable[[Any], Any]] = None) -> None:
    """The rule of a list setting declared ``distinct=True`` (:class:`Rule`): each value once, by its identity
    ``same(value)`` (default: the value itself); a mapping's lists each on their own (``<key>.<name>``). Anything
    else passes (its type is refused elsewhere), and so does a value without an identity (not hashable).

    Raises:
        ValueError: ``<key> <values> repeats a value (<which>: ...): give distinct values, e.g. <key>=<each once>``;
            where ``same`` refuses a value, ``<key> <values> repeats a value (<what same says>): give distinct
            values``.
    """
    if isinstance(value, Mapping):
        for name, values in value.items():
            check_distinct(f"{key}.{name}", values, same)
        return
    if not isinstance(value, (list, tuple)):
        return
    values = list(value)
    try:
        ids = [v if same is None else same(v) for v in values]
    except TypeError:  # a value ``same`` cannot read: refused by its type elsewhere
        return
    except ValueError as e:  # a value that repeats within itself (a pair of one class)
        raise ValueError(f"{key} {values} repeats a value ({e}): give distinct values") from None
    firsts = [ids.index(i) for i in ids]  # where each value's identity comes first
    again = next((n for n, f in enumerate(firsts) if f < n), None)
    if again is not None:
        v, first = values[again], values[firsts[again]]
        which = f"{v!r} given twice" if v == first else f"{v!r} is {first!r} again"
        kept = [u for n, u in enumerate(values) if firsts[n] == n]
        raise ValueError(
            f"{key} {values} repeats a value ({which}: it would be counted twice, or dropped without a word): "
            f"give distinct values, e.g. {key}={_shown(kept)}"
        )


def _shown(value: Any) -> str:
    """A value as an override writes it (``[0, 1]``, ``hom``)."""
    return "[" + ", ".join(map(_shown, value)) + "]" if isinstance(value, (list, tuple)) else str(value)


#: the attribute :func:`mark_given` sets on a config's dataclass instances (not a field: not saved, not compared)
_GIVEN = "_given_keys"


def mark_given(config: Any, keys: "Sequence[str]") -> None:
    """Record on ``config`` (a dataclass instance, as :func:`harness.config.load_config` returns it) and on each
    dataclass under it the dotted ``keys`` (``train.label_smoothing``, ``model.head.num_factors``) the user named
    explicitly, each relative to its instance (``label_smoothing`` on ``config.train``, ``head.num_factors`` on
    ``config.model``), read back by :func:`given_keys`."""
    for key in keys:
        node, parts = config, key.split(".")
        for i, part in enumerate(parts):
            if not dataclasses.is_dataclass(node) or isinstance(node, type):
                break
            marked = node.__dict__.setdefault(_GIVEN, set())
            marked.add(".".join(parts[i:]))
            node = getattr(node, part.split("[", 1)[0], None)


def given_keys(config: Any) -> "frozenset[str]":
    """The dotted keys under ``config`` (a config's dataclass instance) that the user named explicitly
    (:func:`mark_given`; none for a config not made by :func:`harness.config.load_config`, or made without
    overrides)."""
    return frozenset(getattr(config, _GIVEN, ()))


def check_unread_keys(cfg: Any, section: str, selector: str, table: "Mapping[str, Sequence[str]]", what: str) -> None:
    """No key of ``cfg`` (a config section, a dataclass whose defaults tell which keys are set) that the choice
    ``cfg.<selector>`` does not read is set away from its default, or named by the user's overrides at any value
    (:func:`given_keys`: ``train.label_smoothing=0.1``, its default, asks for a smoothing ``train.loss=nll`` never
    applies): ``table`` maps each choice to the keys it reads.

    Raises:
        ValueError: ``<section>.<key>=<value> is read only by <section>.<selector>=<choices>, and this run's <what> is
            <choice>: remove <section>.<key>, or use <section>.<selector>=<choice that reads it>``.
    """
    default, chosen, given = type(cfg)(), getattr(cfg, selector), given_keys(cfg)
    read = table.get(chosen, ())
    for key in (k for keys in table.values() for k in keys if k not in read):
        value = getattr(cfg, key)
        if value != getattr(default, key) or key in given:
            users = [c for c, keys in table.items() if key in keys]
            initial = getattr(default, key)
            at_default = value == initial
            shown, initial = (str(v).lower() if isinstance(v, bool) else v for v in (value, initial))
            tip = (
                "named in the overrides, it is refused at its default too: the run would not do what it asks"
                if at_default
                else f"where a config file sets it, {section}.{key}={initial} restores its default"
            )
            raise ValueError(
                f"{section}.{key}={shown} is read only by {section}.{selector}={' or '.join(users)}, and this run's "
                f"{what} is {chosen}: remove {section}.{key}, or use {section}.{selector}={users[0]} ({tip})"
            )


#: the earliest day a harness record may carry (long before the harness existed): a day or a time before it is a typo
#: or a damaged file (:func:`check_day`, the experiment's clock)
EARLIEST_DAY = "2020-01-01"


def check_day(value: Any, key: str, what: str) -> str:
    """``value`` as a day ``YYYY-MM-DD`` that has come (a day ahead of UTC allowed: time zones), or ``""`` for none;
    ``what`` says what happened on it (``"the endpoint was declared"``): a report reads the runs as started after it
    (prospective) or before it (retrospective).

    Raises:
        ValueError: another string (audit 2026-11-27), a day to come (audit16 A16-08: ``2099-01-01`` made every run
            prospective) or before :data:`EARLIEST_DAY` (audit22 A22-09: ``1926-11-28``), naming the key, the value and
            the fix.
    """
    import datetime
    import re

    from harness.io import quote

    day = str(value).strip()
    try:
        if day and not re.fullmatch(r"\d{4}-\d{2}-\d{2}", day):
            raise ValueError(day)
        date = datetime.date.fromisoformat(day) if day else None
    except ValueError:
        raise ValueError(
            f"{key}={quote(repr(str(value)), 60)} is not a date: give the day {what} as YYYY-MM-DD (e.g. "
            f"{key.rsplit('.', 1)[-1]}: '2026-11-25'), or leave it unset"
        ) from None
    today = datetime.datetime.now(datetime.timezone.utc).date()
    if date is not None and date < datetime.date.fromisoformat(EARLIEST_DAY):
        raise ValueError(
            f"{key}={day} is before {EARLIEST_DAY}, long before any run of the harness: give the day {what} (a typo in "
            "the year?), or leave it unset"
        )
    if date is not None and date > today + datetime.timedelta(days=1):
        raise ValueError(
            f"{key}={day} is after today ({today}, UTC): the report reads the runs as started after the declaration "
            f"(prospective) from it, which a day to come cannot be; give the day {what} (a typo in the year?), or "
            "leave it unset"
        )
    return day
