"""Per-model rate limits shared by every host, the 429 algorithm, and the spend ceiling."""

from __future__ import annotations

from pathlib import Path

from dex_agents_ray import SPEND_LIMIT_REFUSED_PREFIX
from dex_agents_ray.evals import (
    CUT_FACTOR,
    GROW_INTERVAL,
    GROW_STEP,
    CaseStatus,
    EvalCase,
    EvalModelLimiter,
    ModelRateLimit,
    contains,
    run_eval,
)
from dex_agents_ray.evals._limits import _ModelState, _RateLimiterActor
from dex_agents_ray.testing import InvocationLog
from tests.evals.agents import eval_flow

RATE = 120.0  # requests per minute: 2 per second, a burst of 2


async def test_model_calls_stay_under_the_shared_limit(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    cases = [EvalCase(id=f"c{i}", turns=(f"c{i} look",), expected="found") for i in range(8)]

    report = await run_eval(
        eval_flow(str(state_dir)),
        cases,
        run_id="limited",
        concurrency=8,
        scorers=[contains()],
        model_limits={"default": ModelRateLimit(requests_per_minute=RATE)},
        out=tmp_path / "out",
        store=store_path,
        namespace=namespace,
    )

    assert all(r.status is CaseStatus.SCORED and r.passed for r in report.results)
    entries = [e.split() for e in InvocationLog(state_dir / "model-times.log").entries()]
    times = sorted(float(t) for t, _, _ in entries)
    assert len(times) == 16
    assert len({pid for _, pid, _ in entries}) >= 2  # sessions on several hosts shared it
    per_second, burst = RATE / 60, 2
    # Any window of w seconds holds at most burst + rate * w calls (+1: the grant
    # and the call are not the same instant).
    for i, start in enumerate(times):
        for window in (0.5, 1.0, 2.0):
            inside = sum(1 for t in times[i:] if t < start + window)
            assert inside <= burst + per_second * window + 1, (window, times)
    assert times[-1] - times[0] >= (len(times) - burst - 1) / per_second
    # The run's limiter actor is named after the run ID.
    stats = await EvalModelLimiter("eval.limited", {}, namespace=namespace).stats()
    assert stats["default"]["granted"] == 16 and stats["default"]["rate_limited"] == 0


async def test_a_429_storm_slows_every_session_and_fails_none(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    # The first 3 model calls answer 429 with Retry-After: 1.5 s.
    cases = [EvalCase(id=f"c{i}", turns=(f"c{i} look",), expected="found") for i in range(6)]

    report = await run_eval(
        eval_flow(str(state_dir), storm=3, retry_after=1.5),
        cases,
        run_id="storm",
        concurrency=6,
        scorers=[contains()],
        model_limits={"*": ModelRateLimit(requests_per_minute=6000)},
        out=tmp_path / "out",
        store=store_path,
        namespace=namespace,
    )

    assert all(r.status is CaseStatus.SCORED and r.passed for r in report.results)
    calls = sorted(
        (float(t), kind)
        for t, _, kind in (
            e.split() for e in InvocationLog(state_dir / "model-times.log").entries()
        )
    )
    # (two sessions can both read the storm's count before either logs: 3 or a few more)
    storm = sum(1 for _, kind in calls if kind == "429")
    assert storm >= 3
    # No session called the model within Retry-After of a 429 (the server's view; calls
    # granted before the limiter heard of it may still start in its first moments).
    for at, kind in calls:
        if kind == "429":
            assert not any(at + 0.2 < t < at + 1.4 and k == "ok" for t, k in calls), calls
    stats = await EvalModelLimiter("eval.storm", {}, namespace=namespace).stats()
    assert stats["default"]["rate_limited"] == storm and stats["default"]["cuts"] >= 1
    assert stats["default"]["factor"] < 1.0


def test_a_429_blocks_for_retry_after_cuts_the_rate_once_per_episode_and_grows_back() -> None:
    limit = {"requests_per_minute": 60.0, "tokens_per_minute": None, "burst_s": 1.0}
    state = _ModelState(limit, now=0.0)
    actor = _RateLimiterActor()
    actor._models["m"] = state

    assert actor.acquire("m", 10, limit) == 0.0  # the burst of one
    actor.report_rate_limited("m", 3.0, limit)
    actor.report_rate_limited("m", 1.0, limit)  # the same episode: one cut
    assert state.factor == CUT_FACTOR and state.cuts == 1 and state.rate_limited == 2
    wait = actor.acquire("m", 10, limit)
    assert 2.5 < wait <= 3.0  # Retry-After is honoured

    # Growing back: GROW_STEP per GROW_INTERVAL without a 429, up to the full rate.
    start = state.last_change
    state.advance(start + GROW_INTERVAL.total_seconds() * 2 + 0.01)
    assert abs(state.factor - (CUT_FACTOR + 2 * GROW_STEP)) < 1e-9
    state.advance(start + GROW_INTERVAL.total_seconds() * 20)
    assert state.factor == 1.0
    # At the cut rate the bucket refills at half speed.
    state.factor = 0.5
    state.requests.level = 0.0  # type: ignore[union-attr]
    assert abs(state.requests.wait_for(1.0, state.factor) - 2.0) < 1e-9  # type: ignore[union-attr]


async def test_the_spend_ceiling_refuses_model_calls_and_stops_scheduling(
    ray_session: None, namespace: str, store_path: Path, state_dir: Path, tmp_path: Path
) -> None:
    # Each model call uses 15 tokens; a case makes two.
    cases = [EvalCase(id=f"c{i}", turns=(f"c{i} look",), expected="found") for i in range(4)]

    report = await run_eval(
        eval_flow(str(state_dir)),
        cases,
        run_id="ceiling",
        concurrency=1,
        scorers=[contains()],
        max_spend_tokens=40,
        out=tmp_path / "out",
        store=store_path,
        namespace=namespace,
    )

    first, second = report.results
    assert first.status is CaseStatus.SCORED and first.input_tokens + first.output_tokens == 30
    assert second.status is CaseStatus.FAILED
    assert SPEND_LIMIT_REFUSED_PREFIX in (second.error or "")
    assert report.stopped is not None and "spend ceiling" in report.stopped
    assert len(InvocationLog(state_dir / "model.log").entries()) == 3
