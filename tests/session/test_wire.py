"""Wire types rebuild their declared field types (``session/_wire.py``), and the
value types' old module path still finds them."""

from __future__ import annotations

import importlib
import pickle
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import pytest

from dex_agents_ray import (
    AgentMessage,
    AgentPlan,
    AgentState,
    AgentStatus,
    MessageRole,
    PlanStatus,
    PlanTodo,
    TodoStatus,
)
from dex_agents_ray.session import _values
from dex_agents_ray.session._wire import coerce_fields, wire_value


@dataclass(frozen=True)
class Page:
    messages: tuple[AgentMessage, ...]
    scores: tuple[float, ...] = ()
    at: datetime | None = None

    def __post_init__(self) -> None:
        coerce_fields(self)


def _message(sequence: int) -> AgentMessage:
    return AgentMessage(
        sequence=sequence,
        turn_id="turn-1",
        role=MessageRole.USER,
        framework_item="{}",
        created_at=datetime(2026, 12, 1, tzinfo=UTC),
    )


def test_a_tuple_of_the_declared_class_is_kept_as_given() -> None:
    messages = (_message(1), _message(2))
    page = Page(messages=messages, scores=(1.5,))
    assert page.messages is messages
    assert page.scores == (1.5,)


def test_lists_raw_json_and_near_types_become_the_declared_types() -> None:
    raw = asdict(_message(3))
    page = Page(
        messages=[_message(1), raw],  # type: ignore[arg-type]
        scores=(1, True, 2.5),
        at="2026-12-01T10:00:00+00:00",  # type: ignore[arg-type]
    )
    assert page.messages == (_message(1), _message(3))
    assert type(page.messages) is tuple and type(page.messages[1]) is AgentMessage
    assert page.scores == (1.0, True, 2.5) and type(page.scores[0]) is float
    assert page.at == datetime(2026, 12, 1, 10, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
@wire_value
class Stamped:
    at: datetime
    tags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:  # runs after the coercion: ``at`` is a datetime here
            raise ValueError("Stamped.at must be timezone-aware")


def test_a_wire_value_is_coerced_before_its_own_checks() -> None:
    stamped = Stamped(at="2026-12-01T10:00:00+00:00", tags=["a"])  # type: ignore[arg-type]
    assert stamped.at == datetime(2026, 12, 1, 10, tzinfo=UTC)
    assert stamped.tags == ("a",)
    with pytest.raises(ValueError, match="timezone-aware"):
        Stamped(at="2026-12-01T10:00:00")  # type: ignore[arg-type]


def test_wire_value_refuses_to_sit_above_dataclass() -> None:
    @dataclass(frozen=True)
    class Late:
        at: datetime

    with pytest.raises(TypeError, match="below @dataclass"):
        wire_value(Late)


def test_the_sessions_wire_types_coerce_on_construction() -> None:
    todo = PlanTodo(content="ship", status="pending")  # type: ignore[arg-type]
    assert todo.status is TodoStatus.PENDING
    plan = AgentPlan(revision=1, status="draft", todos=[asdict(todo)])  # type: ignore[arg-type]
    assert plan.todos == (todo,) and plan.status is PlanStatus.DRAFT
    with pytest.raises(ValueError, match="schema version 9"):
        AgentState(status=AgentStatus.RUNNING_MODEL, schema_version=9)


def test_a_pickle_naming_the_values_module_before_its_split_loads() -> None:
    """Values pickled before ``session/_values.py`` became a package name that path."""
    message = _message(4)
    data = pickle.dumps(message, protocol=0)
    moved = f"{type(message).__module__}".encode()
    assert moved == b"dex_agents_ray.session._values._messages" and moved in data
    old = data.replace(moved, b"dex_agents_ray.session._values")
    assert pickle.loads(old) == message
    classes = [v for v in vars(_values).values() if isinstance(v, type)]
    assert len(classes) == 32
    for cls in classes:  # each class at the old path is the one its module defines
        assert getattr(importlib.import_module(cls.__module__), cls.__name__) is cls
        assert getattr(_values, cls.__name__) is cls
