"""Interrupt policies: who answers a case's approvals and questions.

A policy is called with the case and the pending ``AgentInterrupt`` and
returns an ``InterruptDecision`` (``Approve``, ``Reject``, ``Answer``) or
``None`` when it does not answer; it may be async. The case's own ``answers``
(scripted, in order) answer its questions first. An interrupt no policy
answers leaves the case ``needs_person``: its session keeps waiting (findable
with ``search_flows('ActiveStepTypes = "AwaitToolApproval"', ...)``), and a
rerun of the same run ID picks the case up again once a person answered.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from dex_agents_ray.evals._cases import EvalCase
from dex_agents_ray.session import AgentInterrupt, InterruptKind

__all__ = [
    "Answer",
    "Approve",
    "InterruptDecision",
    "InterruptPolicy",
    "Reject",
    "answer_with",
    "approve_all",
    "decide",
    "first_of",
    "reject_all",
]


@dataclass(frozen=True, kw_only=True)
class Approve:
    """Approve an approval."""


@dataclass(frozen=True, kw_only=True)
class Reject:
    """Reject an approval, or decline a question."""

    message: str | None = None
    """The rejection message the model sees; ``None``: the session's default."""


@dataclass(frozen=True, kw_only=True)
class Answer:
    """Answer a question."""

    text: str
    """The answer (one of the question's choices when it has choices and no free text)."""


InterruptDecision = Approve | Reject | Answer
InterruptPolicy = Callable[
    [EvalCase, AgentInterrupt], InterruptDecision | None | Awaitable[InterruptDecision | None]
]


def approve_all(*, answer: str | None = None) -> InterruptPolicy:
    """Approve every approval; answer questions with ``answer`` (``None``: leave
    them to a person unless the case scripts an answer)."""

    def policy(case: EvalCase, interrupt: AgentInterrupt) -> InterruptDecision | None:
        if interrupt.kind is InterruptKind.APPROVAL:
            return Approve()
        return Answer(text=answer) if answer is not None else None

    return policy


def reject_all(message: str = "rejected by the evaluation's policy") -> InterruptPolicy:
    """Reject every approval and decline every question with ``message``."""

    def policy(case: EvalCase, interrupt: AgentInterrupt) -> InterruptDecision | None:
        return Reject(message=message)

    return policy


def answer_with(answer: str) -> InterruptPolicy:
    """Answer every question with ``answer``; leave approvals to the next policy."""

    def policy(case: EvalCase, interrupt: AgentInterrupt) -> InterruptDecision | None:
        return Answer(text=answer) if interrupt.kind is InterruptKind.QUESTION else None

    return policy


def first_of(*policies: InterruptPolicy) -> InterruptPolicy:
    """The first policy's decision that is not ``None``."""

    async def policy(case: EvalCase, interrupt: AgentInterrupt) -> InterruptDecision | None:
        for each in policies:
            decision = await decide(each, case, interrupt)
            if decision is not None:
                return decision
        return None

    return policy


async def decide(
    policy: InterruptPolicy | Sequence[InterruptPolicy] | None,
    case: EvalCase,
    interrupt: AgentInterrupt,
) -> InterruptDecision | None:
    """``policy``'s decision (a list is tried in order; ``None`` answers nothing)."""
    if policy is None:
        return None
    if not callable(policy):
        for each in policy:
            decision = await decide(each, case, interrupt)
            if decision is not None:
                return decision
        return None
    value = policy(case, interrupt)
    if inspect.isawaitable(value):
        value = await value
    if value is not None and not isinstance(value, Approve | Reject | Answer):
        raise TypeError(
            f"interrupt policy returned {value!r}; want Approve, Reject, Answer or None"
        )
    return value
