"""Run in a fresh interpreter by test_tracing_imports: drives the tracing decorators
on a stand-in context and prints which OpenTelemetry modules got imported.

``hide`` makes ``opentelemetry`` unimportable first (``ray[default]`` installs
the API, so its absence must be simulated).
"""

from __future__ import annotations

import asyncio
import importlib.abc
import json
import sys
from typing import Any


class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden)")
        return None


class _Context:
    """What ``Attribute.get`` / ``delete`` need of a Context."""

    flow_id = "s1"
    run_id = "r1"
    step_execution_id = "StartAgentSession-1"
    attempt = 1

    def __init__(self) -> None:
        stored = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
        self.values: dict[str, Any] = {"AgentTraceContext": stored}

    def _get_attribute(self, definition: Any, instance: Any) -> Any:
        return self.values.get(definition.name)

    def _delete_attribute(self, definition: Any, instance: Any) -> None:
        self.values.pop(definition.name, None)


async def main(mode: str) -> None:
    if mode == "hidden":
        sys.meta_path.insert(0, _Hide())
    import dex_agents_ray  # noqa: F401
    from dex_agents_ray import AgentSessionOptions, AgentTracingOptions
    from dex_agents_ray.session._config import SessionConfig
    from dex_agents_ray.session.tracing._decorators import _hooks, activation_step, approval_step

    enabled = mode == "hidden"
    options = AgentSessionOptions(tracing=AgentTracingOptions(is_enabled=enabled))
    config = SessionConfig(flow_type="T", runner=None, options=options, events=None)  # type: ignore[arg-type]

    class Step:
        def __init__(self) -> None:
            self.config = config

        @activation_step
        async def execute(self, context: Any, input: Any) -> Any:
            return "decided"

    context = _Context()
    result = await Step().execute(context, None)  # type: ignore[arg-type]
    hooks = _hooks(config)
    print(
        json.dumps(
            {
                "result": result,
                "stored": context.values.get("AgentTraceContext"),
                "tracer": None if hooks is None else repr(hooks.tracer),
                "approval_step": approval_step.__name__,
                "otel": sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry"),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
