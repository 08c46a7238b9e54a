"""The engine's public entry points: names, client surfaces, the default store."""

from __future__ import annotations

import inspect
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dex import AsyncClient, FlowStatus

import dex_agents_ray.engine
import dex_agents_ray.testing
from dex_agents_ray.engine import EngineClient, FlowEngine, SyncEngineClient
from tests.engine.flows_client import ClientFlow, Job

CLIENT_METHODS = (
    "start_flow",
    "invoke_rpc",
    "stop_flow",
    "describe_flow",
    "wait_for_flow",
    "search_flows",
    "read_stream",
    "list_stream_messages",
)


def test_the_issue_names_are_exported() -> None:
    assert {
        "FlowEngine",
        "EngineClient",
        "SyncEngineClient",
        "StepAttemptProgress",
        "EngineRecoveryErrorInfo",
        "RemoteStepOptions",
        "RayTaskOptions",
        "FlowStore",
        "StaleEpochError",
    } <= set(dex_agents_ray.engine.__all__)
    assert {"FileGate", "InvocationLog", "kill_flow_actor"} <= set(dex_agents_ray.testing.__all__)
    for module in (dex_agents_ray.engine, dex_agents_ray.testing):
        for name in module.__all__:
            assert hasattr(module, name), name


def test_start_takes_flows_then_keyword_only_store_and_namespace() -> None:
    parameters = inspect.signature(FlowEngine.start).parameters
    assert list(parameters)[:1] == ["flows"]
    for name in ("store", "namespace"):
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[name].default is None
    assert inspect.iscoroutinefunction(FlowEngine.start)


@pytest.mark.parametrize("method", CLIENT_METHODS)
def test_the_clients_mirror_the_sdk_async_client(method: str) -> None:
    sdk = list(inspect.signature(getattr(AsyncClient, method)).parameters)
    ours = list(inspect.signature(getattr(EngineClient, method)).parameters)
    blocking = list(inspect.signature(getattr(SyncEngineClient, method)).parameters)
    # The SDK's positional parameters come first, in the SDK's order.
    positional = [
        name
        for name, p in inspect.signature(getattr(AsyncClient, method)).parameters.items()
        if p.kind is p.POSITIONAL_OR_KEYWORD
    ]
    assert ours[: len(positional)] == positional, (sdk, ours)
    assert blocking[: len(positional)] == positional
    assert inspect.iscoroutinefunction(getattr(EngineClient, method))
    assert not inspect.iscoroutinefunction(getattr(SyncEngineClient, method))


def test_read_step_history_exists_on_both_clients() -> None:
    assert inspect.iscoroutinefunction(EngineClient.read_step_history)
    assert callable(SyncEngineClient.read_step_history)


def test_importing_the_engine_starts_nothing() -> None:
    script = (
        "import dex_agents_ray.engine, dex_agents_ray.testing, ray\nprint(ray.is_initialized())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "False"


async def test_the_default_store_lives_under_the_working_directory(
    engine_factory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    flow = ClientFlow()
    engine = await engine_factory([flow], store=None)
    await engine.client.start_flow(flow, "default-store", Job(finish=True))
    result = await engine.client.wait_for_flow("default-store", timeout=60)
    assert result.status is FlowStatus.COMPLETED
    assert (tmp_path / ".dex-agents-ray" / "engine.db").is_file()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"passivate_after": timedelta(0)}, "passivate_after must be positive"),
        ({"placement": "shared", "shared_hosts": 0}, "shared_hosts must be >= 1"),
        ({"placement": "everywhere"}, "everywhere"),
        ({"stream_batch_window": 0.05}, "stream_batch_window must be a timedelta"),
        ({"stream_batch_window": timedelta(seconds=-1)}, "stream_batch_window must be"),
        ({"stream_batch_window": timedelta(seconds=6)}, "stream_batch_window must be"),
    ],
)
async def test_bad_start_options_are_refused_before_anything_is_written(
    ray_session: None, tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    store = tmp_path / "never" / "engine.db"
    with pytest.raises(ValueError, match=message):
        await FlowEngine.start([ClientFlow()], store=store, namespace="refused", **kwargs)
    assert not store.parent.exists()
