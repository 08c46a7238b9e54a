"""Plans: the session's plan, its tasks, and an approval to execute a revision."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from dex_agents_ray.session._values._base import utc_now
from dex_agents_ray.session._wire import wire_value

__all__ = ["AgentPlan", "PlanExecutionRequest", "PlanStatus", "PlanTodo", "TodoStatus"]


class TodoStatus(StrEnum):
    """A plan task's status."""

    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


class PlanStatus(StrEnum):
    """The plan's status."""

    DRAFT = "draft"
    """Written in a planning turn; waits for ``execute_plan``."""
    ACTIVE = "active"
    """Being worked on."""
    COMPLETED = "completed"
    """Every task is completed."""
    CLEARED = "cleared"
    """``write_todos`` wrote no tasks."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class PlanTodo:
    """One task of the plan."""

    content: str
    """What to do."""
    status: TodoStatus
    """Pending, in progress, or completed."""


@dataclass(frozen=True, kw_only=True)
@wire_value
class AgentPlan:
    """The session's plan (``AgentPlan`` Attribute), replaced whole by ``write_todos``."""

    revision: int
    """Starts at 1; each successful ``write_todos`` adds 1."""
    status: PlanStatus
    """Draft, active, completed, or cleared."""
    todos: tuple[PlanTodo, ...] = ()
    """The tasks, in order; empty when cleared."""
    turn_id: str = ""
    """The turn that wrote this revision."""
    updated_at: datetime = field(default_factory=utc_now)
    """When this revision was written."""


@dataclass(frozen=True, kw_only=True)
class PlanExecutionRequest:
    """An approval to execute one plan revision (``execute_plan``)."""

    revision: int
    """The approved revision."""
