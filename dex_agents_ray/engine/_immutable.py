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
        known = _check(value_type, set())
        _known[value_type] = known
    return known


def _check(value_type: object, visiting: set[int]) -> bool:
    if value_type in _SCALARS:
        return True
    if isinstance(value_type, type) and issubclass(value_type, enum.Enum):
        return True
    origin = typing.get_origin(value_type)
    if origin is typing.Literal:
        return True
    if origin in (typing.Union, types.UnionType):
        return all(_check(arg, visiting) for arg in typing.get_args(value_type))
    if origin in (tuple, frozenset):
        return all(arg is Ellipsis or _check(arg, visiting) for arg in typing.get_args(value_type))
    if origin is typing.Annotated:
        return _check(typing.get_args(value_type)[0], visiting)
    if isinstance(value_type, type) and dataclasses.is_dataclass(value_type):
        return _frozen_dataclass(value_type, visiting)
    return False


def _frozen_dataclass(value_type: type[Any], visiting: set[int]) -> bool:
    params = getattr(value_type, "__dataclass_params__", None)
    if params is None or not params.frozen:
        return False
    if id(value_type) in visiting:  # a recursive type: decided by its other fields
        return True
    visiting.add(id(value_type))
    try:
        hints = typing.get_type_hints(value_type)
    except Exception:  # an annotation that does not resolve: be safe
        return False
    return all(_check(hints.get(f.name, Any), visiting) for f in dataclasses.fields(value_type))
