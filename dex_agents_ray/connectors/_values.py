"""Values as the compact, sorted JSON text that results and checkpoints use."""

from __future__ import annotations

import json
from typing import Any

from dex_agents_ray.session import json_ready

__all__ = ["compact_json"]


def compact_json(value: Any, *, lenient: bool = False) -> str:
    """``value`` (JSON data, dataclasses, string enums, datetimes) as compact JSON
    with sorted keys; ``lenient`` writes anything else as its ``str``.

    Raises:
        TypeError: Part of ``value`` is not JSON data.
        ValueError: It holds NaN or infinity.
    """
    return json.dumps(
        json_ready(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=lenient,
        default=str if lenient else None,
    )
