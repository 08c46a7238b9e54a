"""Rebuilding stored values into their declared field types.

The SDK's JSON codec decodes a dataclass field typed ``X | None``, where ``X``
is a dataclass, a ``datetime`` or an enum, as the raw JSON value. Every wire
type of the session is a :func:`wire_value`: each construction (by a caller, or
by the codec reading a stored value back) runs :func:`coerce_fields`, so a value
read back from the store or across a Ray boundary has its declared types again,
and a list given for a ``tuple[...]`` field becomes a tuple.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from enum import Enum
from typing import Any, TypeVar

__all__ = ["coerce_fields", "wire_value"]

T = TypeVar("T")


_COERCERS: dict[type[Any], Callable[[object], None]] = {}


def wire_value(cls: type[T]) -> type[T]:
    """Class decorator for a session wire type, placed below ``@dataclass``: every
    construction gives the fields their declared types (:func:`coerce_fields`),
    then runs the class's own ``__post_init__`` checks, if it has any.

    Example::

        @dataclass(frozen=True, kw_only=True)
        @wire_value
        class PlanTodo:
            content: str
            status: TodoStatus

        PlanTodo(content="x", status="pending").status is TodoStatus.PENDING

    Raises:
        TypeError: It was placed above ``@dataclass`` (whose ``__init__`` would not
            call the hook).
    """
    if dataclasses.is_dataclass(cls):
        raise TypeError(f"@wire_value goes below @dataclass ({cls.__qualname__})")
    checks: Callable[[object], None] | None = cls.__dict__.get("__post_init__")
    if checks is None:

        def __post_init__(self: object) -> None:
            coerce_fields(self)

    else:
        own = checks

        def __post_init__(self: object) -> None:
            coerce_fields(self)
            own(self)

    __post_init__.__qualname__ = f"{cls.__qualname__}.__post_init__"
    setattr(cls, "__post_init__", __post_init__)  # noqa: B010 - a hook on a class being built
    return cls


def coerce_fields(instance: object) -> None:
    """Replace each field of a frozen dataclass with its value in the declared type."""
    cls: type[Any] = type(instance)
    coerce = _COERCERS.get(cls)
    if coerce is None:
        coerce = _COERCERS[cls] = _compile(cls)
    coerce(instance)


def _compile(cls: type[Any]) -> Callable[[object], None]:
    """``cls``'s coercion as one function with a line per field (every value of
    the session's wire types passes here): a value whose exact type the hint
    names, and an empty tuple for a ``tuple[...]`` field, pass as they are;
    others go through :func:`_coerce`. ``Any`` fields are left alone."""
    hints = typing.get_type_hints(cls)
    namespace: dict[str, Any] = {"_coerce": _coerce, "_set": object.__setattr__}
    lines = ["def coerce(instance):"]
    for index, field in enumerate(dataclasses.fields(cls)):
        hint = hints[field.name]
        if hint is Any:
            continue
        exact = _exact_types(hint)
        namespace[f"_hint{index}"] = hint
        namespace[f"_exact{index}"] = exact
        item = _tuple_item_class(hint)
        if exact:
            test = f"type(value) not in _exact{index}"
        elif item is not None:
            # A tuple of exactly the item class (as decoded) passes without a walk.
            namespace[f"_item{index}"] = item
            test = (
                f"type(value) is not tuple or any(type(entry) is not _item{index} "
                "for entry in value)"
            )
        elif typing.get_origin(hint) is tuple:
            test = "type(value) is not tuple or value"
        elif _any_valued_mapping(hint):
            # Nothing in a dict of ``Any`` values changes: a dict passes as it is.
            test = "type(value) is not dict"
        else:
            test = "True"
        lines += [
            f"    value = instance.{field.name}",
            f"    if {test}:",
            f"        coerced = _coerce(value, _hint{index})",
            "        if coerced is not value:",
            f"            _set(instance, {field.name!r}, coerced)",
        ]
    lines.append("    return None")
    exec("\n".join(lines), namespace)  # noqa: S102 - the code is built from field names
    coerce: Callable[[object], None] = namespace["coerce"]
    return coerce


def _any_valued_mapping(hint: Any) -> bool:
    """Whether ``hint`` is ``dict[K, Any]`` or ``Mapping[K, Any]``."""
    arguments = typing.get_args(hint)
    return (
        typing.get_origin(hint) in (dict, Mapping) and len(arguments) == 2 and arguments[1] is Any
    )


def _tuple_item_class(hint: Any) -> type[Any] | None:
    """``X`` for a ``tuple[X, ...]`` hint whose items are a plain class; else ``None``."""
    if typing.get_origin(hint) is not tuple:
        return None
    arguments = typing.get_args(hint)
    if len(arguments) != 2 or arguments[1] is not Ellipsis:
        return None
    item = arguments[0]
    return item if isinstance(item, type) and typing.get_origin(item) is None else None


def _exact_types(hint: Any) -> frozenset[type[Any]]:
    if hint in (str, int, bool, bytes, datetime):
        return frozenset({hint})
    if isinstance(hint, type) and issubclass(hint, Enum):
        return frozenset({hint})
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        parts = [
            frozenset({type(None)}) if a is type(None) else _exact_types(a)
            for a in typing.get_args(hint)
        ]
        return frozenset().union(*parts) if all(parts) else frozenset()
    return frozenset()


def _coerce(value: Any, hint: Any) -> Any:  # noqa: C901 - one branch per type form
    if hint is Any or value is None:
        return value
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return _coerce_union(value, arguments)
    if origin is typing.Literal:
        return value
    if origin is tuple:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            return value
        item = arguments[0] if arguments else Any
        coerced = tuple(_coerce(entry, item) for entry in value)
        if type(value) is tuple and all(a is b for a, b in zip(coerced, value, strict=True)):
            return value  # nothing changed: keep the tuple given
        return coerced
    if origin is list:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            return value
        item = arguments[0] if arguments else Any
        return [_coerce(entry, item) for entry in value]
    if origin in (frozenset, set):
        item = arguments[0] if arguments else Any
        return frozenset(_coerce(entry, item) for entry in value)
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            return value
        item = arguments[1] if len(arguments) == 2 else Any
        return {key: _coerce(entry, item) for key, entry in value.items()}
    if isinstance(hint, type):
        return _coerce_type(value, hint)
    return value


def _coerce_union(value: Any, arguments: tuple[Any, ...]) -> Any:
    options = [argument for argument in arguments if argument is not type(None)]
    for option in options:
        if isinstance(option, type) and isinstance(value, option):
            return value
    for option in options:
        coerced = _coerce(value, option)
        if coerced is not value:
            return coerced
    return value


def _coerce_type(value: Any, hint: type[Any]) -> Any:
    if isinstance(value, hint):
        return value
    if hint is datetime and isinstance(value, str):
        return datetime.fromisoformat(value)
    if issubclass(hint, Enum):
        return hint(value)
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        from_dict = getattr(hint, "from_dict", None)
        if callable(from_dict):
            return from_dict(value)
        names = {field.name for field in dataclasses.fields(hint) if field.init}
        return hint(**{key: entry for key, entry in value.items() if key in names})
    return value
