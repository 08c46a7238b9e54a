"""Tracing disabled imports no OpenTelemetry, and a process without the API traces
nothing: in fresh interpreters (see no_otel_probe), and in a real session host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dex_agents_ray import AgentSessionClient
from tests.session.polling import snapshot_when, turn_done

ROOT = Path(__file__).resolve().parent.parent.parent


def _probe(mode: str, **env: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.tracing.no_otel_probe", mode],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("metrics", ["1", "0"])
def test_tracing_disabled_imports_no_opentelemetry(metrics: str) -> None:
    probe = _probe("disabled", DEX_AGENTS_RAY_METRICS=metrics)
    assert probe["result"] == "decided"
    assert probe["otel"] == []
    assert probe["stored"] is None  # a root without a valid context deletes the stored one
    # Metrics on: hooks without a tracer; off: no hooks at all.
    assert probe["tracer"] == ("None" if metrics == "1" else None)


def test_without_the_api_roots_store_no_context_and_nothing_is_imported() -> None:
    probe = _probe("hidden", DEX_AGENTS_RAY_METRICS="0")
    assert probe["result"] == "decided"
    assert probe["otel"] == []
    assert probe["stored"] is None
    assert probe["tracer"] == "None"


async def test_a_host_serving_only_untraced_flows_never_imports_opentelemetry(
    engine_factory: Any, namespace: str, state_dir: Path
) -> None:
    from tests.tracing.agents import build_flow

    flow = build_flow(namespace, str(state_dir), enabled=False, inline_probe=True)
    engine = await engine_factory([flow])
    sessions = AgentSessionClient(engine.client, flow)
    await sessions.start_session("s1", "probe modules")
    snapshot = await snapshot_when(sessions, "s1", turn_done(1))
    tool_output = next(m.tool_output for m in snapshot.messages if m.tool_output is not None)
    assert json.loads(tool_output) == {"pid": json.loads(tool_output)["pid"], "otel": []}
