"""The spec's Worker child on Ray: a driver process that owns a namespace's hosts.

A Dex Worker holds its Flows' handlers in one process, so killing it stops them
all and a new Worker picks their work up. Here runs live in host actors, which
are detached by default and outlive every driver. :func:`run_agent_worker`
starts them instead as this process's own actors
(``FlowEngine.start(worker_hosts="own")``): hosts, the executors they start and
the scheduler end when this process ends, whoever kills it, and a replacement
started the same way resumes their runs from the store.

``AgentTestStack.start_worker()`` starts the child (``python -m <module>``) in a
process group of its own, passing what it must join through the file named by
``DEX_AGENTS_RAY_WORKER_CONFIG``: the test's Ray address, namespace, store and
engine options.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dex import Flow

from dex_agents_ray.engine import FlowEngine, StoreConfig

__all__ = ["WORKER_CONFIG_ENV", "AgentWorker", "WorkerConfig", "run_agent_worker"]

WORKER_CONFIG_ENV = "DEX_AGENTS_RAY_WORKER_CONFIG"
"""The environment variable naming a Worker child's configuration file."""


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """What a Worker child joins (written by the stack, read by the child)."""

    ray_address: str
    """The GCS address of the test's Ray."""
    namespace: str
    """The stack's Ray namespace."""
    store: str | Path | StoreConfig
    """The stack's store."""
    ready_path: str
    """The file the child writes once its hosts answer."""
    flow_types: tuple[str, ...]
    """The stack's Flow types; the child must serve every one."""
    env_vars: dict[str, str] = field(default_factory=dict)
    """``worker_env``: set in the child and in every actor it starts."""
    engine_options: dict[str, Any] = field(default_factory=dict)
    """``FlowEngine.start`` options of the stack (its resolved placement included)."""


def run_agent_worker(flows: Sequence[Flow[Any]]) -> None:
    """Serve ``flows`` in this process until it is killed: the Worker child.

    Call it from the ``__main__`` block of the module an ``AgentTestStack`` was
    given (``AgentTestStack(tmp_path, [flow], "tests.my_worker")``); the stack's
    ``start_worker()`` runs that module. The process joins the test's Ray and
    starts the namespace's hosts as its own actors, so a SIGKILL of it ends
    them, their executors and the scheduler, and the runs wait in the store for
    the next worker.

    Raises:
        RuntimeError: Not started by ``AgentTestStack.start_worker()``.
        ValueError: ``flows`` lacks a Flow type the stack registered.
    """
    path = os.environ.get(WORKER_CONFIG_ENV)
    if not path:
        raise RuntimeError(
            f"run_agent_worker runs in the Worker child that AgentTestStack.start_worker() "
            f"starts; {WORKER_CONFIG_ENV} is not set"
        )
    from ray import cloudpickle

    config: WorkerConfig = cloudpickle.loads(Path(path).read_bytes())
    flows = list(flows)
    served = {flow.get_flow_type() for flow in flows}
    missing = [flow_type for flow_type in config.flow_types if flow_type not in served]
    if missing:
        raise ValueError(
            f"run_agent_worker: the stack's Flow types {missing} are not among the "
            f"worker's flows {sorted(served)}"
        )
    asyncio.run(_serve(flows, config))


async def _serve(flows: list[Flow[Any]], config: WorkerConfig) -> None:
    import ray

    ray.init(
        address=config.ray_address,
        namespace=config.namespace,
        runtime_env={"env_vars": dict(config.env_vars)} if config.env_vars else None,
        log_to_driver=False,
    )
    await FlowEngine.start(
        flows,
        store=config.store,
        namespace=config.namespace,
        worker_hosts="own",
        **config.engine_options,
    )
    ready = Path(config.ready_path)
    partial = ready.with_name(ready.name + ".partial")
    partial.write_text(str(os.getpid()), encoding="utf-8")
    partial.rename(ready)  # the stack never reads a half-written file
    await asyncio.Event().wait()  # serve until killed, as a Worker does


class AgentWorker:
    """A running Worker child; ``start_worker()`` returns it.

    ``kill()`` SIGKILLs its process group at once, the spec's way to crash a
    Worker at an exact moment (a gate); its hosts, executors and scheduler end
    with it, and ``await stack.start_worker()`` starts a replacement.
    """

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path
        """Where the child's stdout and stderr go."""
        self.killed = False
        """Whether :meth:`kill` was called."""

    def __repr__(self) -> str:
        return f"AgentWorker(pid={self.pid}, running={self.is_running()})"

    @property
    def pid(self) -> int:
        """The child's PID (also its process group ID)."""
        return self.process.pid

    def is_running(self) -> bool:
        """Whether the child has not exited yet."""
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the child's process group now; a no-op once it has exited."""
        self.killed = True
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def wait(self) -> int:
        """Wait until the child has exited; returns its exit status."""
        return await asyncio.to_thread(self.process.wait)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the child's output (for error messages)."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def worker_environment(config_path: Path, env_vars: Mapping[str, str]) -> dict[str, str]:
    """The child's environment: this process's, ``worker_env``, and the config file."""
    return {**os.environ, **env_vars, WORKER_CONFIG_ENV: str(config_path)}
