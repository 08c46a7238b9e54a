"""How many bytes an attribute value takes in the store, without decoding it."""

from __future__ import annotations

from typing import Any

from dex import Attribute, AttributeMap
from dex.dexpb import dex_pb2 as pb

from dex_agents_ray.engine.sdk._sdk import InvocationContext

__all__ = ["encoded_size", "stored_size"]


def stored_size(
    context: Any, definition: Attribute[Any] | AttributeMap[Any], instance: str | None = None
) -> int | None:
    """Bytes of the value as the handler's Context holds it (staged writes first).

    Encoded JSON values count their payload; other kinds their wire size.
    ``None`` when the value is absent or ``context`` is not a Context this
    engine (the SDK's ``InvocationContext``) built, so callers can measure
    another way.
    """
    if not isinstance(context, InvocationContext):
        return None
    key = context._physical_name(definition, instance)
    write = context.attribute_writes.get(key)
    value: pb.Value | None = write.value if write is not None else context._attributes.get(key)
    return _size(value)


def encoded_size(
    context: Any, definition: Attribute[Any] | AttributeMap[Any], value: Any
) -> int | None:
    """Bytes ``value`` would take stored under ``definition`` (as ``stored_size``
    counts them); ``None`` when ``context`` is not this engine's."""
    if not isinstance(context, InvocationContext):
        return None
    return _size(context._values.encode(value, context._flow_codec(definition.value_type)))


def _size(value: pb.Value | None) -> int | None:
    if value is None or value.WhichOneof("kind") in (None, "null_value"):
        return None
    if value.WhichOneof("kind") == "obj_value":
        return len(value.obj_value.payload)
    return int(value.ByteSize())
