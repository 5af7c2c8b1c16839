"""A typed dataclass from a parsed YAML/JSON mapping, every key and value checked.

Nested dataclasses, enums, lists, optionals and the scalar types are coerced by the
field's type hint; anything else is one InputError that names the file and the key
path (`scenario 'x'.run.steps must be an integer, got 'ten'`).

    scenario = build_dataclass(Scenario, raw, "my.yaml", "scenario 'mine'")
"""

from __future__ import annotations

import dataclasses
import enum
import typing

from stragglerlab.util.errors import InputError


def _echo(value: object) -> str:
    from stragglerlab.util.filecheck import echo, number_hint

    return echo(value) + number_hint(value)


def build_dataclass(cls, raw: object, where: str, ctx: str):
    """Dataclass `cls` built from a mapping, every key and type checked: an unknown key or
    a wrong type is one InputError naming `where` (the file) and `ctx` (the key path)."""
    if not isinstance(raw, dict):
        raise InputError(f"{ctx} must be a mapping, got {type(raw).__name__}", where)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(map(str, set(raw) - set(fields)))
    if unknown:
        raise InputError(f"{ctx}: unknown key(s) {', '.join(map(str, unknown))[:80]}; known: "
                         f"{', '.join(fields)}", where)
    kwargs = {k: _coerce(hints[k], v, where, f"{ctx}.{k}") for k, v in raw.items()}
    return cls(**kwargs)


def _coerce(hint, value, where: str, ctx: str):
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
        if value is None and type(None) in args:
            return None
        hint = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return build_dataclass(hint, value, where, ctx)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            allowed = ", ".join(e.value for e in hint)
            raise InputError(f"{ctx}: {_echo(value)} is not one of {allowed}", where) from None
    if origin is list:
        if not isinstance(value, list):
            raise InputError(f"{ctx} must be a list, got {_echo(value)}", where)
        return [_coerce(args[0], v, where, f"{ctx}[{i}]") for i, v in enumerate(value)]
    if hint is dict:
        if not isinstance(value, dict):
            raise InputError(f"{ctx} must be a mapping, got {_echo(value)}", where)
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise InputError(f"{ctx} must be true or false, got {_echo(value)}", where)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{ctx} must be an integer, got {_echo(value)}", where)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{ctx} must be a number, got {_echo(value)}", where)
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise InputError(f"{ctx} must be a string, got {_echo(value)}", where)
        return value
    return value
