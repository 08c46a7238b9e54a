"""``json_ready``: a value as JSON data, for event payloads and browser snapshots."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from enum import StrEnum
from typing import Any

from dex_agents_ray.media import AgentImageReference

__all__ = ["json_ready"]


def json_ready(value: Any) -> Any:
    """``value`` with enums, datetimes and dataclasses as JSON data (for event payloads
    and browser snapshots). An image reference takes its wire form, ``{"type":
    "image", ...}``, so a browser reads the same JSON the spec shows and
    ``AgentImageReference.from_dict`` reads it back."""
    kind = type(value)
    if kind in _JSON_SCALARS:  # most values: before the costlier tests below
        return value
    if kind is dict:
        return {key: json_ready(item) for key, item in value.items()}
    if kind is AgentImageReference:
        return value.to_dict()
    dataclass_type = _dataclass_types.get(kind)
    if dataclass_type is None:
        dataclass_type = _dataclass_type(kind)
    if dataclass_type:
        return {f.name: json_ready(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, list | tuple | frozenset):
        return [json_ready(item) for item in value]
    return value


_JSON_SCALARS = frozenset({str, int, float, bool, type(None)})


_dataclass_types: dict[type[Any], bool] = {}


def _dataclass_type(kind: type[Any]) -> bool:
    # Once per class: ``is_dataclass`` of an enum member looks the fields up through
    # ``EnumType.__getattr__``, a failed lookup that costs more than the rest here.
    found = dataclasses.is_dataclass(kind)
    if len(_dataclass_types) < 1024:
        _dataclass_types[kind] = found
    return found
