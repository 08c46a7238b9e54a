"""What an MCP result records: its text, its images, and the Dex ``outcome`` key.

Works on results in wire form (plain dicts), so it needs no MCP SDK.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from dex_agents_ray.mcp._conventions import TOOL_OUTCOME_META_KEY
from dex_agents_ray.media import AgentImageReference, ImageValidationError, MediaStore
from dex_agents_ray.session import (
    ToolExecutionError,
    ToolExecutionResult,
    ToolOutcomeUnknownError,
)

__all__ = [
    "MAX_RESULT_IMAGES",
    "canonical_json",
    "error_outcome",
    "finish_result",
    "raise_for_error",
    "render_content",
]

_LOG = logging.getLogger("dex_agents_ray.mcp")

MAX_RESULT_IMAGES = 20
"""A result with more images than this records ``failed``."""

_UNKNOWN_WITHOUT_TEXT = "the MCP server could not tell whether the call took effect"
_REJECTED_WITHOUT_TEXT = "the MCP server rejected the call"
_ERROR_WITHOUT_TEXT = "the MCP tool returned an error without a message"

Outcome = Literal["unknown", "rejected"]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no spaces, so every core shows the same text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _outcome(meta: object, where: str) -> Outcome | None:
    if not isinstance(meta, Mapping) or TOOL_OUTCOME_META_KEY not in meta:
        return None
    value = meta[TOOL_OUTCOME_META_KEY]
    if value == "unknown":
        return "unknown"
    if value == "rejected":
        return "rejected"
    _LOG.warning("%s: ignoring the reserved %s value %r", where, TOOL_OUTCOME_META_KEY, value)
    return None


def render_content(content: Sequence[Any], image_text: Callable[[int], str] | None = None) -> str:
    """Text blocks joined with newlines, other content as JSON; images as
    ``image_text(<n>)`` (counting from 1) when given."""
    parts: list[str] = []
    image_count = 0
    for block in content:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        elif kind == "image" and image_text is not None:
            image_count += 1
            parts.append(image_text(image_count))
        else:
            parts.append(canonical_json(block))
    return "\n".join(parts)


def _omitted(n: int) -> str:
    return f"[image {n} omitted]"


def _result_text(result: Mapping[str, Any], image_text: Callable[[int], str] | None) -> str:
    content = result.get("content")
    if isinstance(content, list) and content:
        return render_content(content, image_text)
    structured = result.get("structuredContent")
    return canonical_json(structured) if structured is not None else ""


def _decode_image(block: Mapping[str, Any], n: int) -> bytes:
    data = block.get("data")
    if not isinstance(data, str):
        raise ToolExecutionError(f"image {n} of the MCP result has no base64 data")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ToolExecutionError(f"image {n} of the MCP result is not valid base64") from error
    if base64.b64encode(raw).decode("ascii") != data:
        raise ToolExecutionError(f"image {n} of the MCP result is not canonical base64")
    return raw


async def _upload_images(
    content: Sequence[Any], media_store: MediaStore
) -> tuple[AgentImageReference, ...]:
    blocks = [b for b in content if isinstance(b, Mapping) and b.get("type") == "image"]
    if len(blocks) > MAX_RESULT_IMAGES:
        raise ToolExecutionError(
            f"the MCP result has {len(blocks)} images; the limit is {MAX_RESULT_IMAGES}"
        )
    decoded = [_decode_image(block, n) for n, block in enumerate(blocks, start=1)]
    references: list[AgentImageReference] = []
    for n, data in enumerate(decoded, start=1):
        try:
            references.append(await media_store.put_image(data))
        except ImageValidationError as error:
            raise ToolExecutionError(
                f"image {n} of the MCP result is not a supported image: {error}"
            ) from error
    return tuple(references)


async def finish_result(
    result: Mapping[str, Any], *, media_store: MediaStore | None, where: str
) -> ToolExecutionResult:
    """Record a ``tools/call`` result (or a completed task's): succeed, or raise.

    Raises:
        ToolOutcomeUnknownError: The Dex ``outcome`` key says ``unknown``.
        ToolExecutionError: The key says ``rejected``, the result is an ``isError``
            result, or its images break the limits.
    """
    outcome = _outcome(result.get("_meta"), where)
    if outcome is not None or result.get("isError") is True:
        # An error result records no image bytes, with a store or without.
        text = _result_text(result, _omitted)
        if outcome == "unknown":
            raise ToolOutcomeUnknownError(text or _UNKNOWN_WITHOUT_TEXT, show_detail=False)
        if outcome == "rejected":
            raise ToolExecutionError(text or _REJECTED_WITHOUT_TEXT)
        raise ToolExecutionError(text or _ERROR_WITHOUT_TEXT)
    content = result.get("content")
    content = content if isinstance(content, list) else []
    if media_store is None:
        return ToolExecutionResult(output=_result_text(result, None))
    images = await _upload_images(content, media_store)
    return ToolExecutionResult(output=_result_text(result, lambda n: f"[image {n}]"), images=images)


def error_outcome(data: object, where: str) -> Outcome | None:
    """The Dex ``outcome`` key in a JSON-RPC error's ``data._meta``, if any."""
    meta = data.get("_meta") if isinstance(data, Mapping) else None
    return _outcome(meta, where)


def raise_for_error(code: int, message: str, data: object, where: str) -> None:
    """Raise what a JSON-RPC error answer records, when it records a final status.

    Raises:
        ToolOutcomeUnknownError: The error carries ``outcome: unknown``.
        ToolExecutionError: It carries ``outcome: rejected``.
    """
    outcome = error_outcome(data, where)
    text = f"MCP error {code}: {message}"
    if outcome == "unknown":
        raise ToolOutcomeUnknownError(text, show_detail=False)
    if outcome == "rejected":
        raise ToolExecutionError(text)
