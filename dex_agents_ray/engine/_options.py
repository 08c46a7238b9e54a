"""Engine-side option and value types that extend the Dex SDK's."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from dex import RecoveryErrorInfo, StepOptions

__all__ = [
    "EngineRecoveryErrorInfo",
    "ExecutorPoolOptions",
    "RayTaskOptions",
    "RemoteExecution",
    "RemoteStepOptions",
    "StepAttemptProgress",
]

DEFAULT_IO_CONCURRENCY = 1000
"""Calls one pooled executor runs at once for a light shape (see ``RayTaskOptions``).
Measured at 500 agent sessions on 2 cores (1,500 no-op tool calls at once): with 100,
the pool started 8 executors and ran 368-385 steps/s; with 1,000, 1-2 executors and
556-557 (``benchmarks/agent_loop.py``). An executor is one process and one core at
most; more of them add processes, not throughput, unless calls need the slots."""


class RemoteExecution(StrEnum):
    """Where a remote Step's attempts run.

    ``POOL`` (the default): on long-lived executor actors of the Step's resource
    shape, many calls per process; an attempt costs two actor calls (measured
    in ``benchmarks/agent_loop.py``). ``TASK``: each attempt is its own Ray task,
    in a task worker process of its own while it runs; a Step timeout kills that
    process. Choose ``TASK`` for code that must not share a process (it blocks
    its event loop, leaks memory, or must be killable mid-call).
    """

    POOL = "pool"
    TASK = "task"


class StepAttemptProgress(StrEnum):
    """How far the attempts of a failed Step execution got.

    ``NOT_STARTED``: no attempt ever reached user code, so the Step's effects
    cannot have happened. ``NOT_COMPLETED``: some attempt reached user code and
    did not complete, so its effects may have happened.
    """

    UNSPECIFIED = "unspecified"
    NOT_STARTED = "not_started"
    NOT_COMPLETED = "not_completed"


@dataclass(frozen=True)
class EngineRecoveryErrorInfo(RecoveryErrorInfo):
    """``context.recovery_error`` on this engine: the SDK's fields plus progress.

    Attributes:
        attempt_progress: Whether any attempt of the failed execution reached
            user code (``NOT_COMPLETED``) or none did (``NOT_STARTED``).
    """

    attempt_progress: StepAttemptProgress = StepAttemptProgress.UNSPECIFIED


@dataclass(frozen=True, kw_only=True)
class RayTaskOptions:
    """Ray options for a Step that runs as a Ray task.

    The engine owns attempts, so Ray's own task retries are always off
    (``max_retries=0``) whatever is set here.
    """

    num_cpus: float = 0.1
    """CPUs reserved per task. The default fits I/O-bound tools: ``0`` would
    start a worker process per concurrent task, ``1`` caps concurrency at the
    node's CPU count."""
    num_gpus: float = 0.0
    """GPUs reserved per task."""
    memory: int | None = None
    """Bytes of memory reserved per task; ``None`` reserves none."""
    resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources, e.g. ``{"browser": 1}``."""
    runtime_env: dict[str, Any] | None = None
    """A Ray runtime environment for the task; ``None`` inherits the job's."""
    execution: RemoteExecution = RemoteExecution.POOL
    """Pooled executor actors (the default) or one Ray task per attempt."""
    max_concurrency: int | None = None
    """Pooled execution: calls one executor runs at once. The executor reserves
    the shape's resources (``num_cpus``, ``num_gpus``, ``memory``,
    ``resources``) once, as a Ray task of that shape would, and its calls share
    them. ``None``: 1 for a shape that asks for a GPU, a whole CPU or more,
    memory or a custom resource (each call then holds the reservation alone,
    as a task does), else ``DEFAULT_IO_CONCURRENCY`` (1,000: I/O-bound tools,
    each a coroutine; a sync tool gets a thread of the executor's own, one per
    slot; where the pool caps a light shape's executors by the cluster's CPUs,
    each gets a multiple of it, see ``ExecutorPoolOptions.max_executors``).
    Unused with ``TASK``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "execution", RemoteExecution(self.execution))
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(
                f"RayTaskOptions.max_concurrency must be >= 1, got {self.max_concurrency}"
            )
        if self.num_cpus < 0:
            raise ValueError(f"RayTaskOptions.num_cpus must be >= 0, got {self.num_cpus}")
        if self.num_gpus < 0:
            raise ValueError(f"RayTaskOptions.num_gpus must be >= 0, got {self.num_gpus}")
        if self.memory is not None and self.memory <= 0:
            raise ValueError(f"RayTaskOptions.memory must be positive, got {self.memory}")
        for name, amount in self.resources.items():
            if amount < 0:
                raise ValueError(f"RayTaskOptions.resources[{name!r}] must be >= 0")

    def to_json(self) -> str:
        """Encode for the store."""
        return json.dumps(
            {
                "num_cpus": self.num_cpus,
                "num_gpus": self.num_gpus,
                "memory": self.memory,
                "resources": self.resources,
                "runtime_env": self.runtime_env,
                "execution": self.execution.value,
                "max_concurrency": self.max_concurrency,
            },
            sort_keys=True,
        )

    @staticmethod
    def from_json(text: str) -> RayTaskOptions:
        """Decode what :meth:`to_json` wrote."""
        data = json.loads(text)
        return RayTaskOptions(
            num_cpus=float(data["num_cpus"]),
            num_gpus=float(data["num_gpus"]),
            memory=data["memory"],
            resources=dict(data["resources"]),
            runtime_env=data["runtime_env"],
            # Records written before pooled execution existed ran as tasks.
            execution=RemoteExecution(data.get("execution", RemoteExecution.TASK)),
            max_concurrency=data.get("max_concurrency"),
        )

    def executor_concurrency(self) -> int:
        """Calls one pooled executor of this shape runs at once."""
        if self.max_concurrency is not None:
            return self.max_concurrency
        heavy = self.num_gpus > 0 or self.num_cpus >= 1 or self.memory is not None or self.resources
        return 1 if heavy else DEFAULT_IO_CONCURRENCY

    def shape_key(self) -> str:
        """A short stable name of the executor shape (the pool's part of actor names)."""
        return hashlib.sha256(self.to_json().encode("utf-8")).hexdigest()[:12]

    def executor_actor_options(self) -> dict[str, Any]:
        """Ray actor options of one pooled executor: the shape's reservation, once."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory is not None:
            options["memory"] = self.memory
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.runtime_env is not None:
            options["runtime_env"] = self.runtime_env
        return options

    def ray_options(self) -> dict[str, Any]:
        """The keyword arguments for ``ray.remote(...).options``."""
        options: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "num_gpus": self.num_gpus,
            "max_retries": 0,
            "retry_exceptions": False,
        }
        if self.memory is not None:
            options["memory"] = self.memory
        if self.resources:
            options["resources"] = dict(self.resources)
        if self.runtime_env is not None:
            options["runtime_env"] = self.runtime_env
        return options


@dataclass(frozen=True)
class RemoteStepOptions(StepOptions):
    """``StepOptions`` that also run the Step's handlers on Ray (pooled executors
    by default, or a Ray task per attempt; see :class:`RayTaskOptions`).

    Return it from ``Step.get_step_options()`` to run every execution of the
    Step remotely, or pass it as one movement's options
    (``StepMovement.of(Step, input, options=RemoteStepOptions(...))``) to run
    only that execution remotely. All SDK fields keep their meaning.

    Attributes:
        ray: The task's Ray options (CPUs, GPUs, memory, resources, runtime_env).
    """

    ray: RayTaskOptions = field(default_factory=RayTaskOptions)


@dataclass(frozen=True, kw_only=True)
class RetentionOptions:
    """What the engine keeps of a run's past, so a run that lives for years keeps
    bounded state (``FlowEngine.start(retention=...)``).

    Active executions, completions (the run's result) and Stream heads are always
    kept. Of the finished Step executions, the newest ``keep_finished_executions``
    per run are kept with their ``read_step_history`` entries; older ones and
    their history are deleted. Of the remembered RPC responses (request-ID
    dedupe), the newest ``keep_rpc_requests`` per run are kept: a client retry
    with an older request ID runs the RPC again. Pruning rides in a run's commit
    once every ``prune_every_commits`` commits of its host. ``None`` keeps all.
    """

    keep_finished_executions: int | None = 2000
    """Finished Step executions (and their history) kept per run."""
    keep_rpc_requests: int | None = 1000
    """Remembered RPC responses kept per run."""
    prune_every_commits: int = 200
    """How often (in a host's commits of the run) a commit also prunes."""

    def __post_init__(self) -> None:
        for name in ("keep_finished_executions", "keep_rpc_requests"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(f"RetentionOptions.{name} must be None or an int >= 1")
        if self.prune_every_commits < 1:
            raise ValueError("RetentionOptions.prune_every_commits must be >= 1")


@dataclass(frozen=True, kw_only=True)
class ExecutorPoolOptions:
    """How the engine scales the executor actors of each resource shape.

    Executors are detached, named actors of the engine's namespace
    (``dexexec:<shape>:<i>``), spread over the nodes that have the shape's
    resources. A host sends a call to the executor it has the fewest calls on;
    it starts another executor (up to ``max_executors``) when every executor it
    knows reports calls waiting for a slot. The first call of a shape starts
    ``min_executors`` of them at once, so that much capacity is warm before a
    burst needs it. Calls past every slot wait in the
    executor, and that wait counts against neither the Step's timeout nor its
    heartbeat timeout: both start when the call acknowledges its start. Ray
    restarts an executor that dies; its in-flight attempts fail (``NOT_STARTED``
    before the acknowledgement, ``NOT_COMPLETED`` after). An executor past the
    first ``min_executors`` that has run nothing for ``executor_idle_timeout``
    drains and exits; the rest live until ``FlowEngine.stop_hosts``.
    """

    min_executors: int = 1
    """Executors per shape started together by the first call of that shape
    (each host starts the same named ones; they live until ``stop_hosts``)."""
    max_executors: int = 8
    """Most executors per shape. A light shape (no ``RayTaskOptions.max_concurrency``)
    has at most one per CPU of the cluster, with the slots of ``max_executors``
    spread over them."""
    orphan_check: timedelta = timedelta(seconds=2)
    """How often an executor asks the hosts of its running calls whether each
    attempt is still theirs; a call whose host died or moved on is cancelled."""
    early_ack_delay: timedelta = timedelta(milliseconds=25)
    """How long an attempt that starts early (one that is not its Step's last)
    runs before its executor acknowledges the start to the host; one that ends
    sooner sends no acknowledgement (its reply stands for it). Its timeouts
    start at the acknowledgement, so they start at most this much late."""
    executor_idle_timeout: timedelta | None = timedelta(minutes=5)
    """How long an executor above ``min_executors`` may run nothing before it
    drains and exits (``None``: never). A draining executor refuses new calls
    without starting them and a host sends them elsewhere, so no attempt is
    spent; the pool grows again under load."""
    local_channel: bool = True
    """Send calls to an executor of the host's own node by a Unix socket (about
    0.1 ms there and back, where a Ray actor call takes over 1 ms) once the first
    call through Ray has answered; ``False``: every call goes through Ray."""

    def __post_init__(self) -> None:
        if not isinstance(self.local_channel, bool):
            raise TypeError(
                "ExecutorPoolOptions.local_channel must be a bool, "
                f"got {type(self.local_channel).__name__}"
            )
        if self.max_executors < 1:
            raise ValueError(
                f"ExecutorPoolOptions.max_executors must be >= 1, got {self.max_executors}"
            )
        if not 1 <= self.min_executors <= self.max_executors:
            raise ValueError(
                "ExecutorPoolOptions.min_executors must be between 1 and max_executors "
                f"({self.max_executors}), got {self.min_executors}"
            )
        for name in ("orphan_check", "early_ack_delay"):
            value = getattr(self, name)
            if not isinstance(value, timedelta):
                raise TypeError(
                    f"ExecutorPoolOptions.{name} must be a timedelta, got {type(value).__name__}"
                )
        if self.orphan_check <= timedelta(0):
            raise ValueError(
                f"ExecutorPoolOptions.orphan_check must be positive, got {self.orphan_check}"
            )
        if self.early_ack_delay < timedelta(0):
            raise ValueError(
                "ExecutorPoolOptions.early_ack_delay must not be negative, "
                f"got {self.early_ack_delay}"
            )
        idle = self.executor_idle_timeout
        if idle is not None and not isinstance(idle, timedelta):
            raise TypeError(
                "ExecutorPoolOptions.executor_idle_timeout must be a timedelta or None, "
                f"got {type(idle).__name__}"
            )
        if idle is not None and idle <= timedelta(0):
            raise ValueError(
                f"ExecutorPoolOptions.executor_idle_timeout must be positive, got {idle}"
            )
