"""A grader agent for LLM-judge scoring.

``flow`` is the session Flow (``--agent actors.grader:flow``). Send it
``grading_prompt(question, answer, expected)``; it replies with one JSON
object, ``{"score": <0..1>, "passed": <bool>, "reason": "..."}``, which
``parse_grade`` reads (a reply that is not such JSON raises ``ValueError``
naming what is wrong).

The scripted judge (used unless a model is named, see ``actors._models``)
passes an answer that contains the expected text, ignoring case and spacing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from actors._models import SettingsModelResolver, default_model
from dex_agents_ray import AgentSessionFlow
from dex_agents_ray.builtin_loop import (
    AgentDefinition,
    ModelClient,
    ModelRequest,
    ScriptedModelClient,
    ScriptedModelReply,
    builtin_agent_session_flow,
)

INSTRUCTIONS = (
    "You grade an assistant's answer. Compare it with the expected answer and reply "
    'with only a JSON object: {"score": <number from 0 to 1>, "passed": <true or '
    'false>, "reason": "<one sentence>"}.'
)

_SECTION = re.compile(r"^(Question|Answer|Expected):[ \t]*", re.MULTILINE)


@dataclass(frozen=True)
class Grade:
    """A judge's verdict on one answer."""

    score: float
    """From 0 (wrong) to 1 (right)."""
    passed: bool
    reason: str


def grading_prompt(question: str, answer: str, expected: str) -> str:
    """The user message that asks the grader for a verdict."""
    return f"Question: {question}\nAnswer: {answer}\nExpected: {expected}"


def parse_grade(text: str) -> Grade:
    """The verdict in a grader reply (the first JSON object in it)."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError(f"grader reply has no JSON object: {text[:200]!r}")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as error:
        raise ValueError(f"grader reply is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError("grader reply must be a JSON object")
    score, passed, reason = data.get("score"), data.get("passed"), data.get("reason", "")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        raise ValueError(f"grader reply: score must be a number from 0 to 1, got {score!r}")
    if not isinstance(passed, bool):
        raise ValueError(f"grader reply: passed must be true or false, got {passed!r}")
    if not isinstance(reason, str):
        raise ValueError("grader reply: reason must be a string")
    return Grade(score=float(score), passed=passed, reason=reason)


def _sections(text: str) -> dict[str, str]:
    parts = _SECTION.split(text)
    # ["", "Question", "...", "Answer", "...", "Expected", "..."]
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def scripted_grader_model(request: ModelRequest) -> ScriptedModelReply:
    """The scripted judge: passes an answer that contains the expected text."""
    texts = ScriptedModelClient.user_texts(request)
    sections = _sections(texts[-1] if texts else "")
    answer, expected = sections.get("Answer", ""), sections.get("Expected", "")
    if not expected:
        verdict = {"score": 0.0, "passed": False, "reason": "no expected answer was given"}
    elif _normal(expected) in _normal(answer):
        verdict = {"score": 1.0, "passed": True, "reason": "the answer contains the expected text"}
    else:
        verdict = {"score": 0.0, "passed": False, "reason": "the expected text is missing"}
    return ScriptedModelReply(text=json.dumps(verdict))


def grader_flow(
    model: ModelClient | None = None, *, flow_type: str = "GraderAgent"
) -> AgentSessionFlow:
    """The grader session Flow (``model`` overrides the default choice)."""
    chosen = model if model is not None else default_model(scripted_grader_model)
    agent = AgentDefinition(
        name="grader",
        instructions=INSTRUCTIONS,
        model=chosen,
        resolve_model=SettingsModelResolver(chosen),
    )
    return builtin_agent_session_flow(agent, flow_type=flow_type)


flow = grader_flow()
