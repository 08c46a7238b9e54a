"""Session settings: one JSON object per session that the application sets and
replaces, copied into each turn when it starts (the spec's "Session settings").

Settings are measured as compact JSON text, UTF-8 with non-ASCII unescaped.
``AgentSessionClient`` refuses settings over ``MAX_SESSION_SETTINGS_BYTES``
before it sends; the session's own checks accept
``SESSION_SETTINGS_SIZE_TOLERANCE_BYTES`` more (other cores write some floats and
U+2028/U+2029 differently).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

MAX_SESSION_SETTINGS_BYTES = 16 * 1024
"""The most bytes of settings (compact JSON text, UTF-8) a client sends."""
SESSION_SETTINGS_SIZE_TOLERANCE_BYTES = 1024
"""What the session's own checks accept beyond ``MAX_SESSION_SETTINGS_BYTES``."""
INVALID_START_SESSION_SETTINGS_REASON = "invalid start session settings"
"""How the reason of a session failed for its start settings begins."""


def session_settings_size(settings: Mapping[str, Any]) -> int:
    """The settings' size in bytes: compact JSON text, UTF-8, non-ASCII unescaped.

    Raises:
        TypeError: ``settings`` is not a JSON object (string keys, JSON values).
        ValueError: It holds a float that JSON cannot write (NaN, infinity).
    """
    _require_json_object(settings)
    text = json.dumps(settings, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return len(text.encode("utf-8"))


def validate_session_settings(settings: Mapping[str, Any], *, tolerance: int = 0) -> None:
    """Check that ``settings`` is a JSON object of at most ``MAX_SESSION_SETTINGS_BYTES``
    (plus ``tolerance``).

    Raises:
        TypeError: Not a JSON object (a key that is not a string, a value JSON
            cannot hold).
        ValueError: Too large, or a float JSON cannot write.
    """
    size = session_settings_size(settings)
    limit = MAX_SESSION_SETTINGS_BYTES + tolerance
    if size > limit:
        raise ValueError(
            f"session settings are {size} bytes of JSON; the limit is "
            f"{MAX_SESSION_SETTINGS_BYTES} (MAX_SESSION_SETTINGS_BYTES)"
        )


def session_settings_problem(settings: object) -> str | None:
    """Why the session refuses ``settings`` (with the tolerance), or ``None``."""
    if not isinstance(settings, Mapping):
        return f"session settings must be a JSON object, not {type(settings).__name__}"
    try:
        validate_session_settings(settings, tolerance=SESSION_SETTINGS_SIZE_TOLERANCE_BYTES)
    except (TypeError, ValueError) as error:
        return str(error)
    return None


def _require_json_object(value: object) -> None:
    if not isinstance(value, Mapping):
        raise TypeError(f"session settings must be a JSON object, not {type(value).__name__}")
    _require_json(value, "settings")


def _require_json(value: object, where: str) -> None:
    if value is None or isinstance(value, str | bool | int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where} is {value!r}, which JSON cannot hold")
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has the key {key!r}: JSON object keys are strings")
            _require_json(item, f"{where}[{key!r}]")
        return
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _require_json(item, f"{where}[{index}]")
        return
    raise TypeError(f"{where} is a {type(value).__name__}, which JSON cannot hold")
