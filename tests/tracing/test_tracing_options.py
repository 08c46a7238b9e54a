"""``AgentTracingOptions`` and the stored ``traceparent`` without Ray."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

import dex_agents_ray
from dex_agents_ray import (
    AgentSessionOptions,
    AgentTracingOptions,
    GenAISemanticConventionsVersion,
)
from dex_agents_ray.session.tracing._otel import format_traceparent, parse_traceparent
from tests.tracing.support import SinkFactory


def test_the_names_are_at_the_spec_path_with_the_spec_defaults() -> None:
    assert "AgentTracingOptions" in dex_agents_ray.__all__
    assert "GenAISemanticConventionsVersion" in dex_agents_ray.__all__
    options = AgentSessionOptions().tracing
    assert options == AgentTracingOptions()
    assert options.is_enabled is True
    assert options.tracer_provider is None
    assert options.agent_name is None
    assert options.should_capture_message_content is False
    assert options.semantic_conventions_version is GenAISemanticConventionsVersion.V1_42_0_DEV
    assert (
        GenAISemanticConventionsVersion.V1_42_0_DEV.schema_url
        == "https://opentelemetry.io/schemas/gen-ai-dev/1.42.0-dev"
    )
    assert (
        GenAISemanticConventionsVersion.V1_36_0.schema_url
        == "https://opentelemetry.io/schemas/1.36.0"
    )


def test_a_live_provider_stays_in_its_process_and_a_factory_travels() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    factory = SinkFactory("ns")
    options = AgentSessionOptions(
        tracing=AgentTracingOptions(
            tracer_provider=provider, tracer_provider_factory=factory, agent_name="Triage"
        )
    )
    copy = pickle.loads(pickle.dumps(options))
    assert copy.tracing.tracer_provider is None
    assert copy.tracing.tracer_provider_factory == factory
    assert copy.tracing.agent_name == "Triage"
    assert options.tracing.tracer_provider is provider  # the original keeps it
    changed = dataclasses.replace(options, tracing=AgentTracingOptions(is_enabled=False))
    assert changed.tracing.is_enabled is False


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"agent_name": " "}, ValueError),
        ({"is_enabled": "yes"}, TypeError),
        ({"should_capture_message_content": 1}, TypeError),
        ({"semantic_conventions_version": "2.0"}, ValueError),
        ({"tracer_provider_factory": "not callable"}, TypeError),
        ({"tracer_provider": object()}, TypeError),
    ],
)
def test_bad_options_are_refused(fields: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        AgentTracingOptions(**fields)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tracing"):
        AgentSessionOptions(tracing="on")  # type: ignore[arg-type]


def test_traceparents_round_trip_and_bad_ones_read_as_none() -> None:
    value = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    context = parse_traceparent(value)
    assert context is not None and context.is_remote and context.trace_flags.sampled
    assert format_traceparent(context) == value
    unsampled = parse_traceparent(value[:-2] + "00")
    assert unsampled is not None and not unsampled.trace_flags.sampled
    for bad in (None, "", "garbage", "01-" + value[3:], "00-" + "0" * 32 + "-" + "cd" * 8 + "-01"):
        assert parse_traceparent(bad) is None
