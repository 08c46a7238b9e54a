"""Go duration strings (``30s``, ``2m``, ``1h30m``, ``500ms``), as Connector
manifests write their timeouts and retry intervals.

The manifest is generated for the Go Connector SDK, which reads these fields
with Go's ``time.ParseDuration``; reading them with the same grammar here means
a manifest that the Go side accepts never fails on the Python side, and the
reverse.
"""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal, InvalidOperation

__all__ = ["parse_go_duration"]

_UNIT_NANOSECONDS = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # MICRO SIGN, as Go accepts it
    "\u03bcs": 1_000,  # GREEK SMALL LETTER MU, as Go accepts it
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h)")
_MAX_NANOSECONDS = 2**63 - 1  # Go's Duration is an int64 of nanoseconds


def parse_go_duration(text: str) -> timedelta:
    """``text`` read as Go's ``time.ParseDuration`` reads it, to the microsecond.

    A sequence of decimal numbers, each with a unit (``ns``, ``us``, ``ms``, ``s``,
    ``m``, ``h``), optionally signed; ``"0"`` alone is zero.

    Raises:
        ValueError: ``text`` is not a Go duration, or is longer than Go allows.
    """
    if not isinstance(text, str) or not text:
        raise ValueError(f"{text!r} is not a Go duration (such as 30s, 2m or 1h30m)")
    body = text[1:] if text[0] in "+-" else text
    negative = text[0] == "-"
    if body == "0":
        return timedelta(0)
    nanoseconds = Decimal(0)
    position = 0
    while position < len(body):
        match = _PART.match(body, position)
        if match is None:
            raise ValueError(f"{text!r} is not a Go duration (such as 30s, 2m or 1h30m)")
        try:
            nanoseconds += Decimal(match.group(1)) * _UNIT_NANOSECONDS[match.group(2)]
        except InvalidOperation as error:  # pragma: no cover - the pattern admits decimals only
            raise ValueError(f"{text!r} is not a Go duration") from error
        position = match.end()
    if position == 0 or nanoseconds > _MAX_NANOSECONDS:
        raise ValueError(f"{text!r} is not a Go duration, or is longer than Go allows")
    whole = int(nanoseconds)  # Go truncates fractions of a nanosecond
    duration = timedelta(microseconds=whole // 1_000)
    return -duration if negative else duration
