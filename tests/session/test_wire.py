"""Wire types rebuild their declared field types (``session/_wire.py``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from dex_agents_ray import AgentMessage, MessageRole
from dex_agents_ray.session._wire import coerce_fields


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
