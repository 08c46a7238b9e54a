"""Listed MCP tools: their offered names and definitions, and the resource and prompt tools."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dex_agents_ray.mcp._conventions import ToolClassification, classify_tool
from dex_agents_ray.session import ToolEffect

__all__ = [
    "MAX_TOOL_NAME_LENGTH",
    "MCP_GET_PROMPT_TOOL_NAME",
    "MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME",
    "MCP_READ_RESOURCE_TOOL_NAME",
    "McpTool",
    "offered_tool_name",
    "resource_and_prompt_tools",
    "tool_from_listing",
]

MAX_TOOL_NAME_LENGTH = 64
"""Offered names longer than this are shortened with a hash."""

MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME = "mcp_list_resources_and_prompts"
"""Lists a server's resources, resource templates and prompts (``READ``)."""
MCP_READ_RESOURCE_TOOL_NAME = "mcp_read_resource"
"""Reads one resource of a server by URI (``READ``)."""
MCP_GET_PROMPT_TOOL_NAME = "mcp_get_prompt"
"""Gets one prompt of a server, with string arguments (``READ``)."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_HASH_LENGTH = 8


def offered_tool_name(server_name: str, tool_name: str) -> str:
    """``<server>__<tool>``, with characters other than letters, digits, ``_`` and ``-``
    replaced by ``_``, shortened with a hash of the unsanitized name past 64 characters."""
    full = f"{server_name}__{tool_name}"
    name = _UNSAFE.sub("_", full)
    if len(name) <= MAX_TOOL_NAME_LENGTH:
        return name
    digest = hashlib.sha256(full.encode("utf-8")).hexdigest()[:_HASH_LENGTH]
    return f"{name[: MAX_TOOL_NAME_LENGTH - _HASH_LENGTH - 1]}_{digest}"


@dataclass(frozen=True, kw_only=True)
class McpTool:
    """One tool an :class:`McpToolSource` offers: a server's tool, or a resource and
    prompt tool.

    ``name``, ``description`` and ``input_schema`` are what a model is offered
    (the built-in loop's ``ListedTool``).
    """

    name: str
    """The offered name, ``<server>__<tool>`` (sanitized), or a resource and prompt tool's."""
    description: str
    """The server's description (or title); empty when it gave none."""
    input_schema: Mapping[str, Any]
    """The JSON Schema of the arguments object."""
    server_name: str | None = None
    """The configured server; ``None`` for the resource and prompt tools, which take it
    as an argument."""
    mcp_name: str | None = None
    """The tool's name on its server; ``None`` for the resource and prompt tools."""
    annotations: Mapping[str, Any] = field(default_factory=dict)
    """The server's annotations, in wire form (``readOnlyHint``...); empty for none."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """The definition's ``_meta``; empty for none."""
    effect: ToolEffect | None = None
    """The effect from the Dex ``effect`` key or the annotations (when the server is
    trusted); ``None`` leaves the session's ``default_tool_effect``."""
    effect_declared: bool = False
    """Whether the Dex ``effect`` key declared ``effect``, so a policy may only raise it."""
    approval_requested: bool = False
    """For a declared tool: whether its Dex ``approval`` key asks for approval."""


def tool_from_listing(
    server_name: str, definition: Mapping[str, Any], *, trusted: bool
) -> McpTool | None:
    """An offered tool from one ``tools/list`` entry (wire form); ``None`` when malformed."""
    mcp_name = definition.get("name")
    if not isinstance(mcp_name, str) or not mcp_name:
        return None
    schema = definition.get("inputSchema")
    if not isinstance(schema, Mapping):
        schema = {"type": "object", "properties": {}}
    annotations = definition.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, Mapping) else {}
    meta = definition.get("_meta")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    description = definition.get("description") or definition.get("title") or ""
    classification: ToolClassification = classify_tool(
        server_name, mcp_name, annotations, meta, trusted=trusted
    )
    return McpTool(
        name=offered_tool_name(server_name, mcp_name),
        description=description if isinstance(description, str) else "",
        input_schema=dict(schema),
        server_name=server_name,
        mcp_name=mcp_name,
        annotations=annotations,
        meta=meta,
        effect=classification.effect,
        effect_declared=classification.declared,
        approval_requested=classification.approval_requested,
    )


def resource_and_prompt_tools(server_names: Sequence[str]) -> tuple[McpTool, ...]:
    """The three ``READ`` tools, each taking a configured server's name as ``server``."""
    server = {
        "type": "string",
        "enum": list(server_names),
        "description": "The MCP server to ask.",
    }

    def tool(
        name: str, description: str, properties: dict[str, Any], required: list[str]
    ) -> McpTool:
        return McpTool(
            name=name,
            description=description,
            input_schema={
                "type": "object",
                "properties": {"server": server, **properties},
                "required": ["server", *required],
                "additionalProperties": False,
            },
            effect=ToolEffect.READ,
        )

    return (
        tool(
            MCP_LIST_RESOURCES_AND_PROMPTS_TOOL_NAME,
            "List an MCP server's resources, resource templates and prompts.",
            {},
            [],
        ),
        tool(
            MCP_READ_RESOURCE_TOOL_NAME,
            "Read one resource of an MCP server by its URI.",
            {"uri": {"type": "string", "description": "The resource URI."}},
            ["uri"],
        ),
        tool(
            MCP_GET_PROMPT_TOOL_NAME,
            "Get one prompt of an MCP server, filled in with its arguments.",
            {
                "name": {"type": "string", "description": "The prompt's name."},
                "arguments": {
                    "type": "object",
                    "additionalProperties": {"type": "string"},
                    "description": "The prompt's arguments, strings by name.",
                },
            },
            ["name"],
        ),
    )
