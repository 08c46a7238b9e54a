"""Which Attribute value types are deeply immutable (safe to decode once and share).

A decoded value may be handed to many Steps only when no Step can change it:
plain scalars, enums, dates, ``tuple`` / ``frozenset`` of such values, their
unions and ``Literal``, and frozen dataclasses whose fields are all of these.
Anything else (lists, dicts, ``Any``, mutable classes) is decoded afresh on
every read, as the SDK does.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import types
import typing
import uuid
from typing import Any

_SCALARS: frozenset[object] = frozenset(
    {
        str,
        int,
        float,
        bool,
        bytes,
        type(None),
        None,
        datetime.datetime,
        datetime.date,
        datetime.time,
        datetime.timedelta,
        decimal.Decimal,
        uuid.UUID,
    }
)

_known: dict[object, bool] = {}


def deeply_immutable(value_type: object) -> bool:
    """Whether every value of ``value_type`` is immutable all the way down."""
    try:
        known = _known.get(value_type)
    except TypeError:  # an unhashable annotation
        return False
    if known is None:
        known = mutable_part(value_type) is None
        _known[value_type] = known
    return known


def mutable_part(value_type: object, where: str = "") -> str | None:
    """``None`` when ``value_type`` is deeply immutable; otherwise where a value
    of it can be changed in place (``where`` names the root, fields follow it)."""
    return _check(value_type, where or _name(value_type), set())


def _name(value_type: object) -> str:
    return getattr(value_type, "__name__", repr(value_type))


def _check(value_type: object, where: str, visiting: set[int]) -> str | None:
    if value_type in _SCALARS:
        return None
    if isinstance(value_type, type) and issubclass(value_type, enum.Enum):
        return None
    origin = typing.get_origin(value_type)
    if origin is typing.Literal:
        return None
    arguments = typing.get_args(value_type)
    if origin is typing.Annotated:
        return _check(arguments[0], where, visiting)
    if origin in (typing.Union, types.UnionType, tuple, frozenset):
        for argument in arguments:
            if argument is not Ellipsis:
                found = _check(argument, where, visiting)
                if found is not None:
                    return found
        return None
    if isinstance(value_type, type) and dataclasses.is_dataclass(value_type):
        return _frozen_dataclass(value_type, where, visiting)
    return f"{where}: {value_type!r} values can be changed in place"


def _frozen_dataclass(value_type: type[Any], where: str, visiting: set[int]) -> str | None:
    params = getattr(value_type, "__dataclass_params__", None)
    if params is None or not params.frozen:
        return f"{where}: {value_type.__name__} is not a frozen dataclass"
    if id(value_type) in visiting:  # a recursive type: decided by its other fields
        return None
    visiting.add(id(value_type))
    try:
        hints = typing.get_type_hints(value_type)
    except Exception:  # an annotation that does not resolve: be safe
        return f"{where}: the field types of {value_type.__name__} do not resolve"
    for f in dataclasses.fields(value_type):
        found = _check(hints.get(f.name, Any), f"{where}.{f.name}", visiting)
        if found is not None:
            return found
    return None
