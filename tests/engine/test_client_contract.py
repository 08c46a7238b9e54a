"""``EngineClient`` against ``dex.AsyncClient``: every shared method keeps the SDK's
parameters (names, kinds, defaults, accepted types), and the SDK methods the engine
client lacks are an explicit list, so drift on either side fails here."""

from __future__ import annotations

import inspect
import re
from datetime import timedelta
from typing import Any

import pytest
from dex import AsyncClient, FlowStatus

from dex_agents_ray.engine import (
    EXECUTE_COMPLETED_EVENT,
    EngineClient,
    StepHistoryEntry,
    SyncEngineClient,
)
from tests.engine.flows_client import ClientFlow, Job

NOT_PROVIDED = {
    "close": "the engine owns its store and hosts: FlowEngine.shutdown()",
    "health_check": "no server to reach: the engine is in-process",
    "skip_timer": "not built yet (a time-skipping engine clock is planned)",
    "time_travel": "not built",
    "trigger_continue_as_new": "not built",
    "wait_for_attribute_match": "not built",
    "wait_for_step_completion": "not built",
    "write_stream": "not built",
}
"""SDK client methods the engine client does not have, and why."""


def _public(cls: type[Any]) -> set[str]:
    return {n for n, m in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


SHARED = sorted(_public(AsyncClient) - set(NOT_PROVIDED))


def test_the_missing_methods_are_exactly_the_listed_ones() -> None:
    missing = _public(AsyncClient) - _public(EngineClient)
    assert missing == set(NOT_PROVIDED), (
        f"the engine client now lacks {sorted(missing - set(NOT_PROVIDED))} or "
        f"provides {sorted(set(NOT_PROVIDED) - missing)}: update NOT_PROVIDED"
    )


_TYPE_VARIABLES = re.compile(r"\b(ValueT|InputT|OutputT|T)\b")


def _types(annotation: Any) -> set[str]:
    """The members of an annotation's union, with the SDK's type variables as Any."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return {_TYPE_VARIABLES.sub("Any", part.strip()) for part in str(text).split("|")}


def _accepts(ours: set[str], sdk: set[str]) -> bool:
    return bool(ours & {"Any", "object"}) or sdk <= ours


@pytest.mark.parametrize("method", SHARED)
@pytest.mark.parametrize("client", [EngineClient, SyncEngineClient])
def test_each_shared_method_keeps_the_sdk_parameters(method: str, client: type[Any]) -> None:
    sdk = inspect.signature(getattr(AsyncClient, method)).parameters
    ours = inspect.signature(getattr(client, method)).parameters
    for name, expected in sdk.items():
        assert name in ours, f"{client.__name__}.{method} lacks parameter {name!r}"
        actual = ours[name]
        assert actual.kind is expected.kind, (method, name, actual.kind, expected.kind)
        if expected.default is not inspect.Parameter.empty:
            # The engine may take None for an SDK default object it builds itself.
            assert actual.default in (expected.default, None), (method, name, actual.default)
        if expected.annotation is not inspect.Parameter.empty and name != "self":
            assert _accepts(_types(actual.annotation), _types(expected.annotation)), (
                f"{client.__name__}.{method}({name}) takes {actual.annotation}, "
                f"the SDK {expected.annotation}"
            )
    extra = [n for n, p in ours.items() if n not in sdk and p.default is inspect.Parameter.empty]
    assert not extra, f"{client.__name__}.{method} requires parameters the SDK lacks: {extra}"


async def test_timeouts_take_a_timedelta_or_seconds_and_history_has_the_spec_fields(
    engine_factory: Any,
) -> None:
    flow = ClientFlow()
    engine = await engine_factory([flow])
    await engine.client.start_flow(flow, "contract-1", Job(finish=True))

    result = await engine.client.wait_for_flow("contract-1", timeout=timedelta(seconds=60))
    assert result.status is FlowStatus.COMPLETED
    assert (await engine.client.wait_for_flow("contract-1", timeout=60)).status is result.status
    with pytest.raises(TypeError, match="timeout must be a timedelta"):
        await engine.client.wait_for_flow("contract-1", timeout="60")  # type: ignore[arg-type]

    history = await engine.client.read_step_history("contract-1")
    completed = [h for h in history if h.event_type == EXECUTE_COMPLETED_EVENT]
    assert completed and all(isinstance(h, StepHistoryEntry) for h in completed)
    for entry in completed:
        assert entry.step_execution_id.startswith(entry.step_type + "-")
        assert entry.final_attempt == 1
        assert entry.event == entry.event_type
    closed = history[-1]
    assert (closed.event_type, closed.step_type, closed.final_attempt) == ("flow_closed", "", None)
