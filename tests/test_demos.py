"""The README's main job, the turn-control demo and the engine demo, run in-process on
the test session's Ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from dex_agents_ray.cli import _control_demo, _demo, _session_demo


async def test_session_demo_recovers_a_crash_mid_write_without_running_it_twice(
    ray_session: None, tmp_path: Path, capsys: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the scripted model
    assert await _session_demo._demo(str(tmp_path / "demo.db")) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "refund_order ran 1 time(s)" in out
    assert "outcome is unknown" in out
    assert "CRASH: killed the session's host actor" in out


async def test_control_demo_steers_a_running_turn_and_stops_a_waiting_one(
    ray_session: None, tmp_path: Path, capsys: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # the scripted model
    assert await _control_demo._demo(str(tmp_path / "control-demo.db")) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "into the running turn: True" in out
    assert 'turn 2 (the steered message): Order status: {"item": "desk mat"' in out
    assert "cancel_turn('turn-3') = True; approving now = False" in out
    assert "turn_steered" in out and "turn_cancelled" in out
    assert "Traceback" not in out


async def test_engine_demo_completes_after_its_host_crash(
    ray_session: None, tmp_path: Path, capsys: object
) -> None:
    assert await _demo._demo(str(tmp_path / "engine-demo.db")) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "host crashes recovered from: 1" in out
    assert "charged 4200 for lamp" in out
