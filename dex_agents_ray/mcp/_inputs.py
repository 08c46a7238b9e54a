"""MCP input requests (``inputRequests``): which ones become a session question.

A task in ``input_required`` that asks exactly one form ``elicitation/create``
whose schema has a single ``string`` field (with or without ``enum``) or a
single ``boolean`` field becomes a session question. Any other input request
fails the call with :func:`unsupported_input_message`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dex_agents_ray.mcp._content import canonical_json
from dex_agents_ray.session import QuestionAnswer, QuestionResolution

__all__ = [
    "InputQuestion",
    "answer_response",
    "input_question",
    "request_fingerprint",
    "unsupported_input_message",
]

_YES, _NO = "yes", "no"


@dataclass(frozen=True, kw_only=True)
class InputQuestion:
    """One elicitation the session can ask as a question."""

    key: str
    """The request's key in ``inputRequests``."""
    fingerprint: str
    """A hash of the request, so an answer never reaches a different request under the key."""
    message: str
    """The elicitation's message: the question."""
    field: str
    """The schema's single property."""
    kind: Literal["string", "boolean"]
    """The property's type."""
    choices: tuple[str, ...]
    """The ``enum`` values, or ``yes`` and ``no`` for a boolean; empty for free text."""


def request_fingerprint(request: object) -> str:
    """A short hash of one input request in wire form."""
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()[:16]


def _form_field(
    params: Mapping[str, Any],
) -> tuple[str, Literal["string", "boolean"], tuple[str, ...]] | None:
    schema = params.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping) or len(properties) != 1:
        return None
    [(name, spec)] = properties.items()
    if not isinstance(spec, Mapping):
        return None
    if spec.get("type") == "boolean":
        return name, "boolean", (_YES, _NO)
    if spec.get("type") != "string":
        return None
    enum = spec.get("enum")
    if enum is None:
        return name, "string", ()
    if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
        return name, "string", tuple(enum)
    return None


def input_question(requests: object) -> InputQuestion | None:
    """The question for ``inputRequests``, or ``None`` when the session cannot ask it."""
    if not isinstance(requests, Mapping) or len(requests) != 1:
        return None
    [(key, request)] = requests.items()
    if not isinstance(request, Mapping) or request.get("method") != "elicitation/create":
        return None
    params = request.get("params")
    if not isinstance(params, Mapping) or params.get("mode", "form") != "form":
        return None
    message = params.get("message")
    found = _form_field(params)
    if not isinstance(message, str) or not message.strip() or found is None:
        return None
    name, kind, choices = found
    return InputQuestion(
        key=str(key),
        fingerprint=request_fingerprint(request),
        message=message,
        field=name,
        kind=kind,
        choices=choices,
    )


def _describe_request(request: object) -> str:
    if not isinstance(request, Mapping):
        return "an input request it did not describe"
    method = request.get("method")
    params = request.get("params")
    params = params if isinstance(params, Mapping) else {}
    if method == "elicitation/create":
        if params.get("mode") == "url":
            return f"a visit to {params.get('url')!r}"
        return f"an answer to {params.get('message')!r}"
    if method == "sampling/createMessage":
        return "a model response"
    if method == "roots/list":
        return "its list of roots"
    return f"a {method!r} request" if isinstance(method, str) else "an unnamed request"


def unsupported_input_message(requests: object) -> str:
    """``the MCP server asked for input that this agent session cannot provide yet (...)``."""
    if isinstance(requests, Mapping) and requests:
        named = ", ".join(_describe_request(r) for r in requests.values())
    else:
        named = "no request it described"
    return f"the MCP server asked for input that this agent session cannot provide yet ({named})"


def answer_response(answer: QuestionAnswer, field: str, kind: str) -> dict[str, Any]:
    """The elicitation result for a question's resolution: ``accept`` with the answer,
    ``decline`` for a declined question, ``cancel`` for a passed deadline."""
    if answer.resolution is QuestionResolution.DECLINED:
        return {"action": "decline"}
    if answer.resolution is not QuestionResolution.ANSWERED or answer.answer is None:
        return {"action": "cancel"}
    value: str | bool = answer.answer
    if kind == "boolean":
        value = answer.answer.strip().lower() == _YES
    return {"action": "accept", "content": {field: value}}
