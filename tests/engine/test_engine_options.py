"""``FlowEngine.start``'s options as one value: the keywords and ``options=`` agree."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dex import FlowStatus

from dex_agents_ray.engine import EngineOptions, FlowEngine, Placement, PlacementMode
from tests.engine.flows_client import ClientFlow, Job


def test_every_start_keyword_is_an_option_with_the_same_default() -> None:
    parameters = inspect.signature(FlowEngine.start).parameters
    keywords = {
        name: parameter.default
        for name, parameter in parameters.items()
        if name not in ("flows", "options")
    }
    fields = {field.name: field.default for field in dataclasses.fields(EngineOptions)}
    assert keywords == fields


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"local_channels": 1}, TypeError, "local_channels must be a bool"),
        ({"worker_hosts": "all"}, ValueError, "worker_hosts must be 'own', 'use' or None"),
        ({"passivate_after": timedelta(0)}, ValueError, "passivate_after must be positive"),
        ({"stream_batch_window": 0.05}, ValueError, "stream_batch_window must be a timedelta"),
        ({"stream_batch_window": timedelta(seconds=6)}, ValueError, "stream_batch_window"),
    ],
)
def test_bad_options_are_refused_when_made(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        EngineOptions(**kwargs)


async def test_options_and_keywords_together_are_refused(tmp_path: Path) -> None:
    store = tmp_path / "never" / "engine.db"
    with pytest.raises(TypeError, match="options= or the keywords"):
        await FlowEngine.start(
            [ClientFlow()], options=EngineOptions(store=store), namespace="refused"
        )
    assert not store.parent.exists()


async def test_an_engine_starts_from_one_options_value(
    ray_session: None, namespace: str, store_path: Path
) -> None:
    options = EngineOptions(
        store=store_path,
        namespace=namespace,
        placement=Placement(mode=PlacementMode.SHARED, shared_hosts=1),
        passivate_after=timedelta(minutes=5),
    )
    flow = ClientFlow()
    engine = await FlowEngine.start([flow], options=options)
    try:
        assert engine.options is options
        assert engine.namespace == namespace
        assert engine.placement.shared_hosts == 1
        assert engine.host_config.passivate_after == 300.0
        await engine.client.start_flow(flow, "from-options", Job(finish=True))
        result = await engine.client.wait_for_flow("from-options", timeout=60)
        assert result.status is FlowStatus.COMPLETED
    finally:
        await engine.shutdown(stop_hosts=True)
