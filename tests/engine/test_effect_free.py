"""Effect-free Steps: the next Step starts while the completion is written.

Each test holds the store's write lock from another connection while the
first Step completes, so the completion cannot be durable until it lets go,
and looks at what ``Second`` saw in the store when it started.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from dex import FlowStatus

from dex_agents_ray.engine import effect_free
from dex_agents_ray.engine.run._effect_free import is_effect_free
from dex_agents_ray.testing import FileGate, InvocationLog, kill_flow_actor
from tests.engine.flows_effect_free import (
    Chain,
    EffectFreeChain,
    EffectFreeFirst,
    PlainChain,
    PlainFirst,
)


@contextmanager
def _writes_held(store: Path) -> Iterator[None]:
    """Hold SQLite's write lock on ``store``: no commit lands until it is let go."""
    db = sqlite3.connect(store, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
        db.execute("ROLLBACK")
    finally:
        db.close()


def _release(state_dir: Path, *names: str) -> None:
    for name in names:
        FileGate(state_dir, name).release()


async def _at_first_step(
    engine_factory: Any, flow: Any, flow_id: str, chain: Chain, *released: str
) -> Any:
    """Start ``flow_id`` with the gates ``released`` open; return the engine once
    the first Step waits at its gate ``first-1``."""
    engine = await engine_factory([flow])
    _release(Path(chain.state_dir), *released)
    await engine.client.start_flow(flow, flow_id, chain)
    await FileGate(chain.state_dir, "first-1").wait_until_reached()
    return engine


async def test_an_effect_free_step_hands_over_before_its_completion_is_durable(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = EffectFreeChain()
    engine = await _at_first_step(
        engine_factory, flow, "ef-1", Chain(str(state_dir), str(store_path)), "first-done-1"
    )

    with _writes_held(store_path):
        _release(state_dir, "first-1")
        await FileGate(state_dir, "second-1").wait_until_reached()
        # Second runs while the first Step's completion waits for the store.
        assert InvocationLog(state_dir / "chain.log").entries() == [
            "EffectFreeFirst/1",
            "Second/1/pending",
        ]
        _release(state_dir, "second-1")

    result = await engine.client.wait_for_flow("ef-1", timeout=60)
    assert result.status is FlowStatus.COMPLETED
    assert result.completions[0].decode(str) == "pending"
    history = await engine.client.read_step_history("ef-1")
    completed = [h.step_execution_id for h in history if h.event == "step_completed"]
    assert completed == ["EffectFreeFirst-1", "Second-1"]


async def test_a_reading_rpc_answers_once_a_deferred_completion_is_durable(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    """An RPC reads the run in memory, where a deferred completion already is:
    it answers only once that completion is durable. (While the write lock is
    held it cannot answer; the bounded wait below can only make a wrong engine
    pass, never a right one fail.)"""
    flow = EffectFreeChain()
    engine = await _at_first_step(
        engine_factory, flow, "ef-rpc", Chain(str(state_dir), str(store_path)), "first-done-1"
    )

    with _writes_held(store_path):
        _release(state_dir, "first-1")
        await FileGate(state_dir, "second-1").wait_until_reached()
        ping = asyncio.ensure_future(engine.client.invoke_rpc(flow.ping, "ef-rpc"))
        done, _ = await asyncio.wait({ping}, timeout=2)
        assert not done
    assert await ping == "pong"
    _release(state_dir, "second-1")
    result = await engine.client.wait_for_flow("ef-rpc", timeout=60)
    assert result.status is FlowStatus.COMPLETED


async def test_a_step_that_is_not_effect_free_hands_over_once_its_completion_is_durable(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = PlainChain()
    engine = await _at_first_step(
        engine_factory,
        flow,
        "plain-1",
        Chain(str(state_dir), str(store_path)),
        "first-done-1",
        "second-1",
    )

    with _writes_held(store_path):
        _release(state_dir, "first-1")
        await FileGate(state_dir, "first-done-1").wait_until_reached()

    result = await engine.client.wait_for_flow("plain-1", timeout=60)
    assert result.completions[0].decode(str) == "durable"
    assert InvocationLog(state_dir / "chain.log").entries() == [
        "PlainFirst/1",
        "Second/1/durable",
    ]


async def test_a_last_attempt_after_an_effect_free_step_waits_for_its_durable_start(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = EffectFreeChain()
    chain = Chain(str(state_dir), str(store_path), second_attempts=1)
    engine = await _at_first_step(
        engine_factory, flow, "ef-last", chain, "first-done-1", "second-1"
    )

    with _writes_held(store_path):
        _release(state_dir, "first-1")
        await FileGate(state_dir, "first-done-1").wait_until_reached()

    result = await engine.client.wait_for_flow("ef-last", timeout=60)
    # A single-attempt Step never starts on a start record that a crash could lose.
    assert result.completions[0].decode(str) == "durable"


async def test_a_host_killed_before_the_completion_lands_redoes_the_effect_free_step(
    engine_factory: Any, state_dir: Path, store_path: Path
) -> None:
    flow = EffectFreeChain()
    engine = await _at_first_step(
        engine_factory,
        flow,
        "ef-kill",
        Chain(str(state_dir), str(store_path)),
        "first-done-1",
        "first-done-2",
        "first-2",
    )

    with _writes_held(store_path):
        _release(state_dir, "first-1")
        await FileGate(state_dir, "second-1").wait_until_reached()
        await kill_flow_actor(engine, "ef-kill")  # the completion never lands
    _release(state_dir, "second-1")

    result = await engine.client.wait_for_flow("ef-kill", timeout=90)
    assert result.status is FlowStatus.COMPLETED
    entries = InvocationLog(state_dir / "chain.log").entries()
    # The first Step ran again (its first attempt counts as failed: it had
    # started), and Second's interrupted attempt was not counted: it is
    # attempt 1 again. Nothing else ran twice.
    assert entries[:3] == ["EffectFreeFirst/1", "Second/1/pending", "EffectFreeFirst/2"]
    assert [e.rsplit("/", 1)[0] for e in entries[3:]] == ["Second/1"]
    history = await engine.client.read_step_history("ef-kill")
    failed = [
        h.detail["error_type"]
        for h in history
        if h.step_execution_id == "EffectFreeFirst-1" and h.event == "attempt_failed"
    ]
    assert failed == ["HostDiedError"]


def test_effect_free_marks_step_classes_only_and_not_their_subclasses() -> None:
    with pytest.raises(TypeError, match="effect_free marks a dex.Step subclass, got 'Second'"):
        effect_free("Second")  # type: ignore[type-var]
    with pytest.raises(TypeError, match="effect_free marks a dex.Step subclass"):
        effect_free(Chain)  # type: ignore[type-var]

    class Later(EffectFreeFirst):
        pass

    assert is_effect_free(EffectFreeFirst())
    assert not is_effect_free(PlainFirst())
    assert not is_effect_free(Later())
