"""Per-model rate limits shared by every session on the cluster, and the spend ceiling.

``ModelRateLimit(requests_per_minute=..., tokens_per_minute=...)`` per model
name. One named, detached Ray actor per run (``dexrate:<name>``) holds a token
bucket per model for requests and one for tokens; every session, on every
node, draws from it before each model call (through the session's spend-limit
hook, ``ModelSpendLimit.reserve``), so a call waits for budget instead of
drawing a 429. The algorithm and its constants:

- **Buckets.** Each refills continuously at ``limit / 60`` per second up to a
  capacity of ``limit * burst / 60`` (``burst`` one second by default, at least
  one request). A call takes one request and its estimated tokens
  (``ModelSpendRequest.estimated_input_tokens``, else ``estimated_tokens``); after
  the call ``record`` settles the difference with the real usage (input plus
  output), which may leave the token bucket in debt (later calls wait it out).
- **429 episodes.** A 429 from any model client (the session tells its spend
  limit of a model call that raised, ``ModelSpendLimit.record_failure``, and
  ``rate_limit_retry_after`` recognizes the error: LiteLLM's, OpenAI's, httpx's,
  or any with ``status_code == 429``), or any
  ``EvalModelLimiter.report_rate_limited(model, retry_after)``, blocks the model until
  ``Retry-After`` (``DEFAULT_RETRY_AFTER``, 1 s, when the reply has none) and,
  once per episode (429s within ``EPISODE`` = 5 s of the first count as one), cuts
  the effective rate to ``CUT_FACTOR`` (0.5) of what it was, never below
  ``MIN_FACTOR`` (0.1) of the limit.
- **Growing back.** After ``GROW_INTERVAL`` (10 s) without a 429 the rate grows by
  ``GROW_STEP`` (0.1 of the limit) every ``GROW_INTERVAL`` until it is back at 1.

A 429 still fails its ``RunModel`` attempt (the model client makes one request
per call); eval sessions run with ``EVAL_RUN_MODEL_LIMIT`` (10 attempts in a
30-minute budget), and the next attempt's ``reserve`` waits out the block, so a
429 storm slows a case and does not fail it.

The spend ceiling (``run_eval(max_spend_tokens=...)``) is a ``RaySpendLimit``
ledger of the run: once the run's sessions have spent that many tokens (input
plus output), every further model call is refused and its turn fails with
``SPEND_LIMIT_REFUSED_PREFIX``; the run stops scheduling cases.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from dex_agents_ray.session import (
    AgentUsage,
    ModelSpendDecision,
    ModelSpendRequest,
    RunModelLimit,
)

logger = logging.getLogger("dex_agents_ray.evals")

__all__ = [
    "CUT_FACTOR",
    "DEFAULT_RETRY_AFTER",
    "EPISODE",
    "EVAL_RUN_MODEL_LIMIT",
    "GROW_INTERVAL",
    "GROW_STEP",
    "MIN_FACTOR",
    "DEFAULT_MODEL_KEY",
    "EvalModelLimiter",
    "ModelRateLimit",
    "RateLimitedModelClient",
    "rate_limit_retry_after",
]

DEFAULT_RETRY_AFTER = timedelta(seconds=1)
EPISODE = timedelta(seconds=5)
CUT_FACTOR = 0.5
MIN_FACTOR = 0.1
GROW_INTERVAL = timedelta(seconds=10)
GROW_STEP = 0.1
DEFAULT_MODEL_KEY = "default"
"""The model key of a session without a ``model`` setting (its agent's default model)."""

EVAL_RUN_MODEL_LIMIT = RunModelLimit(maximum_attempts=10, retry_budget=timedelta(minutes=30))
"""``RunModel``'s retry policy in eval sessions with model limits: 10 attempts, 30 minutes."""


@dataclass(frozen=True, kw_only=True)
class ModelRateLimit:
    """A model's budget per minute, shared by every session of the run."""

    requests_per_minute: float | None = None
    """Model calls per minute; ``None``: not limited."""
    tokens_per_minute: float | None = None
    """Input plus output tokens per minute; ``None``: not limited."""
    burst: timedelta = timedelta(seconds=1)
    """How much budget may be used at once: this long's worth (at least one call)."""
    estimated_tokens: int = 1000
    """A call's tokens before it is made, when the runner gives no estimate."""

    def __post_init__(self) -> None:
        for name in ("requests_per_minute", "tokens_per_minute"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise ValueError(f"ModelRateLimit.{name} must be a positive number or None")
        if self.burst <= timedelta(0):
            raise ValueError("ModelRateLimit.burst must be positive")
        if self.estimated_tokens < 0:
            raise ValueError("ModelRateLimit.estimated_tokens must be >= 0")


def model_key(request: ModelSpendRequest) -> str:
    """The model a call goes to: the session setting ``model``, else ``"default"``."""
    name = request.session_settings.get("model")
    return name if isinstance(name, str) and name else DEFAULT_MODEL_KEY


class _Bucket:
    def __init__(self, per_minute: float, burst_s: float, minimum: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(minimum, self.rate * burst_s)
        self.level = self.capacity

    def refill(self, elapsed: float, factor: float) -> None:
        self.level = min(self.capacity, self.level + elapsed * self.rate * factor)

    def wait_for(self, amount: float, factor: float) -> float:
        amount = min(amount, self.capacity)
        return 0.0 if self.level >= amount else (amount - self.level) / (self.rate * factor)


class _ModelState:
    def __init__(self, limit: Mapping[str, Any], now: float) -> None:
        burst = float(limit["burst_s"])
        rpm, tpm = limit["requests_per_minute"], limit["tokens_per_minute"]
        self.requests = _Bucket(rpm, burst, 1.0) if rpm else None
        self.tokens = _Bucket(tpm, burst, 1.0) if tpm else None
        self.factor = 1.0
        self.blocked_until = 0.0
        self.episode_start = -1e18
        self.last_change = now
        self.updated = now
        self.granted = 0
        self.rate_limited = 0
        self.cuts = 0
        self.reports: list[float] = []
        """When the newest 429s were reported (wall clock, for tests and status)."""
        self.grants: list[float] = []
        """When the newest calls were granted (wall clock, for tests and status)."""

    def advance(self, now: float) -> None:
        elapsed = max(0.0, now - self.updated)
        self.updated = now
        while self.factor < 1.0 and now - self.last_change >= GROW_INTERVAL.total_seconds():
            self.factor = min(1.0, self.factor + GROW_STEP)
            self.last_change += GROW_INTERVAL.total_seconds()
        for bucket in (self.requests, self.tokens):
            if bucket is not None:
                bucket.refill(elapsed, self.factor)


class _RateLimiterActor:
    """The named actor behind ``EvalModelLimiter``: token buckets per model."""

    def __init__(self) -> None:
        self._models: dict[str, _ModelState] = {}

    def _state(self, model: str, limit: Mapping[str, Any]) -> _ModelState:
        now = time.monotonic()
        state = self._models.get(model)
        if state is None:
            state = self._models[model] = _ModelState(limit, now)
        state.advance(now)
        return state

    def acquire(self, model: str, tokens: int, limit: Mapping[str, Any]) -> float:
        """Take one call's budget and answer 0, or answer how long to wait first."""
        state = self._state(model, limit)
        now = state.updated
        if now < state.blocked_until:
            return state.blocked_until - now
        waits = [0.0]
        if state.requests is not None:
            waits.append(state.requests.wait_for(1.0, state.factor))
        if state.tokens is not None:
            waits.append(state.tokens.wait_for(float(tokens), state.factor))
        wait = max(waits)
        if wait > 0:
            return wait
        if state.requests is not None:
            state.requests.level -= 1.0
        if state.tokens is not None:
            state.tokens.level -= min(float(tokens), state.tokens.capacity)
        state.granted += 1
        state.grants.append(time.time())
        del state.grants[:-100]
        return 0.0

    def settle(self, model: str, extra_tokens: int, limit: Mapping[str, Any]) -> None:
        """A finished call used ``extra_tokens`` more (or fewer) than reserved."""
        state = self._state(model, limit)
        if state.tokens is not None:
            state.tokens.level = min(state.tokens.capacity, state.tokens.level - extra_tokens)

    def report_rate_limited(
        self, model: str, retry_after_s: float | None, limit: Mapping[str, Any]
    ) -> None:
        """A 429: block until Retry-After; cut the rate once per episode."""
        state = self._state(model, limit)
        now = state.updated
        wait = DEFAULT_RETRY_AFTER.total_seconds() if retry_after_s is None else retry_after_s
        state.blocked_until = max(state.blocked_until, now + max(0.0, wait))
        state.rate_limited += 1
        state.reports.append(time.time())
        del state.reports[:-100]
        if now - state.episode_start >= EPISODE.total_seconds():
            state.episode_start = now
            state.factor = max(MIN_FACTOR, state.factor * CUT_FACTOR)
            state.cuts += 1
        state.last_change = now
        for bucket in (state.requests, state.tokens):
            if bucket is not None:
                bucket.level = min(bucket.level, 0.0)

    def stats(self) -> dict[str, dict[str, Any]]:
        return {
            model: {
                "factor": s.factor,
                "granted": s.granted,
                "rate_limited": s.rate_limited,
                "cuts": s.cuts,
                "reported_at": list(s.reports),
                "granted_at": list(s.grants),
            }
            for model, s in self._models.items()
        }


_actor_class: Any = None


def _limiter_actor(name: str, namespace: str | None) -> Any:
    global _actor_class
    import ray

    if _actor_class is None:
        _actor_class = ray.remote(_RateLimiterActor)
    return _actor_class.options(
        name=f"dexrate:{name}",
        namespace=namespace,
        lifetime="detached",
        get_if_exists=True,
        max_restarts=-1,
        max_task_retries=-1,
        num_cpus=0,
    ).remote()


class EvalModelLimiter:
    """The ``ModelSpendLimit`` of an eval's sessions: the flow's own spend limit
    (if any), the run's spend ceiling (if any), then the shared per-model rate
    limits. Picklable: it holds names, and looks the actor up where it runs.

    Args:
        name: The limiter actor's name (``dexrate:<name>``); limiters with one
            name share budgets.
        limits: Per model key (``model_key``: the session setting ``model``, else
            ``"default"``); ``"*"`` applies to every model without its own.
        namespace: The actor's Ray namespace (the engine's).
        inner: The flow's own spend limit, asked first.
        ceiling: The run's spend ceiling, asked second.
    """

    def __init__(
        self,
        name: str,
        limits: Mapping[str, ModelRateLimit],
        *,
        namespace: str | None = None,
        inner: Any = None,
        ceiling: Any = None,
    ) -> None:
        for key, limit in limits.items():
            if not isinstance(limit, ModelRateLimit):
                raise TypeError(f"model_limits[{key!r}] must be a ModelRateLimit")
        self.name = name
        self.limits = dict(limits)
        self.namespace = namespace
        self.inner = inner
        self.ceiling = ceiling
        self._handle: Any = None
        self._reserved: dict[tuple[str, int], int] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handle"] = None
        state["_reserved"] = {}
        return state

    def actor(self) -> Any:
        """The shared limiter actor (created on first use)."""
        if self._handle is None:
            self._handle = _limiter_actor(self.name, self.namespace)
        return self._handle

    def limit_for(self, model: str) -> ModelRateLimit | None:
        return self.limits.get(model, self.limits.get("*"))

    @staticmethod
    def _wire(limit: ModelRateLimit) -> dict[str, Any]:
        data = asdict(limit)
        data["burst_s"] = limit.burst.total_seconds()
        del data["burst"]
        return data

    async def reserve(self, request: ModelSpendRequest) -> ModelSpendDecision:
        _CURRENT_CALL.set(None)
        for limit in (self.inner, self.ceiling):
            if limit is not None:
                decision: ModelSpendDecision = await limit.reserve(request)
                if not decision.allowed:
                    return decision
        model = model_key(request)
        rate = self.limit_for(model)
        if rate is None:
            return ModelSpendDecision.allow()
        tokens = request.estimated_input_tokens or rate.estimated_tokens
        wire = self._wire(rate)
        while True:
            wait: float = await self.actor().acquire.remote(model, tokens, wire)
            if wait <= 0:
                break
            await asyncio.sleep(min(wait, 5.0))
        self._reserved[(request.step_execution_id, request.attempt)] = tokens
        # The model call runs next in this task: a RateLimitedModelClient finds us here.
        _CURRENT_CALL.set(_Call(self, model))
        return ModelSpendDecision.allow()

    async def record(self, request: ModelSpendRequest, usage: AgentUsage) -> None:
        for limit in (self.inner, self.ceiling):
            if limit is not None:
                await limit.record(request, usage)
        model = model_key(request)
        rate = self.limit_for(model)
        reserved = self._reserved.pop((request.step_execution_id, request.attempt), None)
        if rate is None or reserved is None:
            return
        used = int(usage.input_tokens) + int(usage.output_tokens)
        if used != reserved:
            await self.actor().settle.remote(model, used - reserved, self._wire(rate))

    async def record_failure(self, request: ModelSpendRequest, error: BaseException) -> None:
        """The session's word that the call ``reserve`` allowed raised: a 429
        (``rate_limit_retry_after``) is reported to the shared limiter, unless a
        ``RateLimitedModelClient`` already reported it."""
        for limit in (self.inner, self.ceiling):
            hear = getattr(limit, "record_failure", None)
            if hear is not None:
                try:
                    await hear(request, error)
                except Exception:  # theirs must not keep the 429 from the limiter
                    logger.warning("a spend limit's record_failure failed", exc_info=True)
        self._reserved.pop((request.step_execution_id, request.attempt), None)
        limited, retry_after = rate_limit_retry_after(error)
        if not limited:
            return
        current = _CURRENT_CALL.get()
        if current is not None and current.limiter is self and current.reported:
            return
        await self.report_rate_limited(model_key(request), retry_after)

    async def report_rate_limited(self, model: str, retry_after: timedelta | None) -> None:
        """Tell the shared limiter ``model`` answered 429 (with its ``Retry-After``)."""
        rate = self.limit_for(model)
        if rate is None:
            return
        seconds = None if retry_after is None else retry_after.total_seconds()
        await self.actor().report_rate_limited.remote(model, seconds, self._wire(rate))

    async def stats(self) -> dict[str, dict[str, Any]]:
        """Per model: the rate factor, calls granted, 429s reported, cuts, and when
        the newest 429s were reported and calls granted (``reported_at`` and
        ``granted_at``, seconds since the epoch, the newest 100 of each)."""
        result: dict[str, dict[str, Any]] = await self.actor().stats.remote()
        return result


class _Call:
    """The model call the current Step reserved for: its limiter, its model key, and
    whether a ``RateLimitedModelClient`` reported its 429 (the session's
    ``record_failure`` then does not report it again)."""

    def __init__(self, limiter: EvalModelLimiter, model: str) -> None:
        self.limiter = limiter
        self.model = model
        self.reported = False


_CURRENT_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "dex_agents_ray_eval_model_call", default=None
)
"""The model call the current Step reserved for."""


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and what it was raised from (a client may wrap the provider's error)."""
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def _retry_after_seconds(error: BaseException) -> float | None:
    value: Any = getattr(error, "retry_after", None)
    if value is None:
        for headers in (
            getattr(error, "headers", None),
            getattr(error, "litellm_response_headers", None),
            getattr(getattr(error, "response", None), "headers", None),
        ):
            try:
                value = headers.get("retry-after") or headers.get("Retry-After")  # type: ignore[union-attr]
            except AttributeError:
                continue
            if value is not None:
                break
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):  # an HTTP date: wait the default
        return None


def rate_limit_retry_after(error: BaseException) -> tuple[bool, timedelta | None]:
    """Whether ``error`` is a provider's 429, and its ``Retry-After`` when it says.

    Recognized: an exception (or one it was raised from) with ``status_code ==
    429`` (LiteLLM's ``RateLimitError``, httpx and OpenAI errors) or with
    ``RateLimit`` in its class name; the delay is the first ``retry_after``
    attribute (seconds) or ``Retry-After`` header (of ``headers``,
    ``litellm_response_headers`` or ``response.headers``) along that chain.
    """
    chain = _chain(error)
    if not any(
        getattr(e, "status_code", None) == 429 or "RateLimit" in type(e).__name__ for e in chain
    ):
        return False, None
    for each in chain:
        seconds = _retry_after_seconds(each)
        if seconds is not None:
            return True, timedelta(seconds=seconds)
    return True, None


class RateLimitedModelClient:
    """Wraps a ``ModelClient`` so its 429s reach the eval's shared limiter.

    Not needed any more: ``run_eval(model_limits=...)`` hears of every model
    call that raised from the session itself (``EvalModelLimiter.record_failure``),
    whatever the client. Kept so code that wraps its client keeps working; a 429
    it reports is not reported twice.

    On a provider 429 (``rate_limit_retry_after``) during a call that an
    ``EvalModelLimiter`` reserved for, it reports the model and ``Retry-After``
    (which blocks every session's calls to that model and cuts its rate), then
    re-raises: the ``RunModel`` attempt fails and its retry waits in ``reserve``.
    Outside an eval it only passes calls through. Everything else is the inner
    client's::

        model = RateLimitedModelClient(LiteLLMModelClient("openai/gpt-5-mini"))
        agent = AgentDefinition(name="support", instructions="...", model=model)
    """

    def __init__(self, inner: Any) -> None:
        if not callable(getattr(inner, "call_model", None)):
            raise TypeError("RateLimitedModelClient wraps a ModelClient (call_model)")
        self.inner = inner

    def __repr__(self) -> str:
        return f"RateLimitedModelClient({self.inner!r})"

    async def call_model(self, request: Any, output: Any) -> Any:
        try:
            return await self.inner.call_model(request, output)
        except Exception as error:
            limited, retry_after = rate_limit_retry_after(error)
            current = _CURRENT_CALL.get()
            if limited and current is not None and not current.reported:
                current.reported = True
                try:
                    await current.limiter.report_rate_limited(current.model, retry_after)
                except Exception:  # the 429 is what the attempt reports
                    logger.warning("could not report a 429 to the eval limiter", exc_info=True)
            raise

    def estimate_input_tokens(self, request: Any) -> int:
        estimate: int = self.inner.estimate_input_tokens(request)
        return estimate

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.inner, name)
