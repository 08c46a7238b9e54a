"""Token estimates that need no tokenizer: three UTF-8 bytes per token."""

from __future__ import annotations

import json
import math

from dex_agents_ray.builtin_loop._model import (
    ESTIMATED_IMAGE_INPUT_TOKENS,
    ModelOutputItem,
    ModelRequest,
    ToolResultItem,
    UserTextItem,
)

_BYTES_PER_TOKEN = 3


def estimate_tokens_of_text(text: str) -> int:
    """Tokens of ``text`` at three UTF-8 bytes per token, which errs high for English."""
    return math.ceil(len(text.encode("utf-8")) / _BYTES_PER_TOKEN)


def request_text(request: ModelRequest) -> str:
    """The model-visible text of a request: instructions, items and tool schemas.

    Opaque provider fields (encrypted reasoning, signatures) are left out:
    they do not stand for input text the model reads again.
    """
    parts: list[str] = []
    if request.instructions:
        parts.append(request.instructions)
    for item in request.input:
        if isinstance(item, UserTextItem):
            parts.append(item.text)
        elif isinstance(item, ToolResultItem):
            parts.extend((item.tool_name, item.output))
        elif isinstance(item, ModelOutputItem):
            parts.append(item.text or "")
            for call in item.tool_calls:
                parts.extend((call.tool_name, call.arguments))
    for tool in request.tools:
        parts.extend((tool.name, tool.description, json.dumps(tool.parameters_schema)))
    return "\n".join(parts)


def estimate_request_tokens(request: ModelRequest, *, image_count: int | None = None) -> int:
    """Estimate a request's input tokens by bytes, plus a fixed count per image.

    ``image_count`` overrides how many images are counted; ``None`` counts
    every image in the request.
    """
    images = len(request.images()) if image_count is None else image_count
    return estimate_tokens_of_text(request_text(request)) + images * ESTIMATED_IMAGE_INPUT_TOKENS
