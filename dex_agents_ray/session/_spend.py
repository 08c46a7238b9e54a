"""Spend limits: an application's budget for model calls across many sessions.

The spec names ``ModelSpendLimit`` and leaves its methods to the implementation;
this is the interface, once, for everything that uses it (the batch evaluation
runner builds its spend ceiling on it):

- Before every model call (``RunModel``) and every summary call
  (``CompactContext``) the session calls ``reserve(request)`` with the session,
  turn, Step execution, attempt, purpose, the turn's settings and the runner's
  input-token estimate when it has one. ``reserve`` may wait (the Step
  heartbeats meanwhile; the wait counts against the Step's timeout) and returns a
  ``ModelSpendDecision``.
- A refusal makes no provider request and fails the turn at once, with no retry:
  ``last_turn_error`` is ``SPEND_LIMIT_REFUSED_PREFIX + ": " + reason``. An
  exception from ``reserve`` fails the attempt like any other (it is retried).
- After the call, ``record(request, usage)`` reports what it used (this call only).
  A failing ``record`` is logged and never fails the Step: the call happened. A
  crash between the call and ``record`` leaves it unrecorded; a retried attempt
  reserves again.
- When the call raises instead, ``record_failure(request, error)`` hears of it,
  if the limit has that method (it is optional), before the attempt fails with
  the error. This is how a provider's 429 reaches a shared rate limiter whatever
  the model client (the evals' limiter reads the status and ``Retry-After`` from
  the error). A failing ``record_failure`` is logged; the attempt fails with the
  call's error all the same.

``RaySpendLimit`` is a ready implementation for a Ray cluster: one named actor
holds per-key token budgets and persists its counts, so they survive its restart.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from dex_agents_ray.session._values import AgentUsage

logger = logging.getLogger("dex_agents_ray.session")

__all__ = [
    "SPEND_LIMIT_REFUSED_PREFIX",
    "ModelCallPurpose",
    "ModelSpendDecision",
    "ModelSpendLimit",
    "ModelSpendRequest",
    "RaySpendLimit",
]

SPEND_LIMIT_REFUSED_PREFIX = "the spend limit refused the model call"
"""How ``last_turn_error`` of a turn whose model call the spend limit refused begins."""


class ModelCallPurpose(StrEnum):
    """Why the session makes a model call."""

    MODEL_CALL = "model_call"
    """``RunModel``: the turn's model call."""
    CONTEXT_SUMMARY = "context_summary"
    """``CompactContext``: a summary call."""


@dataclass(frozen=True, kw_only=True)
class ModelSpendRequest:
    """What the spend limit is asked about: one model call."""

    flow_id: str
    """The session ID."""
    turn_id: str
    """The turn."""
    step_execution_id: str
    """The ``RunModel`` or ``CompactContext`` execution (shared by its attempts)."""
    attempt: int
    """The Step attempt, from 1."""
    purpose: ModelCallPurpose
    """A turn's model call or a summary call."""
    session_settings: Mapping[str, Any] = field(default_factory=dict)
    """The turn's settings (for example the model it resolves to)."""
    estimated_input_tokens: int | None = None
    """The runner's estimate of the call's input, when it makes one."""


@dataclass(frozen=True, kw_only=True)
class ModelSpendDecision:
    """``reserve``'s answer."""

    allowed: bool
    """Whether the call may be made."""
    reason: str | None = None
    """Why it was refused (shown in ``last_turn_error``)."""

    @classmethod
    def allow(cls) -> ModelSpendDecision:
        return cls(allowed=True)

    @classmethod
    def refuse(cls, reason: str) -> ModelSpendDecision:
        return cls(allowed=False, reason=reason)


@runtime_checkable
class ModelSpendLimit(Protocol):
    """An application's spend limit (``AgentSessionOptions.spend_limit``). It is
    stored with the Flow, so it must be picklable (hold names, not connections)."""

    async def reserve(self, request: ModelSpendRequest) -> ModelSpendDecision:
        """Allow or refuse the call; may wait for budget."""
        ...

    async def record(self, request: ModelSpendRequest, usage: AgentUsage) -> None:
        """What the call used."""
        ...

    # Optional, not part of the Protocol's check (a limit without it is not told):
    #
    #     async def record_failure(self, request: ModelSpendRequest, error: BaseException) -> None:
    #         """The call ``reserve`` allowed raised ``error`` (called in the task that
    #         made the call, before the attempt fails; an exception from it is logged)."""


def spent_tokens(usage: AgentUsage) -> int:
    """The tokens a call counts against a budget: input plus output."""
    return int(usage.input_tokens) + int(usage.output_tokens)


class RaySpendLimit:
    """Per-key token budgets in one named Ray actor, shared by every session on the
    cluster, with counts that survive the actor's restart.

    ``key`` maps a request to its budget key (default: the session settings'
    ``"account"``, else ``"default"``); ``budgets`` gives each key's tokens
    (``default_budget`` for others). A call is refused once its key has spent its
    budget; counts are input plus output tokens, recorded after each call. The
    actor (``dexspend:<name>``, detached, restarted by Ray) writes every count to
    the SQLite file ``ledger_path`` before it answers; on a cluster put that file
    on storage every node can reach (the actor may restart on another node).

    Args:
        name: The ledger's name; limits with one name share counts.
        budgets: Tokens per key.
        default_budget: Tokens of a key without its own; ``None`` is unlimited.
        key: The request's budget key.
        ledger_path: Where the counts persist.
        namespace: The Ray namespace of the actor (default: the driver's).
    """

    def __init__(
        self,
        name: str,
        budgets: Mapping[str, int] | None = None,
        *,
        default_budget: int | None = None,
        key: Callable[[ModelSpendRequest], str] | None = None,
        ledger_path: str | os.PathLike[str] = ".dex-agents-ray/spend.db",
        namespace: str | None = None,
    ) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"RaySpendLimit name must be a non-empty name, got {name!r}")
        for budget_key, tokens in (budgets or {}).items():
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                raise ValueError(f"RaySpendLimit budget {budget_key!r} must be an int >= 0")
        self.name = name
        self.budgets = dict(budgets or {})
        self.default_budget = default_budget
        self.key = key or _account_key
        self.ledger_path = os.path.abspath(os.fspath(ledger_path))
        self.namespace = namespace
        self._handle: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_handle"] = None  # a handle is looked up again where the limit runs
        return state

    def _actor(self) -> Any:
        if self._handle is None:
            self._handle = self._create()
        return self._handle

    def _create(self) -> Any:
        return (
            _ledger_class()
            .options(
                name=f"dexspend:{self.name}",
                namespace=self.namespace,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=-1,
                max_task_retries=-1,
                num_cpus=0,
            )
            .remote(self.ledger_path, self.name)
        )

    async def reserve(self, request: ModelSpendRequest) -> ModelSpendDecision:
        key = self.key(request)
        budget = self.budgets.get(key, self.default_budget)
        if budget is None:
            return ModelSpendDecision.allow()
        spent: int = await self._actor().spent.remote(key)
        if spent >= budget:
            return ModelSpendDecision.refuse(
                f"budget {key!r} of {budget} tokens is spent ({spent} used)"
            )
        return ModelSpendDecision.allow()

    async def record(self, request: ModelSpendRequest, usage: AgentUsage) -> None:
        tokens = spent_tokens(usage)
        if tokens:
            await self._actor().add.remote(self.key(request), tokens)

    async def spent(self, key: str) -> int:
        """Tokens ``key`` has spent so far."""
        count: int = await self._actor().spent.remote(key)
        return count


def _account_key(request: ModelSpendRequest) -> str:
    account = request.session_settings.get("account")
    return str(account) if account is not None else "default"


class _SpendLedger:
    """The actor behind ``RaySpendLimit``: counts per key, persisted in SQLite."""

    def __init__(self, path: str, name: str) -> None:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._db = sqlite3.connect(path)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS spend (ledger TEXT, key TEXT, tokens INTEGER, "
            "PRIMARY KEY (ledger, key))"
        )
        self._db.commit()
        self._name = name
        self._counts = {
            str(k): int(t)
            for k, t in self._db.execute("SELECT key, tokens FROM spend WHERE ledger=?", (name,))
        }

    def spent(self, key: str) -> int:
        return self._counts.get(key, 0)

    def add(self, key: str, tokens: int) -> int:
        total = self._counts.get(key, 0) + int(tokens)
        self._db.execute("INSERT OR REPLACE INTO spend VALUES (?,?,?)", (self._name, key, total))
        self._db.commit()
        self._counts[key] = total
        return total

    def pid(self) -> int:
        return os.getpid()


_ledger: Any = None


def _ledger_class() -> Any:
    global _ledger
    if _ledger is None:
        import ray

        _ledger = ray.remote(_SpendLedger)
    return _ledger
