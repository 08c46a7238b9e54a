"""JSON Schema from type hints, and JSON values back into the hinted Python types.

Standard library only. Supported hints: ``str``, ``int``, ``float``, ``bool``,
``None``, ``list`` / ``list[T]``, ``dict`` / ``dict[str, T]``, ``Literal``,
``Enum`` subclasses, unions (``X | Y``, ``Optional[X]``), dataclasses,
``TypedDict`` classes, and ``Annotated[T, "description"]``. Anything else is
refused with ``TypeError`` when the tool is defined, naming the parameter.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from dex_agents_ray.builtin_loop._validation import json_type_name
from dex_agents_ray.errors import DexAgentsError

__all__ = ["decode_value", "schema_for_hint"]

_SCALARS: dict[object, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
    None: "null",
}


_CONSTANT_TYPES = frozenset({"null", "boolean", "integer", "number", "string"})


def _json_type_of_constant(value: object) -> str | None:
    kind = json_type_name(value)
    return kind if kind in _CONSTANT_TYPES else None


def _enum_schema(values: list[object], where: str) -> dict[str, Any]:
    kinds = []
    for value in values:
        kind = _json_type_of_constant(value)
        if kind is None:
            raise TypeError(f"{where}: {value!r} is not a JSON string, number, boolean or null")
        kinds.append(kind)
    schema: dict[str, Any] = {}
    if len(set(kinds)) == 1:
        schema["type"] = kinds[0]
    schema["enum"] = list(values)
    return schema


def _is_union(origin: object) -> bool:
    return origin is typing.Union or origin is types.UnionType


def _is_typed_dict(hint: object) -> bool:
    return isinstance(hint, type) and typing.is_typeddict(hint)


def schema_for_hint(hint: Any, where: str, seen: frozenset[type] = frozenset()) -> dict[str, Any]:  # noqa: C901 - one branch per hint form
    """The JSON Schema of values of ``hint``.

    Args:
        hint: A resolved type hint (``typing.get_type_hints(..., include_extras=True)``).
        where: What the hint belongs to, for error messages.
        seen: Classes being expanded, to refuse recursive types.

    Raises:
        TypeError: The hint is not supported.
    """
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        schema = schema_for_hint(arguments[0], where, seen)
        descriptions = [meta for meta in arguments[1:] if isinstance(meta, str)]
        if descriptions:
            schema["description"] = descriptions[0]
        return schema
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if _is_union(origin):
        options: list[dict[str, Any]] = []
        for option in arguments:
            schema = schema_for_hint(option, where, seen)
            options.extend(schema["anyOf"] if list(schema) == ["anyOf"] else [schema])
        return {"anyOf": options}
    if origin is Literal:
        return _enum_schema(list(arguments), where)
    if hint is list or origin is list:
        if not arguments:
            return {"type": "array"}
        return {"type": "array", "items": schema_for_hint(arguments[0], where, seen)}
    if hint is dict or origin is dict:
        if not arguments:
            return {"type": "object"}
        if arguments[0] is not str:
            raise TypeError(f"{where}: dict keys must be str, not {arguments[0]!r}")
        return {
            "type": "object",
            "additionalProperties": schema_for_hint(arguments[1], where, seen),
        }
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([member.value for member in hint], where)
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or _is_typed_dict(hint)):
        if hint in seen:
            raise TypeError(f"{where}: recursive type {hint.__qualname__} is not supported")
        return _class_schema(hint, where, seen | {hint})
    raise TypeError(f"{where}: type {hint!r} is not supported in a tool schema")


def _class_schema(cls: type, where: str, seen: frozenset[type]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls, include_extras=True)
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            properties[field.name] = schema_for_hint(
                hints[field.name], f"{where}: field {field.name}", seen
            )
            no_default = (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            )
            if no_default:
                required.append(field.name)
    else:
        for name, (field_hint, is_required) in _typed_dict_keys(cls).items():
            properties[name] = schema_for_hint(field_hint, f"{where}: key {name}", seen)
            if is_required:
                required.append(name)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _typed_dict_keys(cls: type) -> dict[str, tuple[Any, bool]]:
    """Each key's hint and whether it is required.

    ``Required`` / ``NotRequired`` in the hint win over ``__required_keys__``,
    which Python 3.11 gets wrong for string annotations.
    """
    hints = typing.get_type_hints(cls, include_extras=True)
    required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    keys: dict[str, tuple[Any, bool]] = {}
    for name, hint in hints.items():
        is_required = name in required_keys
        origin = typing.get_origin(hint)
        if origin is typing.NotRequired or origin is typing.Required:
            is_required = origin is typing.Required
            hint = typing.get_args(hint)[0]
        keys[name] = (hint, is_required)
    return keys


class _Mismatch(DexAgentsError):
    """A JSON value does not fit a hint (tried while choosing a union option)."""


def decode_value(value: Any, hint: Any) -> Any:
    """Turn a JSON value that passed the hint's schema into the hinted Python value.

    Dataclasses are built, enum values become members, an integral number
    becomes ``int`` for an ``int`` hint and any number ``float`` for a
    ``float`` hint. A union takes the first option the value fits.
    """
    return _decode(value, hint)


def _decode(value: Any, hint: Any) -> Any:  # noqa: C901 - one branch per hint form
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Annotated:
        return _decode(value, arguments[0])
    if _is_union(origin):
        for option in arguments:
            try:
                return _decode(value, option)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin is Literal:
        for option in arguments:
            if value == option and _json_type_of_constant(value) == _json_type_of_constant(option):
                return option
        raise _Mismatch
    if hint in _SCALARS:
        return _decode_scalar(value, hint)
    if hint is list or origin is list:
        if not isinstance(value, list):
            raise _Mismatch
        return [_decode(item, arguments[0]) for item in value] if arguments else value
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise _Mismatch
        if not arguments:
            return value
        return {key: _decode(item, arguments[1]) for key, item in value.items()}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        for member in hint:
            if member.value == value:
                return member
        raise _Mismatch
    if isinstance(hint, type) and (dataclasses.is_dataclass(hint) or _is_typed_dict(hint)):
        return _decode_class(value, hint)
    return value


def _decode_scalar(value: Any, hint: Any) -> Any:
    if hint in (None, type(None)):
        if value is not None:
            raise _Mismatch
        return None
    if hint is bool:
        if not isinstance(value, bool):
            raise _Mismatch
        return value
    if isinstance(value, bool):
        raise _Mismatch
    if hint is int:
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise _Mismatch
    if hint is float:
        if isinstance(value, int | float):
            return float(value)
        raise _Mismatch
    if not isinstance(value, str):
        raise _Mismatch
    return value


def _decode_class(value: Any, cls: type) -> Any:
    if not isinstance(value, Mapping):
        raise _Mismatch
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls, include_extras=True)
        fields = [field for field in dataclasses.fields(cls) if field.init]
        needed = {
            field.name
            for field in fields
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        }
        if not needed <= set(value) <= {field.name for field in fields}:
            raise _Mismatch
        return cls(**{key: _decode(item, hints[key]) for key, item in value.items()})
    keys = _typed_dict_keys(cls)
    required = {name for name, (_, is_required) in keys.items() if is_required}
    if not required <= set(value) <= set(keys):
        raise _Mismatch
    return {key: _decode(item, keys[key][0]) for key, item in value.items()}
