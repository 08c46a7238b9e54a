"""The session's tracing modules moved into ``session/tracing/``; their old paths
still import, as the modules that hold the code now (``engine/_moved.py``).

Stored Flow definitions are pickles, and a stored session Flow names its
``AgentTracingOptions`` (and a relay address it carries) by the old path
``dex_agents_ray.session._tracing_options``.
"""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import pytest

from dex_agents_ray import AgentTracingOptions, GenAISemanticConventionsVersion
from dex_agents_ray.engine._moved import SESSION_MOVED
from dex_agents_ray.session.tracing._relay_address import SpanRelayAddress, span_relay_address

SESSION = Path(__file__).resolve().parents[2] / "dex_agents_ray" / "session"
OLD = "dex_agents_ray.session._tracing_options"


@pytest.mark.parametrize(("old", "new"), sorted(SESSION_MOVED.items()))
def test_an_old_path_imports_the_module_that_holds_its_code(old: str, new: str) -> None:
    assert not (SESSION / f"{old}.py").exists()
    module = importlib.import_module(f"dex_agents_ray.session.{new}")
    assert importlib.import_module(f"dex_agents_ray.session.{old}") is module
    assert module.__spec__ is not None and module.__spec__.name == module.__name__


def test_every_tracing_module_that_moved_is_mapped() -> None:
    now = {f"tracing.{path.stem}" for path in (SESSION / "tracing").glob("_*.py")}
    added = {"tracing.__init__", "tracing._notes", "tracing._relay_address", "tracing._failures"}
    assert now - added == set(SESSION_MOVED.values())


def test_options_pickled_under_the_old_path_load_with_their_relay_address() -> None:
    address = SpanRelayAddress(
        actor_name="relay-1", namespace="ns", origin="pid 1 on host-a", explicit=False, sampler=None
    )
    options = AgentTracingOptions(
        agent_name="Triage", semantic_conventions_version=GenAISemanticConventionsVersion.V1_36_0
    )
    object.__setattr__(options, "_span_relay", address)  # as a copy pickled by its driver
    data = pickle.dumps(options, protocol=0)
    old = data.replace(b"dex_agents_ray.session.tracing._options", OLD.encode())
    old = old.replace(b"dex_agents_ray.session.tracing._relay_address", OLD.encode())
    assert b"dex_agents_ray.session.tracing" not in old

    loaded = pickle.loads(old)

    assert type(loaded) is AgentTracingOptions
    assert loaded.agent_name == "Triage"
    assert loaded.semantic_conventions_version is GenAISemanticConventionsVersion.V1_36_0
    assert span_relay_address(loaded) == address
