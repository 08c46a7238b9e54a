"""Effects from MCP annotations and the Dex MCP conventions, and the policy merge.

A tool whose definition carries the Dex ``effect`` key in ``_meta`` is
*declared*: its effect is the declared one whatever its annotations say, it
asks for approval only with the ``approval`` key, and a session policy may keep
or raise its safety but never lower it. Other tools take their effect from
``readOnlyHint`` and ``idempotentHint``, or the session's default.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dex_agents_ray.session import ToolEffect, ToolPolicy, is_approval_required

__all__ = [
    "IDEMPOTENCY_KEY_META_KEY",
    "TOOL_APPROVAL_META_KEY",
    "TOOL_EFFECT_META_KEY",
    "TOOL_OUTCOME_META_KEY",
    "ToolClassification",
    "classify_tool",
    "merge_tool_policy",
    "tool_effect_from_mcp_tool_annotations",
]

_LOG = logging.getLogger("dex_agents_ray.mcp")

TOOL_EFFECT_META_KEY = "io.superdurable.dex/effect"
"""Tool definition ``_meta`` key: ``read``, ``idempotent_write`` or ``non_idempotent_write``."""
TOOL_APPROVAL_META_KEY = "io.superdurable.dex/approval"
"""Tool definition ``_meta`` key: ``recommended`` asks for approval (any value asks)."""
TOOL_OUTCOME_META_KEY = "io.superdurable.dex/outcome"
"""``tools/call`` result ``_meta`` (or JSON-RPC ``error.data._meta``) key: ``unknown`` or
``rejected``."""
IDEMPOTENCY_KEY_META_KEY = "io.superdurable.dex/idempotencyKey"
"""``tools/call`` request ``_meta`` key the source sends: ``<flowId>/<turnId>/<toolCallId>``."""

_DECLARABLE = {
    "read": ToolEffect.READ,
    "idempotent_write": ToolEffect.IDEMPOTENT_WRITE,
    "non_idempotent_write": ToolEffect.NON_IDEMPOTENT_WRITE,
}
_RANK = {
    ToolEffect.READ: 0,
    ToolEffect.IDEMPOTENT_WRITE: 1,
    ToolEffect.NON_IDEMPOTENT_WRITE: 2,
    ToolEffect.UNCLASSIFIED: 3,
}


def tool_effect_from_mcp_tool_annotations(
    annotations: Mapping[str, Any] | None,
) -> ToolEffect | None:
    """The effect MCP annotations imply: ``readOnlyHint`` → ``READ``, else
    ``idempotentHint`` → ``IDEMPOTENT_WRITE`` (whatever ``destructiveHint`` says),
    else ``None`` (the session's ``default_tool_effect`` applies)."""
    if not annotations:
        return None
    if annotations.get("readOnlyHint") is True:
        return ToolEffect.READ
    if annotations.get("idempotentHint") is True:
        return ToolEffect.IDEMPOTENT_WRITE
    return None


@dataclass(frozen=True, kw_only=True)
class ToolClassification:
    """How one listed tool's effect and approval are set."""

    effect: ToolEffect | None
    """The declared or annotated effect; ``None`` leaves the session default."""
    declared: bool
    """Whether the Dex ``effect`` key declared ``effect``."""
    approval_requested: bool
    """For a declared tool: whether its ``approval`` key asks for approval."""


_UNSET = ToolClassification(effect=None, declared=False, approval_requested=False)


def classify_tool(
    server_name: str,
    tool_name: str,
    annotations: Mapping[str, Any] | None,
    meta: Mapping[str, Any] | None,
    *,
    trusted: bool,
) -> ToolClassification:
    """Classify a listed tool by the Dex keys, then its annotations.

    An ``effect`` value outside the three declarable ones gives the tool the
    session's default and ignores its annotations, with a warning log. An
    untrusted server's annotations and Dex keys are ignored.
    """
    if not trusted:
        return _UNSET
    meta = meta or {}
    if TOOL_EFFECT_META_KEY in meta:
        value = meta[TOOL_EFFECT_META_KEY]
        effect = _DECLARABLE.get(value) if isinstance(value, str) else None
        if effect is None:
            _LOG.warning(
                "MCP server %s tool %s declares %s=%r, which is not read, idempotent_write "
                "or non_idempotent_write; it gets the session's default effect",
                server_name,
                tool_name,
                TOOL_EFFECT_META_KEY,
                value,
            )
            return _UNSET
        # Any approval value other than a missing key asks, so an unknown value fails closed.
        return ToolClassification(
            effect=effect, declared=True, approval_requested=TOOL_APPROVAL_META_KEY in meta
        )
    return ToolClassification(
        effect=tool_effect_from_mcp_tool_annotations(annotations),
        declared=False,
        approval_requested=False,
    )


def merge_tool_policy(
    declared: ToolEffect, approval_requested: bool, policy: ToolPolicy | None
) -> ToolPolicy:
    """A declared tool's policy under a session ``policy``: keep or raise, never lower.

    The effect is the more conservative of the two (``READ`` <
    ``IDEMPOTENT_WRITE`` < ``NON_IDEMPOTENT_WRITE`` < ``UNCLASSIFIED``). The
    policy's ``requires_approval`` wins when set; otherwise the call asks when
    the tool asks or the policy's effect asks by default.
    """
    if policy is None:
        return ToolPolicy(declared, requires_approval=approval_requested)
    effect = max(declared, ToolEffect(policy.effect), key=_RANK.__getitem__)
    if policy.requires_approval is not None:
        return ToolPolicy(effect, requires_approval=policy.requires_approval)
    asks = approval_requested or is_approval_required(ToolEffect(policy.effect))
    return ToolPolicy(effect, requires_approval=asks)
