"""Typed configs read from YAML with command-line overrides (OmegaConf structured configs).

A stage declares a dataclass schema; :func:`load_config` merges, in order, the schema defaults, the
YAML file (after the file its ``base:`` key names, if any) and ``key=value`` overrides (OmegaConf dot-list syntax, e.g. ``optim.lr=0.05``
``model.head.num_factors=8``), checks names and types against the schema, and returns the
dataclass. The resolved config is what a run stores beside its results.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Sequence, Type, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.io import quote

T = TypeVar("T")
#: what a setting's dotted key looks like (``optim.lr``, ``seeds[0]``); another key means the file is not a config,
#: and its text (a file's content) is not quoted back
_SETTING_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}(\.[A-Za-z_][A-Za-z0-9_-]{0,63}|\[\d+\])*")


def load_config(
    schema: Type[T],
    path: "str | Path | None" = None,
    overrides: Sequence[str] = (),
    base: "dict | None" = None,
    distinct: bool = True,
) -> T:
    """Schema defaults <- ``base`` dict <- YAML file (after the files its ``base:`` names) <- overrides, validated, as a
    ``schema`` instance. A ``{}`` in any layer, a file's ``label_noise: {}`` as an override ``key={}``, empties a
    mapping (merging ``{}`` would keep its entries), e.g. ``frontier.schedules={}``. No key may be set twice in
    ``overrides`` (:func:`check_distinct_keys`: the last would win without a word), unless ``distinct=False``: only a
    caller that joins lists on purpose, later ones over earlier ones (an experiment's run plan), passes it. The keys
    the overrides name are recorded on the result (:func:`harness.rules.mark_given`; not those of a file, which may
    list defaults, nor an override that replaces another layer's value): the unread-key rules
    (:func:`harness.rules.check_unread_keys`) refuse them at any value.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: unknown key, wrong type (a bool setting given anything but true or false:
            :func:`harness.rules.is_switch`), a key set twice, an override without a value (``output_dir=``; null
            says none) or malformed (the message names the key).
    """
    layers = [_defaults(schema)]  # OmegaConf.merge copies its first config: the cached defaults stay as they are
    if base is not None:
        layers.append(OmegaConf.create(base))
        _check_switches(schema, base, "the given settings")
    if path is not None:
        for layer in _file_layers(Path(path)):
            layers.append(layer)
            _check_switches(schema, OmegaConf.to_container(layer), f"config {path}")
    if isinstance(overrides, str):  # a string would be read character by character
        raise ValueError(
            f"overrides must be a list of key=value settings, got the string {quote(repr(overrides))}: write [{overrides}]"
        )
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ValueError(f"overrides must look like key=value (e.g. optim.lr=0.05), got {quote(str(bad))}")
    if distinct:
        check_distinct_keys(overrides, "the overrides")
    _check_override_values(overrides)
    for o in overrides:
        try:
            layers.append(OmegaConf.from_dotlist([o]))
        except (OmegaConfBaseException, yaml.YAMLError) as e:
            key = o.split("=", 1)[0]
            raise ValueError(
                f"override {quote(o)}: the value of {key} is not valid YAML ("
                f"{quote(str(getattr(e, 'problem', None) or e).splitlines()[0])}); quote it, or close its "
                f"brackets, e.g. {key}=[0,1]"
            ) from None
        _check_switches(schema, OmegaConf.to_container(layers[-1]), f"override {o!r}")
    try:
        merged, pending = layers[0], []
        for layer in layers[1:]:  # in order, a layer's {} replacing a mapping (merging {} would keep its entries)
            pending.append(layer)
            empty = _empty_mappings(OmegaConf.to_container(layer))
            if empty:
                merged, pending = OmegaConf.merge(merged, *pending), []
            for key in empty:
                if OmegaConf.get_type(OmegaConf.select(merged, key)) is dict:  # a free mapping, not a section
                    OmegaConf.update(merged, key, {}, merge=False)
        merged = OmegaConf.merge(merged, *pending)
        config = OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = str(getattr(e, "full_key", None) or "")
        if key and not _SETTING_KEY.fullmatch(key):  # a key that is no setting name: the file is not a config
            raise ValueError(
                f"invalid config{f' {path}' if path else ''}: it holds an entry that is not a setting of "
                f"{schema.__name__} (a key that is not a setting name; the file's content is not shown): "
                "is it a config file?"
            ) from None
        raise ValueError(_setting_error(e, key, path, overrides, schema)) from None
    except TypeError as e:  # a list where the schema has a mapping (or the reverse): name the layer that brings it
        where = f" {path}" if path else ""
        for i in range(1, len(layers)):
            try:
                OmegaConf.merge(*layers[: i + 1])
            except TypeError:
                n_over = len(layers) - len(overrides)
                where = f" override {quote(overrides[i - n_over])}" if i >= n_over else where
                if i >= n_over and "[" in overrides[i - n_over].split("=", 1)[0]:  # an element past a list's end
                    key = overrides[i - n_over].split("[", 1)[0].strip()
                    raise ValueError(
                        f"invalid config{where}: an index sets an element of a list that exists (index < its "
                        f"length); to change the list's length give it whole: {key}=[v1,v2,...]"
                    ) from None
                break
        raise ValueError(
            f"invalid config{where}: {e} (a list where a mapping is expected, or the reverse; e.g. "
            "methods: {hom: {covariance: none}}, seeds: [0, 1])"
        ) from e
    from harness.rules import mark_given

    mark_given(config, _named(layers[1:], len(overrides)))  # for the unread-key rules: named keys count at any value
    return config


def _named(layers: list, n_over: int) -> "list[str]":
    """The dotted keys the last ``n_over`` of ``layers`` (the overrides, after the ``base`` dict and the files) name,
    each a leaf (``optim={name: adamw}`` names ``optim.name``), less those whose override replaces another value an
    earlier layer gave (``train.label_smoothing=0.1`` over a file's 0.3: the fix that restores a default)."""
    before: "dict[str, object]" = {}
    named: "dict[str, None]" = {}
    for i, layer in enumerate(layers):
        override = i >= len(layers) - n_over
        for key, value in _leaves(OmegaConf.to_container(layer)):
            if override and (key not in before or before[key] == value):
                named[key] = None
            elif override:
                named.pop(key, None)
            before[key] = value
    return list(named)


def _leaves(tree: object, prefix: str = "") -> "list[tuple[str, object]]":
    """``(dotted key, value)`` of each leaf of ``tree`` (a layer's plain container; a list or ``{}`` is a leaf)."""
    if not isinstance(tree, dict) or (prefix and not tree):
        return [(prefix[:-1], tree)] if prefix else []
    return [leaf for key, value in tree.items() for leaf in _leaves(value, f"{prefix}{key}.")]


def _check_override_values(overrides: Sequence[str]) -> None:
    """Each ``key=value`` override has a value, without a control character (OmegaConf would read an empty value as
    null and turn a newline into a space, both without a word).

    Raises:
        ValueError: naming the override, its key and the fix.
    """
    control = [o for o in overrides if any(ord(c) < 32 or ord(c) == 127 for c in o)]
    if control:
        key = control[0].split("=", 1)[0].strip()
        raise ValueError(
            f"override {quote(repr(control[0]))} holds a control character (a newline, a tab...): OmegaConf would turn "
            f"it into a space without a word; give {key} a value without one"
        )
    empty = [o for o in overrides if not o.split("=", 1)[1].strip()]
    if empty:
        key = empty[0].split("=", 1)[0].strip()
        raise ValueError(
            f"override {quote(empty[0])} gives {key} no value (it would be read as null: for most settings their "
            f"default, without a word): give a value, or {key}=null where null is what you mean"
        )


def _empty_mappings(tree: object, prefix: str = "") -> "list[str]":
    """The dotted keys of ``tree`` (a layer's plain container) whose value is an empty mapping ``{}``."""
    if not isinstance(tree, dict):
        return []
    found = []
    for key, value in tree.items():
        if isinstance(value, dict):
            found += [f"{prefix}{key}"] if not value else _empty_mappings(value, f"{prefix}{key}.")
    return found


def check_distinct_keys(overrides: Sequence[str], where: str) -> None:
    """No key is set twice in one list of ``key=value`` overrides (the last would win without a word).

    Raises:
        ValueError: naming the list (``where``), the key, both settings and the fix.
    """
    seen: "dict[str, str]" = {}
    for o in overrides:
        key = str(o).split("=", 1)[0].strip()
        if key in seen:
            raise ValueError(
                f"{where} set {key} twice ({quote(seen[key], 80)} and {quote(str(o), 80)}): only the last would "
                "count; keep one"
            )
        seen[key] = str(o)


def _unwrap(kind: object) -> object:
    """``X`` of ``Optional[X]``; any other type as it is."""
    import typing

    args = [a for a in typing.get_args(kind) if a is not type(None)]
    return args[0] if typing.get_origin(kind) is typing.Union and len(args) == 1 else kind


@functools.lru_cache(maxsize=None)
def _hints(schema: type) -> "dict[str, object]":
    """The fields' declared types of a dataclass ``schema`` (resolved once per schema)."""
    import typing

    return typing.get_type_hints(schema)


def _declared(schema: type, key: str) -> "tuple[object, object] | None":
    """(declared type, :class:`harness.rules.Rule` or None) of the setting ``key`` (dotted) of a dataclass ``schema``,
    an entry of a mapping field taking the mapping's value type (``methods.hom``: ``Dict[str, Any]``); None where the
    key is no field (a list element, an entry of a mapping of any values)."""
    import dataclasses
    import typing

    rule = None
    for part in key.split("."):
        kind = _unwrap(schema)
        if typing.get_origin(kind) is dict and len(typing.get_args(kind)) == 2:
            schema, rule = typing.get_args(kind)[1], None
            continue
        if not dataclasses.is_dataclass(kind):
            return None
        field = {f.name: f for f in dataclasses.fields(kind)}.get(part)
        if field is None:
            return None
        schema, rule = _hints(kind).get(part), field.metadata.get("rule")
    return schema, rule


def _check_switches(schema: type, layer: object, where: str, prefix: str = "") -> None:
    """Every bool field of ``schema`` that ``layer`` (one layer of settings, a plain container) sets is true or
    false (:func:`harness.rules.is_switch`, the one rule of every bool setting), nested dataclasses and mappings or
    lists of them too; keys that are no field are left to OmegaConf.

    Raises:
        ValueError: ``invalid config (<where>): <key> must be true or false, got <value> ...``.
    """
    import dataclasses
    import typing

    from harness.rules import is_switch, switch_error

    if not dataclasses.is_dataclass(schema) or not isinstance(layer, dict):
        return
    hints = _hints(schema)
    for name, value in layer.items():
        kind, key = _unwrap(hints.get(name)), f"{prefix}{name}"
        args = typing.get_args(kind)
        if kind is bool and value is not None and not is_switch(value):
            raise ValueError(quote(f"invalid config ({where}): {switch_error(key, value)}", 400))
        if dataclasses.is_dataclass(kind):
            _check_switches(kind, value, where, key + ".")
        elif typing.get_origin(kind) is dict and len(args) == 2 and isinstance(value, dict):
            for k, v in value.items():
                _check_switches(_unwrap(args[1]), v, where, f"{key}.{k}.")
        elif typing.get_origin(kind) is list and args and isinstance(value, list):
            for i, v in enumerate(value):
                _check_switches(_unwrap(args[0]), v, where, f"{key}[{i}].")


def _type_fix(declared: "tuple[object, object]", key: str = "") -> str:
    """The fix for a value of the wrong type, by the setting's declared type (None where no wording fits)."""
    import typing

    kind, rule = declared
    kind = _unwrap(kind)
    choices = getattr(rule, "choices", ())
    if kind is str:
        return "it takes a string" + (f": one of {', '.join(choices)}" if choices else "") + ", not a list or mapping"
    origin = typing.get_origin(kind)
    if origin is dict:
        return _mapping_fix(key)
    return {int: _TYPE_FIXES["Integer"], float: _TYPE_FIXES["Float"], bool: _TYPE_FIXES["valid bool"]}.get(
        kind, {list: _TYPE_FIXES["ListConfig"]}.get(origin)
    )


def _mapping_fix(key: str) -> str:
    """The fix for a mapping setting ``key`` given another type; the example entry is a head option where the mapping
    holds one (``model.head``, a method of ``methods``)."""
    head = key == "model.head" or key.startswith("methods.") or not key
    name, value = ("covariance", "none") if head else ("NAME", "VALUE")
    key = key or "model.head"
    return f"give a mapping of settings, one by one ({key}.{name}={value}) or whole ({key}={{{name}: {value}}})"


#: OmegaConf's type names in a conversion error, and the fix to print for each
_TYPE_FIXES = {
    "Integer": "give a whole number, e.g. 3",
    "Float": "give a number, e.g. 0.05",
    "valid bool": "give true or false",
    "ListConfig": "give a list, e.g. [0, 1]",
    "Dict[": _mapping_fix(""),
}
#: OmegaConf's message for a whole number YAML read as a float (``1e9``: YAML reads an exponent as a float)
_WHOLE_FLOAT = re.compile(r"Value '(-?\d+)\.0' of type 'float' could not be converted to Integer")


def _setting_error(
    e: Exception, key: str, path: "str | Path | None", overrides: Sequence[str], schema: "type | None" = None
) -> str:
    """The message of a setting OmegaConf refused: the key, where the value came from (the override that sets it,
    else the file) and the fix for the setting's declared type (else for the type OmegaConf names)."""
    first = str(e).splitlines()[0].strip()

    def sets(override: str) -> bool:  # the override sets this key, or a key inside it, or it sets a key inside this one
        k = override.split("=", 1)[0].strip()
        return bool(key) and (k == key or key.startswith(k + ".") or k.startswith(key + ".") or key.startswith(k + "["))

    given = [o for o in overrides if sets(o)]
    where = f"override {given[-1]!r}" if given else (f"config {path}" if path else "the defaults")
    declared = _declared(schema, key) if schema is not None and key else None
    fix = (_type_fix(declared, key) if declared else None) or next(
        (f for n, f in _TYPE_FIXES.items() if n in first), ""
    )
    whole = _WHOLE_FLOAT.search(first)
    if whole:  # 1e9 is a whole number, which YAML reads as a float
        exact = [o.split("=", 1)[1].strip() for o in given if o.split("=", 1)[0].strip() == key]
        read = (
            f"{exact[-1]} as a float (it has an exponent or a decimal point)"
            if exact
            else ("a number with an exponent or a decimal point (1e9, 100.0) as a float")
        )
        fix = f"YAML reads {read}; write the whole number without them: {whole.group(1)}"
    return quote(f"invalid config ({where}): {key + ': ' if key else ''}{first}{'; ' + fix if fix else ''}", 400)


@functools.lru_cache(maxsize=None)
def _defaults(schema: type) -> "DictConfig":
    """``OmegaConf.structured(schema)``, built once per schema (it is most of the time of :func:`load_config`, which an
    experiment's planner calls once per run)."""
    return OmegaConf.structured(schema)


def read_settings(path: "str | Path") -> dict:
    """The settings of a YAML file merged over the chain of files its ``base:`` key names, as a plain dict,
    unchecked: for a reader of one section of a config (e.g. ``data`` of a run config, checked by that reader).

    Raises:
        FileNotFoundError: no file at ``path`` (or at a ``base:`` it names).
        ValueError: not valid YAML, not a mapping, or a ``base:`` chain that includes itself.
    """
    return OmegaConf.to_container(OmegaConf.merge(*_file_layers(Path(path))), resolve=True)


def _file_layers(path: Path, seen: "tuple[Path, ...]" = ()) -> list:
    """The YAML at ``path``, preceded by the chain of files named by its ``base:`` key (a path
    relative to the file), so a config can state only what differs from a shared base."""
    if not path.is_file():
        raise FileNotFoundError(f"no config file at {str(path)!r}")
    if path.resolve() in seen:
        raise ValueError(f"config {path} includes itself through 'base:'")
    try:
        layer = OmegaConf.load(path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = quote(str(getattr(e, "problem", None) or e))
        raise ValueError(f"{path}{where} is not valid YAML ({problem}); fix the file") from None
    except (OmegaConfBaseException, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: {quote(str(e))}; fix the file (a YAML file of settings)") from None
    if not hasattr(layer, "keys"):
        raise ValueError(f"{path} must hold a mapping of settings (key: value lines), not a list or a value")
    base = layer.pop("base", None) if hasattr(layer, "pop") else None
    if base is None:
        return [layer]
    if not isinstance(base, str) or not base.strip():
        shown = OmegaConf.to_container(base) if OmegaConf.is_config(base) else base
        raise ValueError(
            f"{path}: base: {quote(repr(shown))} must be one path (a YAML file, relative to this file): give one file, e.g. base: digits_base.yaml; a "
            "chain of bases goes file to file, each naming its own base"
        )
    target = path.parent / base
    if not target.is_file():
        raise FileNotFoundError(
            f"{path}: base: {base} names no file (looked for {target.resolve()}; a base is a path relative to the file "
            "that names it): fix the path"
        )
    return _file_layers(target, seen + (path.resolve(),)) + [layer]


def to_yaml(config: object) -> str:
    """YAML text of a config dataclass (resolved)."""
    return OmegaConf.to_yaml(OmegaConf.structured(config), resolve=True)


def to_dict(config: object) -> dict:
    """Plain nested dict of a config dataclass (resolved)."""
    return OmegaConf.to_container(OmegaConf.structured(config), resolve=True)
