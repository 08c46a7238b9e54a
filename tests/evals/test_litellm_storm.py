"""A 429 storm from a real model client: LiteLLM in the session hosts against the
loopback OpenAI-compatible server, which answers 429 with ``Retry-After`` and
records when each request came, so "under the limit" is checked from its side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from dex_agents_ray import AgentSessionFlow
from dex_agents_ray.evals import (
    CaseStatus,
    EvalCase,
    EvalModelLimiter,
    ModelRateLimit,
    contains,
    run_eval,
)
from tests.evals.agents import litellm_eval_flow
from tests.fake_provider import (
    RESPONSES_PATH,
    ErrorReply,
    FakeProviderServer,
    responses_stream,
)

ANSWER = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "The answer is 42.", "annotations": []}],
}
USAGE = {"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}
RETRY_AFTER = 2.0
STORM = 3
CASES = 4
RATE = 120.0  # requests per minute: 2 per second, a burst of 2


@dataclass(frozen=True, kw_only=True)
class Storm:
    """A provider that answers ``STORM`` 429s with ``Retry-After``, then one answer per
    case, and where a run against it keeps its sessions and files."""

    provider: FakeProviderServer
    namespace: str
    store_path: Path
    out: Path

    async def run(self, flow: AgentSessionFlow, cases: list[EvalCase], run_id: str) -> list[float]:
        """Run ``cases`` through ``flow``, all at once, under a limit of ``RATE`` a
        minute; check that the 429s slowed the cases and failed none, and that the
        run's limiter heard of each once and granted no call within ``Retry-After``
        of one. Returns the limiter's grant times."""
        report = await run_eval(
            flow,
            cases,
            run_id=run_id,
            concurrency=CASES,
            scorers=[contains()],
            model_limits={"default": ModelRateLimit(requests_per_minute=RATE)},
            out=self.out,
            store=self.store_path,
            namespace=self.namespace,
        )
        assert [r.status for r in report.results] == [CaseStatus.SCORED] * CASES, report.results
        assert all(r.passed for r in report.results)
        times = [r.at for r in self.provider.requests if r.path == RESPONSES_PATH]
        assert len(times) == STORM + CASES  # every 429 failed one attempt; each case answered once
        stats = await EvalModelLimiter(f"eval.{run_id}", {}, namespace=self.namespace).stats()
        assert stats["default"]["rate_limited"] == STORM and stats["default"]["cuts"] >= 1
        # The limiter's own log: once it heard of a 429, it granted no call within
        # Retry-After (a call granted just before may still reach the server later).
        grants: list[float] = stats["default"]["granted_at"]
        assert len(grants) == STORM + CASES
        for reported in stats["default"]["reported_at"]:
            inside = [g for g in grants if reported < g < reported + RETRY_AFTER]
            assert not inside, ([round(g - reported, 3) for g in grants], reported)
        return grants


@pytest.fixture
def storm(
    ray_session: None,
    namespace: str,
    store_path: Path,
    tmp_path: Path,
    provider: FakeProviderServer,
) -> Storm:
    too_many = ErrorReply(
        status=429,
        body={"error": {"message": "Rate limit reached", "type": "requests"}},
        headers={"Retry-After": str(RETRY_AFTER)},
    )
    provider.enqueue(
        RESPONSES_PATH,
        *([too_many] * STORM),
        *([responses_stream(output=[ANSWER], usage=USAGE)] * CASES),
    )
    return Storm(
        provider=provider, namespace=namespace, store_path=store_path, out=tmp_path / "out"
    )


async def test_a_429_storm_from_the_provider_slows_cases_and_fails_none(storm: Storm) -> None:
    cases = [EvalCase(id=f"c{i}", turns=(f"question {i}",), expected="42") for i in range(CASES)]

    grants = await storm.run(litellm_eval_flow(storm.provider.openai_api_base), cases, "storm-llm")

    # Never more than the bucket allows (a burst of 2, 2 a second) in any second.
    for start in grants:
        assert sum(1 for g in grants if start <= g < start + 1.0) <= 2 + 2


async def test_a_429_storm_reaches_the_limiter_from_an_agent_built_the_plain_way(
    storm: Storm,
) -> None:
    # The support desk of actors/, on a plain LiteLLMModelClient: no RateLimitedModelClient
    # anywhere. The session tells the run's limiter of each model call that raised.
    from actors.support import support_flow
    from dex_agents_ray.litellm import LiteLLMModelClient
    from tests.evals.agents import provider_api_key

    model = LiteLLMModelClient(
        "openai/gpt-5-mini",
        api_base=storm.provider.openai_api_base,
        api_key_provider=provider_api_key,
    )
    cases = [EvalCase(id=f"c{i}", turns=(f"order A{i + 1}",), expected="42") for i in range(CASES)]

    await storm.run(support_flow(model, flow_type="SupportDeskStorm"), cases, "storm-plain")
