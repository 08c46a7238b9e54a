"""The session Flow Definition Graph: what a session's Steps are and where each leads
(the spec's "Showing sessions in Dex Web").

``session_flow_definition_document(flow_type, action_permission)`` is the graph
of one session Flow type as a Flow Definition Graph document (JSON whose
``schemaVersion`` starts with ``2.`` and whose ``flow.name`` is the Flow type),
to hand to a Worker's ``flow_definitions``; its ``generated_at`` is
:data:`SESSION_FLOW_GRAPH_GENERATED_AT`, the time the template last changed, so
a restart uploads nothing new and an upgrade replaces the graph.
``render_session_flow_graph`` writes the document (or an SVG drawing of it) to a
file, as the ``dex-agents-session-graph`` command does; the session inspector
(``dex-agents-ray serve``) draws :func:`session_flow_graph_svg` with the Steps a
session is in highlighted.

No Dex Server or Dex Web runs here, so the document's layout follows the
published contract (``schemaVersion``, ``flow.name``, ``generated_at``) and the
spec's Flow shape; Dex Web's full schema is not checked by any test.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

__all__ = [
    "SESSION_FLOW_GRAPH_GENERATED_AT",
    "SESSION_FLOW_GRAPH_SCHEMA_VERSION",
    "SESSION_FLOW_STEP_TYPES",
    "FlowDefinitionDocument",
    "main",
    "render_session_flow_graph",
    "session_flow_definition_document",
    "session_flow_graph",
    "session_flow_graph_svg",
]

SESSION_FLOW_GRAPH_GENERATED_AT = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
"""When the graph template last changed (the document's ``generated_at``)."""
SESSION_FLOW_GRAPH_SCHEMA_VERSION = "2.0"
"""The Flow Definition Graph schema version of the document."""

# (Step type, column, row, what it does): the layout of the drawing, top to bottom.
_STEPS: tuple[tuple[str, int, int, str], ...] = (
    ("StartAgentSession", 0, 0, "Start Step: initializes the session"),
    ("AwaitUserMessage", 0, 1, "Waits for a user message, a steer or a plan approval"),
    ("ApplyTurnControl", 2, 1, "Ends a steered or cancelled turn"),
    ("RunModel", 0, 2, "One model call"),
    ("CompactContext", 1, 2, "Summarizes older messages"),
    ("RecordTurnFailure", 3, 2, "Records a failed turn"),
    ("AwaitToolApproval", 0, 3, "Waits for a person to approve or reject a call"),
    ("AwaitQuestionAnswer", 1, 3, "Waits for a person to answer a question"),
    ("AwaitTimer", 2, 3, "A durable wait"),
    ("ResumeTurn", 3, 3, "Waits for the turn's tool results"),
    ("CallTool", 0, 4, "A read or idempotent write (up to 3 attempts)"),
    ("CallSingleAttemptTool", 1, 4, "A non-idempotent or unclassified write (1 attempt)"),
    ("PollToolTask", 2, 4, "Polls a long-running tool task"),
    ("FinishTurnCancellation", 3, 4, "Finishes cancel_turn"),
    ("RecordToolFailure", 0, 5, "Records a failed call"),
    ("RecordToolOutcomeUnknown", 1, 5, "Records a call whose outcome is unknown"),
    ("CancelToolTask", 3, 5, "Cancels an abandoned tool task"),
)
SESSION_FLOW_STEP_TYPES: tuple[str, ...] = tuple(step for step, *_ in _STEPS)
"""Every Step type of the session Flow, in the drawing's order."""
_START_STEP = "StartAgentSession"

# (from, to, label): the spec's "Flow shape".
_TRANSITIONS: tuple[tuple[str, str, str], ...] = (
    ("StartAgentSession", "RunModel", "initial message"),
    ("StartAgentSession", "AwaitUserMessage", ""),
    ("AwaitUserMessage", "RunModel", "message or plan approval"),
    ("AwaitUserMessage", "ApplyTurnControl", "steer"),
    ("RunModel", "AwaitUserMessage", "turn completed"),
    ("RunModel", "ApplyTurnControl", "steered or cancelled"),
    ("RunModel", "CompactContext", "compaction threshold"),
    ("CompactContext", "RunModel", ""),
    ("RunModel", "RecordTurnFailure", "failure route"),
    ("CompactContext", "RecordTurnFailure", "failure route"),
    ("RecordTurnFailure", "AwaitUserMessage", ""),
    ("RunModel", "AwaitToolApproval", "call needs approval"),
    ("RunModel", "CallTool", "tool call"),
    ("RunModel", "CallSingleAttemptTool", "tool call"),
    ("RunModel", "AwaitQuestionAnswer", "ask_user"),
    ("RunModel", "AwaitTimer", "durable_wait"),
    ("RunModel", "ResumeTurn", "tool calls requested"),
    ("AwaitToolApproval", "CallTool", "approved"),
    ("AwaitToolApproval", "CallSingleAttemptTool", "approved"),
    ("CallTool", "AwaitQuestionAnswer", "tool input requested"),
    ("CallSingleAttemptTool", "AwaitQuestionAnswer", "tool input requested"),
    ("AwaitQuestionAnswer", "CallTool", "answered"),
    ("AwaitQuestionAnswer", "CallSingleAttemptTool", "answered"),
    ("CallTool", "PollToolTask", "tool task started"),
    ("CallSingleAttemptTool", "PollToolTask", "tool task started"),
    ("PollToolTask", "PollToolTask", "pending"),
    ("PollToolTask", "AwaitQuestionAnswer", "tool input requested"),
    ("AwaitQuestionAnswer", "PollToolTask", "answered"),
    ("CallTool", "RecordToolFailure", "failure route"),
    ("CallSingleAttemptTool", "RecordToolOutcomeUnknown", "failure route"),
    ("PollToolTask", "RecordToolFailure", "failure route"),
    ("PollToolTask", "RecordToolOutcomeUnknown", "failure route"),
    ("ResumeTurn", "RunModel", "results in"),
    ("ResumeTurn", "ApplyTurnControl", "steered or cancelled"),
    ("ApplyTurnControl", "RunModel", "steered messages"),
    ("ApplyTurnControl", "AwaitUserMessage", ""),
    ("AwaitQuestionAnswer", "FinishTurnCancellation", "cancel_turn"),
    ("PollToolTask", "FinishTurnCancellation", "cancel_turn"),
    ("FinishTurnCancellation", "ApplyTurnControl", ""),
    ("FinishTurnCancellation", "CancelToolTask", "abandoned task"),
    ("CancelToolTask", "RecordToolOutcomeUnknown", "failure route"),
)

# (RPC, what it does, whether it changes the session).
_ACTIONS: tuple[tuple[str, str, bool], ...] = (
    ("send_user_message", "Queue a user message", True),
    ("steer_user_message", "Steer the running turn", True),
    ("delete_queued_message", "Delete a queued message", True),
    ("cancel_turn", "Stop the running turn", True),
    ("resolve_interrupt", "Approve or reject a tool call", True),
    ("answer_question", "Answer a question", True),
    ("execute_plan", "Execute the plan", True),
    ("update_session_settings", "Replace the session settings", True),
    ("get_agent_snapshot", "Read the session", False),
    ("list_agent_messages", "Read stored messages", False),
)


@dataclass(frozen=True, kw_only=True)
class FlowDefinitionDocument:
    """One Flow Definition Graph document, for a Worker's ``flow_definitions``."""

    flow_type: str
    """The Flow type; the same as ``flow.name`` in :attr:`content`."""
    content: bytes
    """The document: UTF-8 JSON."""
    generated_at: datetime
    """When the document's template last changed; a stored document is replaced
    only by one generated strictly later."""

    def to_json(self) -> dict[str, Any]:
        """The parsed :attr:`content`."""
        value: dict[str, Any] = json.loads(self.content)
        return value


def _require_text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-blank string, got {value!r}")
    return value


def session_flow_graph(flow_type: str, action_permission: str | None = None) -> dict[str, Any]:
    """The graph of session Flow ``flow_type`` as JSON data (see the module docstring).

    Args:
        flow_type: The session Flow type, such as ``"SupportAgent"``.
        action_permission: The permission Dex Web requires to run the session's
            Actions (the RPCs that change it); ``None`` leaves it out.

    Raises:
        ValueError: ``flow_type`` (or a given ``action_permission``) is blank.
    """
    _require_text("flow_type", flow_type)
    if action_permission is not None:
        _require_text("action_permission", action_permission)
    actions = []
    for name, title, changes in _ACTIONS:
        action: dict[str, Any] = {"name": name, "kind": "rpc", "title": title}
        if changes and action_permission is not None:
            action["permission"] = action_permission
        actions.append(action)
    return {
        "schemaVersion": SESSION_FLOW_GRAPH_SCHEMA_VERSION,
        "generatedAt": SESSION_FLOW_GRAPH_GENERATED_AT.isoformat().replace("+00:00", "Z"),
        "flow": {
            "name": flow_type,
            "kind": "agent_session",
            "startStep": _START_STEP,
            "steps": [
                {"type": step, "description": text, "layout": {"column": col, "row": row}}
                for step, col, row, text in _STEPS
            ],
            "transitions": [
                {"from": source, "to": target, **({"label": label} if label else {})}
                for source, target, label in _TRANSITIONS
            ],
            "actions": actions,
        },
    }


def session_flow_definition_document(
    flow_type: str, action_permission: str
) -> FlowDefinitionDocument:
    """The Flow Definition Graph document of session Flow ``flow_type``.

    Args:
        flow_type: The session Flow type.
        action_permission: The permission required to run the session's Actions.

    Raises:
        ValueError: ``flow_type`` or ``action_permission`` is blank.
    """
    _require_text("action_permission", action_permission)
    graph = session_flow_graph(flow_type, action_permission)
    content = json.dumps(graph, indent=2, sort_keys=False).encode() + b"\n"
    return FlowDefinitionDocument(
        flow_type=flow_type, content=content, generated_at=SESSION_FLOW_GRAPH_GENERATED_AT
    )


# -- the drawing -----------------------------------------------------------------------------

_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _MARGIN = 210, 40, 36, 46, 20


def _box(step: str) -> tuple[float, float]:
    """The top-left corner of ``step``'s box."""
    _, col, row, _ = next(s for s in _STEPS if s[0] == step)
    return (_MARGIN + col * (_BOX_W + _GAP_X), _MARGIN + row * (_BOX_H + _GAP_Y))


def _anchor(step: str, toward: tuple[float, float]) -> tuple[float, float]:
    """Where a line from ``step``'s centre toward ``toward`` leaves its box."""
    x, y = _box(step)
    cx, cy = x + _BOX_W / 2, y + _BOX_H / 2
    dx, dy = toward[0] - cx, toward[1] - cy
    if dx == 0 and dy == 0:
        return cx, cy
    scale = min(
        (_BOX_W / 2) / abs(dx) if dx else float("inf"),
        (_BOX_H / 2) / abs(dy) if dy else float("inf"),
    )
    return cx + dx * scale, cy + dy * scale


def _centre(step: str) -> tuple[float, float]:
    x, y = _box(step)
    return x + _BOX_W / 2, y + _BOX_H / 2


def _edge(source: str, target: str) -> str:
    if source == target:
        x, y = _box(source)
        right, mid = x + _BOX_W, y + _BOX_H / 2
        return (
            f'<path class="edge" d="M {right:.0f} {mid - 8:.0f} c 24 -14 24 30 0 16" '
            'marker-end="url(#arrow)"/>'
        )
    start = _anchor(source, _centre(target))
    end = _anchor(target, _centre(source))
    return (
        f'<line class="edge" x1="{start[0]:.1f}" y1="{start[1]:.1f}" '
        f'x2="{end[0]:.1f}" y2="{end[1]:.1f}" marker-end="url(#arrow)"/>'
    )


def session_flow_graph_svg(flow_type: str, active_step_types: Iterable[str] = ()) -> str:
    """The session Flow drawn as an SVG document, with ``active_step_types`` highlighted.

    Raises:
        ValueError: ``flow_type`` is blank.
    """
    _require_text("flow_type", flow_type)
    active = set(active_step_types)
    columns = 1 + max(col for _, col, _, _ in _STEPS)
    rows = 1 + max(row for _, _, row, _ in _STEPS)
    width = 2 * _MARGIN + columns * _BOX_W + (columns - 1) * _GAP_X + 30
    height = 2 * _MARGIN + rows * _BOX_H + (rows - 1) * _GAP_Y + 24
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(flow_type)} session Flow">',
        "<style>"
        ".edge{stroke:#9aa3af;stroke-width:1.2;fill:none}"
        ".step rect{fill:#f8fafc;stroke:#64748b;stroke-width:1.2}"
        ".step text{font:13px system-ui,sans-serif;fill:#1e293b}"
        ".step.active rect{fill:#fde68a;stroke:#b45309;stroke-width:2.5}"
        ".step.active text{font-weight:700}"
        ".title{font:12px system-ui,sans-serif;fill:#475569}"
        "</style>",
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#9aa3af"/></marker></defs>',
    ]
    parts.extend(_edge(source, target) for source, target, _ in _TRANSITIONS)
    for step, _, _, text in _STEPS:
        x, y = _box(step)
        state = " active" if step in active else ""
        parts.append(
            f'<g class="step{state}" data-step="{step}"><title>{escape(text)}</title>'
            f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="8"/>'
            f'<text x="{x + _BOX_W / 2:.0f}" y="{y + _BOX_H / 2 + 4.5:.1f}" '
            f'text-anchor="middle">{step}</text></g>'
        )
    parts.append(
        f'<text class="title" x="{_MARGIN}" y="{height - 10}">{escape(flow_type)}'
        f" session Flow{' · highlighted: the Steps it is in' if active else ''}</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def render_session_flow_graph(
    flow_type: str,
    output: str | Path,
    *,
    action_permission: str | None = None,
    svg: bool = False,
) -> Path:
    """Write the graph of session Flow ``flow_type`` to a file; returns its path.

    Args:
        flow_type: The session Flow type.
        output: A directory (the file is ``<flow_type>.json``, or ``.svg``) or a
            file path ending in ``.json`` or ``.svg``. Pass the directory to Dex
            Web with ``--flow-rendering-dir``.
        action_permission: As for :func:`session_flow_graph`.
        svg: Draw an SVG instead of the JSON document (implied by a ``.svg`` path).

    Raises:
        ValueError: A blank ``flow_type`` or ``action_permission``, or an output
            file name that ends in neither ``.json`` nor ``.svg``.
    """
    _require_text("flow_type", flow_type)
    path = Path(output)
    if path.suffix in (".json", ".svg"):
        svg = svg or path.suffix == ".svg"
    elif path.suffix and not path.is_dir():
        raise ValueError(f"output must be a directory or a .json or .svg file, got {str(path)!r}")
    else:
        path = path / f"{flow_type}.{'svg' if svg else 'json'}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if svg:
        path.write_text(session_flow_graph_svg(flow_type), encoding="utf-8")
    else:
        graph = session_flow_graph(flow_type, action_permission)
        path.write_text(json.dumps(graph, indent=2) + "\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """The ``dex-agents-session-graph`` command; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="dex-agents-session-graph",
        description="Write the Flow Definition Graph of an agent session Flow type.",
    )
    parser.add_argument("flow_type", help="the session Flow type, e.g. SupportAgent")
    parser.add_argument(
        "-o",
        "--output",
        default=".",
        help="a directory (writes <flow_type>.json or .svg) or a .json/.svg file (default: .)",
    )
    parser.add_argument(
        "--action-permission",
        default=None,
        help="the permission required to run the session's Actions",
    )
    parser.add_argument("--svg", action="store_true", help="draw an SVG instead")
    args = parser.parse_args(argv)
    try:
        path = render_session_flow_graph(
            args.flow_type, args.output, action_permission=args.action_permission, svg=args.svg
        )
    except ValueError as error:
        parser.error(str(error))
    print(path)
    return 0
